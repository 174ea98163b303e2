//! The segment table: what each segment of the source is and where its
//! region programs are.

use super::{
    MAX_DIMS, MAX_NAME_LEN, MAX_REGION_BODY, MAX_TABLE_LEN, PREAMBLE_LEN, Preamble, Region,
    Segment, SegmentDesc, SegmentKind,
};
use crate::dtype::Dtype;
use crate::entropy::ByteReader;
#[cfg(feature = "search")]
use crate::entropy::put_varint;
use crate::error::DecodeError;

/// The stored table: `u8 encoding` (0 raw, 1 zstd), `varint raw_len`, then
/// the table bytes, raw or as one zstd frame (tensor names repeat a lot).
#[cfg(feature = "search")]
pub(crate) fn pack_table(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len() / 2 + 16);
    match crate::entropy::zstd_compress(raw, super::HEADER_ZSTD_LEVEL) {
        Ok(z) if z.len() < raw.len() => {
            out.push(1);
            put_varint(&mut out, raw.len() as u64);
            out.extend_from_slice(&z);
        }
        _ => {
            out.push(0);
            put_varint(&mut out, raw.len() as u64);
            out.extend_from_slice(raw);
        }
    }
    out
}

/// Inverse of [`pack_table`], bounded by [`MAX_TABLE_LEN`].
pub(crate) fn unpack_table(stored: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let mut r = ByteReader::new(stored);
    let encoding = r.u8()?;
    let raw_len = r.varint()?;
    if raw_len > MAX_TABLE_LEN {
        return Err(DecodeError::Limit {
            what: "segment table length",
            value: raw_len,
            limit: MAX_TABLE_LEN,
        });
    }
    let body = r.bytes(r.remaining())?;
    let raw = match encoding {
        0 => body.to_vec(),
        1 => zstd::bulk::decompress(body, raw_len as usize)
            .map_err(|e| DecodeError::damaged(format!("segment table: {e}")))?,
        e => return Err(DecodeError::damaged(format!("unknown table encoding {e}"))),
    };
    if raw.len() as u64 != raw_len {
        return Err(DecodeError::damaged("segment table has the wrong length"));
    }
    Ok(raw)
}

/// Serialize the segment table.
#[cfg(feature = "search")]
pub(crate) fn write_table(segments: &[Segment]) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint(&mut out, segments.len() as u64);
    for s in segments {
        let d = &s.desc;
        out.push(d.kind as u8);
        out.push(d.dtype.wire_id());
        put_varint(&mut out, d.name.len() as u64);
        out.extend_from_slice(d.name.as_bytes());
        put_varint(&mut out, d.shape.len() as u64);
        for &x in &d.shape {
            put_varint(&mut out, x);
        }
        put_varint(&mut out, d.offset);
        put_varint(&mut out, d.len);
        put_varint(&mut out, s.region_words);
        put_varint(&mut out, s.regions.len() as u64);
        for r in &s.regions {
            put_varint(&mut out, r.body_len);
            out.extend_from_slice(&r.checksum.to_le_bytes());
        }
    }
    out
}

/// Fewest table bytes a segment takes (kind, dtype, name length, rank,
/// offset, length, region words, region count: a byte each at least), so
/// a segment count is bounded by the table before anything is allocated.
const MIN_SEGMENT_ENTRY: u64 = 8;
/// Fewest table bytes a region takes: a varint length and a `u64` checksum.
const MIN_REGION_ENTRY: u64 = 9;

/// Parse and validate the segment table: segments tile `[0, original_len)`
/// in order and regions tile `[PREAMBLE_LEN, table_offset)` in order.
pub(crate) fn read_table(bytes: &[u8], pre: &Preamble) -> Result<Vec<Segment>, DecodeError> {
    let mut r = ByteReader::new(bytes);
    let count = r.varint()?;
    // No allocation past the table.
    if count > bytes.len() as u64 / MIN_SEGMENT_ENTRY + 1 {
        return Err(DecodeError::damaged("segment count larger than the table"));
    }
    let mut segments = Vec::new();
    let mut at = TableCursor {
        pos: 0,
        body: PREAMBLE_LEN,
    };
    for i in 0..count {
        segments.push(read_segment(&mut r, i, &mut at, pre)?);
    }
    if r.remaining() != 0 {
        return Err(DecodeError::damaged("trailing bytes in the segment table"));
    }
    if at.pos != pre.original_len {
        return Err(DecodeError::damaged(
            "segments do not cover the original file",
        ));
    }
    if at.body != pre.table_offset {
        return Err(DecodeError::damaged(
            "programs do not fill the archive body",
        ));
    }
    Ok(segments)
}

/// Where the next segment must start in the original file, and the next
/// region's program in the archive.
struct TableCursor {
    pos: u64,
    body: u64,
}

/// Parse segment `i`, which must start at `at.pos` and whose programs
/// start at `at.body`; both move past it.
fn read_segment(
    r: &mut ByteReader<'_>,
    i: u64,
    at: &mut TableCursor,
    pre: &Preamble,
) -> Result<Segment, DecodeError> {
    let (kind, dtype) = read_kind(r, i)?;
    let name = read_name(r, i)?;
    let shape = read_shape(r)?;
    let offset = r.varint()?;
    let len = r.varint()?;
    if offset != at.pos || len == 0 {
        return Err(DecodeError::damaged(format!(
            "segment {i}: [{offset}, +{len}) does not follow the previous segment"
        )));
    }
    at.pos = at
        .pos
        .checked_add(len)
        .filter(|&p| p <= pre.original_len)
        .ok_or_else(|| DecodeError::damaged(format!("segment {i}: past the end of the file")))?;
    let wb = dtype.word_bytes() as u64;
    if len % wb != 0 {
        return Err(DecodeError::damaged(format!(
            "segment {i}: length not a whole number of words"
        )));
    }
    let region_words = r.varint()?;
    let limit = max_region_words(pre.version, dtype);
    if region_words == 0 || region_words > limit {
        return Err(DecodeError::Limit {
            what: "words per region",
            value: region_words,
            limit,
        });
    }
    let nregions = r.varint()?;
    if nregions != (len / wb).div_ceil(region_words) {
        return Err(DecodeError::damaged(format!(
            "segment {i}: wrong region count"
        )));
    }
    let regions = read_regions(r, i, nregions, &mut at.body, pre)?;
    Ok(Segment {
        desc: SegmentDesc {
            kind,
            dtype,
            name,
            shape,
            offset,
            len,
        },
        region_words,
        regions,
    })
}

/// The largest region of a segment of `dtype` in an archive of `version`:
/// [`crate::dsl::MAX_NODE_WORDS`], and from version 4 on
/// [`crate::dsl::MAX_BYTE_REGION_WORDS`] for segments of 8-bit words (whose
/// larger regions can only be one byte literal, see [`crate::dsl::wire`]).
pub(crate) fn max_region_words(version: u16, dtype: Dtype) -> u64 {
    if version >= 4 && dtype.word_bytes() == 1 {
        crate::dsl::MAX_BYTE_REGION_WORDS
    } else {
        crate::dsl::MAX_NODE_WORDS
    }
}

/// A segment's kind and dtype, which must agree.
fn read_kind(r: &mut ByteReader<'_>, i: u64) -> Result<(SegmentKind, Dtype), DecodeError> {
    let kind = match r.u8()? {
        0 => SegmentKind::Bytes,
        1 => SegmentKind::Tensor,
        k => {
            return Err(DecodeError::damaged(format!(
                "segment {i}: unknown kind {k}"
            )));
        }
    };
    let dtype = Dtype::from_wire_id(r.u8()?)
        .ok_or_else(|| DecodeError::damaged(format!("segment {i}: unknown dtype")))?;
    if (kind == SegmentKind::Bytes) != (dtype == Dtype::Bytes) {
        return Err(DecodeError::damaged(format!(
            "segment {i}: kind and dtype disagree"
        )));
    }
    Ok((kind, dtype))
}

/// A segment's name: UTF-8, at most [`MAX_NAME_LEN`] bytes.
fn read_name(r: &mut ByteReader<'_>, i: u64) -> Result<String, DecodeError> {
    let name_len = r.varint()?;
    if name_len > MAX_NAME_LEN {
        return Err(DecodeError::Limit {
            what: "tensor name length",
            value: name_len,
            limit: MAX_NAME_LEN,
        });
    }
    Ok(std::str::from_utf8(r.bytes(name_len as usize)?)
        .map_err(|_| DecodeError::damaged(format!("segment {i}: name is not UTF-8")))?
        .to_owned())
}

/// A tensor's shape: at most [`MAX_DIMS`] dimensions.
fn read_shape(r: &mut ByteReader<'_>) -> Result<Vec<u64>, DecodeError> {
    let ndims = r.varint()?;
    if ndims > MAX_DIMS {
        return Err(DecodeError::Limit {
            what: "tensor dimensions",
            value: ndims,
            limit: MAX_DIMS,
        });
    }
    let mut shape = Vec::new();
    for _ in 0..ndims {
        shape.push(r.varint()?);
    }
    Ok(shape)
}

/// Segment `i`'s `nregions` regions, their programs from `body` on (which
/// moves past them, never past the table).
fn read_regions(
    r: &mut ByteReader<'_>,
    i: u64,
    nregions: u64,
    body: &mut u64,
    pre: &Preamble,
) -> Result<Vec<Region>, DecodeError> {
    if nregions > r.remaining() as u64 / MIN_REGION_ENTRY {
        return Err(DecodeError::damaged(format!(
            "segment {i}: region list larger than the table"
        )));
    }
    let mut regions = Vec::with_capacity(nregions as usize);
    for _ in 0..nregions {
        let body_len = r.varint()?;
        if body_len > MAX_REGION_BODY {
            return Err(DecodeError::Limit {
                what: "region program length",
                value: body_len,
                limit: MAX_REGION_BODY,
            });
        }
        let checksum = r.u64()?;
        regions.push(Region {
            body_offset: *body,
            body_len,
            checksum,
        });
        *body = body
            .checked_add(body_len)
            .filter(|&b| b <= pre.table_offset)
            .ok_or_else(|| {
                DecodeError::damaged(format!("segment {i}: programs overrun the table"))
            })?;
    }
    Ok(regions)
}
