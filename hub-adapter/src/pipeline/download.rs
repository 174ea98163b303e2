//! Fetching a mirror's manifest, and downloads that hand each stored file to a job as it arrives.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use brevis_core::{NoProgress, ProgressSink};
use futures_util::StreamExt;

use crate::client::{Expect, HubClient};
use crate::error::{HubError, Result};
use crate::manifest::{FileEntry, MANIFEST_NAME, MAX_MANIFEST_LEN, Manifest};

pub(super) async fn fetch_manifest(
    client: &HubClient,
    repo: &str,
    commit: &str,
    work: &Path,
) -> Result<Option<Manifest>> {
    let dst = work.join(format!("manifest-{commit}.json"));
    match client
        .download_file(
            repo,
            commit,
            MANIFEST_NAME,
            &dst,
            &Expect::default(),
            &NoProgress,
        )
        .await
    {
        Ok(_) => {}
        Err(HubError::EntryNotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = std::fs::metadata(&dst)
        .map_err(|e| HubError::io(&dst, e))?
        .len();
    if len > MAX_MANIFEST_LEN {
        return Err(HubError::Manifest {
            repo: repo.into(),
            reason: "manifest too large".into(),
        });
    }
    let text = std::fs::read(&dst).map_err(|e| HubError::io(&dst, e))?;
    let _ = std::fs::remove_file(&dst);
    Manifest::from_json(&text, repo).map(Some)
}

/// The indices of `entries` by stored file, and the stored files not among
/// the downloads `dl` (already here, or not on the Hub), in the entries'
/// order: those are ready for [`download_and_run`]'s job at once.
pub(super) fn by_stored_file<'a>(
    entries: &[&'a FileEntry],
    dl: &[(String, PathBuf, Expect)],
) -> (
    HashMap<&'a str, Vec<usize>>,
    std::collections::VecDeque<&'a str>,
) {
    let downloading: std::collections::HashSet<&str> =
        dl.iter().map(|(a, _, _)| a.as_str()).collect();
    let mut files_of: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut ready = std::collections::VecDeque::new();
    for (i, f) in entries.iter().enumerate() {
        let v = files_of.entry(f.archive.as_str()).or_default();
        if v.is_empty() && !downloading.contains(f.archive.as_str()) {
            ready.push_back(f.archive.as_str());
        }
        v.push(i);
    }
    (files_of, ready)
}

/// Downloads `dl` (up to the client's concurrency) and runs `job` on the
/// blocking pool for each stored file as soon as it is here: those of
/// `ready` at once, each download as it ends, after `arrived` has seen its
/// outcome. Up to `threads` jobs (0: one a core) run at once, each given
/// its share of the threads (all of them when it is the only one to run):
/// a file's SHA-256 is serial, so several files at once keep the cores
/// busier. An error (from `arrived` or a job) stops everything: the
/// downloads in flight are given up (their partial files resume next
/// time), the running jobs are awaited, and the first error is returned.
/// Each download reports as a file of `progress`'s run, and each job is
/// given `progress` to report its files in; the run's `begin` and `end`
/// are the caller's.
#[allow(clippy::too_many_arguments)]
pub(super) async fn download_and_run<'a>(
    client: &HubClient,
    repo: &str,
    commit: &str,
    dl: &'a [(String, PathBuf, Expect)],
    mut ready: std::collections::VecDeque<&'a str>,
    progress: &Arc<dyn ProgressSink>,
    threads: usize,
    mut arrived: impl FnMut(&'a str, Result<crate::client::DownloadStats>) -> Result<()>,
    job: impl Fn(&'a str, Arc<dyn ProgressSink>, usize) -> tokio::task::JoinHandle<Result<()>>,
) -> Result<()> {
    use futures_util::stream::FuturesUnordered;
    let budget = super::at_once::thread_budget(threads);
    let mut downloads = Some(client.download_stream(repo, commit, dl, progress.clone()));
    let mut left = dl.len();
    let mut running = FuturesUnordered::new();
    let mut failed = None;
    loop {
        while running.len() < budget
            && failed.is_none()
            && let Some(a) = ready.pop_front()
        {
            // Alone (nothing else here to run): every thread, as `threads`
            // says; else a share.
            let share = match running.len() + ready.len() {
                0 => threads,
                others => (budget / (others + 1)).max(1),
            };
            running.push(job(a, progress.clone(), share));
        }
        tokio::select! {
            Some((i, r)) = async { downloads.as_mut().expect("guarded").next().await },
                if left > 0 && failed.is_none() =>
            {
                left -= 1;
                let archive = dl[i].0.as_str();
                match arrived(archive, r) {
                    Ok(()) => ready.push_back(archive),
                    Err(e) => failed = Some(e),
                }
            }
            Some(r) = running.next(), if !running.is_empty() => {
                let r = r
                    .map_err(|e| HubError::io("<worker>", std::io::Error::other(e.to_string())))
                    .and_then(|r| r);
                if let Err(e) = r {
                    failed.get_or_insert(e);
                }
            }
            else => break,
        }
        if failed.is_some() {
            // Given up now, not kept open while a running job ends.
            downloads = None;
        }
    }
    if failed.is_none() && left > 0 {
        failed = Some(HubError::protocol(
            repo,
            "download",
            "the downloads ended early",
        ));
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The size of a run that downloads `dl` and decodes `entries` (those of
/// them stored as archives, each by its original's bytes): its files and
/// bytes, as far as the Hub's tree and the manifest say.
pub(super) fn run_size<'e>(
    dl: &[(String, PathBuf, Expect)],
    entries: impl IntoIterator<Item = &'e FileEntry>,
) -> (usize, u64) {
    let (mut files, mut bytes) = (dl.len(), dl.iter().filter_map(|(_, _, e)| e.size).sum());
    for f in entries {
        if f.encoding == crate::manifest::Encoding::Brv {
            files += 1;
            bytes += f.size;
        }
    }
    (files, bytes)
}
