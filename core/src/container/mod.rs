//! The `.brv` archive: see `docs/FORMAT.md`.
//! (Temporary stub body: replaced by the real format.)

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use crate::error::{DecodeError, EncodeError};
use crate::progress::{NoProgress, ProgressSink};

/// How to compress.
#[derive(Clone)]
#[non_exhaustive]
pub struct CompressOptions {
    /// Worker threads; 0 means all cores.
    pub threads: usize,
    /// Search budget (expansions per tensor).
    pub budget: u32,
    /// Prior steering the search; `None` means uniform.
    #[cfg(feature = "search")]
    pub prior: Option<Arc<crate::search::Prior>>,
    /// Progress events.
    pub progress: Arc<dyn ProgressSink>,
}

impl Default for CompressOptions {
    fn default() -> Self {
        CompressOptions {
            threads: 0,
            budget: 16,
            #[cfg(feature = "search")]
            prior: None,
            progress: Arc::new(NoProgress),
        }
    }
}

impl CompressOptions {
    /// Set the number of threads (0 = all cores).
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n;
        self
    }
    /// Set the search budget.
    pub fn budget(mut self, b: u32) -> Self {
        self.budget = b;
        self
    }
    /// Set the prior.
    #[cfg(feature = "search")]
    pub fn prior(mut self, p: Option<Arc<crate::search::Prior>>) -> Self {
        self.prior = p;
        self
    }
    /// Set the progress sink.
    pub fn progress(mut self, p: Arc<dyn ProgressSink>) -> Self {
        self.progress = p;
        self
    }
}

/// How to decompress.
#[derive(Clone)]
#[non_exhaustive]
pub struct DecompressOptions {
    /// Worker threads; 0 means all cores.
    pub threads: usize,
    /// Progress events.
    pub progress: Arc<dyn ProgressSink>,
}

impl Default for DecompressOptions {
    fn default() -> Self {
        DecompressOptions {
            threads: 0,
            progress: Arc::new(NoProgress),
        }
    }
}

impl DecompressOptions {
    /// Set the number of threads (0 = all cores).
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n;
        self
    }
    /// Set the progress sink.
    pub fn progress(mut self, p: Arc<dyn ProgressSink>) -> Self {
        self.progress = p;
        self
    }
}

/// What compressing one file produced.
#[derive(Debug, Clone)]
pub struct CompressReport {
    /// Length of the original file.
    pub original_len: u64,
    /// Length of the archive written.
    pub archive_len: u64,
    /// SHA-256 of the original file.
    pub sha256: [u8; 32],
}

/// What decompressing one archive produced.
#[derive(Debug, Clone)]
pub struct DecompressReport {
    /// Length of the decoded file.
    pub original_len: u64,
    /// SHA-256 of the decoded file (equal to the recorded one, or it is an error).
    pub sha256: [u8; 32],
}

/// Summary of an archive, read without decoding it.
#[derive(Debug, Clone)]
pub struct ArchiveInfo {
    /// Format version of the archive.
    pub format_version: u16,
    /// Length of the original file.
    pub original_len: u64,
    /// SHA-256 of the original file.
    pub sha256: [u8; 32],
}

/// Compress bytes in memory.
#[cfg(feature = "search")]
pub fn compress(data: &[u8], _opts: &CompressOptions) -> Result<Vec<u8>, EncodeError> {
    let _ = data;
    unimplemented!("stub")
}

/// Decompress an archive in memory, checking every checksum and the SHA-256.
pub fn decompress(archive: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let _ = archive;
    unimplemented!("stub")
}

/// Compress `src` into `dst` atomically (temp file + rename). Fails if `dst`
/// exists unless `overwrite`.
#[cfg(feature = "search")]
pub fn compress_file(
    src: &Path,
    dst: &Path,
    overwrite: bool,
    opts: &CompressOptions,
) -> Result<CompressReport, EncodeError> {
    let _ = (src, dst, overwrite, opts);
    unimplemented!("stub")
}

/// Decompress `src` into `dst` atomically, verifying the SHA-256.
pub fn decompress_file(
    src: &Path,
    dst: &Path,
    overwrite: bool,
    opts: &DecompressOptions,
) -> Result<DecompressReport, DecodeError> {
    let _ = (src, dst, overwrite, opts);
    unimplemented!("stub")
}

/// Decompress `src` into a writer, streaming, verifying the SHA-256 at the
/// end (a mismatch is an error after the bytes were written: callers that
/// must not expose wrong bytes write to a temp file).
pub fn decompress_to(
    src: &Path,
    out: &mut dyn Write,
    opts: &DecompressOptions,
) -> Result<DecompressReport, DecodeError> {
    let _ = (src, out, opts);
    unimplemented!("stub")
}

/// Read an archive's summary (length, SHA-256) without decoding it.
pub fn read_info(src: &Path) -> Result<ArchiveInfo, DecodeError> {
    let _ = src;
    unimplemented!("stub")
}
