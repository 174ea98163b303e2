use super::*;
use crate::dtype::Dtype;

/// `deal` by its definition: stream `k` gets the words at positions `i`
/// with `classes[i % period] == k`, in order.
fn deal_by_definition<W: Copy>(words: &[W], classes: &[u8], k: usize) -> Vec<Vec<W>> {
    let mut out = vec![Vec::new(); k];
    for (i, &w) in words.iter().enumerate() {
        out[classes[i % classes.len()] as usize].push(w);
    }
    out
}

#[test]
fn blocks_deal_and_interleave_by_their_definition() {
    // GGUF layouts (Q8_0, Q5_0, Q4_K, Q6_K: runs of 1, 4, 12, 16, 32,
    // 64 and 128 words), one of no repeated class, one of scattered
    // classes; word counts of several blocks of periods and a part
    // period, of one part period, and of none.
    let runs = |fields: &[(u8, usize)]| -> Vec<u8> {
        fields
            .iter()
            .flat_map(|&(c, n)| std::iter::repeat_n(c, n))
            .collect()
    };
    let layouts = [
        runs(&[(0, 1), (1, 1), (2, 32)]),
        runs(&[(0, 1), (1, 1), (2, 4), (3, 16)]),
        runs(&[(0, 1), (1, 1), (2, 1), (3, 1), (4, 12), (5, 128)]),
        runs(&[(0, 128), (1, 64), (2, 16), (3, 1), (4, 1)]),
        vec![0, 1, 2, 3, 4],
        vec![0, 1, 0, 2, 2, 1, 0, 3, 3, 3, 1],
    ];
    for classes in &layouts {
        let k = *classes.iter().max().unwrap() as usize + 1;
        for n in [70_001, classes.len() - 1, 0] {
            let words: Vec<u64> = (0..n as u64)
                .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56)
                .collect();
            let parts = deal(&words, classes, k);
            assert_eq!(
                parts,
                deal_by_definition(&words, classes, k),
                "{classes:?} {n}"
            );
            let bytes: Vec<u8> = words.iter().map(|&w| w as u8).collect();
            let byte_parts = deal(&bytes, classes, k);
            assert_eq!(byte_parts, deal_by_definition(&bytes, classes, k));
            if n == 0 {
                continue;
            }
            let lits = |w: u8| -> Vec<Node> {
                parts
                    .iter()
                    .map(|p| Node::lit(p, w, &crate::entropy::LitOptions::default()))
                    .collect()
            };
            let node = Node::Interleave {
                classes: classes.clone(),
                children: lits(8),
            };
            let refs = &exec::NoRefs;
            assert_eq!(exec::execute_bytes(&node, refs, 8).unwrap(), bytes);
            let node = Node::Interleave {
                classes: classes.clone(),
                children: lits(16),
            };
            assert_eq!(exec::execute(&node, refs).unwrap(), words);
        }
    }
}

#[test]
fn fields_cut_from_bytes_match_fields_cut_from_words() {
    let splits = [
        (Split::Float(Dtype::BF16), 16u8),
        (Split::Fields(vec![1, 5, 2, 8]), 16),
        (Split::Fields(vec![1, 8, 7, 8, 8]), 32),
        (Split::Fields(vec![3, 5]), 8),
    ];
    for (split, width) in splits {
        let bpw = width as usize / 8;
        for n in [0u64, 1, 15, 16, 17, 999] {
            let bytes: Vec<u8> = (0..n * bpw as u64)
                .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 29) as u8)
                .collect();
            let words: Vec<u64> = bytes
                .chunks_exact(bpw)
                .map(|c| c.iter().rev().fold(0u64, |a, &b| a << 8 | b as u64))
                .collect();
            assert_eq!(
                split.split_le_bytes(&bytes),
                split.split_bytes(&words),
                "{split:?}"
            );
            if n > 0 {
                assert!(split.split_le_bytes(&bytes[..bytes.len() - 1]).is_none() || bpw == 1);
            }
        }
    }
    // Cut into spare buffers full of other bytes (longer, shorter and
    // as long as the fields), the same fields.
    for (split, width) in [
        (Split::Fields(vec![1, 5, 2, 8]), 16u8),
        (Split::Fields(vec![1, 8, 7, 8, 8]), 32),
        (Split::Fields(vec![3, 5]), 8),
    ] {
        let bpw = width as usize / 8;
        for n in [1usize, 17, 999, 5000] {
            let bytes: Vec<u8> = (0..n * bpw).map(|i| (i * 131 + 7) as u8).collect();
            let words: Vec<u64> = bytes
                .chunks_exact(bpw)
                .map(|c| c.iter().rev().fold(0u64, |a, &b| a << 8 | b as u64))
                .collect();
            let want: Vec<Vec<u8>> = split
                .split(&words)
                .into_iter()
                .map(|f| f.into_iter().map(|w| w as u8).collect())
                .collect();
            for spare in [n / 2, n, 2 * n + 3] {
                recycle_fields(vec![vec![0xA5; spare]; 6]);
                let cut = split.split_le_bytes(&bytes).unwrap();
                assert_eq!(cut, want, "{split:?} n {n} spare {spare}");
                recycle_fields(cut);
                recycle_fields(vec![vec![0x5A; spare]; 6]);
                let cut = split.split_bytes(&words).unwrap();
                assert_eq!(cut, want, "{split:?} n {n} spare {spare}");
                recycle_fields(cut);
            }
        }
    }
    // Fields above 8 bits, and 64-bit words, take the word path.
    assert!(Split::Fields(vec![4, 12]).split_le_bytes(&[0; 4]).is_none());
    assert!(Split::Float(Dtype::F64).split_le_bytes(&[0; 16]).is_none());
}
