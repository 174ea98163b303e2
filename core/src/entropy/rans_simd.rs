//! Vector decoding of the wide rANS streams ([`super::rans::WIDE`] states).
//! The 32 states are two vectors of 16 lanes; a step looks up 16 slots at
//! once (a gather; the table is chosen per lane by the context), updates
//! the states, stores 16 symbols, and refills the lanes that fell below `L`
//! with the next 16-bit words of the stream, handed out in lane order (an
//! expand). This is the scalar decoder's exact order: lane `l` of round `j`
//! reads its word after lanes `0..l` of that round, so both decoders read
//! the same stream. Order 0 and conditional streams store a round's 32
//! symbols side by side; order 1 stores rounds in a stage and then each
//! lane's run of symbols in its own segment, at `l * q + j..`.
//!
//! The vector code needs `unsafe` (intrinsics with raw pointers) and is
//! built only with the `unsafe-fast` feature, on x86-64 CPUs with AVX-512F
//! (checked at run time). Otherwise [`decode`] takes no groups and the
//! scalar decoder does all the work.

use super::rans::Model;

/// States of a stream this module decodes.
pub(super) const LANES: usize = 32;

/// How a symbol's table is chosen.
#[derive(Clone, Copy)]
pub(super) enum Ctx<'a> {
    /// One table.
    None,
    /// By the conditioning stream's byte at the same index.
    Sibling(&'a [u8]),
    /// By the previous symbol of the same segment (order 1).
    Previous,
}

/// Decode whole rounds of [`LANES`] symbols (one per state) into `out`,
/// all `n = out.len()` symbols, starting with states `x` and the stream
/// `data` at byte `pos`, while at least 64 bytes of stream remain. Returns
/// the rounds decoded, with `x` and `pos` where the scalar decoder goes on:
/// symbols `..rounds * 32` for order 0 and conditional; for order 1 the
/// first `rounds` symbols of every segment.
#[allow(unused_variables)]
pub(super) fn decode(
    model: &Model,
    packed: &[Vec<u32>],
    x: &mut [u32; LANES],
    data: &[u8],
    pos: &mut usize,
    out: &mut [u8],
    ctx: Ctx<'_>,
) -> usize {
    #[cfg(all(feature = "unsafe-fast", target_arch = "x86_64"))]
    if std::arch::is_x86_feature_detected!("avx512f") {
        return x86::decode(model, packed, x, data, pos, out, ctx);
    }
    0
}

#[cfg(all(feature = "unsafe-fast", target_arch = "x86_64"))]
#[allow(unsafe_code)]
mod x86 {
    use super::{Ctx, LANES, Model};
    use crate::entropy::rans::STAGE_ROUNDS;
    use crate::entropy::table::{PROB_BITS, PROB_SCALE};
    use std::arch::x86_64::*;

    /// Lower bound of a normalized state (as in the scalar decoder).
    const RANS_L: i32 = 1 << 16;

    pub(super) fn decode(
        model: &Model,
        packed: &[Vec<u32>],
        x: &mut [u32; LANES],
        data: &[u8],
        pos: &mut usize,
        out: &mut [u8],
        ctx: Ctx<'_>,
    ) -> usize {
        let q = out.len() / LANES;
        if let Ctx::None = ctx {
            let t = &packed[0];
            assert_eq!(t.len(), PROB_SCALE as usize);
            // SAFETY: the CPU has AVX-512F (checked by the caller); the
            // arguments meet `run`'s conditions (one table, offset 0).
            return unsafe { run(t, &[0; 256], ctx, q, x, data, pos, out) };
        }
        // Every table is PROB_SCALE entries: a slot (< PROB_SCALE) plus a
        // table's offset stays inside `flat`.
        let flat: Vec<u32> = packed.iter().flatten().copied().collect();
        assert_eq!(flat.len(), packed.len() * PROB_SCALE as usize);
        let offsets: [u32; 256] = std::array::from_fn(|c| model.map[c] as u32 * PROB_SCALE);
        assert!(
            offsets
                .iter()
                .all(|&o| o as usize + PROB_SCALE as usize <= flat.len())
        );
        if let Ctx::Sibling(s) = ctx {
            assert!(s.len() >= q * LANES);
        }
        // SAFETY: as above.
        unsafe { run(&flat, &offsets, ctx, q, x, data, pos, out) }
    }

    /// The vector loop, for at most `rounds` rounds. Its memory accesses,
    /// which the caller keeps in bounds: `tables[offsets[c] + slot]` (`c` a
    /// byte, `slot < PROB_SCALE`, each offset at most `tables.len() -
    /// PROB_SCALE`); order 0 and conditional: `sib` and `out` at
    /// `j*32..j*32+32` for `j < rounds <= out.len() / 32` (order 1 writes
    /// with bounds-checked indexing); and `data[p..p+64]` only while
    /// `p + 64 <= data.len()` (checked here).
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    unsafe fn run(
        tables: &[u32],
        offsets: &[u32; 256],
        ctx: Ctx<'_>,
        rounds: usize,
        x: &mut [u32; LANES],
        data: &[u8],
        pos: &mut usize,
        out: &mut [u8],
    ) -> usize {
        let q = out.len() / LANES;
        let mask = _mm512_set1_epi32(PROB_SCALE as i32 - 1);
        let one = _mm512_set1_epi32(1);
        let low = _mm512_set1_epi32(RANS_L);
        let tp = tables.as_ptr() as *const i32;
        // SAFETY: `x` is 32 u32s: two unaligned 64-byte loads.
        let mut xs = unsafe {
            [
                _mm512_loadu_si512(x.as_ptr() as *const __m512i),
                _mm512_loadu_si512(x.as_ptr().add(16) as *const __m512i),
            ]
        };
        let op = offsets.as_ptr() as *const i32;
        // Order 1: each lane's previous symbol, and where its segment's
        // next symbol goes (lane l of half h: segment 16h + l).
        let mut prev = [_mm512_setzero_si512(); 2];
        let mut stage = [0u8; STAGE_ROUNDS * LANES];
        // Each lane's run of `r` symbols from round `j`, to its segment.
        let flush = |stage: &[u8], out: &mut [u8], j: usize, r: usize| {
            for l in 0..LANES {
                for (k, b) in out[l * q + j..l * q + j + r].iter_mut().enumerate() {
                    *b = stage[k * LANES + l];
                }
            }
        };
        let mut p = *pos;
        let mut g = 0;
        while g < rounds && p + 64 <= data.len() {
            for (h, xv) in xs.iter_mut().enumerate() {
                let o = g * LANES + 16 * h;
                let slot = _mm512_and_si512(*xv, mask);
                let idx = match ctx {
                    Ctx::None => slot,
                    Ctx::Sibling(sib) => {
                        // SAFETY: o + 16 <= rounds * 32 <= sib.len();
                        // contexts are bytes, so the gather reads
                        // offsets[0..256].
                        unsafe {
                            let c = _mm512_cvtepu8_epi32(_mm_loadu_si128(
                                sib.as_ptr().add(o) as *const __m128i
                            ));
                            _mm512_add_epi32(_mm512_i32gather_epi32::<4>(c, op), slot)
                        }
                    }
                    // SAFETY: previous symbols are bytes (offsets[0..256]).
                    Ctx::Previous => unsafe {
                        _mm512_add_epi32(_mm512_i32gather_epi32::<4>(prev[h], op), slot)
                    },
                };
                // SAFETY: idx = offset + slot < tables.len() (see above).
                let e = unsafe { _mm512_i32gather_epi32::<4>(idx, tp) };
                let freq = _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32::<8>(e), mask), one);
                let start = _mm512_srli_epi32::<20>(e);
                let nx = _mm512_sub_epi32(
                    _mm512_add_epi32(
                        _mm512_mullo_epi32(freq, _mm512_srli_epi32::<PROB_BITS>(*xv)),
                        slot,
                    ),
                    start,
                );
                match ctx {
                    Ctx::Previous => {
                        prev[h] = _mm512_and_si512(e, _mm512_set1_epi32(0xFF));
                        let at = (g % STAGE_ROUNDS) * LANES + 16 * h;
                        // SAFETY: at + 16 <= stage.len().
                        unsafe {
                            _mm_storeu_si128(
                                stage.as_mut_ptr().add(at) as *mut __m128i,
                                _mm512_cvtepi32_epi8(e),
                            )
                        };
                    }
                    // SAFETY: o + 16 <= rounds * 32 <= out.len(); the
                    // symbols are the low bytes.
                    _ => unsafe {
                        _mm_storeu_si128(
                            out.as_mut_ptr().add(o) as *mut __m128i,
                            _mm512_cvtepi32_epi8(e),
                        )
                    },
                }
                let refill = _mm512_cmplt_epu32_mask(nx, low);
                // SAFETY: p + 32 <= data.len(): the loop checks p + 64
                // before the first half, which reads at most 32 bytes.
                let words = unsafe {
                    _mm512_cvtepu16_epi32(
                        _mm256_loadu_si256(data.as_ptr().add(p) as *const __m256i),
                    )
                };
                let words = _mm512_maskz_expand_epi32(refill, words);
                *xv = _mm512_mask_or_epi32(nx, refill, _mm512_slli_epi32::<16>(nx), words);
                p += 2 * refill.count_ones() as usize;
            }
            g += 1;
            if matches!(ctx, Ctx::Previous) && g % STAGE_ROUNDS == 0 {
                flush(&stage, out, g - STAGE_ROUNDS, STAGE_ROUNDS);
            }
        }
        if matches!(ctx, Ctx::Previous) && g % STAGE_ROUNDS != 0 {
            flush(&stage, out, g - g % STAGE_ROUNDS, g % STAGE_ROUNDS);
        }
        // SAFETY: as the loads.
        unsafe {
            _mm512_storeu_si512(x.as_mut_ptr() as *mut __m512i, xs[0]);
            _mm512_storeu_si512(x.as_mut_ptr().add(16) as *mut __m512i, xs[1]);
        }
        *pos = p;
        g
    }
}
