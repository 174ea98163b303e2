//! Errors of the Hub adapter (one enum for the whole boundary).

use std::path::PathBuf;

/// Anything that can go wrong talking to a Hub, mirroring, pulling or serving.
///
/// HTTP errors keep the repo id, the file (when there is one) and the status.
/// The token is never part of any message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HubError {
    /// The repo does not exist (or the token may not see it).
    #[error("repository {repo} not found on {endpoint}")]
    RepoNotFound {
        /// Repo id.
        repo: String,
        /// Hub endpoint.
        endpoint: String,
    },
    /// The revision does not exist in the repo.
    #[error("revision {revision} not found in {repo}")]
    RevisionNotFound {
        /// Repo id.
        repo: String,
        /// Revision asked for.
        revision: String,
    },
    /// The file does not exist at that revision.
    #[error("{file} not found in {repo}")]
    EntryNotFound {
        /// Repo id.
        repo: String,
        /// File path in the repo.
        file: String,
    },
    /// The Hub refused the token (401/403).
    #[error("{repo}: the Hub refused the token ({status}): check {hint}")]
    Unauthorized {
        /// Repo id (or the endpoint used).
        repo: String,
        /// HTTP status.
        status: u16,
        /// Where the token comes from (e.g. `HF_TOKEN / --token`).
        hint: String,
    },
    /// The request needs a token and none was sent (401).
    #[error(
        "{repo}: the Hub answered {status}: a token is needed and none was sent; give one with {hint} (`hf auth login` stores one for HF_TOKEN's endpoint)"
    )]
    TokenRequired {
        /// Repo id (or the endpoint used).
        repo: String,
        /// HTTP status.
        status: u16,
        /// Where a token would come from (e.g. `HF_TOKEN / --token`).
        hint: String,
    },
    /// The repo is gated: its terms must be accepted on its page first.
    #[error(
        "{repo} is gated: accept its terms at {endpoint}/{repo} with the account the token belongs to, then try again"
    )]
    Gated {
        /// Repo id.
        repo: String,
        /// Hub endpoint.
        endpoint: String,
    },
    /// The Hub kept answering 429 for longer than the client may wait.
    #[error(
        "{repo}: {what}: rate limited by the Hub; waited {waited_secs} s of at most {limit_secs} s (BREVIS_RATE_LIMIT_WAIT sets how long to wait)"
    )]
    RateLimited {
        /// Repo id.
        repo: String,
        /// Which call.
        what: &'static str,
        /// Seconds waited for this call so far (and the next wait asked).
        waited_secs: u64,
        /// The most this client waits.
        limit_secs: u64,
    },
    /// The endpoint cannot be reached and retrying will not help (its name
    /// does not resolve, or nothing listens there).
    #[error("{endpoint}: {reason}")]
    Unreachable {
        /// The endpoint or host.
        endpoint: String,
        /// What failed and what to do.
        reason: String,
    },
    /// A mirror's destination holds something else (another repo's files,
    /// or a mirror of another source): mirroring into it would replace
    /// that, which takes `MirrorOptions::force`. Nothing was changed.
    #[error("the destination {dest} {reason}; nothing was changed")]
    DestinationTaken {
        /// The destination repo.
        dest: String,
        /// What it holds.
        reason: String,
    },
    /// The repo already exists (creating it).
    #[error("repository {repo} already exists")]
    RepoExists {
        /// Repo id.
        repo: String,
    },
    /// Any other HTTP failure.
    #[error("{repo}{}: HTTP {status} from {what}: {message}", file.as_deref().map(|f| format!(" {f}")).unwrap_or_default())]
    Http {
        /// Repo id.
        repo: String,
        /// File, when the request was about one.
        file: Option<String>,
        /// Which call failed (e.g. `tree listing`).
        what: &'static str,
        /// HTTP status.
        status: u16,
        /// The server's message, shortened.
        message: String,
    },
    /// A connection failed and retries were exhausted.
    #[error("{repo}: {what} failed after {attempts} attempts: {source}")]
    Network {
        /// Repo id.
        repo: String,
        /// Which call failed.
        what: &'static str,
        /// Attempts made.
        attempts: u32,
        /// The last cause.
        source: Box<reqwest::Error>,
    },
    /// The server sent nothing for too long, again and again.
    #[error(
        "{repo}: {what}: {endpoint} sent nothing for {seconds} s, {attempts} time(s) in a row; giving up (is the server up and answering?)"
    )]
    Stalled {
        /// Repo id.
        repo: String,
        /// Which call.
        what: &'static str,
        /// The endpoint asked.
        endpoint: String,
        /// The no-progress timeout, in seconds.
        seconds: u64,
        /// Attempts that stalled.
        attempts: u32,
    },
    /// The server answered something this client cannot use.
    #[error("{repo}: unexpected answer to {what}: {reason}")]
    Protocol {
        /// Repo id.
        repo: String,
        /// Which call.
        what: &'static str,
        /// What was wrong.
        reason: String,
    },
    /// A repo id, revision, glob or path is not acceptable.
    #[error("invalid {what} {value:?}: {reason}")]
    Invalid {
        /// What kind of value (repo id, path, revision...).
        what: &'static str,
        /// The value.
        value: String,
        /// Why.
        reason: String,
    },
    /// Downloaded or decoded bytes do not hash to what the Hub or manifest records.
    #[error("{repo} {file}: {what} mismatch: expected {expected}, got {actual}")]
    Integrity {
        /// Repo id.
        repo: String,
        /// File path.
        file: String,
        /// What differs: `SHA-256`, `size` or `git blob id`.
        what: &'static str,
        /// Expected hex digest.
        expected: String,
        /// Actual hex digest.
        actual: String,
    },
    /// Local file I/O.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The codec failed to compress.
    #[error("compressing {file}: {source}")]
    Encode {
        /// File path.
        file: String,
        /// Cause.
        source: Box<brevis_core::EncodeError>,
    },
    /// The codec failed to decode.
    #[error("decoding {file}: {source}")]
    Decode {
        /// File path.
        file: String,
        /// Cause.
        source: Box<brevis_core::DecodeError>,
    },
    /// The source repo a mirror names cannot be read where it was looked
    /// for, so filing the mirror's files in the HF cache under the source's
    /// name would rest on the mirror's word alone (see
    /// `PullOptions::trust_mirror`). Nothing was written.
    #[error(
        "{source_repo}@{commit} cannot be read at {endpoint} ({why}), so nothing vouches that {mirror} holds its files; nothing was written"
    )]
    SourceUnchecked {
        /// The mirror repo.
        mirror: String,
        /// Where the source was looked for.
        endpoint: String,
        /// The source repo its manifest names.
        source_repo: String,
        /// The source commit (short).
        commit: String,
        /// Why it could not be read.
        why: String,
    },
    /// A manifest is missing or malformed.
    #[error("{repo}: bad manifest: {reason}")]
    Manifest {
        /// Repo id or folder.
        repo: String,
        /// Why.
        reason: String,
    },
}

impl HubError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        HubError::Io {
            path: path.into(),
            source,
        }
    }
    pub(crate) fn invalid(what: &'static str, value: &str, reason: impl Into<String>) -> Self {
        HubError::Invalid {
            what,
            value: value.to_string(),
            reason: reason.into(),
        }
    }
    pub(crate) fn protocol(repo: &str, what: &'static str, reason: impl Into<String>) -> Self {
        HubError::Protocol {
            repo: repo.to_string(),
            what,
            reason: reason.into(),
        }
    }
}

/// Result with [`HubError`].
pub type Result<T, E = HubError> = std::result::Result<T, E>;
