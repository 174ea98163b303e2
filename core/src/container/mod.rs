//! The `.brv` archive (byte layout in `docs/FORMAT.md`).
//!
//! One archive per source file: a fixed preamble (magic, version, original
//! length and SHA-256, where the segment table is), the region programs, and
//! the segment table at the end. Segments cover the source file in order;
//! each is cut into regions of at most `region_words` words, and each region
//! is an independent program, so regions decode in parallel and one tensor
//! decodes alone.

pub mod layout;
mod preamble;
mod read;
mod stream;
mod table;

use std::path::Path;
use std::sync::Arc;

pub use layout::{SegmentDesc, SegmentKind, TensorEntry};
pub(crate) use preamble::Preamble;
pub use read::{Archive, ReadAt, decompress, decompress_file, decompress_to, read_info};
pub use stream::Decoder;
#[cfg(feature = "search")]
pub(crate) use table::{pack_table, write_table};
pub(crate) use table::{read_table, unpack_table};

use crate::error::DecodeError;
use crate::progress::{NoProgress, ProgressSink};

/// First bytes of every archive.
pub const MAGIC: [u8; 4] = [0x89, b'B', b'R', b'V'];
/// Size of the fixed preamble.
pub const PREAMBLE_LEN: u64 = 72;
/// Largest segment table accepted.
pub const MAX_TABLE_LEN: u64 = 256 << 20;
/// Largest tensor name accepted.
pub const MAX_NAME_LEN: u64 = 1 << 16;
/// Most dimensions of a tensor shape.
pub const MAX_DIMS: u64 = 64;
/// Largest encoded region accepted.
pub const MAX_REGION_BODY: u64 = 64 << 20;
/// Default search budget (candidate programs tried per tensor). An
/// encoder setting, kept beside the format's limits so that the decoder-only
/// build names it too (the CLI's default).
pub const DEFAULT_BUDGET: u32 = 24;
/// Words per region the encoder uses (a region is also the unit of
/// adaptivity: each has its own coder tables).
pub const DEFAULT_REGION_WORDS: u64 = 1 << 18;
/// zstd level of the archive's segment table, and of the bytes of a tensor
/// file that are not tensors (its JSON header): past it, higher levels cost
/// several times the time for a few percent of a small part of the archive.
#[cfg(feature = "search")]
pub(crate) const HEADER_ZSTD_LEVEL: i32 = 12;

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

/// Compression ratio, `archive_len / original_len` (smaller is better):
/// the one definition the CLI's `compress`, `inspect` and `bench` print.
/// An empty original (`original_len == 0`) has ratio 1.0 by definition:
/// there is nothing to make smaller, and `archive / 0` is no number (the
/// archive's fixed cost, 72 bytes of preamble and a table, is in the
/// archive length reported beside it).
///
/// ```
/// assert_eq!(brevis_core::ratio(50, 100), 0.5);
/// assert_eq!(brevis_core::ratio(75, 0), 1.0);
/// ```
pub fn ratio(archive_len: u64, original_len: u64) -> f64 {
    if original_len == 0 {
        1.0
    } else {
        archive_len as f64 / original_len as f64
    }
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
    /// Length of the archive.
    pub archive_len: u64,
}

/// One region of a segment in the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// Offset of its program in the archive.
    pub body_offset: u64,
    /// Length of its program.
    pub body_len: u64,
    /// xxh3-64 of the region's decoded bytes.
    pub checksum: u64,
}

/// One segment of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// What part of the source it is.
    pub desc: SegmentDesc,
    /// Words per region (the last region may be shorter).
    pub region_words: u64,
    /// Its regions.
    pub regions: Vec<Region>,
}

impl Segment {
    /// Words in the segment.
    pub fn words(&self) -> u64 {
        self.desc.len / self.desc.dtype.word_bytes() as u64
    }

    /// Words in region `i`.
    pub fn region_len(&self, i: usize) -> u64 {
        let start = i as u64 * self.region_words;
        self.region_words.min(self.words().saturating_sub(start))
    }

    /// Bytes region `i` decodes to.
    pub(crate) fn region_bytes(&self, i: usize) -> u64 {
        self.region_len(i) * self.desc.dtype.word_bytes() as u64
    }

    /// Encoded bytes of the whole segment.
    pub fn encoded_len(&self) -> u64 {
        self.regions.iter().map(|r| r.body_len).sum()
    }
}

/// Open an archive file.
pub(crate) fn open(path: &Path) -> Result<Archive<std::fs::File>, DecodeError> {
    let f = std::fs::File::open(path).map_err(|e| DecodeError::io(path, e))?;
    Archive::new(f).map_err(|e| match e {
        DecodeError::Io { source, .. } => DecodeError::io(path, source),
        e => e,
    })
}

impl Archive<std::fs::File> {
    /// Open the archive file at `path`: its preamble and segment table are
    /// read and checked, nothing is decoded yet.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, DecodeError> {
        open(path.as_ref())
    }
}

/// What one region's program is made of ([`Archive::describe_program`]).
#[derive(Debug, Clone)]
pub struct ProgramInfo {
    /// The program as text, e.g. `split_float(...)`.
    pub text: String,
    /// Its steps (operators and literal leaves), depth first.
    pub steps: Vec<ProgramStep>,
}

/// One step of a program.
#[derive(Debug, Clone, Copy)]
pub struct ProgramStep {
    /// The operator's name in the language (`lit`, `split_float`, ...).
    pub production: &'static str,
    /// For a literal leaf, the bytes of its coded stream; else 0.
    pub literal_bytes: u64,
}

/// A safetensors file of one f16 tensor, `w`, of these bytes (for tests).
#[cfg(all(test, feature = "search"))]
pub(crate) fn f16_file(tensor: &[u8]) -> Vec<u8> {
    let n = tensor.len() / 2;
    let header = format!(
        r#"{{"w":{{"dtype":"F16","shape":[{n}],"data_offsets":[0,{}]}}}}"#,
        2 * n
    );
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend_from_slice(tensor);
    file
}

pub(crate) fn xxh3(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// Bytes a thread may hold ahead of the writer: source bytes claimed for
/// coding and not yet written, decoded bytes not yet handed out (always at
/// least one region, however large: regions of 32 MiB, bytes in format
/// v4, come one a thread).
pub(crate) const BATCH_BYTES_PER_THREAD: u64 = 32 << 20;

/// Regions a thread may code ahead of the writer: with small regions (1
/// MiB of bf16) the bytes alone would let 64 wait for a slow writer on two
/// threads. (Astra, `compress -T2` with its proof: peak 69 -> 51 MB, as
/// fast.)
pub(crate) const REGIONS_AHEAD_PER_THREAD: usize = 4;

/// Regions a thread may decode ahead of the one handed out (to be hashed
/// and written): fewer than 16 slowed two threads down (astra at 8 in
/// all: 2T decompress 1.65x 1T, not 1.9x); 16 took `decompress -T2`'s
/// peak from 58 to 40 MB at the same speed.
pub(crate) const DECODED_AHEAD_PER_THREAD: usize = 16;
