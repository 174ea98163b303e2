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

/// Parse and validate the segment table: segments tile `[0, original_len)`
/// in order and regions tile `[PREAMBLE_LEN, table_offset)` in order.
pub(crate) fn read_table(bytes: &[u8], pre: &Preamble) -> Result<Vec<Segment>, DecodeError> {
    let mut r = ByteReader::new(bytes);
    let count = r.varint()?;
    // Every segment needs at least 8 table bytes: no allocation past the table.
    if count > bytes.len() as u64 / 8 + 1 {
        return Err(DecodeError::damaged("segment count larger than the table"));
    }
    let mut segments = Vec::new();
    let mut pos = 0u64;
    let mut body = PREAMBLE_LEN;
    for i in 0..count {
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
        let name_len = r.varint()?;
        if name_len > MAX_NAME_LEN {
            return Err(DecodeError::Limit {
                what: "tensor name length",
                value: name_len,
                limit: MAX_NAME_LEN,
            });
        }
        let name = std::str::from_utf8(r.bytes(name_len as usize)?)
            .map_err(|_| DecodeError::damaged(format!("segment {i}: name is not UTF-8")))?
            .to_owned();
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
        let offset = r.varint()?;
        let len = r.varint()?;
        if offset != pos || len == 0 {
            return Err(DecodeError::damaged(format!(
                "segment {i}: [{offset}, +{len}) does not follow the previous segment"
            )));
        }
        pos = pos
            .checked_add(len)
            .filter(|&p| p <= pre.original_len)
            .ok_or_else(|| {
                DecodeError::damaged(format!("segment {i}: past the end of the file"))
            })?;
        let wb = dtype.word_bytes() as u64;
        if len % wb != 0 {
            return Err(DecodeError::damaged(format!(
                "segment {i}: length not a whole number of words"
            )));
        }
        let region_words = r.varint()?;
        if region_words == 0 || region_words > crate::dsl::MAX_NODE_WORDS {
            return Err(DecodeError::Limit {
                what: "words per region",
                value: region_words,
                limit: crate::dsl::MAX_NODE_WORDS,
            });
        }
        let nregions = r.varint()?;
        if nregions != (len / wb).div_ceil(region_words) {
            return Err(DecodeError::damaged(format!(
                "segment {i}: wrong region count"
            )));
        }
        if nregions > r.remaining() as u64 / 9 {
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
                body_offset: body,
                body_len,
                checksum,
            });
            body = body
                .checked_add(body_len)
                .filter(|&b| b <= pre.table_offset)
                .ok_or_else(|| {
                    DecodeError::damaged(format!("segment {i}: programs overrun the table"))
                })?;
        }
        segments.push(Segment {
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
        });
    }
    if r.remaining() != 0 {
        return Err(DecodeError::damaged("trailing bytes in the segment table"));
    }
    if pos != pre.original_len {
        return Err(DecodeError::damaged(
            "segments do not cover the original file",
        ));
    }
    if body != pre.table_offset {
        return Err(DecodeError::damaged(
            "programs do not fill the archive body",
        ));
    }
    Ok(segments)
}
