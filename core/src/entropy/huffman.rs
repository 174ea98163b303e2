//! Canonical Huffman over a 256-symbol alphabet, code lengths limited to
//! [`MAX_LEN`], LSB-first bit order, one-lookup table decoding.

use super::table::{read_symbol_set, write_symbol_set};
use super::{ByteReader, Word, put_varint};
use crate::error::DecodeError;

const MAX_LEN: u32 = 12;

/// Code lengths for the counts (0 for absent symbols). A thread keeps its
/// last answer: the literal chooser sizes a stream in Huffman, and when
/// Huffman wins it encodes the same counts next.
fn code_lengths(counts: &[u32; 256]) -> [u8; 256] {
    thread_local! {
        static LAST: std::cell::RefCell<([u32; 256], [u8; 256])> =
            const { std::cell::RefCell::new(([0; 256], [0; 256])) };
    }
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        if last.0 != *counts {
            *last = (*counts, lengths_of(counts));
        }
        last.1
    })
}

/// [`code_lengths`], worked out.
fn lengths_of(counts: &[u32; 256]) -> [u8; 256] {
    let mut c: [u64; 256] = std::array::from_fn(|s| counts[s] as u64);
    loop {
        let lens = huffman_lengths(&c);
        if lens.iter().all(|&l| l as u32 <= MAX_LEN) {
            return lens;
        }
        for x in c.iter_mut() {
            if *x > 0 {
                *x = (*x >> 1).max(1);
            }
        }
    }
}

/// Unlimited Huffman code lengths. Everything is on the stack: the search
/// sizes every literal it weighs in Huffman, thousands of small streams a
/// model, where six small allocations a call cost more than the merging.
fn huffman_lengths(c: &[u64; 256]) -> [u8; 256] {
    let mut lens = [0u8; 256];
    let mut present = [0u8; 256];
    let mut n = 0;
    for (s, &x) in c.iter().enumerate() {
        if x > 0 {
            present[n] = s as u8;
            n += 1;
        }
    }
    match n {
        0 => return lens,
        1 => {
            lens[present[0] as usize] = 1;
            return lens;
        }
        _ => {}
    }
    // 2^k symbols whose two rarest outweigh the commonest (a mantissa's
    // low byte, near uniform): every merge pairs the two lightest nodes of
    // one level before any of the next (each merged node outweighs every
    // node of the level below), so every code has k bits: what the merging
    // below gives, without sorting.
    if n.is_power_of_two() {
        let (mut min1, mut min2, mut max) = (u64::MAX, u64::MAX, 0);
        for &s in &present[..n] {
            let x = c[s as usize];
            if x < min1 {
                (min1, min2) = (x, min1);
            } else if x < min2 {
                min2 = x;
            }
            max = max.max(x);
        }
        if min1 + min2 >= max {
            for &s in &present[..n] {
                lens[s as usize] = n.trailing_zeros() as u8;
            }
            return lens;
        }
    }
    // Nodes are merged lightest first, ties to the lower id (leaves are
    // ids 0..n in symbol order, merged nodes n.. as they are made). Merged
    // nodes come in order of weight, so two sorted queues (leaves, merged)
    // give the lightest node at one front or the other. A node is one
    // integer, weight above id (ids < 512), so sorting and comparing are
    // of plain integers.
    const ID: u32 = 9;
    let low = (1u64 << ID) - 1;
    let mut leaves = [0u64; 256];
    let mut or = 0;
    for (i, l) in leaves[..n].iter_mut().enumerate() {
        let w = c[present[i] as usize];
        or |= w;
        *l = (w << ID) | i as u64;
    }
    // Many symbols of small weights (a mantissa byte of a short stream,
    // near uniform but for noise): sorted by weight in one or two stable
    // passes of 8 bits (ties stay in id order, as the integers sort them),
    // 2.0 against 3.9 us on 256 symbols; `sort_unstable` otherwise.
    if n > 128 && or < 1 << 16 {
        let mut spare = [0u64; 256];
        sort_by_weight_byte(&leaves[..n], &mut spare[..n], ID);
        if or < 1 << 8 {
            leaves[..n].copy_from_slice(&spare[..n]);
        } else {
            sort_by_weight_byte(&spare[..n], &mut leaves[..n], ID + 8);
        }
    } else {
        leaves[..n].sort_unstable();
    }
    let leaves = &leaves[..n];
    let mut merged = [0u64; 255];
    let mut parent = [0u16; 511];
    let (mut li, mut mi) = (0, 0);
    for id in n..2 * n - 1 {
        let m = id - n;
        let mut take = || {
            if mi >= m || (li < n && leaves[li] < merged[mi]) {
                li += 1;
                leaves[li - 1]
            } else {
                mi += 1;
                merged[mi - 1]
            }
        };
        let a = take();
        let b = take();
        parent[(a & low) as usize] = id as u16;
        parent[(b & low) as usize] = id as u16;
        merged[m] = (((a >> ID) + (b >> ID)) << ID) | id as u64;
    }
    // A parent's id is above its children's: depths from the root down.
    let mut depth = [0u16; 511];
    for x in (0..2 * n - 2).rev() {
        depth[x] = depth[parent[x] as usize] + 1;
    }
    for (i, &s) in present[..n].iter().enumerate() {
        lens[s as usize] = depth[i].min(255) as u8;
    }
    lens
}

/// `src` into `dst` in the order of bits `shift..shift + 8` of each
/// integer, stably (a counting sort).
fn sort_by_weight_byte(src: &[u64], dst: &mut [u64], shift: u32) {
    let digit = |k: u64| ((k >> shift) & 0xFF) as usize;
    let mut at = [0u32; 256];
    for &k in src {
        at[digit(k)] += 1;
    }
    let mut sum = 0;
    for a in at.iter_mut() {
        (*a, sum) = (sum, sum + *a);
    }
    for &k in src {
        let d = &mut at[digit(k)];
        dst[*d as usize] = k;
        *d += 1;
    }
}

/// Canonical codes (bit-reversed for LSB-first output) from lengths.
fn canonical_codes(lens: &[u8; 256]) -> [u32; 256] {
    let mut codes = [0u32; 256];
    let mut order: Vec<usize> = (0..256).filter(|&s| lens[s] > 0).collect();
    order.sort_by_key(|&s| (lens[s], s));
    let mut code = 0u32;
    let mut prev_len = 0u32;
    for &s in &order {
        let l = lens[s] as u32;
        code <<= l - prev_len;
        prev_len = l;
        codes[s] = code.reverse_bits() >> (32 - l);
        code += 1;
    }
    codes
}

/// Exact size of [`encode`]'s output for a stream with these counts
/// (the choosers take [`price_or_bound`]).
#[cfg(test)]
pub(crate) fn exact_size(counts: &[u32; 256]) -> usize {
    let (data, table) = size_parts(counts);
    data + table
}

/// Exact size of [`encode`]'s output for a stream with these counts,
/// computed from the code lengths without encoding, as (bytes of coded
/// symbols, bytes of everything else).
pub(crate) fn size_parts(counts: &[u32; 256]) -> (usize, usize) {
    let lens = code_lengths(counts);
    let np = lens.iter().filter(|&&l| l > 0).count();
    if np == 0 {
        return (0, 1);
    }
    let data = data_bytes(counts, &lens);
    (data, table_bytes(np, data))
}

/// Bytes of everything but the coded symbols, for `np` symbols present and
/// `data` bytes of them: the symbol set, the lengths, the data's length.
fn table_bytes(np: usize, data: usize) -> usize {
    super::varint_len(np as u64)
        + if np <= 32 { np } else { 32 }
        + np.div_ceil(2)
        + super::varint_len(data as u64)
}

/// A lower bound of [`size_parts`] from the counts alone, without the code
/// lengths: no prefix code takes fewer bits than the counts' entropy, and
/// the table's size follows from the symbols present. It tells the literal
/// chooser, at a fraction of the cost, that a stream of nearly uniform
/// bytes (a float's low mantissa bytes) gains nothing from Huffman.
pub(crate) fn size_parts_bound(counts: &[u32; 256]) -> (usize, usize) {
    let np = counts.iter().filter(|&&c| c > 0).count();
    if np == 0 {
        return (0, 1);
    }
    // (One bit less than the entropy in floating point, for its rounding.)
    let bits = (super::entropy_bits(counts) - 1.0).max(0.0);
    let data = (bits / 8.0).ceil() as usize;
    (data, table_bytes(np, data))
}

/// [`size_parts`] priced as `data + share * table`, or the same price of
/// [`size_parts_bound`] when that is already at least `floor`: a caller
/// that compares the price with `floor`, or anything below it, decides as
/// the exact price would.
pub(crate) fn price_or_bound(counts: &[u32; 256], share: f64, floor: f64) -> f64 {
    let price = |(data, table): (usize, usize)| data as f64 + table as f64 * share;
    let bound = price(size_parts_bound(counts));
    if bound >= floor {
        bound
    } else {
        price(size_parts(counts))
    }
}

/// Bytes of the bitstream of symbols of `counts` in codes of `lens`.
fn data_bytes(counts: &[u32; 256], lens: &[u8; 256]) -> usize {
    let bits: u64 = (0..256).map(|s| counts[s] as u64 * lens[s] as u64).sum();
    bits.div_ceil(8) as usize
}

/// Encode symbols (each < 256).
pub(crate) fn encode<W: Word>(syms: &[W]) -> Vec<u8> {
    let mut counts = [0u32; 256];
    for &s in syms {
        counts[s.to_u64() as usize] += 1;
    }
    encode_counted(syms, &counts)
}

/// [`encode`] of symbols whose histogram is `counts` (as the literal
/// chooser has them, counted once for every codec it weighs).
pub(crate) fn encode_counted<W: Word>(syms: &[W], counts: &[u32; 256]) -> Vec<u8> {
    debug_assert_eq!(
        counts.iter().map(|&c| c as usize).sum::<usize>(),
        syms.len(),
        "counts of other symbols"
    );
    let lens = code_lengths(counts);
    let codes = canonical_codes(&lens);
    let len = data_bytes(counts, &lens);
    let mut out = Vec::with_capacity(len + 300);
    let present: Vec<usize> = (0..256).filter(|&s| lens[s] > 0).collect();
    put_varint(&mut out, present.len() as u64);
    if present.is_empty() {
        return out;
    }
    write_symbol_set(&mut out, &present);
    for pair in present.chunks(2) {
        let lo = lens[pair[0]];
        let hi = pair.get(1).map_or(0, |&s| lens[s]);
        out.push(lo | (hi << 4));
    }
    // Bitstream: its length is known from the counts, so the buffer is
    // sized once, and the codes go in with 8-byte stores of the
    // accumulator (whose bits past `nacc` are zero) at the first byte not
    // yet whole, one store for four codes (a store a code was most of the
    // loop's time): at most 7 + 4 * MAX_LEN bits are pending.
    const _: () = assert!(7 + 4 * MAX_LEN <= 64);
    put_varint(&mut out, len as u64);
    let start = out.len();
    out.resize(start + len + 8, 0);
    let bits = &mut out[start..];
    // A symbol's code, its length above bit 32.
    let entry: [u64; 256] = std::array::from_fn(|s| codes[s] as u64 | (lens[s] as u64) << 32);
    let (mut acc, mut nacc, mut pos) = (0u64, 0u32, 0usize);
    let add = |s: W, acc: &mut u64, nacc: &mut u32| {
        let e = entry[s.to_u64() as usize];
        *acc |= (e & 0xFFFF_FFFF) << *nacc;
        *nacc += (e >> 32) as u32;
    };
    let mut store = |acc: &mut u64, nacc: &mut u32| {
        bits[pos..pos + 8].copy_from_slice(&acc.to_le_bytes());
        let whole = *nacc / 8;
        pos += whole as usize;
        *acc >>= whole * 8;
        *nacc %= 8;
    };
    let mut fours = syms.chunks_exact(4);
    for four in &mut fours {
        for &s in four {
            add(s, &mut acc, &mut nacc);
        }
        store(&mut acc, &mut nacc);
    }
    for &s in fours.remainder() {
        add(s, &mut acc, &mut nacc);
        store(&mut acc, &mut nacc);
    }
    debug_assert_eq!(pos + nacc.div_ceil(8) as usize, len);
    out.truncate(start + len);
    out
}

/// Decode exactly `n` symbols.
pub(crate) fn decode<W: Word>(
    payload: &[u8],
    n: usize,
    out: &mut Vec<W>,
) -> Result<(), DecodeError> {
    let mut r = ByteReader::new(payload);
    let np = r.varint()? as usize;
    if np == 0 {
        return if n == 0 && r.remaining() == 0 {
            Ok(())
        } else {
            Err(DecodeError::corrupt("huffman: empty table"))
        };
    }
    if np > 256 {
        return Err(DecodeError::corrupt("huffman: more than 256 symbols"));
    }
    let present = read_symbol_set(&mut r, np)?;
    let packed = r.bytes(np.div_ceil(2))?;
    let mut lens = [0u8; 256];
    let mut kraft = 0u64;
    for (i, &s) in present.iter().enumerate() {
        let l = (packed[i / 2] >> (4 * (i % 2))) & 0xF;
        if l == 0 || l as u32 > MAX_LEN {
            return Err(DecodeError::corrupt("huffman: bad code length"));
        }
        lens[s] = l;
        kraft += 1u64 << (MAX_LEN - l as u32);
    }
    if kraft > 1u64 << MAX_LEN {
        return Err(DecodeError::corrupt("huffman: lengths oversubscribed"));
    }
    let codes = canonical_codes(&lens);
    // Lookup table: entry = symbol | len << 8; len 0 marks an unused slot.
    // Indexed by as many bits as the longest code (a short stream of few
    // symbols fills a few hundred slots, not 4096).
    let longest = present.iter().map(|&s| lens[s] as u32).max().unwrap_or(1);
    let size = 1usize << longest;
    let mut table = vec![0u16; size];
    for &s in &present {
        let l = lens[s] as u32;
        let step = 1usize << l;
        let mut j = codes[s] as usize;
        while j < size {
            table[j] = s as u16 | ((l as u16) << 8);
            j += step;
        }
    }
    let len = r.varint()? as usize;
    let data = r.bytes(len)?;
    if r.remaining() != 0 {
        return Err(DecodeError::corrupt("huffman: trailing bytes"));
    }
    out.reserve(n);
    let mask = (size - 1) as u64;
    // Bits not yet consumed, LSB first: `nacc` of them are valid, and
    // `pos` bytes of `data` (then zeros past its end) were taken in.
    let (mut acc, mut nacc, mut pos) = (0u64, 0u32, 0usize);
    // A slot of no code has length 0: it consumes nothing, and is reported
    // once the stream ends.
    let mut bad = false;
    // One code: its symbol, its bits consumed.
    let mut step = |acc: &mut u64, nacc: &mut u32| -> W {
        let e = table[(*acc & mask) as usize];
        let l = (e >> 8) as u32;
        bad |= l == 0;
        *acc >>= l;
        *nacc -= l;
        W::from_u64((e & 0xFF) as u64)
    };
    // Symbols go to a small block on the stack, then to `out` a block at a
    // time: a push a symbol would reload and store the vector's length
    // each time.
    const BLOCK: usize = 256;
    let mut block = [W::default(); BLOCK];
    let mut left = n;
    // Four symbols a refill while eight bytes of data remain: one
    // unaligned load tops the accumulator up to 56-63 valid bits (the
    // bytes it takes only in part are taken again, whole, by the next
    // load), enough for four codes of at most MAX_LEN bits.
    const _: () = assert!(4 * MAX_LEN <= 56);
    let refill = |acc: &mut u64, nacc: &mut u32, pos: &mut usize| {
        let word: [u8; 8] = data[*pos..*pos + 8].try_into().expect("eight bytes");
        *acc |= u64::from_le_bytes(word) << *nacc;
        *pos += (63 - *nacc as usize) >> 3;
        *nacc |= 56;
    };
    while left >= BLOCK && pos + 8 * BLOCK / 4 <= data.len() {
        for quad in block.chunks_exact_mut(4) {
            refill(&mut acc, &mut nacc, &mut pos);
            for o in quad {
                *o = step(&mut acc, &mut nacc);
            }
        }
        out.extend_from_slice(&block);
        left -= BLOCK;
    }
    while left >= 4 && pos + 8 <= data.len() {
        refill(&mut acc, &mut nacc, &mut pos);
        for _ in 0..4 {
            out.push(step(&mut acc, &mut nacc));
        }
        left -= 4;
    }
    // The rest a byte and a symbol at a time, zeros past the end.
    for _ in 0..left {
        while nacc <= 56 {
            let b = data.get(pos).copied().unwrap_or(0);
            acc |= (b as u64) << nacc;
            nacc += 8;
            pos += 1;
        }
        out.push(step(&mut acc, &mut nacc));
    }
    if bad {
        return Err(DecodeError::corrupt("huffman: invalid code"));
    }
    let consumed = pos as u64 * 8 - nacc as u64;
    let total_bits = data.len() as u64 * 8;
    if consumed > total_bits || total_bits - consumed >= 8 {
        return Err(DecodeError::corrupt("huffman: bit count mismatch"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bitstream written one bit at a time.
    fn reference_bits(syms: &[u8]) -> Vec<u8> {
        let mut counts = [0u32; 256];
        syms.iter().for_each(|&s| counts[s as usize] += 1);
        let lens = code_lengths(&counts);
        let codes = canonical_codes(&lens);
        let mut out = Vec::new();
        let mut nbits = 0usize;
        for &s in syms {
            for b in 0..lens[s as usize] {
                if nbits.is_multiple_of(8) {
                    out.push(0);
                }
                out[nbits / 8] |= (((codes[s as usize] >> b) & 1) as u8) << (nbits % 8);
                nbits += 1;
            }
        }
        out
    }

    #[test]
    fn balanced_alphabets_get_the_lengths_the_merging_gives() {
        // 2^k symbols, the two rarest at, just above or just below the
        // commonest: the shortcut must agree with the merging (it is taken
        // only when the two rarest outweigh the commonest).
        let mut st = 3u64;
        for k in 1..=8u32 {
            for spread in [0u64, 1, 5, 40, 200] {
                let mut c = [0u64; 256];
                for s in 0..1usize << k {
                    st ^= st << 13;
                    st ^= st >> 7;
                    st ^= st << 17;
                    c[(s * 37 + 11) % 256] = 100 + st % (spread + 1);
                }
                let got = huffman_lengths(&c);
                if spread <= 100 {
                    // Counts in 100..=200: the two rarest outweigh the
                    // commonest, every code k bits.
                    for (&x, &l) in c.iter().zip(&got) {
                        assert_eq!(l as u32, if x > 0 { k } else { 0 }, "k {k} spread {spread}");
                    }
                }
                assert_eq!(got, merged_lengths(&c), "k {k} spread {spread}");
            }
        }
    }

    /// A xorshift generator from `seed` (not 0).
    fn xorshift(seed: u64) -> impl FnMut() -> u64 {
        let mut st = seed;
        move || {
            st ^= st << 13;
            st ^= st >> 7;
            st ^= st << 17;
            st
        }
    }

    #[test]
    fn many_symbols_of_small_weights_get_the_lengths_the_merging_gives() {
        // Weights below 2^8 and 2^16 over more than 128 symbols take the
        // counting sort, with ties; other alphabets the comparison sort.
        let mut rnd = xorshift(7);
        for round in 0..300 {
            let symbols = [129, 200, 256, 100, 40][round % 5];
            let top = [3, 255, 256, 4000, 65535, 1 << 20][(round / 5) % 6];
            let mut c = [0u64; 256];
            for s in 0..symbols {
                c[(s * 97 + round) % 256] = 1 + rnd() % top;
            }
            assert_eq!(huffman_lengths(&c), merged_lengths(&c), "round {round}");
        }
    }

    #[test]
    fn the_size_bound_never_exceeds_the_size_and_rules_out_uniform_bytes() {
        // Alphabets from one symbol to all 256, flat to skewed, short to
        // long: the bound is below the exact size, part by part.
        let mut rnd = xorshift(11);
        for round in 0..400 {
            let symbols = [1, 2, 3, 17, 129, 256][round % 6];
            let top = [1, 2, 40, 4000, 1 << 20][(round / 6) % 5];
            let mut c = [0u32; 256];
            for s in 0..symbols {
                c[(s * 89 + round) % 256] = 1 + (rnd() % top) as u32;
            }
            let (data, table) = size_parts(&c);
            let (data_lb, table_lb) = size_parts_bound(&c);
            assert!(data_lb <= data && table_lb <= table, "round {round}");
        }
        assert_eq!(size_parts_bound(&[0; 256]), size_parts(&[0; 256]));
        // Uniform bytes: no code beats raw, and the bound shows it (the
        // literal chooser then skips the code lengths).
        for per in [4u32, 40, 1000] {
            let c = [per; 256];
            let (data, table) = size_parts_bound(&c);
            assert!(data + table > 256 * per as usize, "{per}");
        }
    }

    #[test]
    fn decoding_four_codes_a_refill_gives_back_every_stream() {
        // Lengths around the four-symbol steps and the eight-byte loads,
        // one to 256 symbols, skewed (codes of 1 to 12 bits).
        let mut rnd = xorshift(5);
        for n in (0..70).chain([1000, 4099, 40_000]) {
            for alphabet in [1u64, 2, 40, 256] {
                let syms: Vec<u8> = (0..n)
                    .map(|_| {
                        let r = rnd();
                        (r % alphabet).min(r % 7 + (r >> 20) % 3) as u8
                    })
                    .collect();
                let mut out: Vec<u8> = Vec::new();
                decode(&encode(&syms), n, &mut out).unwrap();
                assert!(out == syms, "n={n} alphabet={alphabet}");
            }
        }
    }

    #[test]
    fn a_slot_of_no_code_is_an_error_even_in_the_last_bits() {
        // Two symbols of 2-bit codes (00 and 10 LSB first): the patterns
        // 01 and 11 are no code. 400 symbols fill 100 bytes exactly, so a
        // bad last code leaves the bit count right: only the slot tells.
        let syms: Vec<u8> = (0..400).map(|i| (i % 3 == 0) as u8).collect();
        // The symbol set {0, 1}, both lengths 2, 100 bytes of codes.
        let mut coded = vec![2, 0, 0, 0x22, 100];
        let data = coded.len();
        coded.extend(syms.chunks(4).map(|q| {
            q.iter()
                .enumerate()
                .map(|(i, &s)| s << (2 * i + 1))
                .sum::<u8>()
        }));
        let mut out: Vec<u8> = Vec::new();
        decode(&coded, 400, &mut out).unwrap();
        assert_eq!(out, syms);
        for at in [99, 50, 0] {
            let mut bad = coded.clone();
            bad[data + at] |= 0x40;
            let mut out: Vec<u8> = Vec::new();
            assert!(decode(&bad, 400, &mut out).is_err(), "byte {at}");
        }
    }

    /// [`huffman_lengths`] by merging alone (the shortcut's reference).
    fn merged_lengths(c: &[u64; 256]) -> [u8; 256] {
        // Weights and ids as the merging orders them.
        let present: Vec<usize> = (0..256).filter(|&s| c[s] > 0).collect();
        let n = present.len();
        let mut lens = [0u8; 256];
        if n < 2 {
            if n == 1 {
                lens[present[0]] = 1;
            }
            return lens;
        }
        let mut nodes: Vec<(u64, usize, Vec<usize>)> = present
            .iter()
            .enumerate()
            .map(|(i, &s)| (c[s], i, vec![s]))
            .collect();
        let mut next = n;
        while nodes.len() > 1 {
            nodes.sort_by_key(|x| (x.0, x.1));
            let a = nodes.remove(0);
            let b = nodes.remove(0);
            for &s in a.2.iter().chain(&b.2) {
                lens[s] += 1;
            }
            nodes.push((a.0 + b.0, next, [a.2, b.2].concat()));
            next += 1;
        }
        lens
    }

    #[test]
    fn the_kept_lengths_are_those_of_the_counts_asked() {
        let mut a = [0u32; 256];
        a[..40]
            .iter_mut()
            .enumerate()
            .for_each(|(s, c)| *c = 1 + s as u32 * 7);
        let mut b = a;
        b[3] += 1000;
        for counts in [a, b, a, a, [0; 256], b] {
            assert_eq!(code_lengths(&counts), lengths_of(&counts));
        }
        assert_ne!(lengths_of(&a), lengths_of(&b));
    }

    #[test]
    fn four_codes_a_store_write_the_bits_of_one_at_a_time() {
        // Geometric counts give codes up to MAX_LEN bits (the limit binds
        // on the longest alphabets); every remainder of four is tried.
        let mut st = 7u64;
        for alphabet in [1u32, 2, 5, 40, 256] {
            for n in (0..40).chain([1001, 4099]) {
                let syms: Vec<u8> = (0..n)
                    .map(|_| {
                        st ^= st << 13;
                        st ^= st >> 7;
                        st ^= st << 17;
                        let geometric = (st % (1 << alphabet.min(20))).trailing_zeros() % alphabet;
                        geometric as u8 ^ ((st >> 40) as u8 % (alphabet.min(4) as u8))
                    })
                    .collect();
                let coded = encode(&syms);
                let want = reference_bits(&syms);
                assert!(coded.ends_with(&want), "alphabet {alphabet}, {n} symbols");
                let mut back: Vec<u8> = Vec::new();
                decode(&coded, n, &mut back).unwrap();
                assert_eq!(back, syms);
            }
        }
        // Symbol s 2^(15 - s) times: lengths 1, 2, ... cut at MAX_LEN.
        let mut syms: Vec<u8> = (0..16u8).flat_map(|s| vec![s; 1 << (15 - s)]).collect();
        let mut counts = [0u32; 256];
        syms.iter().for_each(|&s| counts[s as usize] += 1);
        assert_eq!(code_lengths(&counts).iter().max(), Some(&(MAX_LEN as u8)));
        for i in (1..syms.len()).rev() {
            st ^= st << 13;
            st ^= st >> 7;
            st ^= st << 17;
            syms.swap(i, (st % (i as u64 + 1)) as usize);
        }
        for n in [syms.len(), syms.len() - 3] {
            let coded = encode(&syms[..n]);
            assert!(coded.ends_with(&reference_bits(&syms[..n])));
        }
    }
}
