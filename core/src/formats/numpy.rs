//! NumPy `.npy` and `.npz`: not read yet (a stub; the file stays opaque bytes).

use super::{Reader, Span};
use crate::container::ReadAt;

/// The `.npy` reader.
pub(crate) struct Npy;
/// The `.npz` reader (a zip of `.npy` files).
pub(crate) struct Npz;

impl Reader for Npy {
    fn name(&self) -> &'static str {
        "npy"
    }

    fn detect(&self, _head: &[u8], _len: u64) -> bool {
        false
    }

    fn tensors(&self, _src: &dyn ReadAt, _len: u64) -> Result<Vec<Span>, String> {
        Err("not read yet".into())
    }
}

impl Reader for Npz {
    fn name(&self) -> &'static str {
        "npz"
    }

    fn detect(&self, _head: &[u8], _len: u64) -> bool {
        false
    }

    fn tensors(&self, _src: &dyn ReadAt, _len: u64) -> Result<Vec<Span>, String> {
        Err("not read yet".into())
    }
}
