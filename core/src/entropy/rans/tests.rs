use super::*;
use crate::entropy::tests::skewed;

fn bytes(seed: u64, n: usize, alphabet: u64) -> Vec<u8> {
    skewed(seed, n, alphabet)
        .into_iter()
        .map(|w| w as u8)
        .collect()
}

#[test]
fn order_1_counts_given_order_0_are_the_counts() {
    // With and without symbol 0, shorter than the segments, long.
    for (seed, n, alphabet) in [(5, 100_003, 40), (6, 3, 9), (7, 31, 200), (8, 5000, 2)] {
        let mut s = bytes(seed, n, alphabet);
        if seed == 7 {
            s.iter_mut().for_each(|b| *b |= 1);
        }
        let known = count(&s, &Context::None);
        let known = Some(known.order0());
        assert_eq!(
            count_n_known::<LANES>(&s, &Context::Previous, known),
            count(&s, &Context::Previous)
        );
        assert_eq!(
            count_n_known::<WIDE>(&s, &Context::Previous, known),
            count_n::<WIDE>(&s, &Context::Previous)
        );
    }
}

#[test]
fn pooled_counts_are_the_order_0_counts() {
    let s = bytes(3, 100_003, 40);
    let sib = bytes(4, 100_003, 7);
    let want = count(&s, &Context::None);
    for ctx in [Context::Previous, Context::Sibling(&sib), Context::None] {
        for c in [count(&s, &ctx), count_n::<WIDE>(&s, &ctx)] {
            let p = c.pooled();
            assert_eq!(p.order0(), want.order0());
            assert_eq!(p.total(), s.len());
            assert_eq!(estimate_counted(&p, 0), estimate_counted(&want, 0));
        }
    }
}

/// `s` through order 0, order 1 and conditioned on `sib`.
fn round_trip_every_model(s: &[u8], sib: &[u8], min_ctx_count: usize) {
    for (ctx, prev) in [
        (Context::None, false),
        (Context::Previous, true),
        (Context::Sibling(sib), false),
    ] {
        let p = encode(s, ctx, min_ctx_count);
        let mut out: Vec<u8> = Vec::new();
        let sibling = matches!(ctx, Context::Sibling(_)).then_some(sib);
        decode(&p, s.len(), prev, sibling, &mut out).unwrap();
        assert_eq!(out, s, "n={}", s.len());
    }
}

#[test]
fn segments_round_trip_at_every_small_length() {
    for n in 0..40 {
        round_trip_every_model(&bytes(n as u64, n, 7), &bytes(n as u64 + 1, n, 3), 1);
    }
}

/// `s` through the wide coders (order 0, order 1, conditional),
/// decoded by the vector decoder (when built and the CPU has it) and
/// by the scalar one: both must give `s`, and reject the stream cut
/// short.
fn round_trip_wide(s: &[u8], sib: &[u8], min_ctx_count: usize) {
    let sib64: Vec<u64> = sib.iter().map(|&b| b as u64).collect();
    for ctx in [Context::None, Context::Previous, Context::Sibling(sib)] {
        let counts = count_n::<WIDE>(s, &ctx);
        let p = encode_counted::<WIDE>(s, ctx, &counts, min_ctx_count);
        let sibling = matches!(ctx, Context::Sibling(_)).then_some(sib);
        let prev = matches!(ctx, Context::Previous);
        for simd in [Simd::Best, Simd::Avx2, Simd::Off] {
            let mut out: Vec<u8> = vec![7];
            decode_n::<u8, WIDE>(&p, s.len(), prev, sibling, &mut out, simd).unwrap();
            assert_eq!(&out[1..], s, "n={} simd={simd:?} prev={prev}", s.len());
            // Wide words (u64) take the scalar path.
            let mut wide: Vec<u64> = Vec::new();
            let sibling64 = sibling.map(|_| &sib64[..]);
            decode_n::<u64, WIDE>(&p, s.len(), prev, sibling64, &mut wide, simd).unwrap();
            assert!(wide.iter().zip(s).all(|(&a, &b)| a == b as u64));
            if !s.is_empty() {
                let cut = &p[..p.len() - 2];
                let mut out: Vec<u8> = Vec::new();
                let r = decode_n::<u8, WIDE>(cut, s.len(), prev, sibling, &mut out, simd);
                assert!(r.is_err());
            }
        }
    }
}

#[test]
fn bits_counted_by_their_sum_are_counted_as_bytes() {
    for n in [0usize, 1, 7, 1000, 70_001, 200_000] {
        for seed in [1u64, 2] {
            let s: Vec<u8> = bytes(seed * 31 + n as u64, n, 2);
            let (a, b) = (count_bits(&s), count(&s, &Context::None));
            assert!(a.rows == b.rows && a.ctxs == b.ctxs, "n={n}");
            assert!(
                a.totals == b.totals && a.contextual == b.contextual,
                "n={n}"
            );
        }
        let ones = vec![1u8; n];
        assert_eq!(count_bits(&ones).rows, count(&ones, &Context::None).rows);
    }
}

#[test]
fn vector_encoder_writes_the_scalar_bytes() {
    // Lengths around whole rounds, alphabets from certain to flat, and
    // skewed tables (states near 2^32, every shrink pattern).
    for (n, alphabet) in [
        (31usize, 5u64),
        (32, 5),
        (33, 200),
        (1000, 2),
        (4096, 256),
        (70_001, 3),
        (100_000, 4000),
        (131_072, 60),
        (5000, 1),
        (50_000, 64),
        (50_000, 65),
    ] {
        // Shifted, the narrow alphabets (order 0 from registers) start
        // above 0 and cross a multiple of 32.
        for offset in [0u8, 100] {
            let s: Vec<u8> = bytes(n as u64 * 7 + alphabet, n, alphabet)
                .iter()
                .map(|b| b.wrapping_add(offset))
                .collect();
            let sib: Vec<u8> = (0..n).map(|i| (i * 7 % 11) as u8).collect();
            // Contexts in 64 values but for zeros (the vector encoder
            // permutes their tables and gathers the zeros').
            let zeros: Vec<u8> = (0..n)
                .map(|i| {
                    if i % 3 == 0 {
                        0
                    } else {
                        150 + (i * 13 % 64) as u8
                    }
                })
                .collect();
            for ctx in [
                Context::None,
                Context::Previous,
                Context::Sibling(&sib),
                Context::Sibling(&zeros),
            ] {
                let counts = count_n::<WIDE>(&s, &ctx);
                for min_ctx in [1, 512] {
                    let o = encode_with_simd::<WIDE>(&s, ctx, &counts, min_ctx, Simd::Off);
                    for simd in [Simd::Best, Simd::Avx2] {
                        let v = encode_with_simd::<WIDE>(&s, ctx, &counts, min_ctx, simd);
                        assert!(v == o, "n={n} alphabet={alphabet} offset={offset} {simd:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn vector_encoders_write_the_scalar_bytes_for_short_streams_and_every_shrink_pattern() {
    // Both vector encoders against the scalar one, under every model.
    let check = |s: &[u8], sib: &[u8]| {
        for ctx in [Context::None, Context::Previous, Context::Sibling(sib)] {
            let counts = count_n::<WIDE>(s, &ctx);
            let o = encode_with_simd::<WIDE>(s, ctx, &counts, 1, Simd::Off);
            for simd in [Simd::Best, Simd::Avx2] {
                let v = encode_with_simd::<WIDE>(s, ctx, &counts, 1, simd);
                assert!(v == o, "n={} {simd:?}", s.len());
            }
        }
    };
    // No whole round, a few, and every length of the scalar tail.
    for n in 0..200 {
        check(&bytes(n as u64, n, 30), &bytes(n as u64 + 1, n, 5));
    }
    // 256 symbols as often (8 bits each): every lane shrinks in one
    // round and none in the next. Conditioned on the lane's parity,
    // with a certain symbol (never shrinks) on one parity: alternate
    // lanes.
    let n = 32 * 1024;
    let flat: Vec<u8> = (0..n).map(|i| (i * 37) as u8).collect();
    check(&flat, &flat);
    for parity in [0, 1] {
        let sib: Vec<u8> = (0..n).map(|i| ((i + parity) % 2) as u8).collect();
        let s: Vec<u8> = (0..n)
            .map(|i| if sib[i] == 0 { (i * 37) as u8 } else { 7 })
            .collect();
        check(&s, &sib);
    }
    // Costs from 7 to 12 bits: lanes shrink independently, about
    // every other round (every mask of 8 lanes, many times).
    check(&bytes(11, n + 5, 256), &bytes(12, n + 5, 3));
}

#[test]
fn wide_streams_round_trip_at_every_small_length() {
    for n in 0..300 {
        round_trip_wide(&bytes(n as u64, n, 7), &bytes(n as u64 + 1, n, 3), 1);
    }
}

#[test]
fn wide_streams_round_trip_long_and_skewed() {
    // Long enough for many vector steps, with rare symbols (refills in
    // every pattern of lanes) and near-certain ones (states near 2^32).
    for (n, rare) in [(100_003usize, 4000u64), (70_001, 3), (131_072, 50)] {
        let sib: Vec<u8> = (0..n).map(|i| (i % 5) as u8 * 40).collect();
        let s: Vec<u8> = bytes(n as u64, n, rare)
            .iter()
            .enumerate()
            .map(|(i, &r)| if r == 0 { (i * 31) as u8 } else { 3 })
            .collect();
        round_trip_wide(&s, &sib, 512);
        round_trip_wide(&bytes(n as u64 + 9, n, 200), &sib, 512);
    }
}

#[test]
fn wide_decoders_agree_on_corrupt_streams() {
    // A flipped stream byte decodes to garbage or an error, but the
    // same garbage or error on both paths.
    let n = 50_000;
    let s = bytes(5, n, 60);
    let sib: Vec<u8> = (0..n).map(|i| (i % 3) as u8).collect();
    for ctx in [Context::None, Context::Previous, Context::Sibling(&sib)] {
        let counts = count_n::<WIDE>(&s, &ctx);
        let p = encode_counted::<WIDE>(&s, ctx, &counts, 1);
        let sibling = matches!(ctx, Context::Sibling(_)).then_some(&sib[..]);
        let prev = matches!(ctx, Context::Previous);
        let run = |bad: &[u8], simd| {
            let mut out: Vec<u8> = Vec::new();
            let r = decode_n::<u8, WIDE>(bad, n, prev, sibling, &mut out, simd);
            (r.is_ok(), out)
        };
        for at in (p.len() - 20_000..p.len()).step_by(997) {
            let mut bad = p.clone();
            bad[at] ^= 0x5a;
            assert_eq!(run(&bad, Simd::Best), run(&bad, Simd::Off), "byte {at}");
            assert_eq!(run(&bad, Simd::Avx2), run(&bad, Simd::Off), "byte {at}");
        }
        // The whole stream (after the tables) replaced by noise.
        let mut bad = p.clone();
        let from = p.len() / 2;
        for (k, b) in bad[from..].iter_mut().enumerate() {
            *b = (k as u64)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .rotate_left(17) as u8;
        }
        assert_eq!(run(&bad, Simd::Best), run(&bad, Simd::Off), "noise");
        assert_eq!(run(&bad, Simd::Avx2), run(&bad, Simd::Off), "noise");
    }
}

#[test]
fn certain_symbols_cost_nothing() {
    // A symbol with probability 1 must not grow the state.
    let s = vec![9u8; 100_000];
    let p = encode(&s, Context::None, 0);
    assert!(p.len() < 40, "{}", p.len());
    let mut out: Vec<u8> = Vec::new();
    decode(&p, s.len(), false, None::<&[u8]>, &mut out).unwrap();
    assert_eq!(out, s);
}

#[test]
fn reciprocal_is_exact_for_every_frequency_up_to_2_pow_32() {
    let high: Vec<u32> = skewed(0x1234_5678, 64, u64::MAX)
        .into_iter()
        .map(|w| w as u32 | 0x8000_0000)
        .collect();
    for freq in 1..=PROB_SCALE {
        let e = EncSym::new(0, freq);
        let edges = [
            0,
            1,
            freq - 1,
            freq,
            u32::MAX,
            u32::MAX - 1,
            1 << 31,
            (1 << 31) - 1,
        ];
        for &x in edges.iter().chain(&high) {
            assert_eq!(e.quotient(x), x / freq, "x={x} freq={freq}");
            // The AVX2 encoder's form, in 32 bits.
            let hi = ((x as u64 * e.m as u64) >> 32) as u32;
            let half = hi + ((x - hi) >> 1);
            let q = if e.shift == 0 {
                x
            } else {
                half >> (e.shift - 1)
            };
            assert_eq!(q, x / freq, "x={x} freq={freq}");
        }
    }
}

#[test]
fn skewed_tables_round_trip() {
    // Near-certain symbols keep states near 2^32, where a 32-bit
    // reciprocal is off by one (found on human-tfjs centernet).
    for (n, rare) in [(100_000usize, 4000u64), (36_864, 300), (132_480, 50)] {
        let sib: Vec<u8> = (0..n).map(|i| (i % 3 == 0) as u8 * 128).collect();
        let s: Vec<u8> = bytes(n as u64, n, rare)
            .iter()
            .enumerate()
            .map(|(i, &r)| if r == 0 { (i * 31) as u8 } else { 3 })
            .collect();
        round_trip_every_model(&s, &sib, 512);
    }
}
