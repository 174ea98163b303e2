//! pytorch: not read yet (a stub; the file stays opaque bytes).

use super::{Reader, Span};
use crate::container::ReadAt;

/// The pytorch reader.
pub(crate) struct PyTorch;

impl Reader for PyTorch {
    fn name(&self) -> &'static str {
        "pytorch"
    }

    fn detect(&self, _head: &[u8], _len: u64) -> bool {
        false
    }

    fn tensors(&self, _src: &dyn ReadAt, _len: u64) -> Result<Vec<Span>, String> {
        Err("not read yet".into())
    }
}
