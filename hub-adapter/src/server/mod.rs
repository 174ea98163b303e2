//! A Hub-compatible HTTP server over a local [`Store`].
//!
//! It answers what `huggingface_hub` and this crate's client use: revision
//! info, tree listing, `resolve` (HEAD/GET with `Range`), repo creation,
//! `validate-yaml`, preupload, the LFS batch API (basic and multipart
//! transfers, verify) and the NDJSON commit API. A repo whose commit holds a
//! `brevis.manifest.json` is also served as its *source* repo, decoded on the
//! fly, so stock clients download the original files from compressed storage.

// Handlers return a finished error `Response` as their `Err` to leave early;
// it is large, but it is the value sent, so boxing it buys nothing.
#![allow(clippy::result_large_err)]

pub mod store;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, Method, Response, StatusCode, Uri};
use base64::Engine as _;
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _, AsyncWriteExt as _};

use crate::error::{HubError, Result};
use crate::manifest::{Encoding, MANIFEST_NAME, Manifest};
use crate::paths::{check_repo_id, check_repo_path, decode, encode, is_commit_id};
use store::Commit;
pub use store::{FileRec, Store};

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
    /// Test hooks.
    pub faults: Arc<Faults>,
}

impl ServerOptions {
    /// Defaults for a store at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ServerOptions {
            root: root.into(),
            tokens: Vec::new(),
            read_tokens: Vec::new(),
            tree_page_size: 1000,
            multipart_threshold: 64 << 20,
            multipart_chunk: 16 << 20,
            header_read_timeout: HEADER_READ_TIMEOUT,
            faults: Arc::new(Faults::default()),
        }
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
}

struct State {
    store: Store,
    opts: ServerOptions,
    secret: Vec<u8>,
    write_lock: Mutex<()>,
}

/// A server running on a tokio runtime.
pub struct RunningServer {
    addr: SocketAddr,
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

/// Bind `addr` (port 0 picks one) and serve in a tokio task.
pub async fn start(opts: ServerOptions, addr: SocketAddr) -> Result<RunningServer> {
    let store = Store::open(&opts.root)?;
    let secret = store.secret()?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| HubError::io(PathBuf::from(addr.to_string()), e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| HubError::io(PathBuf::from(addr.to_string()), e))?;
    let faults = opts.faults.clone();
    let header_timeout = opts.header_read_timeout;
    let state = Arc::new(State {
        store,
        opts,
        secret,
        write_lock: Mutex::new(()),
    });
    let app = axum::Router::new().fallback(
        move |method: Method, uri: Uri, headers: HeaderMap, body: Body| {
            let st = state.clone();
            async move { handle(st, method, uri, headers, body).await }
        },
    );
    let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
    // hyper's own loop rather than `axum::serve`, which sets no timer and so
    // no header-read timeout: a client that opens connections and never
    // finishes its headers (slowloris) would hold them forever.
    let task = tokio::spawn(async move {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let stream = tokio::select! {
                r = listener.accept() => match r {
                    Ok((s, _)) => s,
                    // E.g. out of file descriptors: wait, then go on.
                    Err(_) => {
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                },
                _ = &mut rx => break,
                Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            };
            let svc = hyper_util::service::TowerToHyperService::new(app.clone());
            let mut stop = stop_rx.clone();
            conns.spawn(async move {
                let mut b = hyper::server::conn::http1::Builder::new();
                b.timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(header_timeout);
                let conn = b
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .with_upgrades();
                let mut conn = std::pin::pin!(conn);
                tokio::select! {
                    _ = conn.as_mut() => return,
                    _ = stop.changed() => {}
                }
                // Stopping: an idle connection closes now, a request in
                // flight is answered first.
                conn.as_mut().graceful_shutdown();
                let _ = conn.await;
            });
        }
        let _ = stop_tx.send(true);
        // Stop: requests in flight get a moment to finish.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            while conns.join_next().await.is_some() {}
        })
        .await;
        conns.abort_all();
    });
    Ok(RunningServer {
        addr,
        stop: Some(tx),
        task,
        faults,
    })
}

type Resp = Response<Body>;

/// `x-error-code` of a 500 for a file whose stored object is missing or of
/// the wrong size: retrying will not help (clients need not).
pub const STORE_DAMAGED: &str = "StoreDamaged";

fn error(status: StatusCode, code: Option<&str>, msg: &str) -> Resp {
    let mut r = Response::builder()
        .status(status)
        .header("content-type", "application/json");
    if let Some(c) = code {
        r = r.header("x-error-code", c);
    }
    if let Ok(v) = HeaderValue::from_str(msg) {
        r = r.header("x-error-message", v);
    }
    r.body(Body::from(json!({"error": msg}).to_string()))
        .unwrap_or_default()
}

fn json_resp(status: StatusCode, v: &Value) -> Resp {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(v.to_string()))
        .unwrap_or_default()
}

fn internal(e: HubError) -> Resp {
    error(StatusCode::INTERNAL_SERVER_ERROR, None, &e.to_string())
}

fn repo_not_found() -> Resp {
    error(
        StatusCode::NOT_FOUND,
        Some("RepoNotFound"),
        "Repository not found",
    )
}

#[derive(PartialEq, PartialOrd, Clone, Copy)]
enum Access {
    Anonymous,
    Read,
    Write,
}

impl State {
    fn access(&self, h: &HeaderMap) -> std::result::Result<Access, Resp> {
        let open = self.opts.tokens.is_empty() && self.opts.read_tokens.is_empty();
        let tok = h
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or(v.strip_prefix("bearer ")))
            .map(str::trim);
        match tok {
            _ if open => Ok(Access::Write),
            None => Ok(Access::Anonymous),
            Some(t) if self.opts.tokens.iter().any(|x| x == t) => Ok(Access::Write),
            Some(t) if self.opts.read_tokens.iter().any(|x| x == t) => Ok(Access::Read),
            Some(_) => Err(error(
                StatusCode::UNAUTHORIZED,
                None,
                "Invalid credentials in Authorization header",
            )),
        }
    }

    fn ticket(&self, oid: &str) -> String {
        let mut h = Sha256::new();
        h.update(&self.secret);
        h.update(oid.as_bytes());
        hex::encode(h.finalize())[..32].to_string()
    }
}

fn base_url(h: &HeaderMap) -> String {
    let host = h
        .get("host")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("127.0.0.1");
    format!("http://{host}")
}

fn query_param(uri: &Uri, key: &str) -> Option<String> {
    uri.query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == key).then(|| decode(&v.replace('+', " ")).unwrap_or_default())
    })
}

async fn read_body(body: Body, limit: usize) -> std::result::Result<Bytes, Resp> {
    axum::body::to_bytes(body, limit).await.map_err(|_| {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            None,
            "request body too large or broken",
        )
    })
}

async fn handle(st: Arc<State>, method: Method, uri: Uri, headers: HeaderMap, body: Body) -> Resp {
    let raw: Vec<&str> = uri.path().trim_start_matches('/').split('/').collect();
    let mut seg = Vec::with_capacity(raw.len());
    for s in &raw {
        match decode(s) {
            Some(d) => seg.push(d),
            None => return error(StatusCode::BAD_REQUEST, None, "bad percent-encoding"),
        }
    }
    let access = match st.access(&headers) {
        Ok(a) => a,
        Err(r) => return r,
    };
    let s: Vec<&str> = seg.iter().map(String::as_str).collect();
    let m = &method;
    match s.as_slice() {
        ["api", "whoami-v2"] if m == Method::GET => whoami(&st, access),
        ["api", "repos", "create"] if m == Method::POST => {
            create(&st, access, &headers, body).await
        }
        ["api", "validate-yaml"] if m == Method::POST => {
            json_resp(StatusCode::OK, &json!({"errors": [], "warnings": []}))
        }
        ["api", "models", org, name] if m == Method::GET => {
            info(&st, access, &format!("{org}/{name}"), "main")
        }
        ["api", "models", org, name, "revision", rev @ ..]
            if m == Method::GET && !rev.is_empty() =>
        {
            info(&st, access, &format!("{org}/{name}"), &rev.join("/"))
        }
        ["api", "models", org, name, "refs"] if m == Method::GET => {
            refs(&st, access, &format!("{org}/{name}"), &uri)
        }
        ["api", "models", org, name, "tree", rev, path @ ..] if m == Method::GET => tree(
            &st,
            access,
            &headers,
            &uri,
            &format!("{org}/{name}"),
            rev,
            &path.join("/"),
        ),
        ["api", "models", org, name, "preupload", rev @ ..] if m == Method::POST => {
            preupload(&st, access, &format!("{org}/{name}"), &rev.join("/"), body).await
        }
        ["api", "models", org, name, "branch", branch @ ..]
            if m == Method::POST && !branch.is_empty() =>
        {
            create_branch(
                &st,
                access,
                &format!("{org}/{name}"),
                &branch.join("/"),
                body,
            )
            .await
        }
        ["api", "models", org, name, "commit", rev @ ..] if m == Method::POST => {
            commit(
                &st,
                access,
                &headers,
                &format!("{org}/{name}"),
                &rev.join("/"),
                body,
            )
            .await
        }
        [org, name_git, "info", "lfs", "objects", "batch"] if m == Method::POST => {
            match name_git.strip_suffix(".git") {
                Some(name) => batch(&st, access, &headers, &format!("{org}/{name}"), body).await,
                None => error(StatusCode::NOT_FOUND, None, "not found"),
            }
        }
        [org, name, "resolve", rev, path @ ..]
            if (m == Method::GET || m == Method::HEAD) && !path.is_empty() =>
        {
            resolve(
                &st,
                access,
                &headers,
                m == Method::HEAD,
                &format!("{org}/{name}"),
                rev,
                &path.join("/"),
            )
            .await
        }
        ["lfs-upload", oid, ticket] if m == Method::PUT => {
            if st.ticket(oid) != *ticket {
                return error(StatusCode::FORBIDDEN, None, "bad upload ticket");
            }
            let size = query_param(&uri, "size").and_then(|s| s.parse().ok());
            lfs_put(&st, oid, size, body).await
        }
        ["lfs-upload", oid, ticket, "part", n] if m == Method::PUT => {
            if st.ticket(oid) != *ticket {
                return error(StatusCode::FORBIDDEN, None, "bad upload ticket");
            }
            lfs_part(&st, oid, n, body).await
        }
        ["lfs-upload", oid, ticket] if m == Method::POST => {
            if st.ticket(oid) != *ticket {
                return error(StatusCode::FORBIDDEN, None, "bad upload ticket");
            }
            let size = query_param(&uri, "size").and_then(|s| s.parse().ok());
            lfs_complete(&st, oid, size, body).await
        }
        ["lfs-verify", oid, ticket] if m == Method::POST => {
            if st.ticket(oid) != *ticket {
                return error(StatusCode::FORBIDDEN, None, "bad upload ticket");
            }
            lfs_verify(&st, oid, body).await
        }
        _ => error(StatusCode::NOT_FOUND, None, "no such endpoint"),
    }
}

fn whoami(st: &State, access: Access) -> Resp {
    if access == Access::Anonymous && !(st.opts.tokens.is_empty() && st.opts.read_tokens.is_empty())
    {
        return error(
            StatusCode::UNAUTHORIZED,
            None,
            "Invalid credentials in Authorization header",
        );
    }
    let role = if access == Access::Write {
        "write"
    } else {
        "read"
    };
    json_resp(
        StatusCode::OK,
        &json!({"type": "user", "name": "local", "fullname": "local", "orgs": [],
                "auth": {"type": "access_token", "accessToken": {"displayName": "local", "role": role}}}),
    )
}

fn need_write(access: Access) -> Option<Resp> {
    match access {
        Access::Write => None,
        Access::Read => Some(error(
            StatusCode::FORBIDDEN,
            None,
            "this token may only read",
        )),
        Access::Anonymous => Some(error(
            StatusCode::UNAUTHORIZED,
            None,
            "a write token is required",
        )),
    }
}

async fn create(st: &State, access: Access, h: &HeaderMap, body: Body) -> Resp {
    if let Some(r) = need_write(access) {
        return r;
    }
    let b = match read_body(body, 1 << 20).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
    let name = v.get("name").and_then(Value::as_str).unwrap_or("");
    let org = v
        .get("organization")
        .and_then(Value::as_str)
        .filter(|o| !o.is_empty())
        .unwrap_or("local");
    if let Some(t) = v.get("type").and_then(Value::as_str)
        && t != "model"
    {
        return error(StatusCode::BAD_REQUEST, None, "only model repos are served");
    }
    let repo = format!("{org}/{name}");
    if check_repo_id(&repo).is_err() {
        return error(StatusCode::BAD_REQUEST, None, "invalid repo name");
    }
    let private = v.get("private").and_then(Value::as_bool).unwrap_or(false)
        || v.get("visibility").and_then(Value::as_str) == Some("private");
    let url = format!("{}/{}", base_url(h), repo);
    let _g = st.write_lock.lock();
    match st.store.create_repo(&repo, private) {
        Ok(true) => json_resp(
            StatusCode::OK,
            &json!({"url": url, "name": repo, "id": repo}),
        ),
        Ok(false) => {
            let mut r = error(
                StatusCode::CONFLICT,
                None,
                "You already created this model repo",
            );
            *r.body_mut() = Body::from(
                json!({"error": "You already created this model repo", "url": url}).to_string(),
            );
            r
        }
        Err(e) => internal(e),
    }
}

/// One file as served (stored or decoded from a mirror).
struct ViewFile {
    rec: FileRec,
    /// Object to stream, or archive object to decode.
    object: String,
    decode: bool,
}

struct View {
    repo: String,
    sha: String,
    private: bool,
    time: u64,
    files: BTreeMap<String, ViewFile>,
    /// The mirror a source served decoded comes from (said to clients in
    /// [`DECODED_FROM`]: its listing is that mirror's word, not a source's).
    decoded_from: Option<String>,
}

/// Header on a decoded source's answers naming the mirror they come from,
/// so that a client checking a mirror against its source knows there is
/// no source here to check against.
pub const DECODED_FROM: &str = "x-brevis-decoded-from";

/// Where `repo`'s files come from, once the caller may see it.
enum Served {
    /// Its own commits in the store.
    Stored {
        /// Private repo.
        private: bool,
    },
    /// A mirror's archives, decoded on the fly: the mirror's `main` and its
    /// manifest, whose source is `repo`.
    Decoded {
        private: bool,
        mirror_repo: String,
        mirror: Box<Commit>,
        manifest: Box<Manifest>,
    },
}

/// Find where `repo` is served from (404 when it is not, or the caller may
/// not see it).
fn served(st: &State, access: Access, repo: &str) -> std::result::Result<Served, Resp> {
    if check_repo_id(repo).is_err() {
        return Err(repo_not_found());
    }
    let hidden =
        |private: bool| private && access == Access::Anonymous && !st.opts.tokens.is_empty();
    if let Some(private) = st.store.repo_private(repo) {
        if hidden(private) {
            return Err(repo_not_found());
        }
        return Ok(Served::Stored { private });
    }
    // A source name that is a stored repo's in another case is not served
    // decoded: a mirror naming `ORG/model` would stand for `org/model`
    // where the HF cache's folders are case-insensitive (macOS).
    if st.store.stored_in_other_case(repo) {
        return Err(repo_not_found());
    }
    let mirror = st.store.mirror_of(repo).ok_or_else(repo_not_found)?;
    let private = st.store.repo_private(&mirror).ok_or_else(repo_not_found)?;
    if hidden(private) {
        return Err(repo_not_found());
    }
    let c = st
        .store
        .resolve(&mirror, "main")
        .map_err(internal)?
        .ok_or_else(repo_not_found)?;
    let mrec = c.files.get(MANIFEST_NAME).ok_or_else(repo_not_found)?;
    let text = std::fs::read(st.store.object_path(&mrec.sha256))
        .map_err(|e| internal(HubError::io(MANIFEST_NAME, e)))?;
    let manifest = Manifest::from_json(&text, &mirror).map_err(internal)?;
    if manifest.source.repo != repo {
        return Err(repo_not_found());
    }
    Ok(Served::Decoded {
        private,
        mirror_repo: mirror,
        mirror: Box::new(c),
        manifest: Box::new(manifest),
    })
}

/// The branches a decoded source repo answers to: `main` and the revision
/// it was mirrored from (unless that is a commit id), all at its commit.
fn decoded_branches(man: &Manifest) -> Vec<(String, String)> {
    let mut names = vec!["main".to_string()];
    if !is_commit_id(&man.source.revision) && man.source.revision != "main" {
        names.push(man.source.revision.clone());
    }
    names.sort();
    names
        .into_iter()
        .map(|n| (n, man.source.commit.clone()))
        .collect()
}

/// Find what to serve for `repo` at `rev`.
fn view(st: &State, access: Access, repo: &str, rev: &str) -> std::result::Result<View, Resp> {
    let rev_missing = || {
        error(
            StatusCode::NOT_FOUND,
            Some("RevisionNotFound"),
            &format!("Invalid rev id: {rev}"),
        )
    };
    let (private, mirror_repo, c, man) = match served(st, access, repo)? {
        Served::Stored { private } => {
            let c = st
                .store
                .resolve(repo, rev)
                .map_err(internal)?
                .ok_or_else(rev_missing)?;
            let files = c
                .files
                .into_iter()
                .map(|(p, rec)| {
                    let object = rec.sha256.clone();
                    (
                        p,
                        ViewFile {
                            rec,
                            object,
                            decode: false,
                        },
                    )
                })
                .collect();
            return Ok(View {
                repo: repo.into(),
                sha: c.oid,
                private,
                time: c.time,
                files,
                decoded_from: None,
            });
        }
        Served::Decoded {
            private,
            mirror_repo,
            mirror,
            manifest,
        } => (private, mirror_repo, mirror, manifest),
    };
    if rev != man.source.revision && rev != man.source.commit && rev != "main" {
        return Err(rev_missing());
    }
    let mut files = BTreeMap::new();
    for f in &man.files {
        let Some(stored) = c.files.get(&f.archive) else {
            continue;
        };
        let git_oid = f.git_oid.clone();
        files.insert(
            f.path.clone(),
            ViewFile {
                rec: FileRec {
                    size: f.size,
                    sha256: f.sha256.clone(),
                    git_oid,
                    lfs: f.lfs,
                },
                object: stored.sha256.clone(),
                decode: f.encoding == Encoding::Brv,
            },
        );
    }
    Ok(View {
        repo: repo.into(),
        sha: man.source.commit,
        private,
        time: c.time,
        files,
        decoded_from: Some(mirror_repo),
    })
}

/// `r` with [`DECODED_FROM`] when `v` is a source served decoded.
fn mark_decoded(mut r: Resp, v: &View) -> Resp {
    if let Some(m) = v
        .decoded_from
        .as_deref()
        .and_then(|m| HeaderValue::from_str(m).ok())
    {
        r.headers_mut().insert(DECODED_FROM, m);
    }
    r
}

/// `GET /api/models/{repo}/refs` (`huggingface_hub`'s `list_repo_refs`):
/// the branches and the commits they point at; no tags or converts here,
/// and `pullRequests` (none) when asked for with `include_prs`.
fn refs(st: &State, access: Access, repo: &str, uri: &Uri) -> Resp {
    let branches = match served(st, access, repo) {
        Ok(Served::Stored { .. }) => match st.store.branches(repo) {
            Ok(b) => b,
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

fn lfs_json(rec: &FileRec) -> Value {
    json!({"sha256": rec.sha256, "size": rec.size, "pointerSize": store::lfs_pointer(&rec.sha256, rec.size).len()})
}

fn info(st: &State, access: Access, repo: &str, rev: &str) -> Resp {
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
                s["lfs"] = lfs_json(&f.rec);
            }
            s
        })
        .collect();
    let t = iso_time(v.time);
    let author = v.repo.split('/').next().unwrap_or("");
    let r = json_resp(
        StatusCode::OK,
        &json!({
            "_id": v.sha, "id": v.repo, "modelId": v.repo, "author": author, "sha": v.sha,
            "lastModified": t, "createdAt": t, "private": v.private, "disabled": false,
            "gated": false, "downloads": 0, "likes": 0, "tags": [], "siblings": siblings,
            "spaces": [], "usedStorage": v.files.values().map(|f| f.rec.size).sum::<u64>(),
        }),
    );
    mark_decoded(r, &v)
}

fn tree(
    st: &State,
    access: Access,
    h: &HeaderMap,
    uri: &Uri,
    repo: &str,
    rev: &str,
    prefix: &str,
) -> Resp {
    let v = match view(st, access, repo, rev) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let recursive = query_param(uri, "recursive").is_some_and(|r| r == "true" || r == "1");
    let pre = if prefix.is_empty() {
        String::new()
    } else {
        format!("{prefix}/")
    };
    if !prefix.is_empty() && !v.files.keys().any(|p| p.starts_with(&pre)) {
        return error(
            StatusCode::NOT_FOUND,
            Some("EntryNotFound"),
            &format!("{prefix} does not exist"),
        );
    }
    let mut items: Vec<Value> = Vec::new();
    let mut dirs = std::collections::BTreeSet::new();
    for (p, f) in &v.files {
        let Some(rest) = p.strip_prefix(&pre) else {
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
            it["lfs"] = json!({"oid": f.rec.sha256, "size": f.rec.size, "pointerSize": store::lfs_pointer(&f.rec.sha256, f.rec.size).len()});
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
    let end = (start + page).min(items.len());
    let slice: Vec<Value> = items
        .get(start.min(items.len())..end)
        .unwrap_or(&[])
        .to_vec();
    let mut r = mark_decoded(json_resp(StatusCode::OK, &Value::Array(slice)), &v);
    if end < items.len() {
        let path_part = if prefix.is_empty() {
            String::new()
        } else {
            format!("/{}", encode(prefix, true))
        };
        let link = format!(
            "<{}/api/models/{}/tree/{}{}?recursive={}&expand=false&cursor={}>; rel=\"next\"",
            base_url(h),
            repo,
            encode(rev, false),
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
fn parse_range(h: &HeaderMap, size: u64) -> std::result::Result<Option<(u64, u64)>, ()> {
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

async fn resolve(
    st: &Arc<State>,
    access: Access,
    h: &HeaderMap,
    head: bool,
    repo: &str,
    rev: &str,
    path: &str,
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
    // The object must be there (and, stored as is, whole) before any header
    // goes out: a 200 with a content-length and then no body sends clients
    // into retries that end in "error decoding response body". A 500 names
    // the object instead.
    let obj = st.store.object_path(&f.object);
    match std::fs::metadata(&obj) {
        Ok(m) if m.is_file() && (f.decode || m.len() == size) => {}
        Ok(m) if m.is_file() => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                Some(STORE_DAMAGED),
                &format!(
                    "{path} at {rev}: its stored object {} is {} bytes, the tree records {size}: \
                     the store is damaged",
                    f.object,
                    m.len()
                ),
            );
        }
        // Not a 404: the file is in the tree (clients read a 404 as "no such
        // file", and a missing manifest as "not a mirror").
        _ => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                Some(STORE_DAMAGED),
                &format!(
                    "{path} at {rev}: its stored object {} is missing from the store",
                    f.object
                ),
            );
        }
    }
    let range = match parse_range(h, size) {
        Ok(r) => r,
        Err(()) => {
            return Response::builder()
                .status(StatusCode::RANGE_NOT_SATISFIABLE)
                .header("content-range", format!("bytes */{size}"))
                .header("x-repo-commit", &v.sha)
                .body(Body::empty())
                .unwrap_or_default();
        }
    };
    let (start, end) = range.unwrap_or((0, size.saturating_sub(1)));
    let len = if size == 0 { 0 } else { end - start + 1 };
    let mut r = Response::builder()
        .status(if range.is_some() {
            StatusCode::PARTIAL_CONTENT
        } else {
            StatusCode::OK
        })
        .header("x-repo-commit", &v.sha)
        .header("etag", format!("\"{}\"", f.rec.etag()))
        .header("accept-ranges", "bytes")
        .header("content-type", "application/octet-stream")
        .header("content-length", len.to_string())
        .header(
            "content-disposition",
            format!(
                "attachment; filename=\"{}\"",
                path.rsplit('/').next().unwrap_or(path).replace('"', "")
            ),
        );
    if f.rec.lfs {
        r = r
            .header("x-linked-etag", format!("\"{}\"", f.rec.sha256))
            .header("x-linked-size", size.to_string());
    }
    if range.is_some() {
        r = r.header("content-range", format!("bytes {start}-{end}/{size}"));
    }
    if head || len == 0 {
        return r.body(Body::empty()).unwrap_or_default();
    }
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
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(8);
    if f.decode {
        tokio::task::spawn_blocking(move || {
            let mut w = ChanWriter {
                tx: tx.clone(),
                skip: start,
                left: len,
            };
            let res = brevis_core::decompress_to(
                &obj,
                &mut w,
                &brevis_core::DecompressOptions::default().threads(1),
            );
            if let Err(e) = res
                && w.left > 0
            {
                let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
            }
        });
    } else {
        tokio::spawn(async move {
            let res: std::io::Result<()> = async {
                let mut file = tokio::fs::File::open(&obj).await?;
                file.seek(std::io::SeekFrom::Start(start)).await?;
                let mut left = len;
                let mut buf = vec![0u8; 256 << 10];
                while left > 0 {
                    let want = (buf.len() as u64).min(left) as usize;
                    let n = file.read(&mut buf[..want]).await?;
                    if n == 0 {
                        return Err(std::io::Error::other("object shorter than recorded"));
                    }
                    left -= n as u64;
                    if tx
                        .send(Ok(Bytes::copy_from_slice(&buf[..n])))
                        .await
                        .is_err()
                    {
                        return Ok(());
                    }
                }
                Ok(())
            }
            .await;
            if let Err(e) = res {
                let _ = tx.send(Err(e)).await;
            }
        });
    }
    let faults = st.opts.faults.clone();
    let mut sent = 0u64;
    let stream = tokio_stream_from(rx).map(move |item| {
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
    // After the cut point, end the body with an error so the connection drops.
    let stream = stream.scan(false, |failed, item| {
        if *failed {
            return futures_util::future::ready(None);
        }
        if item.is_err() {
            *failed = true;
        }
        futures_util::future::ready(Some(item))
    });
    r.body(Body::from_stream(stream)).unwrap_or_default()
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>,
) -> impl futures_util::Stream<Item = std::io::Result<Bytes>> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// Sends decoded bytes `[skip, skip+left)` to a channel.
struct ChanWriter {
    tx: tokio::sync::mpsc::Sender<std::io::Result<Bytes>>,
    skip: u64,
    left: u64,
}

impl std::io::Write for ChanWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut b = buf;
        if self.skip > 0 {
            let s = (self.skip as usize).min(b.len());
            self.skip -= s as u64;
            b = &b[s..];
        }
        let take = (self.left as usize).min(b.len());
        if take > 0 {
            self.tx
                .blocking_send(Ok(Bytes::copy_from_slice(&b[..take])))
                .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "client gone"))?;
            self.left -= take as u64;
        }
        if self.left == 0 && self.skip == 0 {
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

fn writable(st: &State, access: Access, repo: &str, rev: &str) -> std::result::Result<(), Resp> {
    if let Some(r) = need_write(access) {
        return Err(r);
    }
    if check_repo_id(repo).is_err() || st.store.repo_private(repo).is_none() {
        return Err(repo_not_found());
    }
    match st.store.head(repo, rev) {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(error(
            StatusCode::NOT_FOUND,
            Some("RevisionNotFound"),
            &format!("Invalid rev id: {rev}"),
        )),
        Err(e) => Err(internal(e)),
    }
}

/// `POST /api/models/{repo}/branch/{branch}` (`huggingface_hub`'s
/// `create_branch`): a new branch at `startingPoint` (default `main`); 409
/// if it exists.
async fn create_branch(st: &State, access: Access, repo: &str, branch: &str, body: Body) -> Resp {
    if let Some(r) = need_write(access) {
        return r;
    }
    if check_repo_id(repo).is_err() || st.store.repo_private(repo).is_none() {
        return repo_not_found();
    }
    if crate::paths::check_revision(branch).is_err()
        || is_commit_id(branch)
        || branch.starts_with("refs/")
    {
        return error(
            StatusCode::BAD_REQUEST,
            None,
            &format!("invalid branch name {branch:?}"),
        );
    }
    let b = match read_body(body, 64 << 10).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
    let start = v
        .get("startingPoint")
        .and_then(Value::as_str)
        .unwrap_or("main")
        .to_string();
    let _g = st.write_lock.lock().unwrap_or_else(|p| p.into_inner());
    match st.store.head(repo, branch) {
        Ok(None) => {}
        Ok(Some(_)) => {
            return error(
                StatusCode::CONFLICT,
                None,
                &format!("branch {branch} already exists"),
            );
        }
        Err(e) => return internal(e),
    }
    let from = match st.store.resolve(repo, &start) {
        Ok(Some(c)) => c,
        Ok(None) => {
            return error(
                StatusCode::NOT_FOUND,
                Some("RevisionNotFound"),
                &format!("Invalid rev id: {start}"),
            );
        }
        Err(e) => return internal(e),
    };
    match st.store.set_head(repo, branch, &from.oid) {
        Ok(()) => json_resp(StatusCode::OK, &json!({})),
        Err(e) => internal(e),
    }
}

async fn preupload(st: &State, access: Access, repo: &str, rev: &str, body: Body) -> Resp {
    if let Err(r) = writable(st, access, repo, rev) {
        return r;
    }
    let b = match read_body(body, 64 << 20).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
    let Some(files) = v.get("files").and_then(Value::as_array) else {
        return error(StatusCode::BAD_REQUEST, None, "expected {\"files\": [...]}");
    };
    let head = st.store.resolve(repo, rev).ok().flatten();
    let mut out = Vec::new();
    for f in files {
        let path = f.get("path").and_then(Value::as_str).unwrap_or("");
        if check_repo_path(path).is_err() {
            return error(
                StatusCode::BAD_REQUEST,
                None,
                &format!("invalid path {path:?}"),
            );
        }
        let size = f.get("size").and_then(Value::as_u64).unwrap_or(0);
        let sample = f
            .get("sample")
            .and_then(Value::as_str)
            .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
            .unwrap_or_default();
        let lfs = store::wants_lfs(path, size, &sample);
        let mut a = json!({"path": path, "uploadMode": if lfs {"lfs"} else {"regular"}, "shouldIgnore": false});
        if let Some(rec) = head.as_ref().and_then(|c| c.files.get(path)) {
            a["oid"] = json!(rec.git_oid);
        }
        out.push(a);
    }
    json_resp(
        StatusCode::OK,
        &json!({"files": out, "commitOid": head.map(|c| c.oid)}),
    )
}

async fn batch(st: &State, access: Access, h: &HeaderMap, repo: &str, body: Body) -> Resp {
    if let Some(r) = need_write(access) {
        return r;
    }
    if check_repo_id(repo).is_err() || st.store.repo_private(repo).is_none() {
        return repo_not_found();
    }
    let b = match read_body(body, 16 << 20).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
    if v.get("operation").and_then(Value::as_str) != Some("upload") {
        return error(
            StatusCode::BAD_REQUEST,
            None,
            "only the upload operation is served",
        );
    }
    let base = base_url(h);
    let mut out = Vec::new();
    for o in v
        .get("objects")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let oid = o
            .get("oid")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_ascii_lowercase();
        let size = o.get("size").and_then(Value::as_u64).unwrap_or(0);
        if oid.len() != 64 || !oid.bytes().all(|c| c.is_ascii_hexdigit()) {
            out.push(
                json!({"oid": oid, "size": size, "error": {"code": 422, "message": "invalid oid"}}),
            );
            continue;
        }
        if st.store.has_object(&oid, size) {
            out.push(json!({"oid": oid, "size": size}));
            continue;
        }
        let t = st.ticket(&oid);
        let upload_url = format!("{base}/lfs-upload/{oid}/{t}?size={size}");
        let verify = json!({"href": format!("{base}/lfs-verify/{oid}/{t}")});
        let upload = if size > st.opts.multipart_threshold {
            let chunk = st.opts.multipart_chunk;
            let mut header = serde_json::Map::new();
            header.insert("chunk_size".into(), json!(chunk.to_string()));
            for n in 1..=size.div_ceil(chunk) {
                header.insert(
                    n.to_string(),
                    json!(format!("{base}/lfs-upload/{oid}/{t}/part/{n}")),
                );
            }
            json!({"href": upload_url, "header": header, "expires_in": 86400})
        } else {
            json!({"href": upload_url, "expires_in": 86400})
        };
        out.push(json!({"oid": oid, "size": size, "authenticated": true, "actions": {"upload": upload, "verify": verify}}));
    }
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/vnd.git-lfs+json")
        .body(Body::from(
            json!({"transfer": "basic", "objects": out, "hash_algo": "sha256"}).to_string(),
        ))
        .unwrap_or_default()
}

fn take_put_budget(st: &State) -> bool {
    let b = st
        .opts
        .faults
        .lfs_put_budget
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    // Reserve a slot first, so concurrent uploads cannot all slip through.
    let before = st.opts.faults.lfs_puts.fetch_add(1, Ordering::SeqCst);
    match *b {
        Some(n) => before < n,
        None => true,
    }
}

/// Stream a request body into a temp file, hashing it.
async fn body_to_tmp(
    st: &State,
    body: Body,
) -> std::result::Result<(tempfile::TempPath, u64, String), Resp> {
    let tmp = tempfile::NamedTempFile::new_in(st.store.tmp_dir())
        .map_err(|e| internal(HubError::io(st.store.tmp_dir(), e)))?;
    let (f, path) = tmp.into_parts();
    let mut f = tokio::fs::File::from_std(f);
    let mut sha = Sha256::new();
    let mut n = 0u64;
    let mut s = body.into_data_stream();
    while let Some(c) = s.next().await {
        let c = c.map_err(|_| error(StatusCode::BAD_REQUEST, None, "upload body broken"))?;
        sha.update(&c);
        n += c.len() as u64;
        f.write_all(&c)
            .await
            .map_err(|e| internal(HubError::io(&*path, e)))?;
    }
    f.flush()
        .await
        .map_err(|e| internal(HubError::io(&*path, e)))?;
    Ok((path, n, hex::encode(sha.finalize())))
}

async fn lfs_put(st: &State, oid: &str, size: Option<u64>, body: Body) -> Resp {
    if !take_put_budget(st) {
        return error(StatusCode::BAD_REQUEST, None, "upload refused by test hook");
    }
    let (tmp, n, sha) = match body_to_tmp(st, body).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    if sha != oid || size.is_some_and(|s| s != n) {
        return error(
            StatusCode::BAD_REQUEST,
            None,
            "content does not match the oid or size",
        );
    }
    let p = match tmp.keep() {
        Ok(p) => p,
        Err(e) => return internal(HubError::io(st.store.tmp_dir(), e.error)),
    };
    if let Err(e) = st.store.put_object_file(&p, oid) {
        return internal(e);
    }
    st.opts.faults.lfs_puts.fetch_add(1, Ordering::SeqCst);
    Response::builder()
        .status(StatusCode::OK)
        .body(Body::empty())
        .unwrap_or_default()
}

async fn lfs_part(st: &State, oid: &str, n: &str, body: Body) -> Resp {
    let Ok(n) = n.parse::<u64>() else {
        return error(StatusCode::BAD_REQUEST, None, "bad part number");
    };
    if !take_put_budget(st) {
        return error(StatusCode::BAD_REQUEST, None, "upload refused by test hook");
    }
    let (tmp, _, sha) = match body_to_tmp(st, body).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let dir = st.store.tmp_dir().join(format!("parts-{oid}"));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return internal(HubError::io(dir, e));
    }
    if let Err(e) = tmp.persist(dir.join(format!("{n:08}"))) {
        return internal(HubError::io(dir, e.error));
    }
    Response::builder()
        .status(StatusCode::OK)
        .header("etag", format!("\"{sha}\""))
        .body(Body::empty())
        .unwrap_or_default()
}

async fn lfs_complete(st: &State, oid: &str, size: Option<u64>, body: Body) -> Resp {
    let b = match read_body(body, 16 << 20).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
    let parts = v
        .get("parts")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let dir = st.store.tmp_dir().join(format!("parts-{oid}"));
    let store = st.store.clone();
    let oid = oid.to_string();
    let res = tokio::task::spawn_blocking(move || -> std::result::Result<(), String> {
        let mut tmp =
            tempfile::NamedTempFile::new_in(store.tmp_dir()).map_err(|e| e.to_string())?;
        let mut sha = Sha256::new();
        let mut total = 0u64;
        for (i, p) in parts.iter().enumerate() {
            let n = p.get("partNumber").and_then(Value::as_u64).unwrap_or(0);
            if n != i as u64 + 1 {
                return Err("parts out of order".into());
            }
            let data =
                std::fs::read(dir.join(format!("{n:08}"))).map_err(|e| format!("part {n}: {e}"))?;
            sha.update(&data);
            total += data.len() as u64;
            std::io::Write::write_all(&mut tmp, &data).map_err(|e| e.to_string())?;
        }
        if hex::encode(sha.finalize()) != oid || size.is_some_and(|s| s != total) {
            return Err("assembled parts do not match the oid".into());
        }
        let (_, p) = tmp.keep().map_err(|e| e.to_string())?;
        store.put_object_file(&p, &oid).map_err(|e| e.to_string())?;
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    })
    .await;
    match res {
        Ok(Ok(())) => json_resp(StatusCode::OK, &json!({})),
        Ok(Err(m)) => error(StatusCode::BAD_REQUEST, None, &m),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, None, &e.to_string()),
    }
}

async fn lfs_verify(st: &State, oid: &str, body: Body) -> Resp {
    let b = match read_body(body, 1 << 20).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
    let size = v.get("size").and_then(Value::as_u64).unwrap_or(0);
    if st.store.has_object(oid, size) {
        json_resp(StatusCode::OK, &json!({"message": "Object verified"}))
    } else {
        error(StatusCode::NOT_FOUND, None, "object not found")
    }
}

async fn commit(
    st: &State,
    access: Access,
    h: &HeaderMap,
    repo: &str,
    rev: &str,
    body: Body,
) -> Resp {
    if let Err(r) = writable(st, access, repo, rev) {
        return r;
    }
    let b = match read_body(body, 1 << 30).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let mut summary = String::from("Upload files");
    let mut parent_req = None;
    let mut adds: Vec<(String, FileRec)> = Vec::new();
    let mut deletes: Vec<(String, bool)> = Vec::new();
    let mut copies: Vec<(String, String, Option<String>)> = Vec::new();
    let bad = |m: String| error(StatusCode::BAD_REQUEST, None, &m);
    for line in b.split(|&c| c == b'\n') {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let Ok(v) = serde_json::from_slice::<Value>(line) else {
            return bad("a commit line is not JSON".into());
        };
        let val = &v["value"];
        let path = val.get("path").and_then(Value::as_str).unwrap_or("");
        match v.get("key").and_then(Value::as_str) {
            Some("header") => {
                if let Some(s) = val.get("summary").and_then(Value::as_str) {
                    summary = s.to_string();
                }
                parent_req = val
                    .get("parentCommit")
                    .and_then(Value::as_str)
                    .map(String::from);
            }
            Some("file") => {
                if check_repo_path(path).is_err() {
                    return bad(format!("invalid path {path:?}"));
                }
                let content = val.get("content").and_then(Value::as_str).unwrap_or("");
                let data = match val.get("encoding").and_then(Value::as_str) {
                    Some("base64") => {
                        match base64::engine::general_purpose::STANDARD.decode(content) {
                            Ok(d) => d,
                            Err(_) => return bad(format!("{path}: bad base64")),
                        }
                    }
                    _ => content.as_bytes().to_vec(),
                };
                match st.store.put_object_bytes(&data) {
                    Ok(hs) => adds.push((path.to_string(), FileRec::new(&hs, false))),
                    Err(e) => return internal(e),
                }
            }
            Some("lfsFile") => {
                if check_repo_path(path).is_err() {
                    return bad(format!("invalid path {path:?}"));
                }
                let oid = val
                    .get("oid")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_ascii_lowercase();
                let Ok(meta) = std::fs::metadata(st.store.object_path(&oid)) else {
                    return error(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        None,
                        &format!("{path}: LFS object {oid} was not uploaded"),
                    );
                };
                if val
                    .get("size")
                    .and_then(Value::as_u64)
                    .is_some_and(|s| s != meta.len())
                {
                    return bad(format!("{path}: size does not match the LFS object"));
                }
                let pointer = store::lfs_pointer(&oid, meta.len());
                let git_oid = crate::hashing::git_blob_id(pointer.as_bytes());
                adds.push((
                    path.to_string(),
                    FileRec {
                        size: meta.len(),
                        sha256: oid,
                        git_oid,
                        lfs: true,
                    },
                ));
            }
            Some("deletedFile") => deletes.push((path.to_string(), false)),
            Some("deletedFolder") => deletes.push((path.trim_end_matches('/').to_string(), true)),
            Some("copyFile") => {
                let src = val
                    .get("srcPath")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let src_rev = val
                    .get("srcRevision")
                    .and_then(Value::as_str)
                    .map(String::from);
                if check_repo_path(path).is_err() {
                    return bad(format!("invalid path {path:?}"));
                }
                copies.push((src, path.to_string(), src_rev));
            }
            _ => return bad("unknown commit line key".into()),
        }
    }
    let _g = st.write_lock.lock().unwrap_or_else(|p| p.into_inner());
    let head_oid = match st.store.head(repo, rev) {
        Ok(Some(h)) => h,
        Ok(None) => {
            return error(
                StatusCode::NOT_FOUND,
                Some("RevisionNotFound"),
                "branch vanished",
            );
        }
        Err(e) => return internal(e),
    };
    if let Some(p) = &parent_req
        && *p != head_oid
    {
        return error(
            StatusCode::PRECONDITION_FAILED,
            None,
            "parentCommit is not the head of the branch",
        );
    }
    let head = match st.store.commit(repo, &head_oid) {
        Ok(Some(c)) => c,
        Ok(None) => return internal(HubError::invalid("commit", &head_oid, "missing")),
        Err(e) => return internal(e),
    };
    let mut files = head.files.clone();
    for (src, dst, src_rev) in copies {
        let from = match src_rev {
            Some(r) => st.store.resolve(repo, &r).ok().flatten(),
            None => Some(head.clone()),
        };
        let Some(rec) = from.and_then(|c| c.files.get(&src).cloned()) else {
            return error(
                StatusCode::NOT_FOUND,
                Some("EntryNotFound"),
                &format!("{src} does not exist"),
            );
        };
        files.insert(dst, rec);
    }
    for (p, folder) in deletes {
        if folder {
            let pre = format!("{p}/");
            files.retain(|k, _| !k.starts_with(&pre));
        } else {
            files.remove(&p);
        }
    }
    for (p, rec) in adds {
        files.insert(p, rec);
    }
    let c = match st.store.make_commit(repo, Some(&head_oid), &summary, files) {
        Ok(c) => c,
        Err(e) => return internal(e),
    };
    if let Err(e) = st.store.set_head(repo, rev, &c.oid) {
        return internal(e);
    }
    json_resp(
        StatusCode::OK,
        &json!({"success": true, "commitOid": c.oid, "commitMessage": summary,
                "commitUrl": format!("{}/{}/commit/{}", base_url(h), repo, c.oid), "hookOutput": ""}),
    )
}
