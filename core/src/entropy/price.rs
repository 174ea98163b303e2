//! Pricing candidate codecs without writing them, and the screens that
//! skip those that cannot win.

use super::*;

/// How a candidate of [`encode_cheapest`] is priced.
pub(super) enum Price<'a> {
    /// Exact without encoding (raw, bit-packed, Huffman).
    Exact,
    /// Encoded to be priced (zstd).
    Encoded(Vec<u8>),
    /// Estimated from these counts (rANS); `None`: the shared order-0 counts.
    Counted(Option<std::borrow::Cow<'a, rans::Counts>>),
}

/// Candidate codecs of one stream, priced (see [`encode_cheapest`]), with
/// what pricing made that encoding reuses.
pub(super) struct Priced<'a, W> {
    words: &'a [W],
    width: u8,
    k: u32,
    bytes: Option<Cow<'a, [u8]>>,
    packed: Option<Vec<u8>>,
    counts0: Option<rans::Counts>,
    siblings: &'a [Sibling<'a, W>],
    sib_bytes: Vec<(u8, Cow<'a, [u8]>)>,
    zstd_level: i32,
    /// Price as [`encode_best`] decides (see [`price_best`]).
    as_best: bool,
    /// [`LitOptions::overhead`] (pricing as `encode_best`, else 1).
    overhead: f64,
    /// [`LitOptions::time`].
    time: f64,
    min_ctx: usize,
    /// `(price, codec, how)`, cheapest first (ties in the callers' order).
    list: Vec<(f64, Codec, Price<'a>)>,
}

impl<'a, W: Word> Priced<'a, W> {
    fn new(
        codecs: &[Codec],
        words: &'a [W],
        width: u8,
        siblings: &'a [Sibling<'a, W>],
        as_best: bool,
        opts: &LitOptions,
    ) -> Self {
        let n = words.len();
        let max = or_all(words);
        let overhead = if as_best { opts.overhead } else { 1.0 };
        let (zstd_level, time) = (opts.zstd_level.unwrap_or(ZSTD_LEVEL), opts.time);
        let mut p = Priced {
            words,
            width,
            k: bits_for(max),
            bytes: (max < 256).then(|| to_bytes(words)),
            packed: None,
            counts0: None,
            siblings,
            sib_bytes: Vec::new(),
            zstd_level,
            as_best,
            overhead,
            time,
            min_ctx: min_ctx_count(n, overhead),
            list: Vec::with_capacity(codecs.len()),
        };
        for &c in codecs {
            // As encode_best decides, a stream that order 0 (Huffman)
            // cannot code under NEAR_RAW of its raw size is not counted
            // under contexts.
            if as_best && c.contextual() && p.near_raw() {
                continue;
            }
            if let Some((bytes, how)) = p.price(c) {
                let price = bytes + symbol_cost(c, n, width, time);
                p.list.push((price, c, how));
            }
        }
        p.list.sort_by(|a, b| a.0.total_cmp(&b.0));
        p
    }

    fn syms(&self) -> &[u8] {
        self.bytes
            .as_deref()
            .expect("rANS and Huffman take words < 256")
    }

    /// Make sibling `index`'s bytes (once).
    fn make_sibling(&mut self, index: u8) {
        if !self.sib_bytes.iter().any(|s| s.0 == index) {
            let s = self.siblings.iter().find(|s| s.index == index);
            let s = s.expect("conditional coder needs its sibling");
            self.sib_bytes.push((index, to_bytes_lossy(s.words)));
        }
    }

    /// Sibling `index`'s bytes (made by [`Priced::make_sibling`]).
    fn sibling(&self, index: u8) -> &[u8] {
        let s = self.sib_bytes.iter().find(|s| s.0 == index);
        &s.expect("made when priced").1
    }

    /// Whether Huffman, priced, is no cheaper than [`NEAR_RAW`] of the raw
    /// size (false if Huffman is not priced).
    fn near_raw(&self) -> bool {
        let raw = (self.words.len() * bytes_per_word(self.width)) as f64;
        self.list
            .iter()
            .find(|e| e.1 == Codec::Huffman)
            .is_some_and(|e| e.0 >= raw * NEAR_RAW)
    }

    fn cheapest(&self) -> f64 {
        self.list.iter().map(|c| c.0).fold(f64::INFINITY, f64::min)
    }

    /// Bytes of `c` (estimated for rANS); `None` when a screen rules it out.
    fn price(&mut self, c: Codec) -> Option<(f64, Price<'a>)> {
        let (n, width) = (self.words.len(), self.width);
        Some(match c {
            Codec::Raw => ((n * bytes_per_word(width)) as f64, Price::Exact),
            Codec::BitPack => ((1 + (n * self.k as usize).div_ceil(8)) as f64, Price::Exact),
            Codec::Huffman => {
                // As encode_best: a bound that shows Huffman can neither be
                // the cheapest nor come under NEAR_RAW (the cheapest so far
                // is the flat codec, weighed first) is its price, ranked as
                // its exact price would be.
                let floor = match self.as_best {
                    true => {
                        let raw = (n * bytes_per_word(width)) as f64;
                        self.cheapest().max(raw * NEAR_RAW) - symbol_cost(c, n, width, self.time)
                    }
                    false => f64::INFINITY,
                };
                let (share, counts) = (self.overhead, self.order0().order0());
                (huffman::price_or_bound(counts, share, floor), Price::Exact)
            }
            Codec::Zstd => {
                let raw = raw_bytes(self.words, width);
                let z = zstd_compress(&raw, self.zstd_level).unwrap_or_default();
                (z.len() as f64, Price::Encoded(z))
            }
            Codec::Rans0 | Codec::Rans0x32 => {
                // (Nothing priced yet: no screen can rule it out.)
                if self.counts0.is_none()
                    && !self.list.is_empty()
                    && screen(
                        self.syms(),
                        n,
                        width,
                        c,
                        self.margin(),
                        self.overhead,
                        self.time,
                    ) >= self.cheapest()
                {
                    return None;
                }
                let est = self.estimate(c, None, 0);
                (est, Price::Counted(None))
            }
            Codec::Rans1 | Codec::Rans1x32 => {
                let order0 = self.counts0.as_ref().map(|c| c.order0());
                let counts = rans_count_known(c, self.syms(), &Context::Previous, order0);
                self.counts0.get_or_insert_with(|| counts.pooled());
                (
                    self.estimate(c, Some(&counts), self.min_ctx),
                    Price::Counted(Some(std::borrow::Cow::Owned(counts))),
                )
            }
            Codec::RansCond { sibling } | Codec::RansCondx32 { sibling } => {
                self.make_sibling(sibling);
                // A sibling's known counts are borrowed, not copied.
                let known = self.siblings.iter().find(|s| s.index == sibling);
                let counts = match known.and_then(|s| s.counts) {
                    Some(known) => std::borrow::Cow::Borrowed(known),
                    None => std::borrow::Cow::Owned(rans_count(
                        c,
                        self.syms(),
                        &Context::Sibling(self.sibling(sibling)),
                    )),
                };
                self.counts0.get_or_insert_with(|| counts.pooled());
                (
                    self.estimate(c, Some(&counts), self.min_ctx),
                    Price::Counted(Some(counts)),
                )
            }
            Codec::PackedRans0 | Codec::PackedRans0x32 => {
                assert!(width <= 4, "packed rANS takes words of at most 4 bits");
                let packed = pack_bits(self.words, width as u32);
                if !self.list.is_empty()
                    && screen(
                        &packed,
                        n,
                        width,
                        c,
                        self.margin(),
                        self.overhead,
                        self.time,
                    ) >= self.cheapest()
                {
                    return None;
                }
                let counts = rans_count(c, &packed, &Context::None);
                self.packed = Some(packed);
                (
                    self.estimate(c, Some(&counts), 0),
                    Price::Counted(Some(std::borrow::Cow::Owned(counts))),
                )
            }
            Codec::Rans0V1 | Codec::Rans1V1 | Codec::RansCondV1 { .. } => {
                panic!("{c:?} is decode-only")
            }
        })
    }

    /// Estimated bytes of `counts` (the order-0 counts if `None`) in `c`.
    /// Writing, the estimate keeps its margin: a codec whose estimate wins
    /// by a hair is not worth encoding. As [`encode_best`], which encodes
    /// every rANS codec that may win and compares exact sizes, it has none,
    /// and context coders must win by [`CONTEXT_MARGIN`].
    fn estimate(&mut self, c: Codec, counts: Option<&rans::Counts>, min_ctx: usize) -> f64 {
        let (as_best, margin, overhead) = (self.as_best, self.margin(), self.overhead);
        let counts = match counts {
            Some(c) => c,
            None => self.order0(),
        };
        let states = 4.0 * (lanes(c) - rans::LANES) as f64;
        let est = rans::estimate_with(counts, min_ctx, margin, overhead) + states * overhead;
        if as_best && counts.contextual() {
            est / (1.0 - CONTEXT_MARGIN)
        } else {
            est
        }
    }

    /// Whether estimates keep the writer's margin: writing, and pricing a
    /// sample whose region will be written that way; not when pricing as
    /// [`encode_best`] decides a whole stream.
    fn margin(&self) -> bool {
        !self.as_best || self.overhead < 1.0
    }

    /// The order-0 counts, counted once (or summed from a sibling's).
    fn order0(&mut self) -> &rans::Counts {
        if self.counts0.is_none() {
            self.counts0 = Some(order0_counts(self.syms(), self.k, self.siblings));
        }
        self.counts0.as_ref().expect("just counted")
    }

    /// The cheapest by exact size among the cheapest by price and any other
    /// priced below the exact cost of the best encoded before it.
    fn encode(mut self) -> (Codec, Vec<u8>) {
        let (n, width) = (self.words.len(), self.width);
        let list = std::mem::take(&mut self.list);
        let mut best: Option<(f64, Codec, Vec<u8>)> = None;
        for (price, c, how) in list {
            if best.as_ref().is_some_and(|b| price >= b.0) {
                break;
            }
            let payload = match how {
                Price::Encoded(p) => p,
                Price::Exact => match c {
                    Codec::Raw => raw_bytes(self.words, width),
                    Codec::BitPack => match &self.packed {
                        // The words already packed for packed rANS, at
                        // the same width: the same bytes.
                        Some(p) if self.k == width as u32 => {
                            let mut out = Vec::with_capacity(1 + p.len());
                            out.push(width);
                            out.extend_from_slice(p);
                            out
                        }
                        _ => bitpack(self.words, self.k),
                    },
                    _ => match &self.counts0 {
                        Some(c) => huffman::encode_counted(self.words, c.order0()),
                        None => huffman::encode(self.words),
                    },
                },
                Price::Counted(counts) => {
                    let (ctx, m) = match c {
                        Codec::Rans1 | Codec::Rans1x32 => (Context::Previous, self.min_ctx),
                        Codec::RansCond { sibling } | Codec::RansCondx32 { sibling } => {
                            (Context::Sibling(self.sibling(sibling)), self.min_ctx)
                        }
                        _ => (Context::None, 0),
                    };
                    let counts = counts
                        .as_deref()
                        .or(self.counts0.as_ref())
                        .expect("counted");
                    let syms = match c {
                        Codec::PackedRans0 | Codec::PackedRans0x32 => {
                            self.packed.as_deref().expect("packed")
                        }
                        _ => self.syms(),
                    };
                    rans_encode(c, syms, ctx, counts, m)
                }
            };
            let exact = cost(c, payload.len(), n, width, self.time);
            if best.as_ref().is_none_or(|b| exact < b.0) {
                best = Some((exact, c, payload));
            }
        }
        let (_, c, p) = best.expect("encode_cheapest needs a codec");
        (c, p)
    }
}

/// Encode `words` with whichever of `codecs` (fitted to the stream, see
/// [`Codec::fit`]) costs least (see [`cost`]), encoding as few as possible:
/// rANS codecs are priced from their counts, raw, bit-packed and Huffman
/// exactly without encoding. The cheapest is encoded, and so is any other
/// priced below the exact cost of the best encoded so far: the codec
/// written is the cheapest by exact size among those encoded. (A rANS
/// estimate is slightly pessimistic, so a codec whose estimate loses by a
/// hair is not encoded.) Counts are shared: order 0 is the sum of a context
/// coder's rows. A rANS codec that must count a long stream of its own is
/// first screened on every 8th symbol, optimistically, against the
/// cheapest price so far. `siblings` are the conditional coders' contexts,
/// by index. Words must fit the codecs (e.g. < 256 for rANS).
pub fn encode_cheapest<'a, W: Word>(
    codecs: &[Codec],
    words: &'a [W],
    width: u8,
    siblings: &'a [Sibling<'a, W>],
) -> (Codec, Vec<u8>) {
    Priced::new(
        codecs,
        words,
        width,
        siblings,
        false,
        &LitOptions::default(),
    )
    .encode()
}

/// zstd level of a zstd candidate where none is given: the writer's
/// default, where zstd's deeper parse pays for its time on the few
/// streams it wins.
const ZSTD_LEVEL: i32 = 19;

/// The codec [`encode_best`] would consider cheapest, and its price in
/// bytes, from counts alone: nothing is encoded but zstd. For the search
/// on samples of large tensors, where what is written is coded again.
pub fn price_best<'a, W: Word>(
    words: &'a [W],
    width: u8,
    siblings: &'a [Sibling<'a, W>],
    opts: &LitOptions,
) -> (Codec, usize) {
    let codecs = best_candidates(words, width, siblings, opts);
    let p = Priced::new(&codecs, words, width, siblings, true, opts);
    let (price, c, _) = p.list.first().expect("a flat codec is always a candidate");
    let bytes = price - symbol_cost(*c, words.len(), width, opts.time);
    (*c, bytes.ceil() as usize)
}

/// The smaller of bit-packed and raw for `n` words of `width` bits whose
/// largest (or OR of all) is `max`.
pub fn flat_codec(n: usize, max: u64, width: u8) -> Codec {
    if 1 + (n * bits_for(max) as usize).div_ceil(8) < n * bytes_per_word(width) {
        Codec::BitPack
    } else {
        Codec::Raw
    }
}

/// The codecs [`encode_best`] weighs for these words.
pub(super) fn best_candidates<W: Word>(
    words: &[W],
    width: u8,
    siblings: &[Sibling<'_, W>],
    opts: &LitOptions,
) -> Vec<Codec> {
    let n = words.len();
    let max = or_all(words);
    let mut v = vec![flat_codec(n, max, width)];
    if max < 256 && n >= MIN_ENTROPY_WORDS {
        v.extend([Codec::Huffman, Codec::Rans0.fit(n)]);
        if width <= PACKED_MAX_WIDTH && n >= MIN_PACKED_WORDS {
            v.push(Codec::PackedRans0.fit(symbols(Codec::PackedRans0, n, width)));
        }
        if n >= CONTEXT_MIN_WORDS {
            if opts.contexts.previous {
                v.push(Codec::Rans1.fit(n));
            }
            for s in siblings {
                if s.width <= 8 && s.words.len() == n && opts.contexts.sibling(s.index) {
                    v.push(Codec::RansCond { sibling: s.index }.fit(n));
                }
            }
        }
    }
    if opts.zstd_level.is_some() && n >= MIN_ZSTD_WORDS {
        v.push(Codec::Zstd);
    }
    v
}

/// Share of its raw size under which Huffman must code a stream for
/// [`encode_best`] and [`price_best`] to count it under contexts (order 1,
/// conditional): the counts of a context coder are the search's largest
/// cost, and a stream of bytes that order 0 cannot compress (mantissa
/// bytes) is noise to its contexts too, but for the odd one (see the
/// test). Huffman's size is exact from the order-0 counts, and both
/// functions compute it alike (with an order-0 rANS estimate on one side
/// and its exact size on the other, a stream near the line was weighed
/// with its context coders by one only). Fields narrower than a byte
/// always compress against raw, and are always weighed. Lower shares
/// skip context coders that would have won.
pub(super) const NEAR_RAW: f64 = 0.95;

/// A context coder must be estimated this much cheaper (as a fraction)
/// than the best without contexts to be chosen (as [`encode_best`] does):
/// its tables are estimated less well, and on a sample.
pub(super) const CONTEXT_MARGIN: f64 = 0.005;

/// Streams shorter than this are counted whole, not screened: counting
/// them costs little more than the screen.
const SCREEN_MIN_SYMBOLS: usize = 1 << 15;
/// The screen counts every this-many-th symbol.
const SCREEN_STRIDE: usize = 8;
/// Standard errors the screen takes off the sample's entropy, so that it
/// errs optimistic: a codec it rules out would almost surely have lost.
const SCREEN_STD_ERRORS: f64 = 3.0;

/// An optimistic price of `syms` in order-0 rANS `codec`, from every 8th
/// symbol: the sample's entropy per symbol less three standard errors (the
/// variance of a symbol's information over the sample's size), its table
/// cost unscaled, priced as [`Priced::estimate`] prices counts (with the
/// writer's `margin` or not). Uniform bytes (where raw is as good) have no
/// variance and fail it at once, and so do fields a hair from uniform
/// that the writer's margin would reject once counted (bf16 mantissas). 0
/// for short streams, which are cheap to count whole.
pub(super) fn screen(
    syms: &[u8],
    n: usize,
    width: u8,
    codec: Codec,
    margin: bool,
    overhead: f64,
    time: f64,
) -> f64 {
    if syms.len() < SCREEN_MIN_SYMBOLS {
        return 0.0;
    }
    let mut sample = [0u32; 256];
    for &b in syms.iter().step_by(SCREEN_STRIDE) {
        sample[b as usize] += 1;
    }
    let m = syms.len().div_ceil(SCREEN_STRIDE) as f64;
    let (mut h, mut h2) = (0.0, 0.0);
    for &c in &sample {
        if c > 0 {
            let p = c as f64 / m;
            let info = -p.log2();
            h += p * info;
            h2 += p * info * info;
        }
    }
    let se = ((h2 - h * h).max(0.0) / m).sqrt();
    let bits = (h - SCREEN_STD_ERRORS * se).max(0.0) * syms.len() as f64;
    let fixed = table::estimate_table_bytes(&sample) + 4.0 * (lanes(codec) - rans::LANES) as f64;
    rans::stream_bytes(bits, fixed * overhead, margin) + symbol_cost(codec, n, width, time)
}
