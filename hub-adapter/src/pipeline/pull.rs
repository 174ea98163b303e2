//! The pull pipeline: mirror to originals in the HF cache or a folder.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use brevis_core::ProgressSink;

use crate::cache::RepoCache;
use crate::client::{Expect, HubClient, RepoFile};
use crate::error::{HubError, Result};
use crate::hashing::hash_file;
use crate::manifest::{FileEntry, MANIFEST_NAME};
use crate::paths::{
    check_globs, check_repo_id, check_repo_path, check_revision, is_commit_id, selected,
};

use super::download::{by_stored_file, download_and_run, fetch_manifest};
use super::options::PullOptions;
use super::report::PullReport;
use super::restore::{check_identity, restore};
use super::source_check::{SourceCheck, check_source};
use super::work::{clean_stale_temps, lock_work};
use super::{blocking, nothing_selected, safe_name};

/// Download a mirror, decode it, verify every file against the manifest, and
/// place the originals in the HF cache under the source repo and commit (or
/// in a plain folder). Nothing half-written is ever visible.
pub async fn pull(client: &HubClient, opts: &PullOptions) -> Result<PullReport> {
    check_repo_id(&opts.repo)?;
    check_revision(&opts.revision)?;
    check_globs(&opts.include, &opts.exclude)?;
    let note = &opts.notes;
    let info = client.repo_info(&opts.repo, &opts.revision).await?;
    let work_name = format!("pull-{}-{}", safe_name(&opts.repo), &info.sha[..12]);
    let _lock = lock_work(&opts.work_dir, &work_name, note).await?;
    let work = opts.work_dir.join(&work_name);
    std::fs::create_dir_all(&work).map_err(|e| HubError::io(&work, e))?;
    // A refusal leaves no work folder behind (a failed download keeps it,
    // to be resumed).
    let refuse = |e: HubError| -> Result<PullReport> {
        let _ = std::fs::remove_dir_all(&work);
        Err(e)
    };
    let m = fetch_manifest(client, &opts.repo, &info.sha, &work)
        .await?
        .ok_or_else(|| HubError::Manifest {
            repo: opts.repo.clone(),
            reason: format!("no {MANIFEST_NAME}: not a Brevis mirror"),
        })?;
    let tree = client.list_files(&opts.repo, &info.sha).await?;
    let remote: HashMap<&str, &RepoFile> = tree.iter().map(|f| (f.path.as_str(), f)).collect();
    let chosen: Vec<&FileEntry> = m
        .files
        .iter()
        .filter(|f| selected(&f.path, &opts.include, &opts.exclude))
        .collect();
    // Filters that match nothing are a mistake: restoring nothing and still
    // writing the ref would look like a successful pull.
    if chosen.is_empty() {
        return refuse(nothing_selected(&opts.repo, &opts.include, &opts.exclude));
    }
    let cache = RepoCache::new(&opts.cache_dir, &m.source.repo)?;
    let final_path = |f: &FileEntry| -> Result<PathBuf> {
        match &opts.local_dir {
            Some(d) => Ok(d.join(check_repo_path(&f.path)?)),
            None => cache.blob_path(f.etag()),
        }
    };
    // The manifest against the source itself, before anything is written.
    let source = opts.source.as_ref().unwrap_or(client);
    let checked = match check_source(source, &m, &chosen, &opts.repo).await {
        Ok(c) => c,
        Err(e) => return refuse(e),
    };
    if let Some(reason) = checked.refusal(&m) {
        return refuse(HubError::Manifest {
            repo: opts.repo.clone(),
            reason: format!("{reason}, and nothing was written"),
        });
    }
    let source_checked = match &checked {
        SourceCheck::Unread(why) if opts.local_dir.is_none() && !opts.trust_mirror => {
            return refuse(HubError::SourceUnchecked {
                mirror: opts.repo.clone(),
                endpoint: source.endpoint().to_owned(),
                source_repo: m.source.repo.clone(),
                commit: m.source.commit[..12].to_owned(),
                why: why.clone(),
            });
        }
        SourceCheck::Unread(why) => {
            note(&format!(
                "{}@{} cannot be read here ({why}): {}'s files are checked against its \
                 manifest only",
                m.source.repo,
                &m.source.commit[..12],
                opts.repo
            ));
            false
        }
        _ => true,
    };
    let mut report = PullReport {
        mirror_repo: opts.repo.clone(),
        mirror_commit: info.sha.clone(),
        source_repo: m.source.repo.clone(),
        source_commit: m.source.commit.clone(),
        files: chosen.len(),
        reused: 0,
        original_bytes: chosen.iter().map(|f| f.size).sum(),
        downloaded_bytes: 0,
        path: match &opts.local_dir {
            Some(d) => d.clone(),
            None => cache.root().join("snapshots").join(&m.source.commit),
        },
        source_checked,
    };

    // A commit's files never change: a snapshot already in the cache that
    // names another blob for a file, or holds it as a regular file (a copy,
    // as `huggingface_hub` makes where there are no symlinks) with other
    // bytes, means this mirror (or the cache) is wrong, and its bytes must
    // not replace the cached ones. A regular file with the manifest's bytes
    // is already in place: it is kept as it is.
    let mut kept = std::collections::HashSet::new();
    if opts.local_dir.is_none() {
        for f in &chosen {
            let p = cache.snapshot_path(&m.source.commit, &f.path)?;
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            let clash = if meta.file_type().is_symlink() {
                std::fs::read_link(&p)
                    .ok()
                    .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
                    .filter(|blob| !blob.eq_ignore_ascii_case(f.etag()))
                    .map(|blob| (format!("as blob {blob}"), format!("as blob {}", f.etag())))
            } else if !meta.is_file() {
                None
            } else if meta.len() != f.size {
                Some((
                    format!("as a regular file of {} bytes", meta.len()),
                    format!("with {} bytes", f.size),
                ))
            } else {
                let p2 = p.clone();
                let sha = blocking(move || hash_file(&p2, false)).await?.sha256_hex();
                if sha.eq_ignore_ascii_case(&f.sha256) {
                    kept.insert(f.path.as_str());
                    None
                } else {
                    Some((
                        format!("as a regular file with SHA-256 {sha}"),
                        format!("with SHA-256 {}", f.sha256),
                    ))
                }
            };
            if let Some((held, restored)) = clash {
                return refuse(HubError::Manifest {
                    repo: opts.repo.clone(),
                    reason: format!(
                        "the HF cache already holds {}@{} with {} {held} ({}), but this mirror \
                         restores it {restored}; a commit's files never change, so one of them is \
                         wrong (remove {} to replace the cached snapshot)",
                        m.source.repo,
                        m.source.commit,
                        f.path,
                        p.display(),
                        cache
                            .root()
                            .join("snapshots")
                            .join(&m.source.commit)
                            .display()
                    ),
                });
            }
        }
    }

    // What is already in place (and verified)?
    let mut need = Vec::new();
    for f in &chosen {
        if kept.contains(f.path.as_str()) {
            report.reused += 1;
            continue;
        }
        let p = final_path(f)?;
        let ok = if std::fs::metadata(&p).is_ok_and(|x| x.is_file() && x.len() == f.size) {
            let (p2, git) = (p.clone(), !f.lfs);
            let h = blocking(move || hash_file(&p2, git)).await?;
            check_identity(&opts.repo, f, &h).is_ok()
        } else {
            false
        };
        if ok {
            report.reused += 1;
        } else {
            need.push(*f);
        }
    }
    let mut dl = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for f in &need {
        if !seen.insert(f.archive.as_str()) {
            continue;
        }
        let r = remote
            .get(f.archive.as_str())
            .ok_or_else(|| HubError::EntryNotFound {
                repo: opts.repo.clone(),
                file: f.archive.clone(),
            })?;
        if r.size != f.archive_size {
            return Err(HubError::Manifest {
                repo: opts.repo.clone(),
                reason: format!(
                    "{} is {} bytes, the manifest says {}",
                    f.archive, r.size, f.archive_size
                ),
            });
        }
        let expect = Expect::of(r);
        let local = work.join("dl").join(&f.archive);
        // A complete download left by an interrupted run is kept if it checks.
        if std::fs::metadata(&local).is_ok_and(|m| m.is_file() && m.len() == r.size) {
            let (l2, git) = (local.clone(), expect.git_oid.is_some());
            let h = blocking(move || hash_file(&l2, git)).await?;
            if expect.matches(&h) {
                continue;
            }
            let _ = std::fs::remove_file(&local);
        }
        dl.push((f.archive.clone(), local, expect));
    }
    if !dl.is_empty() {
        note(&format!(
            "downloading {} file(s) of {}",
            dl.len(),
            opts.repo
        ));
    }
    // Each stored file's restores start as soon as it is here (those left
    // complete by an earlier run at once), one at a time, while the others
    // download: a sharded mirror decodes shard k while k + 1 arrives. The
    // download has the progress bar while it runs.
    let (files_of, ready) = by_stored_file(&need, &dl);
    let restore_files = |archive: &str, progress: Arc<dyn ProgressSink>| {
        let jobs = files_of[archive]
            .iter()
            .map(|&i| {
                let f = need[i];
                let stored = work.join("dl").join(&f.archive);
                Ok((stored, final_path(f)?, (*f).clone()))
            })
            .collect::<Result<Vec<_>>>();
        let (threads, repo) = (opts.threads, opts.repo.clone());
        tokio::task::spawn_blocking(move || -> Result<()> {
            for (stored, dst, f) in jobs? {
                if let Some(parent) = dst.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| HubError::io(parent, e))?;
                }
                clean_stale_temps(&dst);
                restore(&stored, &dst, &f, threads, progress.clone(), &repo)?;
            }
            Ok(())
        })
    };
    let downloaded = &mut report.downloaded_bytes;
    download_and_run(
        client,
        &opts.repo,
        &info.sha,
        &dl,
        ready,
        &opts.progress,
        |_, r| {
            *downloaded += r?.bytes_on_wire;
            Ok(())
        },
        restore_files,
    )
    .await?;
    if opts.local_dir.is_none() {
        for f in chosen.iter().filter(|f| !kept.contains(f.path.as_str())) {
            clean_stale_temps(&cache.snapshot_path(&m.source.commit, &f.path)?);
            cache.link(&m.source.commit, &f.path, f.etag())?;
        }
        // A ref names what the source's revision is now: it is set (or
        // moved) only where the endpoint says the source's revision is at
        // this commit, and one the cache has is moved to another commit
        // only by a source that was checked. An older mirror, or a source
        // that cannot be read here, leaves it alone: the restored commit
        // loads by its id. (Refs follow branches, as `huggingface_hub`
        // writes them: a pull of the mirror at a commit id moves no ref.)
        if !is_commit_id(&opts.revision) {
            let now = source
                .repo_info(&m.source.repo, &m.source.revision)
                .await
                .map(|i| i.sha);
            let held = cache.get_ref(&m.source.revision)?;
            let moves = held.as_deref().is_some_and(|h| h != m.source.commit);
            match now {
                Ok(sha) if sha == m.source.commit && (source_checked || !moves) => {
                    cache.set_ref(&m.source.revision, &m.source.commit)?;
                }
                Ok(sha) if sha == m.source.commit => note(&format!(
                    "refs/{} of {} stays at {}: the source could not be checked, so this pull \
                     does not move it to {} (load that commit by its id)",
                    m.source.revision,
                    m.source.repo,
                    held.as_deref().unwrap_or_default(),
                    m.source.commit
                )),
                other => note(&format!(
                    "refs/{} of {} is not set to {}: {} (load that commit by its id)",
                    m.source.revision,
                    m.source.repo,
                    &m.source.commit[..12],
                    match other {
                        Ok(sha) =>
                            format!("the source's {} is at {}", m.source.revision, &sha[..12]),
                        Err(e) => format!(
                            "the source's {} cannot be read here ({e})",
                            m.source.revision
                        ),
                    }
                )),
            }
        }
    }
    note(&format!(
        "restored {} file(s) of {}@{} into {}",
        report.files,
        m.source.repo,
        &m.source.commit[..12],
        report.path.display()
    ));
    let _ = std::fs::remove_dir_all(&work);
    Ok(report)
}
