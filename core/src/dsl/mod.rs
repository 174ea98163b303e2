//! The program language.
//!
//! Every value is a stream of `n` words of `width` bits. A [`Node`] of type
//! `u<width>[n]` executes to exactly `n` such words. Productions:
//!
//! - [`Node::Lit`]: the words, coded with a wire [`Codec`]; the universal leaf.
//! - [`Node::Const`]: `n` copies of one word.
//! - [`Node::Concat`]: its parts one after another (same width).
//! - [`Node::Repeat`]: `k` copies of its child's words.
//! - [`Node::Ref`]: words equal to an earlier segment's words of the same file.
//! - [`Node::Map`]: a width-preserving bijection applied to each child word;
//!   it inverts [`MapOp::inverse`].
//! - [`Node::Scan`]: a running xor or sum over the child (inverts a delta).
//! - [`Node::Merge`]: each word is the concatenation of its children's words
//!   (fields, most significant first): IEEE float fields, bit fields, byte
//!   planes, bit planes.
//!
//! Programs have a canonical serialization ([`wire`]) and an interpreter
//! ([`exec`]).

pub mod exec;
pub mod wire;

use std::fmt;

use crate::dtype::Dtype;
pub use crate::entropy::Codec;
pub use crate::words::mask;

/// Largest number of words a node may produce (one region).
pub const MAX_NODE_WORDS: u64 = 1 << 22;
/// Largest region of a bytes segment (format v4+): a program that is one
/// byte literal (`Lit` of width 8, codec `Raw` or `Zstd`, no parent) may
/// produce this many words, 32 MiB, decoded straight to bytes. One zstd
/// window sees a whole region, so plain files and long headers are not
/// cut where 4 MiB regions would lose zstd's long matches.
pub const MAX_BYTE_REGION_WORDS: u64 = 1 << 25;
/// Largest sum of the word counts of all nodes of one program: bounds the
/// memory an interpreter run may allocate (8 bytes a word).
pub const MAX_PROGRAM_WORK: u64 = 1 << 24;
/// Deepest nesting of a program.
pub const MAX_DEPTH: usize = 24;
/// Most nodes in one program.
pub const MAX_NODES: usize = 4096;

/// A width-preserving bijection on words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum MapOp {
    /// `x ^ c`.
    Xor(u64),
    /// `x + c` modulo `2^width`.
    Add(u64),
    /// Zigzag: signed two's complement `x` -> `(x << 1) ^ (x >> (width-1))`.
    Zigzag,
    /// Gray code `x ^ (x >> 1)`.
    Gray,
    /// Rotate left by `r` bits within the width.
    Rotl(u8),
    /// Reverse the order of the `width` bits.
    BitReverse,
}

/// A running operation over the child stream (`out[i] = out[i-1] op child[i]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ScanOp {
    /// Running xor: inverts a previous-word xor delta.
    XorDelta,
    /// Running sum modulo `2^width`: inverts a modular difference.
    Diff,
}

/// How a `Merge` splits a word into fields.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Split {
    /// IEEE fields: sign, exponent, mantissa (most significant first).
    Float(Dtype),
    /// Arbitrary bit fields, most significant first; widths sum to the word width.
    Fields(Vec<u8>),
    /// The bytes of the word, most significant byte first.
    BytePlanes(u8),
    /// The bits of the word, most significant bit first.
    BitPlanes(u8),
}

impl Split {
    /// Widths of the fields, most significant first.
    pub fn fields(&self) -> Vec<u8> {
        match self {
            Split::Float(d) => match d.float_layout() {
                Some(l) => vec![1, l.exponent, l.mantissa],
                None => vec![d.word_bits()],
            },
            Split::Fields(f) => f.clone(),
            Split::BytePlanes(w) => vec![8; (*w as usize).div_ceil(8)],
            Split::BitPlanes(w) => vec![1; *w as usize],
        }
    }

    /// Width of the merged word.
    pub fn width(&self) -> u32 {
        self.fields().iter().map(|&f| f as u32).sum()
    }

    /// Split words into field streams (the encoder's decomposition).
    pub fn split(&self, words: &[u64]) -> Vec<Vec<u64>> {
        let fields = self.fields();
        let mut shifts = Vec::with_capacity(fields.len());
        let mut s = self.width();
        for &f in &fields {
            s -= f as u32;
            shifts.push(s);
        }
        fields
            .iter()
            .zip(&shifts)
            .map(|(&f, &sh)| {
                let m = mask(f);
                words.iter().map(|&w| (w >> sh) & m).collect()
            })
            .collect()
    }

    /// [`Split::split_bytes`] of the little-endian words in `bytes` (of
    /// this split's width: 8, 16 or 32 bits), without widening them to
    /// `u64` first; `None` for other widths or fields above 8 bits.
    pub fn split_le_bytes(&self, bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
        let fields = self.fields();
        if fields.iter().any(|&f| f > 8) {
            return None;
        }
        let width = self.width();
        let bpw = width as usize / 8;
        if !matches!(width, 8 | 16 | 32) || !bytes.len().is_multiple_of(bpw) {
            return None;
        }
        let n = bytes.len() / bpw;
        let mut s = width;
        Some(
            fields
                .iter()
                .map(|&f| {
                    s -= f as u32;
                    let (sh, m) = (s, mask(f) as u32);
                    // Indexed loops over a preallocated field: these
                    // vectorize (the shift is the same for every word).
                    // Every byte of `out` is written below.
                    let mut out = field_buffer(n);
                    match width {
                        8 => {
                            for (o, &b) in out.iter_mut().zip(bytes) {
                                *o = ((b as u32 >> sh) & m) as u8;
                            }
                        }
                        16 => {
                            // 16 words a step, read into an array first: 2x
                            // the speed of a word a step (0.08 against 0.18
                            // ns a word and field on SSE2).
                            let (sh, m) = (sh as u16, m as u16);
                            let mut outs = out.chunks_exact_mut(16);
                            let mut ins = bytes.chunks_exact(32);
                            for (o, c) in (&mut outs).zip(&mut ins) {
                                let mut w = [0u16; 16];
                                for (j, w) in w.iter_mut().enumerate() {
                                    *w = u16::from_le_bytes([c[2 * j], c[2 * j + 1]]);
                                }
                                for (o, w) in o.iter_mut().zip(w) {
                                    *o = ((w >> sh) & m) as u8;
                                }
                            }
                            let rest = ins.remainder().chunks_exact(2);
                            for (o, c) in outs.into_remainder().iter_mut().zip(rest) {
                                *o = ((u16::from_le_bytes([c[0], c[1]]) >> sh) & m) as u8;
                            }
                        }
                        _ => {
                            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                                let w = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                                *o = ((w >> sh) & m) as u8;
                            }
                        }
                    }
                    out
                })
                .collect(),
        )
    }

    /// [`Split::split`] into bytes, when every field has at most 8 bits
    /// (8x less memory than words for the coders that take bytes).
    pub fn split_bytes(&self, words: &[u64]) -> Option<Vec<Vec<u8>>> {
        let fields = self.fields();
        if fields.iter().any(|&f| f > 8) {
            return None;
        }
        let mut s = self.width();
        Some(
            fields
                .iter()
                .map(|&f| {
                    s -= f as u32;
                    let (sh, m) = (s, mask(f));
                    // A loop over a preallocated field vectorizes
                    // (as in `split_le_bytes`); `collect` does not. Every
                    // byte of `out` is written below.
                    let mut out = field_buffer(words.len());
                    for (o, &w) in out.iter_mut().zip(words) {
                        *o = ((w >> sh) & m) as u8;
                    }
                    out
                })
                .collect(),
        )
    }
}

/// Fields a thread has cut and is done with ([`recycle_fields`]), kept
/// for its next cuts: a new field is zeroed (and, for a region's 256K
/// words, faulted in) only to be overwritten by the cut.
const SPARE_FIELDS: usize = 16;
/// Bytes of capacity those may hold in all (per thread).
const SPARE_FIELD_BYTES: usize = 8 << 20;

thread_local! {
    static SPARE: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A buffer of `n` bytes for a field about to be cut, whose every byte the
/// caller overwrites: the smallest spare one at least `n` long, with its
/// old bytes, else the largest spare one grown (zeroed past its old
/// length), else a new zeroed one.
fn field_buffer(n: usize) -> Vec<u8> {
    let spare = SPARE
        .try_with(|s| {
            let mut s = s.borrow_mut();
            let fits = (0..s.len())
                .filter(|&i| s[i].len() >= n)
                .min_by_key(|&i| s[i].len());
            let pick = fits.or_else(|| (0..s.len()).max_by_key(|&i| s[i].len()));
            pick.map(|i| s.swap_remove(i))
        })
        .ok()
        .flatten();
    match spare {
        Some(mut b) if b.len() >= n => {
            b.truncate(n);
            b
        }
        Some(mut b) => {
            b.resize(n, 0);
            b
        }
        None => vec![0u8; n],
    }
}

/// Hands fields cut by [`Split::split_le_bytes`] or [`Split::split_bytes`]
/// back for this thread's next cuts (up to 16 buffers and 8 MiB a thread;
/// the rest are freed).
pub fn recycle_fields(parts: Vec<Vec<u8>>) {
    let _ = SPARE.try_with(|s| {
        let mut s = s.borrow_mut();
        let mut held: usize = s.iter().map(|b| b.capacity()).sum();
        for p in parts {
            if s.len() < SPARE_FIELDS && held + p.capacity() <= SPARE_FIELD_BYTES {
                held += p.capacity();
                s.push(p);
            }
        }
    });
}

impl MapOp {
    /// Apply to one word of `width` bits.
    #[inline]
    pub fn apply(self, x: u64, width: u8) -> u64 {
        let m = mask(width);
        let w = width as u32;
        match self {
            MapOp::Xor(c) => (x ^ c) & m,
            MapOp::Add(c) => x.wrapping_add(c) & m,
            MapOp::Zigzag => {
                let sign = (x >> (w - 1)) & 1;
                ((x << 1) ^ if sign == 1 { m } else { 0 }) & m
            }
            MapOp::Gray => (x ^ (x >> 1)) & m,
            MapOp::Rotl(r) => {
                let r = r as u32 % w;
                if r == 0 {
                    x & m
                } else {
                    ((x << r) | (x >> (w - r))) & m
                }
            }
            MapOp::BitReverse => x.reverse_bits() >> (64 - w),
        }
    }

    /// The inverse bijection.
    pub fn inverse(self, width: u8) -> InverseMap {
        InverseMap { op: self, width }
    }
}

/// The inverse of a [`MapOp`] at a width.
#[derive(Debug, Clone, Copy)]
pub struct InverseMap {
    op: MapOp,
    width: u8,
}

impl InverseMap {
    /// Apply the inverse to one word.
    #[inline]
    pub fn apply(self, y: u64) -> u64 {
        let m = mask(self.width);
        let w = self.width as u32;
        match self.op {
            MapOp::Xor(c) => (y ^ c) & m,
            MapOp::Add(c) => y.wrapping_sub(c) & m,
            MapOp::Zigzag => ((y >> 1) ^ (0u64.wrapping_sub(y & 1))) & m,
            MapOp::Gray => {
                let mut x = y;
                let mut s = 1;
                while s < 64 {
                    x ^= x >> s;
                    s <<= 1;
                }
                x & m
            }
            MapOp::Rotl(r) => MapOp::Rotl(((w - r as u32 % w) % w) as u8).apply(y, self.width),
            MapOp::BitReverse => MapOp::BitReverse.apply(y, self.width),
        }
    }
}

/// A program node. See the module docs for each production.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// Coded words.
    Lit {
        /// Word width.
        width: u8,
        /// Word count.
        n: u64,
        /// Wire codec.
        codec: Codec,
        /// Codec payload.
        payload: Vec<u8>,
    },
    /// `n` copies of `word`.
    Const {
        /// Word width.
        width: u8,
        /// Word count.
        n: u64,
        /// The word.
        word: u64,
    },
    /// Parts in order.
    Concat {
        /// Word width of every part.
        width: u8,
        /// The parts.
        parts: Vec<Node>,
    },
    /// `k` copies of the child.
    Repeat {
        /// Copies.
        k: u64,
        /// The repeated unit.
        child: Box<Node>,
    },
    /// The words `offset..offset+n` of earlier segment `segment`, read as
    /// words of `width` bits.
    Ref {
        /// Word width.
        width: u8,
        /// Word count.
        n: u64,
        /// Index of an earlier segment of the archive.
        segment: u32,
        /// First word.
        offset: u64,
    },
    /// Bijection applied per word.
    Map {
        /// The bijection.
        op: MapOp,
        /// Its input.
        child: Box<Node>,
    },
    /// Running xor / sum.
    Scan {
        /// The scan.
        op: ScanOp,
        /// The deltas.
        child: Box<Node>,
    },
    /// Fields merged into words.
    Merge {
        /// The field split.
        split: Split,
        /// One child per field, most significant first.
        children: Vec<Node>,
    },
    /// Word `i` is the next word of child `classes[i % period]`.
    Interleave {
        /// Class of each position within a period (`classes.len()` is the period).
        classes: Vec<u8>,
        /// One child per class, all of one width.
        children: Vec<Node>,
    },
}

/// Split words by position class: stream `k` gets the words at positions
/// `i` with `classes[i % period] == k`, in order (the encoder's decomposition
/// of [`Node::Interleave`]).
pub fn deal<W: Copy + Default>(words: &[W], classes: &[u8], k: usize) -> Vec<Vec<W>> {
    let mut out: Vec<Vec<W>> = deal_counts(words.len() as u64, classes, k)
        .into_iter()
        .map(|n| vec![W::default(); n as usize])
        .collect();
    if classes.is_empty() {
        return out;
    }
    let layout = Periods::of(classes, k, std::mem::size_of::<W>());
    layout.each(words.len(), |(c, len, off, within), j, m| {
        let per = layout.per[c];
        copy_runs(
            &mut out[c],
            (j * per + within, per),
            words,
            (j * layout.period + off, layout.period),
            len,
            m,
        );
    });
    out
}

/// Where each run of a period's classes lies, for dealing words to their
/// class streams and back a column of periods at a time: a run's words in
/// successive periods are `period` apart in the words and `per[class]`
/// apart in its stream, so each run is copied with its length known, for
/// a block of periods that stays in the L1 cache. (Period by period, run
/// by run, every run was a copy of its own: 0.4-1.0 ns a byte for GGUF
/// blocks of 1-, 4- and 12-byte fields, against 0.2-0.5.)
struct Periods {
    /// `(class, length, offset in the period, offset in the class's share
    /// of the period)` of each run.
    runs: Vec<(usize, usize, usize, usize)>,
    /// Words of each class in a period.
    per: Vec<usize>,
    period: usize,
    /// Periods a block.
    block: usize,
}

impl Periods {
    /// The layout of `classes` (not empty; each below `k`) for words of
    /// `word_bytes` bytes.
    fn of(classes: &[u8], k: usize, word_bytes: usize) -> Self {
        let mut per = vec![0usize; k];
        let mut runs = Vec::new();
        let mut off = 0;
        for (c, len) in class_runs(classes) {
            runs.push((c, len, off, per[c]));
            per[c] += len;
            off += len;
        }
        let period = classes.len();
        let block = (16 << 10) / (period * word_bytes.max(1)).max(1);
        Periods {
            runs,
            per,
            period,
            block: block.max(1),
        }
    }

    /// Calls `f(run, first period, periods)` for the whole periods of `n`
    /// words, a block at a time, then `f(run, n / period, 1)` with each
    /// run cut short by the end for the part period left.
    fn each(&self, n: usize, mut f: impl FnMut((usize, usize, usize, usize), usize, usize)) {
        let full = n / self.period;
        let mut j = 0;
        while j < full {
            let m = self.block.min(full - j);
            for &r in &self.runs {
                f(r, j, m);
            }
            j += m;
        }
        let rest = n - full * self.period;
        for &(c, len, off, within) in &self.runs {
            if off >= rest {
                break;
            }
            f((c, len.min(rest - off), off, within), full, 1);
        }
    }
}

/// `m` runs of `len` words: the one at `s0 + j * ss` in `src` to `d0 + j *
/// ds` in `dst`, for `j < m`. Lengths of GGUF block fields are copied as
/// fixed-size arrays (one move each, not a call to copy a few bytes).
fn copy_runs<W: Copy>(
    dst: &mut [W],
    (d0, ds): (usize, usize),
    src: &[W],
    (s0, ss): (usize, usize),
    len: usize,
    m: usize,
) {
    #[inline(always)]
    fn fixed<W: Copy, const L: usize>(
        dst: &mut [W],
        (d0, ds): (usize, usize),
        src: &[W],
        (s0, ss): (usize, usize),
        m: usize,
    ) {
        for j in 0..m {
            let d: &mut [W; L] = (&mut dst[d0 + j * ds..][..L]).try_into().expect("L words");
            *d = src[s0 + j * ss..][..L].try_into().expect("L words");
        }
    }
    let (d, s) = ((d0, ds), (s0, ss));
    match len {
        1 => fixed::<W, 1>(dst, d, src, s, m),
        2 => fixed::<W, 2>(dst, d, src, s, m),
        4 => fixed::<W, 4>(dst, d, src, s, m),
        8 => fixed::<W, 8>(dst, d, src, s, m),
        12 => fixed::<W, 12>(dst, d, src, s, m),
        16 => fixed::<W, 16>(dst, d, src, s, m),
        32 => fixed::<W, 32>(dst, d, src, s, m),
        _ => {
            for j in 0..m {
                dst[d0 + j * ds..][..len].copy_from_slice(&src[s0 + j * ss..][..len]);
            }
        }
    }
}

/// The runs of one class within a period, `(class, length)` in order: block
/// fields are a few long runs, each copied whole by [`deal`] and by the
/// decoder.
pub(crate) fn class_runs(classes: &[u8]) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &c in classes {
        match runs.last_mut() {
            Some((rc, len)) if *rc == c as usize => *len += 1,
            _ => runs.push((c as usize, 1)),
        }
    }
    runs
}

/// Words of each class in a stream of `n` words dealt with `classes`.
pub fn deal_counts(n: u64, classes: &[u8], k: usize) -> Vec<u64> {
    let p = classes.len().max(1) as u64;
    let (full, rest) = (n / p, (n % p) as usize);
    (0..k)
        .map(|c| {
            let per = classes.iter().filter(|&&x| x as usize == c).count() as u64;
            let tail = classes[..rest].iter().filter(|&&x| x as usize == c).count() as u64;
            full * per + tail
        })
        .collect()
}

impl Node {
    /// Word width of the node's type.
    pub fn width(&self) -> u8 {
        match self {
            Node::Lit { width, .. }
            | Node::Const { width, .. }
            | Node::Concat { width, .. }
            | Node::Ref { width, .. } => *width,
            Node::Repeat { child, .. } | Node::Map { child, .. } | Node::Scan { child, .. } => {
                child.width()
            }
            Node::Merge { split, .. } => split.width() as u8,
            Node::Interleave { children, .. } => children.first().map_or(8, Node::width),
        }
    }

    /// Word count of the node's type.
    pub fn len(&self) -> u64 {
        match self {
            Node::Lit { n, .. } | Node::Const { n, .. } | Node::Ref { n, .. } => *n,
            Node::Concat { parts, .. } => parts.iter().map(Node::len).sum(),
            Node::Repeat { k, child } => k * child.len(),
            Node::Map { child, .. } | Node::Scan { child, .. } => child.len(),
            Node::Merge { children, .. } => children.first().map_or(0, Node::len),
            Node::Interleave { children, .. } => children.iter().map(Node::len).sum(),
        }
    }

    /// Whether the node produces no words.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The literal leaf of `words` coded with the smallest codec.
    #[cfg(test)]
    pub fn lit(words: &[u64], width: u8, opts: &crate::entropy::LitOptions) -> Node {
        let (codec, payload) = crate::entropy::encode_best(words, width, &[], opts);
        Node::Lit {
            width,
            n: words.len() as u64,
            codec,
            payload,
        }
    }

    /// Visit every node, parents first.
    pub fn walk(&self, f: &mut dyn FnMut(&Node)) {
        f(self);
        match self {
            Node::Concat { parts: c, .. }
            | Node::Merge { children: c, .. }
            | Node::Interleave { children: c, .. } => {
                for x in c {
                    x.walk(f);
                }
            }
            Node::Repeat { child, .. } | Node::Map { child, .. } | Node::Scan { child, .. } => {
                child.walk(f)
            }
            _ => {}
        }
    }

    /// Production name.
    pub fn production(&self) -> &'static str {
        match self {
            Node::Lit { .. } => "Lit",
            Node::Const { .. } => "Const",
            Node::Concat { .. } => "Concat",
            Node::Repeat { .. } => "Repeat",
            Node::Ref { .. } => "Ref",
            Node::Map { .. } => "Map",
            Node::Scan { .. } => "Scan",
            Node::Merge { .. } => "Merge",
            Node::Interleave { .. } => "Interleave",
        }
    }
}

impl fmt::Display for MapOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapOp::Xor(c) => write!(f, "xor {c:#x}"),
            MapOp::Add(c) => write!(f, "add {c}"),
            MapOp::Zigzag => f.write_str("zigzag"),
            MapOp::Gray => f.write_str("gray"),
            MapOp::Rotl(r) => write!(f, "rotl {r}"),
            MapOp::BitReverse => f.write_str("bitrev"),
        }
    }
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Split::Float(d) => write!(f, "{}", d.name().to_ascii_lowercase()),
            Split::Fields(w) => {
                let s: Vec<String> = w.iter().map(|x| x.to_string()).collect();
                write!(f, "bits {}", s.join("+"))
            }
            Split::BytePlanes(_) => f.write_str("bytes"),
            Split::BitPlanes(_) => f.write_str("bitplanes"),
        }
    }
}

impl fmt::Display for Node {
    /// Program text, e.g. `Merge[bf16](Lit<bits>, Lit<rans1>, Lit<huff>)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Lit { codec, .. } => write!(f, "Lit<{}>", codec.name()),
            Node::Const { word, .. } => write!(f, "Const({word:#x})"),
            Node::Concat { parts, .. } => {
                // Regions usually share one shape: print it once with a count.
                let texts: Vec<String> = parts.iter().map(|p| p.to_string()).collect();
                if texts.len() > 1 && texts.iter().all(|t| *t == texts[0]) {
                    write!(f, "Concat[{}x]({})", texts.len(), texts[0])
                } else {
                    write!(f, "Concat({})", texts.join(", "))
                }
            }
            Node::Repeat { k, child } => write!(f, "Repeat[{k}]({child})"),
            Node::Ref {
                segment, offset, ..
            } => {
                if *offset == 0 {
                    write!(f, "Ref(#{segment})")
                } else {
                    write!(f, "Ref(#{segment}+{offset})")
                }
            }
            Node::Map { op, child } => write!(f, "Map[{op}]({child})"),
            Node::Scan { op, child } => write!(
                f,
                "Scan[{}]({child})",
                match op {
                    ScanOp::XorDelta => "xor",
                    ScanOp::Diff => "diff",
                }
            ),
            Node::Merge { split, children } => {
                let texts: Vec<String> = children.iter().map(|p| p.to_string()).collect();
                write!(f, "Merge[{split}]({})", texts.join(", "))
            }
            Node::Interleave { classes, children } => {
                let texts: Vec<String> = children.iter().map(|p| p.to_string()).collect();
                write!(f, "Interleave[{}]({})", classes.len(), texts.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests;
