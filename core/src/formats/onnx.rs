//! onnx: not read yet (a stub; the file stays opaque bytes).

use super::{Reader, Span};
use crate::container::ReadAt;

/// The onnx reader.
pub(crate) struct Onnx;

impl Reader for Onnx {
    fn name(&self) -> &'static str {
        "onnx"
    }

    fn detect(&self, _head: &[u8], _len: u64) -> bool {
        false
    }

    fn tensors(&self, _src: &dyn ReadAt, _len: u64) -> Result<Vec<Span>, String> {
        Err("not read yet".into())
    }
}
