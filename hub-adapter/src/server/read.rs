//! The read endpoints: revision info, refs, tree listing and `resolve`
//! (files stored as they are, or decoded on the fly from a mirror).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode, Uri};
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _};

use super::limits::{BODY_GRACE, MAX_DECODE_RETRY_AFTER, MIN_BODY_RATE};
use super::store::{self, FileRec};
use super::{
    Access, Resp, STORE_DAMAGED, State, base_url, error, internal, json_resp, query_param,
};

use super::view::{Served, View, ViewFile, decoded_branches, mark_decoded, served, view};
use crate::ids::{RepoId, RepoPath, Revision};
use crate::paths::encode;

/// Bytes a download sends at a time; at most [`STREAM_QUEUE`] of them wait
/// for a slow client.
const STREAM_CHUNK: usize = 64 << 10;
/// Chunks queued between a download's reader (or decoder) and its client.
const STREAM_QUEUE: usize = 4;

/// `GET /api/models/{repo}/refs` (`huggingface_hub`'s `list_repo_refs`):
/// the branches and the commits they point at; no tags or converts here,
/// and `pullRequests` (none) when asked for with `include_prs`.
pub(super) fn refs(st: &State, access: Access, repo: &RepoId, uri: &Uri) -> Resp {
    let branches = match served(st, access, repo) {
        Ok(Served::Stored { .. }) => match st.store.branches(repo) {
            Ok(b) => b
                .into_iter()
                .map(|(n, c)| (n.to_string(), c.to_string()))
                .collect(),
            Err(e) => return internal(e),
        },
        Ok(Served::Decoded { manifest, .. }) => decoded_branches(&manifest),
        Err(r) => return r,
    };
    let branches: Vec<Value> = branches
        .into_iter()
        .map(|(name, oid)| json!({"name": name, "ref": format!("refs/heads/{name}"), "targetCommit": oid}))
        .collect();
    let mut v = json!({"branches": branches, "tags": [], "converts": []});
    if query_param(uri, "include_prs").is_some_and(|x| !matches!(x.as_str(), "" | "0" | "false")) {
        v["pullRequests"] = json!([]);
    }
    json_resp(StatusCode::OK, &v)
}

fn iso_time(secs: u64) -> String {
    // Civil date from days since the epoch (Howard Hinnant's algorithm).
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.000Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn pointer_size(rec: &FileRec) -> usize {
    store::lfs_pointer(&rec.sha256, rec.size).len()
}

pub(super) fn info(st: &State, access: Access, repo: &RepoId, rev: &Revision) -> Resp {
    let v = match view(st, access, repo, rev) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let siblings: Vec<Value> = v
        .files
        .iter()
        .map(|(p, f)| {
            let mut s = json!({"rfilename": p, "size": f.rec.size, "blobId": f.rec.git_oid});
            if f.rec.lfs {
                s["lfs"] = json!({"sha256": f.rec.sha256, "size": f.rec.size, "pointerSize": pointer_size(&f.rec)});
            }
            s
        })
        .collect();
    let t = iso_time(v.time);
    let r = json_resp(
        StatusCode::OK,
        &json!({
            "_id": v.sha, "id": v.repo, "modelId": v.repo, "author": v.repo.namespace(), "sha": v.sha,
            "lastModified": t, "createdAt": t, "private": v.private, "disabled": false,
            "gated": false, "downloads": 0, "likes": 0, "tags": [], "siblings": siblings,
            "spaces": [], "usedStorage": v.files.values().map(|f| f.rec.size).sum::<u64>(),
        }),
    );
    mark_decoded(r, &v)
}

pub(super) fn tree(
    st: &State,
    access: Access,
    h: &HeaderMap,
    uri: &Uri,
    repo: &RepoId,
    rev: &Revision,
    prefix: Option<&RepoPath>,
) -> Resp {
    let v = match view(st, access, repo, rev) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let recursive = query_param(uri, "recursive").is_some_and(|r| r == "true" || r == "1");
    let pre = prefix.map(|p| format!("{p}/")).unwrap_or_default();
    if let Some(p) = prefix
        && !v.files.keys().any(|f| f.as_str().starts_with(&pre))
    {
        return error(
            StatusCode::NOT_FOUND,
            Some("EntryNotFound"),
            &format!("{p} does not exist"),
        );
    }
    let mut items: Vec<Value> = Vec::new();
    let mut dirs = std::collections::BTreeSet::new();
    for (p, f) in v.files.iter() {
        let Some(rest) = p.as_str().strip_prefix(&pre) else {
            continue;
        };
        let parts: Vec<&str> = rest.split('/').collect();
        for i in 1..parts.len() {
            if !recursive && i > 1 {
                break;
            }
            dirs.insert(format!("{pre}{}", parts[..i].join("/")));
        }
        if !recursive && parts.len() > 1 {
            continue;
        }
        let mut it = json!({"type": "file", "oid": f.rec.git_oid, "size": f.rec.size, "path": p});
        if f.rec.lfs {
            it["lfs"] = json!({"oid": f.rec.sha256, "size": f.rec.size, "pointerSize": pointer_size(&f.rec)});
        }
        items.push(it);
    }
    for d in dirs {
        let oid = hex::encode(&Sha256::digest(d.as_bytes())[..20]);
        items.push(json!({"type": "directory", "oid": oid, "size": 0, "path": d}));
    }
    items.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
    let start: usize = query_param(uri, "cursor")
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let page = st.opts.tree_page_size;
    let end = start.saturating_add(page).min(items.len());
    let slice: Vec<Value> = items
        .get(start.min(items.len())..end)
        .unwrap_or(&[])
        .to_vec();
    let mut r = mark_decoded(json_resp(StatusCode::OK, &Value::Array(slice)), &v);
    if end < items.len() {
        let path_part = prefix
            .map(|p| format!("/{}", encode(p.as_str(), true)))
            .unwrap_or_default();
        let link = format!(
            "<{}/api/models/{}/tree/{}{}?recursive={}&expand=false&cursor={}>; rel=\"next\"",
            base_url(h),
            repo,
            encode(rev.as_str(), false),
            path_part,
            recursive,
            end
        );
        if let Ok(hv) = HeaderValue::from_str(&link) {
            r.headers_mut().insert("link", hv);
        }
    }
    r
}

/// Parse a single `bytes=` range against `size`: Ok(None) = whole file.
pub(super) fn parse_range(h: &HeaderMap, size: u64) -> std::result::Result<Option<(u64, u64)>, ()> {
    let Some(v) = h.get("range").and_then(|v| v.to_str().ok()) else {
        return Ok(None);
    };
    let Some(spec) = v.trim().strip_prefix("bytes=") else {
        return Ok(None);
    };
    if spec.contains(',') {
        return Ok(None);
    }
    let (a, b) = spec.split_once('-').ok_or(())?;
    let (start, end) = match (a.trim(), b.trim()) {
        ("", n) => {
            let n: u64 = n.parse().map_err(|_| ())?;
            if n == 0 {
                return Err(());
            }
            (size.saturating_sub(n), size.saturating_sub(1))
        }
        (a, "") => (a.parse().map_err(|_| ())?, size.saturating_sub(1)),
        (a, b) => {
            let a: u64 = a.parse().map_err(|_| ())?;
            let b: u64 = b.parse().map_err(|_| ())?;
            if b < a {
                return Err(());
            }
            (a, b.min(size.saturating_sub(1)))
        }
    };
    if start >= size {
        return Err(());
    }
    Ok(Some((start, end)))
}

/// Where `f`'s object is in the store, checked before any header goes
/// out (see the comment inside).
fn stored_object(
    st: &State,
    f: &ViewFile,
    path: &RepoPath,
    rev: &Revision,
) -> Result<std::path::PathBuf, Resp> {
    let size = f.rec.size;
    // The object must be there (and, stored as is, whole) before any header
    // goes out: a 200 with a content-length and then no body sends clients
    // into retries that end in "error decoding response body". A 500 names
    // the object instead.
    let obj = st.store.object_path(&f.object);
    match std::fs::metadata(&obj) {
        Ok(m) if m.is_file() && (f.decode || m.len() == size) => Ok(obj),
        Ok(m) if m.is_file() => Err(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            Some(STORE_DAMAGED),
            &format!(
                "{path} at {rev}: its stored object {} is {} bytes, the tree records {size}: \
                     the store is damaged",
                f.object,
                m.len()
            ),
        )),
        // Not a 404: the file is in the tree (clients read a 404 as "no such
        // file", and a missing manifest as "not a mirror").
        _ => Err(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            Some(STORE_DAMAGED),
            &format!(
                "{path} at {rev}: its stored object {} is missing from the store",
                f.object
            ),
        )),
    }
}

/// The headers of a `resolve` answer for `f` (of `len` bytes sent; `range`
/// the part asked for, if any).
fn file_headers(
    v: &View,
    f: &ViewFile,
    path: &RepoPath,
    range: Option<(u64, u64)>,
    len: u64,
) -> axum::http::response::Builder {
    let size = f.rec.size;
    let file_name = path.as_str().rsplit('/').next().unwrap_or("file");
    let mut r = Response::builder()
        .status(if range.is_some() {
            StatusCode::PARTIAL_CONTENT
        } else {
            StatusCode::OK
        })
        .header("x-repo-commit", v.sha.as_str())
        .header("etag", format!("\"{}\"", f.rec.etag()))
        .header("accept-ranges", "bytes")
        .header("content-type", "application/octet-stream")
        .header("content-length", len.to_string())
        .header(
            "content-disposition",
            format!(
                "attachment; filename=\"{}\"",
                file_name.replace(['"', '\\'], "")
            ),
        );
    if f.rec.lfs {
        r = r
            .header("x-linked-etag", format!("\"{}\"", f.rec.sha256))
            .header("x-linked-size", size.to_string());
    }
    if let Some((start, end)) = range {
        r = r.header("content-range", format!("bytes {start}-{end}/{size}"));
    }
    r
}

pub(super) async fn resolve(
    st: &Arc<State>,
    access: Access,
    h: &HeaderMap,
    head: bool,
    repo: &RepoId,
    rev: &Revision,
    path: &RepoPath,
) -> Resp {
    let v = match view(st, access, repo, rev) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let Some(f) = v.files.get(path) else {
        return error(
            StatusCode::NOT_FOUND,
            Some("EntryNotFound"),
            &format!("{path} does not exist at {rev}"),
        );
    };
    let size = f.rec.size;
    let obj = match stored_object(st, f, path, rev) {
        Ok(o) => o,
        Err(r) => return r,
    };
    if st.opts.strict && f.rec.lfs {
        return redirect_to_cdn(st, h, head, &v, f);
    }
    let range = match parse_range(h, size) {
        Ok(r) => r,
        Err(()) => {
            return Response::builder()
                .status(StatusCode::RANGE_NOT_SATISFIABLE)
                .header("content-range", format!("bytes */{size}"))
                .header("x-repo-commit", v.sha.as_str())
                .body(Body::empty())
                .unwrap_or_default();
        }
    };
    let (start, end) = range.unwrap_or((0, size.saturating_sub(1)));
    let len = if size == 0 { 0 } else { end - start + 1 };
    let r = file_headers(&v, f, path, range, len);
    if head || len == 0 {
        return r.body(Body::empty()).unwrap_or_default();
    }
    match object_stream(st, obj, f.decode, start, len, size).await {
        Ok(s) => r.body(Body::from_stream(s)).unwrap_or_default(),
        Err(resp) => resp,
    }
}

/// The bytes `[start, start+len)` of stored object `obj` (decoded on the
/// fly from a mirror archive when `decode`; `size` is the whole file's),
/// streamed through the test hooks at the client's [`Pace`]; a decoded one
/// first takes a decoding slot, or is a 503 when none frees up in time.
pub(super) async fn object_stream(
    st: &State,
    obj: std::path::PathBuf,
    decode: bool,
    start: u64,
    len: u64,
    size: u64,
) -> std::result::Result<
    impl futures_util::Stream<Item = std::io::Result<Bytes>> + Send + use<>,
    Resp,
> {
    let pace = Pace::new(st.opts.limits.send_stall_timeout);
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(STREAM_QUEUE);
    if decode {
        // A decoding slot first: a blocking thread and about one region of
        // memory. Wait for one a while, then ask the client to come back.
        let slot = tokio::time::timeout(
            st.opts.limits.decode_queue_wait,
            st.decode_slots.clone().acquire_owned(),
        )
        .await;
        let Ok(Ok(slot)) = slot else {
            return Err(super::busy(
                "every decoding slot is taken; retry shortly",
                st.opts
                    .limits
                    .decode_queue_wait
                    .as_secs()
                    .clamp(1, MAX_DECODE_RETRY_AFTER),
            ));
        };
        let rt = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let mut w = ChanWriter {
                tx,
                rt,
                pace,
                skip: start,
                left: len,
                to_end: start + len == size,
                held: None,
            };
            let res = brevis_core::decompress_to(
                &obj,
                &mut w,
                &brevis_core::DecompressOptions::default().threads(1),
            );
            match res {
                // The whole file decoded and its SHA-256 proven: the bytes
                // held back go out, and the client has all of them.
                Ok(_) => {
                    if let Some(last) = w.held.take() {
                        let _ = w.send(Ok(last));
                    }
                }
                // A range ended early on purpose, or the client left.
                Err(_) if w.left == 0 && w.held.is_none() => {}
                // A damaged archive: the body ends short, with an error,
                // never with wrong bytes as its end.
                Err(e) => {
                    w.held = None;
                    let _ = w.send(Err(std::io::Error::other(e.to_string())));
                }
            }
        });
    } else {
        let mut pace = pace;
        tokio::spawn(async move {
            let res: std::io::Result<()> = async {
                let mut file = tokio::fs::File::open(&obj).await?;
                file.seek(std::io::SeekFrom::Start(start)).await?;
                let mut left = len;
                let mut buf = vec![0u8; STREAM_CHUNK];
                while left > 0 {
                    let want = (buf.len() as u64).min(left) as usize;
                    let n = file.read(&mut buf[..want]).await?;
                    if n == 0 {
                        return Err(std::io::Error::other("object shorter than recorded"));
                    }
                    left -= n as u64;
                    let sent = tokio::time::timeout(
                        pace.wait(),
                        tx.send(Ok(Bytes::copy_from_slice(&buf[..n]))),
                    )
                    .await;
                    if !matches!(sent, Ok(Ok(()))) {
                        // The client left, or reads too slowly.
                        return Ok(());
                    }
                    pace.sent += n as u64;
                }
                Ok(())
            }
            .await;
            if let Err(e) = res {
                let _ = tokio::time::timeout(pace.wait(), tx.send(Err(e))).await;
            }
        });
    }
    Ok(with_faults(st, rx))
}

/// Strict mode's answer for an LFS file: `302 Found` to a signed URL on the
/// CDN listener, with the headers the Hub puts on it (`X-Repo-Commit`,
/// `X-Linked-Etag`, `X-Linked-Size`, `ETag`, `Location`; the body is a line
/// naming the URL, its length in `Content-Length`).
fn redirect_to_cdn(st: &State, h: &HeaderMap, head: bool, v: &View, f: &ViewFile) -> Resp {
    let cap = super::cdn::Capability {
        object: f.object.clone(),
        sha256: f.rec.sha256.clone(),
        decode: f.decode,
        size: f.rec.size,
        expires: 0,
    };
    let Some(location) = super::cdn::location(st, h, cap) else {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            "strict mode without a CDN listener",
        );
    };
    let text = format!("Found. Redirecting to {location}");
    let r = Response::builder()
        .status(StatusCode::FOUND)
        .header("location", location.as_str())
        .header("x-repo-commit", v.sha.as_str())
        .header("x-linked-etag", format!("\"{}\"", f.rec.sha256))
        .header("x-linked-size", f.rec.size.to_string())
        .header("etag", format!("\"{}\"", f.rec.etag()))
        .header("content-type", "text/plain; charset=utf-8")
        .header("content-length", text.len().to_string());
    let body = if head {
        Body::empty()
    } else {
        Body::from(text)
    };
    mark_decoded(r.body(body).unwrap_or_default(), v)
}

/// The body stream of a download, through the test hooks: bytes counted,
/// and the connection cut after a set number of bytes when asked.
fn with_faults(
    st: &State,
    mut rx: tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>,
) -> impl futures_util::Stream<Item = std::io::Result<Bytes>> + use<> {
    let cut = {
        let mut c = st
            .opts
            .faults
            .cut_downloads
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match c.as_mut() {
            Some((after, n)) if *n > 0 => {
                *n -= 1;
                Some(*after)
            }
            _ => None,
        }
    };
    let faults = st.opts.faults.clone();
    let mut sent = 0u64;
    let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)).map(move |item| {
        let item = item?;
        if let Some(c) = cut {
            if sent >= c {
                return Err(std::io::Error::other("connection cut by test hook"));
            }
            let keep = ((c - sent) as usize).min(item.len());
            sent += keep as u64;
            faults
                .bytes_served
                .fetch_add(keep as u64, Ordering::Relaxed);
            if keep < item.len() {
                return Ok(item.slice(..keep));
            }
            return Ok(item);
        }
        faults
            .bytes_served
            .fetch_add(item.len() as u64, Ordering::Relaxed);
        Ok(item)
    });
    // After an error, end the body so the connection drops.
    stream.scan(false, |failed, item| {
        if *failed {
            return futures_util::future::ready(None);
        }
        if item.is_err() {
            *failed = true;
        }
        futures_util::future::ready(Some(item))
    })
}

/// How long a download may wait for its client to take the next piece:
/// at most `stall`, and the client must keep up [`MIN_BODY_RATE`] on
/// average once [`BODY_GRACE`] is over (a reader taking a few bytes a
/// minute cannot hold a connection, or a decoding slot, for ever).
struct Pace {
    start: tokio::time::Instant,
    sent: u64,
    stall: Duration,
}

impl Pace {
    fn new(stall: Duration) -> Pace {
        Pace {
            start: tokio::time::Instant::now(),
            sent: 0,
            stall,
        }
    }
    fn wait(&self) -> Duration {
        let due = self.start + BODY_GRACE + Duration::from_secs(self.sent / MIN_BODY_RATE);
        self.stall
            .min(due.saturating_duration_since(tokio::time::Instant::now()))
    }
}

/// Sends decoded bytes `[skip, skip+left)` to a channel, a
/// [`STREAM_CHUNK`] at a time at the client's [`Pace`]. When the range
/// runs to the end of the file (`to_end`), its last piece is held back
/// until the decoder has proven the whole file's SHA-256; otherwise the
/// writer stops the decoder once the range is out.
struct ChanWriter {
    tx: tokio::sync::mpsc::Sender<std::io::Result<Bytes>>,
    rt: tokio::runtime::Handle,
    pace: Pace,
    skip: u64,
    left: u64,
    to_end: bool,
    held: Option<Bytes>,
}

impl ChanWriter {
    fn send(&mut self, item: std::io::Result<Bytes>) -> std::io::Result<()> {
        let n = item.as_ref().map_or(0, |b| b.len() as u64);
        let sent = self
            .rt
            .block_on(tokio::time::timeout(self.pace.wait(), self.tx.send(item)));
        if !matches!(sent, Ok(Ok(()))) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "client gone or too slow",
            ));
        }
        self.pace.sent += n;
        Ok(())
    }
}

impl std::io::Write for ChanWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut b = buf;
        if self.skip > 0 {
            // Nothing is sent while skipping: notice a client gone.
            if self.tx.is_closed() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::BrokenPipe,
                    "client gone",
                ));
            }
            let s = (self.skip as usize).min(b.len());
            self.skip -= s as u64;
            b = &b[s..];
        }
        let take = (self.left as usize).min(b.len());
        for piece in b[..take].chunks(STREAM_CHUNK) {
            let piece = Bytes::copy_from_slice(piece);
            self.left -= piece.len() as u64;
            let out = if self.to_end {
                self.held.replace(piece)
            } else {
                Some(piece)
            };
            if let Some(p) = out {
                self.send(Ok(p))?;
            }
        }
        if self.left == 0 && self.skip == 0 && !self.to_end {
            // Everything asked for is out; stop decoding early.
            return Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "range done",
            ));
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
