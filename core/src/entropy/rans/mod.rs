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
use super::table::{FreqTable, PROB_BITS, PROB_SCALE};
use super::{ByteReader, Word, put_varint};
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

/// Division-free encoder entry for one symbol. States reach 2^32 here (not
/// 2^31 as with byte renormalization), where ryg_rans' 32-bit reciprocal is
/// no longer exact; this uses the exact 33-bit one (Granlund-Montgomery):
/// `x / freq == (((x * m) >> 32) + x) >> shift` for every `x < 2^32`, with
/// `shift = ceil(log2 freq)` and `m = ceil(2^(32 + shift) / freq) - 2^32`.
#[derive(Clone, Copy, Default)]
#[repr(C)]
pub(super) struct EncSym {
    x_max: u32,
    m: u32,
    // 16 bytes in all: a table entry is one aligned load away.
    start: u16,
    cmpl_freq: u16,
    shift: u32,
}

impl EncSym {
    fn new(start: u32, freq: u32) -> EncSym {
        debug_assert!((1..=PROB_SCALE).contains(&freq));
        // Largest state that stays below 2^32 after coding the symbol.
        let x_max = ((RANS_L >> PROB_BITS) << 16).wrapping_mul(freq);
        let x_max = if freq == PROB_SCALE { u32::MAX } else { x_max };
        let shift = 32 - (freq - 1).leading_zeros();
        let m = ((1u64 << (32 + shift)).div_ceil(freq as u64) - (1u64 << 32)) as u32;
        EncSym {
            x_max,
            m,
            shift,
            start: start as u16,
            cmpl_freq: (PROB_SCALE - freq) as u16,
        }
    }

    #[inline(always)]
    fn put(&self, x: u32, out: &mut Sink) -> u32 {
        // Branch-free renormalization: the low half is always stored below
        // the words written so far and kept only when `x` must shrink (the
        // branch would be mispredicted on every sixth symbol or so).
        let shrink = x >= self.x_max;
        out.buf[out.p - 1] = x as u16;
        out.p -= shrink as usize;
        let x = if shrink { x >> 16 } else { x };
        let q = self.quotient(x);
        x.wrapping_add(self.start as u32)
            .wrapping_add(q.wrapping_mul(self.cmpl_freq as u32))
    }

    /// The entry in 8 bytes for the vector encoder: `m` in the low half,
    /// `start | cmpl_freq << 12 | shift << 24` in the high (start and
    /// cmpl_freq are below 2^12, shift at most 12); x_max is
    /// `(PROB_SCALE - cmpl_freq) << 20`, or all ones when cmpl_freq is 0.
    #[cfg_attr(
        not(all(feature = "unsafe-fast", target_arch = "x86_64")),
        allow(dead_code)
    )]
    pub(super) fn packed(&self) -> u64 {
        debug_assert!(self.start < 1 << 12 && self.cmpl_freq < 1 << 12 && self.shift <= 12);
        // (Entries of absent symbols are all zero and never read.)
        debug_assert!(
            self.x_max == 0
                || self.x_max
                    == match PROB_SCALE - self.cmpl_freq as u32 {
                        PROB_SCALE => u32::MAX,
                        f => f << 20,
                    }
        );
        let high = self.start as u32 | (self.cmpl_freq as u32) << 12 | self.shift << 24;
        self.m as u64 | (high as u64) << 32
    }

    /// `x / freq`, exact for every `x < 2^32`.
    #[inline(always)]
    fn quotient(&self, x: u32) -> u32 {
        ((((x as u64 * self.m as u64) >> 32) + x as u64) >> self.shift) as u32
    }
}

fn enc_table(t: &FreqTable) -> [EncSym; 256] {
    let mut e = [EncSym::default(); 256];
    for s in 0..256 {
        if t.freq[s] != 0 {
            e[s] = EncSym::new(t.cum[s] as u32, t.freq[s] as u32);
        }
    }
    e
}

/// Decoder lookup table: for each slot, `sym | (freq-1) << 8 | start << 20`,
/// filled one symbol's run of slots at a time. An empty table (used by no
/// context of a valid payload) reads symbol 0 with frequency 1 everywhere:
/// whatever a corrupt payload decodes with it, the region checksum rejects.
fn pack_table(t: &FreqTable) -> Vec<u32> {
    let mut out = vec![0u32; PROB_SCALE as usize];
    for s in 0..256 {
        let f = t.freq[s] as u32;
        if f == 0 {
            continue;
        }
        let start = t.cum[s] as u32;
        let e = s as u32 | (f - 1) << 8 | (start & 0xFFF) << 20;
        out[start as usize..(start + f) as usize].fill(e);
    }
    out
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

    /// Decoder lookup tables, one per context value.
    pub fn packed(&self) -> Vec<Vec<u32>> {
        self.tables.iter().map(pack_table).collect()
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

/// Encode byte symbols with contexts. `min_ctx_count` is the count below
/// which a context shares the fallback table (ignored for `None`).
#[cfg(test)]
pub(crate) fn encode(syms: &[u8], ctx: Context<'_>, min_ctx_count: usize) -> Vec<u8> {
    encode_counted::<LANES>(syms, ctx, &count(syms, &ctx), min_ctx_count)
}

/// [`encode`] with `N` states (and `N` order-1 segments) and the counts of
/// `syms` under `ctx` (taken by [`count_n`] with the same `N`).
pub(crate) fn encode_counted<const N: usize>(
    syms: &[u8],
    ctx: Context<'_>,
    counts: &Counts,
    min_ctx_count: usize,
) -> Vec<u8> {
    encode_with_simd::<N>(syms, ctx, counts, min_ctx_count, Simd::Best)
}

/// [`encode_counted`], with `simd` choosing the vector encoder for the
/// whole rounds of a wide order-0 or conditional stream (the bytes are the
/// same whichever runs).
pub(crate) fn encode_with_simd<const N: usize>(
    syms: &[u8],
    ctx: Context<'_>,
    counts: &Counts,
    min_ctx_count: usize,
    simd: Simd,
) -> Vec<u8> {
    let n = syms.len();
    if let Context::Sibling(s) = ctx {
        assert_eq!(s.len(), n, "sibling length");
    }
    let model = Model::build(counts, min_ctx_count);
    let mut out = Vec::with_capacity(n / 2 + 64);
    model.write(n, &mut out);
    if n == 0 {
        return out;
    }
    let (map, tables) = (&model.map, &model.tables);
    // Encode backwards (the reverse of the decoder's order): each symbol
    // emits at most one u16, written from the end of `buf` down.
    let enc: Vec<[EncSym; 256]> = tables.iter().map(enc_table).collect();
    // One slot more than symbols: the speculative store of the symbol
    // that would emit the (n+1)-th word has somewhere to go.
    let mut sink = Sink::new(n + 1);
    let mut x = [RANS_L; N];
    let q = n / N;
    match ctx {
        Context::None | Context::Sibling(_) => {
            let e = |i: usize| -> &[EncSym; 256] {
                match ctx {
                    Context::Sibling(sib) => &enc[map[sib[i] as usize] as usize],
                    _ => &enc[0],
                }
            };
            for i in (N * q..n).rev() {
                x[i % N] = e(i)[syms[i] as usize].put(x[i % N], &mut sink);
            }
            let vector = N == super::rans_simd::LANES && {
                let sib = match ctx {
                    Context::Sibling(s) => Some(s),
                    _ => None,
                };
                let tables: [u32; 256] = std::array::from_fn(|c| match sib {
                    Some(_) => map[c] as u32,
                    None => 0,
                });
                sink.vector_rounds(simd, &enc, &tables, &mut x, syms, sib, &counts.ctxs, q)
            };
            if !vector {
                for j in (0..q).rev() {
                    for l in (0..N).rev() {
                        let i = N * j + l;
                        x[l] = e(i)[syms[i] as usize].put(x[l], &mut sink);
                    }
                }
            }
        }
        Context::Previous => {
            // Decoder order: for j in 0..q, word j of segments 0..LANES; then
            // the left-over words of the last segment.
            let starts = segments::<N>(n).map(|(start, _)| start);
            // Under order 1 a segment's first word has context 0.
            let put = |i: usize, first: bool, st: u32, sink: &mut Sink| {
                let c = if first { 0 } else { syms[i - 1] };
                enc[map[c as usize] as usize][syms[i] as usize].put(st, sink)
            };
            for i in (starts[N - 1] + q..n).rev() {
                x[N - 1] = put(i, i == starts[N - 1], x[N - 1], &mut sink);
            }
            // The whole rounds are a conditional stream in round order: word
            // j of every segment, each under the word before it (0 at a
            // segment's start), so the vector encoder codes them.
            let vector =
                N == super::rans_simd::LANES && q > 0 && super::rans_simd::can_encode(simd) && {
                    // Round j at N * (j + 1), after a round of zeros: the
                    // contexts of round j are then round j - 1.
                    // (In tiles of 64 rounds, which stay in the L1 cache.)
                    let mut rounds = vec![0u8; N * (q + 1)];
                    for j0 in (0..q).step_by(64) {
                        let j1 = (j0 + 64).min(q);
                        let tile = &mut rounds[N * (j0 + 1)..N * (j1 + 1)];
                        for (l, &start) in starts.iter().enumerate() {
                            let seg = &syms[start + j0..start + j1];
                            for (r, &s) in tile.chunks_exact_mut(N).zip(seg) {
                                r[l] = s;
                            }
                        }
                    }
                    let (round_ctx, round_syms) = (&rounds[..N * q], &rounds[N..]);
                    let tables: [u32; 256] = std::array::from_fn(|c| map[c] as u32);
                    sink.vector_rounds(
                        simd,
                        &enc,
                        &tables,
                        &mut x,
                        round_syms,
                        Some(round_ctx),
                        &counts.ctxs,
                        q,
                    )
                };
            if !vector {
                for j in (0..q).rev() {
                    for l in (0..N).rev() {
                        x[l] = put(starts[l] + j, j == 0, x[l], &mut sink);
                    }
                }
            }
        }
    }
    let words = &sink.buf[sink.p..];
    put_varint(&mut out, (4 * N + 2 * words.len()) as u64);
    for st in x {
        out.extend_from_slice(&st.to_be_bytes());
    }
    let at = out.len();
    out.resize(at + 2 * words.len(), 0);
    for (o, w) in out[at..].chunks_exact_mut(2).zip(words) {
        o.copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// Where the encoder writes its renormalization words, back to front.
struct Sink {
    buf: Vec<u16>,
    p: usize,
}

/// Slots (of the buffer's capacity) up to which a thread keeps its
/// [`Sink`]'s buffer for the next stream (8 MiB): a fresh one would be
/// zeroed and faulted in for every stream, two bytes a symbol.
const KEEP_SINK: usize = 1 << 22;

thread_local! {
    static SINK_BUF: std::cell::RefCell<Vec<u16>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Sink {
    /// A sink of `slots` words, empty (`p` at the end). Every slot at or
    /// above `p` is written before it is read, so a kept buffer's old words
    /// need no zeroing.
    fn new(slots: usize) -> Sink {
        let mut buf = if slots <= KEEP_SINK {
            SINK_BUF
                .try_with(|b| std::mem::take(&mut *b.borrow_mut()))
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        buf.resize(slots, 0);
        Sink { buf, p: slots }
    }
    /// Rounds `rounds - 1` down to 0 of `syms` (symbol `32 * j + l` on
    /// state `l`, under `tables[sib[i]]`, `present` the context values
    /// that may occur in `sib`) through the vector encoder, if there are 32
    /// states and `simd` and the CPU allow it; whether it ran.
    #[allow(clippy::too_many_arguments)]
    fn vector_rounds(
        &mut self,
        simd: Simd,
        enc: &[[EncSym; 256]],
        tables: &[u32; 256],
        x: &mut [u32],
        syms: &[u8],
        sib: Option<&[u8]>,
        present: &[u8],
        rounds: usize,
    ) -> bool {
        let Ok(x) = <&mut [u32; super::rans_simd::LANES]>::try_from(x) else {
            return false;
        };
        super::rans_simd::encode(
            simd,
            enc,
            tables,
            x,
            syms,
            sib,
            present,
            rounds,
            &mut self.buf,
            &mut self.p,
        )
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        if self.buf.capacity() <= KEEP_SINK {
            let buf = std::mem::take(&mut self.buf);
            let _ = SINK_BUF.try_with(|b| {
                let mut b = b.borrow_mut();
                if b.capacity() < buf.capacity() {
                    *b = buf;
                }
            });
        }
    }
}

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
        .map(|c| &packed[model.map[c] as usize][..])
        .collect();
    let q = n / N;
    // Rounds of N symbols the vector decoder took.
    let mut done = 0;
    if N == super::rans_simd::LANES {
        let sib = sibling.map(W::as_bytes);
        if let (Some(o), Some(x)) = (W::as_bytes_mut(o), (&mut x[..]).try_into().ok())
            && sib.is_none_or(|s| s.is_some())
        {
            let ctx = match sib.flatten() {
                Some(s) => super::rans_simd::Ctx::Sibling(s),
                None if previous => super::rans_simd::Ctx::Previous,
                None => super::rans_simd::Ctx::None,
            };
            done = super::rans_simd::decode(simd, model, &packed, x, data, &mut pos, o, ctx);
        }
    }
    if sibling.is_none() && !previous {
        let t = &packed[0][..];
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
            // Four segments write side by side without cache trouble (the
            // stage below costs this case 9%).
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

#[cfg(test)]
mod speed;
#[cfg(test)]
mod tests;
