//! A source cut into segments (safetensors tensors, or plain bytes), the
//! sample of each tensor the search judges programs on, and each segment's
//! region size.

use std::borrow::Cow;
use std::path::Path;

use super::io;
use crate::container::layout::MAX_SAFETENSORS_HEADER;
use crate::container::{ReadAt, SegmentDesc, SegmentKind};
use crate::error::EncodeError;
use crate::formats::{self, Sidecar};
use crate::search::{self, Target};
use crate::words::bytes_to_words;

/// Split a source into segments with the first format reader that finds
/// tensors in it, else as `sidecar` describes it (see
/// [`crate::formats`]); plain bytes otherwise. `strict`: a file that
/// claims to be safetensors but is malformed is an error rather than
/// plain bytes.
pub(crate) fn segments_of(
    src: &dyn ReadAt,
    name: &Path,
    strict: bool,
    sidecar: Option<&Sidecar>,
) -> Result<Vec<SegmentDesc>, EncodeError> {
    Ok(read_segments(src, name, strict, sidecar)?.segments)
}

/// [`segments_of`], with the format found and the readers that refused.
pub(crate) fn read_segments(
    src: &dyn ReadAt,
    name: &Path,
    strict: bool,
    sidecar: Option<&Sidecar>,
) -> Result<formats::Found, EncodeError> {
    let label = name.display().to_string();
    let found = formats::read(src, sidecar).map_err(|e| io(&label, e))?;
    if strict && found.format != Some("safetensors") {
        let reason = match found.refused.iter().find(|(f, _)| *f == "safetensors") {
            Some((_, reason)) => reason.clone(),
            None => not_safetensors(src).map_err(|e| io(&label, e))?,
        };
        return Err(EncodeError::Safetensors {
            path: label,
            reason,
        });
    }
    Ok(found)
}

/// Why a file is no safetensors file at all.
fn not_safetensors(src: &dyn ReadAt) -> std::io::Result<String> {
    let len = src.len()?;
    if len < 9 {
        return Ok(format!("{len} bytes, too short for a header"));
    }
    let mut head = [0u8; 9];
    src.read_exact_at(0, &mut head)?;
    let n = u64::from_le_bytes(head[..8].try_into().expect("8"));
    Ok(if n > MAX_SAFETENSORS_HEADER || n.saturating_add(8) > len {
        format!("header length {n} does not fit the {len}-byte file")
    } else {
        "header does not start with '{'".into()
    })
}

/// The `len` bytes of `src` at `offset`: borrowed from a source in memory
/// (a small file read whole), else read into a buffer of their own.
pub(super) fn read_cow(
    src: &dyn ReadAt,
    offset: u64,
    len: usize,
) -> std::io::Result<Cow<'_, [u8]>> {
    if let Some(s) = src.slice_at(offset, len) {
        return Ok(Cow::Borrowed(s));
    }
    let mut buf = vec![0u8; len];
    src.read_exact_at(offset, &mut buf)?;
    Ok(Cow::Owned(buf))
}

/// The sample words of a tensor segment the search judges programs on.
pub(crate) fn read_sample<'s>(
    src: &'s dyn ReadAt,
    s: &SegmentDesc,
) -> std::io::Result<(Cow<'s, [u8]>, Vec<u64>)> {
    let wb = s.dtype.word_bytes() as u64;
    let (start, n) = search::sample_range(s.len / wb, search::row_words(&s.shape));
    let buf = read_cow(src, s.offset + start * wb, (n * wb) as usize)?;
    let words = bytes_to_words(&buf, s.width());
    Ok((buf, words))
}

/// Bytes of a region of a segment coded with the generic codec: one zstd
/// window sees that much (matches span a tensor; cut into small regions,
/// such a tensor compresses markedly worse than whole).
const GENERIC_REGION_BYTES: u64 = 8 << 20;

/// Bytes of a region of a bytes segment (a plain file, a header, a gap):
/// [`crate::dsl::MAX_BYTE_REGION_WORDS`], one byte literal in one zstd
/// frame. zstd -19 of a whole file finds matches megabytes apart; cut into
/// 4 MiB regions, a 25 MB shared library coded 8.6% larger than it whole,
/// in 32 MiB regions as small.
const BYTES_REGION_BYTES: u64 = crate::dsl::MAX_BYTE_REGION_WORDS;

/// Regions hold whole rows when a row fits (so block fields stay aligned);
/// `generic` segments get regions of [`GENERIC_REGION_BYTES`], bytes
/// segments of [`BYTES_REGION_BYTES`].
///
/// An embedding table (role `embed`, [`search::prior::role`]) of words of
/// 4 bytes or more gets the smallest regions whose streams still use 32
/// rANS states ([`crate::entropy::WIDE_SYMBOLS`] words, rounded up to whole
/// rows): a region has its own coder tables, and an embedding table's
/// statistics drift from token to token. Other tensors gain nothing from
/// smaller regions, and 16-bit embeddings lose (their tables cost more
/// than the drift saves), so they keep theirs.
pub(crate) fn segment_region_words(d: &SegmentDesc, region_words: u64, generic: bool) -> u64 {
    let word_bytes = d.dtype.word_bytes() as u64;
    let row = search::row_words(&d.shape);
    let region_words = if generic && d.kind == SegmentKind::Bytes {
        // As few regions as fit, of equal size: 45.6 MB in two of 22.8 MB
        // codes on two threads in 0.7x the time of 32 + 13.6 MB.
        let regions = d.len.div_ceil(BYTES_REGION_BYTES).max(1);
        d.len.div_ceil(regions).max(1)
    } else if generic {
        (GENERIC_REGION_BYTES / word_bytes).clamp(region_words, crate::dsl::MAX_NODE_WORDS)
    } else if word_bytes >= 4
        && d.dtype.float_layout().is_some()
        && search::prior::role(&d.name, d.shape.len()).starts_with("embed")
    {
        let wide = crate::entropy::WIDE_SYMBOLS as u64;
        region_words.min(wide.div_ceil(row.max(1)) * row.max(1))
    } else {
        region_words
    };
    if d.kind == SegmentKind::Tensor && row > 1 && row <= region_words {
        region_words - region_words % row
    } else {
        region_words
    }
}

impl<'a> Target<'a> {
    /// The target of tensor segment `d` from its sample (`bytes` as read by
    /// [`read_sample`], `words` the same words),
    /// coded in regions of `region_words` (see
    /// [`segment_region_words`]). Compressing and
    /// learning a prior search the same targets.
    pub(crate) fn of_segment(
        d: &'a SegmentDesc,
        bytes: &'a [u8],
        words: &'a [u64],
        region_words: u64,
    ) -> Target<'a> {
        Target {
            words,
            le: Some(bytes),
            width: d.width(),
            dtype: d.dtype,
            name: &d.name,
            rank: d.shape.len(),
            total_words: d.len / d.dtype.word_bytes() as u64,
            row: search::row_words(&d.shape),
            region: segment_region_words(d, region_words, false),
        }
    }
}
