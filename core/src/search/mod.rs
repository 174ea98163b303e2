//! Synthesis: a bounded A* search over program shapes, steered by a prior.
//!
//! A state is a partial program ([`Shape`] with holes). Expanding a state
//! fills its first hole with one production; the key of a state is the prior
//! cost of the productions chosen (`-log2 p`) plus an admissible heuristic
//! for the open holes (zero: any hole may still be a literal, whose prior
//! cost is at least zero). Every complete program is judged by the exact
//! serialized size of the program it produces on a sample of the tensor;
//! the incumbent starts as `Lit(sample)`, so budget 0 still gives a correct
//! program. The budget bounds how many complete programs are judged; the
//! search also stops when every remaining state is far less likely than the
//! incumbent's (a confident prior makes most searches one expansion deep).

mod astar;
pub mod prior;
pub mod shape;

pub use prior::{HoleContext, Prior};
pub use shape::{Instantiate, Shape, instantiate, instantiate_le_bytes};

use astar::{Best, search_shapes};

use crate::dsl::{MapOp, ScanOp, Split, wire};
use crate::dtype::Dtype;

/// Tensors of at most this many words are searched whole: candidates are
/// coded exactly, and the winner is what is written. Larger tensors are
/// priced on a sample and coded once, not once per candidate.
pub const WHOLE_WORDS: u64 = 1 << 15;
/// Words of a larger tensor the search prices candidates on: twice as
/// many take twice the search time for archives the same within a few
/// bytes in a hundred thousand.
pub const SAMPLE_WORDS: u64 = 1 << 15;
/// A row longer than the sample but at most this long is sampled whole
/// (quant blocks stay in phase, and a row is one unit of the data).
pub const WHOLE_ROW_WORDS: u64 = 1 << 16;
/// States more than this many bits less likely than the incumbent's are not
/// judged.
pub const STOP_BITS: f64 = 5.0;
/// [`STOP_BITS`] for a tensor searched whole (at most [`WHOLE_WORDS`]
/// words) under a learned prior: every candidate judged there is coded in
/// full, for a few hundred bytes at stake, where a sampled tensor's
/// candidates cost a sample's pricing for its whole length's gain. Past
/// this stop only the generic codec is still noted (it is judged last,
/// and screened cheaply). A lower stop judges far fewer candidates for a
/// few bytes in a hundred thousand; a much lower one loses real size.
pub const STOP_BITS_WHOLE: f64 = 2.0;

/// The generic codec on whole words (zstd -19, the search's slowest
/// candidate: a few ms on a 64K-word tensor) is judged only where the
/// prior gives it at least 2^-5 (its byte-plane form, zstd -1 then -9, is
/// judged wherever the generic production is reached): where a learned
/// prior has seen it lose, it rarely wins.
pub const GENERIC_MAX_BITS: f64 = 5.0;

/// What the search is asked to code.
#[derive(Debug, Clone)]
pub struct Target<'a> {
    /// The sample's words.
    pub words: &'a [u64],
    /// The same words as the little-endian bytes they were read from
    /// (`width / 8` a word), when the caller has them: float splits cut
    /// their byte fields from these, which are otherwise made from
    /// `words`.
    pub le: Option<&'a [u8]>,
    /// Word width.
    pub width: u8,
    /// Element type.
    pub dtype: Dtype,
    /// Tensor name (for its role).
    pub name: &'a str,
    /// Tensor rank.
    pub rank: usize,
    /// Words in the whole tensor.
    pub total_words: u64,
    /// Words per row (last dimension); the sample starts on a row.
    pub row: u64,
    /// Words per region the tensor is coded in: each region pays its
    /// literals' tables once, so a sample of a longer region bears only
    /// its share of them when priced.
    pub region: u64,
}

/// The search's answer.
#[derive(Debug, Clone)]
pub struct Synthesis {
    /// The chosen shape, leaves frozen to the codecs that won on the sample.
    pub shape: Shape,
    /// Exact size of the program on the sample (the tests check the
    /// search's choice by it).
    #[cfg_attr(not(test), allow(dead_code))]
    pub sample_bytes: usize,
    /// Complete programs judged.
    pub judged: u32,
    /// The chosen program itself when the sample is the whole tensor: it
    /// is then coded exactly, by the literal chooser that weighs the most
    /// codecs, so a tensor in one region need not be coded again.
    pub node: Option<crate::dsl::Node>,
}

/// The sample range of a tensor of `total` words: its middle, starting on
/// a whole row of `row` words when rows fit in the sample.
pub fn sample_range(total: u64, row: u64) -> (u64, u64) {
    let len = if total <= WHOLE_WORDS {
        total
    } else if row > SAMPLE_WORDS && row <= WHOLE_ROW_WORDS {
        // One whole row (quant blocks stay in phase).
        row
    } else {
        SAMPLE_WORDS
    };
    let mut start = (total - len) / 2;
    if row > 1 && row <= len {
        start -= start % row;
    }
    (start, len)
}

/// Field split of a float dtype into entropy-codable fields (<= 8 bits where
/// possible), sign / exponent / mantissa first.
pub fn float_split(d: Dtype) -> Option<Split> {
    Some(match d {
        Dtype::BF16 | Dtype::F8E4M3 | Dtype::F8E5M2 => Split::Float(d),
        Dtype::F16 => Split::Fields(vec![1, 5, 2, 8]),
        Dtype::F32 => Split::Fields(vec![1, 8, 7, 8, 8]),
        Dtype::F64 => Split::Fields(vec![1, 3, 8, 4, 8, 8, 8, 8, 8, 8]),
        _ => return None,
    })
}

/// Byte layouts of GGUF quant blocks: (name, block bytes, field bytes).
/// Two-byte f16 scales are split into their low and high bytes.
const GGUF_BLOCKS: &[(&str, usize, &[usize])] = &[
    ("Q8_0", 34, &[2, 32]),
    ("Q4_0", 18, &[2, 16]),
    ("Q4_1", 20, &[2, 2, 16]),
    ("Q5_0", 22, &[2, 4, 16]),
    ("Q5_1", 24, &[2, 2, 4, 16]),
    ("Q2_K", 84, &[16, 64, 2, 2]),
    ("Q3_K", 110, &[32, 64, 12, 2]),
    ("Q4_K", 144, &[2, 2, 12, 128]),
    ("Q5_K", 176, &[2, 2, 12, 32, 128]),
    ("Q6_K", 210, &[128, 64, 16, 2]),
];

/// Position classes of a block layout: each 2-byte field is two classes
/// (low byte, high byte); a longer field is one class.
pub fn block_classes(fields: &[usize]) -> Vec<u8> {
    let mut classes = Vec::new();
    let mut k = 0u8;
    for &f in fields {
        if f == 2 {
            classes.extend_from_slice(&[k, k + 1]);
            k += 2;
        } else {
            classes.extend(std::iter::repeat_n(k, f));
            k += 1;
        }
    }
    classes
}

/// The row length in words of a tensor (its last dimension), used to align
/// samples and regions to whole rows (and so to whole quant blocks).
pub fn row_words(shape: &[u64]) -> u64 {
    shape.last().copied().unwrap_or(1).max(1)
}

fn is_float(d: Dtype) -> bool {
    d.float_layout().is_some()
}

/// Deepest hole a production other than a literal may fill: the shapes
/// that win nest a few ops (a split, a scan, a map), and every level
/// deeper multiplies the states the search may push.
const MAX_SHAPE_DEPTH: usize = 3;
/// Smallest tensor (in bytes) the generic codec is tried on: below it,
/// zstd's frame and the window it needs to find matches cost more than
/// it can find.
const GENERIC_MIN_BYTES: u64 = 4096;
/// Largest float tensor (in bytes) the generic codec is tried on: zstd
/// -19 is slow, and its long-range repeats (small conv kernels, tied
/// rows) pay on small float tensors only.
const GENERIC_MAX_FLOAT_BYTES: u64 = 4 << 20;

/// Productions that may fill a hole, with the shape each puts there.
fn productions(
    t: &Target<'_>,
    parent: &str,
    width: u8,
    depth: usize,
    level: crate::encode::Level,
) -> Vec<(&'static str, Shape)> {
    let hole = || Box::new(Shape::Hole);
    let mut v: Vec<(&'static str, Shape)> = vec![("lit", Shape::Lit(None))];
    if depth > MAX_SHAPE_DEPTH {
        return v;
    }
    let top = parent == "top";
    let bytes = t.total_words * (t.width as u64 / 8);
    // zstd -19 is slow: for floats it is only tried on small tensors, where
    // long-range repeats (small conv kernels, tied rows) can pay.
    if top && bytes >= GENERIC_MIN_BYTES && (!is_float(t.dtype) || bytes <= GENERIC_MAX_FLOAT_BYTES)
    {
        v.push(("generic", Shape::Generic));
    }
    if top
        && width == t.dtype.word_bits()
        && let Some(s) = float_split(t.dtype)
    {
        if level.fast_floats() && matches!(width, 16 | 32) {
            v.push(("float", fast_float(width)));
        } else {
            let n = s.fields().len();
            v.push(("float", Shape::Merge(s, vec![Shape::Hole; n])));
        }
    }
    if width >= 16 && width.is_multiple_of(8) {
        v.push((
            "bytes",
            Shape::Merge(
                Split::BytePlanes(width),
                vec![Shape::Hole; width as usize / 8],
            ),
        ));
    }
    if top && width >= 8 {
        v.push(("scan_diff", Shape::Scan(ScanOp::Diff, hole())));
        v.push(("scan_xor", Shape::Scan(ScanOp::XorDelta, hole())));
    }
    if top && width == 8 && matches!(t.dtype, Dtype::U8 | Dtype::I8) && t.row > 1 {
        for (name, bytes, fields) in GGUF_BLOCKS {
            if t.row.is_multiple_of(*bytes as u64) {
                let classes = block_classes(fields);
                let k = *classes.iter().max().unwrap_or(&0) as usize + 1;
                v.push((
                    "blocks",
                    Shape::Interleave((*name).into(), classes, vec![Shape::Hole; k]),
                ));
            }
        }
    }
    if parent.starts_with("Scan[diff]") {
        v.push(("zigzag", Shape::Map(MapOp::Zigzag, hole())));
    }
    v.retain(|(name, _)| level.production(name));
    v
}

/// The fast levels' float split: the word rotated left by one bit (the
/// sign to the bottom, the exponent's top bits to the top byte: all 8 of
/// an f32's or bf16's), then cut into bytes, as ZipNN groups them; decoded
/// as byte streams joined and rotated back, without unpacking bit fields.
fn fast_float(width: u8) -> Shape {
    Shape::Map(
        MapOp::Rotl(width - 1),
        Box::new(Shape::Merge(
            Split::BytePlanes(width),
            vec![Shape::Hole; width as usize / 8],
        )),
    )
}

/// Production label of a filled node (inverse of [`productions`]).
fn label(s: &Shape) -> &'static str {
    match s {
        Shape::Hole | Shape::Lit(_) => "lit",
        Shape::Generic | Shape::GenericPlanes => "generic",
        Shape::Merge(Split::BytePlanes(_), _) => "bytes",
        Shape::Merge(..) => "float",
        Shape::Scan(ScanOp::Diff, _) => "scan_diff",
        Shape::Scan(ScanOp::XorDelta, _) => "scan_xor",
        Shape::Map(MapOp::Rotl(_), _) => "float",
        Shape::Map(..) => "zigzag",
        Shape::Interleave(..) => "blocks",
    }
}

/// The label of child `i` of a `Merge` by `split` (a hole's parent).
pub(crate) fn merge_label(split: &Split, i: usize) -> String {
    format!("Merge[{split}].{i}")
}

/// The label of child `i` of `s`: the parent of a hole there.
pub(crate) fn child_label(s: &Shape, i: usize) -> String {
    match s {
        Shape::Merge(split, _) => merge_label(split, i),
        Shape::Interleave(name, _, _) => format!("Interleave[{name}].{i}"),
        Shape::Scan(ScanOp::Diff, _) => "Scan[diff]".into(),
        Shape::Scan(ScanOp::XorDelta, _) => "Scan[xor]".into(),
        Shape::Map(op, _) => format!("Map[{op}]"),
        _ => "top".into(),
    }
}

fn child_widths(s: &Shape, width: u8) -> Vec<u8> {
    match s {
        Shape::Merge(split, _) => split.fields(),
        Shape::Map(..) | Shape::Scan(..) => vec![width],
        Shape::Interleave(_, _, c) => vec![width; c.len()],
        _ => vec![],
    }
}

fn children_mut(s: &mut Shape) -> Vec<&mut Shape> {
    match s {
        Shape::Merge(_, c) | Shape::Interleave(_, _, c) => c.iter_mut().collect(),
        Shape::Map(_, c) | Shape::Scan(_, c) => vec![c.as_mut()],
        _ => vec![],
    }
}

fn children(s: &Shape) -> Vec<&Shape> {
    match s {
        Shape::Merge(_, c) | Shape::Interleave(_, _, c) => c.iter().collect(),
        Shape::Map(_, c) | Shape::Scan(_, c) => vec![c.as_ref()],
        _ => vec![],
    }
}

/// The first hole in preorder of a shape of `width` bits: (parent label,
/// width, depth). Only the hole's parent is labelled (formatting a label
/// for every node on the way is a visible share of the search).
fn first_hole(s: &Shape, width: u8) -> Option<(String, u8, usize)> {
    /// The hole: (its parent and index there, width, depth).
    type Found<'s> = (Option<(&'s Shape, usize)>, u8, usize);
    fn find<'s>(
        s: &'s Shape,
        up: Option<(&'s Shape, usize)>,
        width: u8,
        depth: usize,
    ) -> Option<Found<'s>> {
        if *s == Shape::Hole {
            return Some((up, width, depth));
        }
        let widths = child_widths(s, width);
        children(s)
            .into_iter()
            .enumerate()
            .find_map(|(i, c)| find(c, Some((s, i)), widths[i], depth + 1))
    }
    let (up, width, depth) = find(s, None, width, 0)?;
    let parent = up.map_or_else(|| "top".to_owned(), |(p, i)| child_label(p, i));
    Some((parent, width, depth))
}

fn fill_first(s: &mut Shape, repl: &Shape) -> bool {
    if *s == Shape::Hole {
        *s = repl.clone();
        return true;
    }
    children_mut(s).into_iter().any(|c| fill_first(c, repl))
}

fn context(t: &Target<'_>, parent: String, width: u8) -> HoleContext {
    HoleContext {
        parent,
        width,
        dtype: t.dtype,
        role: prior::role(t.name, t.rank),
        bucket: prior::bucket(t.total_words),
    }
}

/// The prior's leaf model for one target: which context coders each of
/// its literals weighs (see [`Prior::leaf_contexts`]).
#[derive(Debug, Clone, Copy)]
pub struct Leaves<'a> {
    prior: &'a Prior,
    /// The target's hole context, its parent and width to be filled in
    /// (its role and size class worked out once).
    hole: &'a HoleContext,
}

impl Leaves<'_> {
    /// The context coders a literal of `width` bits under `parent` weighs.
    pub fn contexts(&self, parent: &str, width: u8) -> crate::entropy::Contexts {
        self.prior.leaf_contexts(&HoleContext {
            parent: parent.to_owned(),
            width,
            ..self.hole.clone()
        })
    }
}

/// Visit every node of a shape with the context of the hole it fills and
/// the number of words it codes in the sample.
fn walk_holes<'s>(t: &Target<'_>, s: &'s Shape, f: &mut impl FnMut(HoleContext, &'s Shape, u64)) {
    fn walk<'s>(
        t: &Target<'_>,
        s: &'s Shape,
        parent: String,
        width: u8,
        n: u64,
        f: &mut impl FnMut(HoleContext, &'s Shape, u64),
    ) {
        f(context(t, parent, width), s, n);
        let widths = child_widths(s, width);
        let counts = match s {
            Shape::Interleave(_, classes, c) => crate::dsl::deal_counts(n, classes, c.len()),
            _ => Vec::new(),
        };
        for (i, c) in children(s).into_iter().enumerate() {
            let n = counts.get(i).copied().unwrap_or(n);
            walk(t, c, child_label(s, i), widths[i], n, f);
        }
    }
    walk(t, s, "top".into(), t.width, t.words.len() as u64, f);
}

/// Every (context, codec) of the literal leaves of a frozen shape (see
/// [`Shape::freeze`]) long enough for the context coders to have been
/// weighed, for learning the leaf model: a short leaf (a norm's exponents)
/// says nothing about whether they win on a long one.
pub fn leaves_of(t: &Target<'_>, s: &Shape) -> Vec<(HoleContext, crate::entropy::Codec)> {
    let mut out = Vec::new();
    walk_holes(t, s, &mut |ctx, s, n| {
        if let Shape::Lit(Some(c)) = s
            && n >= crate::entropy::CONTEXT_MIN_WORDS as u64
        {
            out.push((ctx, *c));
        }
    });
    out
}

/// Every (context, production) of a complete shape, for learning.
pub fn productions_of(t: &Target<'_>, s: &Shape) -> Vec<(HoleContext, &'static str)> {
    let mut out = Vec::new();
    walk_holes(t, s, &mut |ctx, s, _| out.push((ctx, label(s))));
    out
}

/// Whether the generic codec could beat `incumbent` bytes: zstd -3 of the
/// sample must come within 5% of it before zstd -19 is paid for, and when
/// -3 does not beat it outright, zstd -9 must (-19 wins there only where a
/// deeper parse finds matches the greedy -3 missed, and -9 finds them).
/// `raw` are the target's little-endian bytes.
fn generic_may_win(raw: &[u8], incumbent: usize) -> bool {
    let z = |level| crate::entropy::zstd_compress(raw, level).map_or(0, |z| z.len());
    let z3 = z(3);
    z3 * GENERIC_SCREEN_PERCENT < incumbent * 100 && (z3 < incumbent || z(9) < incumbent)
}

/// zstd -3 of the sample must be under this percentage of the incumbent
/// before zstd -19 is tried: -19 rarely gains more than 5% over -3.
const GENERIC_SCREEN_PERCENT: usize = 95;

/// Bytes [`Shape::GenericPlanes`] must save on the target to be chosen:
/// 1/[`PLANES_PENALTY_DIV`] of its bytes.
fn planes_penalty(t: &Target<'_>) -> usize {
    target_bytes(t) / PLANES_PENALTY_DIV
}

/// zstd on byte planes encodes about 10 ns a byte slower than the field
/// coders: some 0.07 bit a byte at the rate
/// [`crate::entropy::SYMBOL_COST`] prices time, 1/128 of the bytes.
const PLANES_PENALTY_DIV: usize = 128;

/// Bytes of the target's words.
fn target_bytes(t: &Target<'_>) -> usize {
    t.words.len() * (t.width as usize).div_ceil(8)
}

/// Bytes [`Shape::Generic`] (zstd -19 on whole words) must save on the
/// target to be chosen: 1/[`GENERIC_PENALTY_DIV`] of its bytes.
fn generic_penalty(t: &Target<'_>) -> usize {
    target_bytes(t) / GENERIC_PENALTY_DIV
}

/// zstd -19 encodes tensor bytes at tens to hundreds of ns a byte, the
/// field coders at 3-5: at the rate [`crate::entropy::SYMBOL_COST`]
/// prices time (0.01 bit per ~1.5 ns) the lower end is 0.3 bit a byte,
/// 1/24. Without it, zstd -19 wins on sampled tensors by small margins
/// and its time is paid again on the whole tensor.
const GENERIC_PENALTY_DIV: usize = 24;

/// Whether zstd on the target's byte planes could beat `incumbent` bytes:
/// zstd -1 of the planes must beat it before the level's planes zstd
/// level is paid for (on planes that pay, level 9 saves another 2-3%). Words of
/// 16 bits or more; `raw` as for [`generic_may_win`] (cut without widening
/// to words where the width allows).
fn planes_may_win(t: &Target<'_>, raw: &[u8], incumbent: usize) -> bool {
    if t.width < 16 || !t.width.is_multiple_of(8) {
        return false;
    }
    let split = Split::BytePlanes(t.width);
    let planes = split
        .split_le_bytes(raw)
        .or_else(|| split.split_bytes(t.words));
    let Some(planes) = planes else {
        return false;
    };
    let quick: usize = planes
        .iter()
        .map(|p| crate::entropy::zstd_compress(p, 1).map_or(usize::MAX / 8, |z| z.len()))
        .sum();
    crate::dsl::recycle_fields(planes);
    quick < incumbent
}

/// Find a program shape for the target: bounded A* over shapes, each
/// complete one judged by its exact serialized size on the sample.
pub fn synthesize(t: &Target<'_>, prior: &Prior, budget: u32) -> Synthesis {
    synthesize_at(t, prior, budget, crate::encode::Level::DEFAULT)
}

/// [`synthesize`] with the literal coders and zstd levels of a compression
/// level (its budget is `budget`, which may differ from the level's).
pub fn synthesize_at(
    t: &Target<'_>,
    prior: &Prior,
    budget: u32,
    level: crate::encode::Level,
) -> Synthesis {
    // A sample of a larger tensor is priced, not coded: only the shape
    // (and its leaves' codecs) is kept, and regions are coded again.
    let priced = t.total_words > t.words.len() as u64;
    let region = t.total_words.min(t.region).max(1);
    let hole = context(t, String::new(), t.width);
    // Structured candidates are priced on the first `m` words of the
    // sample (all of it but for tensors of a few samples, see
    // `priced_words`), the generic codecs on all of it; sizes are compared
    // at the whole sample's length (`scaled`).
    let n = t.words.len();
    let m = priced_words(t);
    let words = &t.words[..m];
    let scaled = |size: usize| (size as u128 * n as u128 / m as u128) as usize;
    // Float words as bytes, once: every float tensor judges a Merge of byte
    // fields (the field split, byte planes), cut from them (at budget 0,
    // nothing but the incumbent is judged).
    let mut made = Vec::new();
    let le: &[u8] = if budget > 0 && is_float(t.dtype) && matches!(t.width, 16 | 32) {
        le_bytes_of(t, &mut made)
    } else {
        &[]
    };
    let share = |k: usize| {
        if priced {
            (k as f64 / region as f64).min(1.0)
        } else {
            1.0
        }
    };
    let cfg = Instantiate {
        le_bytes: (!le.is_empty()).then(|| &le[..m * t.width as usize / 8]),
        priced,
        overhead: share(m),
        leaves: (!prior.is_uniform() && level.prior_leaves())
            .then_some(Leaves { prior, hole: &hole }),
        ..Instantiate::at(level)
    };
    let lit = Shape::Lit(None);
    let node = instantiate(&lit, words, t.width, &cfg);
    let mut best = Best {
        size: scaled(wire::serialized_size(&node)),
        shape: lit.freeze(&node),
        cost: 0.0,
        node,
    };
    // The uniform prior (learning a prior) ranks nothing: it keeps the
    // wide stop everywhere.
    let stop_bits = if priced || prior.is_uniform() {
        STOP_BITS
    } else {
        STOP_BITS_WHOLE
    };
    let judge = |shape: &Shape| {
        let node = instantiate(shape, words, t.width, &cfg);
        (scaled(wire::serialized_size(&node)), node)
    };
    let bounds = astar::Bounds {
        budget,
        stop_bits,
        level,
    };
    let mut found = search_shapes(t, prior, &hole, bounds, judge, &mut best);
    if found.generic && found.judged < budget {
        found.judged += 1;
        judge_generic(t, le, &cfg, share(n), found.generic_likely, &mut best);
    }
    Synthesis {
        shape: best.shape,
        sample_bytes: best.size,
        judged: found.judged,
        node: (!cfg.priced).then_some(best.node),
    }
}

/// Judge the generic codecs, last, against the best structured program:
/// zstd on byte planes, then zstd -19 on whole words (where `likely`),
/// each with its penalty (the cheapest by size and penalty wins). Planes
/// go first: they are cheap to code, and a tensor they code well needs
/// no -19 (on astra's first convolution, 18 ms of a 0.5 s compression).
/// `le` are the target's bytes if made for the float splits (else empty),
/// `overhead` the whole sample's share of a literal's fixed bytes.
fn judge_generic<'a>(
    t: &Target<'_>,
    le: &'a [u8],
    cfg: &Instantiate<'a>,
    overhead: f64,
    likely: bool,
    best: &mut Best,
) {
    // zstd is slow to encode (an order of magnitude slower at -19 than
    // the field coders): it must save more than that costs, at
    // the rate SYMBOL_COST prices decoding (0.01 bit per ~1.5 ns).
    // The target's bytes for both screens: those made for the float
    // splits, or made here once.
    let mut made = Vec::new();
    let raw = if le.is_empty() {
        le_bytes_of(t, &mut made)
    } else {
        le
    };
    // zstd's matches need the whole sample (on a part of it, tensors
    // that zstd codes best lose to the field coders).
    let cfg = Instantiate {
        le_bytes: (!le.is_empty()).then_some(le),
        overhead,
        ..*cfg
    };
    // The best's penalty: 0 for a structured program.
    let mut best_penalty = 0;
    let penalty = planes_penalty(t);
    let bar = best.size.saturating_sub(penalty);
    if planes_may_win(t, raw, bar) {
        let node = instantiate(&Shape::GenericPlanes, t.words, t.width, &cfg);
        let size = wire::serialized_size(&node);
        if size < bar {
            *best = Best {
                size,
                shape: Shape::GenericPlanes,
                cost: 0.0,
                node,
            };
            best_penalty = penalty;
        }
    }
    let penalty = generic_penalty(t);
    let bar = (best.size + best_penalty).saturating_sub(penalty);
    if likely && generic_may_win(raw, bar) {
        let node = instantiate(&Shape::Generic, t.words, t.width, &cfg);
        let size = wire::serialized_size(&node);
        if size < bar {
            *best = Best {
                size,
                shape: Shape::Generic,
                cost: 0.0,
                node,
            };
        }
    }
}

/// The target's words as little-endian bytes: those they were read from
/// ([`Target::le`]), else made into `made`.
fn le_bytes_of<'b>(t: &Target<'b>, made: &'b mut Vec<u8>) -> &'b [u8] {
    let bpw = t.width as usize / 8;
    match t.le {
        Some(le) if matches!(t.width, 8 | 16 | 32 | 64) && le.len() == t.words.len() * bpw => {
            debug_assert!({
                crate::words::words_to_bytes(t.words, t.width, made);
                made[..] == *le
            });
            le
        }
        _ => {
            crate::words::words_to_bytes(t.words, t.width, made);
            made
        }
    }
}

/// Words of a target's sample its structured candidates are priced on:
/// 1/[`PRICED_PART`] of a tensor of at most that many samples' words
/// (whole rows of it, at least [`crate::entropy::CONTEXT_MIN_WORDS`]),
/// else the whole sample: pricing a mid-sized tensor on all of its words
/// would cost the search up to what coding it does.
fn priced_words(t: &Target<'_>) -> usize {
    let n = t.words.len();
    if t.total_words <= n as u64 || t.total_words > PRICED_PART * SAMPLE_WORDS {
        return n;
    }
    let mut m = (t.total_words / PRICED_PART) as usize;
    if t.row > 1 {
        m -= m % t.row as usize;
    }
    if m < crate::entropy::CONTEXT_MIN_WORDS || m > n {
        return n;
    }
    m
}

/// A mid-sized tensor's candidates are priced on this part of it: a
/// quarter keeps the search's time per tensor near a sample's.
const PRICED_PART: u64 = 4;

#[cfg(test)]
mod tests;
