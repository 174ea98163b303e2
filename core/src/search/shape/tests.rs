use super::*;

#[test]
fn raw_literals_from_le_bytes_are_those_from_words() {
    // Words of 16, 32 and 64 bits: noisy (raw), under 256, bit-packable,
    // all equal, periodic, and too few; wherever the bytes give a node
    // it is the one the words give, and they give it for noise.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut noise = |k: usize| -> Vec<u64> {
        (0..k)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            })
            .collect()
    };
    let cfg = Instantiate::default();
    let shape = Shape::Lit(Some(Codec::Raw));
    for width in [16u8, 32, 64] {
        let m = crate::words::mask(width);
        let raw: Vec<u64> = noise(3001).iter().map(|w| w & m).collect();
        let cases = [
            (raw.clone(), true),
            (raw.iter().map(|w| w & 0xff).collect(), false),
            (raw.iter().map(|w| w & 0x3ff).collect(), false),
            (vec![0x1234; 500], false),
            (raw[..40].repeat(50), false),
            (raw[..15].to_vec(), false),
            (raw[..16].to_vec(), true),
        ];
        for (i, (words, fast)) in cases.into_iter().enumerate() {
            let mut bytes = Vec::new();
            crate::words::words_to_bytes(&words, width, &mut bytes);
            let from_bytes = instantiate_le_bytes(&shape, &bytes, width, &Instantiate::default());
            assert_eq!(from_bytes.is_some(), fast, "width {width} case {i}");
            if let Some(node) = from_bytes {
                assert_eq!(
                    node,
                    instantiate(&shape, &words, width, &cfg),
                    "width {width} case {i}"
                );
            }
        }
    }
}

#[test]
fn merges_cut_from_le_bytes_are_the_merges_cut_from_words() {
    // f16 and f32 words with a skewed exponent and a few repeats.
    let words16: Vec<u64> = (0..5000u64)
        .map(|i| {
            ((i % 5 == 0) as u64) << 15
                | (14 + i * i % 3) << 10
                | ((i * 2_654_435_761) >> 7) & 0x3ff
        })
        .collect();
    let words32: Vec<u64> = words16
        .iter()
        .map(|&w| w << 16 | ((w * 31) & 0xffff))
        .collect();
    let holes = |k| vec![Shape::Hole; k];
    let cases = [
        (16, &words16, Split::Fields(vec![1, 5, 2, 8])),
        (16, &words16, Split::BytePlanes(16)),
        (32, &words32, Split::Float(crate::dtype::Dtype::F32)),
        (32, &words32, Split::BytePlanes(32)),
    ];
    for (width, words, split) in cases {
        let k = split.fields().len();
        let mut frozen = vec![Shape::Lit(Some(Codec::Rans0)); k];
        frozen[k - 1] = Shape::Lit(Some(Codec::RansCond { sibling: 0 }));
        let mut bytes = Vec::new();
        crate::words::words_to_bytes(words, width, &mut bytes);
        assert_eq!(bytes.len(), words.len() * width as usize / 8);
        for kids in [holes(k), frozen] {
            let shape = Shape::Merge(split.clone(), kids);
            for priced in [false, true] {
                let cfg = Instantiate {
                    priced,
                    ..Instantiate::default()
                };
                let from_words = instantiate(&shape, words, width, &cfg);
                assert!(matches!(from_words, Node::Merge { .. }));
                let from_bytes = Instantiate {
                    le_bytes: Some(&bytes),
                    ..cfg
                };
                assert_eq!(
                    instantiate(&shape, words, width, &from_bytes),
                    from_words,
                    "{split:?} priced {priced}"
                );
            }
        }
    }
}

#[test]
fn frozen_byte_fields_round_trip() {
    // bf16 words: sign periodic, exponent skewed, mantissa constant
    // over part of the words; the frozen leaves include a conditional
    // coder on an earlier field and one whose sibling does not exist.
    let n = 200_000;
    let words: Vec<u64> = (0..n as u64)
        .map(|i| {
            (((i % 3 == 0) as u64) << 15) | ((120 + (i * i / 7) % 9) << 7) | ((i / 150_000) * 5)
        })
        .collect();
    let split = Split::Float(crate::dtype::Dtype::BF16);
    let shapes = [
        vec![Codec::PackedRans0, Codec::Rans0, Codec::BitPack],
        vec![Codec::Raw, Codec::RansCond { sibling: 0 }, Codec::Huffman],
        vec![Codec::Rans0, Codec::Rans0, Codec::RansCond { sibling: 2 }],
    ];
    for codecs in shapes {
        let shape = Shape::Merge(
            split.clone(),
            codecs.iter().map(|&c| Shape::Lit(Some(c))).collect(),
        );
        for len in [n, 1000, 17, 3] {
            let w = &words[..len];
            let node = instantiate(&shape, w, 16, &Instantiate::default());
            let back = crate::dsl::exec::execute(&node, &crate::dsl::exec::NoRefs).unwrap();
            assert_eq!(back, w, "{codecs:?} on {len} words: {node}");
            assert_eq!(node, instantiate_words(&shape, w), "{codecs:?} {len}");
        }
    }
}

/// [`instantiate`] through the word path (children split as words).
fn instantiate_words(shape: &Shape, words: &[u64]) -> Node {
    let Shape::Merge(split, kids) = shape else {
        unreachable!()
    };
    let parts = split.split(words);
    let fields = split.fields();
    let children = (0..kids.len())
        .map(|i| {
            let sibs: Vec<Sibling<'_>> = (0..i)
                .map(|j| Sibling {
                    index: j as u8,
                    words: &parts[j],
                    width: fields[j],
                    counts: None,
                })
                .collect();
            inst(
                &kids[i],
                &parts[i],
                fields[i],
                &sibs,
                &Instantiate::default(),
                &crate::search::child_label(shape, i),
            )
        })
        .collect();
    Node::Merge {
        split: split.clone(),
        children,
    }
}

#[test]
fn divisors_are_every_divisor_in_order() {
    for n in (1..2000usize).chain([
        1 << 15,
        3 << 14,
        1_000_003,
        2 * 999_983,
        5 * 7 * 11 * 13 * 4096,
    ]) {
        let want: Vec<usize> = (1..=n).filter(|d| n % d == 0).collect();
        assert_eq!(divisors(n).collect::<Vec<_>>(), want, "{n}");
    }
}

#[test]
fn periodic_leaves_become_repeat() {
    let unit: Vec<u64> = (0..100).map(|i| (i * 37 % 251) as u64).collect();
    let words: Vec<u64> = unit.iter().cycle().take(100 * 50).copied().collect();
    let node = instantiate(&Shape::Lit(None), &words, 8, &Instantiate::default());
    assert!(matches!(node, Node::Repeat { k: 50, .. }), "{node}");
    let back = crate::dsl::exec::execute(&node, &crate::dsl::exec::NoRefs).unwrap();
    assert_eq!(back, words);
    assert_eq!(period(&unit), None);
}

#[test]
fn rotated_byte_planes_from_le_bytes_are_those_from_words() {
    // The fast levels' float split of bf16 and f32 words: the search's
    // cut (the sample's bytes at hand), the regions' cut (bytes only) and
    // the words' cut give the same program, which decodes to the words.
    let words16: Vec<u64> = (0..6000u64)
        .map(|i| {
            ((i % 3 == 0) as u64) << 15 | (120 + i * i % 9) << 7 | ((i * 2_654_435_761) >> 9) & 0x7f
        })
        .collect();
    let words32: Vec<u64> = words16
        .iter()
        .map(|&w| w << 16 | ((w * 31) & 0xffff))
        .collect();
    for (width, words) in [(16u8, &words16), (32, &words32)] {
        let k = width as usize / 8;
        let mut bytes = Vec::new();
        crate::words::words_to_bytes(words, width, &mut bytes);
        for kids in [
            vec![Shape::Hole; k],
            vec![Shape::Lit(Some(Codec::Rans0)); k],
        ] {
            let shape = Shape::Map(
                MapOp::Rotl(width - 1),
                Box::new(Shape::Merge(Split::BytePlanes(width), kids)),
            );
            let cfg = Instantiate::default();
            let from_words = instantiate(&shape, words, width, &cfg);
            let with_bytes = Instantiate {
                le_bytes: Some(&bytes),
                ..cfg
            };
            assert_eq!(instantiate(&shape, words, width, &with_bytes), from_words);
            let region = instantiate_le_bytes(&shape, &bytes, width, &cfg).expect("byte leaves");
            assert_eq!(region, from_words);
            let back = crate::dsl::exec::execute(&from_words, &crate::dsl::exec::NoRefs).unwrap();
            assert!(back == *words, "width {width}");
            // The exponent is a byte of its own: the top plane of the
            // rotated words holds bits width-2 .. width-9.
            let Node::Map { child, .. } = &from_words else {
                panic!("a Map")
            };
            let Node::Merge { children, .. } = &**child else {
                panic!("a Merge")
            };
            let top = crate::dsl::exec::execute(&children[0], &crate::dsl::exec::NoRefs).unwrap();
            let exponents: Vec<u64> = words.iter().map(|w| (w >> (width - 9)) & 0xff).collect();
            assert!(top == exponents, "width {width}");
        }
    }
}
