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

    fn bytes(name: &str, offset: u64, len: u64) -> SegmentDesc {
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
        let info: safetensors::tensor::TensorInfo =
            serde_json::from_value(v).map_err(|e| format!("tensor {name:?}: {e}"))?;
        let dtype_name = serde_json::to_value(info.dtype)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let dtype = Dtype::from_safetensors(&dtype_name)
            .ok_or_else(|| format!("tensor {name:?}: unsupported dtype {dtype_name}"))?;
        let (s, e) = (info.data_offsets.0 as u64, info.data_offsets.1 as u64);
        if e < s || e > data_len {
            return Err(format!(
                "tensor {name:?}: data offsets [{s}, {e}) outside the {data_len} data bytes"
            ));
        }
        let elems = info
            .shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
            .ok_or_else(|| format!("tensor {name:?}: shape overflows"))?;
        let bits = elems
            .checked_mul(info.dtype.bitsize() as u64)
            .ok_or_else(|| format!("tensor {name:?}: size overflows"))?;
        if bits.div_ceil(8) != e - s {
            return Err(format!(
                "tensor {name:?}: shape {:?} of {dtype_name} needs {} bytes, offsets give {}",
                info.shape,
                bits.div_ceil(8),
                e - s
            ));
        }
        tensors.push((name, dtype, info.shape, s, e));
    }
    tensors.sort_by(|a, b| (a.3, a.4, &a.0).cmp(&(b.3, b.4, &b.0)));
    let mut segs = vec![SegmentDesc::bytes("__header__", 0, data_start)];
    let mut pos = 0u64;
    for (name, dtype, shape, s, e) in tensors {
        if s < pos {
            return Err(format!("tensor {name:?} overlaps the tensor before it"));
        }
        if s > pos {
            segs.push(SegmentDesc::bytes("__gap__", data_start + pos, s - pos));
        }
        if e > s {
            let aligned = (e - s) % dtype.word_bytes() as u64 == 0;
            segs.push(SegmentDesc {
                kind: SegmentKind::Tensor,
                dtype: if aligned { dtype } else { Dtype::U8 },
                name,
                shape: shape.iter().map(|&d| d as u64).collect(),
                offset: data_start + s,
                len: e - s,
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
    fn malformed_headers_are_errors() {
        for h in [
            r#"{"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
            r#"{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,800]}}"#,
            r#"{"x":{"dtype":"Q9","shape":[2],"data_offsets":[0,8]}}"#,
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
}
