//! The word types a literal codes (bytes and 64-bit words).

/// A word type the decoders can write: `u64` for any width, `u8` for
/// widths up to 8 (the fast path: no widening, 8x less memory traffic).
pub trait Word: Copy + Default + Send + Sync + 'static {
    /// Narrow (the caller guarantees the value fits).
    fn from_u64(v: u64) -> Self;
    /// Widen.
    fn to_u64(self) -> u64;
    /// The words as bytes, when a word is a byte (the vector decoders' case).
    fn as_bytes(words: &[Self]) -> Option<&[u8]> {
        let _ = words;
        None
    }
    /// [`Word::as_bytes`], mutable.
    fn as_bytes_mut(words: &mut [Self]) -> Option<&mut [u8]> {
        let _ = words;
        None
    }
}

impl Word for u8 {
    #[inline(always)]
    fn from_u64(v: u64) -> Self {
        v as u8
    }
    #[inline(always)]
    fn to_u64(self) -> u64 {
        self as u64
    }
    fn as_bytes(words: &[u8]) -> Option<&[u8]> {
        Some(words)
    }
    fn as_bytes_mut(words: &mut [u8]) -> Option<&mut [u8]> {
        Some(words)
    }
}

impl Word for u64 {
    #[inline(always)]
    fn from_u64(v: u64) -> Self {
        v
    }
    #[inline(always)]
    fn to_u64(self) -> u64 {
        self
    }
}
