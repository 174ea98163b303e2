//! safetensors: an 8-byte header length, a JSON header, the tensors' data.

use super::{Reader, Span};
use crate::container::layout::{self, MAX_SAFETENSORS_HEADER};
use crate::container::{ReadAt, SegmentDesc, SegmentKind};

/// The safetensors reader.
pub(crate) struct Safetensors;

impl Reader for Safetensors {
    fn name(&self) -> &'static str {
        "safetensors"
    }

    fn detect(&self, head: &[u8], len: u64) -> bool {
        let Some(n) = head.get(..8) else {
            return false;
        };
        let n = u64::from_le_bytes(n.try_into().expect("8 bytes"));
        head.get(8) == Some(&b'{') && n <= MAX_SAFETENSORS_HEADER && n.saturating_add(8) <= len
    }

    fn tensors(&self, src: &dyn ReadAt, len: u64) -> Result<Vec<Span>, String> {
        Ok(segments(src, len)?
            .into_iter()
            .filter(|s| s.kind == SegmentKind::Tensor)
            .map(|s| Span {
                name: s.name,
                dtype: s.dtype,
                shape: s.shape,
                offset: s.offset,
                len: s.len,
            })
            .collect())
    }
}

/// The segments of a safetensors file, as they always were: `__header__`,
/// the tensors in data order with `__gap__`s, `__trailing__`.
pub(crate) fn segments(src: &dyn ReadAt, len: u64) -> Result<Vec<SegmentDesc>, String> {
    let mut n = [0u8; 8];
    src.read_exact_at(0, &mut n).map_err(|e| e.to_string())?;
    let n = u64::from_le_bytes(n);
    let prefix = super::read_meta(src, len, 0, 8 + n)?;
    match layout::safetensors_segments(&prefix, len)? {
        Some(s) => Ok(s),
        None => Err("not a safetensors header".into()),
    }
}
