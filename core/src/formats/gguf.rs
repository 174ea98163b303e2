//! gguf: not read yet (a stub; the file stays opaque bytes).

use super::{Reader, Span};
use crate::container::ReadAt;

/// The gguf reader.
pub(crate) struct Gguf;

impl Reader for Gguf {
    fn name(&self) -> &'static str {
        "gguf"
    }

    fn detect(&self, _head: &[u8], _len: u64) -> bool {
        false
    }

    fn tensors(&self, _src: &dyn ReadAt, _len: u64) -> Result<Vec<Span>, String> {
        Err("not read yet".into())
    }
}
