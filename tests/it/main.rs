//! End-to-end tests.
mod archive;
mod cli;
mod containers;
mod gguf;
mod hub;
mod real_hub;
mod regression;
mod scale;
mod security;
mod strict;
mod wire;

/// `n` bytes of xorshift noise: what no coder makes smaller.
pub(crate) fn noise(n: usize) -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
