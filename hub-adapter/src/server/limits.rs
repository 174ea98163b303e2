//! The server's named limits: every body, stream and connection is bounded.
//!
//! The defaults keep a server on a small machine under a few hundred MB
//! whatever clients do: JSON bodies are small; a commit is read one NDJSON
//! line at a time (regular files are at most [`MAX_REGULAR_FILE`], larger
//! ones go through LFS) and only [`MAX_CONCURRENT_COMMITS`] are read at
//! once; an upload is streamed to disk and may be no longer than its ticket
//! says; files decoded on the fly take one of [`MAX_DECODED_STREAMS`]
//! slots (one blocking thread and about one region of memory each) or wait
//! for one, then get 503 with `Retry-After`; each client address may hold
//! [`MAX_CONNECTIONS_PER_ADDR`] connections.

use std::time::Duration;

use super::store::LFS_SIZE_THRESHOLD;

/// Largest body of the small JSON endpoints (repo creation, branch, LFS
/// verify).
pub const MAX_JSON_BODY: u64 = 64 << 10;
/// Largest preupload body (a path, size and 512-byte sample per file;
/// `huggingface_hub` sends 256 files a call).
pub const MAX_PREUPLOAD_BODY: u64 = 4 << 20;
/// Largest LFS batch body (`huggingface_hub` sends 256 objects a call).
pub const MAX_BATCH_BODY: u64 = 4 << 20;
/// Most objects one LFS batch request may ask about (git-lfs asks 100 at
/// a time, `huggingface_hub` 256).
pub const MAX_BATCH_OBJECTS: usize = 1000;
/// Largest LFS object accepted (the Hub takes files up to 50 GB).
pub const MAX_LFS_OBJECT: u64 = 1 << 40;
/// Most part URLs one batch answer holds (an object has at most 10,000
/// parts): more, and the client is told to ask for fewer objects at once.
pub const MAX_BATCH_PARTS: u64 = 20_000;
/// Most files a repo's commit may hold (every read of the repo parses its
/// record).
pub const MAX_REPO_FILES: usize = 100_000;
/// Largest multipart completion body (10,000 parts with their ETags).
pub const MAX_COMPLETE_BODY: u64 = 4 << 20;
/// Largest commit body. Files of [`LFS_SIZE_THRESHOLD`] or more go through
/// LFS, so a commit carries only small files and LFS pointers.
pub const MAX_COMMIT_BODY: u64 = 64 << 20;
/// Largest regular (non-LFS) file in a commit, decoded.
pub const MAX_REGULAR_FILE: u64 = LFS_SIZE_THRESHOLD;
/// Longest NDJSON line of a commit: a regular file of [`MAX_REGULAR_FILE`]
/// in base64, and room for its path.
pub const MAX_COMMIT_LINE: u64 = MAX_REGULAR_FILE.div_ceil(3) * 4 + (64 << 10);
/// Commit bodies read at once; more wait their turn.
pub const MAX_CONCURRENT_COMMITS: usize = 2;
/// How long a commit waits for one of the slots of commits being read
/// before 503.
pub const COMMIT_QUEUE_WAIT: Duration = Duration::from_secs(30);
/// The `Retry-After` (seconds) of a commit turned away for want of a slot:
/// about as long as reading a commit body takes.
pub const COMMIT_RETRY_AFTER: u64 = 5;
/// Files decoded on the fly at once, each on a blocking thread.
pub const MAX_DECODED_STREAMS: usize = 8;
/// How long a request for a decoded file waits for a slot before 503.
pub const DECODE_QUEUE_WAIT: Duration = Duration::from_secs(10);
/// Longest `Retry-After` (seconds) of a request turned away for want of a
/// decoding slot, whatever the queue wait.
pub const MAX_DECODE_RETRY_AFTER: u64 = 30;
/// Open connections in all.
pub const MAX_CONNECTIONS: usize = 1024;
/// Open connections from one client address.
pub const MAX_CONNECTIONS_PER_ADDR: usize = 64;
/// A request body that sends nothing for this long is cut (408).
pub const BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// A body may come at any rate for this long; after it, at
/// [`MIN_BODY_RATE`] on average or be cut (408).
pub const BODY_GRACE: Duration = Duration::from_secs(30);
/// The slowest average rate a body may come at once [`BODY_GRACE`] is
/// over (bytes a second; 128 kbit/s).
pub const MIN_BODY_RATE: u64 = 16 << 10;
/// A download whose client takes nothing for this long is cut.
pub const SEND_STALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest buffer kept for one connection's request head (its request
/// line and headers): a Hub client's fit many times over.
pub const MAX_HEAD_BUF: usize = 64 << 10;
/// How long requests in flight may run once the server stops.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Upload leftovers (temp files, parts of an upload never completed) older
/// than this are removed; all of them when the server starts.
pub const STALE_UPLOAD_AGE: Duration = Duration::from_secs(48 * 3600);

/// The limits a server runs with (the constants above by default).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Limits {
    /// See [`MAX_COMMIT_BODY`].
    pub max_commit_body: u64,
    /// See [`MAX_CONCURRENT_COMMITS`].
    pub max_concurrent_commits: usize,
    /// See [`MAX_DECODED_STREAMS`].
    pub max_decoded_streams: usize,
    /// See [`DECODE_QUEUE_WAIT`].
    pub decode_queue_wait: Duration,
    /// See [`MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// See [`MAX_CONNECTIONS_PER_ADDR`].
    pub max_connections_per_addr: usize,
    /// See [`BODY_IDLE_TIMEOUT`].
    pub body_idle_timeout: Duration,
    /// See [`SEND_STALL_TIMEOUT`].
    pub send_stall_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_commit_body: MAX_COMMIT_BODY,
            max_concurrent_commits: MAX_CONCURRENT_COMMITS,
            max_decoded_streams: MAX_DECODED_STREAMS,
            decode_queue_wait: DECODE_QUEUE_WAIT,
            max_connections: MAX_CONNECTIONS,
            max_connections_per_addr: MAX_CONNECTIONS_PER_ADDR,
            body_idle_timeout: BODY_IDLE_TIMEOUT,
            send_stall_timeout: SEND_STALL_TIMEOUT,
        }
    }
}

impl Limits {
    /// Set the largest commit body.
    pub fn max_commit_body(mut self, n: u64) -> Self {
        self.max_commit_body = n;
        self
    }
    /// Set how many files may be decoded on the fly at once (at least 1).
    pub fn max_decoded_streams(mut self, n: usize) -> Self {
        self.max_decoded_streams = n.max(1);
        self
    }
    /// Set how long a request waits for a decoding slot.
    pub fn decode_queue_wait(mut self, d: Duration) -> Self {
        self.decode_queue_wait = d;
        self
    }
    /// Set the connection caps, in all and per client address (at least 1).
    pub fn connections(mut self, total: usize, per_addr: usize) -> Self {
        self.max_connections = total.max(1);
        self.max_connections_per_addr = per_addr.max(1);
        self
    }
    /// Set how long a request body may send nothing.
    pub fn body_idle_timeout(mut self, d: Duration) -> Self {
        self.body_idle_timeout = d.max(Duration::from_millis(1));
        self
    }
    /// Set how long a download may wait for its client to take bytes.
    pub fn send_stall_timeout(mut self, d: Duration) -> Self {
        self.send_stall_timeout = d.max(Duration::from_millis(1));
        self
    }
}
