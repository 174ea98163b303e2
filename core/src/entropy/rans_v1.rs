//! Format v1 rANS (decode only; v2 archives use [`super::rans`]): 12-bit probabilities, 32-bit states, byte-wise
//! renormalization and four interleaved states (symbol `i` uses state `i % 4`).
//!
//! One coder handles three models over an alphabet of at most 256 symbols:
//! order-0 (one table), order-1 (the table is chosen by the previous word)
//! and conditional (the table is chosen by a sibling stream's word at the same
//! position). Contexts too rare to pay for a table of their own share the
//! fallback table. Tables travel in the payload, so a payload is
//! self-contained.
#![allow(clippy::needless_range_loop)]

use super::Word;
#[cfg(test)]
use super::put_varint;
#[cfg(test)]
use super::rans::{Counts, Model};
use super::rans::{lookup, read_payload};
#[cfg(test)]
use super::table::FreqTable;
#[cfg(test)]
use super::table::{PROB_BITS, PROB_SCALE};
use crate::error::DecodeError;

const RANS_L: u32 = 1 << 23;
const LANES: usize = 4;

/// How the table for symbol `i` is chosen.
#[cfg(test)]
#[derive(Clone, Copy)]
pub(crate) enum Context<'a> {
    /// One table for all symbols.
    None,
    /// The previous symbol (0 before the first).
    Previous,
    /// The word of a sibling stream at the same index.
    Sibling(&'a [u64]),
}

#[cfg(test)]
impl Context<'_> {
    #[inline]
    fn at(&self, syms: &[u64], i: usize) -> usize {
        match self {
            Context::None => 0,
            Context::Previous => {
                if i == 0 {
                    0
                } else {
                    syms[i - 1] as usize
                }
            }
            Context::Sibling(s) => (s[i] as usize).min(255),
        }
    }
}

#[cfg(test)]
/// Division-free encoder entry for one symbol (ryg_rans' reciprocal form).
#[derive(Clone, Copy, Default)]
struct EncSym {
    x_max: u32,
    rcp_freq: u32,
    bias: u32,
    cmpl_freq: u32,
    rcp_shift: u32,
}

#[cfg(test)]
impl EncSym {
    fn new(start: u32, freq: u32) -> EncSym {
        let x_max = ((RANS_L >> PROB_BITS) << 8) * freq;
        let cmpl_freq = PROB_SCALE - freq;
        if freq < 2 {
            EncSym {
                x_max,
                rcp_freq: u32::MAX,
                bias: start + PROB_SCALE - 1,
                cmpl_freq,
                rcp_shift: 0,
            }
        } else {
            let mut shift = 0;
            while freq > (1u32 << shift) {
                shift += 1;
            }
            EncSym {
                x_max,
                rcp_freq: (1u64 << (shift + 31)).div_ceil(freq as u64) as u32,
                bias: start,
                cmpl_freq,
                rcp_shift: shift - 1,
            }
        }
    }

    #[inline(always)]
    fn put(&self, mut x: u32, out: &mut Vec<u8>) -> u32 {
        while x >= self.x_max {
            out.push(x as u8);
            x >>= 8;
        }
        let q = (((x as u64) * self.rcp_freq as u64) >> 32) as u32 >> self.rcp_shift;
        x.wrapping_add(self.bias)
            .wrapping_add(q.wrapping_mul(self.cmpl_freq))
    }
}

#[cfg(test)]
fn enc_table(t: &FreqTable) -> Vec<EncSym> {
    (0..256)
        .map(|s| {
            if t.freq[s] == 0 {
                EncSym::default()
            } else {
                EncSym::new(t.cum[s] as u32, t.freq[s] as u32)
            }
        })
        .collect()
}

#[cfg(test)]
/// Encode `syms` (each < 256) with contexts. `min_ctx_count` is the count
/// below which a context shares the fallback table (ignored for `None`).
pub(crate) fn encode(syms: &[u64], ctx: Context<'_>, min_ctx_count: usize) -> Vec<u8> {
    let n = syms.len();
    let nctx = match ctx {
        Context::None => 1,
        _ => 256,
    };
    // Count per context.
    let mut counts = vec![[0u32; 256]; nctx];
    for i in 0..n {
        counts[ctx.at(syms, i)][syms[i] as usize] += 1;
    }
    let model = Model::build(&Counts::new(counts), min_ctx_count);
    let mut out = Vec::with_capacity(n / 2 + 64);
    model.write(n, &mut out);
    if n == 0 {
        return out;
    }
    // Encode backwards into a reversed byte buffer.
    let (map, tables) = (&model.map, &model.tables);
    let enc: Vec<Vec<EncSym>> = tables.iter().map(enc_table).collect();
    let mut rev: Vec<u8> = Vec::with_capacity(n / 2 + 16);
    let mut x = [RANS_L; LANES];
    match ctx {
        Context::None => {
            let e = &enc[0];
            for i in (0..n).rev() {
                let lane = i % LANES;
                x[lane] = e[syms[i] as usize].put(x[lane], &mut rev);
            }
        }
        _ => {
            for i in (0..n).rev() {
                let e = &enc[map[ctx.at(syms, i)] as usize];
                let lane = i % LANES;
                x[lane] = e[syms[i] as usize].put(x[lane], &mut rev);
            }
        }
    }
    for lane in (0..LANES).rev() {
        let st = x[lane];
        rev.extend_from_slice(&st.to_le_bytes());
    }
    rev.reverse();
    put_varint(&mut out, rev.len() as u64);
    out.extend_from_slice(&rev);
    out
}

/// Decode `n_expected` symbols. `sibling` must be given for the conditional model.
pub(crate) fn decode<W: Word>(
    payload: &[u8],
    n_expected: usize,
    previous: bool,
    sibling: Option<&[W]>,
    out: &mut Vec<W>,
) -> Result<(), DecodeError> {
    let n = n_expected;
    let sibling_len = sibling.map(<[W]>::len);
    let Some((model, data)) = read_payload(payload, n, previous, sibling_len)? else {
        return Ok(());
    };
    if data.len() < 4 * LANES {
        return Err(DecodeError::corrupt("rans: stream too short"));
    }
    let mut pos = 0usize;
    let mut x = [0u32; LANES];
    for st in x.iter_mut() {
        *st = u32::from_be_bytes([data[pos], data[pos + 1], data[pos + 2], data[pos + 3]]);
        pos += 4;
    }
    out.reserve(n);
    // One packed lookup per symbol: sym | (freq-1) << 8 | start << 20.
    let packed = model.packed();
    macro_rules! step {
        ($tbl:expr, $st:ident) => {{
            let e;
            (e, $st) = lookup(&$tbl[..], $st);
            while $st < RANS_L {
                let byte = *data
                    .get(pos)
                    .ok_or_else(|| DecodeError::corrupt("rans: stream ends early"))?;
                $st = ($st << 8) | byte as u32;
                pos += 1;
            }
            W::from_u64((e & 0xFF) as u64)
        }};
    }
    let [mut x0, mut x1, mut x2, mut x3] = x;
    let quads = n / LANES;
    if !previous && sibling.is_none() {
        // Four independent states in registers: the lookups overlap.
        let t = packed.table(0);
        for _ in 0..quads {
            let a = step!(t, x0);
            let b = step!(t, x1);
            let c = step!(t, x2);
            let d = step!(t, x3);
            out.extend_from_slice(&[a, b, c, d]);
        }
        let tail = [&mut x0, &mut x1, &mut x2, &mut x3];
        for st in tail.into_iter().take(n % LANES) {
            let mut v = *st;
            let sym = step!(t, v);
            *st = v;
            out.push(sym);
        }
    } else if let Some(sib) = sibling {
        let by_ctx: Vec<&[u32]> = (0..256)
            .map(|c| packed.table(model.map[c] as usize))
            .collect();
        let tbl = |i: usize| by_ctx[(sib[i].to_u64() as usize).min(255)];
        for q in 0..quads {
            let i = q * LANES;
            let a = step!(tbl(i), x0);
            let b = step!(tbl(i + 1), x1);
            let c = step!(tbl(i + 2), x2);
            let d = step!(tbl(i + 3), x3);
            out.extend_from_slice(&[a, b, c, d]);
        }
        let tail = [&mut x0, &mut x1, &mut x2, &mut x3];
        for (k, st) in tail.into_iter().take(n % LANES).enumerate() {
            let mut v = *st;
            let sym = step!(tbl(quads * LANES + k), v);
            *st = v;
            out.push(sym);
        }
    } else {
        // One indirection per symbol: the table of each context value.
        let by_ctx: Vec<&[u32]> = (0..256)
            .map(|c| packed.table(model.map[c] as usize))
            .collect();
        let tbl = |c: W| by_ctx[c.to_u64() as usize & 0xFF];
        let mut prev = W::default();
        for _ in 0..quads {
            let a = step!(tbl(prev), x0);
            let b = step!(tbl(a), x1);
            let c = step!(tbl(b), x2);
            let d = step!(tbl(c), x3);
            out.extend_from_slice(&[a, b, c, d]);
            prev = d;
        }
        let tail = [&mut x0, &mut x1, &mut x2, &mut x3];
        for st in tail.into_iter().take(n % LANES) {
            let mut v = *st;
            let sym = step!(tbl(prev), v);
            *st = v;
            out.push(sym);
            prev = sym;
        }
    }
    let x = [x0, x1, x2, x3];
    if pos != data.len() || x.iter().any(|&s| s != RANS_L) {
        return Err(DecodeError::corrupt("rans: final state mismatch"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_payloads_still_decode() {
        let syms: Vec<u64> = (0..5000u64).map(|i| (i * i + i / 7) % 23).collect();
        let sib: Vec<u64> = (0..5000u64).map(|i| i % 5).collect();
        for (ctx, prev, s) in [
            (Context::None, false, None),
            (Context::Previous, true, None),
            (Context::Sibling(&sib), false, Some(&sib[..])),
        ] {
            let p = encode(&syms, ctx, 64);
            let mut out: Vec<u64> = Vec::new();
            decode(&p, syms.len(), prev, s, &mut out).unwrap();
            assert_eq!(out, syms);
        }
    }
}
