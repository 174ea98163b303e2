//! The encoder of [`super`]: symbols coded backwards into one stream.

use super::super::put_varint;
use super::super::table::{FreqTable, PROB_BITS, PROB_SCALE};
use super::{Context, Counts, Model, RANS_L, Simd, segments};
#[cfg(test)]
use super::{LANES, count};

/// Division-free encoder entry for one symbol. States reach 2^32 here (not
/// 2^31 as with byte renormalization), where ryg_rans' 32-bit reciprocal is
/// no longer exact; this uses the exact 33-bit one (Granlund-Montgomery):
/// `x / freq == (((x * m) >> 32) + x) >> shift` for every `x < 2^32`, with
/// `shift = ceil(log2 freq)` and `m = ceil(2^(32 + shift) / freq) - 2^32`.
#[derive(Clone, Copy, Default)]
#[repr(C)]
pub(in crate::entropy) struct EncSym {
    x_max: u32,
    pub(super) m: u32,
    // 16 bytes in all: a table entry is one aligned load away.
    start: u16,
    cmpl_freq: u16,
    pub(super) shift: u32,
}

impl EncSym {
    pub(super) fn new(start: u32, freq: u32) -> EncSym {
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
    pub(in crate::entropy) fn packed(&self) -> u64 {
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
    pub(super) fn quotient(&self, x: u32) -> u32 {
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
    // Encode backwards (the reverse of the decoder's order): each symbol
    // emits at most one u16, written from the end of `buf` down.
    let coder = Coder {
        enc: model.tables.iter().map(enc_table).collect(),
        map: &model.map,
        ctxs: &counts.ctxs,
        simd,
    };
    // One slot more than symbols: the speculative store of the symbol
    // that would emit the (n+1)-th word has somewhere to go.
    let mut sink = Sink::new(n + 1);
    let mut x = [RANS_L; N];
    match ctx {
        Context::None | Context::Sibling(_) => coder.put_by_index(syms, ctx, &mut x, &mut sink),
        Context::Previous => coder.put_previous(syms, &mut x, &mut sink),
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

/// What encoding a stream's symbols needs: the encoder tables, the table
/// of each context value, the context values present, and the vector
/// encoder asked for.
struct Coder<'a> {
    enc: Vec<[EncSym; 256]>,
    map: &'a [u16; 256],
    ctxs: &'a [u8],
    simd: Simd,
}

impl Coder<'_> {
    /// Order 0 or conditional: symbol `i` on state `i % N`, under the one
    /// table or the sibling's word at `i`; left-over symbols first, then
    /// the whole rounds (through the vector encoder when it runs).
    fn put_by_index<const N: usize>(
        &self,
        syms: &[u8],
        ctx: Context<'_>,
        x: &mut [u32; N],
        sink: &mut Sink,
    ) {
        let (enc, map) = (&self.enc, self.map);
        let n = syms.len();
        let q = n / N;
        let e = |i: usize| -> &[EncSym; 256] {
            match ctx {
                Context::Sibling(sib) => &enc[map[sib[i] as usize] as usize],
                _ => &enc[0],
            }
        };
        for i in (N * q..n).rev() {
            x[i % N] = e(i)[syms[i] as usize].put(x[i % N], sink);
        }
        let vector = N == super::super::rans_simd::LANES && {
            let sib = match ctx {
                Context::Sibling(s) => Some(s),
                _ => None,
            };
            let tables: [u32; 256] = std::array::from_fn(|c| match sib {
                Some(_) => map[c] as u32,
                None => 0,
            });
            sink.vector_rounds(self.simd, enc, &tables, x, syms, sib, self.ctxs, q)
        };
        if !vector {
            for j in (0..q).rev() {
                for l in (0..N).rev() {
                    let i = N * j + l;
                    x[l] = e(i)[syms[i] as usize].put(x[l], sink);
                }
            }
        }
    }

    /// Order 1, in the reverse of the decoder's order: for j in 0..q, word
    /// j of segments 0..N; then the left-over words of the last segment.
    fn put_previous<const N: usize>(&self, syms: &[u8], x: &mut [u32; N], sink: &mut Sink) {
        let (enc, map) = (&self.enc, self.map);
        let n = syms.len();
        let q = n / N;
        let starts = segments::<N>(n).map(|(start, _)| start);
        // Under order 1 a segment's first word has context 0.
        let put = |i: usize, first: bool, st: u32, sink: &mut Sink| {
            let c = if first { 0 } else { syms[i - 1] };
            enc[map[c as usize] as usize][syms[i] as usize].put(st, sink)
        };
        for i in (starts[N - 1] + q..n).rev() {
            x[N - 1] = put(i, i == starts[N - 1], x[N - 1], sink);
        }
        // The whole rounds are a conditional stream in round order: word
        // j of every segment, each under the word before it (0 at a
        // segment's start), so the vector encoder codes them.
        let vector = N == super::super::rans_simd::LANES
            && q > 0
            && super::super::rans_simd::can_encode(self.simd)
            && {
                let rounds = gather_rounds::<N>(syms, &starts, q);
                let (round_ctx, round_syms) = (&rounds[..N * q], &rounds[N..]);
                let tables: [u32; 256] = std::array::from_fn(|c| map[c] as u32);
                sink.vector_rounds(
                    self.simd,
                    enc,
                    &tables,
                    x,
                    round_syms,
                    Some(round_ctx),
                    self.ctxs,
                    q,
                )
            };
        if !vector {
            for j in (0..q).rev() {
                for l in (0..N).rev() {
                    x[l] = put(starts[l] + j, j == 0, x[l], sink);
                }
            }
        }
    }
}

/// Rounds of order-1 symbols gathered at a time, a tile that stays in the
/// L1 cache while the segments' words are dealt into it.
const GATHER_TILE_ROUNDS: usize = 64;

/// The `q` whole rounds of an order-1 stream in round order (word j of
/// every segment), round j at `N * (j + 1)` after a round of zeros: the
/// contexts of round j are then round j - 1.
fn gather_rounds<const N: usize>(syms: &[u8], starts: &[usize; N], q: usize) -> Vec<u8> {
    let mut rounds = vec![0u8; N * (q + 1)];
    for j0 in (0..q).step_by(GATHER_TILE_ROUNDS) {
        let j1 = (j0 + GATHER_TILE_ROUNDS).min(q);
        let tile = &mut rounds[N * (j0 + 1)..N * (j1 + 1)];
        for (l, &start) in starts.iter().enumerate() {
            let seg = &syms[start + j0..start + j1];
            for (r, &s) in tile.chunks_exact_mut(N).zip(seg) {
                r[l] = s;
            }
        }
    }
    rounds
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
        let Ok(x) = <&mut [u32; super::super::rans_simd::LANES]>::try_from(x) else {
            return false;
        };
        super::super::rans_simd::encode(
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
