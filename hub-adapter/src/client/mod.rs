//! The Hub HTTP client: repo info, tree listing, downloads with resume,
//! repo creation, preupload, LFS batch uploads and the NDJSON commit.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{HubError, Result};

mod download;
mod ranged;
mod repo;
mod send;
mod types;
mod upload;

pub use download::incomplete_path;
use download::{content_range_start, finish_download};
pub use ranged::{ChunkPlan, DEFAULT_CHUNK_SIZE, DEFAULT_CONNECTIONS};
pub use send::{MAX_JSON_LEN, RetryPolicy};
use send::{check, redirect_target};
pub use types::{
    CommitInfo, DownloadStats, Expect, FileMetadata, RepoFile, RepoInfo, UploadFile, UploadStats,
};
pub use upload::MAX_COMMIT_FILES;

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

/// Where a token comes from, as a refused token's message names it.
pub const DEFAULT_TOKEN_HINT: &str = "HF_TOKEN";

/// A callback for status lines about the connection (stalls, retries).
pub type ClientNotes = Arc<dyn Fn(&str) + Send + Sync>;

/// How long a request may go without a byte from the server (headers or
/// body) before that attempt is given up.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Stalled attempts of one call before it fails: with [`STALL_TIMEOUT`],
/// a server that accepts connections and never answers is given up on in
/// about 90 s.
pub const MAX_STALLS: u32 = 3;

/// How long a connection may take to open: longer is a host that is not
/// there (or a network that is down).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// How long one read may wait for bytes at the socket, a backstop beside
/// the client's own [`STALL_TIMEOUT`].
const READ_TIMEOUT: Duration = Duration::from_secs(120);

/// Files downloaded or uploaded at once by default: enough to hide each
/// request's round trips without crowding a connection.
const DEFAULT_CONCURRENCY: usize = 4;

impl std::fmt::Debug for HubClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubClient")
            .field("endpoint", &self.endpoint)
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .finish()
    }
}

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
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
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
            concurrency: DEFAULT_CONCURRENCY,
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_hidden_in_debug() {
        let c = HubClient::new("http://127.0.0.1:1", Some("hf_secret".into())).unwrap();
        assert!(!format!("{c:?}").contains("hf_secret"));
    }
}
