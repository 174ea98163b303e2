//! Literal wire codecs: how a `Lit` leaf's words are written.
//!
//! Every codec is lossless over words of the leaf's width; the encoder picks
//! the smallest by exact size. Entropy coders (Huffman, rANS) take alphabets
//! of at most 256 symbols: wider streams are split by `Merge` first, or
//! written raw, bit-packed or with the generic codec (zstd).

mod bitpack;
mod bytes;
mod choose;
mod codec;
mod decode;
mod huffman;
mod price;
mod rans;
#[cfg(feature = "search")]
pub(crate) use rans::Counts;
mod generic;
mod rans_simd;
mod rans_v1;
mod table;
#[cfg(test)]
mod tests;
mod word;

pub use bitpack::unpack_bytes;
use bitpack::*;
pub use bytes::*;
pub use choose::*;
pub use codec::*;
pub use decode::*;
pub use generic::*;
pub use price::*;
pub use word::*;

use std::borrow::Cow;

use crate::error::DecodeError;
use rans::Context;

/// Empirical order-0 entropy in bits of a histogram (count x -log2 p).
pub fn entropy_bits(counts: &[u32]) -> f64 {
    // n log2 n - sum c log2 c, with c log2 c looked up for small counts:
    // the search weighs hundreds of context tables per candidate.
    let table = c_log2_c_table();
    let (mut total, mut sum) = (0u64, 0.0);
    for &c in counts {
        total += c as u64;
        sum += match table.get(c as usize) {
            Some(&v) => v,
            None => c as f64 * (c as f64).log2(),
        };
    }
    if total == 0 {
        return 0.0;
    }
    let n = total as f64;
    (n * n.log2() - sum).max(0.0)
}

/// `c log2 c` for counts below 4096.
fn c_log2_c_table() -> &'static [f64; 4096] {
    static TABLE: std::sync::OnceLock<Box<[f64; 4096]>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = Box::new([0.0; 4096]);
        for (c, v) in t.iter_mut().enumerate().skip(1) {
            *v = c as f64 * (c as f64).log2();
        }
        t
    })
}

/// The OR of all words: it has the bit length of the largest word (and is
/// `< 2^k` exactly when every word is), and unlike `max` it vectorizes on
/// baseline x86-64, which has no unsigned 64-bit compare.
pub fn or_all<W: Word>(words: &[W]) -> u64 {
    match W::as_bytes(words) {
        Some(b) => b.iter().fold(0u8, |a, &w| a | w) as u64,
        None => words.iter().fold(0, |a, &w| a | w.to_u64()),
    }
}

/// Bits needed to write `max`.
fn bits_for(max: u64) -> u32 {
    64 - max.leading_zeros()
}

fn bytes_per_word(width: u8) -> usize {
    (width as usize).div_ceil(8)
}
