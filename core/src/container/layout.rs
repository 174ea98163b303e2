//! How a source file splits into segments: the safetensors header, one
//! segment per tensor (in data order), and any bytes no tensor covers.

use std::collections::HashMap;

use crate::dtype::Dtype;

/// Largest safetensors header accepted (the safetensors crate's own limit).
pub const MAX_SAFETENSORS_HEADER: u64 = 100_000_000;

/// What a segment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentKind {
    /// Bytes that are no tensor: the header, gaps, trailing bytes, other files.
    Bytes = 0,
    /// A tensor's data.
    Tensor = 1,
}

/// A contiguous run of the source file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentDesc {
    /// Kind.
    pub kind: SegmentKind,
    /// Element type (`Bytes` for non-tensors).
    pub dtype: Dtype,
    /// Tensor name, or a label such as `__header__`.
    pub name: String,
    /// Tensor shape (empty for bytes).
    pub shape: Vec<u64>,
    /// Offset in the source file.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

impl SegmentDesc {
    /// Word width of the segment's stream.
    pub fn width(&self) -> u8 {
        self.dtype.word_bits()
    }

    pub(crate) fn bytes(name: &str, offset: u64, len: u64) -> SegmentDesc {
        SegmentDesc {
            kind: SegmentKind::Bytes,
            dtype: Dtype::Bytes,
            name: name.into(),
            shape: vec![],
            offset,
            len,
        }
    }
}

/// Split a file of `file_len` bytes whose first bytes are `prefix` (at least
/// the whole safetensors header when there is one). `Err(reason)` when the
/// file claims to be safetensors (its first 8 bytes give a header length that
/// fits and the header starts with `{`) but the header is malformed. `Ok(None)`
/// when it is not safetensors at all.
pub fn safetensors_segments(
    prefix: &[u8],
    file_len: u64,
) -> Result<Option<Vec<SegmentDesc>>, String> {
    let Some((data_start, tensors)) = parse_header(prefix, file_len)? else {
        return Ok(None);
    };
    let data_len = file_len - data_start;
    let mut segs = vec![SegmentDesc::bytes("__header__", 0, data_start)];
    let mut pos = 0u64;
    for t in tensors {
        let (s, e) = (t.offset - data_start, t.offset - data_start + t.len);
        if s < pos {
            return Err(format!("tensor {:?} overlaps the tensor before it", t.name));
        }
        if s > pos {
            segs.push(SegmentDesc::bytes("__gap__", data_start + pos, s - pos));
        }
        if e > s && t.dtype == Dtype::Bytes {
            // A dtype with no wire id (C64, F8_E4M3FNUZ, one not yet
            // known): its bytes are coded as the header's are.
            segs.push(SegmentDesc {
                shape: t.shape,
                ..SegmentDesc::bytes(&t.name, t.offset, t.len)
            });
        } else if e > s {
            let aligned = t.len % t.dtype.word_bytes() as u64 == 0;
            segs.push(SegmentDesc {
                kind: SegmentKind::Tensor,
                dtype: if aligned { t.dtype } else { Dtype::U8 },
                name: t.name,
                shape: t.shape,
                offset: t.offset,
                len: t.len,
            });
        }
        pos = e;
    }
    if pos < data_len {
        segs.push(SegmentDesc::bytes(
            "__trailing__",
            data_start + pos,
            data_len - pos,
        ));
    }
    Ok(Some(segs))
}

/// One tensor of a safetensors header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorEntry {
    /// Name.
    pub name: String,
    /// Element type; [`Dtype::Bytes`] when the header's dtype has no wire
    /// id here (e.g. `C64`, `F8_E4M3FNUZ`, or a later one): such a tensor
    /// is an opaque bytes segment.
    pub dtype: Dtype,
    /// The header's spelling of the dtype (`"BF16"`, `"C64"`, ...).
    pub dtype_name: String,
    /// Shape.
    pub shape: Vec<u64>,
    /// Offset of its data in the file.
    pub offset: u64,
    /// Length of its data.
    pub len: u64,
}

/// One tensor's entry in a safetensors header, its dtype as written.
#[derive(serde::Deserialize)]
struct HeaderTensor {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

/// Bits per element of a safetensors dtype, when the safetensors crate
/// knows it (it knows more dtypes than have wire ids here, e.g. `C64`).
fn bitsize(dtype_name: &str) -> Option<u64> {
    let d: safetensors::Dtype =
        serde_json::from_value(serde_json::Value::String(dtype_name.into())).ok()?;
    Some(d.bitsize() as u64)
}

/// Parse and validate a safetensors header: the data start and the tensors
/// in data order. `Ok(None)` when the bytes are not safetensors at all.
pub fn parse_header(
    prefix: &[u8],
    file_len: u64,
) -> Result<Option<(u64, Vec<TensorEntry>)>, String> {
    let Some(nb) = prefix.get(..8) else {
        return Ok(None);
    };
    let n = u64::from_le_bytes(nb.try_into().expect("8 bytes"));
    if n == 0 || n > MAX_SAFETENSORS_HEADER || n.saturating_add(8) > file_len {
        return Ok(None);
    }
    if prefix.get(8) != Some(&b'{') {
        return Ok(None);
    }
    let Some(header) = prefix.get(8..8 + n as usize) else {
        return Err("header extends past the bytes read".into());
    };
    let text = std::str::from_utf8(header).map_err(|e| format!("header is not UTF-8: {e}"))?;
    let map: HashMap<String, serde_json::Value> = serde_json::from_str(text.trim_end_matches(' '))
        .map_err(|e| format!("header JSON: {e}"))?;
    let data_start = 8 + n;
    let data_len = file_len - data_start;
    let mut tensors = Vec::with_capacity(map.len());
    for (name, v) in map {
        if name == "__metadata__" {
            if !v.is_object() && !v.is_null() {
                return Err("__metadata__ is not an object".into());
            }
            continue;
        }
        // The dtype is read as a string: one that neither this crate nor
        // the safetensors crate knows still leaves a valid file.
        let info: HeaderTensor =
            serde_json::from_value(v).map_err(|e| format!("tensor {name:?}: {e}"))?;
        let dtype_name = info.dtype;
        let dtype = Dtype::from_safetensors(&dtype_name).unwrap_or(Dtype::Bytes);
        let (s, e) = (info.data_offsets.0, info.data_offsets.1);
        if e < s || e > data_len {
            return Err(format!(
                "tensor {name:?}: data offsets [{s}, {e}) outside the {data_len} data bytes"
            ));
        }
        let elems = info
            .shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| format!("tensor {name:?}: shape overflows"))?;
        // The size is checked wherever the element's width is known.
        if let Some(bitsize) = bitsize(&dtype_name) {
            let bits = elems
                .checked_mul(bitsize)
                .ok_or_else(|| format!("tensor {name:?}: size overflows"))?;
            if bits.div_ceil(8) != e - s {
                return Err(format!(
                    "tensor {name:?}: shape {:?} of {dtype_name} needs {} bytes, offsets give {}",
                    info.shape,
                    bits.div_ceil(8),
                    e - s
                ));
            }
        }
        tensors.push(TensorEntry {
            name,
            dtype,
            dtype_name,
            shape: info.shape,
            offset: data_start + s,
            len: e - s,
        });
    }
    tensors.sort_by(|a, b| (a.offset, a.len, &a.name).cmp(&(b.offset, b.len, &b.name)));
    Ok(Some((data_start, tensors)))
}

/// Tensors smaller than this are coded in groups (their programs' tables
/// would cost more than they save one by one).
pub const SMALL_TENSOR: u64 = 16 << 10;
/// Largest group of small tensors.
pub const MAX_GROUP: u64 = 256 << 10;

/// Merge runs of adjacent small tensors of one dtype into one segment named
/// `first .. last (n tensors)`, shape `[words]`. Segments marked `alone`
/// stay as they are. Returns the new segments and, for each input segment,
/// where it went: (index of its new segment, byte offset inside it).
pub fn group_small_tensors(
    segs: Vec<SegmentDesc>,
    alone: &[bool],
) -> (Vec<SegmentDesc>, Vec<(usize, u64)>) {
    let mut out: Vec<SegmentDesc> = Vec::with_capacity(segs.len());
    let mut place = Vec::with_capacity(segs.len());
    let mut run: Vec<SegmentDesc> = Vec::new();
    let flush = |run: &mut Vec<SegmentDesc>, out: &mut Vec<SegmentDesc>| match run.len() {
        0 => {}
        1 => out.push(run.pop().expect("one")),
        n => {
            let (first, last) = (&run[0], &run[n - 1]);
            let len: u64 = run.iter().map(|s| s.len).sum();
            out.push(SegmentDesc {
                kind: SegmentKind::Tensor,
                dtype: first.dtype,
                name: format!("{} .. {} ({n} tensors)", first.name, last.name),
                shape: vec![len / first.dtype.word_bytes() as u64],
                offset: first.offset,
                len,
            });
            run.clear();
        }
    };
    for (i, s) in segs.into_iter().enumerate() {
        let small = s.kind == SegmentKind::Tensor
            && s.len < SMALL_TENSOR
            && !alone.get(i).copied().unwrap_or(false);
        let joins = run.last().is_some_and(|l| {
            l.dtype == s.dtype
                && l.offset + l.len == s.offset
                && run.iter().map(|r| r.len).sum::<u64>() + s.len <= MAX_GROUP
        });
        if !(small && joins) {
            flush(&mut run, &mut out);
        }
        if small {
            let base = run.first().map_or(s.offset, |f| f.offset);
            place.push((out.len(), s.offset - base));
            run.push(s);
        } else {
            place.push((out.len(), 0));
            out.push(s);
        }
    }
    flush(&mut run, &mut out);
    (out, place)
}

/// A file that is not safetensors: one bytes segment (none when empty).
pub fn plain_segments(file_len: u64) -> Vec<SegmentDesc> {
    if file_len == 0 {
        vec![]
    } else {
        vec![SegmentDesc::bytes("__file__", 0, file_len)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(header: &str, data: usize) -> Vec<u8> {
        let mut v = (header.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(header.as_bytes());
        v.resize(v.len() + data, 7);
        v
    }

    #[test]
    fn gaps_trailing_and_empty_tensors() {
        let h = r#"{"__metadata__":{"a":"b"},"x":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},"e":{"dtype":"BF16","shape":[0],"data_offsets":[12,12]}}"#;
        let f = file(h, 20);
        let segs = safetensors_segments(&f, f.len() as u64).unwrap().unwrap();
        let names: Vec<&str> = segs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["__header__", "__gap__", "x", "__trailing__"]);
        assert_eq!(segs.iter().map(|s| s.len).sum::<u64>(), f.len() as u64);
    }

    #[test]
    fn small_adjacent_tensors_of_one_dtype_are_grouped() {
        let h = r#"{"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"F16","shape":[2],"data_offsets":[4,8]},"c":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}"#;
        let f = file(h, 12);
        let segs = safetensors_segments(&f, f.len() as u64).unwrap().unwrap();
        let (grouped, place) = group_small_tensors(segs.clone(), &[false; 4]);
        let names: Vec<&str> = grouped.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["__header__", "a .. b (2 tensors)", "c"]);
        assert_eq!(grouped[1].len, 8);
        assert_eq!(place, [(0, 0), (1, 0), (1, 4), (2, 0)]);
        // A tensor kept alone (e.g. a duplicate coded as a reference).
        let (kept, _) = group_small_tensors(segs, &[false, false, true, false]);
        assert_eq!(kept.len(), 4);
    }

    #[test]
    fn malformed_headers_are_errors() {
        for h in [
            r#"{"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
            r#"{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,800]}}"#,
            r#"{"x":{"dtype":"C64","shape":[2],"data_offsets":[0,8]}}"#,
            r#"{"x":{"dtype":7,"shape":[2],"data_offsets":[0,8]}}"#,
            r#"{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
            r#"{"x": nope"#,
        ] {
            let f = file(h, 8);
            assert!(safetensors_segments(&f, f.len() as u64).is_err(), "{h}");
        }
        assert_eq!(
            safetensors_segments(b"hello world, not a model", 24).unwrap(),
            None
        );
    }

    /// #14: a tensor whose dtype has no wire id (`C64`, `F8_E4M3FNUZ`, or
    /// one no crate knows yet) is a bytes segment; the file still
    /// compresses, the other tensors keep theirs, and it round-trips.
    #[test]
    #[cfg(feature = "search")]
    fn issue_14_unknown_dtypes_are_opaque_bytes() {
        let h = r#"{"__metadata__":{"format":"pt"},"a":{"dtype":"C64","shape":[64],"data_offsets":[0,512]},"b":{"dtype":"BF16","shape":[32,32],"data_offsets":[512,2560]},"c":{"dtype":"F8_E4M3FNUZ","shape":[3,5],"data_offsets":[2560,2575]},"d":{"dtype":"Q9_NEW","shape":[7],"data_offsets":[2575,2600]}}"#;
        let mut f = (h.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(h.as_bytes());
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2600 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            f.push(x as u8);
        }
        // bf16 near 1.0: the exponent bytes repeat.
        for i in 0..1024 {
            f[8 + h.len() + 512 + 2 * i + 1] = 0x3f;
        }
        let segs = safetensors_segments(&f, f.len() as u64).unwrap().unwrap();
        let kinds: Vec<(&str, SegmentKind, Dtype)> = segs
            .iter()
            .map(|s| (s.name.as_str(), s.kind, s.dtype))
            .collect();
        assert_eq!(
            kinds,
            [
                ("__header__", SegmentKind::Bytes, Dtype::Bytes),
                ("a", SegmentKind::Bytes, Dtype::Bytes),
                ("b", SegmentKind::Tensor, Dtype::BF16),
                ("c", SegmentKind::Bytes, Dtype::Bytes),
                ("d", SegmentKind::Bytes, Dtype::Bytes),
            ]
        );
        let (_, tensors) = parse_header(&f, f.len() as u64).unwrap().unwrap();
        let names: Vec<&str> = tensors.iter().map(|t| t.dtype_name.as_str()).collect();
        assert_eq!(names, ["C64", "BF16", "F8_E4M3FNUZ", "Q9_NEW"]);

        let opts = crate::CompressOptions::default()
            .strict_safetensors(true)
            .whole_file(false)
            .threads(1);
        let archive = crate::compress(&f, &opts).expect("compresses");
        assert_eq!(crate::decompress(&archive).expect("decompresses"), f);
        let ar = crate::container::Archive::new(&archive[..]).unwrap();
        let b = ar.find("b").expect("segment b");
        assert_eq!(ar.segments()[b].desc.kind, SegmentKind::Tensor);
        assert_eq!(ar.tensor("a").unwrap().unwrap(), &f[8 + h.len()..][..512]);
        assert_eq!(ar.tensors().unwrap()[0].dtype_name, "C64");
    }
}
