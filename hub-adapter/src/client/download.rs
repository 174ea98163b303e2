//! Downloads: one file with `Range` resume across runs, and many at once.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use brevis_core::ProgressSink;
use futures_util::StreamExt as _;
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use tokio::io::AsyncWriteExt as _;

use crate::error::{HubError, Result};
use crate::hashing::{self, FileHashes, StreamHasher};
use crate::paths::{check_repo_id, check_repo_path, check_revision, encode};

use super::{DownloadStats, Expect, FileMetadata, HubClient, MAX_STALLS, check};

pub(super) fn content_range_start(h: &HeaderMap) -> Option<u64> {
    let v = h.get("content-range")?.to_str().ok()?;
    let rest = v.strip_prefix("bytes ")?;
    rest.split('-').next()?.parse().ok()
}

/// Check a downloaded `part` against `expect` (removing it when it is not
/// the file) and rename it to `dst`.
pub(crate) async fn finish_download(
    repo: &str,
    path: &str,
    part: &Path,
    dst: &Path,
    hashes: FileHashes,
    expect: &Expect,
) -> Result<FileHashes> {
    let bad = |what: &'static str, expected: &str, actual: &str| HubError::Integrity {
        repo: repo.into(),
        file: path.into(),
        what,
        expected: expected.into(),
        actual: actual.into(),
    };
    let differs = if let Some(s) = expect.size
        && s != hashes.size
    {
        Some(bad(
            "size",
            &format!("{s} bytes"),
            &format!("{} bytes", hashes.size),
        ))
    } else if let Some(want) = &expect.sha256
        && !want.eq_ignore_ascii_case(&hashes.sha256_hex())
    {
        Some(bad("SHA-256", want, &hashes.sha256_hex()))
    } else if let Some(want) = &expect.git_oid
        && !want.eq_ignore_ascii_case(hashes.git_oid.as_deref().unwrap_or_default())
    {
        Some(bad(
            "git blob id",
            want,
            hashes.git_oid.as_deref().unwrap_or_default(),
        ))
    } else {
        None
    };
    if let Some(e) = differs {
        let _ = tokio::fs::remove_file(part).await;
        return Err(e);
    }
    tokio::fs::rename(part, dst)
        .await
        .map_err(|e| HubError::io(dst, e))?;
    Ok(hashes)
}

/// `dst` with `.incomplete` appended (the name `huggingface_hub` uses too).
pub fn incomplete_path(dst: &Path) -> PathBuf {
    let mut s = dst.as_os_str().to_owned();
    s.push(".incomplete");
    PathBuf::from(s)
}

/// How a response body ended (see [`HubClient::receive`]).
pub(super) enum BodyEnd {
    /// The server ended it (whole or short: the caller counts).
    Done,
    /// The connection broke.
    Broke(reqwest::Error),
    /// No byte came for the stall timeout.
    Stalled,
    /// It held more bytes than there was room for.
    Overflow,
}

/// The partial file `dst.incomplete` of a single-stream download: how much
/// of it there is, and the hashes of what arrived in this call. The body
/// is hashed as it arrives when this call receives all of it (a partial
/// file left by an earlier run is read back instead; the blob id needs the
/// size first).
struct Partial<'a> {
    path: &'a Path,
    expect: &'a Expect,
    have: u64,
    hasher: Option<StreamHasher>,
}

impl<'a> Partial<'a> {
    /// What an earlier run left at `path`: nothing when it is longer than
    /// the expected size (it is removed).
    async fn find(path: &'a Path, expect: &'a Expect) -> Partial<'a> {
        let mut p = Partial {
            path,
            expect,
            have: tokio::fs::metadata(path).await.map_or(0, |m| m.len()),
            hasher: None,
        };
        if expect.size.is_some_and(|s| p.have > s) {
            p.discard().await;
        }
        p
    }

    /// Start over: the file is removed.
    async fn discard(&mut self) {
        self.have = 0;
        let _ = tokio::fs::remove_file(self.path).await;
    }

    /// The file opened for a body that continues it (`append`) or replaces
    /// it; a hasher is kept only while it has seen every byte.
    async fn open(&mut self, append: bool) -> Result<tokio::fs::File> {
        if !append {
            self.have = 0;
        }
        if self.have == 0 {
            let git = self.expect.git_oid.is_some();
            self.hasher = (!git || self.expect.size.is_some())
                .then(|| StreamHasher::new(self.expect.size.unwrap_or(0), git));
        }
        if self.hasher.as_ref().is_some_and(|h| h.len() != self.have) {
            self.hasher = None;
        }
        tokio::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(self.path)
            .await
            .map_err(|e| HubError::io(self.path, e))
    }

    /// `c` was written to the end of the file.
    fn add(&mut self, c: &[u8]) {
        if let Some(h) = &mut self.hasher {
            h.update(c);
        }
        self.have += c.len() as u64;
    }

    /// The hashes of the whole file: the running ones when they saw all of
    /// it, else read back.
    async fn hashes(self) -> Result<FileHashes> {
        match self.hasher {
            Some(h) if h.len() == self.have => Ok(h.finish()),
            _ => hashing::hash_file_async(self.path, self.expect.git_oid.is_some()).await,
        }
    }
}

impl HubClient {
    /// A HEAD of a file's resolve URL (not following a redirect to another
    /// host: its headers are the answer): the URL and the response.
    pub(super) async fn head_resolve(
        &self,
        repo: &str,
        revision: &str,
        path: &str,
    ) -> Result<(String, reqwest::Response)> {
        let url = self.resolve_url(repo, revision, path);
        let resp = self
            .send(repo, "file metadata", || {
                Ok(self
                    .request(Method::HEAD, &url)
                    .header("Accept-Encoding", "identity"))
            })
            .await?;
        Ok((url, resp))
    }

    pub(super) fn resolve_url(&self, repo: &str, revision: &str, path: &str) -> String {
        format!(
            "{}/{}/resolve/{}/{}",
            self.endpoint,
            repo,
            encode(revision, false),
            encode(path, true)
        )
    }

    /// `HEAD` on a file: commit, ETag and size.
    pub async fn file_metadata(
        &self,
        repo: &str,
        revision: &str,
        path: &str,
    ) -> Result<FileMetadata> {
        check_repo_id(repo)?;
        check_revision(revision)?;
        check_repo_path(path)?;
        let (_, resp) = self.head_resolve(repo, revision, path).await?;
        // A redirect to another host (the CDN) is the answer: its headers
        // describe the file, as on the Hub.
        let redirected = resp.status().is_redirection();
        let resp = if redirected {
            resp
        } else {
            check(
                resp,
                repo,
                Some(path),
                Some(revision),
                "file metadata",
                self,
            )
            .await?
        };
        let h = resp.headers();
        let get = |k: &str| h.get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
        let commit = get("x-repo-commit")
            .ok_or_else(|| HubError::protocol(repo, "file metadata", "no X-Repo-Commit"))?;
        let etag = get("x-linked-etag")
            .or_else(|| get("etag"))
            .ok_or_else(|| HubError::protocol(repo, "file metadata", "no ETag"))?;
        let etag = etag.trim_start_matches("W/").trim_matches('"').to_string();
        let size = get("x-linked-size")
            .or_else(|| (!redirected).then(|| get("content-length")).flatten())
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| HubError::protocol(repo, "file metadata", "no size"))?;
        Ok(FileMetadata { commit, etag, size })
    }

    /// The error for a failed write of the partial download `part`: on a
    /// full disk the partial file is removed (unless asked to keep it), and
    /// the message says which.
    pub(super) async fn write_failed(&self, part: &Path, e: std::io::Error) -> HubError {
        if e.kind() != std::io::ErrorKind::StorageFull {
            return HubError::io(part, e);
        }
        let what = if self.keep_partial {
            "kept to resume once there is room"
        } else {
            let _ = tokio::fs::remove_file(part).await;
            "removed so the disk is not left full (BREVIS_KEEP_PARTIAL=1 keeps it to resume)"
        };
        HubError::io(
            part,
            std::io::Error::new(e.kind(), format!("{e}: the partial download was {what}")),
        )
    }

    /// Download one file to `dst` atomically. A partial `dst.incomplete` left
    /// by an earlier run is resumed with `Range`; a dropped connection is
    /// resumed the same way. Size and hashes are checked against `expect`
    /// before the file is renamed into place.
    pub async fn download_file(
        &self,
        repo: &str,
        revision: &str,
        path: &str,
        dst: &Path,
        expect: &Expect,
        progress: &dyn ProgressSink,
    ) -> Result<DownloadStats> {
        check_repo_id(repo)?;
        check_revision(revision)?;
        check_repo_path(path)?;
        let url = self.resolve_url(repo, revision, path);
        let part = incomplete_path(dst);
        if let Some(parent) = dst.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| HubError::io(parent, e))?;
        }
        if let Some(size) = expect.size
            && size > self.chunks.chunk_size
        {
            return self
                .download_ranged(repo, revision, path, dst, &part, expect, size, progress)
                .await;
        }
        let mut stats = DownloadStats::default();
        let mut partial = Partial::find(&part, expect).await;
        stats.resumed_from = partial.have;
        progress.advance(partial.have);
        let mut failures = 0u32;
        // Stalls of the headers and of the body, all attempts together.
        let mut stalls = 0u32;
        loop {
            if expect.size == Some(partial.have) && partial.have > 0 {
                break;
            }
            let _conn = self.connections.acquire().await;
            let have = partial.have;
            let resp = self.get_from(repo, &url, have, &mut stalls).await?;
            if resp.status() == StatusCode::RANGE_NOT_SATISFIABLE {
                // The partial file is not a prefix of this file: start over.
                partial.discard().await;
                failures += 1;
                if failures > self.retry.max_retries {
                    return Err(HubError::protocol(
                        repo,
                        "download",
                        "range not satisfiable",
                    ));
                }
                continue;
            }
            let resp = check(resp, repo, Some(path), Some(revision), "download", self).await?;
            let append = resp.status() == StatusCode::PARTIAL_CONTENT;
            if append {
                let start = content_range_start(resp.headers());
                if start != Some(have) {
                    return Err(HubError::protocol(
                        repo,
                        "download",
                        "Content-Range does not match",
                    ));
                }
            } else if have > 0 {
                progress.advance(0);
            }
            let file = partial.open(append).await?;
            let room = expect.size.map_or(u64::MAX, |s| s - partial.have);
            let end = self
                .receive(resp, file, &part, room, true, |c| {
                    partial.add(c);
                    stats.bytes_on_wire += c.len() as u64;
                    progress.advance(c.len() as u64);
                })
                .await?;
            match end {
                BodyEnd::Overflow => {
                    let _ = tokio::fs::remove_file(&part).await;
                    return Err(HubError::protocol(
                        repo,
                        "download",
                        "more bytes than the expected size",
                    ));
                }
                end => {
                    let complete = expect.size.is_none_or(|s| s == partial.have);
                    if self
                        .after_body(repo, path, end, complete, &mut failures, &mut stalls)
                        .await?
                    {
                        break;
                    }
                }
            }
        }
        let hashes = partial.hashes().await?;
        stats.hashes = Some(finish_download(repo, path, &part, dst, hashes, expect).await?);
        Ok(stats)
    }

    /// `GET url` from byte `have` on (all of it when `have` is 0), its
    /// stalls counted in `stalls`.
    async fn get_from(
        &self,
        repo: &str,
        url: &str,
        have: u64,
        stalls: &mut u32,
    ) -> Result<reqwest::Response> {
        self.send_counting(
            repo,
            "download",
            || {
                let mut rb = self.request(Method::GET, url);
                if have > 0 {
                    rb = rb.header("Range", format!("bytes={have}-"));
                }
                Ok(rb)
            },
            stalls,
        )
        .await
    }

    /// After a body of `path` ended with `end` (not an overflow): `true`
    /// when it ended `complete`; else a stall or a failure is counted (the
    /// error once there were too many) and, after a failure, the backoff
    /// waited out, and the download goes on from what arrived.
    pub(super) async fn after_body(
        &self,
        repo: &str,
        path: &str,
        end: BodyEnd,
        complete: bool,
        failures: &mut u32,
        stalls: &mut u32,
    ) -> Result<bool> {
        let broke = match end {
            BodyEnd::Stalled => {
                // Resumed from what arrived, like a dropped connection.
                *stalls += 1;
                if *stalls >= MAX_STALLS {
                    return Err(self.stalled(repo, "download", *stalls));
                }
                self.note_stall(repo, &format!("download {path}"), *stalls);
                return Ok(false);
            }
            BodyEnd::Done if complete => return Ok(true),
            BodyEnd::Done | BodyEnd::Overflow => None,
            BodyEnd::Broke(e) => Some(e),
        };
        *failures += 1;
        if *failures > self.retry.max_retries {
            return Err(match broke {
                Some(e) => HubError::Network {
                    repo: repo.into(),
                    what: "download",
                    attempts: *failures,
                    source: Box::new(e),
                },
                None => HubError::protocol(repo, "download", "file ended early"),
            });
        }
        tokio::time::sleep(self.retry.delay(*failures - 1)).await;
        Ok(false)
    }

    /// Write the body of `resp` to `file` (the partial download `part`) as
    /// it arrives, until it ends, breaks, stalls or would pass `room`
    /// bytes (then nothing past the room is written). `got` sees each
    /// chunk once it is written. The file is flushed (and with `sync`
    /// synced) unless the body overflowed; a failed write is the error of
    /// [`HubClient::write_failed`].
    pub(super) async fn receive(
        &self,
        resp: reqwest::Response,
        mut file: tokio::fs::File,
        part: &Path,
        room: u64,
        sync: bool,
        mut got: impl FnMut(&[u8]),
    ) -> Result<BodyEnd> {
        let mut body = resp.bytes_stream();
        let mut written = 0u64;
        let end = loop {
            let c = match tokio::time::timeout(self.stall, body.next()).await {
                Ok(Some(Ok(c))) => c,
                Ok(Some(Err(e))) => break BodyEnd::Broke(e),
                Ok(None) => break BodyEnd::Done,
                Err(_) => break BodyEnd::Stalled,
            };
            if written + c.len() as u64 > room {
                return Ok(BodyEnd::Overflow);
            }
            if let Err(e) = file.write_all(&c).await {
                drop(file);
                return Err(self.write_failed(part, e).await);
            }
            written += c.len() as u64;
            got(&c);
        };
        let mut saved = file.flush().await;
        if sync && saved.is_ok() {
            saved = file.sync_all().await;
        }
        drop(file);
        match saved {
            Ok(()) => Ok(end),
            Err(e) => Err(self.write_failed(part, e).await),
        }
    }

    /// Download several files at once (up to the client's concurrency), each
    /// with [`HubClient::download_file`]. Progress is one unit for all files.
    pub async fn download_many(
        &self,
        repo: &str,
        revision: &str,
        files: &[(String, PathBuf, Expect)],
        progress: Arc<dyn ProgressSink>,
    ) -> Result<Vec<DownloadStats>> {
        self.download_each(repo, revision, files, progress)
            .await
            .into_iter()
            .collect()
    }

    /// [`HubClient::download_many`], with one outcome per file: a file that
    /// fails does not hide what happened to the others.
    pub async fn download_each(
        &self,
        repo: &str,
        revision: &str,
        files: &[(String, PathBuf, Expect)],
        progress: Arc<dyn ProgressSink>,
    ) -> Vec<Result<DownloadStats>> {
        let total: u64 = files.iter().filter_map(|f| f.2.size).sum();
        progress.start(&format!("download {repo}"), total);
        let mut results: Vec<(usize, Result<DownloadStats>)> = self
            .download_stream(repo, revision, files, progress.clone())
            .collect()
            .await;
        progress.finish();
        results.sort_by_key(|r| r.0);
        results.into_iter().map(|r| r.1).collect()
    }

    /// Each of `files` downloaded as [`HubClient::download_file`] does, up
    /// to the client's concurrency, yielded as it ends: its index in
    /// `files` and the outcome. Each file reports to `progress` as a file
    /// of a run (keyed by its path); the run's begin and end are the
    /// caller's.
    pub fn download_stream<'a>(
        &'a self,
        repo: &'a str,
        revision: &'a str,
        files: &'a [(String, PathBuf, Expect)],
        progress: Arc<dyn ProgressSink>,
    ) -> impl futures_util::Stream<Item = (usize, Result<DownloadStats>)> + 'a {
        // The futures are made first, then run: a closure in the stream
        // would make the caller's future not `Send` for callers that spawn
        // it.
        let futures: Vec<_> = files
            .iter()
            .enumerate()
            .map(|(i, (path, dst, expect))| {
                let p = brevis_core::FileProgress::new(progress.clone(), path.clone());
                async move {
                    p.start("download", expect.size.unwrap_or(0));
                    let r = self
                        .download_file(repo, revision, path, dst, expect, &p)
                        .await;
                    p.finish();
                    (i, r)
                }
            })
            .collect();
        futures_util::stream::iter(futures).buffer_unordered(self.concurrency)
    }
}
