//! Weight containers read as tensors: a reader per format finds the
//! tensors of a file (name, element type or block layout, shape, where
//! their bytes are); everything it does not claim stays opaque bytes.
//!
//! A reader never decides what the archive holds: [`tile`] turns what it
//! found into segments that cover the file exactly, dropping any tensor
//! out of bounds or overlapping another, so a reader that misreads costs
//! ratio, never bytes (the archive is proven against the file's SHA-256).
//!
//! Readers see the file only through [`ReadAt`], read what they parse in
//! bounded pieces ([`MAX_META`]), and trust no offset or count.

mod ct2;
mod gguf;
mod numpy;
mod onnx;
mod pickle;
mod pytorch;
mod safetensors;
mod sidecar;
#[cfg(test)]
mod tests;
mod tfjs;
mod zip;

pub use sidecar::{Sidecar, Sidecars};

use crate::container::{ReadAt, SegmentDesc, SegmentKind};
use crate::dtype::Dtype;

/// Bytes of a file a reader's `detect` sees (fewer when the file is shorter).
pub(crate) const HEAD_LEN: usize = 64;
/// Most bytes of metadata (headers, pickles, protobuf outside tensor data,
/// zip directories) a reader reads; a file that needs more is opaque.
pub(crate) const MAX_META: u64 = 256 << 20;
/// Most tensors a reader lists; past it, the file is opaque.
pub(crate) const MAX_TENSORS: usize = 1 << 20;

/// One tensor a reader found: `len` bytes at `offset` of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Span {
    /// Its name in the container (a state-dict key, a GGUF tensor name, ...).
    pub name: String,
    /// Element type; `U8` with a block-row shape for quantized blocks;
    /// `Bytes` to keep it opaque but named.
    pub dtype: Dtype,
    /// Shape in words of `dtype` (the last dimension is the row the
    /// search aligns samples and regions to).
    pub shape: Vec<u64>,
    /// Offset in the file.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// A weight container format.
pub(crate) trait Reader: Sync {
    /// Its short name, as `inspect` shows it (`"gguf"`, `"pytorch"`, ...).
    fn name(&self) -> &'static str;
    /// Whether a file of `len` bytes starting with `head` (its first
    /// [`HEAD_LEN`] bytes or all of them) claims to be this format. Cheap,
    /// from the bytes only, never the file name.
    fn detect(&self, head: &[u8], len: u64) -> bool;
    /// The tensors of a file `detect` accepted, in any order. `Err(reason)`
    /// when the file claims the format but is malformed past using.
    fn tensors(&self, src: &dyn ReadAt, len: u64) -> Result<Vec<Span>, String>;
}

/// Every reader, tried in this order.
fn readers() -> [&'static dyn Reader; 7] {
    [
        &safetensors::Safetensors,
        &gguf::Gguf,
        &pytorch::PyTorch,
        &numpy::Npz,
        &numpy::Npy,
        &onnx::Onnx,
        &ct2::Ct2,
    ]
}

/// The formats read as tensors, by name.
#[cfg(feature = "fuzzing")]
pub(crate) fn names() -> Vec<&'static str> {
    readers().iter().map(|r| r.name()).collect()
}

/// The first bytes of `src`: [`HEAD_LEN`] or the whole file when shorter.
fn head(src: &dyn ReadAt, len: u64) -> std::io::Result<Vec<u8>> {
    let mut head = vec![0u8; (HEAD_LEN as u64).min(len) as usize];
    src.read_exact_at(0, &mut head)?;
    Ok(head)
}

/// The format a file's first bytes claim, if any.
pub(crate) fn detect(head: &[u8], len: u64) -> Option<&'static str> {
    readers()
        .into_iter()
        .find(|r| r.detect(head, len))
        .map(|r| r.name())
}

/// What reading a file found.
#[derive(Debug)]
pub(crate) struct Found {
    /// The format whose reader listed the tensors, or `None` (plain bytes).
    pub format: Option<&'static str>,
    /// Segments tiling the file.
    pub segments: Vec<SegmentDesc>,
    /// Why a format the file claimed could not be read (the file is then
    /// plain bytes, or the next reader's).
    pub refused: Vec<(&'static str, String)>,
}

/// Read a file as tensors: the first reader that detects it and lists at
/// least one tensor wins; else what `sidecar` (another file's
/// description of this one) places; otherwise one bytes segment.
pub(crate) fn read(src: &dyn ReadAt, sidecar: Option<&Sidecar>) -> std::io::Result<Found> {
    let len = src.len()?;
    let head = head(src, len)?;
    let mut refused = Vec::new();
    for r in readers() {
        if !r.detect(&head, len) {
            continue;
        }
        let found = if r.name() == "safetensors" {
            // Byte-identical to the archives safetensors always had.
            safetensors::segments(src, len)
        } else {
            r.tensors(src, len).map(|t| tile(t, len))
        };
        match found {
            // A safetensors file of no tensors is still safetensors.
            Ok(segs)
                if r.name() == "safetensors"
                    || segs.iter().any(|s| s.kind == SegmentKind::Tensor) =>
            {
                return Ok(Found {
                    format: Some(r.name()),
                    segments: segs,
                    refused,
                });
            }
            Ok(_) => refused.push((r.name(), "no tensors found".into())),
            Err(reason) => refused.push((r.name(), reason)),
        }
    }
    if let Some(s) = sidecar {
        let segments = tile(s.spans.clone(), len);
        if segments.iter().any(|s| s.kind == SegmentKind::Tensor) {
            return Ok(Found {
                format: Some(s.format()),
                segments,
                refused,
            });
        }
        refused.push((s.format(), "no described tensor fits the file".into()));
    }
    Ok(Found {
        format: None,
        segments: plain(len),
        refused,
    })
}

/// Run one reader by name on `data` without its `detect` (the fuzz
/// targets' way in) and check that the segments tile `data`.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn read_as(format: &str, data: &[u8]) -> Option<Result<Vec<SegmentDesc>, String>> {
    let len = data.len() as u64;
    let found = if format == "tfjs" {
        // A manifest: its groups placed in shards of a few lengths, each
        // shard's segments checked.
        tfjs::parse(data).map(|groups| {
            let mut all = Vec::new();
            for g in groups.iter().take(16) {
                let lens: Vec<u64> = (0..g.paths.len().min(64) as u64)
                    .map(|i| 4096 + 100 * i)
                    .collect();
                for (spans, l) in tfjs::shard_spans(g, &lens).into_iter().zip(&lens) {
                    let segs = tile(spans, *l);
                    check_tiling(&segs, *l);
                    all.extend(segs);
                }
            }
            all
        })
    } else {
        let r = readers().into_iter().find(|r| r.name() == format)?;
        let found = if format == "safetensors" {
            safetensors::segments(&data, len)
        } else {
            r.tensors(&data, len).map(|t| tile(t, len))
        };
        if let Ok(segs) = &found {
            check_tiling(segs, len);
        }
        found
    };
    Some(found)
}

/// Assert that `segs` tile `[0, len)` with whole words.
#[cfg(any(test, feature = "fuzzing"))]
fn check_tiling(segs: &[SegmentDesc], len: u64) {
    let mut pos = 0;
    for s in segs {
        assert_eq!(s.offset, pos, "segments tile the file");
        assert!(s.len > 0 && s.len % s.dtype.word_bytes() as u64 == 0);
        pos += s.len;
    }
    assert_eq!(pos, len, "segments cover the file");
}

/// A file read as no format: one bytes segment (none when empty).
pub(crate) fn plain(len: u64) -> Vec<SegmentDesc> {
    if len == 0 {
        vec![]
    } else {
        vec![bytes("__file__", 0, len)]
    }
}

fn bytes(name: &str, offset: u64, len: u64) -> SegmentDesc {
    SegmentDesc::bytes(name, offset, len)
}

/// Turn the tensors a reader found into segments that tile `[0, len)`:
/// in file order, the bytes between them as bytes segments (`__header__`
/// before the first, `__trailing__` after the last, `__gap__` between).
/// A span that is empty, past the end of the file, or overlaps one kept
/// before it is left in the bytes; a length that is no whole number of its
/// element's words is coded as `U8`.
pub(crate) fn tile(mut spans: Vec<Span>, len: u64) -> Vec<SegmentDesc> {
    spans.sort_by_key(|s| (s.offset, s.len));
    let mut segs = Vec::with_capacity(2 * spans.len() + 1);
    let mut pos = 0u64;
    for s in spans {
        let Some(end) = s.offset.checked_add(s.len) else {
            continue;
        };
        if s.len == 0 || s.offset < pos || end > len {
            continue;
        }
        if s.offset > pos {
            let name = if pos == 0 { "__header__" } else { "__gap__" };
            segs.push(bytes(name, pos, s.offset - pos));
        }
        let (kind, dtype) = if s.dtype == Dtype::Bytes {
            (SegmentKind::Bytes, Dtype::Bytes)
        } else if s.len % s.dtype.word_bytes() as u64 != 0 {
            (SegmentKind::Tensor, Dtype::U8)
        } else {
            (SegmentKind::Tensor, s.dtype)
        };
        let mut name = s.name;
        if name.len() as u64 > crate::container::MAX_NAME_LEN {
            // The archive's limit on a name (a reader's own are lower).
            let mut cut = crate::container::MAX_NAME_LEN as usize;
            while !name.is_char_boundary(cut) {
                cut -= 1;
            }
            name.truncate(cut);
        }
        segs.push(SegmentDesc {
            kind,
            dtype,
            name,
            shape: s.shape,
            offset: s.offset,
            len: s.len,
        });
        pos = end;
    }
    if pos < len {
        segs.push(bytes(
            if pos == 0 { "__file__" } else { "__trailing__" },
            pos,
            len - pos,
        ));
    }
    segs
}

/// Little-endian reads from a bounded metadata buffer: each returns `None`
/// past its end, so a parser written with `?` stops at the first lie.
#[derive(Debug, Clone)]
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }
    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.buf.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    /// Skip `n` bytes.
    pub fn skip(&mut self, n: u64) -> Option<()> {
        self.take(usize::try_from(n).ok()?).map(|_| ())
    }
    /// A little-endian u16.
    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    /// A little-endian u32.
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    /// A little-endian u64.
    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// Read `len` bytes at `offset` of `src` for parsing: refused past
/// [`MAX_META`] or the end of the file (never a huge allocation).
pub(crate) fn read_meta(
    src: &dyn ReadAt,
    file_len: u64,
    offset: u64,
    len: u64,
) -> Result<Vec<u8>, String> {
    if len > MAX_META {
        return Err(format!(
            "{len} bytes of metadata, more than the {MAX_META} read"
        ));
    }
    if offset.checked_add(len).is_none_or(|e| e > file_len) {
        return Err(format!(
            "{len} bytes at offset {offset} run past the {file_len}-byte file"
        ));
    }
    let mut buf = vec![0u8; len as usize];
    src.read_exact_at(offset, &mut buf)
        .map_err(|e| format!("reading {len} bytes at {offset}: {e}"))?;
    Ok(buf)
}

/// The container format a file's first bytes claim: `"safetensors"`,
/// `"gguf"`, `"pytorch"`, `"npy"`, `"npz"`, `"onnx"` or `"ctranslate2"`;
/// `None` for a file no format reader knows (it is coded as plain bytes).
/// Reads at most the first 64 bytes; the name of the file plays no part.
pub fn detect_container(path: &std::path::Path) -> std::io::Result<Option<&'static str>> {
    let f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    Ok(detect(&head(&f, len)?, len))
}

/// The readers' tests: compress `data` on one thread, decode it, and
/// assert the bytes came back exactly.
#[cfg(all(test, feature = "search"))]
pub(crate) fn assert_round_trip(data: &[u8]) {
    let opts = crate::CompressOptions::default().threads(1);
    let archive = crate::compress(data, &opts).expect("compress");
    assert!(
        crate::decompress(&archive).expect("decompress") == data,
        "round trip"
    );
}
