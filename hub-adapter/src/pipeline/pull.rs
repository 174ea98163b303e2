//! The pull pipeline: mirror to originals in the HF cache or a folder.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use brevis_core::FileProgress;
use brevis_core::ProgressSink;

use crate::cache::RepoCache;
use crate::client::{Expect, HubClient, RepoFile};
use crate::error::{HubError, Result};
use crate::hashing::hash_file;
use crate::manifest::{FileEntry, MANIFEST_NAME, Manifest};
use crate::paths::{
    check_globs, check_repo_id, check_repo_path, check_revision, is_commit_id, selected,
};

use super::download::{by_stored_file, download_and_run, fetch_manifest, run_size};
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
    let info = client.repo_info(&opts.repo, &opts.revision).await?;
    let work_name = format!("pull-{}-{}", safe_name(&opts.repo), &info.sha[..12]);
    let _lock = lock_work(&opts.work_dir, &work_name, &opts.notes).await?;
    let work = opts.work_dir.join(&work_name);
    std::fs::create_dir_all(&work).map_err(|e| HubError::io(&work, e))?;
    let m = fetch_manifest(client, &opts.repo, &info.sha, &work)
        .await?
        .ok_or_else(|| HubError::Manifest {
            repo: opts.repo.clone(),
            reason: format!("no {MANIFEST_NAME}: not a Brevis mirror"),
        })?;
    let tree = client.list_files(&opts.repo, &info.sha).await?;
    let chosen: Vec<&FileEntry> = m
        .files
        .iter()
        .filter(|f| selected(&f.path, &opts.include, &opts.exclude))
        .collect();
    // Filters that match nothing are a mistake: restoring nothing and still
    // writing the ref would look like a successful pull.
    if chosen.is_empty() {
        return refuse(
            &work,
            nothing_selected(&opts.repo, &opts.include, &opts.exclude),
        );
    }
    let cache = RepoCache::new(&opts.cache_dir, &m.source.repo)?;
    let place = Place {
        local_dir: opts.local_dir.as_deref(),
        cache: &cache,
    };
    // The manifest against the source itself, before anything is written.
    let source = opts.source.as_ref().unwrap_or(client);
    let source_checked = check_against_source(source, opts, &m, &chosen, &work).await?;
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
    let kept = match opts.local_dir {
        Some(_) => HashSet::new(),
        None => cached_snapshot(opts, &cache, &m, &chosen, &work).await?,
    };
    let (reused, need) = in_place(opts, &chosen, &kept, &place).await?;
    report.reused = reused;
    let dl = plan_downloads(opts, &need, &tree, &work).await?;
    report.downloaded_bytes =
        download_and_restore(client, opts, &info.sha, &need, &dl, &place, &work).await?;
    if opts.local_dir.is_none() {
        for f in chosen.iter().filter(|f| !kept.contains(f.path.as_str())) {
            clean_stale_temps(&cache.snapshot_path(&m.source.commit, &f.path)?);
            cache.link(&m.source.commit, &f.path, f.etag())?;
        }
        // (Refs follow branches, as `huggingface_hub` writes them: a pull of
        // the mirror at a commit id moves no ref.)
        if !is_commit_id(&opts.revision) {
            set_ref(source, opts, &cache, &m, source_checked).await?;
        }
    }
    (opts.notes)(&format!(
        "restored {} file(s) of {}@{} into {}",
        report.files,
        m.source.repo,
        &m.source.commit[..12],
        report.path.display()
    ));
    let _ = std::fs::remove_dir_all(&work);
    Ok(report)
}

/// A refusal: it leaves no work folder behind (a failed download keeps
/// it, to be resumed).
fn refuse<T>(work: &Path, e: HubError) -> Result<T> {
    let _ = std::fs::remove_dir_all(work);
    Err(e)
}

/// Where restored files go: a plain folder, else the HF cache's blobs.
struct Place<'a> {
    local_dir: Option<&'a Path>,
    cache: &'a RepoCache,
}

impl Place<'_> {
    fn path(&self, f: &FileEntry) -> Result<PathBuf> {
        match self.local_dir {
            Some(d) => Ok(d.join(check_repo_path(&f.path)?)),
            None => self.cache.blob_path(f.etag()),
        }
    }
}

/// Check the manifest's claims on `chosen` against the source repo on the
/// endpoint `source`; whether it was read there. A mirror that does not
/// restore its source's commit is refused, and so is an unread source
/// unless the pull writes a plain folder or trusts the mirror.
async fn check_against_source(
    source: &HubClient,
    opts: &PullOptions,
    m: &Manifest,
    chosen: &[&FileEntry],
    work: &Path,
) -> Result<bool> {
    let checked = match check_source(source, m, chosen, &opts.repo).await {
        Ok(c) => c,
        Err(e) => return refuse(work, e),
    };
    if let Some(reason) = checked.refusal(m) {
        return refuse(
            work,
            HubError::Manifest {
                repo: opts.repo.clone(),
                reason: format!("{reason}, and nothing was written"),
            },
        );
    }
    match &checked {
        SourceCheck::Unread(why) if opts.local_dir.is_none() && !opts.trust_mirror => refuse(
            work,
            HubError::SourceUnchecked {
                mirror: opts.repo.clone(),
                endpoint: source.endpoint().to_owned(),
                source_repo: m.source.repo.clone(),
                commit: m.source.commit[..12].to_owned(),
                why: why.clone(),
            },
        ),
        SourceCheck::Unread(why) => {
            (opts.notes)(&format!(
                "{}@{} cannot be read here ({why}): {}'s files are checked against its \
                 manifest only",
                m.source.repo,
                &m.source.commit[..12],
                opts.repo
            ));
            Ok(false)
        }
        _ => Ok(true),
    }
}

/// The chosen files the HF cache's snapshot of the source commit already
/// holds as regular files with the manifest's bytes (kept as they are).
///
/// A commit's files never change: a snapshot already in the cache that
/// names another blob for a file, or holds it as a regular file (a copy,
/// as `huggingface_hub` makes where there are no symlinks) with other
/// bytes, means this mirror (or the cache) is wrong, and its bytes must
/// not replace the cached ones: refused.
async fn cached_snapshot<'a>(
    opts: &PullOptions,
    cache: &RepoCache,
    m: &Manifest,
    chosen: &[&'a FileEntry],
    work: &Path,
) -> Result<HashSet<&'a str>> {
    let mut kept = HashSet::new();
    for f in chosen {
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
            let snapshot = cache.root().join("snapshots").join(&m.source.commit);
            return refuse(
                work,
                HubError::Manifest {
                    repo: opts.repo.clone(),
                    reason: format!(
                        "the HF cache already holds {}@{} with {} {held} ({}), but this mirror \
                         restores it {restored}; a commit's files never change, so one of them is \
                         wrong (remove {} to replace the cached snapshot)",
                        m.source.repo,
                        m.source.commit,
                        f.path,
                        p.display(),
                        snapshot.display()
                    ),
                },
            );
        }
    }
    Ok(kept)
}

/// How many chosen files are already in place (kept in the snapshot, or
/// at their place with the manifest's identity), and those that are not.
async fn in_place<'a>(
    opts: &PullOptions,
    chosen: &[&'a FileEntry],
    kept: &HashSet<&str>,
    place: &Place<'_>,
) -> Result<(usize, Vec<&'a FileEntry>)> {
    let (mut reused, mut need) = (0, Vec::new());
    for f in chosen {
        if kept.contains(f.path.as_str()) {
            reused += 1;
            continue;
        }
        let p = place.path(f)?;
        let ok = if std::fs::metadata(&p).is_ok_and(|x| x.is_file() && x.len() == f.size) {
            let (p2, git) = (p.clone(), !f.lfs);
            let h = blocking(move || hash_file(&p2, git)).await?;
            check_identity(&opts.repo, f, &h).is_ok()
        } else {
            false
        };
        if ok {
            reused += 1;
        } else {
            need.push(*f);
        }
    }
    Ok((reused, need))
}

/// The stored files to download for `need`, each once, into the work
/// folder's `dl/`: all but those a complete download of an interrupted run
/// left there with the Hub's identity.
async fn plan_downloads(
    opts: &PullOptions,
    need: &[&FileEntry],
    tree: &[RepoFile],
    work: &Path,
) -> Result<Vec<(String, PathBuf, Expect)>> {
    let remote: HashMap<&str, &RepoFile> = tree.iter().map(|f| (f.path.as_str(), f)).collect();
    let mut dl = Vec::new();
    let mut seen = HashSet::new();
    for f in need {
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
    Ok(dl)
}

/// Download `dl` and restore every file of `need` to its place; the bytes
/// downloaded. Each stored file's restores start as soon as it is here
/// (those left complete by an earlier run at once), one at a time, while
/// the others download: a sharded mirror decodes shard k while k + 1
/// arrives. One progress run: each download and each decode is a file of
/// it (a stored file copied as it is reports nothing).
async fn download_and_restore(
    client: &HubClient,
    opts: &PullOptions,
    sha: &str,
    need: &[&FileEntry],
    dl: &[(String, PathBuf, Expect)],
    place: &Place<'_>,
    work: &Path,
) -> Result<u64> {
    if !dl.is_empty() {
        (opts.notes)(&format!(
            "downloading {} file(s) of {}",
            dl.len(),
            opts.repo
        ));
    }
    let (files_of, ready) = by_stored_file(need, dl);
    let restore_files = |archive: &str, progress: Arc<dyn ProgressSink>, threads: usize| {
        let jobs = files_of[archive]
            .iter()
            .map(|&i| {
                let f = need[i];
                let stored = work.join("dl").join(&f.archive);
                Ok((stored, place.path(f)?, (*f).clone()))
            })
            .collect::<Result<Vec<_>>>();
        let repo = opts.repo.clone();
        tokio::task::spawn_blocking(move || -> Result<()> {
            for (stored, dst, f) in jobs? {
                if let Some(parent) = dst.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| HubError::io(parent, e))?;
                }
                clean_stale_temps(&dst);
                let p = FileProgress::arc(&progress, f.path.as_str());
                restore(&stored, &dst, &f, threads, p, &repo)?;
            }
            Ok(())
        })
    };
    let (files, bytes) = run_size(dl, need.iter().copied());
    let run = &opts.progress;
    run.begin(&format!("pull {}", opts.repo), files, bytes);
    let mut downloaded = 0;
    let r = download_and_run(
        client,
        &opts.repo,
        sha,
        dl,
        ready,
        &opts.progress,
        opts.threads,
        |_, r| {
            downloaded += r?.bytes_on_wire;
            Ok(())
        },
        restore_files,
    )
    .await;
    run.end();
    r.map(|()| downloaded)
}

/// Set the cache's ref of the source's revision to the restored commit.
///
/// A ref names what the source's revision is now: it is set (or moved)
/// only where the endpoint says the source's revision is at this commit,
/// and one the cache has is moved to another commit only by a source that
/// was checked. An older mirror, or a source that cannot be read here,
/// leaves it alone: the restored commit loads by its id.
async fn set_ref(
    source: &HubClient,
    opts: &PullOptions,
    cache: &RepoCache,
    m: &Manifest,
    source_checked: bool,
) -> Result<()> {
    let now = source
        .repo_info(&m.source.repo, &m.source.revision)
        .await
        .map(|i| i.sha);
    let held = cache.get_ref(&m.source.revision)?;
    let moves = held.as_deref().is_some_and(|h| h != m.source.commit);
    let note = &opts.notes;
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
                Ok(sha) => format!("the source's {} is at {}", m.source.revision, &sha[..12]),
                Err(e) => format!(
                    "the source's {} cannot be read here ({e})",
                    m.source.revision
                ),
            }
        )),
    }
    Ok(())
}
