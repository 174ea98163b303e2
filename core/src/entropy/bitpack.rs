//! Raw and bit-packed words, and their inverse.

use super::*;

pub(super) fn raw_bytes<W: Word>(words: &[W], width: u8) -> Vec<u8> {
    let bpw = bytes_per_word(width);
    if bpw == 1 {
        return to_bytes_lossy(words).into_owned();
    }
    /// Fixed-size words: one store per word.
    fn put<W: Word, const B: usize>(words: &[W], out: &mut [u8]) {
        for (o, &w) in out.chunks_exact_mut(B).zip(words) {
            o.copy_from_slice(&w.to_u64().to_le_bytes()[..B]);
        }
    }
    let mut out = vec![0u8; words.len() * bpw];
    match bpw {
        2 => put::<W, 2>(words, &mut out),
        4 => put::<W, 4>(words, &mut out),
        8 => put::<W, 8>(words, &mut out),
        _ => {
            for (o, &w) in out.chunks_exact_mut(bpw).zip(words) {
                o.copy_from_slice(&w.to_u64().to_le_bytes()[..bpw]);
            }
        }
    }
    out
}

/// Room `pack_into` may take past the packed bytes (its 8-byte stores).
const PACK_SLACK: usize = 8;

pub(super) fn bitpack<W: Word>(words: &[W], k: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + (words.len() * k as usize).div_ceil(8) + PACK_SLACK);
    out.push(k as u8);
    pack_into(words, k, &mut out);
    out
}

/// Words of `k` bits packed LSB first (the last byte zero-padded).
pub(super) fn pack_bits<W: Word>(words: &[W], k: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity((words.len() * k as usize).div_ceil(8) + PACK_SLACK);
    pack_into(words, k, &mut out);
    out
}

pub(super) fn pack_into<W: Word>(words: &[W], k: u32, out: &mut Vec<u8>) {
    match k {
        1 => return pack_small::<W, 1>(words, out),
        2 => return pack_small::<W, 2>(words, out),
        3 => return pack_small::<W, 3>(words, out),
        4 => return pack_small::<W, 4>(words, out),
        5 => return pack_small::<W, 5>(words, out),
        6 => return pack_small::<W, 6>(words, out),
        7 => return pack_small::<W, 7>(words, out),
        8 => return pack_small::<W, 8>(words, out),
        _ => {}
    }
    let mut acc: u128 = 0;
    let mut nacc = 0u32;
    for &w in words {
        acc |= (w.to_u64() as u128) << nacc;
        nacc += k;
        while nacc >= 8 {
            out.push(acc as u8);
            acc >>= 8;
            nacc -= 8;
        }
    }
    if nacc > 0 {
        out.push(acc as u8);
    }
}

/// [`pack_into`] for `K <= 8` (words < 2^K): every 8 words make `K` bytes.
pub(super) fn pack_small<W: Word, const K: usize>(words: &[W], out: &mut Vec<u8>) {
    let start = out.len();
    let len = (words.len() * K).div_ceil(8);
    if let Some(bytes) = W::as_bytes(words) {
        // Bytes in: 8 fields gathered from the 8 bytes of a word (the
        // inverse of `spread`), stored 8 bytes wide at a K-byte stride (each
        // store's spare bytes are overwritten by the next).
        out.resize(start + len + PACK_SLACK, 0);
        let o = &mut out[start..];
        let whole = bytes.len() / 8;
        for (g, c) in bytes.chunks_exact(8).enumerate() {
            let v = gather::<K>(u64::from_le_bytes(c.try_into().expect("8")));
            o[g * K..g * K + 8].copy_from_slice(&v.to_le_bytes());
        }
        let mut last = [0u8; 8];
        let rest = &bytes[whole * 8..];
        last[..rest.len()].copy_from_slice(rest);
        let v = gather::<K>(u64::from_le_bytes(last));
        o[whole * K..whole * K + 8].copy_from_slice(&v.to_le_bytes());
        out.truncate(start + len);
        return;
    }
    out.reserve(len + PACK_SLACK);
    for chunk in words.chunks(8) {
        let mut v = 0u64;
        for (j, &w) in chunk.iter().enumerate() {
            v |= w.to_u64() << (j * K);
        }
        out.extend_from_slice(&v.to_le_bytes()[..K]);
    }
    out.truncate(start + (words.len() * K).div_ceil(8));
}

/// Append `n` words of `k` bits unpacked from LSB-first bytes (the caller
/// checked that `data` holds `ceil(n * k / 8)` bytes).
pub(super) fn unpack_words<W: Word>(data: &[u8], k: u32, n: usize, out: &mut Vec<W>) {
    let base = out.len();
    out.resize(base + n, W::default());
    let o = &mut out[base..];
    if k == 0 || n == 0 {
        return;
    }
    let k = k as usize;
    match k {
        1 => return unpack_small::<1, W>(data, o),
        2 => return unpack_small::<2, W>(data, o),
        3 => return unpack_small::<3, W>(data, o),
        4 => return unpack_small::<4, W>(data, o),
        5 => return unpack_small::<5, W>(data, o),
        6 => return unpack_small::<6, W>(data, o),
        7 => return unpack_small::<7, W>(data, o),
        8 => return unpack_small::<8, W>(data, o),
        _ => {}
    }
    if k > 56 {
        let mask: u128 = (1u128 << k) - 1;
        let (mut acc, mut nacc, mut pos) = (0u128, 0usize, 0usize);
        for w in o.iter_mut() {
            while nacc < k {
                acc |= (data[pos] as u128) << nacc;
                pos += 1;
                nacc += 8;
            }
            *w = W::from_u64((acc & mask) as u64);
            acc >>= k;
            nacc -= k;
        }
        return;
    }
    // Each word from one unaligned 8-byte load: shift (<= 7) + k <= 63.
    let mask = (1u64 << k) - 1;
    let load = |d: &[u8], byte: usize| u64::from_le_bytes(d[byte..byte + 8].try_into().expect("8"));
    // Words whose 8-byte window lies inside `data`.
    let fast = if data.len() >= 8 {
        ((data.len() - 8) * 8 / k + 1).min(n)
    } else {
        0
    };
    for (i, w) in o[..fast].iter_mut().enumerate() {
        let bit = i * k;
        *w = W::from_u64((load(data, bit >> 3) >> (bit & 7)) & mask);
    }
    if fast < n {
        let first = fast * k / 8;
        let mut tail = data[first..].to_vec();
        tail.resize(tail.len() + 8, 0);
        for (i, w) in o.iter_mut().enumerate().skip(fast) {
            let bit = i * k - first * 8;
            *w = W::from_u64((load(&tail, bit >> 3) >> (bit & 7)) & mask);
        }
    }
}

/// Words of `k` bits (at most 8) packed LSB first in `data` (at least
/// `ceil(out.len() * k / 8)` bytes; more are not read), one a byte into
/// `out`.
pub fn unpack_bytes(data: &[u8], k: u32, out: &mut [u8]) {
    match k {
        0 => out.fill(0),
        1 => unpack_small::<1, u8>(data, out),
        2 => unpack_small::<2, u8>(data, out),
        3 => unpack_small::<3, u8>(data, out),
        4 => unpack_small::<4, u8>(data, out),
        5 => unpack_small::<5, u8>(data, out),
        6 => unpack_small::<6, u8>(data, out),
        7 => unpack_small::<7, u8>(data, out),
        8 => unpack_small::<8, u8>(data, out),
        _ => panic!("unpack_bytes: {k} bits do not fit a byte"),
    }
}

/// [`unpack_words`] for `K <= 8`: every 8 words are the `K` bytes of one
/// 64-bit load (a zero-padded copy for the last ones).
pub(super) fn unpack_small<const K: usize, W: Word>(data: &[u8], o: &mut [W]) {
    // Only the bytes the words take (a caller may lend the rest of a
    // stream): the tail copied below is then under 8 + K bytes.
    let data = &data[..(o.len() * K).div_ceil(8).min(data.len())];
    let mask = (1u64 << K) - 1;
    let group = |v: u64, chunk: &mut [W]| {
        for (j, w) in chunk.iter_mut().enumerate() {
            *w = W::from_u64((v >> (j * K)) & mask);
        }
    };
    // Groups whose 8-byte load stays inside `data`, then the rest from a
    // zero-padded copy of the tail.
    let fast = if data.len() >= 8 {
        ((data.len() - 8) / K + 1).min(o.len().div_ceil(8))
    } else {
        0
    };
    let (head, rest) = o.split_at_mut((fast * 8).min(o.len()));
    let (whole, part) = head.split_at_mut(head.len() / 8 * 8);
    if let Some(bytes) = W::as_bytes_mut(whole) {
        // Bytes out: the 8 fields of a group spread to the 8 bytes of a
        // word in three halving steps, one 8-byte store.
        for (g, chunk) in bytes.chunks_exact_mut(8).enumerate() {
            let v = u64::from_le_bytes(data[g * K..g * K + 8].try_into().expect("8"));
            chunk.copy_from_slice(&spread::<K>(v).to_le_bytes());
        }
    } else {
        for (g, chunk) in whole.chunks_exact_mut(8).enumerate() {
            group(
                u64::from_le_bytes(data[g * K..g * K + 8].try_into().expect("8")),
                chunk,
            );
        }
    }
    let g = whole.len() / 8;
    if !part.is_empty() {
        group(
            u64::from_le_bytes(data[g * K..g * K + 8].try_into().expect("8")),
            part,
        );
    }
    let left = &data[(fast * K).min(data.len())..];
    let mut tail = [0u8; 32];
    tail[..left.len()].copy_from_slice(left);
    for (g, chunk) in rest.chunks_mut(8).enumerate() {
        group(
            u64::from_le_bytes(tail[g * K..g * K + 8].try_into().expect("8")),
            chunk,
        );
    }
}

/// The low `8 * K` bits of `v` as 8 fields of `K <= 8` bits, field `j` in
/// byte `j` (a software PDEP): fields move to their halves, quarters and
/// eighths of the word in three steps.
#[inline(always)]
pub(super) fn spread<const K: usize>(v: u64) -> u64 {
    let m1 = rep(4 * K, 64);
    let m2 = rep(2 * K, 32);
    let m3 = rep(K, 16);
    let m4 = rep(K, 8);
    let a = (v & m1) | ((v >> (4 * K)) & m1) << 32;
    let a = (a & m2) | ((a >> (2 * K)) & m2) << 16;
    let a = (a & m3) | ((a >> K) & m3) << 8;
    a & m4
}

/// The inverse of [`spread`]: field `j` of byte `j` (each `< 2^K`) to bits
/// `j*K..` of the result (a software PEXT).
#[inline(always)]
pub(super) fn gather<const K: usize>(v: u64) -> u64 {
    let (m1, m2, m3) = (rep(K, 16), rep(2 * K, 32), rep(4 * K, 64));
    let a = (v & m1) | ((v >> 8) & m1) << K;
    let a = (a & m2) | ((a >> 16) & m2) << (2 * K);
    (a & m3) | ((a >> 32) & m3) << (4 * K)
}

/// `bits` ones every `every` bits, from bit 0.
pub(super) const fn rep(bits: usize, every: usize) -> u64 {
    let mut m = 0u64;
    let mut at = 0;
    while at < 64 {
        m |= ((1u64 << bits) - 1) << at;
        at += every;
    }
    m
}

pub(super) fn push_le_words<W: Word>(bytes: &[u8], bpw: usize, out: &mut Vec<W>) {
    /// Fixed-size words: one load per word, no per-word capacity check.
    fn fill<W: Word, const B: usize>(bytes: &[u8], out: &mut Vec<W>) {
        let start = out.len();
        out.resize(start + bytes.len() / B, W::default());
        for (o, c) in out[start..].iter_mut().zip(bytes.chunks_exact(B)) {
            let mut b = [0u8; 8];
            b[..B].copy_from_slice(c);
            *o = W::from_u64(u64::from_le_bytes(b));
        }
    }
    match bpw {
        1 => fill::<W, 1>(bytes, out),
        2 => fill::<W, 2>(bytes, out),
        4 => fill::<W, 4>(bytes, out),
        8 => fill::<W, 8>(bytes, out),
        _ => {
            for c in bytes.chunks_exact(bpw.max(1)) {
                let mut b = [0u8; 8];
                b[..c.len()].copy_from_slice(c);
                out.push(W::from_u64(u64::from_le_bytes(b)));
            }
        }
    }
}
