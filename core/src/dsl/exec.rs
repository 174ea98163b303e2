//! The interpreter: executes a program to exactly its words.

use std::borrow::Cow;

use super::{MapOp, Node, ScanOp, Split, mask};
use crate::entropy::Codec;
use crate::error::DecodeError;

/// Supplies the words a [`Node::Ref`] names.
pub trait Resolver {
    /// Words `offset..offset+n` of segment `segment` read as `width`-bit words.
    fn resolve(
        &self,
        segment: u32,
        offset: u64,
        n: u64,
        width: u8,
    ) -> Result<Vec<u64>, DecodeError>;
}

/// A resolver for programs that must not contain references.
pub struct NoRefs;

impl Resolver for NoRefs {
    fn resolve(&self, segment: u32, _: u64, _: u64, _: u8) -> Result<Vec<u64>, DecodeError> {
        Err(DecodeError::corrupt(format!(
            "reference to segment {segment} where none is allowed"
        )))
    }
}

/// Execute a (validated) program.
pub fn execute(node: &Node, refs: &dyn Resolver) -> Result<Vec<u64>, DecodeError> {
    let mut out = Vec::with_capacity(node.len() as usize);
    exec_into(node, refs, &[], &mut out)?;
    Ok(out)
}

/// Execute a region program straight into `dst`, the little-endian bytes
/// of its words (`width` of 8, 16, 32 or 64), which must be exactly as
/// long as they are. The common shapes (a byte literal, a `Merge` or
/// `Interleave` of byte-wide leaves) decode their leaves as bytes and
/// assemble the output in place; anything else goes through [`execute`].
pub fn execute_to(
    node: &Node,
    refs: &dyn Resolver,
    width: u8,
    dst: &mut [u8],
) -> Result<(), DecodeError> {
    let bpw = crate::words::le_bytes_per_word(width) as u64;
    if node.len().checked_mul(bpw) != Some(dst.len() as u64) {
        return Err(DecodeError::corrupt(format!(
            "program of {} words of {width} bits for {} bytes",
            node.len(),
            dst.len()
        )));
    }
    if let Some(r) = fast_bytes(node, width, dst) {
        return r;
    }
    let words = execute(node, refs)?;
    crate::words::words_to_slice(&words, width, dst);
    Ok(())
}

/// [`execute_to`] into a new buffer.
#[cfg(test)]
pub fn execute_bytes(node: &Node, refs: &dyn Resolver, width: u8) -> Result<Vec<u8>, DecodeError> {
    let len = node.len() as usize * crate::words::le_bytes_per_word(width);
    let mut out = vec![0u8; len];
    execute_to(node, refs, width, &mut out)?;
    Ok(out)
}

/// A leaf of at most 8 bits decoded as bytes, or `None` if not such a
/// leaf. A raw byte literal is its own payload, lent without a copy.
/// `sibling(i)`: the bytes of child `i` of the same `Merge`, for a
/// conditional coder.
fn leaf_bytes<'a, 's>(
    node: &'a Node,
    sibling: impl Fn(usize) -> Option<&'s [u8]>,
) -> Option<Result<Cow<'a, [u8]>, DecodeError>> {
    match node {
        Node::Lit {
            width: 8,
            n,
            codec: Codec::Raw,
            payload,
        } if payload.len() as u64 == *n => Some(Ok(Cow::Borrowed(payload))),
        // A zstd frame of bytes decodes straight into its own buffer (not
        // into one and copied to another: two 32 MiB buffers a region).
        Node::Lit {
            width: 8,
            n,
            codec: Codec::Zstd,
            payload,
        } => Some(crate::entropy::zstd_decompress_exact(payload, *n as usize).map(Cow::Owned)),
        Node::Lit {
            width,
            n,
            codec,
            payload,
        } if *width <= 8 => {
            let sib = match codec.sibling() {
                Some(i) => match sibling(i as usize) {
                    Some(s) => Some(s),
                    None => return Some(Err(DecodeError::corrupt("missing conditioning sibling"))),
                },
                None => None,
            };
            let mut v = Vec::with_capacity(*n as usize);
            Some(
                crate::entropy::decode::<u8>(*codec, payload, *width, *n as usize, sib, &mut v)
                    .map(|_| Cow::Owned(v)),
            )
        }
        Node::Const { width, n, word } if *width <= 8 => {
            Some(Ok(Cow::Owned(vec![*word as u8; *n as usize])))
        }
        _ => None,
    }
}

/// A byte leaf of a `Merge` as its fast path reads it: a byte a word, or
/// words of `k` bits packed LSB first (bit-packed and packed rANS
/// literals), unpacked a block at a time as the words are joined rather
/// than whole (two passes over memory fewer).
enum Stream<'a> {
    Bytes(Cow<'a, [u8]>),
    Bits(u32, Cow<'a, [u8]>),
}

impl Stream<'_> {
    /// The bytes, for a conditional sibling (never packed: see
    /// [`merge_streams`]).
    fn bytes(&self) -> Option<&[u8]> {
        match self {
            Stream::Bytes(b) => Some(b),
            Stream::Bits(..) => None,
        }
    }
}

/// The decoded leaves of a `Merge` of `n` byte-wide words: packed ones
/// left packed unless a later leaf is conditioned on them.
fn merge_streams(children: &[Node], n: usize) -> Result<Vec<Stream<'_>>, DecodeError> {
    let conditions = |i: usize| {
        children
            .iter()
            .any(|c| matches!(c, Node::Lit { codec, .. } if codec.sibling() == Some(i as u8)))
    };
    let mut streams: Vec<Stream<'_>> = Vec::with_capacity(children.len());
    for (i, c) in children.iter().enumerate() {
        let packed = match c {
            Node::Lit {
                width,
                n: m,
                codec,
                payload,
            } if !conditions(i) => {
                crate::entropy::decode_packed(*codec, payload, *width, *m as usize)
            }
            _ => None,
        };
        let s = match packed {
            Some(p) => {
                let (k, data) = p?;
                Stream::Bits(k, data)
            }
            None => {
                let sibling = |j: usize| streams.get(j).and_then(Stream::bytes);
                Stream::Bytes(leaf_bytes(c, sibling).expect("a byte leaf")?)
            }
        };
        if c.len() != n as u64 || matches!(&s, Stream::Bytes(b) if b.len() != n) {
            return Err(DecodeError::corrupt("merge child produced wrong length"));
        }
        streams.push(s);
    }
    Ok(streams)
}

fn is_byte_leaf(node: &Node) -> bool {
    matches!(node, Node::Lit { width, .. } | Node::Const { width, .. } if *width <= 8)
}

/// A leaf of at most 8 bits decoded into `dst` (as long as the leaf), or
/// `None` if not such a leaf. Zstd bytes decode straight in; the rest (a
/// raw payload lent) is copied in.
fn leaf_to(node: &Node, dst: &mut [u8]) -> Option<Result<(), DecodeError>> {
    match node {
        Node::Lit {
            width: 8,
            codec: Codec::Zstd,
            payload,
            ..
        } => Some(crate::entropy::zstd_decompress_into(payload, dst)),
        Node::Const { width, word, .. } if *width <= 8 => {
            dst.fill(*word as u8);
            Some(Ok(()))
        }
        _ => Some(leaf_bytes(node, |_| None)?.and_then(|b| {
            if b.len() != dst.len() {
                return Err(DecodeError::corrupt("literal of the wrong length"));
            }
            dst.copy_from_slice(&b);
            Ok(())
        })),
    }
}

/// Decode `node` into `dst` (checked by [`execute_to`] to be as long as
/// it) if it has a byte path; `None` (nothing written) if not.
fn fast_bytes(node: &Node, width: u8, dst: &mut [u8]) -> Option<Result<(), DecodeError>> {
    match node {
        // A rotation of 16- or 32-bit words over byte fields (the fast
        // levels' float split: the exponent in a byte of its own), rotated
        // in place as little-endian words.
        Node::Map {
            op: MapOp::Rotl(r),
            child,
        } if matches!(width, 16 | 32) && child.width() == width => {
            if let Err(e) = fast_bytes(child, width, dst)? {
                return Some(Err(e));
            }
            rotate_le_words(dst, width, *r as u32 % width as u32);
            Some(Ok(()))
        }
        Node::Lit { .. } | Node::Const { .. } if width == 8 => leaf_to(node, dst),
        Node::Merge { split, children }
            if matches!(width, 16 | 32)
                && split.width() == width as u32
                && children.iter().all(is_byte_leaf) =>
        {
            Some((|| {
                let n = node.len() as usize;
                let streams = merge_streams(children, n)?;
                let shifts: Vec<u32> = split
                    .fields()
                    .iter()
                    .scan(split.width(), |s, &f| {
                        *s -= f as u32;
                        Some(*s)
                    })
                    .collect();
                let bpw = width as usize / 8;
                // Words are joined a block at a time, the packed leaves
                // unpacked into buffers that stay in the L1 cache.
                const BLOCK: usize = 2048;
                let packed = streams
                    .iter()
                    .filter(|s| matches!(s, Stream::Bits(..)))
                    .count();
                let mut bufs = vec![[0u8; BLOCK]; packed];
                let mut acc = [0u32; BLOCK];
                for (k, o) in dst.chunks_mut(BLOCK * bpw).enumerate() {
                    let (at, m) = (k * BLOCK, o.len() / bpw);
                    let mut unpacked = bufs.iter_mut();
                    let mut parts: Vec<&[u8]> = Vec::with_capacity(streams.len());
                    for s in &streams {
                        parts.push(match s {
                            Stream::Bytes(b) => &b[at..at + m],
                            Stream::Bits(bits, data) => {
                                let buf =
                                    &mut unpacked.next().expect("a buffer a packed leaf")[..m];
                                // (`at` is a multiple of 8: whole bytes.)
                                crate::entropy::unpack_bytes(
                                    &data[at * *bits as usize / 8..],
                                    *bits,
                                    buf,
                                );
                                buf
                            }
                        });
                    }
                    if merge_words(&parts, &shifts, bpw, o) {
                        continue;
                    }
                    let acc = &mut acc[..m];
                    acc.fill(0);
                    for (s, &shift) in parts.iter().zip(&shifts) {
                        for (a, &b) in acc.iter_mut().zip(s.iter()) {
                            *a |= (b as u32) << shift;
                        }
                    }
                    if bpw == 2 {
                        for (o, a) in o.chunks_exact_mut(2).zip(acc.iter()) {
                            o.copy_from_slice(&(*a as u16).to_le_bytes());
                        }
                    } else {
                        for (o, a) in o.chunks_exact_mut(4).zip(acc.iter()) {
                            o.copy_from_slice(&a.to_le_bytes());
                        }
                    }
                }
                Ok(())
            })())
        }
        Node::Interleave { classes, children }
            if width == 8 && children.iter().all(is_byte_leaf) =>
        {
            Some((|| {
                let streams: Vec<Cow<'_, [u8]>> = children
                    .iter()
                    .map(|c| leaf_bytes(c, |_| None).expect("a byte leaf"))
                    .collect::<Result<_, _>>()?;
                interleave_to(classes, &streams, dst)
            })())
        }
        _ => None,
    }
}

/// Rotate each little-endian word of `width` (16 or 32) bits in `bytes`
/// left by `r`. The fast levels' rotation (one bit right) by a constant,
/// which vectorizes; a rotation by a variable count is a slow instruction
/// a word.
pub(crate) fn rotate_le_words(bytes: &mut [u8], width: u8, r: u32) {
    fn rot<const B: usize>(bytes: &mut [u8], f: impl Fn(u32) -> u32) {
        for w in bytes.chunks_exact_mut(B) {
            let mut le = [0u8; 4];
            le[..B].copy_from_slice(w);
            w.copy_from_slice(&f(u32::from_le_bytes(le)).to_le_bytes()[..B]);
        }
    }
    match (width, r) {
        (_, 0) => {}
        (16, 15) => rot::<2>(bytes, |x| ((x >> 1) | (x << 15)) & 0xffff),
        (32, 31) => rot::<4>(bytes, |x| x.rotate_right(1)),
        (16, r) => rot::<2>(bytes, |x| ((x << r) | (x >> (16 - r))) & 0xffff),
        (_, r) => rot::<4>(bytes, |x| x.rotate_left(r)),
    }
}

/// 16- or 32-bit words (`bpw` bytes) from two to five byte streams, each
/// shifted into place, in one pass (the float splits of f16, bf16 and
/// f32), written to `dst`; false (nothing written) for other counts.
fn merge_words(streams: &[&[u8]], shifts: &[u32], bpw: usize, dst: &mut [u8]) -> bool {
    fn merge<const K: usize, const B: usize>(s: [&[u8]; K], sh: [u32; K], dst: &mut [u8]) {
        for (i, o) in dst.chunks_exact_mut(B).enumerate() {
            let mut w = 0u32;
            for k in 0..K {
                w |= (s[k][i] as u32) << sh[k];
            }
            o.copy_from_slice(&w.to_le_bytes()[..B]);
        }
    }
    // 16-bit words in 16-bit lanes: twice the words a vector of 32-bit
    // ones holds, and no narrowing.
    fn merge16<const K: usize>(s: [&[u8]; K], sh: [u32; K], dst: &mut [u8]) {
        for (i, o) in dst.chunks_exact_mut(2).enumerate() {
            let mut w = 0u16;
            for k in 0..K {
                w |= (s[k][i] as u16) << sh[k];
            }
            o.copy_from_slice(&w.to_le_bytes());
        }
    }
    fn by_width<const K: usize>(s: [&[u8]; K], sh: [u32; K], bpw: usize, dst: &mut [u8]) -> bool {
        match bpw {
            2 => merge16::<K>(s, sh, dst),
            4 => merge::<K, 4>(s, sh, dst),
            _ => return false,
        }
        true
    }
    let s = streams;
    if s.iter().any(|x| x.len() * bpw != dst.len()) || shifts.iter().any(|&x| x >= 8 * bpw as u32) {
        return false;
    }
    let sh = shifts;
    match s.len() {
        2 => by_width([s[0], s[1]], [sh[0], sh[1]], bpw, dst),
        3 => by_width([s[0], s[1], s[2]], [sh[0], sh[1], sh[2]], bpw, dst),
        4 => by_width(
            [s[0], s[1], s[2], s[3]],
            [sh[0], sh[1], sh[2], sh[3]],
            bpw,
            dst,
        ),
        5 => by_width(
            [s[0], s[1], s[2], s[3], s[4]],
            [sh[0], sh[1], sh[2], sh[3], sh[4]],
            bpw,
            dst,
        ),
        _ => false,
    }
}

/// Deal `n` words back from the class streams (inverse of `dsl::deal`),
/// appended to `out`.
fn interleave_into<W: Copy + Default, S: AsRef<[W]>>(
    classes: &[u8],
    streams: &[S],
    n: usize,
    out: &mut Vec<W>,
) -> Result<(), DecodeError> {
    let start = out.len();
    out.resize(start + n, W::default());
    interleave_to(classes, streams, &mut out[start..])
}

/// Deal `dst.len()` words back from the class streams into `dst`.
fn interleave_to<W: Copy + Default, S: AsRef<[W]>>(
    classes: &[u8],
    streams: &[S],
    dst: &mut [W],
) -> Result<(), DecodeError> {
    let short = || DecodeError::corrupt("interleave child too short");
    let (k, n) = (streams.len(), dst.len());
    if n == 0 {
        return Ok(());
    }
    if classes.is_empty() || classes.iter().any(|&c| c as usize >= k) {
        return Err(short());
    }
    let want = super::deal_counts(n as u64, classes, k);
    if streams
        .iter()
        .zip(&want)
        .any(|(s, &w)| (s.as_ref().len() as u64) < w)
    {
        return Err(short());
    }
    let layout = super::Periods::of(classes, k, std::mem::size_of::<W>());
    layout.each(n, |(c, len, off, within), j, m| {
        let per = layout.per[c];
        super::copy_runs(
            dst,
            (j * layout.period + off, layout.period),
            streams[c].as_ref(),
            (j * per + within, per),
            len,
            m,
        );
    });
    Ok(())
}

fn exec_into(
    node: &Node,
    refs: &dyn Resolver,
    siblings: &[Vec<u64>],
    out: &mut Vec<u64>,
) -> Result<(), DecodeError> {
    match node {
        Node::Lit {
            width,
            n,
            codec,
            payload,
        } => {
            let sib = match codec.sibling() {
                Some(sibling) => Some(
                    siblings
                        .get(sibling as usize)
                        .ok_or_else(|| DecodeError::corrupt("missing conditioning sibling"))?
                        .as_slice(),
                ),
                None => None,
            };
            crate::entropy::decode(*codec, payload, *width, *n as usize, sib, out)
        }
        Node::Const { n, word, .. } => {
            out.extend(std::iter::repeat_n(*word, *n as usize));
            Ok(())
        }
        Node::Concat { parts, .. } => {
            for p in parts {
                exec_into(p, refs, &[], out)?;
            }
            Ok(())
        }
        Node::Repeat { k, child } => {
            if *k == 0 || child.is_empty() {
                // The reader rejects these; a hand-built node must not loop.
                return Err(DecodeError::corrupt("repeat of nothing"));
            }
            let start = out.len();
            exec_into(child, refs, &[], out)?;
            let unit = out.len() - start;
            for _ in 1..*k {
                out.extend_from_within(start..start + unit);
            }
            Ok(())
        }
        Node::Ref {
            width,
            n,
            segment,
            offset,
        } => {
            let words = refs.resolve(*segment, *offset, *n, *width)?;
            if words.len() as u64 != *n {
                return Err(DecodeError::corrupt("reference resolved to wrong length"));
            }
            out.extend_from_slice(&words);
            Ok(())
        }
        Node::Map { op, child } => {
            let start = out.len();
            exec_into(child, refs, &[], out)?;
            map_in_place(*op, child.width(), &mut out[start..]);
            Ok(())
        }
        Node::Scan { op, child } => {
            let start = out.len();
            exec_into(child, refs, &[], out)?;
            scan_in_place(*op, child.width(), &mut out[start..]);
            Ok(())
        }
        Node::Merge { split, children } => {
            merge_into(split, children, node.len() as usize, refs, out)
        }
        Node::Interleave { classes, children } => {
            let streams: Vec<Vec<u64>> = children
                .iter()
                .map(|c| execute(c, refs))
                .collect::<Result<_, _>>()?;
            interleave_into(classes, &streams, node.len() as usize, out)
        }
    }
}

/// A `Map`'s op over its child's words of width `w`.
fn map_in_place(op: MapOp, w: u8, words: &mut [u64]) {
    let m = mask(w);
    match op {
        MapOp::Xor(c) => words.iter_mut().for_each(|x| *x ^= c),
        MapOp::Add(c) => words.iter_mut().for_each(|x| *x = x.wrapping_add(c) & m),
        _ => words.iter_mut().for_each(|x| *x = op.apply(*x, w)),
    }
}

/// A `Scan`'s running op over its child's words of width `w`.
fn scan_in_place(op: ScanOp, w: u8, words: &mut [u64]) {
    let m = mask(w);
    let mut acc = 0u64;
    for x in words {
        acc = match op {
            ScanOp::XorDelta => acc ^ *x,
            ScanOp::Diff => acc.wrapping_add(*x) & m,
        };
        *x = acc;
    }
}

/// Append a `Merge` of `n` words: its children executed in order (each
/// with the earlier ones as conditioning siblings), their fields joined.
fn merge_into(
    split: &Split,
    children: &[Node],
    n: usize,
    refs: &dyn Resolver,
    out: &mut Vec<u64>,
) -> Result<(), DecodeError> {
    let fields = split.fields();
    let mut streams: Vec<Vec<u64>> = Vec::with_capacity(children.len());
    for c in children {
        let mut v = Vec::with_capacity(c.len() as usize);
        exec_into(c, refs, &streams, &mut v)?;
        streams.push(v);
    }
    let start = out.len();
    out.resize(start + n, 0);
    let dst = &mut out[start..];
    let mut shift = split.width();
    for (s, &f) in streams.iter().zip(&fields) {
        shift -= f as u32;
        if s.len() != n {
            return Err(DecodeError::corrupt("merge child produced wrong length"));
        }
        for (d, &w) in dst.iter_mut().zip(s) {
            *d |= w << shift;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{Split, wire};
    use super::*;
    use crate::dtype::Dtype;
    use crate::entropy::LitOptions;
    use proptest::prelude::*;

    fn lit(words: &[u64], w: u8) -> Node {
        Node::lit(words, w, &LitOptions::default())
    }

    /// Serialize, check the size rule, parse back, execute.
    fn run(node: &Node) -> Vec<u64> {
        let bytes = wire::write(node);
        assert_eq!(bytes.len(), wire::serialized_size(node));
        // Streamed (payloads written from the node, as the encoder
        // writes regions), the same bytes.
        let mut streamed = Vec::new();
        wire::write_to(node, &mut streamed).expect("a Vec takes every write");
        assert_eq!(streamed, bytes);
        let back = wire::read_exact(&bytes).expect("valid program");
        assert_eq!(&back, node);
        execute(&back, &NoRefs).expect("executes")
    }

    fn words_strategy() -> impl Strategy<Value = (u8, Vec<u64>)> {
        (1u8..=64).prop_flat_map(|w| {
            let m = mask(w);
            let special = prop_oneof![
                Just(0u64),
                Just(m),
                Just(1u64),
                Just(m >> 1),
                any::<u64>().prop_map(move |x| x & m)
            ];
            (Just(w), proptest::collection::vec(special, 0..400))
        })
    }

    /// Float words that include NaN payloads, -0.0, subnormals, infinities.
    fn float_words(d: Dtype) -> impl Strategy<Value = Vec<u64>> {
        let l = d.float_layout().unwrap();
        let w = d.word_bits();
        let m = mask(w);
        let sign = 1u64 << (w - 1);
        let exp_all = mask(l.exponent) << l.mantissa;
        let special = prop_oneof![
            Just(sign),                       // -0.0
            Just(exp_all | 1),                // NaN with payload
            Just(exp_all | mask(l.mantissa)), // NaN all payload
            Just(exp_all),                    // inf
            Just(1u64),                       // smallest subnormal
            Just(sign | mask(l.mantissa)),    // negative subnormal
            any::<u64>().prop_map(move |x| x & m),
        ];
        proptest::collection::vec(special, 0..300)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn lit_round_trips((w, words) in words_strategy()) {
            prop_assert_eq!(run(&lit(&words, w)), words);
        }

        #[test]
        fn const_and_repeat((w, words) in words_strategy(), k in 1u64..5, c: u64) {
            // A Repeat of nothing is not a valid program (see the reader).
            prop_assume!(!words.is_empty());
            let c = c & mask(w);
            let node = Node::Concat { width: w, parts: vec![
                Node::Const { width: w, n: words.len() as u64, word: c },
                Node::Repeat { k, child: Box::new(lit(&words, w)) },
            ]};
            let mut want = vec![c; words.len()];
            for _ in 0..k { want.extend_from_slice(&words); }
            prop_assert_eq!(run(&node), want);
        }

        #[test]
        fn map_inverts((w, words) in words_strategy(), c: u64, r: u8) {
            let m = mask(w);
            let mut ops = vec![MapOp::Xor(c & m), MapOp::Add(c & m), MapOp::Zigzag, MapOp::Gray, MapOp::BitReverse];
            if w > 1 { ops.push(MapOp::Rotl(1 + r % (w - 1))); }
            for op in ops {
                let inv = op.inverse(w);
                let child: Vec<u64> = words.iter().map(|&x| inv.apply(x)).collect();
                let node = Node::Map { op, child: Box::new(lit(&child, w)) };
                prop_assert_eq!(run(&node), words.clone(), "{:?}", op);
            }
        }

        #[test]
        fn scan_inverts((w, words) in words_strategy()) {
            let m = mask(w);
            for op in [ScanOp::XorDelta, ScanOp::Diff] {
                let mut prev = 0u64;
                let deltas: Vec<u64> = words.iter().map(|&x| {
                    let d = match op { ScanOp::XorDelta => x ^ prev, ScanOp::Diff => x.wrapping_sub(prev) & m };
                    prev = x; d
                }).collect();
                let node = Node::Scan { op, child: Box::new(lit(&deltas, w)) };
                prop_assert_eq!(run(&node), words.clone());
            }
        }

        #[test]
        fn merge_splits((w, words) in words_strategy(), cut in 1u8..63) {
            let mut splits = vec![Split::BitPlanes(w)];
            if w % 8 == 0 && w >= 16 { splits.push(Split::BytePlanes(w)); }
            if w >= 2 { let a = 1 + cut % (w - 1); splits.push(Split::Fields(vec![a, w - a])); }
            for split in splits {
                if w < 2 { continue; }
                let parts = split.split(&words);
                let children = parts.iter().zip(split.fields()).map(|(p, f)| lit(p, f)).collect();
                prop_assert_eq!(run(&Node::Merge { split, children }), words.clone());
            }
        }

        #[test]
        fn float_fields((d, words) in prop_oneof![Just(Dtype::F64), Just(Dtype::F32), Just(Dtype::F16), Just(Dtype::BF16), Just(Dtype::F8E4M3), Just(Dtype::F8E5M2)]
                        .prop_flat_map(|d| (Just(d), float_words(d)))) {
            let split = Split::Float(d);
            let parts = split.split(&words);
            // Conditional coder: mantissa given exponent when it fits.
            let mut children: Vec<Node> = parts.iter().zip(split.fields()).map(|(p, f)| lit(p, f)).collect();
            let l = d.float_layout().unwrap();
            if l.mantissa <= 8 && l.exponent <= 8 {
                let payload = crate::entropy::encode_with(crate::entropy::Codec::RansCond { sibling: 1 }, &parts[2], l.mantissa, Some(&parts[1]));
                children[2] = Node::Lit { width: l.mantissa, n: words.len() as u64, codec: crate::entropy::Codec::RansCond { sibling: 1 }, payload };
            }
            prop_assert_eq!(run(&Node::Merge { split, children }), words);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn interleave_deals((w, words) in words_strategy(), raw_classes in proptest::collection::vec(0u8..4, 1..40)) {
            // Renumber classes in order of first appearance.
            let mut map = [u8::MAX; 4];
            let mut k = 0u8;
            let classes: Vec<u8> = raw_classes.iter().map(|&c| {
                if map[c as usize] == u8::MAX { map[c as usize] = k; k += 1; }
                map[c as usize]
            }).collect();
            let parts = super::super::deal(&words, &classes, k as usize);
            let children = parts.iter().map(|p| lit(p, w)).collect();
            prop_assert_eq!(run(&Node::Interleave { classes, children }), words);
        }
    }

    #[test]
    fn fast_byte_paths_match_the_interpreter() {
        let words: Vec<u64> = (0..5000u64)
            .map(|i| (i * 2654435761) & 0xFFFF_FFFF)
            .collect();
        for (w, split) in [
            (16u8, Split::Float(Dtype::BF16)),
            (16, Split::Float(Dtype::F16)),
            (16, Split::Fields(vec![1, 5, 2, 8])),
            (16, Split::BytePlanes(16)),
            (32, Split::Fields(vec![1, 8, 7, 8, 8])),
            (32, Split::Float(Dtype::F32)),
            (32, Split::BytePlanes(32)),
        ] {
            let m = mask(w);
            let ws: Vec<u64> = words.iter().map(|x| x & m).collect();
            let parts = split.split(&ws);
            let children = parts
                .iter()
                .zip(split.fields())
                .map(|(p, f)| lit(p, f))
                .collect();
            let node = Node::Merge { split, children };
            let fast = execute_bytes(&node, &NoRefs, w).unwrap();
            let mut slow = Vec::new();
            for x in execute(&node, &NoRefs).unwrap() {
                slow.extend_from_slice(&x.to_le_bytes()[..w as usize / 8]);
            }
            assert_eq!(fast, slow);
        }
        let bytes: Vec<u64> = (0..3400u64).map(|i| (i * 7) % 251).collect();
        let classes = vec![0u8, 1, 2, 2, 2, 2];
        let parts = super::super::deal(&bytes, &classes, 3);
        let node = Node::Interleave {
            classes,
            children: parts.iter().map(|p| lit(p, 8)).collect(),
        };
        let fast = execute_bytes(&node, &NoRefs, 8).unwrap();
        assert_eq!(fast, bytes.iter().map(|&b| b as u8).collect::<Vec<_>>());
    }

    /// A `Merge` whose narrow leaves are bit-packed or packed rANS decodes
    /// on the byte path (those leaves unpacked a block at a time) as the
    /// interpreter does: lengths off the block and byte grid, a leaf
    /// conditioned on a packed one (which must then be unpacked whole),
    /// and a packed leaf of the wrong length refused.
    #[test]
    fn packed_leaves_of_a_merge_match_the_interpreter() {
        use crate::entropy::{Sibling, encode_cheapest};
        let lit_as = |codec: Codec, words: &[u64], width: u8, sib: Option<(u8, &[u64])>| {
            let sibs: Vec<Sibling<'_>> = sib
                .map(|(index, words)| Sibling {
                    index,
                    words,
                    width: 8,
                    counts: None,
                })
                .into_iter()
                .collect();
            let (c, payload) = encode_cheapest(&[codec], words, width, &sibs);
            assert_eq!(c, codec);
            Node::Lit {
                width,
                n: words.len() as u64,
                codec,
                payload,
            }
        };
        for n in [1usize, 7, 8, 2047, 2048, 2049, 5003, 70_001] {
            // bf16-like: biased signs, a narrow exponent, noisy mantissas.
            let words: Vec<u64> = (0..n as u64)
                .map(|i| {
                    let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
                    ((h % 7 == 0) as u64) << 15 | (118 + h % 9) << 7 | (h >> 9) & 0x7f
                })
                .collect();
            let split = Split::Float(Dtype::BF16);
            let p = split.split(&words);
            for (sign, exponent, mantissa) in [
                (Codec::PackedRans0, Codec::Rans0, Codec::BitPack),
                (
                    Codec::BitPack,
                    Codec::RansCond { sibling: 0 },
                    Codec::BitPack,
                ),
                (
                    Codec::PackedRans0,
                    Codec::RansCond { sibling: 0 },
                    Codec::Raw,
                ),
            ] {
                let children = vec![
                    lit_as(sign, &p[0], 1, None),
                    lit_as(
                        exponent,
                        &p[1],
                        8,
                        exponent.sibling().map(|i| (i, &p[0][..])),
                    ),
                    lit_as(mantissa, &p[2], 7, None),
                ];
                let node = Node::Merge {
                    split: split.clone(),
                    children,
                };
                let fast = execute_bytes(&node, &NoRefs, 16).unwrap();
                let mut slow = Vec::new();
                for x in execute(&node, &NoRefs).unwrap() {
                    slow.extend_from_slice(&x.to_le_bytes()[..2]);
                }
                assert!(
                    fast == slow,
                    "{n} words, {sign:?} {exponent:?} {mantissa:?}"
                );
                let mut words_back = Vec::new();
                for w in fast.chunks_exact(2) {
                    words_back.push(u16::from_le_bytes([w[0], w[1]]) as u64);
                }
                assert_eq!(words_back, words);
            }
            // A bit-packed leaf one word short: corrupt, on either path.
            if n > 8 {
                let children = vec![
                    lit_as(Codec::BitPack, &p[0][1..], 1, None),
                    lit_as(Codec::Rans0, &p[1], 8, None),
                    lit_as(Codec::BitPack, &p[2], 7, None),
                ];
                let node = Node::Merge {
                    split: split.clone(),
                    children,
                };
                let mut dst = vec![0u8; 2 * n];
                assert!(execute_to(&node, &NoRefs, 16, &mut dst).is_err());
            }
        }
    }

    /// `Map[rotl r]` over byte planes (the fast levels' float split, `r`
    /// = width - 1) decodes on the byte path as the interpreter does, for
    /// every rotation (constant or not).
    #[test]
    fn rotated_byte_planes_match_the_interpreter() {
        for w in [16u8, 32] {
            let ws: Vec<u64> = (0..3000u64)
                .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) & mask(w))
                .collect();
            for r in 0..w {
                let split = Split::BytePlanes(w);
                let children = split.split(&ws).iter().map(|p| lit(p, 8)).collect();
                let node = Node::Map {
                    op: MapOp::Rotl(r),
                    child: Box::new(Node::Merge { split, children }),
                };
                let mut fast = vec![0u8; ws.len() * w as usize / 8];
                fast_bytes(&node, w, &mut fast)
                    .expect("the byte path")
                    .unwrap();
                let mut slow = Vec::new();
                for x in execute(&node, &NoRefs).unwrap() {
                    slow.extend_from_slice(&x.to_le_bytes()[..w as usize / 8]);
                }
                assert!(fast == slow, "width {w}, rotl {r}");
            }
        }
    }

    #[test]
    fn raw_literals_decode_to_their_payload() {
        for w in [8u8, 16, 32, 64] {
            let words: Vec<u64> = (0..1000u64)
                .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) & mask(w))
                .collect();
            let bytes: Vec<u8> = words
                .iter()
                .flat_map(|x| x.to_le_bytes()[..w as usize / 8].to_vec())
                .collect();
            let raw = |payload: Vec<u8>| Node::Lit {
                width: w,
                n: words.len() as u64,
                codec: Codec::Raw,
                payload,
            };
            assert_eq!(
                execute_bytes(&raw(bytes.clone()), &NoRefs, w).unwrap(),
                bytes
            );
            // A payload a byte short or long is corrupt, not a shorter or
            // longer region.
            for bad in [bytes[1..].to_vec(), [bytes.as_slice(), &[0]].concat()] {
                assert!(execute_bytes(&raw(bad), &NoRefs, w).is_err());
            }
            // Through the interpreter (words, then their bytes).
            let node = Node::Concat {
                width: w,
                parts: vec![lit(&words[..500], w), lit(&words[500..], w)],
            };
            assert_eq!(execute_bytes(&node, &NoRefs, w).unwrap(), bytes);
        }
    }

    #[test]
    fn hostile_programs_are_rejected() {
        // Repeat that would blow up memory.
        let big = Node::Repeat {
            k: 1 << 40,
            child: Box::new(Node::Const {
                width: 8,
                n: 1 << 20,
                word: 0,
            }),
        };
        assert!(wire::read_exact(&wire::write(&big)).is_err());
        // Deep nesting.
        let mut n = Node::Const {
            width: 8,
            n: 1,
            word: 0,
        };
        for _ in 0..100 {
            n = Node::Scan {
                op: ScanOp::Diff,
                child: Box::new(n),
            };
        }
        assert!(wire::read_exact(&wire::write(&n)).is_err());
        // Every truncation of a valid program fails cleanly.
        let words: Vec<u64> = (0..1000).map(|i| (i * 7 % 13) as u64).collect();
        let p = Node::Merge {
            split: Split::Fields(vec![4, 4]),
            children: Split::Fields(vec![4, 4])
                .split(&words)
                .iter()
                .map(|s| lit(s, 4))
                .collect(),
        };
        let bytes = wire::write(&p);
        for cut in 0..bytes.len() {
            assert!(wire::read_exact(&bytes[..cut]).is_err());
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0xFF;
            if let Ok(node) = wire::read_exact(&b) {
                let _ = execute(&node, &NoRefs);
            }
        }
    }
}
