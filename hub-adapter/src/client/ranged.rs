//! Files larger than one chunk, downloaded as `huggingface_hub`'s
//! `hf_transfer` does: in `Range` chunks over several connections at once,
//! straight from where the Hub redirects (its CDN, which caps each
//! connection's rate and refuses a plain GET of a very large file), without
//! the token.
//!
//! The chunks are written in place into `dst.incomplete`, which has the
//! file's length from the start; `dst.incomplete.chunks` records how much of
//! each chunk is written, so an interrupted download (a dropped connection,
//! a killed run) resumes each chunk where it stopped. The SHA-256 (and the
//! git blob id when asked) is taken in order, each chunk read back as soon
//! as it and every chunk before it are complete, beside the downloads.

use std::collections::BTreeSet;
use std::io::{Read as _, Seek as _};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use tokio::io::AsyncSeekExt as _;

use super::download::BodyEnd;
use super::{DownloadStats, Expect, HubClient, check, content_range_start, finish_download};
use crate::error::{HubError, Result};
use crate::hashing::{FileHashes, StreamHasher};
use brevis_core::ProgressSink;
use futures_util::TryStreamExt as _;
use reqwest::{Method, StatusCode};

/// Default chunk size of a ranged download (`BREVIS_CHUNK_SIZE`): a file no
/// larger is one plain GET.
pub const DEFAULT_CHUNK_SIZE: u64 = 16 << 20;
/// Default number of connections a client downloads over at once
/// (`BREVIS_DOWNLOAD_CONNECTIONS`): several times a CDN's per-connection
/// rate.
pub const DEFAULT_CONNECTIONS: usize = 8;
/// The smallest piece a file over one chunk is split into.
const MIN_PIECE: u64 = 1 << 20;
/// Largest number of chunks a download is split into (the chunk size grows
/// past it).
const MAX_CHUNKS: u64 = 100_000;

/// Bytes read at a time when a chunk is read back to be hashed.
const HASH_BUF: usize = 1 << 20;

/// How a client splits downloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkPlan {
    /// Bytes a chunk (a file no larger is one GET).
    pub chunk_size: u64,
    /// Connections at once, over all the client's downloads.
    pub connections: usize,
}

impl ChunkPlan {
    /// The chunk size for a file of `size` bytes: at most a chunk, and small
    /// enough that the file spreads over every connection (not under
    /// [`MIN_PIECE`] each), with at most [`MAX_CHUNKS`] chunks.
    fn piece(&self, size: u64) -> u64 {
        let spread = size.div_ceil(self.connections.max(1) as u64).max(MIN_PIECE);
        self.chunk_size
            .min(spread)
            .max(size.div_ceil(MAX_CHUNKS))
            .max(1)
    }
}

impl Default for ChunkPlan {
    fn default() -> Self {
        ChunkPlan {
            chunk_size: DEFAULT_CHUNK_SIZE,
            connections: DEFAULT_CONNECTIONS,
        }
    }
}

/// What `dst.incomplete.chunks` holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct Progress {
    size: u64,
    chunk: u64,
    /// Bytes written of each chunk, from its start.
    done: Vec<u64>,
}

impl Progress {
    fn new(size: u64, chunk: u64) -> Progress {
        Progress {
            size,
            chunk,
            done: vec![0; size.div_ceil(chunk) as usize],
        }
    }
    fn span(&self, i: usize) -> (u64, u64) {
        let start = i as u64 * self.chunk;
        (start, self.chunk.min(self.size - start))
    }
    fn complete(&self, i: usize) -> bool {
        self.done[i] == self.span(i).1
    }
    /// Bytes written in all.
    fn have(&self) -> u64 {
        self.done.iter().sum()
    }
}

/// `dst.incomplete.chunks`.
pub(crate) fn progress_path(part: &Path) -> PathBuf {
    let mut s = part.as_os_str().to_owned();
    s.push(".chunks");
    PathBuf::from(s)
}

fn save(p: &Path, prog: &Progress) -> Result<()> {
    crate::cache::write_atomic(p, &serde_json::to_vec(prog).unwrap_or_default())
}

/// The progress of `part` to resume from: the recorded one when it is
/// for this size; from a plain `.incomplete` prefix (an earlier single
/// stream), the chunks it covers; else nothing. The file is given its full
/// length.
fn resume(part: &Path, size: u64, chunk: u64) -> Result<Progress> {
    let pp = progress_path(part);
    let len = std::fs::metadata(part).map(|m| m.len()).ok();
    let recorded = std::fs::read(&pp)
        .ok()
        .and_then(|t| serde_json::from_slice::<Progress>(&t).ok())
        .filter(|p| {
            p.size == size
                && p.chunk == chunk
                && p.done.len() as u64 == size.div_ceil(chunk)
                && len == Some(size)
                && (0..p.done.len()).all(|i| p.done[i] <= p.span(i).1)
        });
    let prog = match (recorded, len) {
        (Some(p), _) => p,
        // A prefix from a single stream (no record): keep what it covers.
        (None, Some(have)) if have <= size && !pp.exists() => {
            let mut p = Progress::new(size, chunk);
            for i in 0..p.done.len() {
                let (start, n) = p.span(i);
                p.done[i] = have.saturating_sub(start).min(n);
            }
            p
        }
        _ => {
            let _ = std::fs::remove_file(part);
            Progress::new(size, chunk)
        }
    };
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(part)
        .map_err(|e| HubError::io(part, e))?;
    f.set_len(size).map_err(|e| HubError::io(part, e))?;
    save(&pp, &prog)?;
    Ok(prog)
}

/// Read chunk `[start, start+len)` of `part` into `h` (blocking).
fn hash_span(part: &Path, start: u64, len: u64, h: &mut StreamHasher) -> std::io::Result<()> {
    let mut f = std::fs::File::open(part)?;
    f.seek(std::io::SeekFrom::Start(start))?;
    let mut f = f.take(len);
    let mut buf = vec![0u8; HASH_BUF];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(())
}

/// The hashes of `part` (of `size` bytes in `n` chunks), taking the chunks
/// in order, each as soon as it and all before it are complete (`done`
/// names each chunk once it is). `None` when `done` closes first or a read
/// fails.
async fn hash_in_order(
    part: &Path,
    size: u64,
    git: bool,
    n: usize,
    prog: &Mutex<Progress>,
    mut done: tokio::sync::mpsc::UnboundedReceiver<usize>,
) -> Option<FileHashes> {
    let mut h = StreamHasher::new(size, git);
    let mut ready = BTreeSet::new();
    let mut next = 0usize;
    while next < n {
        let i = done.recv().await?;
        ready.insert(i);
        while ready.remove(&next) {
            let (start, len) = prog.lock().unwrap_or_else(|e| e.into_inner()).span(next);
            let p = part.to_path_buf();
            h = tokio::task::spawn_blocking(move || hash_span(&p, start, len, &mut h).map(|()| h))
                .await
                .ok()?
                .ok()?;
            next += 1;
        }
    }
    Some(h.finish())
}

/// `part` opened for writing at `from`.
async fn open_at(part: &Path, from: u64) -> Result<tokio::fs::File> {
    let mut file = tokio::fs::OpenOptions::new()
        .write(true)
        .open(part)
        .await
        .map_err(|e| HubError::io(part, e))?;
    file.seek(std::io::SeekFrom::Start(from))
        .await
        .map_err(|e| HubError::io(part, e))?;
    Ok(file)
}

impl HubClient {
    /// Where the bytes of a file are: the host the Hub redirects to (its
    /// CDN) when it does, else the resolve URL itself.
    async fn content_url(&self, repo: &str, revision: &str, path: &str) -> Result<String> {
        let (url, resp) = self.head_resolve(repo, revision, path).await?;
        if resp.status().is_redirection() {
            let base = reqwest::Url::parse(&url)
                .map_err(|e| HubError::protocol(repo, "file metadata", e.to_string()))?;
            return super::redirect_target(&resp, &base)
                .map(|u| u.to_string())
                .ok_or_else(|| {
                    HubError::protocol(repo, "file metadata", "redirect without Location")
                });
        }
        check(
            resp,
            repo,
            Some(path),
            Some(revision),
            "file metadata",
            self,
        )
        .await?;
        Ok(url)
    }

    /// Download `path` (of `size` bytes, larger than one chunk) into
    /// `part`, then check it and rename it to `dst` (see the module doc).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn download_ranged(
        &self,
        repo: &str,
        revision: &str,
        path: &str,
        dst: &Path,
        part: &Path,
        expect: &Expect,
        size: u64,
        progress: &dyn ProgressSink,
    ) -> Result<DownloadStats> {
        let chunk = self.chunks.piece(size);
        let prog = {
            let part = part.to_path_buf();
            tokio::task::spawn_blocking(move || resume(&part, size, chunk))
                .await
                .map_err(|e| HubError::io(dst, std::io::Error::other(e.to_string())))??
        };
        let n = prog.done.len();
        let mut stats = DownloadStats {
            resumed_from: prog.have(),
            ..DownloadStats::default()
        };
        progress.advance(prog.have());
        let prog = Mutex::new(prog);
        let url = Mutex::new(self.content_url(repo, revision, path).await?);
        let wire = AtomicU64::new(0);
        let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel::<usize>();
        let todo: Vec<usize> = {
            let p = prog.lock().unwrap_or_else(|e| e.into_inner());
            for i in 0..n {
                if p.complete(i) {
                    let _ = done_tx.send(i);
                }
            }
            (0..n).filter(|&i| !p.complete(i)).collect()
        };
        let git = expect.git_oid.is_some();
        let hash = hash_in_order(part, size, git, n, &prog, done_rx);
        let fetched = async {
            let tx = done_tx;
            let r = futures_util::stream::iter(todo.into_iter().map(Ok))
                .try_for_each_concurrent(self.chunks.connections.max(1), |i| {
                    let (prog, url, wire, tx) = (&prog, &url, &wire, tx.clone());
                    async move {
                        self.fetch_chunk(repo, path, revision, part, i, prog, url, wire, progress)
                            .await?;
                        let _ = tx.send(i);
                        Ok::<(), HubError>(())
                    }
                })
                .await;
            drop(tx);
            r
        };
        let (fetched, hashes): (Result<()>, Option<FileHashes>) = tokio::join!(fetched, hash);
        stats.bytes_on_wire = wire.load(Ordering::Relaxed);
        let pp = progress_path(part);
        let saved = save(&pp, &prog.lock().unwrap_or_else(|e| e.into_inner()));
        fetched?;
        saved?;
        let hashes = match hashes {
            Some(h) => h,
            None => crate::hashing::hash_file_async(part, git).await?,
        };
        let r = finish_download(repo, path, part, dst, hashes, expect).await;
        let _ = std::fs::remove_file(&pp);
        stats.hashes = Some(r?);
        Ok(stats)
    }

    /// Fetch what is missing of chunk `i` into `part`, resuming after a
    /// dropped connection or a stall; a refused CDN URL (expired) is asked
    /// for again.
    #[allow(clippy::too_many_arguments)]
    async fn fetch_chunk(
        &self,
        repo: &str,
        path: &str,
        revision: &str,
        part: &Path,
        i: usize,
        prog: &Mutex<Progress>,
        url: &Mutex<String>,
        wire: &AtomicU64,
        progress: &dyn ProgressSink,
    ) -> Result<()> {
        let mut failures = 0u32;
        let mut stalls = 0u32;
        let mut relocated = false;
        loop {
            let (start, len, have) = {
                let p = prog.lock().unwrap_or_else(|e| e.into_inner());
                let (s, l) = p.span(i);
                (s, l, p.done[i])
            };
            if have == len {
                return Ok(());
            }
            let _conn = self.connections.acquire().await;
            let u = url.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let from = start + have;
            let to = start + len - 1;
            let resp = self
                .send_counting(
                    repo,
                    "download",
                    || {
                        Ok(self
                            .request(Method::GET, &u)
                            .header("Range", format!("bytes={from}-{to}")))
                    },
                    &mut stalls,
                )
                .await?;
            // A signed CDN URL that expired: ask the Hub for a new one, once.
            if matches!(
                resp.status(),
                StatusCode::FORBIDDEN | StatusCode::UNAUTHORIZED
            ) && !self.is_ours(&u)
                && !relocated
            {
                relocated = true;
                let fresh = self.content_url(repo, revision, path).await?;
                *url.lock().unwrap_or_else(|e| e.into_inner()) = fresh;
                continue;
            }
            let resp = check(resp, repo, Some(path), Some(revision), "download", self).await?;
            if resp.status() != StatusCode::PARTIAL_CONTENT
                || content_range_start(resp.headers()) != Some(from)
            {
                return Err(HubError::protocol(
                    repo,
                    "download",
                    format!(
                        "{path}: the server did not answer the Range request for bytes {from}-{to}"
                    ),
                ));
            }
            let file = open_at(part, from).await?;
            let mut got = 0u64;
            let end = self
                .receive(resp, file, part, len - have, false, |c| {
                    got += c.len() as u64;
                    wire.fetch_add(c.len() as u64, Ordering::Relaxed);
                    progress.advance(c.len() as u64);
                    prog.lock().unwrap_or_else(|e| e.into_inner()).done[i] += c.len() as u64;
                })
                .await?;
            if let BodyEnd::Overflow = end {
                return Err(HubError::protocol(
                    repo,
                    "download",
                    format!("{path}: more bytes than the range asked for"),
                ));
            }
            if have + got == len {
                return Ok(());
            }
            self.after_body(repo, path, end, false, &mut failures, &mut stalls)
                .await?;
        }
    }
}
