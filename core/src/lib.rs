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
//! # Compress and decompress
//!
//! In memory, [`compress`] and [`decompress`]; files, [`compress_file`] and
//! [`decompress_file`] (a temp file renamed into place once the SHA-256 is
//! proven); streams, [`Encoder`] (`std::io::Write`) and [`Decoder`]
//! (`std::io::Read`, one region in memory at a time). Every archive is
//! decoded and checked against its input before it is returned, unless
//! [`CompressOptions::verify`] turns that off.
//!
//! ```
//! use brevis_core::{CompressOptions, compress, decompress};
//!
//! let data = b"any bytes at all, a safetensors file or not".to_vec();
//! let archive = compress(&data, &CompressOptions::default().threads(1))?;
//! assert_eq!(decompress(&archive)?, data);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # One tensor, or what is inside
//!
//! [`Archive`] opens an archive without decoding it: [`Archive::tensor`]
//! decodes one tensor by name (only the regions that hold it),
//! [`Archive::read_range`] any byte range, and [`Archive::segments`] with
//! [`Archive::describe_program`] say how each part was coded.
//!
//! ```
//! # use brevis_core::{Archive, CompressOptions, compress};
//! # let data = b"any bytes".repeat(100);
//! # let archive = compress(&data, &CompressOptions::default())?;
//! let a = Archive::new(&archive[..])?;
//! assert_eq!(a.info().original_len, data.len() as u64);
//! assert_eq!(a.read_range(9, 9)?, b"any bytes");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Options, priors, progress
//!
//! [`CompressOptions`] and [`DecompressOptions`] are builders (threads,
//! search budget, a [`Prior`], a [`ProgressSink`]). A prior learned once
//! from a sample of a checkpoint's tensors ([`Prior::learn`]) steers the
//! search for every shard of it; [`Prior::to_json`] saves it. Progress is
//! reported per file and as a total through [`ProgressSink`]; the crate
//! draws nothing.
//!
//! # Errors
//!
//! [`DecodeError`] says what is wrong with an archive: not one
//! ([`DecodeError::BadMagic`]), cut short or damaged
//! ([`DecodeError::Damaged`], [`DecodeError::Truncated`]), a region or the
//! whole file not matching its checksum ([`DecodeError::Checksum`],
//! [`DecodeError::ShaMismatch`]), a named limit ([`DecodeError::Limit`]).
//! Hostile archives give an error, never a panic or an allocation past
//! the limits.
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
mod formats;
mod fsutil;
mod ordered;
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
pub use encode::{
    CompressOptions, CompressReport, Encoder, LearnOptions, Level, compress, compress_file,
};
pub use error::{DecodeError, EncodeError};
pub use formats::{Sidecar, Sidecars, detect_container};
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

    /// Run the reader of `format` (a name [`crate::formats`] lists) on
    /// `data`, skipping its `detect`, and tile what it found: the segments,
    /// or the reader's reason for refusing the bytes. `None` for an unknown
    /// format name. Panics if the segments do not tile `data` exactly.
    pub fn read_as(format: &str, data: &[u8]) -> Option<Result<Vec<crate::SegmentDesc>, String>> {
        crate::formats::read_as(format, data)
    }

    /// The format names the readers know, in the order they are tried.
    pub fn formats() -> Vec<&'static str> {
        crate::formats::names()
    }
}

/// Version of the `.brv` format this crate writes (and the newest it reads).
/// Version 2 added the 16-bit-renormalized rANS codecs (wire ids 7-10);
/// version 3 their 32-state variants for long streams (ids 11-13);
/// version 4 regions of up to 32 MiB for segments of bytes, each one byte
/// literal (32 MiB, `docs/FORMAT.md`). Archives of every earlier
/// version still decode.
pub const FORMAT_VERSION: u16 = 4;
/// Oldest `.brv` format version this crate reads.
pub const OLDEST_FORMAT_VERSION: u16 = 1;
