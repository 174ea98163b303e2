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
//! or, at half the width, AVX2 (four vectors of 8 lanes; the refill words
//! are placed by a permutation looked up from the refill mask), checked at
//! run time. Otherwise [`decode`] takes no rounds and the scalar decoder
//! does all the work.

// One file past 800 lines: the AVX-512 and AVX2 kernels share `x86`'s helpers and SAFETY rules.

use super::rans::{EncSym, Model, Packed};

const _: () = assert!(std::mem::size_of::<EncSym>() == 16);

/// States of a stream this module decodes.
pub(super) const LANES: usize = 32;

/// Which decoder takes the whole rounds of a wide stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Simd {
    /// The scalar decoder alone.
    Off,
    /// The widest vector decoder this CPU (and build) has.
    Best,
    /// The AVX2 decoder, when the CPU has AVX2 (tests use it to check that
    /// path on CPUs that have AVX-512 too).
    #[allow(dead_code)]
    Avx2,
}

/// How a symbol's table is chosen.
#[derive(Clone, Copy)]
#[cfg_attr(
    not(all(feature = "unsafe-fast", target_arch = "x86_64")),
    allow(dead_code)
)]
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
#[allow(unused_variables, clippy::too_many_arguments)]
pub(super) fn decode(
    simd: Simd,
    model: &Model,
    packed: &Packed,
    x: &mut [u32; LANES],
    data: &[u8],
    pos: &mut usize,
    out: &mut [u8],
    ctx: Ctx<'_>,
) -> usize {
    #[cfg(all(feature = "unsafe-fast", target_arch = "x86_64"))]
    {
        let avx512 = simd == Simd::Best && std::arch::is_x86_feature_detected!("avx512f");
        if avx512 || (simd != Simd::Off && std::arch::is_x86_feature_detected!("avx2")) {
            return x86::decode(avx512, model, packed, x, data, pos, out, ctx);
        }
    }
    0
}

/// Encode rounds `rounds - 1` down to 0 of a wide order-0 or conditional
/// stream (symbol `32 * j + l` on state `l`) with the vector encoder, if
/// `simd` allows one and the CPU has it ([`can_encode`]); returns whether it
/// did. `enc` are the encoder tables, `tables[c]` the table of context byte
/// `c` (of the conditioning stream `sib`; all 0 without one); renormalization
/// words go to `buf` below `p`, as the scalar encoder writes them.
/// `present` are the context values that may occur in `sib` (any superset
/// of them, in increasing order: the counts' contexts), which choose how
/// the tables are looked up, not what is written.
#[allow(unused_variables, clippy::too_many_arguments)]
pub(super) fn encode(
    simd: Simd,
    enc: &[[EncSym; 256]],
    tables: &[u32; 256],
    x: &mut [u32; LANES],
    syms: &[u8],
    sib: Option<&[u8]>,
    present: &[u8],
    rounds: usize,
    buf: &mut [u16],
    p: &mut usize,
) -> bool {
    #[cfg(all(feature = "unsafe-fast", target_arch = "x86_64"))]
    if can_encode(simd) {
        let avx512 = avx512_encode(simd);
        x86::encode(avx512, enc, tables, x, syms, sib, present, rounds, buf, p);
        return true;
    }
    false
}

/// Whether [`encode`] has a vector encoder for `simd` on this CPU: AVX-512
/// (F, BW, VL) for [`Simd::Best`], else AVX2.
pub(super) fn can_encode(simd: Simd) -> bool {
    #[cfg(all(feature = "unsafe-fast", target_arch = "x86_64"))]
    if avx512_encode(simd) || (simd != Simd::Off && std::arch::is_x86_feature_detected!("avx2")) {
        return true;
    }
    let _ = simd;
    false
}

/// Whether [`encode`] takes the AVX-512 encoder for `simd` on this CPU.
#[cfg(all(feature = "unsafe-fast", target_arch = "x86_64"))]
fn avx512_encode(simd: Simd) -> bool {
    simd == Simd::Best
        && std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vl")
}

#[cfg(all(feature = "unsafe-fast", target_arch = "x86_64"))]
#[allow(unsafe_code)]
mod x86 {
    use super::{Ctx, LANES, Model, Packed};
    use crate::entropy::rans::STAGE_ROUNDS;
    use crate::entropy::table::{PROB_BITS, PROB_SCALE};
    use std::arch::x86_64::*;

    /// Lower bound of a normalized state (as in the scalar decoder).
    const RANS_L: i32 = 1 << 16;

    /// With `avx512` the AVX-512F loop, else the AVX2 one (the CPU must have
    /// it: checked here, so this safe function is sound for any caller).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn decode(
        avx512: bool,
        model: &Model,
        packed: &Packed,
        x: &mut [u32; LANES],
        data: &[u8],
        pos: &mut usize,
        out: &mut [u8],
        ctx: Ctx<'_>,
    ) -> usize {
        assert!(if avx512 {
            is_x86_feature_detected!("avx512f")
        } else {
            is_x86_feature_detected!("avx2")
        });
        let q = out.len() / LANES;
        if let Ctx::None = ctx {
            let t = packed.table(0);
            assert_eq!(t.len(), PROB_SCALE as usize);
            // SAFETY: the CPU has AVX-512F or AVX2 as `avx512` says
            // (checked above); the arguments meet the loops' conditions
            // (one table, offset 0).
            return unsafe {
                if avx512 {
                    run(t, &[0; 256], ctx, q, x, data, pos, out)
                } else {
                    run_avx2(t, &[0; 256], ctx, q, x, data, pos, out)
                }
            };
        }
        // Every table is PROB_SCALE entries: a slot (< PROB_SCALE) plus a
        // table's offset stays inside `flat`.
        let flat = packed.flat();
        assert_eq!(flat.len(), model.tables.len() * PROB_SCALE as usize);
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
        unsafe {
            if avx512 {
                run(flat, &offsets, ctx, q, x, data, pos, out)
            } else {
                run_avx2(flat, &offsets, ctx, q, x, data, pos, out)
            }
        }
    }

    /// The vector encoder (see [`super::encode`]; checks the CPU and bounds):
    /// per half round, the 16 lanes' table entries are gathered field by
    /// field (`EncSym`: x_max, m, start | cmpl_freq << 16, shift), or, for
    /// one table, permuted out of registers (at most 64 consecutive
    /// symbols: 3x faster, gathers bound this loop) or out of L1 (any
    /// other: 2.4x, 0.45 against 1.10 ns a symbol), the
    /// lanes that must shrink store their low 16 bits below `p` in lane
    /// order (a compress and a masked store), and the exact 33-bit
    /// reciprocal divides in 64-bit halves (even and odd lanes).
    ///
    /// With `avx512` that loop ([`run_enc`]), else the AVX2 one (the CPU
    /// must have it: checked here, so this safe function is sound for any
    /// caller).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn encode(
        avx512: bool,
        enc: &[[super::EncSym; 256]],
        tables: &[u32; 256],
        x: &mut [u32; LANES],
        syms: &[u8],
        sib: Option<&[u8]>,
        present: &[u8],
        rounds: usize,
        buf: &mut [u16],
        p: &mut usize,
    ) {
        assert!(if avx512 {
            is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl")
        } else {
            is_x86_feature_detected!("avx2")
        });
        // Bounds the vector loops rely on.
        assert!(tables.iter().all(|&t| (t as usize) < enc.len()));
        assert!(syms.len() >= rounds * LANES && sib.is_none_or(|s| s.len() >= rounds * LANES));
        // Every symbol still to code writes at most one word below `p`.
        assert!(*p <= buf.len() && *p > rounds * LANES);
        // Each entry in 8 bytes (two gathers where `EncSym` takes four):
        // entry `table * 256 + symbol` is inside for every table < enc.len().
        let packed: Vec<u64> = enc.iter().flatten().map(|e| e.packed()).collect();
        assert_eq!(packed.len(), enc.len() * 256);
        // SAFETY: the CPU has AVX-512 F, BW and VL, or AVX2, as `avx512`
        // says, and the bounds hold (both checked above).
        unsafe {
            if avx512 {
                run_enc(&packed, tables, x, syms, sib, present, rounds, buf, p)
            } else {
                run_enc_avx2(&packed, tables, x, syms, sib, rounds, buf, p)
            }
        }
    }

    /// The context values (`[lo, lo + 64)`) whose tables the encoder
    /// permutes out of registers, if those `present` (increasing) are that
    /// narrow, leaving out zero when only that makes them so (exponent
    /// contexts, whose zeros are order 1's first round and zero weights;
    /// the lanes out of range gather). Taken from the counts' contexts, not
    /// from another pass over the conditioning stream.
    fn narrow_contexts(present: &[u8]) -> Option<u8> {
        let (&lo, &hi) = (present.first()?, present.last()?);
        if hi - lo < 64 {
            return Some(lo);
        }
        let &lo = present.iter().find(|&&c| c > 0)?;
        (hi - lo < 64).then_some(lo)
    }

    /// The loop of [`encode`].
    // Kept whole: one hot loop, its vector states kept in registers across rounds.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn run_enc(
        packed: &[u64],
        tables: &[u32; 256],
        x: &mut [u32; LANES],
        syms: &[u8],
        sib: Option<&[u8]>,
        present: &[u8],
        rounds: usize,
        buf: &mut [u16],
        p: &mut usize,
    ) {
        let base = packed.as_ptr() as *const i32;
        let tp = tables.as_ptr() as *const i32;
        // Context -> table out of registers for narrow contexts.
        let ctx_regs = sib.and_then(|_| narrow_contexts(present)).map(|lo| {
            let reg = |v: usize| {
                let w: [u32; 16] = std::array::from_fn(|i| {
                    tables.get(lo as usize + 16 * v + i).copied().unwrap_or(0)
                });
                // SAFETY: `w` is 16 u32s: one unaligned 64-byte load.
                unsafe { _mm512_loadu_si512(w.as_ptr() as *const __m512i) }
            };
            (
                _mm512_set1_epi32(lo as i32),
                [reg(0), reg(1), reg(2), reg(3)],
            )
        });
        let low32 = _mm512_set1_epi64(0xFFFF_FFFF);
        // One table whose symbols all lie in [lo, lo + 64): its entries sit
        // in registers (`EncSym::packed`, 64 lanes of `m` and of the rest),
        // and two-source permutes replace the four gathers.
        let narrow = match sib {
            None => narrow_table(&packed[..256]),
            Some(_) => None,
        };
        // Any other single table: all 256 entries, permuted out of L1 in
        // four 64-entry picks (still 2-3x faster than two gathers).
        let wide = match (sib, &narrow) {
            (None, None) => Some(wide_table(&packed[..256])),
            _ => None,
        };
        let field = _mm512_set1_epi32(0xFFF);
        let scale = _mm512_set1_epi32(crate::entropy::table::PROB_SCALE as i32);
        // SAFETY: `x` is 32 u32s: two unaligned 64-byte loads.
        let mut xs = unsafe {
            [
                _mm512_loadu_si512(x.as_ptr() as *const __m512i),
                _mm512_loadu_si512(x.as_ptr().add(16) as *const __m512i),
            ]
        };
        let mut at = *p;
        for j in (0..rounds).rev() {
            for h in (0..2).rev() {
                let o = j * LANES + 16 * h;
                // SAFETY: o + 16 <= rounds * 32 <= syms.len() (and sib's);
                // entry = table * 256 + symbol < enc.len() * 256, so every
                // field read (16 bytes each) is inside `enc`.
                let s = unsafe {
                    _mm512_cvtepu8_epi32(_mm_loadu_si128(syms.as_ptr().add(o) as *const __m128i))
                };
                // 64 lanes of four registers, indexed by `i` in [0, 64).
                let pick = |v: &[__m512i; 4], i: __m512i| {
                    let upper = _mm512_test_epi32_mask(i, _mm512_set1_epi32(32));
                    _mm512_mask_blend_epi32(
                        upper,
                        _mm512_permutex2var_epi32(v[0], i, v[1]),
                        _mm512_permutex2var_epi32(v[2], i, v[3]),
                    )
                };
                let (m, high) = if let Some((lo, t)) = &narrow {
                    let s = _mm512_sub_epi32(s, *lo);
                    (pick(&t[0], s), pick(&t[1], s))
                } else if let Some(t) = &wide {
                    let b6 = _mm512_test_epi32_mask(s, _mm512_set1_epi32(64));
                    let b7 = _mm512_test_epi32_mask(s, _mm512_set1_epi32(128));
                    let all = |h: usize| {
                        let lo = _mm512_mask_blend_epi32(b6, pick(&t[0][h], s), pick(&t[1][h], s));
                        let hi = _mm512_mask_blend_epi32(b6, pick(&t[2][h], s), pick(&t[3][h], s));
                        _mm512_mask_blend_epi32(b7, lo, hi)
                    };
                    (all(0), all(1))
                } else {
                    // SAFETY: as above; packed entry `idx` is 8 bytes at
                    // `base + 8 idx`, m first.
                    unsafe {
                        let t = match sib {
                            Some(sib) => {
                                let c = _mm512_cvtepu8_epi32(_mm_loadu_si128(
                                    sib.as_ptr().add(o) as *const __m128i
                                ));
                                let t = match &ctx_regs {
                                    Some((lo, regs)) => {
                                        let d = _mm512_sub_epi32(c, *lo);
                                        let v = pick(regs, d);
                                        let out = _mm512_cmpge_epu32_mask(d, _mm512_set1_epi32(64));
                                        if out == 0 {
                                            v
                                        } else {
                                            _mm512_mask_i32gather_epi32::<4>(v, out, c, tp)
                                        }
                                    }
                                    None => _mm512_i32gather_epi32::<4>(c, tp),
                                };
                                _mm512_slli_epi32::<8>(t)
                            }
                            None => _mm512_setzero_si512(),
                        };
                        let idx = _mm512_add_epi32(t, s);
                        (
                            _mm512_i32gather_epi32::<8>(idx, base),
                            _mm512_i32gather_epi32::<8>(idx, base.add(1)),
                        )
                    }
                };
                let cmpl = _mm512_and_si512(_mm512_srli_epi32::<12>(high), field);
                // x_max = freq << 20; all ones for freq = PROB_SCALE.
                let x_max = _mm512_mask_mov_epi32(
                    _mm512_slli_epi32::<20>(_mm512_sub_epi32(scale, cmpl)),
                    _mm512_cmpeq_epi32_mask(cmpl, _mm512_setzero_si512()),
                    _mm512_set1_epi32(-1),
                );
                let start = _mm512_and_si512(high, field);
                let shift = _mm512_srli_epi32::<24>(high);
                let xv = xs[h];
                let shrink = _mm512_cmpge_epu32_mask(xv, x_max);
                let cnt = shrink.count_ones() as usize;
                let words = _mm512_cvtepi32_epi16(_mm512_maskz_compress_epi32(shrink, xv));
                at -= cnt;
                // SAFETY: at >= 1 (each symbol left writes at most one word
                // below the start, which is > rounds * 32); the store
                // writes the `cnt` words [at, at + cnt).
                unsafe {
                    _mm256_mask_storeu_epi16(
                        buf.as_mut_ptr().add(at) as *mut i16,
                        ((1u32 << cnt) - 1) as __mmask16,
                        words,
                    )
                };
                let xv = _mm512_mask_srli_epi32(xv, shrink, xv, 16);
                // q = (((x * m) >> 32) + x) >> shift, in 64-bit lanes.
                let quot = |xq: __m512i, mq: __m512i, sq: __m512i| {
                    let hi = _mm512_srli_epi64::<32>(_mm512_mul_epu32(xq, mq));
                    _mm512_srlv_epi64(_mm512_add_epi64(hi, _mm512_and_si512(xq, low32)), sq)
                };
                let q_even = quot(xv, m, _mm512_and_si512(shift, low32));
                let q_odd = quot(
                    _mm512_srli_epi64::<32>(xv),
                    _mm512_srli_epi64::<32>(m),
                    _mm512_srli_epi64::<32>(shift),
                );
                let q = _mm512_mask_blend_epi32(0xAAAA, q_even, _mm512_slli_epi64::<32>(q_odd));
                xs[h] = _mm512_add_epi32(_mm512_add_epi32(xv, start), _mm512_mullo_epi32(q, cmpl));
            }
        }
        // SAFETY: as the loads.
        unsafe {
            _mm512_storeu_si512(x.as_mut_ptr() as *mut __m512i, xs[0]);
            _mm512_storeu_si512(x.as_mut_ptr().add(16) as *mut __m512i, xs[1]);
        }
        *p = at;
    }

    /// For each mask of 8 shrinking lanes, the permutation that moves those
    /// lanes, in lane order, to the top of the vector: the `k`-th of `cnt`
    /// goes to position `8 - cnt + k` (the rest take lane 0).
    const SPILL: [[u32; 8]; 256] = {
        let mut t = [[0u32; 8]; 256];
        let mut m = 0;
        while m < 256 {
            let mut to = 8 - (m as u32).count_ones() as usize;
            let mut l = 0;
            while l < 8 {
                if m & (1 << l) != 0 {
                    t[m][to] = l as u32;
                    to += 1;
                }
                l += 1;
            }
            m += 1;
        }
        t
    };

    /// [`run_enc`] with AVX2 (same conditions): [`enc_avx2`], with each
    /// step's 8 tables looked up from `sib`, or all table 0.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2")]
    unsafe fn run_enc_avx2(
        packed: &[u64],
        tables: &[u32; 256],
        x: &mut [u32; LANES],
        syms: &[u8],
        sib: Option<&[u8]>,
        rounds: usize,
        buf: &mut [u16],
        p: &mut usize,
    ) {
        // SAFETY: the caller's bounds, and every table (tables[c], or 0)
        // is below enc.len() = packed.len() / 256.
        unsafe {
            match sib {
                Some(sib) => enc_avx2(packed, x, syms, rounds, buf, p, |o| {
                    let c: &[u8; 8] = sib[o..o + 8].try_into().unwrap();
                    c.map(|c| tables[c as usize])
                }),
                None => enc_avx2(packed, x, syms, rounds, buf, p, |_| [0; 8]),
            }
        }
    }

    /// The loop of [`run_enc_avx2`] (one copy per way of choosing tables,
    /// so the loop does not branch on it), `table(o)` giving the tables of
    /// symbols `o..o + 8`, each below `packed.len() / 256`. Four vectors of
    /// 8 lanes; a step loads its 8 entries one by one (on Zen 3 faster than
    /// two gathers: 0.78 against 1.32 ns a symbol with one table, 1.35
    /// against 2.2 with 171), and for the compress store permutes the
    /// shrinking lanes (by [`SPILL`]) to the top of the vector, narrows
    /// them to 16 bits and stores all 8 words below `at`: the `cnt` words
    /// kept end at `at`, and the ones below are overwritten by the next
    /// words or lie below the final `p`, outside the stream.
    #[target_feature(enable = "avx2")]
    unsafe fn enc_avx2(
        packed: &[u64],
        x: &mut [u32; LANES],
        syms: &[u8],
        rounds: usize,
        buf: &mut [u16],
        p: &mut usize,
        table: impl Fn(usize) -> [u32; 8],
    ) {
        let entries = packed.as_ptr();
        let field = _mm256_set1_epi32(0xFFF);
        let scale = _mm256_set1_epi32(PROB_SCALE as i32);
        let one = _mm256_set1_epi32(1);
        let zero = _mm256_setzero_si256();
        // The low 16 bits of each 32-bit lane, 4 per 128-bit half, then the
        // two halves' 8 bytes side by side.
        let words16 = _mm256_setr_epi8(
            0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5, 8, 9, 12, 13, -1,
            -1, -1, -1, -1, -1, -1, -1,
        );
        // SAFETY: `x` is 32 u32s: four unaligned 32-byte loads.
        let [mut x0, mut x1, mut x2, mut x3]: [__m256i; 4] = std::array::from_fn(|k| unsafe {
            _mm256_loadu_si256(x.as_ptr().add(8 * k) as *const __m256i)
        });
        let mut at = *p;
        // Step g codes symbols 8g..8g + 8 (round g / 4, lanes 8 (g % 4)..)
        // on the states in x3; the states then rotate up one vector, so
        // that they stay in registers (an indexed array would not).
        for g in (0..rounds * 4).rev() {
            let o = 8 * g;
            let s: &[u8; 8] = syms[o..o + 8].try_into().unwrap();
            let t = table(o);
            // SAFETY: t[k] < packed.len() / 256 and symbols are bytes, so
            // entry t[k] * 256 + s[k] is inside `packed`.
            let e = |k: usize| unsafe { *entries.add(t[k] as usize * 256 + s[k] as usize) as i64 };
            // Lanes 0, 1, 4, 5 and 2, 3, 6, 7: the shuffles then pick each
            // half of the entries in lane order.
            let a = _mm256_castsi256_ps(_mm256_setr_epi64x(e(0), e(1), e(4), e(5)));
            let b = _mm256_castsi256_ps(_mm256_setr_epi64x(e(2), e(3), e(6), e(7)));
            let m = _mm256_castps_si256(_mm256_shuffle_ps::<0b10_00_10_00>(a, b));
            let high = _mm256_castps_si256(_mm256_shuffle_ps::<0b11_01_11_01>(a, b));
            let cmpl = _mm256_and_si256(_mm256_srli_epi32::<12>(high), field);
            // x_max = freq << 20; all ones for freq = PROB_SCALE.
            let x_max = _mm256_or_si256(
                _mm256_slli_epi32::<20>(_mm256_sub_epi32(scale, cmpl)),
                _mm256_cmpeq_epi32(cmpl, zero),
            );
            let start = _mm256_and_si256(high, field);
            let shift = _mm256_srli_epi32::<24>(high);
            let xv = x3;
            // x >= x_max, unsigned.
            let shrink = _mm256_cmpeq_epi32(_mm256_max_epu32(xv, x_max), xv);
            let mask = _mm256_movemask_ps(_mm256_castsi256_ps(shrink)) as usize;
            // SAFETY: a row of SPILL is 8 u32s: one unaligned 32-byte load.
            let perm = unsafe { _mm256_loadu_si256(SPILL[mask].as_ptr() as *const __m256i) };
            let words = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(xv, perm), words16);
            let words = _mm256_castsi256_si128(_mm256_permute4x64_epi64::<0b1000>(words));
            // SAFETY: 8 < at <= *p <= buf.len(): the symbols coded before
            // this step, at most rounds * 32 - 8, wrote at most one word
            // each below *p > rounds * 32 (checked by `encode`). The store
            // writes [at - 8, at), below every word kept so far.
            unsafe { _mm_storeu_si128(buf.as_mut_ptr().add(at - 8) as *mut __m128i, words) };
            at -= mask.count_ones() as usize;
            let xv = _mm256_blendv_epi8(xv, _mm256_srli_epi32::<16>(xv), shrink);
            // q = (((x * m) >> 32) + x) >> shift in 32-bit lanes: hi =
            // (x * m) >> 32 is at most x (m < 2^32), so (hi + x) >> 1 is
            // hi + ((x - hi) >> 1), then shifted by shift - 1; shift 0 is
            // freq 1, where q = x. (8% faster than in 64-bit halves.)
            let hi = _mm256_blend_epi32::<0b1010_1010>(
                _mm256_srli_epi64::<32>(_mm256_mul_epu32(xv, m)),
                _mm256_mul_epu32(_mm256_srli_epi64::<32>(xv), _mm256_srli_epi64::<32>(m)),
            );
            let half = _mm256_add_epi32(hi, _mm256_srli_epi32::<1>(_mm256_sub_epi32(xv, hi)));
            let q = _mm256_srlv_epi32(half, _mm256_sub_epi32(shift, one));
            let q = _mm256_blendv_epi8(q, xv, _mm256_cmpeq_epi32(shift, zero));
            let xv = _mm256_add_epi32(_mm256_add_epi32(xv, start), _mm256_mullo_epi32(q, cmpl));
            (x0, x1, x2, x3) = (xv, x0, x1, x2);
        }
        for (k, xv) in [x0, x1, x2, x3].iter().enumerate() {
            // SAFETY: as the loads.
            unsafe { _mm256_storeu_si256(x.as_mut_ptr().add(8 * k) as *mut __m256i, *xv) };
        }
        *p = at;
    }

    /// `(lo, [m, rest])` of a table (256 entries of
    /// [`super::EncSym::packed`]) whose present symbols (non-zero entries)
    /// all lie in `[lo, lo + 64)`: [`entries64`] from `lo`.
    #[target_feature(enable = "avx512f")]
    fn narrow_table(packed: &[u64]) -> Option<(__m512i, [[__m512i; 4]; 2])> {
        let present = || packed.iter().enumerate().filter(|e| *e.1 != 0).map(|e| e.0);
        let lo = present().next()?;
        let hi = present().next_back()?;
        if hi - lo >= 64 {
            return None;
        }
        Some((_mm512_set1_epi32(lo as i32), entries64(packed, lo)))
    }

    /// A whole table (256 entries of [`super::EncSym::packed`]): its four
    /// groups of 64 entries, each as [`entries64`].
    #[target_feature(enable = "avx512f")]
    fn wide_table(packed: &[u64]) -> [[[__m512i; 4]; 2]; 4] {
        std::array::from_fn(|g| entries64(packed, 64 * g))
    }

    /// `[m, rest]` of the 64 entries from `lo` on (zero past the table's
    /// end): per half, four vectors of 16.
    #[target_feature(enable = "avx512f")]
    fn entries64(packed: &[u64], lo: usize) -> [[__m512i; 4]; 2] {
        let lane = |k: usize| packed.get(lo + k).copied().unwrap_or(0);
        let half = |shift: u32, v: usize| {
            let w: [u32; 16] = std::array::from_fn(|i| (lane(16 * v + i) >> shift) as u32);
            // SAFETY: `w` is 16 u32s: one unaligned 64-byte load.
            unsafe { _mm512_loadu_si512(w.as_ptr() as *const __m512i) }
        };
        [0, 32].map(|shift| std::array::from_fn(|v| half(shift, v)))
    }

    /// Order 1: each lane's run of `r` staged symbols from round `j` to its
    /// segment (`q` symbols each) of `out`.
    fn flush(stage: &[u8], out: &mut [u8], q: usize, j: usize, r: usize) {
        for l in 0..LANES {
            for (k, b) in out[l * q + j..l * q + j + r].iter_mut().enumerate() {
                *b = stage[k * LANES + l];
            }
        }
    }

    /// For each mask of 8 refilled lanes, the lane -> word permutation:
    /// refilled lane `l` takes word `popcount(mask & ((1 << l) - 1))`.
    const REFILL: [[u32; 8]; 256] = {
        let mut t = [[0u32; 8]; 256];
        let mut m = 0;
        while m < 256 {
            let mut next = 0;
            let mut l = 0;
            while l < 8 {
                if m & (1 << l) != 0 {
                    t[m][l] = next;
                    next += 1;
                }
                l += 1;
            }
            m += 1;
        }
        t
    };

    /// [`run`] with AVX2: four vectors of 8 lanes, the same memory accesses.
    // Kept whole: one hot loop, its vector states kept in registers across rounds.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2")]
    unsafe fn run_avx2(
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
        let mask = _mm256_set1_epi32(PROB_SCALE as i32 - 1);
        let one = _mm256_set1_epi32(1);
        let zero = _mm256_setzero_si256();
        let tp = tables.as_ptr() as *const i32;
        let op = offsets.as_ptr() as *const i32;
        // The low byte of each 32-bit lane, 4 per 128-bit half, then the two
        // halves' 4 bytes side by side.
        let bytes = _mm256_setr_epi8(
            0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1, -1, -1,
            -1, -1, -1, -1, -1, -1, -1, -1, -1,
        );
        let halves = _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0);
        // SAFETY: `x` is 32 u32s: four unaligned 32-byte loads.
        let mut xs: [__m256i; 4] = std::array::from_fn(|k| unsafe {
            _mm256_loadu_si256(x.as_ptr().add(8 * k) as *const __m256i)
        });
        let mut prev = [zero; 4];
        let mut stage = [0u8; STAGE_ROUNDS * LANES];
        let flush = |stage: &[u8], out: &mut [u8], j: usize, r: usize| flush(stage, out, q, j, r);
        let mut p = *pos;
        let mut g = 0;
        while g < rounds && p + 64 <= data.len() {
            for (h, xv) in xs.iter_mut().enumerate() {
                let o = g * LANES + 8 * h;
                let slot = _mm256_and_si256(*xv, mask);
                let idx = match ctx {
                    Ctx::None => slot,
                    // SAFETY: o + 8 <= rounds * 32 <= sib.len(); contexts
                    // are bytes (offsets[0..256]).
                    Ctx::Sibling(sib) => unsafe {
                        let c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(
                            sib.as_ptr().add(o) as *const __m128i
                        ));
                        _mm256_add_epi32(_mm256_i32gather_epi32::<4>(op, c), slot)
                    },
                    // SAFETY: previous symbols are bytes.
                    Ctx::Previous => unsafe {
                        _mm256_add_epi32(_mm256_i32gather_epi32::<4>(op, prev[h]), slot)
                    },
                };
                // SAFETY: idx = offset + slot < tables.len().
                let e = unsafe { _mm256_i32gather_epi32::<4>(tp, idx) };
                let freq = _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32::<8>(e), mask), one);
                let start = _mm256_srli_epi32::<20>(e);
                let nx = _mm256_sub_epi32(
                    _mm256_add_epi32(
                        _mm256_mullo_epi32(freq, _mm256_srli_epi32::<{ PROB_BITS as i32 }>(*xv)),
                        slot,
                    ),
                    start,
                );
                let syms = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(
                    _mm256_shuffle_epi8(e, bytes),
                    halves,
                ));
                match ctx {
                    Ctx::Previous => {
                        prev[h] = _mm256_and_si256(e, _mm256_set1_epi32(0xFF));
                        let at = (g % STAGE_ROUNDS) * LANES + 8 * h;
                        // SAFETY: at + 8 <= stage.len().
                        unsafe {
                            _mm_storel_epi64(stage.as_mut_ptr().add(at) as *mut __m128i, syms)
                        };
                    }
                    // SAFETY: o + 8 <= rounds * 32 <= out.len().
                    _ => unsafe { _mm_storel_epi64(out.as_mut_ptr().add(o) as *mut __m128i, syms) },
                }
                // Below L = 2^16: the high half is zero.
                let refill = _mm256_cmpeq_epi32(_mm256_srli_epi32::<16>(nx), zero);
                let m = _mm256_movemask_ps(_mm256_castsi256_ps(refill)) as usize;
                // SAFETY: p + 16 <= data.len(): the loop checks p + 64
                // before the first of four groups, each reading at most 16
                // bytes; REFILL has 256 rows.
                let words = unsafe {
                    let w = _mm256_cvtepu16_epi32(_mm_loadu_si128(
                        data.as_ptr().add(p) as *const __m128i
                    ));
                    let perm = _mm256_loadu_si256(REFILL[m].as_ptr() as *const __m256i);
                    _mm256_permutevar8x32_epi32(w, perm)
                };
                let filled = _mm256_or_si256(_mm256_slli_epi32::<16>(nx), words);
                *xv = _mm256_blendv_epi8(nx, filled, refill);
                p += 2 * m.count_ones() as usize;
            }
            g += 1;
            if matches!(ctx, Ctx::Previous) && g % STAGE_ROUNDS == 0 {
                flush(&stage, out, g - STAGE_ROUNDS, STAGE_ROUNDS);
            }
        }
        if matches!(ctx, Ctx::Previous) && g % STAGE_ROUNDS != 0 {
            flush(&stage, out, g - g % STAGE_ROUNDS, g % STAGE_ROUNDS);
        }
        for (k, xv) in xs.iter().enumerate() {
            // SAFETY: as the loads.
            unsafe { _mm256_storeu_si256(x.as_mut_ptr().add(8 * k) as *mut __m256i, *xv) };
        }
        *pos = p;
        g
    }

    /// The vector loop, for at most `rounds` rounds. Its memory accesses,
    /// which the caller keeps in bounds: `tables[offsets[c] + slot]` (`c` a
    /// byte, `slot < PROB_SCALE`, each offset at most `tables.len() -
    /// PROB_SCALE`); order 0 and conditional: `sib` and `out` at
    /// `j*32..j*32+32` for `j < rounds <= out.len() / 32` (order 1 writes
    /// with bounds-checked indexing); and `data[p..p+64]` only while
    /// `p + 64 <= data.len()` (checked here).
    // Kept whole: one hot loop, its vector states kept in registers across rounds.
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
        // Order 1: each lane's previous symbol (lane l of half h decodes
        // segment 16h + l), and the stage of the last rounds.
        let mut prev = [_mm512_setzero_si512(); 2];
        let mut stage = [0u8; STAGE_ROUNDS * LANES];
        let flush = |stage: &[u8], out: &mut [u8], j: usize, r: usize| flush(stage, out, q, j, r);
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

    #[cfg(test)]
    mod tests {
        use super::narrow_contexts;

        #[test]
        fn contexts_within_64_values_but_for_zero_are_narrow() {
            assert_eq!(narrow_contexts(&[3, 10, 66]), Some(3));
            assert_eq!(narrow_contexts(&[0, 63]), Some(0));
            // Zero left out only when that makes them narrow.
            assert_eq!(narrow_contexts(&[0, 150, 213]), Some(150));
            assert_eq!(narrow_contexts(&[0, 150, 214]), None);
            assert_eq!(narrow_contexts(&[3, 67]), None);
            assert_eq!(narrow_contexts(&[0]), Some(0));
            assert_eq!(narrow_contexts(&[]), None);
        }
    }
}
