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
#![cfg_attr(not(feature = "unsafe-fast"), forbid(unsafe_code))]
#![cfg_attr(feature = "unsafe-fast", deny(unsafe_code))]
#![warn(missing_docs)]

pub mod container;
pub mod dsl;
pub mod dtype;
pub mod entropy;
pub mod error;
pub mod fsutil;
pub mod progress;
#[cfg(feature = "search")]
pub mod search;

pub use container::{
    ArchiveInfo, CompressOptions, CompressReport, DecompressOptions, DecompressReport, decompress,
    decompress_file, decompress_to, ratio, read_info,
};
#[cfg(feature = "search")]
pub use container::{compress, compress_file};
pub use dtype::Dtype;
pub use error::{DecodeError, EncodeError};
pub use progress::{NoProgress, ProgressSink};
#[cfg(feature = "search")]
pub use search::{LearnOptions, Prior};

/// Version of the `.brv` format this crate writes (and the newest it reads).
/// Version 2 added the 16-bit-renormalized rANS codecs (wire ids 7-10);
/// version 3 their 32-state variants for long streams (ids 11-13).
/// Version 1 and 2 archives still decode.
pub const FORMAT_VERSION: u16 = 3;
/// Oldest `.brv` format version this crate reads.
pub const OLDEST_FORMAT_VERSION: u16 = 1;
