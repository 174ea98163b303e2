//! Brevis core: lossless compression of model checkpoints by program synthesis.
//!
//! Every tensor of a checkpoint is a stream of fixed-width words. Brevis
//! writes, for each tensor, a short program in a typed language of reversible
//! operators (float field splits, byte planes, constants, repeats, references
//! to earlier tensors, deltas, ...) whose leaves are literal streams coded with
//! the smallest of several entropy coders. Executing the program rebuilds the
//! tensor's bytes exactly; the decoder is only an interpreter. The programs and
//! the file's own header live in a `.brv` archive (see `docs/FORMAT.md`).
//!
//! ```
//! let data = b"any bytes at all, a safetensors file or not".to_vec();
//! let archive = brevis_core::compress(&data, &brevis_core::CompressOptions::default()).unwrap();
//! let back = brevis_core::decompress(&archive).unwrap();
//! assert_eq!(back, data);
//! ```
//!
//! Features: `search` (default) builds the synthesis search and the prior;
//! `parallel` (default) uses rayon to work on regions on every core;
//! `unsafe-fast` (off by default; the `brevis-hub` binary turns it on)
//! decodes long rANS streams with AVX-512 or AVX2 when the CPU has them. It
//! is the only `unsafe` code, in `entropy::rans_simd`; the archives are the
//! same.
//!
//! Modules in layers, lowest first; a module uses only the layers before
//! its own, so decoding (layers 1-4) never reaches into encoding (5-6),
//! which the `search` feature builds:
//!
//! 1. `error`, `dtype`, `progress`, `fsutil`, `words` (word and byte
//!    helpers), `pool` (worker pools)
//! 2. `entropy`: the literal coders
//! 3. `dsl`: the language, its wire form and interpreter
//! 4. `container`: the `.brv` format (preamble, table, layout, limits) and decoding
//! 5. `search`: the program chooser and the prior
//! 6. `encode`: compression (segments, duplicates, regions, whole-file
//!    screen, self-check) and prior learning
#![cfg_attr(not(feature = "unsafe-fast"), forbid(unsafe_code))]
#![cfg_attr(feature = "unsafe-fast", deny(unsafe_code))]
#![warn(missing_docs)]
// The coders keep their encoding halves beside their decoders (one file a
// coder, one format); without `search` nothing calls those halves.
#![cfg_attr(not(feature = "search"), allow(dead_code))]

mod container;
mod dsl;
mod dtype;
#[cfg(feature = "search")]
mod encode;
mod entropy;
mod error;
mod fsutil;
mod pool;
mod progress;
#[cfg(feature = "search")]
mod search;
mod words;

pub use container::{
    Archive, ArchiveInfo, DEFAULT_BUDGET, DEFAULT_REGION_WORDS, Decoder, DecompressOptions,
    DecompressReport, ProgramInfo, ProgramStep, ReadAt, Region, Segment, SegmentDesc, SegmentKind,
    TensorEntry, decompress, decompress_file, decompress_to, ratio, read_info,
};
pub use dtype::Dtype;
#[cfg(feature = "search")]
pub use encode::{CompressOptions, CompressReport, Encoder, LearnOptions, compress, compress_file};
pub use error::{DecodeError, EncodeError};
pub use fsutil::TempFile;
pub use progress::{FileProgress, NoProgress, ProgressSink};
#[cfg(feature = "search")]
pub use search::Prior;

/// The README's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

/// Internals for the fuzz targets and the integration tests: the language,
/// its wire form and interpreter, and the archive's framing. Not a stable
/// API; built only with the `fuzzing` feature.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::container::{MAGIC, PREAMBLE_LEN};
    pub use crate::dsl::exec::{NoRefs, execute};
    pub use crate::dsl::{Node, wire};
    pub use crate::words::mask;

    /// The program of region `r` of segment `s`.
    pub fn program<R: crate::ReadAt>(
        archive: &crate::Archive<R>,
        s: usize,
        r: usize,
    ) -> Result<Node, crate::DecodeError> {
        archive.program(s, r)
    }
}

/// Version of the `.brv` format this crate writes (and the newest it reads).
/// Version 2 added the 16-bit-renormalized rANS codecs (wire ids 7-10);
/// version 3 their 32-state variants for long streams (ids 11-13).
/// Version 1 and 2 archives still decode.
pub const FORMAT_VERSION: u16 = 3;
/// Oldest `.brv` format version this crate reads.
pub const OLDEST_FORMAT_VERSION: u16 = 1;
