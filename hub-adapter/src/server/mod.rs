//! A Hub-compatible HTTP server over a local [`Store`].
//!
//! It answers what `huggingface_hub` and this crate's client use: revision
//! info, tree listing, `resolve` (HEAD/GET with `Range`), repo creation,
//! `validate-yaml`, preupload, the LFS batch API (basic and multipart
//! transfers, verify) and the NDJSON commit API. A repo whose commit holds a
//! `brevis.manifest.json` is also served as its *source* repo, decoded on the
//! fly, so stock clients download the original files from compressed storage.
//!
//! # What it guarantees
//!
//! `serve` faces clients it should not trust, so:
//! - every identifier from a request is parsed at the edge ([`route`],
//!   [`ndjson`]) into a type of [`crate::ids`], and the [`Store`] builds
//!   paths only from those types: nothing outside the store is read or
//!   written, whatever a request says;
//! - uploads need a ticket ([`ticket`]) bound by HMAC to the repo, object,
//!   size and an expiry, so a leaked ticket can only store its own object;
//! - every body, decoded stream and connection is bounded ([`limits`]);
//! - what a killed upload leaves is removed when the server starts.
//!
//! It does not terminate TLS (put a reverse proxy in front), and it holds
//! tokens in memory as given on its command line.
//!
//! # Strict mode
//!
//! The real Hub is stricter than this server, so a client that passes
//! against it can still fail on huggingface.co. With
//! [`ServerOptions::strict`] it behaves as the Hub does:
//! - `resolve` of an LFS file answers `302 Found` to a signed, expiring URL
//!   on a second listener standing for the CDN ([`cdn`]), which refuses a
//!   token, refuses a GET without `Range` of a file over the plain-GET cap
//!   and can send each body at a capped rate;
//! - the LFS batch API's upload URLs point at a third listener standing for
//!   S3 ([`s3`]), which refuses chunked bodies (501), a missing
//!   `Content-Length` (411) and a token (400);
//! - trees come in pages of [`STRICT_TREE_PAGE_SIZE`] entries;
//! - an empty file is a regular file, whatever its name.
//!
//! A rate limit ([`ratelimit`]) answers `429` with the Hub's `RateLimit`
//! headers and no `Retry-After`, in either mode, when it is set.

// Handlers return a finished error `Response` as their `Err` to leave early;
// it is large, but it is the value sent, so boxing it buys nothing.
#![allow(clippy::result_large_err)]

mod auth;
pub mod body;
pub mod cdn;
mod conn;
mod lfs;
pub mod limits;
pub mod ndjson;
pub mod ratelimit;
mod read;
mod resp;
pub mod route;
pub mod s3;
pub mod store;
pub mod ticket;
mod view;
mod write;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use serde_json::json;

use crate::error::Result;
use crate::paths::decode;

use auth::{Access, verify_ticket};
use conn::{ConnCount, Listener, accept_loop, bind};
pub use limits::Limits;
pub use ratelimit::RateLimit;
pub use resp::{DECODED_FROM, STORE_DAMAGED};
use resp::{Resp, body_error, busy, error, internal, json_resp, repo_not_found, rev_not_found};
use route::{Route, RouteError};
pub use store::{FileRec, Store};
use ticket::TicketKey;

/// Test hooks that make the server misbehave on purpose.
#[derive(Debug, Default)]
pub struct Faults {
    /// Cut the next `.1` file downloads (GET resolve) after `.0` bytes.
    pub cut_downloads: Mutex<Option<(u64, u32)>>,
    /// Accept this many LFS object PUTs, then answer 400 to the rest.
    pub lfs_put_budget: Mutex<Option<usize>>,
    /// Count of LFS object (and part) PUTs received.
    pub lfs_puts: AtomicUsize,
    /// Bytes sent in GET resolve bodies.
    pub bytes_served: AtomicU64,
    /// Answer the next this many commits 504 after making them (a gateway
    /// that timed out while the commit landed).
    pub lose_commit_answers: AtomicUsize,
    /// Answer the next `.0` requests 429 with `RateLimit: "api";r=0;t=.1`
    /// and no `Retry-After`.
    pub rate_limit: Mutex<Option<(u32, u64)>>,
}

/// How to serve.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerOptions {
    /// Store root.
    pub root: PathBuf,
    /// Read+write tokens. With no tokens at all the server is open.
    pub tokens: Vec<String>,
    /// Read-only tokens.
    pub read_tokens: Vec<String>,
    /// Tree listing page size (cursor pages beyond it).
    pub tree_page_size: usize,
    /// LFS objects larger than this are uploaded in parts.
    pub multipart_threshold: u64,
    /// Part size of multipart uploads.
    pub multipart_chunk: u64,
    /// A connection that has not sent a request's headers within this is
    /// closed (default [`HEADER_READ_TIMEOUT`]).
    pub header_read_timeout: std::time::Duration,
    /// Bounds on bodies, streams and connections.
    pub limits: Limits,
    /// Behave like huggingface.co (see the module doc): CDN redirects, S3
    /// uploads, small tree pages. Needs [`ServerOptions::strict`] to set.
    pub strict: bool,
    /// Strict mode: the CDN refuses a GET without `Range` of a file larger
    /// than this many bytes (default [`cdn::PLAIN_GET_CAP`], the Hub's 50 GB).
    pub plain_get_cap: u64,
    /// Strict mode: the CDN sends each response body at most this many bytes
    /// a second (`None`: as fast as it can).
    pub cdn_rate: Option<u64>,
    /// Strict mode: the S3 listener reads each upload body at most this many
    /// bytes a second (`None`: as fast as it comes).
    pub s3_rate: Option<u64>,
    /// Strict mode: how long a CDN URL is good for (default
    /// [`cdn::CDN_URL_TTL`]).
    pub cdn_url_ttl: std::time::Duration,
    /// A budget of Hub API requests per client address (`None`: no limit).
    pub rate_limit: Option<RateLimit>,
    /// Test hooks.
    pub faults: Arc<Faults>,
}

/// The tree page size strict mode sets: the Hub pages its trees too, and a
/// client must follow `Link: <..>; rel="next"`.
pub const STRICT_TREE_PAGE_SIZE: usize = 3;

/// Tree entries a page by default: the Hub's own page size.
const DEFAULT_TREE_PAGE_SIZE: usize = 1000;
/// LFS objects over this are uploaded in parts by default.
const DEFAULT_MULTIPART_THRESHOLD: u64 = 64 << 20;
/// Part size of a multipart upload by default.
const DEFAULT_MULTIPART_CHUNK: u64 = 16 << 20;

impl ServerOptions {
    /// Defaults for a store at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ServerOptions {
            root: root.into(),
            tokens: Vec::new(),
            read_tokens: Vec::new(),
            tree_page_size: DEFAULT_TREE_PAGE_SIZE,
            multipart_threshold: DEFAULT_MULTIPART_THRESHOLD,
            multipart_chunk: DEFAULT_MULTIPART_CHUNK,
            header_read_timeout: HEADER_READ_TIMEOUT,
            limits: Limits::default(),
            strict: false,
            plain_get_cap: cdn::PLAIN_GET_CAP,
            cdn_rate: None,
            s3_rate: None,
            cdn_url_ttl: cdn::CDN_URL_TTL,
            rate_limit: None,
            faults: Arc::new(Faults::default()),
        }
    }
    /// Strict mode on or off. On, it also sets the tree page size to
    /// [`STRICT_TREE_PAGE_SIZE`] (call [`ServerOptions::tree_page_size`]
    /// after it for another).
    pub fn strict(mut self, on: bool) -> Self {
        self.strict = on;
        if on {
            self.tree_page_size = STRICT_TREE_PAGE_SIZE;
        }
        self
    }
    /// Strict mode: the largest file the CDN sends to a GET without `Range`.
    pub fn plain_get_cap(mut self, bytes: u64) -> Self {
        self.plain_get_cap = bytes;
        self
    }
    /// Strict mode: send each CDN response body at most `bytes_per_sec`
    /// (at least 1) bytes a second.
    pub fn cdn_rate(mut self, bytes_per_sec: u64) -> Self {
        self.cdn_rate = Some(bytes_per_sec.max(1));
        self
    }
    /// Strict mode: read each upload body on the S3 listener at most
    /// `bytes_per_sec` (at least 1) bytes a second.
    pub fn s3_rate(mut self, bytes_per_sec: u64) -> Self {
        self.s3_rate = Some(bytes_per_sec.max(1));
        self
    }
    /// Strict mode: how long a CDN URL is good for.
    pub fn cdn_url_ttl(mut self, d: std::time::Duration) -> Self {
        self.cdn_url_ttl = d;
        self
    }
    /// Limit the Hub API requests of each client address.
    pub fn rate_limit(mut self, r: RateLimit) -> Self {
        self.rate_limit = Some(r);
        self
    }
    /// Add a read+write token.
    pub fn token(mut self, t: impl Into<String>) -> Self {
        self.tokens.push(t.into());
        self
    }
    /// Add a read-only token.
    pub fn read_token(mut self, t: impl Into<String>) -> Self {
        self.read_tokens.push(t.into());
        self
    }
    /// Set the tree page size.
    pub fn tree_page_size(mut self, n: usize) -> Self {
        self.tree_page_size = n.max(1);
        self
    }
    /// Set the header-read timeout.
    pub fn header_read_timeout(mut self, d: std::time::Duration) -> Self {
        self.header_read_timeout = d.max(std::time::Duration::from_millis(1));
        self
    }
    /// Set the multipart threshold and part size.
    pub fn multipart(mut self, threshold: u64, chunk: u64) -> Self {
        self.multipart_threshold = threshold;
        self.multipart_chunk = chunk.max(1);
        self
    }
    /// Set the limits.
    pub fn limits(mut self, l: Limits) -> Self {
        self.limits = l;
        self
    }
}

struct State {
    store: Store,
    opts: ServerOptions,
    key: TicketKey,
    write_lock: Mutex<()>,
    /// Slots for files decoded on the fly.
    decode_slots: Arc<tokio::sync::Semaphore>,
    /// Slots for commit bodies being read.
    commit_slots: tokio::sync::Semaphore,
    /// Objects whose multipart upload is being completed.
    joining: Mutex<std::collections::HashSet<crate::ids::Oid>>,
    /// The files repos serve at a commit, shared by the requests reading
    /// them.
    views: Mutex<store::Cache<(crate::ids::RepoId, crate::ids::CommitId, bool), view::ViewFiles>>,
    /// Strict mode: the CDN listener's address.
    cdn_addr: Option<SocketAddr>,
    /// Strict mode: the S3 listener's address.
    s3_addr: Option<SocketAddr>,
    /// The API rate limit's windows.
    limiter: Option<ratelimit::Limiter>,
}

/// Memory the shared views of repos may take, about.
const VIEW_CACHE_BYTES: u64 = 128 << 20;

/// A server running on a tokio runtime.
pub struct RunningServer {
    addr: SocketAddr,
    cdn_addr: Option<SocketAddr>,
    s3_addr: Option<SocketAddr>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    faults: Arc<Faults>,
}

impl RunningServer {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
    /// Strict mode: the CDN listener's address.
    pub fn cdn_addr(&self) -> Option<SocketAddr> {
        self.cdn_addr
    }
    /// Strict mode: the S3 listener's address.
    pub fn s3_addr(&self) -> Option<SocketAddr> {
        self.s3_addr
    }
    /// Strict mode: `http://ADDR` of the CDN listener.
    pub fn cdn_url(&self) -> Option<String> {
        self.cdn_addr.map(|a| format!("http://{a}"))
    }
    /// Strict mode: `http://ADDR` of the S3 listener.
    pub fn s3_url(&self) -> Option<String> {
        self.s3_addr.map(|a| format!("http://{a}"))
    }
    /// The test hooks.
    pub fn faults(&self) -> &Arc<Faults> {
        &self.faults
    }
    /// Stop accepting and wait for the server task.
    pub async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = (&mut self.task).await;
    }
    /// Wait until the server ends (it runs until shut down).
    pub async fn wait(mut self) {
        let _ = (&mut self.task).await;
    }
}

/// How long a client may take by default to send a request's headers
/// before its connection is closed.
pub const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How often upload leftovers older than [`limits::STALE_UPLOAD_AGE`] are
/// looked for while the server runs.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// Bind `addr` (port 0 picks one) and serve in a tokio task; in strict
/// mode also bind the CDN and S3 listeners on the same IP (ports picked by
/// the OS).
///
/// Takes the store's lock (one server a store) and removes what uploads of
/// an earlier server left in its `tmp/`.
pub async fn start(opts: ServerOptions, addr: SocketAddr) -> Result<RunningServer> {
    let store = Store::open(&opts.root)?;
    let lock = store.lock()?;
    store.sweep_uploads(None);
    let key = TicketKey::load_or_create(&store.secret_path())?;
    let (listener, addr) = bind(addr).await?;
    let mut listeners = vec![(Listener::Hub, listener)];
    let (mut cdn_addr, mut s3_addr) = (None, None);
    if opts.strict {
        let (l, a) = bind(SocketAddr::new(addr.ip(), 0)).await?;
        listeners.push((Listener::Cdn, l));
        cdn_addr = Some(a);
        let (l, a) = bind(SocketAddr::new(addr.ip(), 0)).await?;
        listeners.push((Listener::S3, l));
        s3_addr = Some(a);
    }
    let faults = opts.faults.clone();
    let limits = opts.limits.clone();
    let state = Arc::new(State {
        decode_slots: Arc::new(tokio::sync::Semaphore::new(limits.max_decoded_streams)),
        commit_slots: tokio::sync::Semaphore::new(limits.max_concurrent_commits.max(1)),
        limiter: opts.rate_limit.map(ratelimit::Limiter::new),
        store,
        opts,
        key,
        write_lock: Mutex::new(()),
        joining: Mutex::new(std::collections::HashSet::new()),
        views: Mutex::new(store::Cache::new(VIEW_CACHE_BYTES)),
        cdn_addr,
        s3_addr,
    });
    let sweeper = {
        let store = state.store.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(SWEEP_EVERY);
            every.tick().await;
            loop {
                every.tick().await;
                let s = store.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    s.sweep_uploads(Some(limits::STALE_UPLOAD_AGE))
                })
                .await;
            }
        })
    };
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let _lock = lock;
        // One count over all listeners: the caps bound the whole server.
        let count = Arc::new(Mutex::new(ConnCount::default()));
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let mut loops = tokio::task::JoinSet::new();
        for (kind, l) in listeners {
            loops.spawn(accept_loop(
                l,
                kind,
                state.clone(),
                count.clone(),
                stop_rx.clone(),
            ));
        }
        drop(state);
        let _ = rx.await;
        sweeper.abort();
        let _ = stop_tx.send(true);
        while loops.join_next().await.is_some() {}
    });
    Ok(RunningServer {
        addr,
        cdn_addr,
        s3_addr,
        stop: Some(tx),
        task,
        faults,
    })
}

fn base_url(h: &HeaderMap) -> String {
    let host = h
        .get("host")
        .and_then(|v| v.to_str().ok())
        .filter(|h| {
            h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'))
        })
        .unwrap_or("127.0.0.1");
    format!("http://{host}")
}

/// `http://HOST:port`: the host the client named (as in [`base_url`]) with
/// another of this server's ports, for the URLs of strict mode's CDN and S3
/// listeners (bound on the Hub listener's IP).
fn sibling_url(h: &HeaderMap, port: u16) -> String {
    let base = base_url(h);
    let host = base.trim_start_matches("http://");
    let name = match host.strip_prefix('[') {
        Some(rest) => format!("[{}]", rest.split(']').next().unwrap_or("")),
        None => host.split(':').next().unwrap_or("127.0.0.1").to_string(),
    };
    format!("http://{name}:{port}")
}

fn query_param(uri: &Uri, key: &str) -> Option<String> {
    uri.query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == key).then(|| decode(&v.replace('+', " ")).unwrap_or_default())
    })
}

fn route_error(e: RouteError) -> Resp {
    match e {
        RouteError::NoEndpoint => error(StatusCode::NOT_FOUND, None, "no such endpoint"),
        RouteError::BadPath => error(StatusCode::BAD_REQUEST, None, "bad request path"),
        RouteError::Repo => repo_not_found(),
        RouteError::Revision(r) => rev_not_found(&r),
        RouteError::Path(p) => error(
            StatusCode::NOT_FOUND,
            Some("EntryNotFound"),
            &format!("{p:?} is not a valid file path"),
        ),
        RouteError::Branch(b) => error(
            StatusCode::BAD_REQUEST,
            None,
            &format!("invalid branch name {b:?}"),
        ),
        RouteError::Ticket => error(StatusCode::FORBIDDEN, None, "bad upload ticket"),
        RouteError::Part => error(StatusCode::BAD_REQUEST, None, "bad part number"),
    }
}

/// The 429 the [`Faults::rate_limit`] hook asks for, if it does.
fn rate_limit_fault(st: &State) -> Option<Resp> {
    let mut f = st
        .opts
        .faults
        .rate_limit
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let (n, t) = f.as_mut()?;
    if *n == 0 {
        return None;
    }
    *n -= 1;
    let mut r = error(
        StatusCode::TOO_MANY_REQUESTS,
        None,
        "rate limited (test hook)",
    );
    if let Ok(v) = HeaderValue::from_str(&format!("\"api\";r=0;t={t}")) {
        r.headers_mut().insert("ratelimit", v);
    }
    Some(r)
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A request on the Hub listener from `ip`: through the rate limit (when
/// set) unless it is an upload URL's, then answered.
async fn handle(
    st: Arc<State>,
    ip: IpAddr,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Resp {
    let route = Route::parse(method.as_str(), uri.path());
    let upload_url = matches!(
        route,
        Ok(Route::LfsPut(_) | Route::LfsPart(..) | Route::LfsComplete(_) | Route::LfsVerify(_))
    );
    let verdict = match &st.limiter {
        Some(l) if !upload_url => Some(l.check(ip, std::time::Instant::now())),
        _ => None,
    };
    let mut r = match (verdict, &st.limiter) {
        (Some(ratelimit::Verdict::Limited { reset }), Some(l)) => {
            let rule = l.rule();
            let mut r = error(
                StatusCode::TOO_MANY_REQUESTS,
                None,
                &format!(
                    "Too Many Requests: over the limit of {} API requests every {} s; \
                     the window resets in {reset} s (see the RateLimit header)",
                    rule.requests,
                    rule.window_secs()
                ),
            );
            // The body is not read: the connection cannot be reused.
            if body::content_length(&headers).is_some_and(|n| n > 0)
                || headers.contains_key("transfer-encoding")
            {
                r.headers_mut()
                    .insert("connection", HeaderValue::from_static("close"));
            }
            r
        }
        _ => match route {
            Ok(route) => dispatch(&st, route, uri, headers, body).await,
            Err(e) => route_error(e),
        },
    };
    if let (Some(v), Some(l)) = (verdict, &st.limiter) {
        if let Ok(x) = HeaderValue::from_str(&v.header()) {
            r.headers_mut().insert("ratelimit", x);
        }
        if let Ok(x) = HeaderValue::from_str(&l.rule().policy()) {
            r.headers_mut().insert("ratelimit-policy", x);
        }
    }
    r
}

async fn dispatch(st: &Arc<State>, route: Route, uri: Uri, headers: HeaderMap, body: Body) -> Resp {
    if st.opts.strict && matches!(route, Route::LfsPut(_) | Route::LfsPart(..)) {
        return error(
            StatusCode::NOT_FOUND,
            None,
            "strict mode: objects are uploaded to the S3 URLs the LFS batch API answers",
        );
    }
    let st = st.clone();
    let access = match st.access(&headers) {
        Ok(a) => a,
        Err(r) => return r,
    };
    if let Some(r) = rate_limit_fault(&st) {
        return r;
    }
    match route {
        Route::WhoAmI => write::whoami(&st, access),
        Route::CreateRepo => write::create(&st, access, &headers, body).await,
        Route::ValidateYaml => json_resp(StatusCode::OK, &json!({"errors": [], "warnings": []})),
        Route::Info { repo, rev } => read::info(&st, access, &repo, &rev),
        Route::Refs { repo } => read::refs(&st, access, &repo, &uri),
        Route::Tree { repo, rev, prefix } => {
            read::tree(&st, access, &headers, &uri, &repo, &rev, prefix.as_ref())
        }
        Route::Preupload { repo, rev } => {
            write::preupload(&st, access, &headers, &repo, &rev, body).await
        }
        Route::CreateBranch { repo, branch } => {
            write::create_branch(&st, access, &headers, &repo, &branch, body).await
        }
        Route::DeleteBranch { repo, branch } => write::delete_branch(&st, access, &repo, &branch),
        Route::Commit { repo, rev } => {
            write::commit(&st, access, &headers, &repo, &rev, body).await
        }
        Route::LfsBatch { repo } => lfs::batch(&st, access, &headers, &repo, body).await,
        Route::Resolve {
            repo,
            rev,
            path,
            head,
        } => read::resolve(&st, access, &headers, head, &repo, &rev, &path).await,
        Route::LfsPut(t) => match verify_ticket(&st, &t) {
            Ok(t) => lfs::put(&st, &t, &headers, body).await,
            Err(r) => r,
        },
        Route::LfsPart(t, n) => match verify_ticket(&st, &t) {
            Ok(t) => lfs::part(&st, &t, n, &headers, body).await,
            Err(r) => r,
        },
        Route::LfsComplete(t) => match verify_ticket(&st, &t) {
            Ok(t) => lfs::complete(&st, &t, &headers, body).await,
            Err(r) => r,
        },
        Route::LfsVerify(t) => match verify_ticket(&st, &t) {
            Ok(t) => lfs::verify(&st, &t, &headers, body).await,
            Err(r) => r,
        },
    }
}
