//! Choosing a literal's codec: the options, the context statistics, and
//! `encode_best` (the smallest coding by exact size).

use super::*;

/// How hard the literal encoder tries.
#[derive(Debug, Clone, Copy)]
pub struct LitOptions {
    /// zstd level for the generic codec; `None` skips it.
    pub zstd_level: Option<i32>,
    /// Which context coders (order-1, conditional) are weighed.
    pub contexts: Contexts,
    /// Share of each stream's fixed bytes (its tables, final states and
    /// header) that these words bear, when [`price_best`] prices them as a
    /// sample of a longer region: the region pays its tables once for all
    /// its words. 1 when the words are the region.
    pub overhead: f64,
    /// Weight of decoding time against bytes: [`SYMBOL_COST`] and
    /// [`CONTEXT_SYMBOL_COST`] are multiplied by it (1 by default; a
    /// compression level trades bytes for decoding speed with it).
    pub time: f64,
}

impl Default for LitOptions {
    fn default() -> Self {
        LitOptions {
            zstd_level: None,
            contexts: Contexts::ALL,
            overhead: 1.0,
            time: 1.0,
        }
    }
}

/// Which context coders the literal chooser weighs: each costs a count of
/// the whole stream under its contexts, the chooser's largest cost. The
/// search leaves out those its prior says never win in a hole's context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contexts {
    /// Order-1 rANS ([`Codec::Rans1`]).
    pub previous: bool,
    /// Conditional rANS on sibling `i` ([`Codec::RansCond`]) when bit `i`
    /// is set (siblings from index 32 on are always weighed).
    pub siblings: u32,
}

impl Contexts {
    /// Every context coder.
    pub const ALL: Contexts = Contexts {
        previous: true,
        siblings: u32::MAX,
    };
    /// None: order 0 only.
    pub const NONE: Contexts = Contexts {
        previous: false,
        siblings: 0,
    };

    /// Whether conditioning on sibling `index` is weighed.
    pub fn sibling(self, index: u8) -> bool {
        index >= 32 || self.siblings & (1 << index) != 0
    }

    /// The coders weighed by both.
    pub fn and(self, o: Contexts) -> Contexts {
        Contexts {
            previous: self.previous && o.previous,
            siblings: self.siblings & o.siblings,
        }
    }

    /// Whether any context coder is weighed.
    pub fn any(self) -> bool {
        self.previous || self.siblings != 0
    }
}

/// For each field of a `Merge`, its symbols counted under earlier fields of
/// the same byte, `(sibling, counts)`, where a byte is cut into two or more
/// fields (an f16's sign, exponent and top mantissa bits) and `wanted(i,
/// j)` asks for field `i` under field `j`: all from one histogram of the
/// byte (see [`Counts::of_fields`]). For the search's `Merge` leaves.
#[cfg(feature = "search")]
pub(crate) fn byte_field_counts(
    fields: &[u8],
    parts: &[Vec<u8>],
    wanted: impl Fn(usize, usize) -> bool,
) -> Vec<Vec<(u8, Counts)>> {
    let mut known: Vec<Vec<(u8, Counts)>> = fields.iter().map(|_| Vec::new()).collect();
    // Fields i..j, from bit `at` (from the top), in one byte.
    let (mut i, mut at) = (0, 0u32);
    while i < fields.len() {
        let mut j = i + 1;
        let mut bits = fields[i] as u32;
        while j < fields.len() && bits + fields[j] as u32 <= 8 {
            bits += fields[j] as u32;
            j += 1;
        }
        let n = parts[i].len();
        let whole_byte =
            at.is_multiple_of(8) && bits == 8 && parts[i..j].iter().all(|p| p.len() == n);
        let pairs: Vec<(usize, usize)> = match whole_byte {
            true => (i..j)
                .flat_map(|a| (i..a).map(move |b| (a, b)))
                .filter(|&(a, b)| wanted(a, b))
                .collect(),
            false => Vec::new(),
        };
        if !pairs.is_empty() {
            // Field k's shift inside the byte.
            let mut shift = [0u32; 8];
            let mut left = 8;
            for k in i..j {
                left -= fields[k] as u32;
                shift[k - i] = left;
            }
            let mut byte = vec![0u8; n];
            for k in i..j {
                // (A shift read once: this vectorizes.)
                let sh = shift[k - i];
                for (b, &f) in byte.iter_mut().zip(&parts[k]) {
                    *b |= f << sh;
                }
            }
            let hist = rans::count(&byte, &Context::None);
            let field = |k: usize| {
                let (sh, m) = (shift[k - i], crate::words::mask(fields[k]) as u8);
                move |b: u8| (b >> sh) & m
            };
            for (a, b) in pairs {
                let counts = Counts::of_fields(hist.order0(), field(b), field(a));
                known[a].push((b as u8, counts));
            }
        }
        at += bits;
        i = j;
    }
    known
}

/// The order-0 counts of a literal's symbols `syms` of `k` bits: summed
/// from its counts under a sibling when a caller knows those, else
/// counted (1-bit symbols by their sum).
pub(super) fn order0_counts<W>(syms: &[u8], k: u32, siblings: &[Sibling<'_, W>]) -> rans::Counts {
    match siblings.iter().find_map(|s| s.counts) {
        Some(known) => known.pooled(),
        None if k <= 1 => rans::count_bits(syms),
        None => rans::count(syms, &Context::None),
    }
}

/// A sibling stream a conditional coder may use.
pub struct Sibling<'a, W = u64> {
    /// Index among the enclosing Merge's children.
    pub index: u8,
    /// Its words.
    pub words: &'a [W],
    /// Its width.
    pub width: u8,
    /// The literal's symbols counted under this sibling, when the caller
    /// has them (bit fields of one byte, [`rans::Counts::of_fields`]): as
    /// `rans::count` would count them, which they replace.
    pub(crate) counts: Option<&'a rans::Counts>,
}

/// What one entropy-coded symbol costs, in bytes, when codecs are compared:
/// a codec must save this much per symbol it makes the decoder (and the
/// encoder) step through. rANS decodes a symbol in about 1.5 ns, raw and
/// bit-packed words cost nearly nothing; 0.01 bits per symbol keeps every
/// field whose coding saves more than that (exponents, most mantissas) and
/// turns per-word sign coders into packed ones (8 signs per symbol).
pub const SYMBOL_COST: f64 = 0.01 / 8.0;

/// Symbols from which rANS streams use 32 states (see [`Codec::fit`]): the
/// vector encoders and decoders step through those, where 4 states are
/// coded one symbol at a time, bound by each state's chain of multiplies.
/// Below this, a stream's 32 states cost more in flushed state than the
/// speed is worth.
pub const WIDE_SYMBOLS: usize = 1 << 16;

/// Symbols the decoder steps through for `n` words of `width` bits in `codec`.
pub fn symbols(codec: Codec, n: usize, width: u8) -> usize {
    match codec {
        Codec::Raw | Codec::BitPack | Codec::Zstd => 0,
        Codec::PackedRans0 | Codec::PackedRans0x32 => (n * width as usize).div_ceil(8),
        _ => n,
    }
}

/// Symbols a context must have for a table of its own, in a stream of `n`
/// symbols that bears `overhead` of its region's tables: in a sample of a
/// longer region, the region's threshold in the sample's proportion.
pub(super) fn min_ctx_count(n: usize, overhead: f64) -> usize {
    let overhead = overhead.clamp(MIN_OVERHEAD, 1.0);
    let region = (n as f64 / overhead) as usize;
    ((region / CTX_COUNT_DIV).max(MIN_CTX_COUNT) as f64 * overhead).round() as usize
}

/// Floor of a sample's share of its region, so the region's length stays
/// finite.
const MIN_OVERHEAD: f64 = 1e-6;
/// A context needs 1/this of its region's symbols for a table of its own
/// (rarer ones share the fallback table: a table of their own would cost
/// more than their sharper counts save).
const CTX_COUNT_DIV: usize = 512;
/// Fewest symbols a context needs for a table of its own, in any region.
const MIN_CTX_COUNT: usize = 512;

/// Words a literal needs for the chooser to weigh context coders (their
/// tables need many words to pay).
pub const CONTEXT_MIN_WORDS: usize = 8192;

/// What a context coder's symbol costs on top of [`SYMBOL_COST`]: 0.08
/// bit. Its table is chosen per symbol (gathered from one of up to 256
/// tables where order 0 keeps one in registers), and its symbols are
/// counted under their contexts in every region, so it encodes and decodes
/// markedly slower than order 0. Its gain is concentrated in a few
/// streams, so a context coder has to earn its time: this rate keeps most
/// of its size gains and drops the ones that cost the most time for the
/// least.
pub const CONTEXT_SYMBOL_COST: f64 = 0.08 / 8.0;

/// What stepping through the symbols of `n` words of `width` bits in
/// `codec` costs, in bytes (see [`SYMBOL_COST`]).
/// `codec` costs, in bytes (see [`SYMBOL_COST`]), at time weight `time`
/// (see [`LitOptions::time`]).
pub fn symbol_cost(codec: Codec, n: usize, width: u8, time: f64) -> f64 {
    let per = if codec.contextual() {
        SYMBOL_COST + CONTEXT_SYMBOL_COST
    } else {
        SYMBOL_COST
    };
    symbols(codec, n, width) as f64 * per * time
}

/// Bytes plus the cost of the symbols (see [`symbol_cost`]): how codecs
/// are ranked.
pub fn cost(codec: Codec, bytes: usize, n: usize, width: u8, time: f64) -> f64 {
    bytes as f64 + symbol_cost(codec, n, width, time)
}

/// [`encode_best`] encodes an order-0 rANS codec only when its estimate
/// is below this many times the cost of the best codec so far (Huffman's
/// exact size, or raw, or bit-packed): on the short streams it codes exactly
/// the estimate runs ~2% high on average (tables), so one a hair above
/// may still win; past this margin the wins are too rare and too small to
/// pay for the encodes.
pub(super) const ORDER0_ENCODE_MARGIN: f64 = 1.005;

/// Fewest words an entropy coder (Huffman, rANS) is weighed on: a shorter
/// stream cannot pay for its table.
pub(super) const MIN_ENTROPY_WORDS: usize = 16;
/// Widest words packed several to a byte for packed rANS: a byte then
/// holds at least two of them.
pub(super) const PACKED_MAX_WIDTH: u8 = 4;
/// Fewest words packed rANS is weighed on: a shorter stream is mostly
/// table.
pub(super) const MIN_PACKED_WORDS: usize = 64;
/// Fewest words zstd is weighed on: a shorter stream is mostly frame.
pub(super) const MIN_ZSTD_WORDS: usize = 64;

/// Encode `words` of `width` bits with the cheapest codec (see [`cost`]).
pub fn encode_best<W: Word>(
    words: &[W],
    width: u8,
    siblings: &[Sibling<'_, W>],
    opts: &LitOptions,
) -> (Codec, Vec<u8>) {
    let n = words.len();
    let max = or_all(words);
    let k = bits_for(max);
    let raw_size = n * bytes_per_word(width);
    let pack_size = 1 + (n * k as usize).div_ceil(8);
    // Candidates are ranked by cost: bytes plus SYMBOL_COST per entropy-coded symbol.
    let (codec, cost) = if pack_size < raw_size {
        (Codec::BitPack, pack_size as f64)
    } else {
        (Codec::Raw, raw_size as f64)
    };
    let mut best = Cheapest {
        codec,
        cost,
        payload: None,
        n,
        width,
        time: opts.time,
    };
    // The order-0 counts, for Huffman's encoder if it wins.
    let mut order0 = None;
    if max < 256 && n >= MIN_ENTROPY_WORDS {
        // Huffman's size is exact from its code lengths; rANS is encoded
        // only when its estimate is competitive. Only winners are encoded.
        let syms = to_bytes(words);
        let counts0 = order0.insert(order0_counts(&syms, k, siblings));
        try_entropy_coders(words, &syms, siblings, opts, counts0, &mut best);
    }
    if let Some(level) = opts.zstd_level
        && n >= MIN_ZSTD_WORDS
    {
        let raw = raw_bytes(words, width);
        if let Ok(z) = zstd_compress(&raw, level) {
            best.consider(Codec::Zstd, z);
        }
    }
    let Cheapest { codec, payload, .. } = best;
    let payload = payload.unwrap_or_else(|| match (codec, &order0) {
        (Codec::BitPack, _) => bitpack(words, k),
        (Codec::Huffman, Some(c)) => huffman::encode_counted(words, c.order0()),
        (Codec::Huffman, None) => huffman::encode(words),
        _ => raw_bytes(words, width),
    });
    (codec, payload)
}

/// The cheapest codec [`encode_best`] has weighed on `n` words of `width`
/// bits, its cost, and its payload if it was encoded.
struct Cheapest {
    codec: Codec,
    cost: f64,
    payload: Option<Vec<u8>>,
    n: usize,
    width: u8,
    time: f64,
}

impl Cheapest {
    /// Keep codec `c`'s payload `p` if it costs less.
    fn consider(&mut self, c: Codec, p: Vec<u8>) {
        let cost = cost(c, p.len(), self.n, self.width, self.time);
        if cost < self.cost {
            (self.codec, self.cost, self.payload) = (c, cost, Some(p));
        }
    }

    /// Encode `syms` in rANS codec `c` (fitted to their length) if its
    /// estimate is under `margin` times the cheapest cost, and keep it if
    /// it costs less.
    fn try_rans(
        &mut self,
        c: Codec,
        syms: &[u8],
        ctx: Context<'_>,
        counts: &rans::Counts,
        min_ctx: usize,
        margin: f64,
    ) {
        let c = c.fit(syms.len());
        if let Some(p) =
            rans_if_cheaper(c, syms, ctx, counts, min_ctx, self.cost * margin, self.time)
        {
            self.consider(c, p);
        }
    }
}

/// [`encode_best`]'s entropy coders on words below 256 (`syms` as bytes,
/// `counts0` their order-0 counts): Huffman priced exactly, order-0 and
/// packed rANS, then the context coders where they may pay.
fn try_entropy_coders<W: Word>(
    words: &[W],
    syms: &[u8],
    siblings: &[Sibling<'_, W>],
    opts: &LitOptions,
    counts0: &rans::Counts,
    best: &mut Cheapest,
) {
    let (n, width) = (words.len(), best.width);
    let raw_size = n * bytes_per_word(width);
    // Huffman's size from its code lengths, unless a bound from the
    // counts shows it can neither win nor come under NEAR_RAW (the
    // decisions below are then those its exact size makes).
    let symbols = symbol_cost(Codec::Huffman, n, width, opts.time);
    let floor = best.cost.max(raw_size as f64 * NEAR_RAW) - symbols;
    let huff = huffman::price_or_bound(counts0.order0(), 1.0, floor) + symbols;
    // As price_best decides: see NEAR_RAW.
    let near_raw = huff >= raw_size as f64 * NEAR_RAW;
    if huff < best.cost {
        (best.codec, best.cost, best.payload) = (Codec::Huffman, huff, None);
    }
    best.try_rans(
        Codec::Rans0,
        syms,
        Context::None,
        counts0,
        0,
        ORDER0_ENCODE_MARGIN,
    );
    if width <= PACKED_MAX_WIDTH && n >= MIN_PACKED_WORDS {
        let packed = pack_bits(words, width as u32);
        let counts = rans::count(&packed, &Context::None);
        best.try_rans(
            Codec::PackedRans0,
            &packed,
            Context::None,
            &counts,
            0,
            ORDER0_ENCODE_MARGIN,
        );
    }
    // Context coders need many words to pay for their tables.
    if opts.contexts.any() && n >= CONTEXT_MIN_WORDS && !near_raw {
        try_context_coders(syms, siblings, opts, counts0, best);
    }
}

/// [`encode_best`]'s context coders: order 1 and each sibling allowed,
/// each encoded only if its estimate beats the cheapest by
/// [`CONTEXT_MARGIN`].
fn try_context_coders<W: Word>(
    syms: &[u8],
    siblings: &[Sibling<'_, W>],
    opts: &LitOptions,
    counts0: &rans::Counts,
    best: &mut Cheapest,
) {
    let n = syms.len();
    let min_ctx = min_ctx_count(n, 1.0);
    let margin = 1.0 - CONTEXT_MARGIN;
    if opts.contexts.previous {
        let ctx = Context::Previous;
        let counts = rans_count_known(Codec::Rans1.fit(n), syms, &ctx, Some(counts0.order0()));
        best.try_rans(Codec::Rans1, syms, ctx, &counts, min_ctx, margin);
    }
    for s in siblings {
        if s.width > 8 || s.words.len() != n || !opts.contexts.sibling(s.index) {
            continue;
        }
        let sib = to_bytes(s.words);
        let ctx = Context::Sibling(&sib);
        let counted;
        let counts = match s.counts {
            Some(known) => known,
            None => {
                counted = rans::count(syms, &ctx);
                &counted
            }
        };
        let c = Codec::RansCond { sibling: s.index };
        best.try_rans(c, syms, ctx, counts, min_ctx, margin);
    }
}

/// Encode with one given codec (for tests).
#[cfg(test)]
pub fn encode_with<W: Word>(
    codec: Codec,
    words: &[W],
    width: u8,
    sibling: Option<&[W]>,
) -> Vec<u8> {
    match codec {
        Codec::Raw => raw_bytes(words, width),
        Codec::BitPack => bitpack(words, bits_for(or_all(words))),
        Codec::Huffman => huffman::encode(words),
        Codec::Rans0 | Codec::Rans0x32 => rans_counted(codec, &to_bytes(words), Context::None, 0),
        Codec::Rans1 | Codec::Rans1x32 => {
            let min_ctx = min_ctx_count(words.len(), 1.0);
            rans_counted(codec, &to_bytes(words), Context::Previous, min_ctx)
        }
        Codec::RansCond { .. } | Codec::RansCondx32 { .. } => {
            let sib = to_bytes(sibling.expect("conditional coder needs its sibling"));
            let min_ctx = min_ctx_count(words.len(), 1.0);
            rans_counted(codec, &to_bytes(words), Context::Sibling(&sib), min_ctx)
        }
        Codec::Zstd => zstd_compress(&raw_bytes(words, width), 19).unwrap_or_default(),
        Codec::PackedRans0 | Codec::PackedRans0x32 => {
            assert!(width <= 4, "packed rANS takes words of at most 4 bits");
            rans_counted(codec, &pack_bits(words, width as u32), Context::None, 0)
        }
        Codec::Rans0V1 | Codec::Rans1V1 | Codec::RansCondV1 { .. } => {
            panic!("{codec:?} is decode-only")
        }
    }
}

/// Words known to be < 256, as bytes.
pub(super) fn to_bytes<W: Word>(words: &[W]) -> Cow<'_, [u8]> {
    debug_assert!(words.iter().all(|&w| w.to_u64() < 256));
    to_bytes_lossy(words)
}

/// The low byte of every word (borrowed when words are bytes).
pub(super) fn to_bytes_lossy<W: Word>(words: &[W]) -> Cow<'_, [u8]> {
    match W::as_bytes(words) {
        Some(b) => Cow::Borrowed(b),
        None => Cow::Owned(words.iter().map(|&w| w.to_u64() as u8).collect()),
    }
}

/// `syms` in rANS under `ctx`, if its cost estimated from `counts` (the
/// counts of `syms` under `ctx`) is below `bound`: a candidate is encoded
/// only when it may win.
pub(super) fn rans_if_cheaper(
    codec: Codec,
    syms: &[u8],
    ctx: Context<'_>,
    counts: &rans::Counts,
    min_ctx: usize,
    bound: f64,
    time: f64,
) -> Option<Vec<u8>> {
    // Every symbol of `syms` is one the decoder steps through.
    let est = rans::estimate_counted(counts, min_ctx) + 4.0 * (lanes(codec) - rans::LANES) as f64;
    (est + symbol_cost(codec, syms.len(), 8, time) < bound)
        .then(|| rans_encode(codec, syms, ctx, counts, min_ctx))
}

/// States of a rANS codec.
pub(super) fn lanes(codec: Codec) -> usize {
    match codec {
        Codec::Rans0x32 | Codec::Rans1x32 | Codec::RansCondx32 { .. } | Codec::PackedRans0x32 => {
            rans::WIDE
        }
        _ => rans::LANES,
    }
}

/// The counts of `syms` under `ctx` for `codec` (whose number of states is
/// the number of order-1 segments).
pub(super) fn rans_count(codec: Codec, syms: &[u8], ctx: &Context<'_>) -> rans::Counts {
    rans_count_known(codec, syms, ctx, None)
}

/// [`rans_count`], given the symbols' order-0 counts when known (see
/// [`rans::count_n_known`]).
pub(super) fn rans_count_known(
    codec: Codec,
    syms: &[u8],
    ctx: &Context<'_>,
    order0: Option<&[u32; 256]>,
) -> rans::Counts {
    if lanes(codec) == rans::WIDE {
        rans::count_n_known::<{ rans::WIDE }>(syms, ctx, order0)
    } else {
        rans::count_n_known::<{ rans::LANES }>(syms, ctx, order0)
    }
}

/// `syms` counted under `ctx` and coded in rANS with `codec`'s states.
#[cfg(test)]
pub(super) fn rans_counted(codec: Codec, syms: &[u8], ctx: Context<'_>, min_ctx: usize) -> Vec<u8> {
    rans_encode(codec, syms, ctx, &rans_count(codec, syms, &ctx), min_ctx)
}

/// `syms` (counted under `ctx`) in rANS with `codec`'s number of states.
pub(super) fn rans_encode(
    codec: Codec,
    syms: &[u8],
    ctx: Context<'_>,
    counts: &rans::Counts,
    min_ctx: usize,
) -> Vec<u8> {
    if lanes(codec) == rans::WIDE {
        rans::encode_counted::<{ rans::WIDE }>(syms, ctx, counts, min_ctx)
    } else {
        rans::encode_counted::<{ rans::LANES }>(syms, ctx, counts, min_ctx)
    }
}
