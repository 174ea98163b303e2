//! Errors, one enum per boundary.

use std::path::PathBuf;

/// Anything that can go wrong while reading an archive or executing a program.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The bytes end before a field that must be there.
    #[error("truncated archive: needed {needed} bytes at offset {offset}, have {have}")]
    Truncated {
        /// Where the field starts.
        offset: u64,
        /// How many bytes it needs.
        needed: u64,
        /// How many bytes are left.
        have: u64,
    },
    /// The file does not start with the `.brv` magic.
    #[error("not a Brevis archive (bad magic)")]
    BadMagic,
    /// Written by a newer Brevis.
    #[error("unsupported archive format version {0}")]
    UnsupportedVersion(u16),
    /// The archive's structure (preamble, segment table, region offsets)
    /// does not hold together: most often a file cut short or altered in
    /// transit, so fetching it again may help.
    #[error("archive is truncated or damaged: {0}")]
    Damaged(String),
    /// A value inside a program or a coded stream is out of range or
    /// inconsistent, in an archive whose structure holds together.
    #[error("corrupt archive: {0}")]
    Corrupt(String),
    /// A byte range asked of [`crate::Archive::read_range`] lies outside the file.
    #[error("range {offset}+{len} is outside the {file_len}-byte file")]
    OutOfRange {
        /// Start of the range asked for.
        offset: u64,
        /// Its length.
        len: u64,
        /// Length of the original file.
        file_len: u64,
    },
    /// The destination exists and overwriting was not asked for.
    #[error("{0} already exists")]
    Exists(PathBuf),
    /// A named limit would be exceeded.
    #[error("limit exceeded: {what} is {value}, the limit is {limit}")]
    Limit {
        /// Which limit.
        what: &'static str,
        /// The value found.
        value: u64,
        /// The limit.
        limit: u64,
    },
    /// A checksum of a region does not match.
    #[error("checksum mismatch in {what}")]
    Checksum {
        /// What was being checked.
        what: String,
    },
    /// The decoded file's SHA-256 is not the one recorded.
    #[error("SHA-256 mismatch: archive records {expected}, decoded bytes hash to {actual}")]
    ShaMismatch {
        /// Recorded hash (hex).
        expected: String,
        /// Hash of the decoded bytes (hex).
        actual: String,
    },
    /// Writing the decoded bytes to the caller's writer failed (callers
    /// that know the writer's path report it as [`DecodeError::Io`]).
    #[error("writing the decoded bytes: {0}")]
    Write(std::io::Error),
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A prior file could not be parsed.
    #[error("invalid prior: {0}")]
    Prior(String),
}

/// Anything that can go wrong while compressing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The input claims to be safetensors but its header is malformed.
    #[error("{path}: malformed safetensors: {reason}")]
    Safetensors {
        /// The file (or `<memory>`).
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// Writing the decoded bytes to the caller's writer failed (callers
    /// that know the writer's path report it as [`DecodeError::Io`]).
    #[error("writing the decoded bytes: {0}")]
    Write(std::io::Error),
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The destination exists and overwriting was not asked for.
    #[error("{0} already exists")]
    Exists(PathBuf),
    /// Internal self-check failed: the written archive does not decode to the input.
    #[error("self-check failed: {0}")]
    SelfCheck(String),
    /// A value is too large for the format.
    #[error("input too large: {0}")]
    TooLarge(String),
    /// The source's bytes do not hash to the SHA-256 the caller gave
    /// ([`CompressOptions::source_sha256`](crate::CompressOptions::source_sha256)):
    /// found by the self-check, which then leaves no archive.
    #[error("the source's SHA-256 is {actual}, not {given} as given")]
    SourceSha256 {
        /// The digest given (hex).
        given: String,
        /// The source's own (hex).
        actual: String,
    },
}

impl DecodeError {
    /// A value in a program or a coded stream is out of range.
    pub(crate) fn corrupt(msg: impl std::fmt::Display) -> Self {
        DecodeError::Corrupt(msg.to_string())
    }
    /// The archive's structure (preamble, segment table, region offsets)
    /// does not hold together: most often a file cut short in transit.
    pub(crate) fn damaged(msg: impl std::fmt::Display) -> Self {
        DecodeError::Damaged(msg.to_string())
    }
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        DecodeError::Io {
            path: path.into(),
            source,
        }
    }
}

impl EncodeError {
    #[cfg(feature = "search")]
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        EncodeError::Io {
            path: path.into(),
            source,
        }
    }
}
