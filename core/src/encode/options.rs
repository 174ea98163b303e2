//! How to compress, and what compressing one file produced.

use std::sync::Arc;

use crate::container::{DEFAULT_BUDGET, DEFAULT_REGION_WORDS};
use crate::progress::{NoProgress, ProgressSink};

/// How to compress.
#[derive(Clone)]
#[non_exhaustive]
pub struct CompressOptions {
    /// Worker threads; 0 means all cores.
    pub threads: usize,
    /// Compression level: the literal coders and zstd levels the encoder
    /// uses (see [`Level`](crate::Level)); set with
    /// [`CompressOptions::level`], which also sets the budget.
    pub level: crate::Level,
    /// Search budget: candidate programs tried per tensor (the level's
    /// unless set after it).
    pub budget: u32,
    /// Prior steering the search; `None` means uniform.
    pub prior: Option<Arc<crate::search::Prior>>,
    /// Progress events.
    pub progress: Arc<dyn ProgressSink>,
    /// Words per region.
    pub region_words: u64,
    /// Refuse (instead of carrying as plain bytes) input that looks like
    /// safetensors but is malformed.
    pub strict_safetensors: bool,
    /// Where the tensors are when another file describes them (a TF.js
    /// weight shard, an ONNX model's external data; see
    /// [`Sidecars`](crate::Sidecars)) and no format reader knows the file.
    pub sidecar: Option<Arc<crate::Sidecar>>,
    /// Also code small files whole and keep the smaller archive (see
    /// `WHOLE_FILE_MAX`).
    pub whole_file: bool,
    /// Prove the archive before handing it over: decode it and check the
    /// source's length and SHA-256 ([`EncodeError::SelfCheck`](crate::EncodeError::SelfCheck) otherwise;
    /// [`compress_file`](crate::compress_file) then leaves nothing at the destination). This is
    /// the only check that a program rebuilds its region: coding a region
    /// does not execute it a second time.
    pub verify: bool,
    /// The source's SHA-256 when the caller already has it (a download
    /// checked against the Hub's LFS oid): the archive records it and the
    /// source is not hashed a second time (at one thread, hashing is a
    /// fifth of compressing). Bytes that are not this digest's fail the
    /// archive's SHA-256 check wherever it is decoded: with
    /// [`verify`](Self::verify) before the archive is handed over, as
    /// `brevis-hub mirror` proves every archive it builds.
    pub source_sha256: Option<[u8; 32]>,
}

impl Default for CompressOptions {
    fn default() -> Self {
        CompressOptions {
            threads: 0,
            level: crate::Level::DEFAULT,
            budget: DEFAULT_BUDGET,
            prior: None,
            progress: Arc::new(NoProgress),
            region_words: DEFAULT_REGION_WORDS,
            strict_safetensors: false,
            sidecar: None,
            whole_file: true,
            verify: true,
            source_sha256: None,
        }
    }
}

impl CompressOptions {
    /// Set the number of threads (0 = all cores).
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n;
        self
    }
    /// Set the compression level, and the search budget to the level's.
    pub fn level(mut self, l: crate::Level) -> Self {
        self.level = l;
        self.budget = l.budget();
        self
    }
    /// Set the search budget.
    pub fn budget(mut self, b: u32) -> Self {
        self.budget = b;
        self
    }
    /// Set the prior.
    pub fn prior(mut self, p: Option<Arc<crate::search::Prior>>) -> Self {
        self.prior = p;
        self
    }
    /// Set the progress sink.
    pub fn progress(mut self, p: Arc<dyn ProgressSink>) -> Self {
        self.progress = p;
        self
    }
    /// Set the words per region (clamped to the format's limit).
    pub fn region_words(mut self, w: u64) -> Self {
        self.region_words = w.clamp(super::regions::MIN_REGION_WORDS, crate::dsl::MAX_NODE_WORDS);
        self
    }
    /// Whether small files are also tried as one whole byte stream.
    pub fn whole_file(mut self, w: bool) -> Self {
        self.whole_file = w;
        self
    }
    /// Refuse malformed safetensors instead of carrying them as bytes.
    pub fn strict_safetensors(mut self, s: bool) -> Self {
        self.strict_safetensors = s;
        self
    }
    /// Set the description of the file's tensors that another file gives.
    pub fn sidecar(mut self, s: Option<Arc<crate::Sidecar>>) -> Self {
        self.sidecar = s;
        self
    }
    /// Whether to decode the archive and check it against the source
    /// (on by default).
    pub fn verify(mut self, v: bool) -> Self {
        self.verify = v;
        self
    }
    /// Give the source's SHA-256, known beforehand (see
    /// [`source_sha256`](Self::source_sha256)), or `None` to hash it.
    pub fn source_sha256(mut self, sha256: Option<[u8; 32]>) -> Self {
        self.source_sha256 = sha256;
        self
    }
}

/// What compressing one file produced.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CompressReport {
    /// Length of the original file.
    pub original_len: u64,
    /// Length of the archive written.
    pub archive_len: u64,
    /// SHA-256 of the original file.
    pub sha256: [u8; 32],
    /// Tensors whose program was searched for.
    pub searched_tensors: u64,
    /// Complete candidate programs judged by exact size, over all tensors.
    pub judged: u64,
    /// Wall time of the search phase.
    pub search_seconds: f64,
    /// The container whose tensors were read (`"safetensors"`, `"gguf"`,
    /// `"pytorch"`, ...), `None` when the file was coded as plain bytes.
    pub format: Option<&'static str>,
    /// When the file was coded as plain bytes though a format's first
    /// bytes were found in it: each such format and why it could not be
    /// read (`"gguf: tensor info 3: offset past the data end"`).
    pub unread: Vec<String>,
}
