//! Program shapes: programs without payloads. The search chooses a shape on
//! a sample of a tensor; every region of the tensor is then coded with that
//! shape, which decomposes the region's words into child targets and codes
//! each leaf exactly.

use serde::{Deserialize, Serialize};

use crate::dsl::{MapOp, Node, ScanOp, Split, mask};
use crate::entropy::{self, Codec, Contexts, Counts, LitOptions, Sibling, Word};

/// A program with holes instead of payloads.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Shape {
    /// Still to be chosen (a partial program).
    Hole,
    /// A literal leaf; `None` picks the codec by exact size on each region,
    /// `Some` uses the codec the search found (or raw if that is smaller).
    /// A leaf whose words are all equal becomes `Const`.
    Lit(Option<Codec>),
    /// A literal that may also use the generic codec (zstd).
    Generic,
    /// The word's byte planes (most significant first), each a literal that
    /// may also use zstd (at most [`PLANES_ZSTD_LEVEL`]): tables of many repeated
    /// rows (position encodings) that zstd on whole words codes worse.
    GenericPlanes,
    /// Split words into fields.
    Merge(Split, Vec<Shape>),
    /// A bijection per word.
    Map(MapOp, Box<Shape>),
    /// A running xor / sum.
    Scan(ScanOp, Box<Shape>),
    /// Words dealt by position class within a period (block fields).
    Interleave(String, Vec<u8>, Vec<Shape>),
}

impl Shape {
    /// Text such as `Merge[bf16](Lit, Lit, Lit)`.
    #[cfg(test)]
    pub fn text(&self) -> String {
        match self {
            Shape::Hole => "?".into(),
            Shape::Lit(None) => "Lit".into(),
            Shape::Lit(Some(c)) => format!("Lit<{}>", c.name()),
            Shape::Generic => "Lit<generic>".into(),
            Shape::GenericPlanes => "Merge[bytes](Lit<generic>, ..)".into(),
            Shape::Merge(s, c) => format!(
                "Merge[{s}]({})",
                c.iter().map(Shape::text).collect::<Vec<_>>().join(", ")
            ),
            Shape::Map(op, c) => format!("Map[{op}]({})", c.text()),
            Shape::Interleave(name, _, c) => format!(
                "Interleave[{name}]({})",
                c.iter().map(Shape::text).collect::<Vec<_>>().join(", ")
            ),
            Shape::Scan(op, c) => format!(
                "Scan[{}]({})",
                match op {
                    ScanOp::XorDelta => "xor",
                    ScanOp::Diff => "diff",
                },
                c.text()
            ),
        }
    }

    /// The shape with every leaf's codec fixed to the one `node` used
    /// (node is this shape instantiated on a sample).
    pub fn freeze(&self, node: &Node) -> Shape {
        match (self, node) {
            (Shape::Hole | Shape::Lit(None), Node::Lit { codec, .. }) => Shape::Lit(Some(*codec)),
            (Shape::Merge(s, kids), Node::Merge { children, .. })
                if kids.len() == children.len() =>
            {
                Shape::Merge(
                    s.clone(),
                    kids.iter()
                        .zip(children)
                        .map(|(k, c)| k.freeze(c))
                        .collect(),
                )
            }
            (Shape::Map(op, k), Node::Map { child, .. }) => {
                Shape::Map(*op, Box::new(k.freeze(child)))
            }
            (Shape::Scan(op, k), Node::Scan { child, .. }) => {
                Shape::Scan(*op, Box::new(k.freeze(child)))
            }
            (s, _) => s.clone(),
        }
    }
}

/// Highest zstd level of the byte planes of [`Shape::GenericPlanes`] (the
/// best levels'; the default uses 5): -19 gains a few percent on planes
/// at many times the time, and planes at -9 already beat -19 on the whole
/// words where planes are chosen.
pub const PLANES_ZSTD_LEVEL: i32 = 9;

/// Settings for coding a region with a shape.
#[derive(Debug, Clone, Copy)]
pub struct Instantiate<'a> {
    /// zstd level of `Generic` leaves.
    pub zstd_level: i32,
    /// zstd level of the byte planes of `GenericPlanes` (at most
    /// [`PLANES_ZSTD_LEVEL`]; see [`Level`](crate::Level)).
    pub planes_zstd_level: i32,
    /// Price literals chosen by the literal chooser instead of coding them
    /// (see [`entropy::price_best`]): their payloads are zero bytes of the
    /// estimated length, so the node is only good for
    /// [`crate::dsl::wire::serialized_size`] and [`Shape::freeze`], never
    /// for writing or executing. The search prices samples of tensors
    /// larger than the sample this way; what is written is coded again.
    pub priced: bool,
    /// The prior's leaf model: which context coders the literal chooser
    /// weighs at each leaf (all without one).
    pub leaves: Option<super::Leaves<'a>>,
    /// Share of each literal stream's fixed bytes the priced words bear
    /// (see [`LitOptions::overhead`]).
    pub overhead: f64,
    /// The context coders a literal may weigh at all (the compression
    /// level's; the prior's leaf model narrows them further).
    pub cap: Contexts,
    /// Weight of decoding time against bytes (see [`LitOptions::time`]).
    pub time: f64,
    /// The little-endian bytes of the words given to [`instantiate`] (2 or
    /// 4 a word), when the caller has them: a top `Merge` of byte fields
    /// is cut from them, as [`instantiate_le_bytes`] does, which reads a
    /// quarter of the memory the `u64` words take.
    pub le_bytes: Option<&'a [u8]>,
}

impl Default for Instantiate<'_> {
    fn default() -> Self {
        Instantiate {
            zstd_level: 19,
            planes_zstd_level: PLANES_ZSTD_LEVEL,
            priced: false,
            leaves: None,
            overhead: 1.0,
            cap: Contexts::ALL,
            time: 1.0,
            le_bytes: None,
        }
    }
}

impl Instantiate<'_> {
    /// The settings of compression level `level`: its context coders,
    /// time weight, and zstd level for generic leaves.
    pub fn at(level: crate::encode::Level) -> Self {
        let d = Instantiate::default();
        Instantiate {
            zstd_level: level.zstd(d.zstd_level),
            planes_zstd_level: level.planes_zstd(),
            cap: level.contexts(),
            time: level.time(),
            ..d
        }
    }

    /// The context coders a literal of `width` bits under `parent` weighs.
    fn contexts(&self, parent: &str, width: u8) -> Contexts {
        self.leaves
            .map_or(self.cap, |l| l.contexts(parent, width).and(self.cap))
    }
}

fn all_equal<W: PartialEq + Copy>(words: &[W]) -> bool {
    words.first().is_none_or(|&f| words.iter().all(|&w| w == f))
}

/// The rotation that undoes a left rotation by `r` of `width`-bit words.
fn unrotate(r: u8, width: u8) -> u32 {
    let w = width as u32;
    (w - r as u32 % w) % w
}

/// Code `words` (of `width` bits) with `shape`. Always correct: a shape that
/// does not fit the words (wrong width) falls back to a literal.
pub fn instantiate(shape: &Shape, words: &[u64], width: u8, cfg: &Instantiate<'_>) -> Node {
    if let (Some(bytes), Shape::Map(MapOp::Rotl(r), kid)) = (cfg.le_bytes, shape)
        && matches!(width, 16 | 32)
        && bytes.len() == words.len() * (width as usize / 8)
    {
        // The fast float split: the child's bytes are the words rotated
        // back, cut as the Merge below cuts them (its words too, should
        // it take those).
        let inv = MapOp::Rotl(*r).inverse(width);
        let rotated: Vec<u64> = words.iter().map(|&w| inv.apply(w)).collect();
        let mut le = bytes.to_vec();
        crate::dsl::exec::rotate_le_words(&mut le, width, unrotate(*r, width));
        let cfg = Instantiate {
            le_bytes: Some(&le),
            ..*cfg
        };
        return Node::Map {
            op: MapOp::Rotl(*r),
            child: Box::new(instantiate(kid, &rotated, width, &cfg)),
        };
    }
    if let (Some(bytes), Shape::Merge(split, kids)) = (cfg.le_bytes, shape)
        && matches!(width, 16 | 32)
        && bytes.len() == words.len() * (width as usize / 8)
        && split.width() == width as u32
        && kids.len() == split.fields().len()
        && byte_literals(kids)
        && let Some(parts) = split.split_le_bytes(bytes)
    {
        // As `inst` does from the words.
        return merge_of_bytes(split, kids, parts, cfg);
    }
    inst(shape, words, width, &[], cfg, "top")
}

/// [`instantiate`] from the little-endian bytes of the words, for a `Merge`
/// of literals over byte fields (every float split): the fields are cut
/// from the bytes without widening the words; `None` for other shapes.
pub fn instantiate_le_bytes(
    shape: &Shape,
    bytes: &[u8],
    width: u8,
    cfg: &Instantiate<'_>,
) -> Option<Node> {
    if let Shape::Interleave(_, classes, kids) = shape
        && width == 8
        && byte_literals(kids)
    {
        // Block fields of bytes (GGUF quants), dealt as bytes.
        let children = crate::dsl::deal(bytes, classes, kids.len())
            .iter()
            .zip(kids)
            .map(|(p, k)| {
                let codec = match k {
                    Shape::Lit(c) => *c,
                    _ => None,
                };
                byte_leaf(codec, p, 8, &[], &[], &[], cfg, cfg.cap)
            })
            .collect();
        return Some(Node::Interleave {
            classes: classes.clone(),
            children,
        });
    }
    if *shape == Shape::Lit(Some(Codec::Raw)) {
        return raw_of_le_bytes(bytes, width);
    }
    if let Shape::Map(MapOp::Rotl(r), kid) = shape
        && matches!(width, 16 | 32)
    {
        // The fast float split (see `instantiate`).
        let mut le = bytes.to_vec();
        crate::dsl::exec::rotate_le_words(&mut le, width, unrotate(*r, width));
        let child = instantiate_le_bytes(kid, &le, width, cfg)?;
        return Some(Node::Map {
            op: MapOp::Rotl(*r),
            child: Box::new(child),
        });
    }
    let Shape::Merge(split, kids) = shape else {
        return None;
    };
    if split.width() != width as u32 || kids.len() != split.fields().len() || !byte_literals(kids) {
        return None;
    }
    let parts = split.split_le_bytes(bytes)?;
    Some(merge_of_bytes(split, kids, parts, cfg))
}

/// A literal frozen raw (budget 0's float tensors, and any the search left
/// raw), from the bytes of its words of `width` bits (16, 32 or 64): the
/// node [`inst`] makes of the words (through [`lit_fixed`]) where it
/// makes it raw, that is where the words are not all equal, have no
/// period, are at least 16, and [`fixed_candidates`] weighs raw alone.
/// Its payload is the bytes themselves: they are not widened to words and
/// written back. `None` where `inst` may code the words otherwise.
fn raw_of_le_bytes(bytes: &[u8], width: u8) -> Option<Node> {
    fn of<const B: usize>(bytes: &[u8], width: u8) -> Option<Node> {
        let (words, rest) = bytes.as_chunks::<B>();
        let n = words.len();
        if !rest.is_empty() || n < 16 || all_equal(words) || period(words).is_some() {
            return None;
        }
        // The OR of the words (as `entropy::or_all`): their bit length.
        let mut or = [0u8; B];
        for w in words {
            for (o, &b) in or.iter_mut().zip(w) {
                *o |= b;
            }
        }
        let mut max = [0u8; 8];
        max[..B].copy_from_slice(&or);
        let max = u64::from_le_bytes(max);
        // (`lit_fixed` weighs raw alone: it encodes the words as they are.)
        if fixed_candidates(Codec::Raw, n, max, width) != [Codec::Raw] {
            return None;
        }
        Some(Node::Lit {
            width,
            n: n as u64,
            codec: Codec::Raw,
            payload: bytes.to_vec(),
        })
    }
    match width {
        16 => of::<2>(bytes, width),
        32 => of::<4>(bytes, width),
        64 => of::<8>(bytes, width),
        _ => None,
    }
}

/// Whether every child is a literal (or a hole, which becomes one).
fn byte_literals(kids: &[Shape]) -> bool {
    kids.iter()
        .all(|k| matches!(k, Shape::Lit(_) | Shape::Hole))
}

/// A `Merge` of byte-field literals over its fields `parts` (handed back
/// for the thread's next cuts once coded, [`crate::dsl::recycle_fields`]).
fn merge_of_bytes(
    split: &Split,
    kids: &[Shape],
    parts: Vec<Vec<u8>>,
    cfg: &Instantiate<'_>,
) -> Node {
    let fields = split.fields();
    let codecs: Vec<Option<Codec>> = kids
        .iter()
        .map(|k| match k {
            Shape::Lit(c) => *c,
            _ => None,
        })
        .collect();
    let contexts: Vec<Contexts> = codecs
        .iter()
        .enumerate()
        .map(|(i, codec)| match codec {
            None if cfg.leaves.is_some() => cfg.contexts(&super::merge_label(split, i), fields[i]),
            _ => cfg.cap,
        })
        .collect();
    // Field i is counted under an earlier field j by its frozen conditional
    // coder, or by the literal chooser where the prior lets it weigh one.
    let known = entropy::byte_field_counts(&fields, &parts, |i, j| match codecs[i] {
        Some(c) => c.sibling() == Some(j as u8),
        None => contexts[i].sibling(j as u8),
    });
    let children = (0..kids.len())
        .map(|i| {
            byte_leaf(
                codecs[i],
                &parts[i],
                fields[i],
                &parts[..i],
                &fields[..i],
                &known[i],
                cfg,
                contexts[i],
            )
        })
        .collect();
    crate::dsl::recycle_fields(parts);
    Node::Merge {
        split: split.clone(),
        children,
    }
}

/// [`instantiate`] of a hole under `parent` (its label, for the prior's
/// leaf model), with the earlier siblings `sibs` of its `Merge`.
fn inst(
    shape: &Shape,
    words: &[u64],
    width: u8,
    sibs: &[Sibling<'_>],
    cfg: &Instantiate<'_>,
    parent: &str,
) -> Node {
    if all_equal(words)
        && !matches!(
            shape,
            Shape::Merge(..) | Shape::Map(..) | Shape::Scan(..) | Shape::Interleave(..)
        )
    {
        return Node::Const {
            width,
            n: words.len() as u64,
            word: words.first().copied().unwrap_or(0),
        };
    }
    if matches!(shape, Shape::Hole | Shape::Lit(_) | Shape::Generic)
        && let Some(p) = period(words)
    {
        // A literal leaf whose words repeat: Repeat(k, unit), the unit coded
        // as the leaf would be.
        return Node::Repeat {
            k: (words.len() / p) as u64,
            child: Box::new(inst(shape, &words[..p], width, &[], cfg, parent)),
        };
    }
    let all = cfg.cap;
    // The child of a Map or Scan.
    let only_child = |kid: &Shape, words: &[u64]| {
        Box::new(inst(
            kid,
            words,
            width,
            &[],
            cfg,
            &super::child_label(shape, 0),
        ))
    };
    match shape {
        Shape::Hole | Shape::Lit(None) => {
            let contexts = cfg.contexts(parent, width);
            lit_auto(words, width, sibs, None, cfg, contexts)
        }
        Shape::Generic => {
            let contexts = cfg.contexts(parent, width);
            lit_auto(words, width, sibs, Some(cfg.zstd_level), cfg, contexts)
        }
        Shape::GenericPlanes if width >= 16 && width.is_multiple_of(8) => {
            let split = Split::BytePlanes(width);
            let children = split
                .split(words)
                .iter()
                .map(|p| {
                    let level = cfg.planes_zstd_level.min(cfg.zstd_level);
                    lit_auto(p, 8, &[], Some(level), cfg, all)
                })
                .collect();
            Node::Merge { split, children }
        }
        Shape::GenericPlanes => lit_auto(words, width, sibs, Some(cfg.zstd_level), cfg, all),
        Shape::Lit(Some(codec)) => lit_fixed(
            *codec,
            words,
            width,
            |i| sibs.iter().find(|s| s.index == i).map(|s| s.words),
            None,
            || lit_auto(words, width, sibs, None, cfg, all),
        ),
        Shape::Merge(split, kids) => inst_merge(shape, split, kids, words, width, sibs, cfg),
        Shape::Interleave(_, classes, kids) => {
            let parts = crate::dsl::deal(words, classes, kids.len());
            Node::Interleave {
                classes: classes.clone(),
                children: kids
                    .iter()
                    .zip(&parts)
                    .enumerate()
                    .map(|(i, (k, p))| inst(k, p, width, &[], cfg, &super::child_label(shape, i)))
                    .collect(),
            }
        }
        Shape::Map(op, kid) => {
            let inv = op.inverse(width);
            let child: Vec<u64> = words.iter().map(|&w| inv.apply(w)).collect();
            Node::Map {
                op: *op,
                child: only_child(kid, &child),
            }
        }
        Shape::Scan(op, kid) => Node::Scan {
            op: *op,
            child: only_child(kid, &unscan(*op, words, width)),
        },
    }
}

/// [`inst`] of a `Merge` shape: its children each cut from the words, a
/// field of at most 8 bits a sibling the later ones may be conditioned on.
fn inst_merge(
    shape: &Shape,
    split: &Split,
    kids: &[Shape],
    words: &[u64],
    width: u8,
    sibs: &[Sibling<'_>],
    cfg: &Instantiate<'_>,
) -> Node {
    let fields = split.fields();
    if split.width() != width as u32 || kids.len() != fields.len() {
        return lit_auto(words, width, sibs, None, cfg, cfg.cap);
    }
    // Literals of byte fields (every float split) take the fields
    // as bytes.
    if byte_literals(kids)
        && let Some(parts) = split.split_bytes(words)
    {
        return merge_of_bytes(split, kids, parts, cfg);
    }
    let parts = split.split(words);
    let mut children = Vec::with_capacity(kids.len());
    for i in 0..kids.len() {
        let s: Vec<Sibling<'_>> = (0..i)
            .filter(|&j| fields[j] <= 8)
            .map(|j| Sibling {
                index: j as u8,
                words: &parts[j],
                width: fields[j],
                counts: None,
            })
            .collect();
        let parent = super::child_label(shape, i);
        children.push(inst(&kids[i], &parts[i], fields[i], &s, cfg, &parent));
    }
    Node::Merge {
        split: split.clone(),
        children,
    }
}

/// The words a `Scan` of `op` turns into `words` (its inverse: deltas).
fn unscan(op: ScanOp, words: &[u64], width: u8) -> Vec<u64> {
    let m = mask(width);
    let mut prev = 0u64;
    words
        .iter()
        .map(|&w| {
            let d = match op {
                ScanOp::XorDelta => w ^ prev,
                ScanOp::Diff => w.wrapping_sub(prev) & m,
            };
            prev = w;
            d
        })
        .collect()
}

/// The smallest period `p` (a proper divisor of the length, at most 2^16)
/// with `words[i] == words[i - p]` everywhere; a few candidates are tried.
fn period<W: PartialEq + Copy>(words: &[W]) -> Option<usize> {
    let n = words.len();
    if n < 64 {
        return None;
    }
    let first = words[0];
    let mut tried = 0;
    for p in divisors(n).filter(|&p| p <= (n / 2).min(1 << 16)) {
        if words[p] != first {
            continue;
        }
        tried += 1;
        if words[p..] == words[..n - p] {
            return Some(p);
        }
        if tried >= 8 {
            break;
        }
    }
    None
}

/// The divisors of `n > 0`, increasing, made from its prime factors
/// (`period` asks for every leaf; trial division up to the square root
/// is several times the cost).
fn divisors(n: usize) -> impl Iterator<Item = usize> {
    debug_assert!(n > 0);
    let mut out = vec![1];
    // Each prime power p^1..p^k times the divisors so far.
    let mut times = |p: usize, k: u32| {
        let len = out.len();
        let mut q = 1;
        for _ in 0..k {
            q *= p;
            for i in 0..len {
                out.push(out[i] * q);
            }
        }
    };
    let twos = n.trailing_zeros();
    times(2, twos);
    let mut m = n >> twos;
    let mut p = 3;
    while p * p <= m {
        let mut k = 0;
        while m.is_multiple_of(p) {
            m /= p;
            k += 1;
        }
        times(p, k);
        p += 2;
    }
    if m > 1 {
        times(m, 1);
    }
    out.sort_unstable();
    out.into_iter()
}

fn lit_auto<W: Word>(
    words: &[W],
    width: u8,
    sibs: &[Sibling<'_, W>],
    zstd: Option<i32>,
    cfg: &Instantiate<'_>,
    contexts: Contexts,
) -> Node {
    let opts = LitOptions {
        zstd_level: zstd,
        contexts,
        overhead: cfg.overhead,
        time: cfg.time,
    };
    let (codec, payload) = if cfg.priced {
        let (codec, bytes) = entropy::price_best(words, width, sibs, &opts);
        (codec, vec![0; bytes])
    } else {
        entropy::encode_best(words, width, sibs, &opts)
    };
    Node::Lit {
        width,
        n: words.len() as u64,
        codec,
        payload,
    }
}

/// A literal of a byte field: `Const` or `Repeat` when the bytes are so (as
/// [`inst`] does for every leaf), else [`lit_fixed`] with the frozen codec
/// or the literal chooser without one; `earlier` are the fields before it
/// in its `Merge` (the conditional coder's siblings), and `known` its
/// symbols counted under some of them, `(sibling, counts)` (see
/// [`entropy::byte_field_counts`]).
#[allow(clippy::too_many_arguments)]
fn byte_leaf(
    codec: Option<Codec>,
    words: &[u8],
    width: u8,
    earlier: &[Vec<u8>],
    widths: &[u8],
    known: &[(u8, Counts)],
    cfg: &Instantiate<'_>,
    contexts: Contexts,
) -> Node {
    if all_equal(words) {
        return Node::Const {
            width,
            n: words.len() as u64,
            word: words.first().map_or(0, |&w| w as u64),
        };
    }
    if let Some(p) = period(words) {
        return Node::Repeat {
            k: (words.len() / p) as u64,
            child: Box::new(byte_leaf(
                codec,
                &words[..p],
                width,
                &[],
                &[],
                &[],
                cfg,
                contexts,
            )),
        };
    }
    let counted = |j: u8| known.iter().find(|k| k.0 == j).map(|k| &k.1);
    let auto = || {
        let sibs: Vec<Sibling<'_, u8>> = earlier
            .iter()
            .enumerate()
            .map(|(j, w)| Sibling {
                index: j as u8,
                words: w,
                width: widths[j],
                counts: counted(j as u8),
            })
            .collect();
        lit_auto(words, width, &sibs, None, cfg, contexts)
    };
    match codec {
        Some(codec) => lit_fixed(
            codec,
            words,
            width,
            |i| earlier.get(i as usize).map(|s| &s[..]),
            codec.sibling().and_then(counted),
            auto,
        ),
        None => auto(),
    }
}

/// The codecs [`lit_fixed`] weighs for `n` words of `width` bits whose OR
/// is `max`, frozen `codec` (fitted) first. The frozen codec is the
/// sample's winner; statistics drift between regions, so order-0 rANS,
/// packed rANS (a whole region can pay for its byte table, and it codes
/// 8 / width times fewer symbols) and the cheaper of bit-packed and raw
/// are priced too.
fn fixed_candidates(codec: Codec, n: usize, max: u64, width: u8) -> Vec<Codec> {
    let mut codecs = vec![codec];
    if max <= 255 && !codec.same_kind(Codec::Rans0) {
        codecs.push(Codec::Rans0.fit(n));
    }
    if width <= 4 && !codec.same_kind(Codec::PackedRans0) {
        codecs.push(Codec::PackedRans0.fit(entropy::symbols(Codec::PackedRans0, n, width)));
    }
    let flat = entropy::flat_codec(n, max, width);
    if !codecs.contains(&flat) {
        codecs.push(flat);
    }
    codecs
}

/// A literal in the codec the search froze (fitted to this region's
/// length), or order-0 rANS, packed rANS, bit-packed or raw when one of
/// those is cheaper here; `sibling(i)` is the `Merge` sibling `i` (for the
/// conditional coder) and `auto` the literal chooser when the frozen codec
/// cannot code these words.
fn lit_fixed<'a, W: Word>(
    codec: Codec,
    words: &[W],
    width: u8,
    sibling: impl Fn(u8) -> Option<&'a [W]>,
    counted: Option<&'a Counts>,
    auto: impl FnOnce() -> Node,
) -> Node {
    // Bit length and `<= 255` tests only: the OR serves as the maximum.
    let max = entropy::or_all(words);
    let n = words.len();
    let packed = codec.same_kind(Codec::PackedRans0);
    // The sample's codec with the number of states right for this region.
    let codec = codec.fit(if packed {
        entropy::symbols(Codec::PackedRans0, n, width)
    } else {
        n
    });
    let sibling = match codec.sibling() {
        Some(i) => match sibling(i) {
            Some(s) if s.len() == n => Some(s),
            _ => return auto(),
        },
        None => None,
    };
    let entropy_codec = !packed && entropy::symbols(codec, n, width) > 0;
    if (entropy_codec && max > 255) || (packed && width > 4) || n < 16 {
        return auto();
    }
    let codecs = fixed_candidates(codec, n, max, width);
    let sibs: Vec<Sibling<'_, W>> = sibling
        .zip(codec.sibling())
        .map(|(words, index)| Sibling {
            index,
            words,
            width: 8,
            counts: counted,
        })
        .into_iter()
        .collect();
    let best = entropy::encode_cheapest(&codecs, words, width, &sibs);
    Node::Lit {
        width,
        n: words.len() as u64,
        codec: best.0,
        payload: best.1,
    }
}

#[cfg(test)]
mod tests;
