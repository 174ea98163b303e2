//! Static rANS with 12-bit probabilities, 32-bit states, byte-wise
//! renormalization and four interleaved states (symbol `i` uses state `i % 4`).
//!
//! One coder handles three models over an alphabet of at most 256 symbols:
//! order-0 (one table), order-1 (the table is chosen by the previous word)
//! and conditional (the table is chosen by a sibling stream's word at the same
//! position). Contexts too rare to pay for a table of their own share the
//! fallback table. Tables travel in the payload, so a payload is
//! self-contained.

use super::table::{FreqTable, PROB_BITS, PROB_SCALE};
use super::{ByteReader, put_varint};
use crate::error::DecodeError;

const RANS_L: u32 = 1 << 23;
const LANES: usize = 4;

/// How the table for symbol `i` is chosen.
#[derive(Clone, Copy)]
pub(crate) enum Context<'a> {
    /// One table for all symbols.
    None,
    /// The previous symbol (0 before the first).
    Previous,
    /// The word of a sibling stream at the same index.
    Sibling(&'a [u64]),
}

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

/// The model: a context -> table map (256 slots) and the tables.
struct Model {
    /// For each context value, index into `tables`.
    map: Vec<u16>,
    tables: Vec<FreqTable>,
}

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
    let mut totals = vec![0usize; nctx];
    for i in 0..n {
        let c = ctx.at(syms, i);
        counts[c][syms[i] as usize] += 1;
        totals[c] += 1;
    }
    // Contexts with their own table; the rest pool into the fallback (table 0).
    let mut map = vec![0u16; nctx];
    let mut own: Vec<usize> = Vec::new();
    if nctx > 1 {
        for c in 0..nctx {
            if totals[c] >= min_ctx_count.max(1) {
                own.push(c);
            }
        }
    }
    let mut pooled = [0u32; 256];
    for c in 0..nctx {
        if !own.contains(&c) {
            for s in 0..256 {
                pooled[s] += counts[c][s];
            }
        }
    }
    let mut tables = vec![FreqTable::from_counts(&pooled)];
    for (k, &c) in own.iter().enumerate() {
        map[c] = (k + 1) as u16;
        tables.push(FreqTable::from_counts(&counts[c]));
    }

    let mut out = Vec::with_capacity(n / 2 + 64);
    // Header: n, number of own contexts and their ids, then the tables.
    put_varint(&mut out, n as u64);
    put_varint(&mut out, own.len() as u64);
    for &c in &own {
        out.push(c as u8);
    }
    for t in &tables {
        t.write(&mut out);
    }
    if n == 0 {
        return out;
    }
    // Encode backwards into a reversed byte buffer.
    let mut rev: Vec<u8> = Vec::with_capacity(n / 2 + 16);
    let mut x = [RANS_L; LANES];
    for i in (0..n).rev() {
        let t = &tables[map[ctx.at(syms, i)] as usize];
        let s = syms[i] as usize;
        let freq = t.freq[s] as u32;
        let start = t.cum[s] as u32;
        debug_assert!(freq > 0);
        let lane = i % LANES;
        let mut st = x[lane];
        let x_max = ((RANS_L >> PROB_BITS) << 8) * freq;
        while st >= x_max {
            rev.push(st as u8);
            st >>= 8;
        }
        st = ((st / freq) << PROB_BITS) + (st % freq) + start;
        x[lane] = st;
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
pub(crate) fn decode(
    payload: &[u8],
    n_expected: usize,
    previous: bool,
    sibling: Option<&[u64]>,
    out: &mut Vec<u64>,
) -> Result<(), DecodeError> {
    let mut r = ByteReader::new(payload);
    let n = r.varint()? as usize;
    if n != n_expected {
        return Err(DecodeError::corrupt("rans: symbol count does not match"));
    }
    let n_own = r.varint()? as usize;
    let contextual = previous || sibling.is_some();
    if n_own > 256 || (!contextual && n_own > 0) {
        return Err(DecodeError::corrupt("rans: bad context count"));
    }
    let mut map = vec![0u16; 256];
    let mut last: i32 = -1;
    for k in 0..n_own {
        let c = r.u8()? as i32;
        if c <= last {
            return Err(DecodeError::corrupt("rans: contexts not increasing"));
        }
        last = c;
        map[c as usize] = (k + 1) as u16;
    }
    let mut tables = Vec::with_capacity(n_own + 1);
    for _ in 0..=n_own {
        tables.push(FreqTable::read(&mut r)?);
    }
    let model = Model { map, tables };
    if n == 0 {
        return if r.remaining() == 0 {
            Ok(())
        } else {
            Err(DecodeError::corrupt("rans: trailing bytes"))
        };
    }
    let len = r.varint()? as usize;
    let data = r.bytes(len)?;
    if r.remaining() != 0 {
        return Err(DecodeError::corrupt("rans: trailing bytes"));
    }
    if let Some(s) = sibling
        && s.len() != n
    {
        return Err(DecodeError::corrupt("rans: sibling length differs"));
    }
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
    let base = out.len();
    let mask = PROB_SCALE - 1;
    for i in 0..n {
        let c = if let Some(s) = sibling {
            s[i] as usize
        } else if previous {
            if i == 0 { 0 } else { out[base + i - 1] as usize }
        } else {
            0
        };
        let t = &model.tables[model.map[c.min(255)] as usize];
        let lane = i % LANES;
        let mut st = x[lane];
        let slot = st & mask;
        let s = t.slot_symbol(slot);
        st = (t.freq[s as usize] as u32)
            .wrapping_mul(st >> PROB_BITS)
            .wrapping_add(slot)
            .wrapping_sub(t.cum[s as usize] as u32);
        while st < RANS_L {
            let b = *data
                .get(pos)
                .ok_or_else(|| DecodeError::corrupt("rans: stream ends early"))?;
            st = (st << 8) | b as u32;
            pos += 1;
        }
        x[lane] = st;
        out.push(s as u64);
    }
    if pos != data.len() || x.iter().any(|&s| s != RANS_L) {
        return Err(DecodeError::corrupt("rans: final state mismatch"));
    }
    Ok(())
}

/// Estimated size in bytes of [`encode`] for the given contexts, from
/// counts (entropy plus table cost), without encoding.
pub(crate) fn estimate(syms: &[u64], ctx: Context<'_>, min_ctx_count: usize) -> f64 {
    let nctx = match ctx {
        Context::None => 1,
        _ => 256,
    };
    let mut counts = vec![[0u32; 256]; nctx];
    let mut totals = vec![0usize; nctx];
    for i in 0..syms.len() {
        let c = ctx.at(syms, i);
        counts[c][syms[i] as usize] += 1;
        totals[c] += 1;
    }
    let mut pooled = [0u32; 256];
    let mut bits = 0.0;
    let mut table_bytes = 0.0;
    for c in 0..nctx {
        if nctx > 1 && totals[c] >= min_ctx_count.max(1) {
            bits += super::entropy_bits(&counts[c]);
            table_bytes += 1.0 + super::table::estimate_table_bytes(&counts[c]);
        } else {
            for s in 0..256 {
                pooled[s] += counts[c][s];
            }
        }
    }
    bits += super::entropy_bits(&pooled);
    table_bytes += super::table::estimate_table_bytes(&pooled);
    bits / 8.0 * 1.003 + table_bytes + 24.0
}
