//! The decoder of [`super`]: table lookups, one 16-bit read at most a
//! symbol, and the vector decoder for the whole rounds of a wide stream.

use super::super::table::{PROB_BITS, PROB_SCALE};
use super::super::{ByteReader, Word};
use super::{LANES, Model, RANS_L, STAGE_ROUNDS, Simd, segments};
use crate::error::DecodeError;

/// A payload's model and stream (both versions share this layout), checked
/// against the expected symbol count and sibling length; `None` for 0
/// symbols (no stream).
pub(crate) fn read_payload(
    payload: &[u8],
    n: usize,
    previous: bool,
    sibling_len: Option<usize>,
) -> Result<Option<(Model, &[u8])>, DecodeError> {
    let mut r = ByteReader::new(payload);
    let model = Model::read(&mut r, n, previous || sibling_len.is_some())?;
    if n == 0 {
        return if r.remaining() == 0 {
            Ok(None)
        } else {
            Err(DecodeError::corrupt("rans: trailing bytes"))
        };
    }
    let len = r.varint()? as usize;
    let data = r.bytes(len)?;
    if r.remaining() != 0 {
        return Err(DecodeError::corrupt("rans: trailing bytes"));
    }
    if sibling_len.is_some_and(|l| l != n) {
        return Err(DecodeError::corrupt("rans: sibling length differs"));
    }
    Ok(Some((model, data)))
}

/// The decoder's table lookup and state update, shared by both rANS
/// versions: the packed entry of `x`'s slot (see `pack_table`) and the
/// state before renormalization.
#[inline(always)]
pub(crate) fn lookup(tbl: &[u32], x: u32) -> (u32, u32) {
    let slot = x & (PROB_SCALE - 1);
    let e = tbl[slot as usize];
    let freq = ((e >> 8) & 0xFFF) + 1;
    let start = e >> 20;
    (
        e,
        freq.wrapping_mul(x >> PROB_BITS)
            .wrapping_add(slot)
            .wrapping_sub(start),
    )
}

/// One decoding step: the symbol in `$st`'s slot, then the state update and
/// at most one 16-bit read.
macro_rules! step {
    ($tbl:expr, $st:expr, $data:ident, $pos:ident) => {{
        let e;
        (e, $st) = lookup(&$tbl[..], $st);
        if $st < RANS_L {
            match $data.get($pos..$pos + 2) {
                Some(b) => {
                    $st = ($st << 16) | u16::from_le_bytes([b[0], b[1]]) as u32;
                    $pos += 2;
                }
                None => return Err(DecodeError::corrupt("rans: stream ends early")),
            }
        }
        (e & 0xFF) as u8
    }};
}

/// Decode `n_expected` symbols, appending them to `out`. `sibling` must be
/// given for the conditional model.
#[cfg(test)]
pub(crate) fn decode<W: Word>(
    payload: &[u8],
    n_expected: usize,
    previous: bool,
    sibling: Option<&[W]>,
    out: &mut Vec<W>,
) -> Result<(), DecodeError> {
    decode_n::<W, LANES>(payload, n_expected, previous, sibling, out, Simd::Off)
}

/// [`decode`] for a payload of `N` states (and `N` order-1 segments).
/// `simd` picks the vector decoder for the whole rounds of a wide stream
/// (when the CPU has one; the result is the same).
pub(crate) fn decode_n<W: Word, const N: usize>(
    payload: &[u8],
    n_expected: usize,
    previous: bool,
    sibling: Option<&[W]>,
    out: &mut Vec<W>,
    simd: Simd,
) -> Result<(), DecodeError> {
    let n = n_expected;
    let sibling_len = sibling.map(<[W]>::len);
    let Some((model, data)) = read_payload(payload, n, previous, sibling_len)? else {
        return Ok(());
    };
    if data.len() < 4 * N || !(data.len() - 4 * N).is_multiple_of(2) {
        return Err(DecodeError::corrupt("rans: bad stream length"));
    }
    let x: [u32; N] =
        std::array::from_fn(|k| u32::from_be_bytes(data[4 * k..4 * k + 4].try_into().expect("4")));

    let base = out.len();
    out.resize(base + n, W::default());
    let r = steps::<W, N>(&model, data, previous, sibling, x, &mut out[base..], simd);
    if r.is_err() {
        out.truncate(base);
    }
    r
}

/// The decoding loops of [`decode_n`]: `o` gets the `n = o.len()` symbols
/// of the stream `data` (initial states `x`), which must end exactly with
/// every state at `L`.
fn steps<W: Word, const N: usize>(
    model: &Model,
    data: &[u8],
    previous: bool,
    sibling: Option<&[W]>,
    mut x: [u32; N],
    o: &mut [W],
    simd: Simd,
) -> Result<(), DecodeError> {
    let n = o.len();
    let mut pos = 4 * N;
    let packed = model.packed();
    let by_ctx: Vec<&[u32]> = (0..256)
        .map(|c| packed.table(model.map[c] as usize))
        .collect();
    let q = n / N;
    // Rounds of N symbols the vector decoder took.
    let mut done = 0;
    if N == super::super::rans_simd::LANES {
        let sib = sibling.map(W::as_bytes);
        if let (Some(o), Some(x)) = (W::as_bytes_mut(o), (&mut x[..]).try_into().ok())
            && sib.is_none_or(|s| s.is_some())
        {
            let ctx = match sib.flatten() {
                Some(s) => super::super::rans_simd::Ctx::Sibling(s),
                None if previous => super::super::rans_simd::Ctx::Previous,
                None => super::super::rans_simd::Ctx::None,
            };
            done = super::super::rans_simd::decode(simd, model, &packed, x, data, &mut pos, o, ctx);
        }
    }
    if sibling.is_none() && !previous {
        let t = packed.table(0);
        for chunk in o[done * N..].chunks_exact_mut(N) {
            for l in 0..N {
                chunk[l] = W::from_u64(step!(t, x[l], data, pos) as u64);
            }
        }
        for l in 0..n % N {
            o[q * N + l] = W::from_u64(step!(t, x[l], data, pos) as u64);
        }
    } else if let Some(sib) = sibling {
        let tbl = |w: W| by_ctx[(w.to_u64() as usize).min(255)];
        for (chunk, sc) in o[done * N..]
            .chunks_exact_mut(N)
            .zip(sib[done * N..].chunks_exact(N))
        {
            for l in 0..N {
                chunk[l] = W::from_u64(step!(tbl(sc[l]), x[l], data, pos) as u64);
            }
        }
        for l in 0..n % N {
            let i = q * N + l;
            o[i] = W::from_u64(step!(tbl(sib[i]), x[l], data, pos) as u64);
        }
    } else {
        // The segments decoded side by side, each with its own context.
        // `done` steps were taken by the vector decoder: each segment's
        // context is its last symbol.
        let segs = segments::<N>(n);
        let mut c: [u8; N] = std::array::from_fn(|l| match done {
            0 => 0,
            _ => o[segs[l].0 + done - 1].to_u64() as u8,
        });
        if N == LANES {
            // Four segments write side by side without cache trouble, so
            // they skip the staging buffer the wider cases need.
            for j in done..q {
                for l in 0..N {
                    c[l] = step!(by_ctx[c[l] as usize], x[l], data, pos);
                    o[segs[l].0 + j] = W::from_u64(c[l] as u64);
                }
            }
        } else {
            // Many segments whose starts are often 4 KiB apart: writing a
            // symbol to each per round would evict the same cache set over
            // and over. Rounds go to a small stage, then a run per segment.
            let mut stage = vec![0u8; STAGE_ROUNDS * N];
            let mut j = done;
            while j < q {
                let r = (q - j).min(STAGE_ROUNDS);
                for row in stage[..r * N].chunks_exact_mut(N) {
                    for l in 0..N {
                        c[l] = step!(by_ctx[c[l] as usize], x[l], data, pos);
                        row[l] = c[l];
                    }
                }
                for (l, &(start, _)) in segs.iter().enumerate() {
                    for (k, w) in o[start + j..start + j + r].iter_mut().enumerate() {
                        *w = W::from_u64(stage[k * N + l] as u64);
                    }
                }
                j += r;
            }
        }
        let (last, len) = segs[N - 1];
        for i in last + q..last + len {
            c[N - 1] = step!(by_ctx[c[N - 1] as usize], x[N - 1], data, pos);
            o[i] = W::from_u64(c[N - 1] as u64);
        }
    }
    if pos != data.len() || x.iter().any(|&s| s != RANS_L) {
        return Err(DecodeError::corrupt("rans: final state mismatch"));
    }
    Ok(())
}
