//! ctranslate2: not read yet (a stub; the file stays opaque bytes).

use super::{Reader, Span};
use crate::container::ReadAt;

/// The ctranslate2 reader.
pub(crate) struct Ct2;

impl Reader for Ct2 {
    fn name(&self) -> &'static str {
        "ctranslate2"
    }

    fn detect(&self, _head: &[u8], _len: u64) -> bool {
        false
    }

    fn tensors(&self, _src: &dyn ReadAt, _len: u64) -> Result<Vec<Span>, String> {
        Err("not read yet".into())
    }
}
