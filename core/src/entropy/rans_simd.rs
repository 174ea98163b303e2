//! Vector decoding of the wide rANS streams ([`super::rans::WIDE`] states,
//! order 0 or conditional). The 32 states are two vectors of 16 lanes; a
//! step looks up 16 slots at once (a gather), updates the states, stores 16
//! symbols, and refills the lanes that fell below `L` with the next 16-bit
//! words of the stream, handed out in lane order (an expand). This is the
//! scalar decoder's exact order: lane `l` of group `g` reads its word after
//! lanes `0..l` of that group, so both decoders read the same stream.
//!
//! The vector code needs `unsafe` (intrinsics with raw pointers) and is
//! built only with the `unsafe-fast` feature, on x86-64 CPUs with AVX-512F
//! (checked at run time). Otherwise [`decode`] takes no groups and the
//! scalar decoder does all the work.

use super::rans::Model;

/// States of a stream this module decodes.
pub(super) const LANES: usize = 32;

/// Decode whole groups of [`LANES`] symbols into `out` (whose length is a
/// multiple of [`LANES`] or not: only whole groups are taken), starting
/// with states `x` and the stream `data` at byte `pos`, while at least 64
/// bytes of stream remain. `sib` is the conditioning stream (one byte per
/// symbol) of the conditional model, `None` for order 0. Returns the groups
/// decoded, with `x` and `pos` where the scalar decoder goes on.
#[allow(unused_variables)]
pub(super) fn decode(
    model: &Model,
    packed: &[Vec<u32>],
    x: &mut [u32; LANES],
    data: &[u8],
    pos: &mut usize,
    out: &mut [u8],
    sib: Option<&[u8]>,
) -> usize {
    #[cfg(all(feature = "unsafe-fast", target_arch = "x86_64"))]
    if std::arch::is_x86_feature_detected!("avx512f") {
        return x86::decode(model, packed, x, data, pos, out, sib);
    }
    0
}

#[cfg(all(feature = "unsafe-fast", target_arch = "x86_64"))]
#[allow(unsafe_code)]
mod x86 {
    use super::{LANES, Model};
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
        sib: Option<&[u8]>,
    ) -> usize {
        // Every table is PROB_SCALE entries: a slot (< PROB_SCALE) plus a
        // table's offset stays inside `flat`.
        debug_assert!(packed.iter().all(|t| t.len() == PROB_SCALE as usize));
        match sib {
            None => {
                let t = &packed[0];
                assert_eq!(t.len(), PROB_SCALE as usize);
                // SAFETY: the CPU has AVX-512F (checked by the caller); the
                // pointer arguments are checked inside as documented there.
                unsafe { run(t, None, x, data, pos, out) }
            }
            Some(s) => {
                let flat: Vec<u32> = packed.iter().flatten().copied().collect();
                assert_eq!(flat.len(), packed.len() * PROB_SCALE as usize);
                let offsets: [u32; 256] = std::array::from_fn(|c| model.map[c] as u32 * PROB_SCALE);
                assert!(offsets.iter().all(|&o| (o as usize) < flat.len()));
                assert!(s.len() >= out.len() / LANES * LANES);
                // SAFETY: as above.
                unsafe { run(&flat, Some((&offsets, s)), x, data, pos, out) }
            }
        }
    }

    /// The vector loop. Reads: `tables[offsets[c] + slot]` with
    /// `slot < PROB_SCALE` and every offset at most `tables.len() -
    /// PROB_SCALE` (checked by the caller), `sib[g*32..g*32+32]` and
    /// `out[g*32..g*32+32]` for `g < out.len() / 32` (checked by the
    /// caller for `sib`), and `data[p..p+64]` only while `p + 64 <=
    /// data.len()` (checked here).
    #[target_feature(enable = "avx512f")]
    unsafe fn run(
        tables: &[u32],
        ctx: Option<(&[u32; 256], &[u8])>,
        x: &mut [u32; LANES],
        data: &[u8],
        pos: &mut usize,
        out: &mut [u8],
    ) -> usize {
        let groups = out.len() / LANES;
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
        let mut p = *pos;
        let mut g = 0;
        while g < groups && p + 64 <= data.len() {
            for (h, xv) in xs.iter_mut().enumerate() {
                let o = g * LANES + 16 * h;
                let slot = _mm512_and_si512(*xv, mask);
                let idx = match ctx {
                    None => slot,
                    Some((offsets, sib)) => {
                        // SAFETY: o + 16 <= groups * 32 <= sib.len();
                        // contexts are bytes, so the gather reads
                        // offsets[0..256].
                        unsafe {
                            let c = _mm512_cvtepu8_epi32(_mm_loadu_si128(
                                sib.as_ptr().add(o) as *const __m128i
                            ));
                            let off =
                                _mm512_i32gather_epi32::<4>(c, offsets.as_ptr() as *const i32);
                            _mm512_add_epi32(off, slot)
                        }
                    }
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
                // SAFETY: o + 16 <= out.len(); the symbols are the low bytes.
                unsafe {
                    _mm_storeu_si128(
                        out.as_mut_ptr().add(o) as *mut __m128i,
                        _mm512_cvtepi32_epi8(e),
                    )
                };
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
