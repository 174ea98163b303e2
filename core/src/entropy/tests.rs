use super::*;
use proptest::prelude::*;

fn all_codecs() -> Vec<Codec> {
    vec![
        Codec::Raw,
        Codec::BitPack,
        Codec::Huffman,
        Codec::Rans0,
        Codec::Rans1,
        Codec::RansCond { sibling: 0 },
        Codec::Zstd,
        Codec::Rans0x32,
        Codec::Rans1x32,
        Codec::RansCondx32 { sibling: 0 },
    ]
}

#[test]
fn spread_puts_each_field_in_its_byte() {
    fn check<const K: usize>() {
        for seed in 0..200u64 {
            let v = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (seed << 40);
            let want: u64 = (0..8)
                .map(|j| ((v >> (j * K)) & ((1 << K) - 1)) << (8 * j))
                .sum();
            assert_eq!(spread::<K>(v), want, "K={K} v={v:#x}");
            assert_eq!(gather::<K>(want), v & ((1u128 << (8 * K)) - 1) as u64);
        }
    }
    check::<1>();
    check::<2>();
    check::<3>();
    check::<4>();
    check::<5>();
    check::<6>();
    check::<7>();
    check::<8>();
}

#[test]
fn bitpack_round_trips_every_width_and_tail() {
    for width in 1u8..=64 {
        let mask = if width == 64 {
            u64::MAX
        } else {
            (1u64 << width) - 1
        };
        for n in [1usize, 2, 7, 8, 9, 15, 64, 65, 1001] {
            let words: Vec<u64> = (0..n as u64)
                .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) & mask)
                .collect();
            let p = encode_with(Codec::BitPack, &words, width, None);
            let mut out: Vec<u64> = vec![42];
            decode(Codec::BitPack, &p, width, n, None, &mut out).unwrap();
            assert_eq!(out[0], 42);
            assert_eq!(&out[1..], &words[..], "width={width} n={n}");
            if width <= 8 {
                // Bytes in: the same payload.
                let narrow: Vec<u8> = words.iter().map(|&w| w as u8).collect();
                assert_eq!(encode_with(Codec::BitPack, &narrow, width, None), p);
                // The byte path (fields spread 8 at a time).
                let mut bytes: Vec<u8> = vec![42];
                decode(Codec::BitPack, &p, width, n, None, &mut bytes).unwrap();
                assert_eq!(bytes[0], 42);
                assert!(bytes[1..].iter().zip(&words).all(|(&b, &w)| b as u64 == w));
                assert_eq!(bytes.len(), n + 1);
            }
        }
    }
}

#[test]
fn packed_rans_round_trips_narrow_words() {
    for width in 1u8..=4 {
        for n in [0usize, 1, 7, 8, 9, 63, 64, 65, 1000, 40_001] {
            let words: Vec<u64> = skewed(n as u64 + width as u64, n, 1 << width);
            for c in [Codec::PackedRans0, Codec::PackedRans0x32] {
                let p = encode_with(c, &words, width, None);
                let mut out: Vec<u64> = Vec::new();
                decode(c, &p, width, n, None, &mut out).unwrap();
                assert_eq!(out, words, "{c:?} width={width} n={n}");
                let mut narrow: Vec<u8> = Vec::new();
                decode(c, &p, width, n, None, &mut narrow).unwrap();
                assert!(narrow.iter().zip(&words).all(|(&a, &b)| a as u64 == b));
            }
        }
    }
}

#[test]
fn encode_cheapest_writes_a_decodable_stream_no_dearer_than_any_exact_codec() {
    // Streams where different codecs win: uniform bytes (raw), narrow
    // skewed words (packed or order 0), an order-1 chain, a stream
    // given by its sibling, a constant-ish stream, short ones.
    let chain: Vec<u64> = (0..60_000u64).map(|i| (i * i / 97) % 7).collect();
    let sib: Vec<u64> = skewed(5, 60_000, 16);
    let given: Vec<u64> = sib.iter().map(|&s| (s * 3) % 16).collect();
    let streams: Vec<(Vec<u64>, u8)> = vec![
        (
            (0..70_000u64)
                .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56)
                .collect(),
            8,
        ),
        (skewed(1, 50_000, 4), 2),
        (skewed(2, 300_000, 16), 4),
        (chain, 3),
        (given, 4),
        (vec![3; 40_000], 2),
        (skewed(3, 100, 8), 3),
        (skewed(4, 16, 2), 1),
    ];
    let sets: &[&[Codec]] = &[
        &[Codec::Raw, Codec::Rans0, Codec::BitPack],
        &[
            Codec::Rans1,
            Codec::Rans0,
            Codec::PackedRans0,
            Codec::BitPack,
        ],
        &[
            Codec::RansCond { sibling: 0 },
            Codec::Rans0,
            Codec::Huffman,
            Codec::Raw,
        ],
        &[
            Codec::Rans1x32,
            Codec::Rans0x32,
            Codec::PackedRans0x32,
            Codec::BitPack,
        ],
        &[Codec::Zstd, Codec::Rans0],
    ];
    for (words, width) in &streams {
        let n = words.len();
        for set in sets {
            let set: Vec<Codec> = set
                .iter()
                .filter(|c| !c.same_kind(Codec::PackedRans0) || *width <= 4)
                .copied()
                .collect();
            let sibling = (sib.len() == n).then_some(&sib[..]);
            if set.iter().any(|c| c.sibling().is_some()) && sibling.is_none() {
                continue;
            }
            let sibs: Vec<Sibling<'_>> = sibling
                .map(|words| Sibling {
                    index: 0,
                    words,
                    width: 4,
                    counts: None,
                })
                .into_iter()
                .collect();
            let (c, p) = encode_cheapest(&set, words, *width, &sibs);
            assert!(set.contains(&c), "{c:?} not in {set:?}");
            let mut out: Vec<u64> = Vec::new();
            decode(c, &p, *width, n, sibling, &mut out).unwrap();
            assert_eq!(&out, words, "{c:?} of {set:?}, width {width}, n {n}");
            // Never dearer than a codec whose size is exact unencoded.
            let chosen = cost(c, p.len(), n, *width, 1.0);
            for &e in &set {
                if matches!(
                    e,
                    Codec::Raw | Codec::BitPack | Codec::Huffman | Codec::Zstd
                ) {
                    let other = cost(
                        e,
                        encode_with(e, words, *width, sibling).len(),
                        n,
                        *width,
                        1.0,
                    );
                    assert!(chosen <= other, "{c:?} {chosen} > {e:?} {other} ({set:?})");
                }
            }
        }
    }
    // Where order 0 clearly wins over raw, it is what is written.
    let w = skewed(9, 200_000, 8);
    let (c, _) = encode_cheapest(&[Codec::Raw, Codec::Rans0x32], &w, 8, &[]);
    assert_eq!(c, Codec::Rans0x32);
}

#[test]
fn price_best_agrees_with_encode_best_and_is_close_to_its_size() {
    // The search prices samples of large tensors with price_best, and
    // codes small ones with encode_best: the two must mostly agree.
    let sib: Vec<u64> = skewed(5, 60_000, 16);
    let given: Vec<u64> = sib.iter().map(|&s| (s * 3 + s / 5) % 16).collect();
    let cases: Vec<(Vec<u64>, u8)> = vec![
        (skewed(1, 60_000, 64), 6),
        (skewed(2, 60_000, 2), 1),
        (given, 4),
        (
            (0..60_000u64)
                .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 57)
                .collect(),
            7,
        ),
        ((0..60_000u64).map(|i| (i * i / 97) % 7).collect(), 3),
    ];
    let sibs = [Sibling {
        index: 0,
        words: &sib[..],
        width: 4,
        counts: None,
    }];
    for (words, width) in &cases {
        let opts = LitOptions::default();
        let (pc, price) = price_best(words, *width, &sibs, &opts);
        let (ec, payload) = encode_best(words, *width, &sibs, &opts);
        let exact = payload.len();
        // Within 1% (or 64 bytes) of the exact size of its own codec,
        // and no more than 1% above what encode_best wrote.
        let own = encode_with(pc, words, *width, pc.sibling().map(|_| &sib[..])).len();
        assert!(
            price.abs_diff(own) <= (own / 100).max(64),
            "{pc:?}: {price} vs {own}"
        );
        assert!(
            price <= exact + exact / 100 + 64,
            "{pc:?} {price} vs {ec:?} {exact}"
        );
    }
}

/// A stream Huffman cannot code 5% under its raw size is not counted
/// under contexts: bytes whose high half is their sibling are coded
/// raw (the cost of the rule), priced so, as a sample or whole.
#[test]
fn a_stream_near_raw_is_not_counted_under_contexts() {
    let words: Vec<u64> = (0..40_000u64)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56)
        .collect();
    let high: Vec<u64> = words.iter().map(|w| w >> 4).collect();
    let sibs = [Sibling {
        index: 0,
        words: &high[..],
        width: 4,
        counts: None,
    }];
    let whole = LitOptions::default();
    let sample = LitOptions {
        overhead: 0.5,
        ..whole
    };
    for opts in [whole, sample] {
        assert_eq!(
            price_best(&words, 8, &sibs, &opts),
            (Codec::Raw, words.len())
        );
    }
    assert_eq!(encode_best(&words, 8, &sibs, &whole).0, Codec::Raw);
    // One Huffman compresses (32 of 256 values) is counted under its
    // contexts, and they win.
    let low: Vec<u64> = words.iter().map(|w| (w >> 4) * 16 + (w & 1)).collect();
    for opts in [whole, sample] {
        let (c, _) = price_best(&low, 8, &sibs, &opts);
        assert!(c.same_kind(Codec::RansCond { sibling: 0 }), "{c:?}");
    }
    let (c, p) = encode_best(&low, 8, &sibs, &whole);
    assert!(c.same_kind(Codec::RansCond { sibling: 0 }), "{c:?}");
    assert!(p.len() < low.len() / 6, "{}", p.len());
}

/// price_best and encode_best decide the rule above on the same
/// number: near the line (order-0 rANS just under 95% of raw), they
/// weighed the context coder on one side only (when the rule was on
/// the cheapest order-0 price), and the price was twice what
/// encode_best wrote.
#[test]
fn price_and_encode_agree_near_the_raw_line() {
    for step in 0..12 {
        let q = 0.2700 + 0.001 * step as f64;
        let mut x: u64 = 12495;
        let mut r = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 33
        };
        let sib: Vec<u64> = (0..60_000).map(|_| r() & 15).collect();
        let words: Vec<u64> = sib
            .iter()
            .map(|&s| {
                let zero = ((r() % 1_000_000) as f64 / 1e6) < q;
                (s << 4) | if zero { 0 } else { r() & 15 }
            })
            .collect();
        let sibs = [Sibling {
            index: 0,
            words: &sib[..],
            width: 4,
            counts: None,
        }];
        let opts = LitOptions::default();
        let (pc, price) = price_best(&words, 8, &sibs, &opts);
        let (ec, payload) = encode_best(&words, 8, &sibs, &opts);
        let exact = payload.len();
        assert!(
            price <= exact + exact / 100 + 64 && exact <= price + price / 100 + 64,
            "q {q}: {pc:?} {price} vs {ec:?} {exact}"
        );
    }
}

#[test]
fn packed_rans_wins_on_correlated_signs() {
    // Signs in runs of 4 (as across a kernel's taps): the packed byte
    // histogram sees the runs, a per-sign order-0 coder cannot.
    let words: Vec<u64> = skewed(77, 50_000, 2)
        .into_iter()
        .flat_map(|s| [s; 4])
        .collect();
    let (c, p) = encode_best(&words, 1, &[], &LitOptions::default());
    assert_eq!(c, Codec::PackedRans0);
    assert!(p.len() < words.len() / 8 / 3, "{}", p.len());
}

pub(crate) fn skewed(seed: u64, n: usize, alphabet: u64) -> Vec<u64> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let a = x % alphabet;
            let b = (x >> 20) % alphabet;
            a.min(b)
        })
        .collect()
}

/// Priced as a sample of a region four times as long (with the same
/// statistics), a stream bears a quarter of its tables (and other
/// fixed bytes): four times its price is the region's price.
#[test]
fn a_sample_bears_its_share_of_the_region_tables() {
    // A smooth skew over 256 symbols: its table is 1.5% of it.
    let sample = skewed(9, 8_000, 256);
    let region: Vec<u64> = sample.repeat(4);
    let opts = |overhead| LitOptions {
        zstd_level: None,
        contexts: Contexts::NONE,
        overhead,
        time: 1.0,
    };
    let (_, region_bytes) = price_best(&region, 8, &[], &opts(1.0));
    let (_, sample_bytes) = price_best(&sample, 8, &[], &opts(0.25));
    let (_, whole_bytes) = price_best(&sample, 8, &[], &opts(1.0));

    let four = 4 * sample_bytes;
    assert!(
        four.abs_diff(region_bytes) * 500 <= region_bytes,
        "{four} vs {region_bytes}"
    );
    // Priced whole, the sample would bear all its tables.
    assert!(4 * whole_bytes > region_bytes + region_bytes / 100);
}

#[test]
fn every_codec_round_trips_skewed_bytes() {
    for n in [0usize, 1, 3, 4, 5, 100, 5000, 70_000] {
        let words = skewed(n as u64 + 7, n, 200);
        let sib = skewed(n as u64 + 99, n, 16);
        for c in all_codecs() {
            let p = encode_with(c, &words, 8, Some(&sib));
            let mut out: Vec<u64> = Vec::new();
            decode(c, &p, 8, n, Some(&sib), &mut out)
                .unwrap_or_else(|e| panic!("{c:?} n={n}: {e}"));
            assert_eq!(out, words, "{c:?} n={n}");
        }
    }
}

#[test]
fn byte_output_matches_word_output() {
    let words = skewed(9, 10_000, 200);
    let sib = skewed(10, 10_000, 16);
    let sib8: Vec<u8> = sib.iter().map(|&x| x as u8).collect();
    for c in all_codecs() {
        let p = encode_with(c, &words, 8, Some(&sib));
        let mut wide: Vec<u64> = Vec::new();
        decode(c, &p, 8, words.len(), Some(&sib), &mut wide).unwrap();
        let mut narrow: Vec<u8> = Vec::new();
        decode(c, &p, 8, words.len(), Some(&sib8), &mut narrow).unwrap();
        assert_eq!(
            narrow.iter().map(|&b| b as u64).collect::<Vec<_>>(),
            wide,
            "{c:?}"
        );
    }
}

#[test]
#[cfg(feature = "search")]
fn fields_of_one_byte_are_counted_from_its_histogram() {
    let words = skewed(9, 20_000, 60000);
    // Pairs of fields in one byte: 1+5+2 (3), 4+4 and 3+5 (1 each),
    // 2+3+3 (3); none in 3+6+7 (no byte holds two whole fields).
    for (fields, pairs) in [
        (vec![1u8, 5, 2, 8], 3),
        (vec![4, 4, 3, 5], 2),
        (vec![2, 3, 3, 8], 3),
        (vec![3, 6, 7], 0),
    ] {
        let split = crate::dsl::Split::Fields(fields.clone());
        let parts = split.split_bytes(&words).unwrap();
        let known = byte_field_counts(&fields, &parts, |_, _| true);
        assert_eq!(
            known.iter().map(Vec::len).sum::<usize>(),
            pairs,
            "{fields:?}"
        );
        for (i, k) in known.iter().enumerate() {
            for (j, c) in k {
                let want = rans::count(&parts[i], &Context::Sibling(&parts[*j as usize]));
                assert_eq!(c, &want, "{fields:?}: {i} under {j}");
            }
        }
    }
    // Only the pairs asked for.
    let split = crate::dsl::Split::Fields(vec![1, 5, 2, 8]);
    let parts = split.split_bytes(&words).unwrap();
    let known = byte_field_counts(&[1, 5, 2, 8], &parts, |i, j| (i, j) == (2, 1));
    assert_eq!(known.iter().map(Vec::len).collect::<Vec<_>>(), [0, 0, 1, 0]);
}

#[test]
fn huffman_exact_size_is_exact() {
    for (seed, n, a) in [
        (1u64, 100usize, 3u64),
        (2, 5000, 200),
        (3, 70_000, 40),
        (4, 17, 256),
    ] {
        let words = skewed(seed, n, a);
        let mut counts = [0u32; 256];
        for &w in &words {
            counts[w as usize] += 1;
        }
        assert_eq!(huffman::exact_size(&counts), huffman::encode(&words).len());
    }
}

#[test]
fn best_is_smaller_than_raw_on_skewed_data() {
    let words = skewed(3, 100_000, 40);
    let (c, p) = encode_best(&words, 8, &[], &LitOptions::default());
    assert!(p.len() < 100_000 * 6 / 8, "{c:?} {}", p.len());
    let mut out: Vec<u64> = Vec::new();
    decode(c, &p, 8, words.len(), None, &mut out).unwrap();
    assert_eq!(out, words);
}

#[test]
fn order1_wins_on_markov_data() {
    // Each word depends on the previous one: order-1 must win clearly.
    let mut words = Vec::new();
    let noise = skewed(5, 200_000, 4);
    let mut prev = 0u64;
    for z in noise {
        prev = (prev * 7 + 3 + z) % 64;
        words.push(prev);
    }
    // 200000 words: the 32-state variant; a shorter stream: 4 states.
    for (len, want) in [(200_000, Codec::Rans1x32), (50_000, Codec::Rans1)] {
        let words = &words[..len];
        let (c, p) = encode_best(words, 8, &[], &LitOptions::default());
        assert_eq!(c, want);
        let mut out: Vec<u64> = Vec::new();
        decode(c, &p, 8, words.len(), None, &mut out).unwrap();
        assert_eq!(out, words);
    }
}

#[test]
fn corrupt_payloads_error_or_differ_never_panic() {
    let words = skewed(11, 3000, 100);
    let narrow = skewed(12, 3000, 4);
    let cases = all_codecs().into_iter().map(|c| (c, 8, &words)).chain([
        (Codec::PackedRans0, 2, &narrow),
        (Codec::PackedRans0x32, 2, &narrow),
    ]);
    for (c, width, words) in cases {
        let p = encode_with(c, words, width, Some(words));
        for cut in 0..p.len().min(64) {
            let mut out: Vec<u64> = Vec::new();
            let _ = decode(c, &p[..cut], width, words.len(), Some(words), &mut out);
        }
        for i in 0..p.len().min(200) {
            let mut q = p.clone();
            q[i] ^= 0x5A;
            let mut out: Vec<u64> = Vec::new();
            let _ = decode(c, &q, width, words.len(), Some(words), &mut out);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn prop_round_trip_any_width(width in 1u8..=64, seed: u64, n in 0usize..3000) {
        let mask = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
        let words: Vec<u64> = skewed(seed, n, u64::MAX).into_iter().map(|w| w.wrapping_mul(seed | 1) & mask).collect();
        let (c, p) = encode_best(&words, width, &[], &LitOptions { zstd_level: Some(1), ..LitOptions::default() });
        let mut out: Vec<u64> = Vec::new();
        decode(c, &p, width, n, None, &mut out).unwrap();
        prop_assert_eq!(out, words);
    }

    #[test]
    fn prop_varint(v: u64) {
        let mut b = Vec::new();
        put_varint(&mut b, v);
        prop_assert_eq!(b.len(), varint_len(v));
        prop_assert_eq!(ByteReader::new(&b).varint().unwrap(), v);
    }
}
