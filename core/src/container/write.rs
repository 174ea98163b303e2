//! Encoding: source file -> segments -> one program per region -> archive.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use rayon::prelude::*;
use sha2::{Digest, Sha256};

use super::layout::{self, MAX_SAFETENSORS_HEADER, SegmentDesc, SegmentKind};
use super::read::{Archive, ReadAt};
use super::{
    CompressOptions, CompressReport, DecompressOptions, PREAMBLE_LEN, Preamble, Region, Segment,
    bytes_to_words, pool, write_table, xxh3,
};
use crate::dsl::{Node, wire};
use crate::error::EncodeError;
use crate::search::{self, Instantiate, Prior, Shape, Target};

fn io(path: &str, e: std::io::Error) -> EncodeError {
    EncodeError::io(path, e)
}

/// Split a source into segments. `strict`: a malformed safetensors header is
/// an error rather than plain bytes.
pub(crate) fn segments_of(
    src: &dyn ReadAt,
    name: &Path,
    strict: bool,
) -> Result<Vec<SegmentDesc>, EncodeError> {
    let label = name.display().to_string();
    let len = src.len().map_err(|e| io(&label, e))?;
    let mut head = [0u8; 9];
    if len < 9 {
        return Ok(layout::plain_segments(len));
    }
    src.read_exact_at(0, &mut head).map_err(|e| io(&label, e))?;
    let n = u64::from_le_bytes(head[..8].try_into().expect("8"));
    let looks = head[8] == b'{' && n <= MAX_SAFETENSORS_HEADER && n + 8 <= len;
    if !looks {
        if strict {
            return Err(EncodeError::Safetensors {
                path: label,
                reason: if n > MAX_SAFETENSORS_HEADER || n + 8 > len {
                    format!("header length {n} does not fit the {len}-byte file")
                } else {
                    "header does not start with '{'".into()
                },
            });
        }
        return Ok(layout::plain_segments(len));
    }
    let mut prefix = vec![0u8; 8 + n as usize];
    src.read_exact_at(0, &mut prefix)
        .map_err(|e| io(&label, e))?;
    match layout::safetensors_segments(&prefix, len) {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Ok(layout::plain_segments(len)),
        Err(reason) if strict => Err(EncodeError::Safetensors {
            path: label,
            reason,
        }),
        Err(_) => Ok(layout::plain_segments(len)),
    }
}

/// The `len` bytes of `src` at `offset`: borrowed from a source in memory
/// (a small file read whole), else read into a buffer of their own.
fn read_cow(src: &dyn ReadAt, offset: u64, len: usize) -> std::io::Result<Cow<'_, [u8]>> {
    if let Some(s) = src.slice_at(offset, len) {
        return Ok(Cow::Borrowed(s));
    }
    let mut buf = vec![0u8; len];
    src.read_exact_at(offset, &mut buf)?;
    Ok(Cow::Owned(buf))
}

/// The sample words of a tensor segment the search judges programs on.
pub(crate) fn read_sample<'s>(
    src: &'s dyn ReadAt,
    s: &SegmentDesc,
) -> std::io::Result<(Cow<'s, [u8]>, Vec<u64>)> {
    let wb = s.dtype.word_bytes() as u64;
    let (start, n) = search::sample_range(s.len / wb, search::row_words(&s.shape));
    let buf = read_cow(src, s.offset + start * wb, (n * wb) as usize)?;
    let words = bytes_to_words(&buf, s.width());
    Ok((buf, words))
}

/// A region's program bytes, the checksum of its source bytes, and them
/// (borrowed from a source in memory).
type CodedRegion<'s> = (Vec<u8>, u64, Cow<'s, [u8]>);

/// A batch of regions (segment, region index) and what coding them gave.
type CodedBatch<'a, 's> = (
    &'a [(usize, u64)],
    Vec<Result<CodedRegion<'s>, EncodeError>>,
);

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

/// Files up to this size are also coded whole (one byte stream, zstd -19
/// or rANS), and the smaller archive is kept: small files of many tiny
/// tensors, or with long-range repeats across tensors, can do better so.
/// Not at budget 0.
pub const WHOLE_FILE_MAX: u64 = 8 << 20;

/// Where an archive is written: a file or memory, which can be cut short
/// (the whole-file coding, written over the longer tensor archive).
pub(crate) trait Sink: Write + Seek + Send {
    /// Drop everything past the first `len` bytes.
    fn cut(&mut self, len: u64) -> std::io::Result<()>;
}

impl Sink for std::io::Cursor<Vec<u8>> {
    fn cut(&mut self, len: u64) -> std::io::Result<()> {
        self.get_mut().truncate(len as usize);
        Ok(())
    }
}

impl Sink for std::io::BufWriter<crate::fsutil::Chunked<std::fs::File>> {
    fn cut(&mut self, len: u64) -> std::io::Result<()> {
        self.flush()?;
        self.get_ref().0.set_len(len)
    }
}

/// Compress a source into `out` (which must start empty at position 0).
/// It all runs on the pool: its parallel loops then start on one of its
/// own threads (at one thread, they run right there), not on this thread
/// handing each batch over and sleeping until it is done.
pub(crate) fn compress_source<W: Sink>(
    src: &dyn ReadAt,
    name: &Path,
    out: &mut W,
    opts: &CompressOptions,
) -> Result<CompressReport, EncodeError> {
    pool(opts.threads).install(|| compress_on_pool(src, name, out, opts))
}

fn compress_on_pool<W: Sink>(
    src: &dyn ReadAt,
    name: &Path,
    out: &mut W,
    opts: &CompressOptions,
) -> Result<CompressReport, EncodeError> {
    let label = name.display().to_string();
    let len = src.len().map_err(|e| io(&label, e))?;
    let descs = segments_of(src, name, opts.strict_safetensors)?;
    let has_tensors = descs.iter().any(|d| d.kind == SegmentKind::Tensor);
    if !has_tensors {
        // Plain bytes: small files in one region (one zstd window).
        let region = if len <= WHOLE_FILE_MAX {
            crate::dsl::MAX_NODE_WORDS
        } else {
            opts.region_words
        };
        return encode_segments(src, name, descs, region, 19, out, opts);
    }
    // The whole-file alternative is a search over programs too: budget 0
    // (no search) writes only the incumbent literals.
    if len > WHOLE_FILE_MAX || !opts.whole_file || opts.budget == 0 {
        return encode_segments(src, name, descs, opts.region_words, 19, out, opts);
    }
    // The file is read once, whole (it is small): both codings and the
    // screen read it from memory. (Read again for the screen after the
    // tensors were coded: human-tfjs's 37 such files 2% slower.)
    let whole = match src.slice_at(0, len as usize) {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(src.read_prefix(len as usize).map_err(|e| io(&label, e))?),
    };
    let src: &[u8] = &whole;
    // Reserved whole (archives are rarely larger than their source; pages
    // never written are never touched): grown by doubling, the archive was
    // copied twice over (human-tfjs's 37 files: 55 ms of 1.9 s).
    let mut tensors = std::io::Cursor::new(Vec::with_capacity(len as usize));
    let spans: Vec<(u64, u64)> = descs
        .iter()
        .filter(|d| d.kind == SegmentKind::Tensor)
        .map(|d| (d.offset, d.len))
        .collect();
    let report = encode_segments(&src, name, descs, opts.region_words, 19, &mut tensors, opts)?;
    let tensors = tensors.into_inner();
    // The tensor archive is written while the screen runs (side by side
    // with two threads or more: writing it and the screen were a serial
    // stretch of every small file); should the whole file win, it is
    // written over it, and the rest cut.
    let (written, may_win) = rayon::join(
        || out.write_all(&tensors),
        || whole_may_win(&whole, &spans, report.archive_len),
    );
    written.map_err(|e| io("<output>", e))?;
    if may_win {
        let mut plain = std::io::Cursor::new(Vec::new());
        let r = encode_segments(
            &src,
            name,
            layout::plain_segments(len),
            crate::dsl::MAX_NODE_WORDS,
            22,
            &mut plain,
            opts,
        )?;
        if r.archive_len < report.archive_len {
            let plain = plain.into_inner();
            (|| {
                out.seek(SeekFrom::Start(0))?;
                out.write_all(&plain)?;
                out.cut(plain.len() as u64)
            })()
            .map_err(|e| io("<output>", e))?;
            return Ok(CompressReport {
                searched_tensors: report.searched_tensors,
                judged: report.judged,
                search_seconds: report.search_seconds,
                ..r
            });
        }
    }
    Ok(report)
}

/// zstd level of the bytes of a tensor file that are not tensors (its
/// JSON header), and of the archive's table. On the 46 headers of the six
/// models (1.78 MB): -19 130 KB in 0.6 s, -15 130 KB in 139 ms, -12 140 KB
/// in 27 ms (-13 and -14 are larger and slower than -12); in the archives,
/// -12 instead of -15 costs 11.8 KB in all (human-tfjs 9.3 KB, 0.007%) and
/// makes human-tfjs's 41 files 9% faster to compress (1183 against 1298
/// ms of CPU, fastest of 7 alternating runs).
pub const HEADER_ZSTD_LEVEL: i32 = 12;

/// Bytes of the sample [`whole_may_win`] codes at both levels, in
/// [`WHOLE_SAMPLE_SLICES`] slices spread over the file. (512 KiB before:
/// the six models' archives are byte-identical with 128 KiB, human-tfjs's
/// 41 files compress 2-4% faster.)
const WHOLE_SAMPLE_BYTES: usize = 128 << 10;

/// Slices of [`WHOLE_SAMPLE_BYTES`]: 16 of 8 KiB. With four of 32 KiB the
/// sample missed what sets a file's rate: 4 of human-tfjs's 37 files up to
/// [`WHOLE_FILE_MAX`] passed the sample's screen, two of them at 0.80 and
/// 0.84 of their archive, and each was then coded whole at -1 with long
/// matches (6-23 ms) to find it 1-12% larger than its archive. With 16
/// slices one of them passes (at 0.99; at 64 slices, the same one at
/// 1.03); the six models' archives are byte-identical.
const WHOLE_SAMPLE_SLICES: usize = 16;

/// Bytes of a tensor hashed as one block by [`cross_tensor_repeats`].
const REPEAT_BLOCK: usize = 1024;

/// Whether the file coded whole (zstd -22) may be smaller than `archive`
/// bytes, screened before -22 is paid for (seconds on a few MiB). What
/// whole-file zstd can gain over the tensors coded one by one is matches
/// across tensors (identical tensors are references already). First, from
/// a sample: the header at -1, and the tensor bytes that do not repeat an
/// earlier tensor's block at the rate -1 codes a sample of them, must come
/// within 5% of the archive. Then the file at -1 with long matches over all
/// of it must too, and, scaled by what -22 gains over -1 on the sample,
/// beat it. A file no larger than the sample is tried at -1 whole.
///
/// (Before, the screen was zstd -1 of the whole file: 0.16 s of
/// human-tfjs's 1.5 s, and blind to repeats further apart than -1's
/// window: a file of two 2 MiB f16 tensors, the second the first with one
/// value changed, stayed at 0.84 where whole it is 0.46.)
fn whole_may_win(whole: &[u8], tensors: &[(u64, u64)], archive: u64) -> bool {
    let z =
        |b: &[u8], level| crate::entropy::zstd_compress(b, level).map_or(usize::MAX, |z| z.len());
    let pass = |quick: f64| quick * 0.95 < archive as f64;
    if whole.len() <= WHOLE_SAMPLE_BYTES {
        return pass(z(whole, 1) as f64);
    }
    // The header (JSON, a tenth of its size at -1) whole; the tensor bytes
    // at a sample's rate.
    let start = tensors.iter().map(|t| t.0 as usize).min().unwrap_or(0);
    let (head, body) = whole.split_at(start.min(whole.len()));
    if body.len() <= WHOLE_SAMPLE_BYTES {
        return pass(z(whole, 1) as f64);
    }
    let slice = WHOLE_SAMPLE_BYTES / WHOLE_SAMPLE_SLICES;
    let step = (body.len() - slice) / (WHOLE_SAMPLE_SLICES - 1);
    let mut sample = Vec::with_capacity(slice * WHOLE_SAMPLE_SLICES);
    for i in 0..WHOLE_SAMPLE_SLICES {
        sample.extend_from_slice(&body[i * step..i * step + slice]);
    }
    // (With two threads or more, what each stage needs is worked out side
    // by side: the screen otherwise runs on one thread while the others
    // wait for the next file.)
    let both = rayon::current_num_threads() > 1;
    let ((z1, zh), repeats) = rayon::join(
        || (z(&sample, 1) as f64, z(head, 1) as f64),
        || cross_tensor_repeats(whole, tensors),
    );
    let fresh = (body.len() as u64).saturating_sub(repeats);
    if !pass(zh + fresh as f64 * z1 / sample.len() as f64) {
        return false;
    }
    // Then the file itself at -1, with a window over all of it and long
    // matches (what -22 will see), scaled by -22's gain on the sample
    // (worked out only when -1 passes, but for side by side).
    let gain_of = || z(&sample, 22) as f64 / z1;
    let (quick, gain) = if both {
        let (q, g) = rayon::join(|| zstd_long(whole, 1) as f64, gain_of);
        (q, Some(g))
    } else {
        (zstd_long(whole, 1) as f64, None)
    };
    pass(quick) && quick * gain.unwrap_or_else(gain_of) < archive as f64
}

/// Bytes of `data` in zstd at `level` with a window over [`WHOLE_FILE_MAX`]
/// bytes and long-distance matching (`usize::MAX` if zstd fails).
fn zstd_long(data: &[u8], level: i32) -> usize {
    use zstd::zstd_safe::CParameter;
    let window = WHOLE_FILE_MAX.max(1).ilog2() + 1;
    zstd::bulk::Compressor::new(level)
        .and_then(|mut c| {
            c.set_parameter(CParameter::WindowLog(window))?;
            c.set_parameter(CParameter::EnableLongDistanceMatching(true))?;
            c.compress(data)
        })
        .map_or(usize::MAX, |z| z.len())
}

/// Bytes of the tensors `(offset, len)` of `whole` in blocks (of
/// [`REPEAT_BLOCK`] bytes from each tensor's start) equal to a block of an
/// earlier tensor, blocks of one repeated byte not counted (every coder
/// codes those for next to nothing).
///
/// A block is looked up by a fingerprint of four of its words, and a block
/// with the same fingerprint compared byte for byte; blocks that share a
/// fingerprint but differ (sparse tensors, zero at the four words) are
/// told apart by their xxh3. (xxh3 of every block into a `HashSet` was 3x
/// the time: 25 ms of human-tfjs's 37 small files.)
fn cross_tensor_repeats(whole: &[u8], tensors: &[(u64, u64)]) -> u64 {
    use std::collections::hash_map::Entry;
    let blocks = tensors
        .iter()
        .map(|t| t.1 as usize / REPEAT_BLOCK)
        .sum::<usize>();
    // Fingerprint -> the first earlier block with it; the xxh3 of the
    // others with it that differ from that one in `other`.
    let mut seen: HashMap<u64, usize, Fingerprinted> =
        HashMap::with_capacity_and_hasher(blocks, Fingerprinted::default());
    let mut other: std::collections::HashSet<u64, Fingerprinted> = Default::default();
    let block = |at: usize| &whole[at..at + REPEAT_BLOCK];
    let mut repeated = 0u64;
    let mut mine = Vec::new();
    for &(offset, len) in tensors {
        let Some(t) = whole.get(offset as usize..(offset + len) as usize) else {
            continue;
        };
        mine.clear();
        for (i, b) in t.chunks_exact(REPEAT_BLOCK).enumerate() {
            if b.iter().all(|&x| x == b[0]) {
                continue;
            }
            let f = fingerprint(b);
            let hit = match seen.get(&f) {
                None => false,
                Some(&at) if block(at) == b => true,
                Some(_) => other.contains(&xxh3(b)),
            };
            if hit {
                repeated += REPEAT_BLOCK as u64;
            } else {
                mine.push((f, offset as usize + i * REPEAT_BLOCK));
            }
        }
        // Seen only by later tensors.
        for &(f, at) in &mine {
            match seen.entry(f) {
                Entry::Vacant(v) => {
                    v.insert(at);
                }
                Entry::Occupied(o) if block(*o.get()) != block(at) => {
                    other.insert(xxh3(block(at)));
                }
                Entry::Occupied(_) => {}
            }
        }
    }
    repeated
}

/// Four words of a [`REPEAT_BLOCK`], 256 bytes apart, mixed.
fn fingerprint(b: &[u8]) -> u64 {
    let mut h = 0u64;
    for w in b.chunks_exact(256) {
        let w = u64::from_le_bytes(w[..8].try_into().expect("8 bytes"));
        h = (h ^ w).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }
    h ^ (h >> 32)
}

/// A hasher for keys that are hashes already ([`fingerprint`], xxh3):
/// the key is its own hash.
#[derive(Default)]
struct KeyIsHash(u64);

impl std::hash::Hasher for KeyIsHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = x;
    }
}

type Fingerprinted = std::hash::BuildHasherDefault<KeyIsHash>;

/// Duplicates smaller than this are coded with their neighbours, not as
/// references (a reference costs a segment of its own).
const MIN_REF_BYTES: u64 = 256;

/// Distinct tensors of one duplicate key (dtype, length, edge hash) that
/// later tensors of that key are compared with, byte for byte.
const MAX_DUP_CANDIDATES: usize = 4;

/// Bytes hashed at each edge (and the middle) of a tensor by [`edge_hash`].
const EDGE_BYTES: u64 = 4096;

/// A hash of a tensor's first, middle and last [`EDGE_BYTES`] (all of it if
/// shorter): equal tensors have equal ones, and tensors that differ nearly
/// always differ there.
fn edge_hash(src: &dyn ReadAt, d: &SegmentDesc) -> std::io::Result<u128> {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    if d.len <= 3 * EDGE_BYTES {
        h.update(&read_cow(src, d.offset, d.len as usize)?);
    } else {
        for at in [0, (d.len - EDGE_BYTES) / 2, d.len - EDGE_BYTES] {
            h.update(&read_cow(src, d.offset + at, EDGE_BYTES as usize)?);
        }
    }
    Ok(h.digest128())
}

/// Code the given segments of a source into `out`.
fn encode_segments<W: Write + Seek>(
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
    let region_words = region_words.clamp(1024, crate::dsl::MAX_NODE_WORDS);

    // The SHA-256 of the whole file (for the preamble) is taken over the
    // regions as they are written: they tile the file in order.
    let mut file_sha = Sha256::new();
    let mut sha_at = 0u64;

    // Pass 1: duplicate candidates, by dtype, length and a hash of the
    // tensor's edges (first, middle and last 4 KiB). Only candidates
    // are read whole, to be compared byte for byte with up to
    // MAX_DUP_CANDIDATES distinct tensors of their key: in a checkpoint
    // without duplicates the file is read once, not twice. (Copies of a
    // fifth distinct tensor sharing one key are coded on their own.)
    let mut seg_key = vec![None; descs.len()];
    for (i, d) in descs.iter().enumerate() {
        if d.kind == SegmentKind::Tensor && d.len >= MIN_REF_BYTES {
            let h = edge_hash(src, d).map_err(|e| io(&label, e))?;
            seg_key[i] = Some((d.dtype.wire_id(), d.len, h));
        }
    }

    // Plans: references for duplicate tensors, a searched shape otherwise.
    let prior = opts
        .prior
        .clone()
        .unwrap_or_else(|| std::sync::Arc::new(Prior::uniform()));
    // Tensors identical to an earlier one become references (even into a
    // group); the other small tensors are coded in groups.
    // Each key keeps a few distinct tensors to compare later ones with.
    let mut firsts: HashMap<(u8, u64, u128), Vec<usize>> = HashMap::new();
    let mut dup_of: Vec<Option<usize>> = vec![None; descs.len()];
    for (i, key) in seg_key.iter().enumerate() {
        let Some(key) = key else { continue };
        let seen = firsts.entry(*key).or_default();
        for &j in seen.iter() {
            if same_bytes(src, &descs[j], &descs[i]).map_err(|e| io(&label, e))? {
                dup_of[i] = Some(j);
                break;
            }
        }
        if dup_of[i].is_none() && seen.len() < MAX_DUP_CANDIDATES {
            seen.push(i);
        }
    }
    let alone: Vec<bool> = dup_of.iter().map(Option::is_some).collect();
    let (descs, place) = layout::group_small_tensors(descs, &alone);
    let mut plans: Vec<Option<Plan>> = (0..descs.len()).map(|_| None).collect();
    for (i, j) in dup_of.iter().enumerate() {
        if let Some(j) = j {
            let (seg, _) = place[i];
            let (target, at) = place[*j];
            let wb = descs[target].dtype.word_bytes() as u64;
            plans[seg] = Some(Plan::Ref(target as u32, at / wb));
        }
    }
    let search_start = std::time::Instant::now();
    let searched: Vec<Result<Option<Searched>, EncodeError>> = pool.install(|| {
        descs
            .par_iter()
            .zip(&plans)
            .map(|(d, p)| {
                if p.is_some() {
                    return Ok(None);
                }
                if d.kind == SegmentKind::Bytes {
                    return Ok(Some((Shape::Generic, 0, None)));
                }
                let (bytes, words) = read_sample(src, d).map_err(|e| io(&label, e))?;
                let t = Target::of_segment(d, &bytes, &words, opts.region_words);
                let syn = search::synthesize(&t, &prior, opts.budget);
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
    let search_seconds = search_start.elapsed().as_secs_f64();

    // Pass 2: regions in parallel batches, written in order.
    out.write_all(&[0u8; PREAMBLE_LEN as usize])
        .map_err(|e| io("<output>", e))?;
    let mut body_pos = PREAMBLE_LEN;
    opts.progress
        .start(&format!("compress {}", file_label(name)), len);
    let cfg = Instantiate {
        zstd_level,
        ..Instantiate::default()
    };
    // The header (and any other bytes) of a tensor file: JSON, which
    // zstd -19 codes at 3 MB/s (human-tfjs: 0.6 of its 2.6 s).
    let has_tensors = descs.iter().any(|d| d.kind == SegmentKind::Tensor);
    let bytes_cfg = Instantiate {
        zstd_level: zstd_level.min(HEADER_ZSTD_LEVEL),
        ..Instantiate::default()
    };
    // Region geometry per segment: (words per region, words in all).
    let geometry: Vec<(u64, u64)> = descs
        .iter()
        .zip(&plans)
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
        .collect();
    // Every region of every segment, batched across segments so that many
    // small segments still keep every thread busy.
    let jobs: Vec<(usize, u64)> = geometry
        .iter()
        .enumerate()
        .flat_map(|(si, &(rw, total))| (0..total.div_ceil(rw)).map(move |r| (si, r)))
        .collect();
    let mut regions: Vec<Vec<Region>> = vec![Vec::new(); descs.len()];
    // Code a batch of regions on the pool.
    let code_batch = |batch: &[(usize, u64)]| -> Vec<Result<CodedRegion, EncodeError>> {
        pool.install(|| {
            batch
                .par_iter()
                .map(|&(si, r)| {
                    let d = &descs[si];
                    let (rw, total) = geometry[si];
                    let wb = d.dtype.word_bytes() as u64;
                    let start = r * rw;
                    let n = rw.min(total - start);
                    // (A small file read whole lends its bytes: no copy.)
                    let bytes = read_cow(src, d.offset + start * wb, (n * wb) as usize)
                        .map_err(|e| io(&label, e))?;
                    let node = match plans[si].as_ref().expect("every segment has a plan") {
                        Plan::Ref(j, at) => Node::Ref {
                            width: d.width(),
                            n,
                            segment: *j,
                            offset: at + start,
                        },
                        // A tensor in one region the search coded whole
                        // (with the default zstd level, which is this one).
                        Plan::Shape(_)
                            if rw >= total
                                && zstd_level == Instantiate::default().zstd_level
                                && coded[si].is_some() =>
                        {
                            coded[si].clone().expect("checked")
                        }
                        Plan::Shape(shape) if d.kind == SegmentKind::Bytes && has_tensors => {
                            code_region(shape, &bytes, d.width(), &bytes_cfg)
                        }
                        Plan::Shape(shape) => code_region(shape, &bytes, d.width(), &cfg),
                    };
                    let checksum = xxh3(&bytes);
                    // The source bytes go back to be hashed in order.
                    Ok((wire::write(&node), checksum, bytes))
                })
                .collect()
        })
    };
    // Write a coded batch in order, hashing its source bytes.
    let mut write_batch = |batch: &[(usize, u64)],
                           coded: Vec<Result<CodedRegion, EncodeError>>|
     -> Result<(), EncodeError> {
        for (&(si, r), c) in batch.iter().zip(coded) {
            let (body, checksum, bytes) = c?;
            let d = &descs[si];
            let wb = d.dtype.word_bytes() as u64;
            let (rw, total) = geometry[si];
            let raw_len = rw.min(total - r * rw) * wb;
            assert_eq!(
                d.offset + r * rw * wb,
                sha_at,
                "regions tile the file in order"
            );
            file_sha.update(&bytes);
            sha_at += raw_len;
            out.write_all(&body).map_err(|e| io("<output>", e))?;
            regions[si].push(Region {
                body_offset: body_pos,
                body_len: body.len() as u64,
                checksum,
            });
            body_pos += body.len() as u64;
            opts.progress.advance(raw_len);
        }
        Ok(())
    };
    // With two threads or more, batch n is written (and hashed) on this
    // thread while the pool codes batch n + 1.
    let overlap = pool.current_num_threads() >= 2;
    let mut pending: Option<CodedBatch<'_, '_>> = None;
    for batch in jobs.chunks(pool.current_num_threads() * 4) {
        if !overlap {
            write_batch(batch, code_batch(batch))?;
            continue;
        }
        let mut next = None;
        let mut written = Ok(());
        pool.in_place_scope(|scope| {
            scope.spawn(|_| next = Some(code_batch(batch)));
            if let Some((b, c)) = pending.take() {
                written = write_batch(b, c);
            }
        });
        written?;
        pending = Some((batch, next.expect("the scope ran the batch")));
    }
    if let Some((b, c)) = pending.take() {
        write_batch(b, c)?;
    }
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
    let sha256: [u8; 32] = file_sha.finalize().into();
    let table = super::pack_table(&write_table(&segments));
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
    Ok(CompressReport {
        original_len: len,
        archive_len: body_pos + table.len() as u64,
        sha256,
        searched_tensors,
        judged,
        search_seconds,
    })
}

/// Code one region with a shape. The program is not executed here: the
/// instantiation is exact by construction, and [`CompressOptions::verify`]
/// proves the whole archive (decoding it, as a reader would) instead.
fn code_region(shape: &Shape, bytes: &[u8], width: u8, cfg: &Instantiate) -> Node {
    search::instantiate_le_bytes(shape, bytes, width)
        .unwrap_or_else(|| search::instantiate(shape, &bytes_to_words(bytes, width), width, cfg))
}

/// Decode a fresh archive and check it against the report of its source.
fn self_check<R: ReadAt>(
    archive: Archive<R>,
    report: &CompressReport,
    threads: usize,
) -> Result<(), EncodeError> {
    let bug = |what: String| {
        EncodeError::SelfCheck(format!(
            "the archive does not decode to its source ({what}); this is a bug in brevis, please report it"
        ))
    };
    let mut out = LenSink(0);
    let r = archive
        .decode_to(&mut out, &DecompressOptions::default().threads(threads))
        .map_err(|e| bug(e.to_string()))?;
    if r.sha256 != report.sha256 || out.0 != report.original_len {
        return Err(bug(format!(
            "{} bytes decoded, {} expected",
            out.0, report.original_len
        )));
    }
    Ok(())
}

/// Counts what is written to it.
struct LenSink(u64);

impl Write for LenSink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0 += b.len() as u64;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Bytes of a region of a segment coded with the generic codec: one zstd
/// window sees that much (a tensor cut into 512 KiB regions compressed 15%
/// worse than whole, e.g. whisper's position encodings).
const GENERIC_REGION_BYTES: u64 = 8 << 20;

/// Regions hold whole rows when a row fits (so block fields stay aligned);
/// `generic` segments get regions of [`GENERIC_REGION_BYTES`].
///
/// An embedding table (role `embed`, [`search::prior::role`]) of words of
/// 4 bytes or more gets the smallest regions whose streams still use 32
/// rANS states ([`crate::entropy::WIDE_SYMBOLS`] words, rounded up to whole
/// rows): a region has its own coder tables, and an embedding table's
/// statistics drift from token to token. On minilm (f32; its word
/// embeddings are half of it) that is 171 rows of 384 words instead of
/// 2^18 words (with 32 states from 2^17 words, 342 rows were 55 KB, 0.07%,
/// smaller than 2^18 words and as fast; 171 rows are 23 KB smaller again).
/// The other f32 tensors gain nothing from smaller regions (human-tfjs's
/// lose 4 KB); whisper's f16 token embedding takes 20 KB more in regions
/// of 2^17 words, so 16-bit words keep theirs.
pub(crate) fn segment_region_words(d: &SegmentDesc, region_words: u64, generic: bool) -> u64 {
    let word_bytes = d.dtype.word_bytes() as u64;
    let row = search::row_words(&d.shape);
    let region_words = if generic {
        (GENERIC_REGION_BYTES / word_bytes).clamp(region_words, crate::dsl::MAX_NODE_WORDS)
    } else if word_bytes >= 4
        && d.dtype.float_layout().is_some()
        && search::prior::role(&d.name, d.shape.len()).starts_with("embed")
    {
        let wide = crate::entropy::WIDE_SYMBOLS as u64;
        region_words.min(wide.div_ceil(row.max(1)) * row.max(1))
    } else {
        region_words
    };
    if d.kind == SegmentKind::Tensor && row > 1 && row <= region_words {
        region_words - region_words % row
    } else {
        region_words
    }
}

fn same_bytes(src: &dyn ReadAt, a: &SegmentDesc, b: &SegmentDesc) -> std::io::Result<bool> {
    if let (Some(x), Some(y)) = (
        src.slice_at(a.offset, a.len as usize),
        src.slice_at(b.offset, b.len as usize),
    ) {
        return Ok(x == y);
    }
    // Buffers no larger than the tensors (most are far below 1 MiB).
    let k = a.len.min(1 << 20) as usize;
    let mut x = vec![0u8; k];
    let mut y = vec![0u8; k];
    let mut pos = 0u64;
    while pos < a.len {
        let k = ((a.len - pos) as usize).min(x.len());
        src.read_exact_at(a.offset + pos, &mut x[..k])?;
        src.read_exact_at(b.offset + pos, &mut y[..k])?;
        if x[..k] != y[..k] {
            return Ok(false);
        }
        pos += k as u64;
    }
    Ok(true)
}

fn file_label(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "<memory>".into())
}

/// Compress bytes in memory.
pub fn compress(data: &[u8], opts: &CompressOptions) -> Result<Vec<u8>, EncodeError> {
    let mut out = std::io::Cursor::new(Vec::with_capacity(data.len() / 2 + 1024));
    let report = compress_source(&data, Path::new("<memory>"), &mut out, opts)?;
    let out = out.into_inner();
    if opts.verify {
        let archive = Archive::new(&out[..]).map_err(|e| EncodeError::SelfCheck(e.to_string()))?;
        self_check(archive, &report, opts.threads)?;
    }
    Ok(out)
}

/// Compress `src` into `dst` atomically (temp file + rename). Fails if `dst`
/// exists unless `overwrite`. Files named `*.safetensors` must be valid
/// safetensors; anything else that is not is carried as plain bytes.
pub fn compress_file(
    src: &Path,
    dst: &Path,
    overwrite: bool,
    opts: &CompressOptions,
) -> Result<CompressReport, EncodeError> {
    if !overwrite && dst.exists() {
        return Err(EncodeError::Exists(dst.to_path_buf()));
    }
    let f = std::fs::File::open(src).map_err(|e| EncodeError::io(src, e))?;
    let strict = opts.strict_safetensors
        || src
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("safetensors"));
    let opts = opts.clone().strict_safetensors(strict);
    let tmp = crate::fsutil::TempFile::beside(dst).map_err(|e| EncodeError::io(dst, e))?;
    let file = tmp.file().map_err(|e| EncodeError::io(dst, e))?;
    let mut w = crate::fsutil::buffered(file);
    let report = compress_source(&f, src, &mut w, &opts).map_err(|e| match e {
        EncodeError::Io { path, source } if path.as_os_str() == "<output>" => {
            EncodeError::io(dst, source)
        }
        e => e,
    })?;
    w.flush().map_err(|e| EncodeError::io(dst, e))?;
    drop(w);
    if opts.verify {
        // The temp file is removed if the check fails.
        let f = tmp.file().map_err(|e| EncodeError::io(dst, e))?;
        let archive = Archive::new(f).map_err(|e| EncodeError::SelfCheck(e.to_string()))?;
        self_check(archive, &report, opts.threads)?;
    }
    tmp.set_mode_from(src);
    tmp.persist(dst, overwrite).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            EncodeError::Exists(dst.to_path_buf())
        } else {
            EncodeError::io(dst, e)
        }
    })?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::Workers;
    use crate::dtype::Dtype;

    #[test]
    fn compressing_runs_on_one_shared_pool() {
        // A number of threads has one pool for the process.
        let (Workers::Own(a), Workers::Own(b), Workers::Own(c)) = (pool(3), pool(3), pool(2))
        else {
            panic!("no pool was built");
        };
        assert!(std::sync::Arc::ptr_eq(&a, &b) && !std::sync::Arc::ptr_eq(&a, &c));
        assert_eq!((a.current_num_threads(), c.current_num_threads()), (3, 2));
        // Every read of the source, the header's too, is on a thread of
        // the pool: the caller hands the whole file over once.
        struct Watched(Vec<u8>, std::sync::atomic::AtomicUsize);
        impl ReadAt for Watched {
            fn len(&self) -> std::io::Result<u64> {
                Ok(self.0.len() as u64)
            }
            fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
                if rayon::current_thread_index().is_none() {
                    self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                self.0[..].read_exact_at(offset, buf)
            }
        }
        // One f16 tensor of 64 regions (batches on both threads), in a
        // small file (the whole-file screen reads it too).
        let n = 1usize << 16;
        let tensor: Vec<u8> = (0..n as u64)
            .flat_map(|i| ((((i * 2_654_435_761) >> 7) & 0x3ff) as u16 | 14 << 10).to_le_bytes())
            .collect();
        let file = super::super::f16_file(&tensor);
        for threads in [1, 2] {
            let src = Watched(file.clone(), Default::default());
            let opts = CompressOptions::default()
                .threads(threads)
                .region_words(1024)
                .verify(false);
            let mut out = std::io::Cursor::new(Vec::new());
            compress_source(&src, Path::new("<memory>"), &mut out, &opts).unwrap();
            assert_eq!(
                src.1.into_inner(),
                0,
                "{threads} threads: reads off the pool"
            );
        }
    }

    #[test]
    fn self_check_rejects_an_archive_of_other_bytes() {
        let data = b"the source; not a safetensors file".repeat(100);
        let opts = CompressOptions::default().verify(false);
        let mut out = std::io::Cursor::new(Vec::new());
        let report = compress_source(&&data[..], Path::new("<memory>"), &mut out, &opts).unwrap();
        let archive = out.into_inner();
        self_check(Archive::new(&archive[..]).unwrap(), &report, 1).unwrap();
        let mut other = report.clone();
        other.sha256[0] ^= 1;
        let e = self_check(Archive::new(&archive[..]).unwrap(), &other, 1).unwrap_err();
        assert!(matches!(e, EncodeError::SelfCheck(_)), "{e}");
        let mut longer = report;
        longer.original_len += 1;
        let e = self_check(Archive::new(&archive[..]).unwrap(), &longer, 1).unwrap_err();
        assert!(e.to_string().contains("bytes decoded"), "{e}");
    }

    #[test]
    fn embedding_tables_of_wide_words_get_smaller_regions() {
        let desc = |name: &str, dtype: Dtype, shape: Vec<u64>| SegmentDesc {
            kind: SegmentKind::Tensor,
            dtype,
            name: name.into(),
            len: shape.iter().product::<u64>() * dtype.word_bytes() as u64,
            shape,
            offset: 0,
        };
        let words = crate::container::DEFAULT_REGION_WORDS;
        let region =
            |name, dtype, shape| segment_region_words(&desc(name, dtype, shape), words, false);
        // minilm's word embeddings (30522 x 384 f32): 171 rows of 384, the
        // fewest of at least WIDE_SYMBOLS words (32 rANS states).
        let wide = crate::entropy::WIDE_SYMBOLS as u64;
        let embed = region(
            "embeddings.word_embeddings.weight",
            Dtype::F32,
            vec![30522, 384],
        );
        assert_eq!(embed, 171 * 384);
        assert!(embed >= wide && embed - 384 < wide && embed < words);
        assert_eq!(
            region("model.embed_tokens.weight", Dtype::F64, vec![1 << 14, 64]),
            wide
        );
        // Other f32 tensors, 16-bit embeddings and integer tables keep the
        // default (cut to whole rows).
        let default = words / 384 * 384;
        for (name, dtype) in [
            ("encoder.layer.0.output.dense.weight", Dtype::F32),
            ("decoder.embed_tokens.weight", Dtype::F16),
            ("decoder.embed_tokens.weight", Dtype::BF16),
            ("decoder.embed_tokens.weight", Dtype::I32),
        ] {
            assert_eq!(
                region(name, dtype, vec![51864, 384]),
                default,
                "{name} {dtype:?}"
            );
        }
        assert_eq!(
            region("decoder.embed_tokens.weight", Dtype::F32, vec![51864, 384]),
            embed
        );
    }

    #[test]
    fn whole_file_screen_passes_what_zstd_codes_well_only() {
        // Longer than the sample: the -22 sample rule is on the path.
        let n = 3 * WHOLE_SAMPLE_BYTES;
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut noise = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let random: Vec<u8> = (0..n).map(|_| noise() as u8).collect();
        let skewed: Vec<u8> = (0..n).map(|_| (noise() % 7 == 0) as u8 * 200).collect();
        assert!(!whole_may_win(&random, &[], n as u64 / 2));
        assert!(whole_may_win(&skewed, &[], n as u64));
        assert!(!whole_may_win(&skewed, &[], 1));
        // Random bytes twice over, as two tensors: the second half is free.
        let twice = [&random[..n / 2], &random[..n / 2]].concat();
        let halves = [(0, n as u64 / 2), (n as u64 / 2, n as u64 / 2)];
        assert_eq!(
            cross_tensor_repeats(&twice, &halves),
            (n / 2 / REPEAT_BLOCK * REPEAT_BLOCK) as u64
        );
        assert!(whole_may_win(&twice, &halves, n as u64 * 3 / 4));
        assert!(!whole_may_win(&twice, &[], n as u64 * 3 / 4));
        // Blocks of one byte value are not repeats.
        let zeros = vec![0u8; n];
        assert_eq!(cross_tensor_repeats(&zeros, &halves), 0);
    }

    /// Blocks that share a fingerprint but differ (zero but for one byte
    /// away from the four words it reads) are told apart, and each found
    /// again where a later tensor repeats it; a tensor repeating itself
    /// does not count, nor a block shorter than a whole one.
    #[test]
    fn repeats_are_found_among_blocks_of_one_fingerprint() {
        let blocks = 40;
        let mut sparse = vec![0u8; blocks * REPEAT_BLOCK];
        for k in 0..blocks {
            // Never at a multiple of 256 (the fingerprint's words).
            sparse[k * REPEAT_BLOCK + 9 + 5 * k] = 1 + k as u8;
        }
        let fps: std::collections::HashSet<u64> =
            sparse.chunks_exact(REPEAT_BLOCK).map(fingerprint).collect();
        assert_eq!(fps.len(), 1, "the blocks share one fingerprint");
        let len = sparse.len() as u64;
        // Second tensor: the first's blocks in another order, one of them
        // changed.
        let mut second: Vec<u8> = sparse
            .chunks_exact(REPEAT_BLOCK)
            .rev()
            .flatten()
            .copied()
            .collect();
        // (Away from the fingerprint's words: it shares their fingerprint.)
        second[100] ^= 0xAA;
        let file = [&sparse[..], &second[..], &sparse[..REPEAT_BLOCK + 100]].concat();
        let tensors = [(0, len), (len, len), (2 * len, REPEAT_BLOCK as u64 + 100)];
        let repeated = (blocks as u64 - 1) * REPEAT_BLOCK as u64 + REPEAT_BLOCK as u64;
        assert_eq!(cross_tensor_repeats(&file, &tensors), repeated);
        // One tensor of the same blocks twice: no earlier tensor, no repeat.
        let twice = [&sparse[..], &sparse[..]].concat();
        assert_eq!(cross_tensor_repeats(&twice, &[(0, 2 * len)]), 0);
    }

    /// Bytes of a source in memory are lent, a file's read; out of range
    /// is an error either way.
    #[test]
    fn read_cow_lends_from_memory_and_reads_from_files() {
        let data: Vec<u8> = (0..=255).collect();
        let mem: &[u8] = &data;
        let lent = read_cow(&mem, 10, 20).unwrap();
        assert!(matches!(lent, Cow::Borrowed(_)));
        assert_eq!(&lent[..], &data[10..30]);
        let dir = std::env::temp_dir().join(format!("brevis-read-cow-{}", std::process::id()));
        std::fs::write(&dir, &data).unwrap();
        let file = std::fs::File::open(&dir).unwrap();
        let read = read_cow(&file, 10, 20).unwrap();
        assert!(matches!(read, Cow::Owned(_)));
        assert_eq!(&read[..], &data[10..30]);
        for (offset, len) in [(250, 7), (256, 1), (u64::MAX, 2)] {
            assert!(read_cow(&mem, offset, len).is_err());
        }
        assert!(read_cow(&file, 250, 7).is_err());
        std::fs::remove_file(&dir).unwrap();
    }

    /// Two f16 tensors of noise, the second the first with one value
    /// changed: the file coded whole codes the second as matches.
    #[test]
    fn near_duplicate_tensors_are_coded_whole() {
        let n = 1usize << 20;
        let mut x = 7u64;
        let a: Vec<u8> = (0..n)
            .flat_map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                // Small weights: exponents of a few values, mantissas random.
                let e = 10 + (x >> 60) % 4;
                let w = ((x >> 63) << 15) | (e << 10) | ((x >> 20) & 0x3FF);
                (w as u16).to_le_bytes()
            })
            .collect();
        let mut b = a.clone();
        b[12345] ^= 0x40;
        let header = format!(
            r#"{{"a":{{"dtype":"F16","shape":[{n}],"data_offsets":[0,{}]}},"b":{{"dtype":"F16","shape":[{n}],"data_offsets":[{},{}]}}}}"#,
            2 * n,
            2 * n,
            4 * n
        );
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(header.as_bytes());
        file.extend_from_slice(&a);
        file.extend_from_slice(&b);
        let opts = CompressOptions::default().verify(false);
        let mut out = std::io::Cursor::new(Vec::new());
        let r = compress_source(&&file[..], Path::new("<memory>"), &mut out, &opts).unwrap();
        assert!(
            r.archive_len < file.len() as u64 * 6 / 10,
            "{} of {}",
            r.archive_len,
            file.len()
        );
        let archive = out.into_inner();
        assert_eq!(archive.len() as u64, r.archive_len);
        self_check(Archive::new(&archive[..]).unwrap(), &r, 1).unwrap();
        // Into a file, at one thread and two: the whole-file archive is
        // written over the tensor archive and the file cut to its length.
        let dir = std::env::temp_dir().join(format!("brevis-whole-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (src, dst) = (dir.join("near.safetensors"), dir.join("near.brv"));
        std::fs::write(&src, &file).unwrap();
        for threads in [1, 2] {
            let opts = CompressOptions::default().threads(threads);
            let f = compress_file(&src, &dst, true, &opts).unwrap();
            assert_eq!(f.archive_len, r.archive_len);
            assert_eq!(std::fs::read(&dst).unwrap(), archive, "{threads} threads");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
