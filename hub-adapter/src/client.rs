//! The Hub HTTP client: repo info, tree listing, downloads with resume,
//! repo creation, preupload, LFS batch uploads and the NDJSON commit.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use brevis_core::ProgressSink;
use futures_util::StreamExt as _;
use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;

use crate::error::{HubError, Result};
use crate::hashing::{self, FileHashes};
use crate::paths::{check_repo_id, check_repo_path, check_revision, encode};

mod ranged;
pub use ranged::{ChunkPlan, DEFAULT_CHUNK_SIZE, DEFAULT_CONNECTIONS};

/// How often and how patiently requests are retried on 429, 5xx and
/// dropped connections.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Attempts after the first one.
    pub max_retries: u32,
    /// First backoff delay; doubled after each failure, capped at `max_delay`.
    pub base_delay: Duration,
    /// Longest delay between two attempts.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 6,
            base_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(20),
        }
    }
}

impl RetryPolicy {
    /// Set the number of retries.
    pub fn max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }
    /// Set the first backoff delay.
    pub fn base_delay(mut self, d: Duration) -> Self {
        self.base_delay = d;
        self
    }
    fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX);
        self.base_delay.saturating_mul(factor).min(self.max_delay)
    }
}

/// A client for one Hub endpoint. Cheap to clone.
#[derive(Clone)]
pub struct HubClient {
    endpoint: String,
    token: Option<String>,
    http: reqwest::Client,
    retry: RetryPolicy,
    concurrency: usize,
    stall: Duration,
    notes: Option<ClientNotes>,
    token_hint: Arc<str>,
    keep_partial: bool,
    /// Shared by clones: no request goes out before this (a 429 pauses
    /// every request of the client, not only the one that got it).
    paused_until: Arc<std::sync::Mutex<Option<tokio::time::Instant>>>,
    /// The longest one call waits out 429s in all.
    max_rate_wait: Duration,
    /// Whether the endpoint has answered anything yet (a refused connection
    /// before that is a wrong endpoint or a server not running).
    reached: Arc<std::sync::atomic::AtomicBool>,
    /// How downloads are split.
    chunks: ChunkPlan,
    /// Download connections open at once, shared by clones.
    connections: Arc<tokio::sync::Semaphore>,
}

/// The longest one call waits out the Hub's 429 answers in all, by default
/// (its rate-limit windows last up to 300 s).
pub const MAX_RATE_LIMIT_WAIT: Duration = Duration::from_secs(900);
/// Added to the wait a 429 asks for, so the next request lands in the new
/// window.
const RATE_LIMIT_MARGIN: Duration = Duration::from_secs(1);
/// Redirects followed for one request.
const MAX_REDIRECTS: usize = 5;

/// Where a token comes from, as a refused token's message names it.
pub const DEFAULT_TOKEN_HINT: &str = "HF_TOKEN / --token";

/// A callback for status lines about the connection (stalls, retries).
pub type ClientNotes = Arc<dyn Fn(&str) + Send + Sync>;

/// How long a request may go without a byte from the server (headers or
/// body) before that attempt is given up.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Stalled attempts of one call before it fails: with [`STALL_TIMEOUT`],
/// a server that accepts connections and never answers is given up on in
/// about 90 s.
pub const MAX_STALLS: u32 = 3;

impl std::fmt::Debug for HubClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubClient")
            .field("endpoint", &self.endpoint)
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .finish()
    }
}

/// One file of a repo, as the tree listing describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoFile {
    /// Path inside the repo (validated: relative, no `..`).
    pub path: String,
    /// Size of the file's content in bytes.
    pub size: u64,
    /// Git blob id (of the content for regular files, of the pointer for LFS files).
    pub oid: String,
    /// LFS SHA-256 (hex) of the content, for LFS files.
    pub lfs_sha256: Option<String>,
}

impl RepoFile {
    /// The id the HF cache and `ETag` use: LFS SHA-256, else the git blob id.
    pub fn etag(&self) -> &str {
        self.lfs_sha256.as_deref().unwrap_or(&self.oid)
    }
}

impl Expect {
    /// What a file of a repo's tree must be: its size, and its LFS SHA-256
    /// or, for a regular file, its git blob id.
    pub fn of(f: &RepoFile) -> Expect {
        Expect {
            size: Some(f.size),
            sha256: f.lfs_sha256.clone(),
            git_oid: f.lfs_sha256.is_none().then(|| f.oid.clone()),
        }
    }

    /// Whether a file with these hashes is what is expected (every part
    /// named; hashes taken without the blob id never match one).
    pub fn matches(&self, h: &FileHashes) -> bool {
        self.size.is_none_or(|s| s == h.size)
            && self
                .sha256
                .as_ref()
                .is_none_or(|s| s.eq_ignore_ascii_case(&h.sha256_hex()))
            && self.git_oid.as_ref().is_none_or(|want| {
                h.git_oid
                    .as_deref()
                    .is_some_and(|g| g.eq_ignore_ascii_case(want))
            })
    }
}

/// What `/api/models/{repo}/revision/{rev}` says.
#[derive(Debug, Clone)]
pub struct RepoInfo {
    /// Repo id.
    pub id: String,
    /// Commit id the revision resolves to.
    pub sha: String,
    /// Whether the repo is private.
    pub private: bool,
    /// Paths of the files at that commit.
    pub siblings: Vec<String>,
    /// For a source `brevis-hub serve` answers decoded from a mirror (no
    /// source repo of its own there), that mirror.
    pub decoded_from: Option<String>,
}

/// What a `HEAD` on a resolve URL says.
#[derive(Debug, Clone)]
pub struct FileMetadata {
    /// `X-Repo-Commit`.
    pub commit: String,
    /// `X-Linked-Etag` or `ETag`, without quotes.
    pub etag: String,
    /// `X-Linked-Size` or `Content-Length`.
    pub size: u64,
}

/// What one download did.
#[derive(Debug, Clone, Default)]
pub struct DownloadStats {
    /// Bytes received over the wire.
    pub bytes_on_wire: u64,
    /// Bytes already present from an earlier interrupted run.
    pub resumed_from: u64,
    /// Hashes of the complete file (its git blob id only where the
    /// [`Expect`] named one).
    pub hashes: Option<FileHashes>,
}

/// What the client expects of a downloaded file.
#[derive(Debug, Clone, Default)]
pub struct Expect {
    /// Size in bytes.
    pub size: Option<u64>,
    /// SHA-256, hex.
    pub sha256: Option<String>,
    /// Git blob id of the content, hex (regular files).
    pub git_oid: Option<String>,
}

/// A local file to put into a commit.
#[derive(Debug, Clone)]
pub struct UploadFile {
    /// Path in the repo.
    pub path_in_repo: String,
    /// Local file.
    pub local: PathBuf,
    /// Its size and hashes (without the git blob id, a regular file is
    /// committed even when the repo already holds it).
    pub hashes: FileHashes,
}

/// What an upload did.
#[derive(Debug, Clone, Default)]
pub struct UploadStats {
    /// Bytes sent as LFS objects.
    pub lfs_bytes_sent: u64,
    /// LFS objects sent.
    pub lfs_objects_sent: usize,
    /// LFS objects the server already had.
    pub lfs_objects_present: usize,
    /// Bytes sent inline in the commit (regular files).
    pub inline_bytes_sent: u64,
    /// The commit made, if any.
    pub commit: Option<CommitInfo>,
}

/// A commit made on the Hub.
#[derive(Debug, Clone)]
pub struct CommitInfo {
    /// Commit id.
    pub oid: String,
    /// URL of the commit.
    pub url: String,
}

#[derive(Deserialize)]
struct TreeItem {
    #[serde(rename = "type")]
    kind: String,
    path: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    oid: String,
    #[serde(default)]
    lfs: Option<TreeLfs>,
}

#[derive(Deserialize)]
struct TreeLfs {
    oid: String,
    size: u64,
}

/// Largest JSON answer accepted from a server (tree pages, manifests).
pub const MAX_JSON_LEN: usize = 64 << 20;

impl HubClient {
    /// A client for `endpoint` (e.g. `https://huggingface.co`), with an
    /// optional token sent as `Authorization: Bearer` to that endpoint only.
    pub fn new(endpoint: &str, token: Option<String>) -> Result<HubClient> {
        let endpoint = endpoint.trim_end_matches('/').to_string();
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(HubError::invalid(
                "endpoint",
                &endpoint,
                "must start with http:// or https://",
            ));
        }
        let http = reqwest::Client::builder()
            .user_agent(concat!("brevis-hub/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(20))
            .read_timeout(Duration::from_secs(120))
            // Redirects are followed by hand: the token must never go to
            // another host, and a HEAD's metadata is the redirect's own.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| HubError::Network {
                repo: String::new(),
                what: "client setup",
                attempts: 0,
                source: Box::new(e),
            })?;
        Ok(HubClient {
            endpoint,
            token: token.filter(|t| !t.is_empty()),
            http,
            retry: RetryPolicy::default(),
            concurrency: 4,
            stall: STALL_TIMEOUT,
            notes: None,
            token_hint: Arc::from(DEFAULT_TOKEN_HINT),
            keep_partial: false,
            paused_until: Arc::new(std::sync::Mutex::new(None)),
            max_rate_wait: MAX_RATE_LIMIT_WAIT,
            reached: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            chunks: ChunkPlan::default(),
            connections: Arc::new(tokio::sync::Semaphore::new(DEFAULT_CONNECTIONS)),
        })
    }

    /// Where the token of this client comes from, for the message of a
    /// refused token (default [`DEFAULT_TOKEN_HINT`]): a client for a
    /// second endpoint names its own option.
    pub fn with_token_hint(mut self, hint: &str) -> Self {
        self.token_hint = Arc::from(hint);
        self
    }

    /// Keep a partial download (`.incomplete`) when writing it fails for
    /// lack of space, so a later run can resume it; by default it is
    /// removed, so a full disk is not left full.
    pub fn with_keep_partial(mut self, keep: bool) -> Self {
        self.keep_partial = keep;
        self
    }

    /// Wait at most `d` in all for one call's 429 answers (default
    /// [`MAX_RATE_LIMIT_WAIT`]).
    pub fn with_max_rate_limit_wait(mut self, d: Duration) -> Self {
        self.max_rate_wait = d;
        self
    }

    /// Split downloads larger than `plan.chunk_size` into `Range` chunks,
    /// over at most `plan.connections` connections at once for all of this
    /// client's downloads (defaults [`DEFAULT_CHUNK_SIZE`] and
    /// [`DEFAULT_CONNECTIONS`]).
    pub fn with_chunks(mut self, plan: ChunkPlan) -> Self {
        self.chunks = ChunkPlan {
            chunk_size: plan.chunk_size.max(1),
            connections: plan.connections.max(1),
        };
        self.connections = Arc::new(tokio::sync::Semaphore::new(self.chunks.connections));
        self
    }

    /// Use this retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Give up an attempt after `d` without a byte from the server
    /// (default [`STALL_TIMEOUT`]); [`MAX_STALLS`] such attempts fail the call.
    pub fn with_stall_timeout(mut self, d: Duration) -> Self {
        self.stall = d.max(Duration::from_millis(1));
        self
    }

    /// Say what the client is waiting for (a server that stalls, retries)
    /// through `notes` (the CLI prints them on stderr).
    pub fn with_notes(mut self, notes: ClientNotes) -> Self {
        self.notes = Some(notes);
        self
    }

    fn note(&self, msg: &str) {
        if let Some(n) = &self.notes {
            n(msg);
        }
    }

    fn note_stall(&self, repo: &str, what: &str, stalls: u32) {
        self.note(&format!(
            "{repo}: {what}: no answer from {} for {} s ({stalls} of {MAX_STALLS}); trying again",
            self.endpoint,
            self.stall.as_secs_f64().ceil()
        ));
    }

    fn stalled(&self, repo: &str, what: &'static str, attempts: u32) -> HubError {
        HubError::Stalled {
            repo: repo.into(),
            what,
            endpoint: self.endpoint.clone(),
            seconds: self.stall.as_secs_f64().ceil() as u64,
            attempts,
        }
    }

    /// Download or upload up to `n` files at once.
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// How many files are downloaded or uploaded at once.
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// The endpoint, without a trailing slash.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Whether a token is set.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    fn request(&self, method: Method, url: &str) -> RequestBuilder {
        let rb = self.http.request(method, url);
        match &self.token {
            Some(t) if self.is_ours(url) => rb.bearer_auth(t),
            _ => rb,
        }
    }

    /// Whether `url` is on this client's endpoint (so may carry its token):
    /// `http://h:80` is not a prefix match for `http://h:8080/...`.
    fn is_ours(&self, url: &str) -> bool {
        url.strip_prefix(&self.endpoint)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || rest.starts_with('?'))
    }

    /// Send with retries on connection errors, 429 and 5xx.
    async fn send<F>(&self, repo: &str, what: &'static str, build: F) -> Result<Response>
    where
        F: FnMut() -> Result<RequestBuilder>,
    {
        let mut stalls = 0u32;
        self.send_counting(repo, what, build, &mut stalls).await
    }

    /// [`HubClient::send`], counting stalled attempts in `stalls`, which a
    /// caller making several requests for one job (a download resumed after
    /// its body stalled) shares between them: [`MAX_STALLS`] in all.
    async fn send_counting<F>(
        &self,
        repo: &str,
        what: &'static str,
        mut build: F,
        stalls: &mut u32,
    ) -> Result<Response>
    where
        F: FnMut() -> Result<RequestBuilder>,
    {
        self.send_with(repo, what, &mut build, stalls, true).await
    }

    /// Send a request built by `build`, following redirects (the token only
    /// to this client's endpoint; a `HEAD` redirected to another host is
    /// answered with the redirect itself, whose headers describe the file).
    ///
    /// A 429 pauses every request of this client for what its `RateLimit`
    /// (or `Retry-After`) header asks, plus a margin, within
    /// [`HubClient::with_max_rate_limit_wait`]; it costs no attempt. A
    /// connection refused before the endpoint ever answered, or a host name
    /// that does not resolve, fails at once. Other dropped connections and
    /// 5xx are retried with backoff when `idempotent`; otherwise only what
    /// never reached the server (a failed connect) is sent again, and the
    /// caller finds out whether the rest took effect.
    async fn send_with<F>(
        &self,
        repo: &str,
        what: &'static str,
        build: &mut F,
        stalls: &mut u32,
        idempotent: bool,
    ) -> Result<Response>
    where
        F: FnMut() -> Result<RequestBuilder>,
    {
        let mut attempt = 0u32;
        let mut rate_waited = Duration::ZERO;
        loop {
            self.wait_for_pause().await;
            let req = build()?.build().map_err(|e| HubError::Network {
                repo: repo.into(),
                what,
                attempts: 0,
                source: Box::new(e),
            })?;
            let url = req.url().to_string();
            let outcome = match self.execute_following(req).await {
                Ok(o) => o,
                Err(Exec::Stalled) => {
                    *stalls += 1;
                    if *stalls >= MAX_STALLS {
                        return Err(self.stalled(repo, what, *stalls));
                    }
                    self.note_stall(repo, what, *stalls);
                    attempt += 1;
                    continue;
                }
                Err(Exec::TooManyRedirects) => {
                    return Err(HubError::protocol(repo, what, "too many redirects"));
                }
            };
            match outcome {
                // A 429 that says how long (the Hub's `RateLimit`, or
                // `Retry-After`) is waited out without costing an attempt;
                // one that does not is retried like a 5xx.
                Ok(resp)
                    if resp.status() == StatusCode::TOO_MANY_REQUESTS
                        && rate_limit_wait(resp.headers()).is_some() =>
                {
                    let wait =
                        rate_limit_wait(resp.headers()).unwrap_or_default() + RATE_LIMIT_MARGIN;
                    if rate_waited + wait > self.max_rate_wait {
                        return Err(HubError::RateLimited {
                            repo: repo.into(),
                            what,
                            waited_secs: (rate_waited + wait).as_secs(),
                            limit_secs: self.max_rate_wait.as_secs(),
                        });
                    }
                    rate_waited += wait;
                    self.pause_for(wait);
                    self.note(&format!(
                        "{repo}: {what}: rate limited by the server; every request waits {:.0} s",
                        wait.as_secs_f64().ceil()
                    ));
                }
                Ok(resp)
                    if idempotent && is_retryable(&resp) && attempt < self.retry.max_retries =>
                {
                    let wait = retry_after(resp.headers())
                        .unwrap_or(self.retry.delay(attempt))
                        .min(self.retry.max_delay);
                    self.note(&format!(
                        "{repo}: {what}: the server answered {}; trying again in {:.1} s ({} of {})",
                        resp.status(),
                        wait.as_secs_f64(),
                        attempt + 1,
                        self.retry.max_retries
                    ));
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                Ok(resp) => return Ok(resp),
                Err(e) => {
                    if let Some(reason) = self.unhealable(&e, &url) {
                        return Err(HubError::Unreachable {
                            endpoint: origin_of(&url),
                            reason,
                        });
                    }
                    if (idempotent || e.is_connect())
                        && attempt < self.retry.max_retries
                        && !e.is_builder()
                    {
                        let wait = self.retry.delay(attempt);
                        self.note(&format!(
                            "{repo}: {what}: {e}; trying again in {:.1} s ({} of {})",
                            wait.as_secs_f64(),
                            attempt + 1,
                            self.retry.max_retries
                        ));
                        tokio::time::sleep(wait).await;
                        attempt += 1;
                        continue;
                    }
                    return Err(HubError::Network {
                        repo: repo.into(),
                        what,
                        attempts: attempt + 1,
                        source: Box::new(e),
                    });
                }
            }
        }
    }

    /// Wait until a pause a 429 set is over.
    async fn wait_for_pause(&self) {
        loop {
            let until = *self.paused_until.lock().unwrap_or_else(|p| p.into_inner());
            match until {
                Some(t) if t > tokio::time::Instant::now() => tokio::time::sleep_until(t).await,
                _ => return,
            }
        }
    }

    /// Pause every request of this client (and its clones) for `d`.
    fn pause_for(&self, d: Duration) {
        let t = tokio::time::Instant::now() + d;
        let mut p = self.paused_until.lock().unwrap_or_else(|p| p.into_inner());
        if p.is_none_or(|old| old < t) {
            *p = Some(t);
        }
    }

    /// Execute `req`, following up to [`MAX_REDIRECTS`] redirects of a
    /// `GET` or `HEAD`; the token goes only to this client's endpoint. A
    /// request without a body that gets no headers within the stall
    /// timeout is a stalled attempt.
    async fn execute_following(
        &self,
        mut req: reqwest::Request,
    ) -> std::result::Result<std::result::Result<Response, reqwest::Error>, Exec> {
        for _ in 0..=MAX_REDIRECTS {
            let next = req.try_clone();
            let method = req.method().clone();
            let url = req.url().clone();
            // A request without a body is answered at once or not at all:
            // no headers within the stall timeout is a stalled attempt. (An
            // upload may take long before the server answers.)
            let r = if req.body().is_none() {
                tokio::time::timeout(self.stall, self.http.execute(req))
                    .await
                    .map_err(|_| Exec::Stalled)?
            } else {
                self.http.execute(req).await
            };
            let resp = match r {
                Ok(resp) => resp,
                Err(e) => return Ok(Err(e)),
            };
            if self.is_ours(url.as_str()) {
                self.reached
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
            let Some(to) = redirect_target(&resp, &url) else {
                return Ok(Ok(resp));
            };
            let cross = to.origin() != url.origin();
            let follow = method == Method::GET || (method == Method::HEAD && !cross);
            let Some(mut n) = next.filter(|_| follow) else {
                return Ok(Ok(resp));
            };
            if !self.is_ours(to.as_str()) {
                n.headers_mut().remove(reqwest::header::AUTHORIZATION);
            }
            *n.url_mut() = to;
            req = n;
        }
        Err(Exec::TooManyRedirects)
    }

    /// Why a failed request will not succeed if sent again, if it will not:
    /// the host name does not resolve, or the endpoint refused the
    /// connection before it ever answered.
    fn unhealable(&self, e: &reqwest::Error, url: &str) -> Option<String> {
        if !e.is_connect() {
            return None;
        }
        let mut dns = false;
        let mut refused = false;
        let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(s) = src {
            let text = s.to_string();
            dns |= text.contains("dns error") || text.contains("failed to lookup address");
            refused |= s
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused);
            src = s.source();
        }
        let host = reqwest::Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().map(String::from))
            .unwrap_or_default();
        if dns {
            return Some(format!(
                "cannot resolve the host name {host:?}: check the endpoint (--endpoint / HF_ENDPOINT) and the network"
            ));
        }
        let ours = self.is_ours(url);
        if refused && ours && !self.reached.load(std::sync::atomic::Ordering::Relaxed) {
            return Some(
                "the connection was refused: is the server running, and is the endpoint (--endpoint / HF_ENDPOINT) right?"
                    .into(),
            );
        }
        None
    }

    async fn json(&self, resp: Response, repo: &str, what: &'static str) -> Result<Value> {
        let bytes = read_limited(resp, MAX_JSON_LEN, self.stall)
            .await
            .map_err(|r| HubError::protocol(repo, what, r))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| HubError::protocol(repo, what, format!("bad JSON: {e}")))
    }

    /// `/api/models/{repo}/revision/{rev}`.
    pub async fn repo_info(&self, repo: &str, revision: &str) -> Result<RepoInfo> {
        check_repo_id(repo)?;
        check_revision(revision)?;
        let url = format!(
            "{}/api/models/{}/revision/{}",
            self.endpoint,
            repo,
            encode(revision, false)
        );
        let resp = self
            .send(repo, "repo info", || Ok(self.request(Method::GET, &url)))
            .await?;
        let resp = check(resp, repo, None, Some(revision), "repo info", self).await?;
        let decoded_from = resp
            .headers()
            .get(crate::server::DECODED_FROM)
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        let v = self.json(resp, repo, "repo info").await?;
        let sha = v
            .get("sha")
            .and_then(Value::as_str)
            .ok_or_else(|| HubError::protocol(repo, "repo info", "no sha"))?;
        if sha.len() != 40 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(HubError::protocol(
                repo,
                "repo info",
                "sha is not a commit id",
            ));
        }
        let siblings = v
            .get("siblings")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.get("rfilename").and_then(Value::as_str))
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        Ok(RepoInfo {
            id: repo.to_string(),
            sha: sha.to_string(),
            private: v.get("private").and_then(Value::as_bool).unwrap_or(false),
            siblings,
            decoded_from,
        })
    }

    /// Recursive tree listing at `revision` (following `Link` cursor pages).
    /// Every path is validated; a listing with `..`, absolute paths or
    /// backslashes is refused as a whole.
    pub async fn list_files(&self, repo: &str, revision: &str) -> Result<Vec<RepoFile>> {
        Ok(self.list_files_marked(repo, revision).await?.0)
    }

    /// [`HubClient::list_files`], and the mirror `brevis-hub serve` says it
    /// decoded the listing from (`x-brevis-decoded-from` on any page), if
    /// it does: such a listing is the mirror's word, not a source repo's.
    pub async fn list_files_marked(
        &self,
        repo: &str,
        revision: &str,
    ) -> Result<(Vec<RepoFile>, Option<String>)> {
        check_repo_id(repo)?;
        check_revision(revision)?;
        let mut url = format!(
            "{}/api/models/{}/tree/{}?recursive=true&expand=false",
            self.endpoint,
            repo,
            encode(revision, false)
        );
        let mut out = Vec::new();
        let mut decoded_from = None;
        for _page in 0..100_000 {
            let u = url.clone();
            let resp = self
                .send(repo, "tree listing", || Ok(self.request(Method::GET, &u)))
                .await?;
            let resp = check(resp, repo, None, Some(revision), "tree listing", self).await?;
            let next = next_link(resp.headers());
            if let Some(from) = resp
                .headers()
                .get(crate::server::DECODED_FROM)
                .and_then(|v| v.to_str().ok())
            {
                decoded_from.get_or_insert_with(|| from.to_owned());
            }
            let v = self.json(resp, repo, "tree listing").await?;
            let items: Vec<TreeItem> = serde_json::from_value(v)
                .map_err(|e| HubError::protocol(repo, "tree listing", e.to_string()))?;
            for it in items {
                check_repo_path(&it.path)?;
                if it.kind != "file" {
                    continue;
                }
                let lfs_sha256 = match it.lfs {
                    Some(l) => {
                        if !is_hex(&l.oid, 64) {
                            return Err(HubError::protocol(repo, "tree listing", "bad LFS oid"));
                        }
                        if l.size != it.size {
                            return Err(HubError::protocol(
                                repo,
                                "tree listing",
                                "LFS size differs",
                            ));
                        }
                        Some(l.oid.to_ascii_lowercase())
                    }
                    None => None,
                };
                out.push(RepoFile {
                    path: it.path,
                    size: it.size,
                    oid: it.oid,
                    lfs_sha256,
                });
            }
            match next {
                Some(n) => {
                    url = if n.starts_with('/') {
                        format!("{}{}", self.endpoint, n)
                    } else {
                        n
                    }
                }
                None => {
                    out.sort_by(|a, b| a.path.cmp(&b.path));
                    out.dedup_by(|a, b| a.path == b.path);
                    return Ok((out, decoded_from));
                }
            }
        }
        Err(HubError::protocol(repo, "tree listing", "too many pages"))
    }

    fn resolve_url(&self, repo: &str, revision: &str, path: &str) -> String {
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
        let url = self.resolve_url(repo, revision, path);
        let resp = self
            .send(repo, "file metadata", || {
                Ok(self
                    .request(Method::HEAD, &url)
                    .header("Accept-Encoding", "identity"))
            })
            .await?;
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
    async fn write_failed(&self, part: &Path, e: std::io::Error) -> HubError {
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
        let mut have = match tokio::fs::metadata(&part).await {
            Ok(m) => m.len(),
            Err(_) => 0,
        };
        if expect.size.is_some_and(|s| have > s) {
            have = 0;
            let _ = tokio::fs::remove_file(&part).await;
        }
        stats.resumed_from = have;
        progress.advance(have);
        // The body is hashed as it arrives when this call receives all of
        // it (a partial file left by an earlier run is read back instead;
        // the blob id needs the size first).
        let git = expect.git_oid.is_some();
        let fresh = || {
            (!git || expect.size.is_some())
                .then(|| hashing::StreamHasher::new(expect.size.unwrap_or(0), git))
        };
        let mut hasher = None;
        let mut failures = 0u32;
        // Stalls of the headers and of the body, all attempts together.
        let mut stalls = 0u32;
        loop {
            if expect.size == Some(have) && have > 0 {
                break;
            }
            let _conn = self.connections.acquire().await;
            let resp = self
                .send_counting(
                    repo,
                    "download",
                    || {
                        let mut rb = self.request(Method::GET, &url);
                        if have > 0 {
                            rb = rb.header("Range", format!("bytes={have}-"));
                        }
                        Ok(rb)
                    },
                    &mut stalls,
                )
                .await?;
            if resp.status() == StatusCode::RANGE_NOT_SATISFIABLE {
                // The partial file is not a prefix of this file: start over.
                have = 0;
                let _ = tokio::fs::remove_file(&part).await;
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
                have = 0;
            }
            if have == 0 {
                hasher = fresh();
            }
            if hasher.as_ref().is_some_and(|h| h.len() != have) {
                hasher = None;
            }
            let mut file = tokio::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .append(append)
                .truncate(!append)
                .open(&part)
                .await
                .map_err(|e| HubError::io(&part, e))?;
            let mut body = resp.bytes_stream();
            let mut broke = None;
            let mut stalled = false;
            loop {
                let chunk = match tokio::time::timeout(self.stall, body.next()).await {
                    Ok(Some(c)) => c,
                    Ok(None) => break,
                    Err(_) => {
                        stalled = true;
                        break;
                    }
                };
                match chunk {
                    Ok(c) => {
                        if expect.size.is_some_and(|s| have + c.len() as u64 > s) {
                            let _ = tokio::fs::remove_file(&part).await;
                            return Err(HubError::protocol(
                                repo,
                                "download",
                                "more bytes than the expected size",
                            ));
                        }
                        if let Err(e) = file.write_all(&c).await {
                            drop(file);
                            return Err(self.write_failed(&part, e).await);
                        }
                        if let Some(h) = &mut hasher {
                            h.update(&c);
                        }
                        have += c.len() as u64;
                        stats.bytes_on_wire += c.len() as u64;
                        progress.advance(c.len() as u64);
                    }
                    Err(e) => {
                        broke = Some(e);
                        break;
                    }
                }
            }
            let synced = match file.flush().await {
                Ok(()) => file.sync_all().await,
                Err(e) => Err(e),
            };
            drop(file);
            if let Err(e) = synced {
                return Err(self.write_failed(&part, e).await);
            }
            if stalled {
                // Resumed from what arrived, like a dropped connection.
                stalls += 1;
                if stalls >= MAX_STALLS {
                    return Err(self.stalled(repo, "download", stalls));
                }
                self.note_stall(repo, &format!("download {path}"), stalls);
                continue;
            }
            match broke {
                None => {
                    if expect.size.is_none() || expect.size == Some(have) {
                        break;
                    }
                    failures += 1;
                }
                Some(e) => {
                    failures += 1;
                    if failures > self.retry.max_retries {
                        return Err(HubError::Network {
                            repo: repo.into(),
                            what: "download",
                            attempts: failures,
                            source: Box::new(e),
                        });
                    }
                }
            }
            if failures > self.retry.max_retries {
                return Err(HubError::protocol(repo, "download", "file ended early"));
            }
            tokio::time::sleep(self.retry.delay(failures.saturating_sub(1))).await;
        }
        let hashes = match hasher {
            Some(h) if h.len() == have => h.finish(),
            _ => hashing::hash_file_async(&part, git).await?,
        };
        stats.hashes = Some(finish_download(repo, path, &part, dst, hashes, expect).await?);
        Ok(stats)
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
    /// `files` and the outcome. `progress` advances with every file; its
    /// start and finish are the caller's.
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
                let p = progress.clone();
                async move {
                    let r = self
                        .download_file(repo, revision, path, dst, expect, &*p)
                        .await;
                    (i, r)
                }
            })
            .collect();
        futures_util::stream::iter(futures).buffer_unordered(self.concurrency)
    }

    /// The user name behind the token (`/api/whoami-v2`).
    pub async fn whoami(&self) -> Result<String> {
        let url = format!("{}/api/whoami-v2", self.endpoint);
        let resp = self
            .send("", "whoami", || Ok(self.request(Method::GET, &url)))
            .await?;
        let resp = check(resp, "", None, None, "whoami", self).await?;
        let v = self.json(resp, "", "whoami").await?;
        v.get("name")
            .and_then(Value::as_str)
            .map(String::from)
            .ok_or_else(|| HubError::protocol("", "whoami", "no name"))
    }

    /// Create a model repo (`/api/repos/create`). With `exist_ok`, an
    /// existing repo (409) is fine. `private`: `None` leaves the visibility
    /// to the namespace's default (an organisation may make new repos
    /// private).
    pub async fn create_repo(
        &self,
        repo: &str,
        private: Option<bool>,
        exist_ok: bool,
    ) -> Result<()> {
        check_repo_id(repo)?;
        let (org, name) = repo.split_once('/').unwrap_or(("", repo));
        let url = format!("{}/api/repos/create", self.endpoint);
        let mut body = json!({"name": name, "organization": org, "type": "model"});
        if let Some(p) = private {
            body["private"] = json!(p);
        }
        let resp = self
            .send(repo, "create repo", || {
                Ok(self.request(Method::POST, &url).json(&body))
            })
            .await?;
        if resp.status() == StatusCode::CONFLICT {
            return if exist_ok {
                Ok(())
            } else {
                Err(HubError::RepoExists { repo: repo.into() })
            };
        }
        check(resp, repo, None, None, "create repo", self).await?;
        Ok(())
    }

    /// Make sure `repo` exists (created with `private`, see
    /// [`HubClient::create_repo`]) and that this client may write to it,
    /// without changing it: a preupload of no files needs write access. A
    /// missing token or permission fails here, in a second or two.
    pub async fn ensure_writable(&self, repo: &str, private: Option<bool>) -> Result<()> {
        self.create_repo(repo, private, true).await?;
        let url = format!("{}/api/models/{}/preupload/main", self.endpoint, repo);
        let body = json!({"files": []});
        let resp = self
            .send(repo, "write check", || {
                Ok(self.request(Method::POST, &url).json(&body))
            })
            .await?;
        check(resp, repo, None, Some("main"), "write check", self).await?;
        Ok(())
    }

    /// Ask which files go through LFS and which the server already has
    /// (`/api/models/{repo}/preupload/{rev}`). Returns, per file in order,
    /// (is LFS, remote git blob id if the path already exists).
    pub async fn preupload(
        &self,
        repo: &str,
        revision: &str,
        files: &[UploadFile],
    ) -> Result<Vec<(bool, Option<String>)>> {
        let url = format!(
            "{}/api/models/{}/preupload/{}",
            self.endpoint,
            repo,
            encode(revision, false)
        );
        let mut out = Vec::with_capacity(files.len());
        for chunk in files.chunks(250) {
            let mut list = Vec::new();
            for f in chunk {
                let sample = hashing::read_sample(&f.local, 512).await?;
                list.push(json!({
                    "path": f.path_in_repo,
                    "size": f.hashes.size,
                    "sample": base64::engine::general_purpose::STANDARD.encode(sample),
                }));
            }
            let body = json!({"files": list});
            let resp = self
                .send(repo, "preupload", || {
                    Ok(self.request(Method::POST, &url).json(&body))
                })
                .await?;
            let resp = check(resp, repo, None, Some(revision), "preupload", self).await?;
            let v = self.json(resp, repo, "preupload").await?;
            let answers = v
                .get("files")
                .and_then(Value::as_array)
                .ok_or_else(|| HubError::protocol(repo, "preupload", "no files"))?;
            for f in chunk {
                let a = answers
                    .iter()
                    .find(|a| a.get("path").and_then(Value::as_str) == Some(&f.path_in_repo))
                    .ok_or_else(|| {
                        HubError::protocol(
                            repo,
                            "preupload",
                            format!("no answer for {}", f.path_in_repo),
                        )
                    })?;
                let lfs = a.get("uploadMode").and_then(Value::as_str) == Some("lfs");
                let oid = a.get("oid").and_then(Value::as_str).map(String::from);
                out.push((lfs, oid));
            }
        }
        Ok(out)
    }

    /// Upload LFS objects the server does not have yet (LFS batch API, basic
    /// or multipart transfer, then verify). Returns (bytes sent, objects
    /// sent, objects already present).
    pub async fn upload_lfs(
        &self,
        repo: &str,
        revision: &str,
        files: &[&UploadFile],
        progress: Arc<dyn ProgressSink>,
    ) -> Result<(u64, usize, usize)> {
        let url = format!("{}/{}.git/info/lfs/objects/batch", self.endpoint, repo);
        let mut todo: Vec<(&UploadFile, Value)> = Vec::new();
        let mut present = 0usize;
        for chunk in files.chunks(100) {
            let objects: Vec<Value> = chunk
                .iter()
                .map(|f| json!({"oid": f.hashes.sha256_hex(), "size": f.hashes.size}))
                .collect();
            let body = json!({
                "operation": "upload",
                "transfers": ["basic", "multipart"],
                "objects": objects,
                "hash_algo": "sha256",
                "ref": {"name": format!("refs/heads/{revision}")},
            });
            let body = serde_json::to_vec(&body).unwrap_or_default();
            let resp = self
                .send(repo, "LFS batch", || {
                    Ok(self
                        .request(Method::POST, &url)
                        .header("Accept", "application/vnd.git-lfs+json")
                        .header("Content-Type", "application/vnd.git-lfs+json")
                        .body(body.clone()))
                })
                .await?;
            let resp = check(resp, repo, None, Some(revision), "LFS batch", self).await?;
            let v = self.json(resp, repo, "LFS batch").await?;
            let objs = v
                .get("objects")
                .and_then(Value::as_array)
                .ok_or_else(|| HubError::protocol(repo, "LFS batch", "no objects"))?;
            for f in chunk {
                let oid = f.hashes.sha256_hex();
                let o = objs
                    .iter()
                    .find(|o| o.get("oid").and_then(Value::as_str) == Some(&oid))
                    .ok_or_else(|| {
                        HubError::protocol(repo, "LFS batch", "object missing in answer")
                    })?;
                if let Some(err) = o.get("error") {
                    return Err(HubError::Http {
                        repo: repo.into(),
                        file: Some(f.path_in_repo.clone()),
                        what: "LFS batch",
                        status: err.get("code").and_then(Value::as_u64).unwrap_or(0) as u16,
                        message: err
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .into(),
                    });
                }
                match o.get("actions") {
                    Some(a) if a.get("upload").is_some() => todo.push((f, a.clone())),
                    _ => present += 1,
                }
            }
        }
        let total: u64 = todo.iter().map(|(f, _)| f.hashes.size).sum();
        progress.start(&format!("upload {repo}"), total);
        // The futures are made first: a stream holding the closure that
        // makes them is not `Send` for every lifetime, and `mirror` sends
        // objects from spawned tasks.
        let sends: Vec<_> = todo
            .iter()
            .map(|(f, actions)| {
                let p = progress.clone();
                async move { self.upload_one(repo, f, actions, &*p).await }
            })
            .collect();
        let results: Vec<Result<u64>> = futures_util::stream::iter(sends)
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        progress.finish();
        let mut sent = 0;
        for r in results {
            sent += r?;
        }
        Ok((sent, todo.len(), present))
    }

    async fn upload_one(
        &self,
        repo: &str,
        f: &UploadFile,
        actions: &Value,
        progress: &dyn ProgressSink,
    ) -> Result<u64> {
        let upload = &actions["upload"];
        let href = upload
            .get("href")
            .and_then(Value::as_str)
            .ok_or_else(|| HubError::protocol(repo, "LFS upload", "no href"))?;
        let header = upload.get("header").and_then(Value::as_object);
        let chunk_size = header.and_then(|h| h.get("chunk_size")).and_then(|c| {
            c.as_str()
                .and_then(|s| s.parse::<u64>().ok())
                .or(c.as_u64())
        });
        let size = f.hashes.size;
        if let (Some(chunk), Some(h)) = (chunk_size, header) {
            if chunk == 0 {
                return Err(HubError::protocol(repo, "LFS upload", "chunk_size 0"));
            }
            let mut parts: Vec<(u64, String)> = h
                .iter()
                .filter_map(|(k, v)| Some((k.parse::<u64>().ok()?, v.as_str()?.to_string())))
                .collect();
            parts.sort();
            if parts.len() as u64 != size.div_ceil(chunk) {
                return Err(HubError::protocol(
                    repo,
                    "LFS upload",
                    "wrong number of parts",
                ));
            }
            let mut etags = Vec::new();
            for (i, (n, part_url)) in parts.iter().enumerate() {
                let start = i as u64 * chunk;
                let len = chunk.min(size - start);
                let data = hashing::read_range(&f.local, start, len).await?;
                let resp = self
                    .send(repo, "LFS part upload", || {
                        Ok(self.request(Method::PUT, part_url).body(data.clone()))
                    })
                    .await?;
                let resp = check(
                    resp,
                    repo,
                    Some(&f.path_in_repo),
                    None,
                    "LFS part upload",
                    self,
                )
                .await?;
                let etag = resp
                    .headers()
                    .get("etag")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                etags.push(json!({"partNumber": n, "etag": etag}));
                progress.advance(len);
            }
            let body = json!({"oid": f.hashes.sha256_hex(), "parts": etags});
            let resp = self
                .send(repo, "LFS multipart completion", || {
                    Ok(self
                        .request(Method::POST, href)
                        .header("Accept", "application/vnd.git-lfs+json")
                        .header("Content-Type", "application/vnd.git-lfs+json")
                        .json(&body))
                })
                .await?;
            check(
                resp,
                repo,
                Some(&f.path_in_repo),
                None,
                "LFS multipart completion",
                self,
            )
            .await?;
        } else {
            let local = f.local.clone();
            let hdrs = header_map(header);
            let resp = self
                .send(repo, "LFS upload", || {
                    let body = hashing::file_body(&local)?;
                    // With its length: S3's presigned PUTs refuse a chunked
                    // body (501) and a missing length (411).
                    Ok(self
                        .request(Method::PUT, href)
                        .headers(hdrs.clone())
                        .header(reqwest::header::CONTENT_LENGTH, size)
                        .body(body))
                })
                .await?;
            check(resp, repo, Some(&f.path_in_repo), None, "LFS upload", self).await?;
            progress.advance(size);
        }
        if let Some(verify) = actions.get("verify") {
            let vurl = verify
                .get("href")
                .and_then(Value::as_str)
                .ok_or_else(|| HubError::protocol(repo, "LFS verify", "no href"))?;
            let hdrs = header_map(verify.get("header").and_then(Value::as_object));
            let body = json!({"oid": f.hashes.sha256_hex(), "size": size});
            let resp = self
                .send(repo, "LFS verify", || {
                    Ok(self
                        .request(Method::POST, vurl)
                        .headers(hdrs.clone())
                        .json(&body))
                })
                .await?;
            check(resp, repo, Some(&f.path_in_repo), None, "LFS verify", self).await?;
        }
        Ok(size)
    }

    /// Make a commit with the NDJSON commit API. `lfs` files are referenced by
    /// SHA-256 (their objects must be uploaded already); `regular` files are
    /// sent inline; `deleted` paths are removed.
    ///
    /// The commit names the branch's head as its parent, and is never sent
    /// twice blindly: when its POST fails without an answer or with a 5xx,
    /// the branch is read again; if it moved to a commit that holds exactly
    /// these changes, that is this commit, else (unmoved) it is sent again.
    pub async fn commit(
        &self,
        repo: &str,
        revision: &str,
        summary: &str,
        lfs: &[&UploadFile],
        regular: &[&UploadFile],
        deleted: &[String],
    ) -> Result<(CommitInfo, u64)> {
        let parent = self.repo_info(repo, revision).await?.sha;
        let mut lines = Vec::new();
        let mut header = serde_json::to_vec(&json!({"key": "header", "value": {
            "summary": summary, "description": "", "parentCommit": parent,
        }}))
        .unwrap_or_default();
        header.push(b'\n');
        lines.extend(header);
        let mut inline = 0u64;
        for f in regular {
            let data = tokio::fs::read(&f.local)
                .await
                .map_err(|e| HubError::io(&f.local, e))?;
            inline += data.len() as u64;
            let v = json!({"key": "file", "value": {
                "path": f.path_in_repo,
                "encoding": "base64",
                "content": base64::engine::general_purpose::STANDARD.encode(&data),
            }});
            lines.extend(serde_json::to_vec(&v).unwrap_or_default());
            lines.push(b'\n');
        }
        for f in lfs {
            let v = json!({"key": "lfsFile", "value": {
                "path": f.path_in_repo, "algo": "sha256", "oid": f.hashes.sha256_hex(), "size": f.hashes.size,
            }});
            lines.extend(serde_json::to_vec(&v).unwrap_or_default());
            lines.push(b'\n');
        }
        for p in deleted {
            let v = json!({"key": "deletedFile", "value": {"path": p}});
            lines.extend(serde_json::to_vec(&v).unwrap_or_default());
            lines.push(b'\n');
        }
        let url = format!(
            "{}/api/models/{}/commit/{}",
            self.endpoint,
            repo,
            encode(revision, false)
        );
        let mut attempt = 0u32;
        loop {
            let mut stalls = 0u32;
            let sent = self
                .send_with(
                    repo,
                    "commit",
                    &mut || {
                        Ok(self
                            .request(Method::POST, &url)
                            .header("Content-Type", "application/x-ndjson")
                            .body(lines.clone()))
                    },
                    &mut stalls,
                    false,
                )
                .await;
            let failure = match sent {
                Ok(resp) if !resp.status().is_server_error() => {
                    let resp = check(resp, repo, None, Some(revision), "commit", self).await?;
                    let v = self.json(resp, repo, "commit").await?;
                    let oid = v
                        .get("commitOid")
                        .and_then(Value::as_str)
                        .ok_or_else(|| HubError::protocol(repo, "commit", "no commitOid"))?;
                    let url = v.get("commitUrl").and_then(Value::as_str).unwrap_or("");
                    return Ok((
                        CommitInfo {
                            oid: oid.into(),
                            url: url.into(),
                        },
                        inline,
                    ));
                }
                Ok(resp) => check(resp, repo, None, Some(revision), "commit", self)
                    .await
                    .err()
                    .unwrap_or_else(|| HubError::protocol(repo, "commit", "server error")),
                Err(e @ (HubError::Network { .. } | HubError::Stalled { .. })) => e,
                Err(e) => return Err(e),
            };
            // Did it land? Read the branch again before sending it again.
            let now = self.repo_info(repo, revision).await?.sha;
            if now != parent {
                let tree = self.list_files(repo, &now).await?;
                let at: std::collections::HashMap<&str, &RepoFile> =
                    tree.iter().map(|f| (f.path.as_str(), f)).collect();
                let landed = lfs.iter().all(|f| {
                    at.get(f.path_in_repo.as_str())
                        .is_some_and(|r| r.lfs_sha256.as_deref() == Some(&f.hashes.sha256_hex()))
                }) && regular.iter().all(|f| {
                    at.get(f.path_in_repo.as_str())
                        .is_some_and(|r| Some(&r.oid) == f.hashes.git_oid.as_ref())
                }) && deleted.iter().all(|p| !at.contains_key(p.as_str()));
                if landed {
                    self.note(&format!(
                        "{repo}: the commit whose answer was lost ({failure}) is there: {now}"
                    ));
                    return Ok((
                        CommitInfo {
                            oid: now,
                            url: String::new(),
                        },
                        inline,
                    ));
                }
                return Err(HubError::protocol(
                    repo,
                    "commit",
                    format!(
                        "{failure}; meanwhile {revision} moved to {now}, which is not this commit: \
                         not sending it again"
                    ),
                ));
            }
            attempt += 1;
            if attempt > self.retry.max_retries {
                return Err(failure);
            }
            let wait = self.retry.delay(attempt - 1);
            self.note(&format!(
                "{repo}: commit: {failure}; it did not land: sending it again in {:.1} s",
                wait.as_secs_f64()
            ));
            tokio::time::sleep(wait).await;
        }
    }

    /// Upload files in commits of at most [`MAX_COMMIT_FILES`] changes:
    /// preupload to sort LFS from regular files (empty files are regular,
    /// as on the Hub), LFS batch to send only objects the server lacks,
    /// then the commits, in the order of `files` (the last commit holds the
    /// last files, so a file that makes the others valid, such as a mirror's
    /// manifest, goes last), with `deleted` paths removed by the first.
    /// Regular files whose remote blob id already matches are left out.
    pub async fn upload_files(
        &self,
        repo: &str,
        revision: &str,
        summary: &str,
        files: &[UploadFile],
        deleted: &[String],
        progress: Arc<dyn ProgressSink>,
    ) -> Result<UploadStats> {
        check_repo_id(repo)?;
        check_revision(revision)?;
        for f in files {
            check_repo_path(&f.path_in_repo)?;
        }
        let modes = self.preupload(repo, revision, files).await?;
        let mut lfs = Vec::new();
        // Each change in order: (is LFS, file).
        let mut changes: Vec<(bool, &UploadFile)> = Vec::new();
        for (f, (is_lfs, remote)) in files.iter().zip(modes) {
            if is_lfs && f.hashes.size > 0 {
                lfs.push(f);
                changes.push((true, f));
            } else if remote.is_none() || remote != f.hashes.git_oid {
                changes.push((false, f));
            }
        }
        let mut stats = UploadStats::default();
        let (sent, n_sent, n_present) = self.upload_lfs(repo, revision, &lfs, progress).await?;
        stats.lfs_bytes_sent = sent;
        stats.lfs_objects_sent = n_sent;
        stats.lfs_objects_present = n_present;
        let mut batches: Vec<(Vec<&UploadFile>, Vec<&UploadFile>, &[String])> = Vec::new();
        let mut deletes = deleted;
        loop {
            let take = deletes.len().min(MAX_COMMIT_FILES);
            let (now, later) = deletes.split_at(take);
            deletes = later;
            let room = MAX_COMMIT_FILES - take;
            let n = room.min(changes.len());
            let mut l = Vec::new();
            let mut r = Vec::new();
            for (is_lfs, f) in changes.drain(..n) {
                if is_lfs { l.push(f) } else { r.push(f) }
            }
            batches.push((l, r, now));
            if deletes.is_empty() && changes.is_empty() {
                break;
            }
        }
        let count = batches.len();
        for (k, (l, r, d)) in batches.into_iter().enumerate() {
            let title = if count == 1 {
                summary.to_string()
            } else {
                format!("{summary} ({} of {count})", k + 1)
            };
            let (info, inline) = self.commit(repo, revision, &title, &l, &r, d).await?;
            stats.inline_bytes_sent += inline;
            stats.commit = Some(info);
        }
        Ok(stats)
    }
}

/// The most changes (files added, changed or deleted) one commit holds, as
/// the Hub advises.
pub const MAX_COMMIT_FILES: usize = 100;

fn header_map(h: Option<&serde_json::Map<String, Value>>) -> HeaderMap {
    let mut out = HeaderMap::new();
    if let Some(h) = h {
        for (k, v) in h {
            if let (Ok(name), Some(Ok(val))) = (
                reqwest::header::HeaderName::from_bytes(k.as_bytes()),
                v.as_str().map(HeaderValue::from_str),
            ) {
                out.insert(name, val);
            }
        }
    }
    out
}

/// Whether an answer may go away if asked again: 429 and 5xx, but not
/// serve's 500 for a damaged store object (`x-error-code: StoreDamaged`),
/// which retries only delay. (Other codes on a 500 are retried: a proxy or
/// the Hub may name a transient one.)
fn is_retryable(resp: &Response) -> bool {
    match resp.status().as_u16() {
        429 | 502 | 503 | 504 => true,
        500 => resp
            .headers()
            .get("x-error-code")
            .is_none_or(|c| c != crate::server::STORE_DAMAGED),
        _ => false,
    }
}

/// Why [`HubClient::execute_following`] gave up without an answer.
enum Exec {
    Stalled,
    TooManyRedirects,
}

/// Where a redirect answer points, resolved against the request's URL.
fn redirect_target(resp: &Response, url: &reqwest::Url) -> Option<reqwest::Url> {
    if !resp.status().is_redirection() {
        return None;
    }
    let loc = resp.headers().get("location")?.to_str().ok()?;
    url.join(loc).ok()
}

/// `scheme://host:port` of a URL (for messages).
fn origin_of(url: &str) -> String {
    reqwest::Url::parse(url)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_else(|_| url.to_string())
}

/// How long a 429 asks to wait: `Retry-After`, else the `t` of the Hub's
/// `RateLimit: "api";r=0;t=<seconds>` header.
fn rate_limit_wait(h: &HeaderMap) -> Option<Duration> {
    retry_after(h).or_else(|| {
        let v = h.get("ratelimit")?.to_str().ok()?;
        v.split([';', ','])
            .find_map(|p| p.trim().strip_prefix("t="))
            .and_then(|t| t.trim().parse::<u64>().ok())
            .map(Duration::from_secs)
    })
}

fn retry_after(h: &HeaderMap) -> Option<Duration> {
    h.get("retry-after")?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `<url>; rel="next"` from a `Link` header.
fn next_link(h: &HeaderMap) -> Option<String> {
    let link = h.get("link")?.to_str().ok()?;
    for part in link.split(',') {
        let mut it = part.split(';');
        let url = it.next()?.trim();
        if it.any(|p| p.trim().replace(' ', "") == "rel=\"next\"") {
            return Some(
                url.trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_string(),
            );
        }
    }
    None
}

fn content_range_start(h: &HeaderMap) -> Option<u64> {
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

async fn read_limited(
    mut resp: Response,
    limit: usize,
    stall: Duration,
) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let next = tokio::time::timeout(stall, resp.chunk())
            .await
            .map_err(|_| format!("no bytes for {} s", stall.as_secs_f64().ceil()))?;
        let Some(c) = next.map_err(|e| e.to_string())? else {
            break;
        };
        if out.len() + c.len() > limit {
            return Err(format!("answer longer than {limit} bytes"));
        }
        out.extend_from_slice(&c);
    }
    Ok(out)
}

/// Turn an error status into a [`HubError`], reading `X-Error-Code`.
async fn check(
    resp: Response,
    repo: &str,
    file: Option<&str>,
    revision: Option<&str>,
    what: &'static str,
    client: &HubClient,
) -> Result<Response> {
    let endpoint = client.endpoint.as_str();
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let code = resp
        .headers()
        .get("x-error-code")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let header_msg = resp
        .headers()
        .get("x-error-message")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    match code.as_deref() {
        Some("RepoNotFound") => {
            return Err(HubError::RepoNotFound {
                repo: repo.into(),
                endpoint: endpoint.into(),
            });
        }
        Some("RevisionNotFound") => {
            return Err(HubError::RevisionNotFound {
                repo: repo.into(),
                revision: revision.unwrap_or("").into(),
            });
        }
        Some("EntryNotFound") => {
            return Err(HubError::EntryNotFound {
                repo: repo.into(),
                file: file.unwrap_or("").into(),
            });
        }
        _ => {}
    }
    if code.as_deref() == Some("GatedRepo") {
        return Err(HubError::Gated {
            repo: repo.into(),
            endpoint: endpoint.into(),
        });
    }
    if status == StatusCode::UNAUTHORIZED && !client.has_token() {
        return Err(HubError::TokenRequired {
            repo: repo.into(),
            status: status.as_u16(),
            hint: client.token_hint.to_string(),
        });
    }
    if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
        return Err(HubError::Unauthorized {
            repo: repo.into(),
            status: status.as_u16(),
            hint: client.token_hint.to_string(),
        });
    }
    let body = read_limited(resp, 64 << 10, STALL_TIMEOUT)
        .await
        .unwrap_or_default();
    let mut message = header_msg.unwrap_or_else(|| {
        serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.get("error").and_then(Value::as_str).map(String::from))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned())
    });
    if message.len() > 300 {
        let mut cut = 300;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    if status == StatusCode::NOT_FOUND && file.is_some() && what != "LFS upload" {
        return Err(HubError::EntryNotFound {
            repo: repo.into(),
            file: file.unwrap_or("").into(),
        });
    }
    Err(HubError::Http {
        repo: repo.into(),
        file: file.map(String::from),
        what,
        status: status.as_u16(),
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An LFS PUT of a file goes out with its `Content-Length` and no
    /// chunked encoding (S3's presigned PUTs refuse those), and no token to
    /// another host.
    #[tokio::test]
    async fn a_file_put_has_a_length_and_no_token_elsewhere() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let head = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = Vec::new();
            let mut b = [0u8; 4096];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut b).await.unwrap();
                buf.extend_from_slice(&b[..n]);
            }
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
            String::from_utf8_lossy(&buf).to_ascii_lowercase()
        });
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("x.bin");
        std::fs::write(&f, vec![7u8; 100_000]).unwrap();
        let c = HubClient::new("http://127.0.0.1:1", Some("hf_secret".into())).unwrap();
        let up = UploadFile {
            path_in_repo: "x.bin".into(),
            local: f.clone(),
            hashes: hashing::hash_file(&f, false).unwrap(),
        };
        let actions = json!({"upload": {"href": format!("http://{addr}/put")}});
        c.upload_one("org/m", &up, &actions, &brevis_core::NoProgress)
            .await
            .unwrap();
        let head = head.await.unwrap();
        assert!(head.contains("content-length: 100000"), "{head}");
        assert!(!head.contains("transfer-encoding"), "{head}");
        assert!(!head.contains("authorization"), "{head}");
    }

    #[test]
    fn link_header() {
        let mut h = HeaderMap::new();
        h.insert(
            "link",
            HeaderValue::from_static(
                "<http://x/api/models/a/b/tree/main?cursor=abc>; rel=\"next\"",
            ),
        );
        assert_eq!(
            next_link(&h).as_deref(),
            Some("http://x/api/models/a/b/tree/main?cursor=abc")
        );
    }

    #[test]
    fn token_only_for_own_endpoint() {
        let c = HubClient::new("http://127.0.0.1:80", Some("t".into())).unwrap();
        assert!(c.is_ours("http://127.0.0.1:80/api/models/a/b"));
        assert!(c.is_ours("http://127.0.0.1:80"));
        assert!(!c.is_ours("http://127.0.0.1:8080/api/models/a/b"));
        assert!(!c.is_ours("http://127.0.0.1:80.evil.example/x"));
    }

    #[test]
    fn token_hidden_in_debug() {
        let c = HubClient::new("http://127.0.0.1:1", Some("hf_secret".into())).unwrap();
        assert!(!format!("{c:?}").contains("hf_secret"));
    }
}
