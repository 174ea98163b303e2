//! Static rANS over byte symbols (format v2): 12-bit probabilities, 32-bit
//! states renormalized 16 bits at a time (at most one read per symbol, so
//! the decoder has one predictable branch), four states decoded together.
//!
//! Three models share the coder:
//! - order 0: one table; symbol `i` uses state `i % 4`;
//! - conditional: the table is chosen by a sibling stream's word at the same
//!   index; symbol `i` uses state `i % 4`;
//! - order 1: the table is chosen by the previous symbol. The stream is cut
//!   into four contiguous quarters, one state each, and a symbol's context is
//!   the previous symbol of its own quarter (0 at a quarter's start), so the
//!   four dependency chains decode side by side instead of one after another.
//!
//! Contexts too rare to pay for a table of their own share the fallback
//! table. Tables travel in the payload, so a payload is self-contained.
//! Layout: `varint n`, `varint own`, `own` context bytes (increasing),
//! `own + 1` tables, `varint len`, then `len` bytes: four big-endian u32
//! states followed by little-endian u16 renormalization words.
#![allow(clippy::needless_range_loop)]

pub(crate) use super::rans_simd::Simd;
use super::table::{FreqTable, PROB_SCALE};
use super::{ByteReader, put_varint};
use crate::error::DecodeError;

/// Lower bound of a normalized state.
const RANS_L: u32 = 1 << 16;
/// States of the narrow coders (every context model).
pub(crate) const LANES: usize = 4;
/// States of the wide coders (order 0 and conditional on long streams):
/// two 16-lane vectors decoded side by side.
pub(crate) const WIDE: usize = 32;

/// Rounds of order-1 symbols the wide decoders gather before writing each
/// segment's run of them.
pub(super) const STAGE_ROUNDS: usize = 64;

/// How the table for a symbol is chosen.
#[derive(Clone, Copy)]
pub(crate) enum Context<'a> {
    /// One table for all symbols.
    None,
    /// The previous symbol of the same segment of the stream.
    Previous,
    /// The word of a sibling stream at the same index.
    Sibling(&'a [u8]),
}

/// The order-1 segments of `n` symbols as `(start, len)`: one per state,
/// each `n / N` long, the last also holding the `n % N` left over.
fn segments<const N: usize>(n: usize) -> [(usize, usize); N] {
    let q = n / N;
    let mut r: [(usize, usize); N] = std::array::from_fn(|k| (k * q, q));
    r[N - 1].1 = n - (N - 1) * q;
    r
}

/// Calls `f(index, context)` for every symbol under order 1, segment by segment.
#[inline(always)]
fn for_each_previous<const N: usize>(syms: &[u8], mut f: impl FnMut(usize, u8)) {
    for (start, len) in segments::<N>(syms.len()) {
        if len == 0 {
            continue;
        }
        f(start, 0);
        for i in start + 1..start + len {
            f(i, syms[i - 1]);
        }
    }
}

/// Decoder lookup table: for each slot, `sym | (freq-1) << 8 | start << 20`,
/// filled one symbol's run of slots at a time. An empty table (used by no
/// context of a valid payload) reads symbol 0 with frequency 1 everywhere:
/// whatever a corrupt payload decodes with it, the region checksum rejects.
fn pack_table(t: &FreqTable, out: &mut Vec<u32>) {
    let end = out.len() + PROB_SCALE as usize;
    // The symbols' slots follow one another from 0 (`cum` is the running
    // sum of `freq`): appended in order, nothing is written twice and no
    // zeroed buffer is written over.
    for s in 0..256 {
        let f = t.freq[s] as u32;
        if f == 0 {
            continue;
        }
        let start = t.cum[s] as u32;
        let e = s as u32 | (f - 1) << 8 | (start & 0xFFF) << 20;
        out.extend(std::iter::repeat_n(e, f as usize));
    }
    // A table summing to less (the empty table) ends in zeros; never more
    // than its own slots.
    out.resize(end, 0);
}

/// Decoder lookup tables (see `pack_table`), [`PROB_SCALE`] entries each,
/// one after another in one buffer.
pub(crate) struct Packed(Vec<u32>);

impl Packed {
    /// Table `i`.
    pub fn table(&self, i: usize) -> &[u32] {
        let n = PROB_SCALE as usize;
        &self.0[i * n..(i + 1) * n]
    }

    /// Every table, table `i` at `i * PROB_SCALE` (the vector decoder's
    /// view).
    #[cfg_attr(
        not(all(feature = "unsafe-fast", target_arch = "x86_64")),
        allow(dead_code)
    )]
    pub fn flat(&self) -> &[u32] {
        &self.0
    }
}

/// Symbol counts per context: one histogram for order 0; for the context
/// models, one per context value that occurs (most streams use a few dozen
/// of the 256, and a dense 256 x 256 table costs more to clear than to fill
/// on a short stream).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Counts {
    /// Histograms, by increasing context value.
    rows: Vec<[u32; 256]>,
    /// The context value of each row.
    ctxs: Vec<u8>,
    /// Symbols in each row.
    totals: Vec<usize>,
    /// Whether contexts choose tables (else one row, context 0).
    contextual: bool,
}

impl Counts {
    /// What [`count`] gives for a stream of `sym_of(b)` under the sibling
    /// stream `ctx_of(b)`, both bit fields of the same bytes `b`, from the
    /// bytes' order-0 histogram `hist`: an f16's sign, exponent and top
    /// mantissa bits share its high byte, which four histograms count in a
    /// quarter of the time one field takes under another (0.35 against
    /// 1.2-1.4 ns a symbol on real f16 fields).
    #[cfg(feature = "search")]
    pub(crate) fn of_fields(
        hist: &[u32; 256],
        ctx_of: impl Fn(u8) -> u8,
        sym_of: impl Fn(u8) -> u8,
    ) -> Counts {
        let mut seen = [false; 256];
        for b in (0..=255u8).filter(|&b| hist[b as usize] > 0) {
            seen[ctx_of(b) as usize] = true;
        }
        let (row, ctxs) = context_rows(&seen);
        let mut rows = vec![[0u32; 256]; ctxs.len()];
        let mut totals = vec![0usize; ctxs.len()];
        for b in (0..=255u8).filter(|&b| hist[b as usize] > 0) {
            let r = row[ctx_of(b) as usize] as usize;
            rows[r][sym_of(b) as usize] += hist[b as usize];
            totals[r] += hist[b as usize] as usize;
        }
        Counts {
            rows,
            ctxs,
            totals,
            contextual: true,
        }
    }

    /// Counts from dense per-context histograms (one: order 0).
    #[cfg(test)]
    pub fn new(dense: Vec<[u32; 256]>) -> Counts {
        let contextual = dense.len() > 1;
        let total = |r: &[u32; 256]| r.iter().map(|&x| x as usize).sum::<usize>();
        let (mut rows, mut ctxs, mut totals) = (Vec::new(), Vec::new(), Vec::new());
        for (c, r) in dense.into_iter().enumerate() {
            let t = total(&r);
            if t > 0 || !contextual {
                rows.push(r);
                ctxs.push(c as u8);
                totals.push(t);
            }
        }
        Counts {
            rows,
            ctxs,
            totals,
            contextual,
        }
    }

    /// The order-0 histogram (of a count without contexts).
    pub fn order0(&self) -> &[u32; 256] {
        debug_assert!(!self.contextual);
        &self.rows[0]
    }

    /// The order-0 counts of the same symbols: every context's row summed
    /// (each symbol is counted once, under its context).
    pub fn pooled(&self) -> Counts {
        let mut row = [0u32; 256];
        for r in &self.rows {
            for (a, &b) in row.iter_mut().zip(r) {
                *a += b;
            }
        }
        Counts {
            rows: vec![row],
            ctxs: vec![0],
            totals: vec![self.totals.iter().sum()],
            contextual: false,
        }
    }

    /// Whether contexts choose tables.
    pub fn contextual(&self) -> bool {
        self.contextual
    }

    /// Symbols counted.
    #[cfg(test)]
    pub fn total(&self) -> usize {
        self.totals.iter().sum()
    }

    /// `(context, histogram, symbols)` of each context that occurs, by
    /// increasing context.
    fn iter(&self) -> impl Iterator<Item = (u8, &[u32; 256], usize)> {
        self.ctxs
            .iter()
            .zip(&self.rows)
            .zip(&self.totals)
            .map(|((&c, r), &t)| (c, r, t))
    }

    /// Does a context seen `total` times get a table of its own (else it
    /// shares table 0)?
    fn own(&self, total: usize, min_ctx_count: usize) -> bool {
        self.contextual && total >= min_ctx_count.max(1)
    }
}

/// The context -> table map and the tables: the header of a payload
/// (shared with format v1, whose header is the same).
pub(crate) struct Model {
    /// For each context value, index into `tables` (0 = the shared table).
    pub map: [u16; 256],
    /// Contexts with a table of their own, increasing.
    own: Vec<u8>,
    pub tables: Vec<FreqTable>,
}

impl Model {
    /// Contexts seen at least `min_ctx_count` times get their own table; the
    /// rest pool into table 0.
    pub fn build(c: &Counts, min_ctx_count: usize) -> Model {
        let mut map = [0u16; 256];
        let mut own = Vec::new();
        let mut pooled = [0u32; 256];
        let mut tables = vec![FreqTable::empty()];
        for (ctx, counts, total) in c.iter() {
            if c.own(total, min_ctx_count) {
                own.push(ctx);
                map[ctx as usize] = tables.len() as u16;
                tables.push(FreqTable::from_counts(counts));
            } else {
                for s in 0..256 {
                    pooled[s] += counts[s];
                }
            }
        }
        tables[0] = FreqTable::from_counts(&pooled);
        Model { map, own, tables }
    }

    /// `varint n`, `varint own`, the own context bytes, the tables.
    pub fn write(&self, n: usize, out: &mut Vec<u8>) {
        put_varint(out, n as u64);
        put_varint(out, self.own.len() as u64);
        out.extend_from_slice(&self.own);
        for t in &self.tables {
            t.write(out);
        }
    }

    /// Parse a header written by [`Model::write`] for `n_expected` symbols.
    pub fn read(
        r: &mut ByteReader<'_>,
        n_expected: usize,
        contextual: bool,
    ) -> Result<Model, DecodeError> {
        let n = r.varint()?;
        if n != n_expected as u64 {
            return Err(DecodeError::corrupt("rans: symbol count does not match"));
        }
        let n_own = r.varint()? as usize;
        if n_own > 256 || (!contextual && n_own > 0) {
            return Err(DecodeError::corrupt("rans: bad context count"));
        }
        let own = r.bytes(n_own)?.to_vec();
        if own.windows(2).any(|w| w[0] >= w[1]) {
            return Err(DecodeError::corrupt("rans: contexts not increasing"));
        }
        let mut map = [0u16; 256];
        for (k, &c) in own.iter().enumerate() {
            map[c as usize] = (k + 1) as u16;
        }
        let tables = (0..=n_own)
            .map(|_| FreqTable::read(r))
            .collect::<Result<_, _>>()?;
        Ok(Model { map, own, tables })
    }

    /// Decoder lookup tables, one per table of the model.
    pub fn packed(&self) -> Packed {
        let mut out = Vec::with_capacity(self.tables.len() * PROB_SCALE as usize);
        for t in &self.tables {
            pack_table(t, &mut out);
        }
        Packed(out)
    }
}

/// Count `syms` under `ctx` (order-1 contexts over [`LANES`] segments).
pub(crate) fn count(syms: &[u8], ctx: &Context<'_>) -> Counts {
    count_n::<LANES>(syms, ctx)
}

/// [`count`] without contexts of symbols that are all 0 or 1 (a sign
/// field): their sum, which vectorizes, instead of a histogram's
/// increments (sign fields are many and long).
pub(crate) fn count_bits(syms: &[u8]) -> Counts {
    debug_assert!(syms.iter().all(|&s| s <= 1), "symbols other than 0 and 1");
    let ones: usize = syms
        .chunks(1 << 16)
        .map(|c| c.iter().map(|&b| b as u32).sum::<u32>() as usize)
        .sum();
    let mut row = [0u32; 256];
    row[0] = (syms.len() - ones) as u32;
    row[1] = ones as u32;
    Counts {
        rows: vec![row],
        ctxs: vec![0],
        totals: vec![syms.len()],
        contextual: false,
    }
}

/// The row of each context value that occurs (`seen`), rows in increasing
/// order of value, and the values by row.
fn context_rows(seen: &[bool; 256]) -> ([u16; 256], Vec<u8>) {
    let mut row = [0u16; 256];
    let mut ctxs = Vec::new();
    for c in 0..256 {
        if seen[c] {
            row[c] = ctxs.len() as u16;
            ctxs.push(c as u8);
        }
    }
    (row, ctxs)
}

/// [`count`] with order-1 contexts over `N` segments.
pub(crate) fn count_n<const N: usize>(syms: &[u8], ctx: &Context<'_>) -> Counts {
    count_n_known::<N>(syms, ctx, None)
}

/// [`count_n`], given the symbols' order-0 counts when the caller has them
/// (`order0`): under order 1 the symbols that occur are the contexts that
/// may, so they need no pass of their own over the stream.
pub(crate) fn count_n_known<const N: usize>(
    syms: &[u8],
    ctx: &Context<'_>,
    order0: Option<&[u32; 256]>,
) -> Counts {
    // The context values that may occur get a row each, in increasing order.
    let mut seen = [false; 256];
    match ctx {
        Context::None => seen[0] = true,
        Context::Sibling(sib) => sib.iter().for_each(|&c| seen[c as usize] = true),
        Context::Previous => {
            match order0 {
                Some(h) => seen.iter_mut().zip(h).for_each(|(s, &c)| *s = c > 0),
                None => syms.iter().for_each(|&c| seen[c as usize] = true),
            }
            seen[0] = true;
        }
    }
    let (row, ctxs) = context_rows(&seen);
    let mut counts = vec![[0u32; 256]; ctxs.len()];
    match ctx {
        Context::None => {
            // Four histograms break the store-to-load chain on runs.
            let mut h = [[0u32; 256]; 4];
            let mut chunks = syms.chunks_exact(4);
            for c in &mut chunks {
                h[0][c[0] as usize] += 1;
                h[1][c[1] as usize] += 1;
                h[2][c[2] as usize] += 1;
                h[3][c[3] as usize] += 1;
            }
            for &s in chunks.remainder() {
                h[0][s as usize] += 1;
            }
            for s in 0..256 {
                counts[0][s] = h[0][s] + h[1][s] + h[2][s] + h[3][s];
            }
        }
        Context::Sibling(sib) => {
            for (&s, &c) in syms.iter().zip(sib.iter()) {
                counts[row[c as usize] as usize][s as usize] += 1;
            }
        }
        Context::Previous => {
            for_each_previous::<N>(syms, |i, c| {
                counts[row[c as usize] as usize][syms[i] as usize] += 1
            });
        }
    }
    let totals = counts
        .iter()
        .map(|r| r.iter().map(|&x| x as usize).sum())
        .collect();
    Counts {
        rows: counts,
        ctxs,
        totals,
        contextual: !matches!(ctx, Context::None),
    }
}

/// Estimated size in bytes of [`encode`], from the counts (entropy plus
/// table cost), without encoding.
pub(crate) fn estimate_counted(c: &Counts, min_ctx_count: usize) -> f64 {
    estimate_with(c, min_ctx_count, true, 1.0)
}

/// [`estimate_counted`] with or without its margin (without, measured on
/// real fields, the coded size is within 0.1% of it; the margin makes it
/// 0.3% high), the stream's fixed bytes counted `overhead` times (see
/// [`super::LitOptions::overhead`]).
pub(crate) fn estimate_with(c: &Counts, min_ctx_count: usize, margin: bool, overhead: f64) -> f64 {
    let (bits, table_bytes) = estimate_parts(c, min_ctx_count);
    stream_bytes(bits, table_bytes * overhead, margin) - STREAM_FIXED * (1.0 - overhead)
}

/// Bytes of a stream besides its symbols and tables (4 states, header).
const STREAM_FIXED: f64 = 24.0;

/// Estimated bytes of a stream of `bits` of entropy with `table_bytes` of
/// tables (and 4 states): with `margin`, 0.3% high as
/// [`estimate_counted`], else unbiased.
pub(crate) fn stream_bytes(bits: f64, table_bytes: f64, margin: bool) -> f64 {
    bits / 8.0 * if margin { 1.003 } else { 1.0 } + table_bytes + STREAM_FIXED
}

/// (entropy bits, estimated table bytes) of the counts.
fn estimate_parts(c: &Counts, min_ctx_count: usize) -> (f64, f64) {
    // Every row's symbols lie in the range present in their sum: rows are
    // read only there (exponents use a few dozen of the 256 values).
    let mut all = [0u32; 256];
    for r in &c.rows {
        for (a, &b) in all.iter_mut().zip(r) {
            *a |= b;
        }
    }
    let lo = all.iter().position(|&x| x != 0).unwrap_or(0);
    let hi = all.iter().rposition(|&x| x != 0).map_or(lo, |h| h + 1);
    let mut pooled = [0u32; 256];
    let mut bits = 0.0;
    let mut table_bytes = 0.0;
    for (_, counts, total) in c.iter() {
        if total == 0 {
            continue;
        }
        let counts = &counts[lo..hi];
        if c.own(total, min_ctx_count) {
            bits += super::entropy_bits(counts);
            table_bytes += 1.0 + super::table::estimate_table_bytes(counts);
        } else {
            for (p, &x) in pooled[lo..hi].iter_mut().zip(counts) {
                *p += x;
            }
        }
    }
    bits += super::entropy_bits(&pooled[lo..hi]);
    table_bytes += super::table::estimate_table_bytes(&pooled);
    (bits, table_bytes)
}

mod decode;
mod encode;

#[cfg(test)]
pub(crate) use decode::decode;
pub(crate) use decode::{decode_n, lookup, read_payload};
pub(super) use encode::EncSym;
pub(crate) use encode::encode_counted;
#[cfg(test)]
pub(crate) use encode::{encode, encode_with_simd};

#[cfg(test)]
mod speed;
#[cfg(test)]
mod tests;
