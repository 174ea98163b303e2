//! Segments to regions to programs, written in order into the archive.

use std::borrow::Cow;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use crate::pool::prelude::*;
use sha2::{Digest, Sha256};

use super::dedup::duplicates;
use super::segments::{read_cow, read_sample, segment_region_words};
use super::{CompressOptions, CompressReport, file_label, io};
use crate::container::{BATCH_BYTES_PER_THREAD, REGIONS_AHEAD_PER_THREAD};
use crate::container::{
    HEADER_ZSTD_LEVEL, PREAMBLE_LEN, Preamble, ReadAt, Region, Segment, SegmentDesc, SegmentKind,
    layout, pack_table, write_table, xxh3,
};
use crate::dsl::{Node, wire};
use crate::error::EncodeError;
use crate::pool::pool;
use crate::search::{self, Instantiate, Prior, Shape, Target};
use crate::words::bytes_to_words;

/// Bytes segments of a tensor file this long or longer (a GGUF's token
/// tables: 4.4 MB in gemma-3-270m) are coded at [`BIG_BYTES_ZSTD_LEVEL`]:
/// HEADER_ZSTD_LEVEL spends 0.5 s on those 4.4 MB for 1.5% less than
/// level 9 (0.2 s), a fifth of the whole file's compression time.
const BIG_BYTES: u64 = 1 << 20;
/// zstd level of bytes segments of [`BIG_BYTES`] or more.
const BIG_BYTES_ZSTD_LEVEL: i32 = 9;

/// A region's program, the checksum of its source bytes, and them
/// (borrowed from a source in memory). The writer serializes the program
/// straight into the archive.
type CodedRegion<'s> = (Node, u64, Cow<'s, [u8]>);

/// A segment's shape, candidates judged, and its program if the search
/// coded the whole segment.
type Searched = (Shape, u32, Option<Node>);

/// How one segment is coded.
enum Plan {
    /// Every region with this shape.
    Shape(Shape),
    /// Identical to words of an earlier segment, from this word on.
    Ref(u32, u64),
}

/// Code the given segments of a source into `out`.
pub(super) fn encode_segments<W: Write + Seek>(
    src: &dyn ReadAt,
    name: &Path,
    descs: Vec<SegmentDesc>,
    region_words: u64,
    zstd_level: i32,
    out: &mut W,
    opts: &CompressOptions,
) -> Result<CompressReport, EncodeError> {
    let label = name.display().to_string();
    let len = src.len().map_err(|e| io(&label, e))?;
    let pool = pool(opts.threads);
    let region_words = region_words.clamp(MIN_REGION_WORDS, crate::dsl::MAX_NODE_WORDS);
    let zstd_level = opts.level.zstd(zstd_level);

    let dup_of = duplicates(src, &descs, &label)?;
    let alone: Vec<bool> = dup_of.iter().map(Option::is_some).collect();
    let (descs, place) = layout::group_small_tensors(descs, &alone);
    let mut plans = duplicate_plans(&descs, &dup_of, &place);
    let search_start = std::time::Instant::now();
    let (coded, judged, searched_tensors) =
        search_segments(src, &descs, &mut plans, &label, &pool, opts)?;
    let search_seconds = search_start.elapsed().as_secs_f64();

    // Pass 2: regions coded in parallel, written in order.
    out.write_all(&[0u8; PREAMBLE_LEN as usize])
        .map_err(|e| io("<output>", e))?;
    opts.progress
        .start(&format!("compress {}", file_label(name)), len);
    let geometry = region_geometry(&descs, &plans, region_words);
    let coder = RegionCoder {
        src,
        descs: &descs,
        plans: &plans,
        geometry: &geometry,
        coded: &coded,
        label: &label,
        zstd_level,
        level: opts.level,
        has_tensors: descs.iter().any(|d| d.kind == SegmentKind::Tensor),
    };
    let mut writer = RegionWriter {
        out: &mut *out,
        descs: &descs,
        geometry: &geometry,
        opts,
        file_sha: opts.source_sha256.is_none().then(Sha256::new),
        sha_at: 0,
        body_pos: PREAMBLE_LEN,
        regions: vec![Vec::new(); descs.len()],
    };
    code_and_write(&pool, &coder, &mut writer)?;
    let RegionWriter {
        file_sha,
        sha_at,
        body_pos,
        regions,
        ..
    } = writer;
    let segments: Vec<Segment> = descs
        .iter()
        .zip(regions)
        .zip(&geometry)
        .map(|((d, regions), &(region_words, _))| Segment {
            desc: d.clone(),
            region_words,
            regions,
        })
        .collect();
    opts.progress.finish();
    assert_eq!(sha_at, len, "regions tile the file");
    let sha256: [u8; 32] = match file_sha {
        Some(sha) => sha.finalize().into(),
        None => opts.source_sha256.expect("hashed unless given"),
    };
    let table_len = finish_archive(out, &segments, len, sha256, body_pos)?;
    Ok(CompressReport {
        original_len: len,
        archive_len: body_pos + table_len,
        sha256,
        searched_tensors,
        judged,
        search_seconds,
        format: None,
        unread: Vec::new(),
    })
}

/// Fewest words in a region: fewer would spend more on each region's
/// program header and table entry than coding it apart can gain.
pub(super) const MIN_REGION_WORDS: u64 = 1024;

/// A plan for each segment in the grouped layout: a `Ref` for each
/// duplicate of an earlier tensor, `None` (for the search) for the rest.
fn duplicate_plans(
    descs: &[SegmentDesc],
    dup_of: &[Option<usize>],
    place: &[(usize, u64)],
) -> Vec<Option<Plan>> {
    let mut plans: Vec<Option<Plan>> = (0..descs.len()).map(|_| None).collect();
    for (i, j) in dup_of.iter().enumerate() {
        if let Some(j) = j {
            let (seg, _) = place[i];
            let (target, at) = place[*j];
            let wb = descs[target].dtype.word_bytes() as u64;
            plans[seg] = Some(Plan::Ref(target as u32, at / wb));
        }
    }
    plans
}

/// Region geometry per segment: (words per region, words in all).
fn region_geometry(
    descs: &[SegmentDesc],
    plans: &[Option<Plan>],
    region_words: u64,
) -> Vec<(u64, u64)> {
    descs
        .iter()
        .zip(plans)
        .map(|(d, plan)| {
            let generic = matches!(
                plan,
                Some(Plan::Shape(Shape::Generic | Shape::GenericPlanes))
            );
            (
                segment_region_words(d, region_words, generic),
                d.len / d.dtype.word_bytes() as u64,
            )
        })
        .collect()
}

/// What coding a region needs, shared by the pool's threads.
struct RegionCoder<'a, 's> {
    src: &'s dyn ReadAt,
    descs: &'a [SegmentDesc],
    plans: &'a [Option<Plan>],
    geometry: &'a [(u64, u64)],
    /// Programs the search coded whole, per segment.
    coded: &'a [Option<Node>],
    label: &'a str,
    zstd_level: i32,
    level: crate::Level,
    /// Whether the file holds tensors (so its other bytes are a header).
    has_tensors: bool,
}

impl<'s> RegionCoder<'_, 's> {
    /// Every region of every segment, batched across segments so that many
    /// small segments still keep every thread busy.
    fn jobs(&self) -> Vec<(usize, u64)> {
        self.geometry
            .iter()
            .enumerate()
            .flat_map(|(si, &(rw, total))| (0..total.div_ceil(rw)).map(move |r| (si, r)))
            .collect()
    }

    /// Words of region `r` of segment `si`.
    fn region_len(&self, si: usize, r: u64) -> u64 {
        let (rw, total) = self.geometry[si];
        rw.min(total - r * rw)
    }

    /// Code region `r` of segment `si`.
    fn code(&self, si: usize, r: u64) -> Result<CodedRegion<'s>, EncodeError> {
        let cfg = Instantiate {
            zstd_level: self.zstd_level,
            ..Instantiate::at(self.level)
        };
        let d = &self.descs[si];
        // The header (and any other bytes) of a tensor file: JSON, which
        // zstd -19 codes slowly for little gain over HEADER_ZSTD_LEVEL;
        // megabytes of them (a GGUF's token tables) at a faster level.
        let header_level = if d.len >= BIG_BYTES && !self.level.slow_big_bytes() {
            BIG_BYTES_ZSTD_LEVEL
        } else {
            HEADER_ZSTD_LEVEL
        };
        let bytes_cfg = Instantiate {
            zstd_level: self.zstd_level.min(header_level),
            ..cfg
        };
        let (rw, total) = self.geometry[si];
        let wb = d.dtype.word_bytes() as u64;
        let start = r * rw;
        let n = self.region_len(si, r);
        // (A small file read whole lends its bytes: no copy.)
        let bytes = read_cow(self.src, d.offset + start * wb, (n * wb) as usize)
            .map_err(|e| io(self.label, e))?;
        let coded = &self.coded[si];
        let node = match self.plans[si].as_ref().expect("every segment has a plan") {
            Plan::Ref(j, at) => Node::Ref {
                width: d.width(),
                n,
                segment: *j,
                offset: at + start,
            },
            // A tensor in one region the search coded whole
            // (with the search's zstd level, which is this one).
            Plan::Shape(_)
                if rw >= total
                    && self.zstd_level == Instantiate::at(self.level).zstd_level
                    && coded.is_some() =>
            {
                coded.clone().expect("checked")
            }
            // A region larger than any other node (bytes, format v4): one
            // byte literal, as the format allows such a region to be.
            Plan::Shape(_) if n > crate::dsl::MAX_NODE_WORDS => {
                let level = if self.has_tensors {
                    bytes_cfg.zstd_level
                } else {
                    cfg.zstd_level
                };
                byte_literal(&bytes, level)
            }
            Plan::Shape(shape) if d.kind == SegmentKind::Bytes && self.has_tensors => {
                code_region(shape, &bytes, d.width(), &bytes_cfg)
            }
            Plan::Shape(shape) => code_region(shape, &bytes, d.width(), &cfg),
        };
        let checksum = xxh3(&bytes);
        // The source bytes go back to be hashed in order.
        Ok((node, checksum, bytes))
    }
}

/// Writes coded regions in order, hashing their source bytes.
struct RegionWriter<'a, W> {
    out: &'a mut W,
    descs: &'a [SegmentDesc],
    geometry: &'a [(u64, u64)],
    opts: &'a CompressOptions,
    /// The SHA-256 of the whole file (for the preamble), taken over the
    /// regions as they are written (they tile the file in order); `None`
    /// when the caller gave it ([`CompressOptions::source_sha256`]).
    file_sha: Option<Sha256>,
    /// How many bytes of the file `file_sha` has seen.
    sha_at: u64,
    /// Where the next region's body goes in the archive.
    body_pos: u64,
    /// Each segment's regions written so far.
    regions: Vec<Vec<Region>>,
}

impl<W: Write> RegionWriter<'_, W> {
    /// Write region `r` of segment `si`, the next in order, hashing its
    /// source bytes.
    fn write_one(&mut self, (si, r): (usize, u64), coded: CodedRegion) -> Result<(), EncodeError> {
        let (node, checksum, bytes) = coded;
        let d = &self.descs[si];
        let wb = d.dtype.word_bytes() as u64;
        let (rw, total) = self.geometry[si];
        let raw_len = rw.min(total - r * rw) * wb;
        assert_eq!(
            d.offset + r * rw * wb,
            self.sha_at,
            "regions tile the file in order"
        );
        if let Some(sha) = &mut self.file_sha {
            sha.update(&bytes);
        }
        self.sha_at += raw_len;
        let body_len = wire::serialized_size(&node) as u64;
        wire::write_to(&node, &mut *self.out).map_err(|e| io("<output>", e))?;
        self.regions[si].push(Region {
            body_offset: self.body_pos,
            body_len,
            checksum,
        });
        self.body_pos += body_len;
        self.opts.progress.advance(raw_len);
        Ok(())
    }
}

/// Code every region and write them in order. With two threads or more,
/// `threads - 1` of the pool's workers and this thread take regions as
/// they come free ([`crate::ordered`]), at most [`BATCH_BYTES_PER_THREAD`]
/// bytes of source and [`REGIONS_AHEAD_PER_THREAD`] regions a thread
/// ahead of the next region to write; this thread writes (and hashes)
/// each region as soon as it is coded. The first error, in order, ends it.
fn code_and_write<W: Write>(
    pool: &crate::pool::Workers,
    coder: &RegionCoder<'_, '_>,
    writer: &mut RegionWriter<'_, W>,
) -> Result<(), EncodeError> {
    let jobs = coder.jobs();
    let threads = pool.current_num_threads();
    if threads < 2 {
        for &(si, r) in &jobs {
            writer.write_one((si, r), coder.code(si, r)?)?;
        }
        return Ok(());
    }
    let sizes: Vec<u64> = jobs
        .iter()
        .map(|&(si, r)| coder.region_len(si, r) * coder.descs[si].dtype.word_bytes() as u64)
        .collect();
    let ahead = crate::ordered::Ahead {
        bytes: threads as u64 * BATCH_BYTES_PER_THREAD,
        items: threads * REGIONS_AHEAD_PER_THREAD,
    };
    let work = crate::ordered::InOrder::new(&sizes, ahead, |_| ());
    let code = |i: usize, ()| {
        let (si, r) = jobs[i];
        coder.code(si, r)
    };
    // (Should coding panic, the region fails first and the panic goes
    // on: the scope raises it.)
    let panicked = || EncodeError::SelfCheck("the encoder panicked".into());
    // The helpers are the pool's workers: every read of the source is on
    // a thread of the pool.
    pool.in_place_scope(|scope| {
        for _ in 1..threads {
            scope.spawn(|_| work.help(&code, panicked));
        }
        work.hand_out(&code, panicked, |i, coded| writer.write_one(jobs[i], coded))
    })
}

/// Write the segment table after the bodies, then the preamble over the
/// placeholder at the start; the length of the table.
fn finish_archive<W: Write + Seek>(
    out: &mut W,
    segments: &[Segment],
    len: u64,
    sha256: [u8; 32],
    body_pos: u64,
) -> Result<u64, EncodeError> {
    let table = pack_table(&write_table(segments));
    out.write_all(&table).map_err(|e| io("<output>", e))?;
    let pre = Preamble {
        version: crate::FORMAT_VERSION,
        original_len: len,
        sha256,
        table_offset: body_pos,
        table_len: table.len() as u64,
        table_checksum: xxh3(&table),
    };
    out.seek(SeekFrom::Start(0))
        .map_err(|e| io("<output>", e))?;
    out.write_all(&pre.write()).map_err(|e| io("<output>", e))?;
    out.seek(SeekFrom::End(0)).map_err(|e| io("<output>", e))?;
    Ok(table.len() as u64)
}

/// The search's shape for every segment without a plan (duplicates have
/// theirs): the programs it coded whole (tensors no larger than its
/// sample), candidates judged, and tensors searched.
fn search_segments(
    src: &dyn ReadAt,
    descs: &[SegmentDesc],
    plans: &mut [Option<Plan>],
    label: &str,
    pool: &crate::pool::Workers,
    opts: &CompressOptions,
) -> Result<(Vec<Option<Node>>, u64, u64), EncodeError> {
    let prior = opts
        .prior
        .clone()
        .unwrap_or_else(|| std::sync::Arc::new(Prior::uniform()));
    let searched: Vec<Result<Option<Searched>, EncodeError>> = pool.install(|| {
        descs
            .par_iter()
            .zip(&plans[..])
            .map(|(d, p)| {
                if p.is_some() {
                    return Ok(None);
                }
                if d.kind == SegmentKind::Bytes {
                    return Ok(Some((Shape::Generic, 0, None)));
                }
                let (bytes, words) = read_sample(src, d).map_err(|e| io(label, e))?;
                let t = Target::of_segment(d, &bytes, &words, opts.region_words);
                let syn = search::synthesize_at(&t, &prior, opts.budget, opts.level);
                Ok(Some((syn.shape, syn.judged, syn.node)))
            })
            .collect()
    });
    let mut judged = 0u64;
    let mut searched_tensors = 0u64;
    // Programs the search coded whole (tensors no larger than its sample).
    let mut coded: Vec<Option<Node>> = vec![None; descs.len()];
    for ((p, s), c) in plans.iter_mut().zip(searched).zip(&mut coded) {
        if let Some((shape, j, node)) = s? {
            judged += j as u64;
            searched_tensors += (j > 0) as u64;
            *p = Some(Plan::Shape(shape));
            *c = node;
        }
    }
    Ok((coded, judged, searched_tensors))
}

/// `bytes` as one literal of 8-bit words: a zstd frame at `level` whose
/// window is the whole region, or the bytes themselves where zstd does not
/// make them smaller. (zstd -19's own window is 8 MiB: with it, a 45.6 MB
/// static library in 32 MiB regions is 0.5% larger than `zstd -19` of the
/// whole file, with the region's window 0.1% smaller, at the same speed.)
fn byte_literal(bytes: &[u8], level: i32) -> Node {
    let n = bytes.len() as u64;
    let max_window = crate::dsl::MAX_BYTE_REGION_WORDS.trailing_zeros();
    match crate::entropy::zstd_compress_whole(bytes, level, max_window) {
        Ok(z) if z.len() < bytes.len() => Node::Lit {
            width: 8,
            n,
            codec: crate::dsl::Codec::Zstd,
            payload: z,
        },
        _ => Node::Lit {
            width: 8,
            n,
            codec: crate::dsl::Codec::Raw,
            payload: bytes.to_vec(),
        },
    }
}

/// Code one region with a shape. The program is not executed here: the
/// instantiation is exact by construction, and [`CompressOptions::verify`]
/// proves the whole archive (decoding it, as a reader would) instead.
fn code_region(shape: &Shape, bytes: &[u8], width: u8, cfg: &Instantiate) -> Node {
    search::instantiate_le_bytes(shape, bytes, width, cfg)
        .unwrap_or_else(|| search::instantiate(shape, &bytes_to_words(bytes, width), width, cfg))
}
