//! The verify pipeline: every stored file of a mirror decodes to its manifest hash.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use brevis_core::FileProgress;
use brevis_core::{NoProgress, ProgressSink};

use crate::client::{Expect, HubClient, RepoFile};
use crate::error::{HubError, Result};
use crate::hashing::hash_file;
use crate::manifest::{Encoding, FileEntry, MANIFEST_NAME, Manifest};
use crate::paths::check_repo_id;

use super::download::{by_stored_file, download_and_run, fetch_manifest, run_size};
use super::options::quiet_notes;
use super::report::{VerifyEntry, VerifyReport};
use super::restore::{check_identity, teed_hashes};
use super::safe_name;
use super::source_check::{SourceCheck, check_source};
use super::work::lock_work;

/// The verdict on one manifest entry whose stored file is (or should be)
/// in `folder`. Blocking. An error is one reading the stored file (not a
/// verdict). An archive read to the end whose bytes are not what it
/// records (a region's checksum, its SHA-256) is `corrupt`; one that
/// cannot be read (not an archive, truncated, a stream that no longer
/// decodes, a newer format) is `unreadable`: [`decode_status`].
fn verify_entry(
    folder: &Path,
    repo: &str,
    f: &FileEntry,
    threads: usize,
    progress: Arc<dyn ProgressSink>,
) -> Result<VerifyEntry> {
    let stored = folder.join(&f.archive);
    if !stored.is_file() {
        return Ok(missing_entry(f));
    }
    let mut e = VerifyEntry {
        status: "ok".into(),
        ..missing_entry(f)
    };
    let got = match f.encoding {
        Encoding::Identity => hash_file(&stored, !f.lfs),
        Encoding::Brv => {
            // The decoder's digest, and the blob id of a regular file.
            let mut w = crate::hashing::TeeHasher::new(std::io::sink(), f.size, false, !f.lfs);
            match brevis_core::decompress_to(
                &stored,
                &mut w,
                &brevis_core::DecompressOptions::default()
                    .threads(threads)
                    .progress(progress),
            ) {
                Ok(r) => Ok(teed_hashes(w.finish().1, Some(r.sha256))),
                Err(brevis_core::DecodeError::Io { path, source }) if path == stored => {
                    return Err(HubError::io(path, source));
                }
                Err(err) => {
                    e.status = decode_status(&err).into();
                    e.detail = Some(err.to_string());
                    return Ok(e);
                }
            }
        }
    };
    let h = got?;
    if let Err(err) = check_identity(repo, f, &h) {
        e.status = "mismatch".into();
        e.detail = Some(match err {
            HubError::Integrity {
                what,
                expected,
                actual,
                ..
            } => format!("{what}: expected {expected}, got {actual}"),
            other => other.to_string(),
        });
    }
    e.actual = Some(h.sha256_hex());
    Ok(e)
}

/// The status of a stored archive that did not decode, by the one rule
/// `verify` of local archives follows: `corrupt` (exit 1) when it was
/// read and does not match, `unreadable` (exit 2) when it could not be
/// read at all.
fn decode_status(e: &brevis_core::DecodeError) -> &'static str {
    use brevis_core::DecodeError as D;
    match e {
        D::Checksum { .. } | D::ShaMismatch { .. } => "corrupt",
        // Truncated, BadMagic, UnsupportedVersion, Corrupt, Limit, Io, ...
        _ => "unreadable",
    }
}

/// The row of an entry whose stored file is not there.
fn missing_entry(f: &FileEntry) -> VerifyEntry {
    VerifyEntry {
        path: f.path.clone(),
        archive: f.archive.clone(),
        status: "missing".into(),
        expected: f.sha256.clone(),
        actual: None,
        detail: None,
    }
}

/// Verify a mirror laid out in a local folder (one holding
/// `brevis.manifest.json` and the stored files). Blocking.
pub fn verify_local(folder: &Path, threads: usize) -> Result<VerifyReport> {
    let mpath = folder.join(MANIFEST_NAME);
    let text = std::fs::read(&mpath).map_err(|e| HubError::io(&mpath, e))?;
    let m = Manifest::from_json(&text, &folder.display().to_string())?;
    // Several files at once, each with a share of the threads.
    let files = super::each_file(
        &m.files,
        threads,
        |f| f.size,
        |f, threads| verify_entry(folder, &m.source.repo, f, threads, Arc::new(NoProgress)),
    )?;
    let ok = files.iter().all(|e| e.status == "ok");
    Ok(VerifyReport {
        target: folder.display().to_string(),
        source: m.source,
        files,
        ok,
        source_checked: false,
        source_unread: None,
    })
}

/// Verify a remote mirror: download its stored files into `work_dir` and
/// check them as [`verify_local`] does.
pub async fn verify_mirror(
    client: &HubClient,
    repo: &str,
    revision: &str,
    work_dir: &Path,
    threads: usize,
    progress: Arc<dyn ProgressSink>,
) -> Result<VerifyReport> {
    verify_mirror_against(client, client, repo, revision, work_dir, threads, progress).await
}

/// [`verify_mirror`], checking the manifest against the source repo on the
/// endpoint of `source`.
pub async fn verify_mirror_against(
    client: &HubClient,
    source: &HubClient,
    repo: &str,
    revision: &str,
    work_dir: &Path,
    threads: usize,
    progress: Arc<dyn ProgressSink>,
) -> Result<VerifyReport> {
    check_repo_id(repo)?;
    let info = client.repo_info(repo, revision).await?;
    let work_name = format!("verify-{}-{}", safe_name(repo), &info.sha[..12]);
    let _lock = lock_work(work_dir, &work_name, &quiet_notes()).await?;
    let work = work_dir.join(&work_name);
    std::fs::create_dir_all(&work).map_err(|e| HubError::io(&work, e))?;
    // The work folder goes whatever happens.
    let r = verify_in(client, source, repo, &info.sha, &work, threads, progress).await;
    let _ = std::fs::remove_dir_all(&work);
    r
}

/// [`verify_mirror`] of `repo` at commit `sha`, in the work folder `work`.
async fn verify_in(
    client: &HubClient,
    source: &HubClient,
    repo: &str,
    sha: &str,
    work: &Path,
    threads: usize,
    progress: Arc<dyn ProgressSink>,
) -> Result<VerifyReport> {
    let m = fetch_manifest(client, repo, sha, work)
        .await?
        .ok_or_else(|| HubError::Manifest {
            repo: repo.into(),
            reason: format!("no {MANIFEST_NAME}: not a Brevis mirror"),
        })?;
    let all: Vec<&FileEntry> = m.files.iter().collect();
    let checked = check_source(source, &m, &all, repo).await?;
    let tree = client.list_files(repo, sha).await?;
    let remote: BTreeMap<&str, &RepoFile> = tree.iter().map(|f| (f.path.as_str(), f)).collect();
    let target = Target {
        client,
        repo,
        sha,
        work,
    };
    let (files, bad_download) = check_stored(&target, &m, &remote, threads, &progress).await?;
    let mut rep = VerifyReport {
        target: repo.to_string(),
        source: m.source.clone(),
        files,
        ok: false,
        source_checked: false,
        source_unread: None,
    };
    apply_source_check(&mut rep, checked);
    for e in &mut rep.files {
        if let Some((status, d)) = bad_download.get(&e.archive) {
            e.status = (*status).into();
            e.detail = Some(d.clone());
        } else if e.status == "missing" {
            e.detail = Some(format!("{} is not in {repo}", e.archive));
        }
    }
    rep.ok = rep.files.iter().all(|e| e.status == "ok");
    Ok(rep)
}

/// The mirror checked: its repo at a commit, and the work folder its
/// stored files are downloaded into.
struct Target<'a> {
    client: &'a HubClient,
    repo: &'a str,
    sha: &'a str,
    work: &'a Path,
}

/// The stored files of `m` on the Hub (`remote`), each once: two entries
/// naming one stored file download it once (two downloads into one path
/// would trip over each other).
fn stored_downloads(
    m: &Manifest,
    remote: &BTreeMap<&str, &RepoFile>,
    work: &Path,
) -> Vec<(String, PathBuf, Expect)> {
    let mut dl = Vec::new();
    let mut seen = HashSet::new();
    for f in &m.files {
        if !seen.insert(f.archive.as_str()) {
            continue;
        }
        if let Some(r) = remote.get(f.archive.as_str()) {
            let expect = Expect {
                size: Some(r.size),
                sha256: r.lfs_sha256.clone(),
                git_oid: None,
            };
            dl.push((f.archive.clone(), work.join(&f.archive), expect));
        }
    }
    dl
}

/// Download the stored files of `m` and check each against its entries
/// as soon as it is here, while the others download: a verdict per entry,
/// and the stored files whose download failed, with the status and detail
/// their rows get.
///
/// A stored file that is not what the Hub's tree says (its LFS oid or
/// size) is a finding about that file, not a failure of the whole check.
/// One that could not be fetched at all is reported on its row too
/// (status `error`), so every file has a row whatever happened.
async fn check_stored(
    t: &Target<'_>,
    m: &Manifest,
    remote: &BTreeMap<&str, &RepoFile>,
    threads: usize,
    progress: &Arc<dyn ProgressSink>,
) -> Result<(Vec<VerifyEntry>, HashMap<String, (&'static str, String)>)> {
    let dl = stored_downloads(m, remote, t.work);
    let mut bad_download: HashMap<String, (&'static str, String)> = HashMap::new();
    let entries: Vec<&FileEntry> = m.files.iter().collect();
    let (files_of, ready) = by_stored_file(&entries, &dl);
    let verdicts = Arc::new(std::sync::Mutex::new(vec![None; entries.len()]));
    let check = |archive: &str, progress: Arc<dyn ProgressSink>, threads: usize| {
        let todo: Vec<(usize, FileEntry)> = files_of[archive]
            .iter()
            .map(|&i| (i, entries[i].clone()))
            .collect();
        let (folder, source, verdicts) = (
            t.work.to_path_buf(),
            m.source.repo.clone(),
            verdicts.clone(),
        );
        // A stored file the Hub does not hold is missing, whatever the work
        // folder holds under its name (a manifest may name another file's
        // partial download).
        let on_hub = remote.contains_key(archive);
        tokio::task::spawn_blocking(move || -> Result<()> {
            for (i, f) in todo {
                let v = if on_hub {
                    let p = FileProgress::arc(&progress, f.path.as_str());
                    verify_entry(&folder, &source, &f, threads, p)?
                } else {
                    missing_entry(&f)
                };
                verdicts.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(v);
            }
            Ok(())
        })
    };
    let on_hub = m
        .files
        .iter()
        .filter(|f| remote.contains_key(f.archive.as_str()));
    let (files, bytes) = run_size(&dl, on_hub);
    progress.begin(&format!("verify {}", t.repo), files, bytes);
    let r = download_and_run(
        t.client,
        t.repo,
        t.sha,
        &dl,
        ready,
        progress,
        threads,
        |archive, r| {
            match r {
                Ok(_) => {}
                Err(e @ HubError::Integrity { .. }) => {
                    bad_download.insert(archive.into(), ("mismatch", format!("stored file: {e}")));
                }
                Err(e) => {
                    bad_download.insert(archive.into(), ("error", e.to_string()));
                }
            }
            Ok(())
        },
        check,
    )
    .await;
    progress.end();
    r?;
    let files = std::mem::take(&mut *verdicts.lock().unwrap_or_else(|p| p.into_inner()))
        .into_iter()
        .collect::<Option<Vec<VerifyEntry>>>()
        .ok_or_else(|| HubError::protocol(t.repo, "verify", "a stored file was left unchecked"))?;
    Ok((files, bad_download))
}

/// Mark in `rep` what checking the manifest against the source found.
fn apply_source_check(rep: &mut VerifyReport, checked: SourceCheck) {
    let disagree = match checked {
        SourceCheck::Read(d) => {
            rep.source_checked = true;
            d
        }
        SourceCheck::Unread(why) => {
            rep.source_unread = Some(why);
            Vec::new()
        }
        // Every file: none restores a commit the source does not hold.
        SourceCheck::NoCommit => {
            rep.source_checked = true;
            let why = format!(
                "the source {} has no commit {}",
                rep.source.repo, rep.source.commit
            );
            for e in &mut rep.files {
                e.status = "mismatch".into();
                e.detail = Some(why.clone());
            }
            Vec::new()
        }
    };
    // A file the source holds otherwise is a mismatch whatever it decodes
    // to: the mirror does not restore the commit it names.
    for (path, claim, held) in disagree {
        if let Some(e) = rep.files.iter_mut().find(|e| e.path == path) {
            e.status = "mismatch".into();
            e.detail = Some(format!(
                "the manifest says {claim}, the source {}@{} holds {held}",
                rep.source.repo,
                &rep.source.commit[..12]
            ));
        }
    }
}
