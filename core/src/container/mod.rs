//! The `.brv` archive (byte layout in `docs/FORMAT.md`).
//!
//! One archive per source file: a fixed preamble (magic, version, original
//! length and SHA-256, where the segment table is), the region programs, and
//! the segment table at the end. Segments cover the source file in order;
//! each is cut into regions of at most `region_words` words, and each region
//! is an independent program, so regions decode in parallel and one tensor
//! decodes alone.

pub mod layout;
mod read;
#[cfg(feature = "search")]
pub(crate) mod write;

use std::path::Path;
use std::sync::Arc;

pub use layout::{SegmentDesc, SegmentKind};
pub use read::{Archive, decompress, decompress_file, decompress_to, read_info};
#[cfg(feature = "search")]
pub use write::{compress, compress_file};

use crate::dtype::Dtype;
use crate::entropy::ByteReader;
#[cfg(feature = "search")]
use crate::entropy::put_varint;
use crate::error::DecodeError;
use crate::progress::{NoProgress, ProgressSink};

/// First bytes of every archive.
pub const MAGIC: [u8; 4] = [0x89, b'B', b'R', b'V'];
/// Size of the fixed preamble.
pub const PREAMBLE_LEN: u64 = 72;
/// Largest segment table accepted.
pub const MAX_TABLE_LEN: u64 = 256 << 20;
/// Largest tensor name accepted.
pub const MAX_NAME_LEN: u64 = 1 << 16;
/// Most dimensions of a tensor shape.
pub const MAX_DIMS: u64 = 64;
/// Largest encoded region accepted.
pub const MAX_REGION_BODY: u64 = 64 << 20;
/// Default search budget (candidate programs tried per tensor).
pub const DEFAULT_BUDGET: u32 = 24;
/// Words per region the encoder uses (a region is also the unit of
/// adaptivity: each has its own coder tables).
pub const DEFAULT_REGION_WORDS: u64 = 1 << 18;

/// How to compress.
#[derive(Clone)]
#[non_exhaustive]
pub struct CompressOptions {
    /// Worker threads; 0 means all cores.
    pub threads: usize,
    /// Search budget: candidate programs tried per tensor.
    pub budget: u32,
    /// Prior steering the search; `None` means uniform.
    #[cfg(feature = "search")]
    pub prior: Option<Arc<crate::search::Prior>>,
    /// Progress events.
    pub progress: Arc<dyn ProgressSink>,
    /// Words per region.
    pub region_words: u64,
    /// Refuse (instead of carrying as plain bytes) input that looks like
    /// safetensors but is malformed.
    pub strict_safetensors: bool,
    /// Also code small files whole and keep the smaller archive (see
    /// `WHOLE_FILE_MAX`).
    pub whole_file: bool,
    /// Prove the archive before handing it over: decode it and check the
    /// source's length and SHA-256 ([`EncodeError::SelfCheck`](crate::EncodeError::SelfCheck) otherwise;
    /// [`compress_file`] then leaves nothing at the destination). This is
    /// the only check that a program rebuilds its region: coding a region
    /// does not execute it a second time.
    pub verify: bool,
}

impl Default for CompressOptions {
    fn default() -> Self {
        CompressOptions {
            threads: 0,
            budget: DEFAULT_BUDGET,
            #[cfg(feature = "search")]
            prior: None,
            progress: Arc::new(NoProgress),
            region_words: DEFAULT_REGION_WORDS,
            strict_safetensors: false,
            whole_file: true,
            verify: true,
        }
    }
}

impl CompressOptions {
    /// Set the number of threads (0 = all cores).
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n;
        self
    }
    /// Set the search budget.
    pub fn budget(mut self, b: u32) -> Self {
        self.budget = b;
        self
    }
    /// Set the prior.
    #[cfg(feature = "search")]
    pub fn prior(mut self, p: Option<Arc<crate::search::Prior>>) -> Self {
        self.prior = p;
        self
    }
    /// Set the progress sink.
    pub fn progress(mut self, p: Arc<dyn ProgressSink>) -> Self {
        self.progress = p;
        self
    }
    /// Set the words per region (clamped to the format's limit).
    pub fn region_words(mut self, w: u64) -> Self {
        self.region_words = w.clamp(1024, crate::dsl::MAX_NODE_WORDS);
        self
    }
    /// Whether small files are also tried as one whole byte stream.
    pub fn whole_file(mut self, w: bool) -> Self {
        self.whole_file = w;
        self
    }
    /// Refuse malformed safetensors instead of carrying them as bytes.
    pub fn strict_safetensors(mut self, s: bool) -> Self {
        self.strict_safetensors = s;
        self
    }
    /// Whether to decode the archive and check it against the source
    /// (on by default).
    pub fn verify(mut self, v: bool) -> Self {
        self.verify = v;
        self
    }
}

/// How to decompress.
#[derive(Clone)]
#[non_exhaustive]
pub struct DecompressOptions {
    /// Worker threads; 0 means all cores.
    pub threads: usize,
    /// Progress events.
    pub progress: Arc<dyn ProgressSink>,
}

impl Default for DecompressOptions {
    fn default() -> Self {
        DecompressOptions {
            threads: 0,
            progress: Arc::new(NoProgress),
        }
    }
}

impl DecompressOptions {
    /// Set the number of threads (0 = all cores).
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n;
        self
    }
    /// Set the progress sink.
    pub fn progress(mut self, p: Arc<dyn ProgressSink>) -> Self {
        self.progress = p;
        self
    }
}

/// What compressing one file produced.
#[derive(Debug, Clone)]
pub struct CompressReport {
    /// Length of the original file.
    pub original_len: u64,
    /// Length of the archive written.
    pub archive_len: u64,
    /// SHA-256 of the original file.
    pub sha256: [u8; 32],
    /// Tensors whose program was searched for.
    pub searched_tensors: u64,
    /// Complete candidate programs judged by exact size, over all tensors.
    pub judged: u64,
    /// Wall time of the search phase.
    pub search_seconds: f64,
}

/// Compression ratio, `archive_len / original_len` (smaller is better):
/// the one definition the CLI's `compress`, `inspect` and `bench` print.
/// An empty original (`original_len == 0`) has ratio 1.0 by definition:
/// there is nothing to make smaller, and `archive / 0` is no number (the
/// archive's fixed cost, 72 bytes of preamble and a table, is in the
/// archive length reported beside it).
///
/// ```
/// assert_eq!(brevis_core::ratio(50, 100), 0.5);
/// assert_eq!(brevis_core::ratio(75, 0), 1.0);
/// ```
pub fn ratio(archive_len: u64, original_len: u64) -> f64 {
    if original_len == 0 {
        1.0
    } else {
        archive_len as f64 / original_len as f64
    }
}

/// What decompressing one archive produced.
#[derive(Debug, Clone)]
pub struct DecompressReport {
    /// Length of the decoded file.
    pub original_len: u64,
    /// SHA-256 of the decoded file (equal to the recorded one, or it is an error).
    pub sha256: [u8; 32],
}

/// Summary of an archive, read without decoding it.
#[derive(Debug, Clone)]
pub struct ArchiveInfo {
    /// Format version of the archive.
    pub format_version: u16,
    /// Length of the original file.
    pub original_len: u64,
    /// SHA-256 of the original file.
    pub sha256: [u8; 32],
    /// Length of the archive.
    pub archive_len: u64,
}

/// One region of a segment in the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// Offset of its program in the archive.
    pub body_offset: u64,
    /// Length of its program.
    pub body_len: u64,
    /// xxh3-64 of the region's decoded bytes.
    pub checksum: u64,
}

/// One segment of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// What part of the source it is.
    pub desc: SegmentDesc,
    /// Words per region (the last region may be shorter).
    pub region_words: u64,
    /// Its regions.
    pub regions: Vec<Region>,
}

impl Segment {
    /// Words in the segment.
    pub fn words(&self) -> u64 {
        self.desc.len / self.desc.dtype.word_bytes() as u64
    }

    /// Words in region `i`.
    pub fn region_len(&self, i: usize) -> u64 {
        let start = i as u64 * self.region_words;
        self.region_words.min(self.words().saturating_sub(start))
    }

    /// Encoded bytes of the whole segment.
    pub fn encoded_len(&self) -> u64 {
        self.regions.iter().map(|r| r.body_len).sum()
    }
}

/// The fixed preamble.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Preamble {
    pub version: u16,
    pub original_len: u64,
    pub sha256: [u8; 32],
    pub table_offset: u64,
    pub table_len: u64,
    pub table_checksum: u64,
}

impl Preamble {
    #[cfg(feature = "search")]
    pub fn write(&self) -> [u8; PREAMBLE_LEN as usize] {
        let mut b = [0u8; PREAMBLE_LEN as usize];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&self.version.to_le_bytes());
        // 6..8: flags, zero.
        b[8..16].copy_from_slice(&self.original_len.to_le_bytes());
        b[16..48].copy_from_slice(&self.sha256);
        b[48..56].copy_from_slice(&self.table_offset.to_le_bytes());
        b[56..64].copy_from_slice(&self.table_len.to_le_bytes());
        b[64..72].copy_from_slice(&self.table_checksum.to_le_bytes());
        b
    }

    pub fn read(bytes: &[u8], archive_len: u64) -> Result<Preamble, DecodeError> {
        let mut r = ByteReader::new(bytes);
        if r.bytes(4).map_err(|_| DecodeError::BadMagic)? != MAGIC {
            return Err(DecodeError::BadMagic);
        }
        let version = r.u16()?;
        if !(crate::OLDEST_FORMAT_VERSION..=crate::FORMAT_VERSION).contains(&version) {
            return Err(DecodeError::UnsupportedVersion(version));
        }
        if r.u16()? != 0 {
            return Err(DecodeError::corrupt("unknown flags"));
        }
        let original_len = r.u64()?;
        let sha256: [u8; 32] = r.bytes(32)?.try_into().expect("32 bytes");
        let table_offset = r.u64()?;
        let table_len = r.u64()?;
        let table_checksum = r.u64()?;
        if table_len > MAX_TABLE_LEN {
            return Err(DecodeError::Limit {
                what: "segment table length",
                value: table_len,
                limit: MAX_TABLE_LEN,
            });
        }
        if table_offset < PREAMBLE_LEN || table_offset.checked_add(table_len) != Some(archive_len) {
            return Err(DecodeError::corrupt(format!(
                "segment table [{table_offset}, +{table_len}) does not end the {archive_len}-byte archive"
            )));
        }
        Ok(Preamble {
            version,
            original_len,
            sha256,
            table_offset,
            table_len,
            table_checksum,
        })
    }
}

/// The stored table: `u8 encoding` (0 raw, 1 zstd), `varint raw_len`, then
/// the table bytes, raw or as one zstd frame (tensor names repeat a lot).
#[cfg(feature = "search")]
pub(crate) fn pack_table(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len() / 2 + 16);
    match crate::entropy::zstd_compress(raw, write::HEADER_ZSTD_LEVEL) {
        Ok(z) if z.len() < raw.len() => {
            out.push(1);
            put_varint(&mut out, raw.len() as u64);
            out.extend_from_slice(&z);
        }
        _ => {
            out.push(0);
            put_varint(&mut out, raw.len() as u64);
            out.extend_from_slice(raw);
        }
    }
    out
}

/// Inverse of [`pack_table`], bounded by [`MAX_TABLE_LEN`].
pub(crate) fn unpack_table(stored: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let mut r = ByteReader::new(stored);
    let encoding = r.u8()?;
    let raw_len = r.varint()?;
    if raw_len > MAX_TABLE_LEN {
        return Err(DecodeError::Limit {
            what: "segment table length",
            value: raw_len,
            limit: MAX_TABLE_LEN,
        });
    }
    let body = r.bytes(r.remaining())?;
    let raw = match encoding {
        0 => body.to_vec(),
        1 => zstd::bulk::decompress(body, raw_len as usize)
            .map_err(|e| DecodeError::corrupt(format!("segment table: {e}")))?,
        e => return Err(DecodeError::corrupt(format!("unknown table encoding {e}"))),
    };
    if raw.len() as u64 != raw_len {
        return Err(DecodeError::corrupt("segment table has the wrong length"));
    }
    Ok(raw)
}

/// Serialize the segment table.
#[cfg(feature = "search")]
pub(crate) fn write_table(segments: &[Segment]) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint(&mut out, segments.len() as u64);
    for s in segments {
        let d = &s.desc;
        out.push(d.kind as u8);
        out.push(d.dtype.wire_id());
        put_varint(&mut out, d.name.len() as u64);
        out.extend_from_slice(d.name.as_bytes());
        put_varint(&mut out, d.shape.len() as u64);
        for &x in &d.shape {
            put_varint(&mut out, x);
        }
        put_varint(&mut out, d.offset);
        put_varint(&mut out, d.len);
        put_varint(&mut out, s.region_words);
        put_varint(&mut out, s.regions.len() as u64);
        for r in &s.regions {
            put_varint(&mut out, r.body_len);
            out.extend_from_slice(&r.checksum.to_le_bytes());
        }
    }
    out
}

/// Parse and validate the segment table: segments tile `[0, original_len)`
/// in order and regions tile `[PREAMBLE_LEN, table_offset)` in order.
pub(crate) fn read_table(bytes: &[u8], pre: &Preamble) -> Result<Vec<Segment>, DecodeError> {
    let mut r = ByteReader::new(bytes);
    let count = r.varint()?;
    // Every segment needs at least 8 table bytes: no allocation past the table.
    if count > bytes.len() as u64 / 8 + 1 {
        return Err(DecodeError::corrupt("segment count larger than the table"));
    }
    let mut segments = Vec::new();
    let mut pos = 0u64;
    let mut body = PREAMBLE_LEN;
    for i in 0..count {
        let kind = match r.u8()? {
            0 => SegmentKind::Bytes,
            1 => SegmentKind::Tensor,
            k => {
                return Err(DecodeError::corrupt(format!(
                    "segment {i}: unknown kind {k}"
                )));
            }
        };
        let dtype = Dtype::from_wire_id(r.u8()?)
            .ok_or_else(|| DecodeError::corrupt(format!("segment {i}: unknown dtype")))?;
        if (kind == SegmentKind::Bytes) != (dtype == Dtype::Bytes) {
            return Err(DecodeError::corrupt(format!(
                "segment {i}: kind and dtype disagree"
            )));
        }
        let name_len = r.varint()?;
        if name_len > MAX_NAME_LEN {
            return Err(DecodeError::Limit {
                what: "tensor name length",
                value: name_len,
                limit: MAX_NAME_LEN,
            });
        }
        let name = std::str::from_utf8(r.bytes(name_len as usize)?)
            .map_err(|_| DecodeError::corrupt(format!("segment {i}: name is not UTF-8")))?
            .to_owned();
        let ndims = r.varint()?;
        if ndims > MAX_DIMS {
            return Err(DecodeError::Limit {
                what: "tensor dimensions",
                value: ndims,
                limit: MAX_DIMS,
            });
        }
        let mut shape = Vec::new();
        for _ in 0..ndims {
            shape.push(r.varint()?);
        }
        let offset = r.varint()?;
        let len = r.varint()?;
        if offset != pos || len == 0 {
            return Err(DecodeError::corrupt(format!(
                "segment {i}: [{offset}, +{len}) does not follow the previous segment"
            )));
        }
        pos = pos
            .checked_add(len)
            .filter(|&p| p <= pre.original_len)
            .ok_or_else(|| {
                DecodeError::corrupt(format!("segment {i}: past the end of the file"))
            })?;
        let wb = dtype.word_bytes() as u64;
        if len % wb != 0 {
            return Err(DecodeError::corrupt(format!(
                "segment {i}: length not a whole number of words"
            )));
        }
        let region_words = r.varint()?;
        if region_words == 0 || region_words > crate::dsl::MAX_NODE_WORDS {
            return Err(DecodeError::Limit {
                what: "words per region",
                value: region_words,
                limit: crate::dsl::MAX_NODE_WORDS,
            });
        }
        let nregions = r.varint()?;
        if nregions != (len / wb).div_ceil(region_words) {
            return Err(DecodeError::corrupt(format!(
                "segment {i}: wrong region count"
            )));
        }
        if nregions > r.remaining() as u64 / 9 {
            return Err(DecodeError::corrupt(format!(
                "segment {i}: region list larger than the table"
            )));
        }
        let mut regions = Vec::with_capacity(nregions as usize);
        for _ in 0..nregions {
            let body_len = r.varint()?;
            if body_len > MAX_REGION_BODY {
                return Err(DecodeError::Limit {
                    what: "region program length",
                    value: body_len,
                    limit: MAX_REGION_BODY,
                });
            }
            let checksum = r.u64()?;
            regions.push(Region {
                body_offset: body,
                body_len,
                checksum,
            });
            body = body
                .checked_add(body_len)
                .filter(|&b| b <= pre.table_offset)
                .ok_or_else(|| {
                    DecodeError::corrupt(format!("segment {i}: programs overrun the table"))
                })?;
        }
        segments.push(Segment {
            desc: SegmentDesc {
                kind,
                dtype,
                name,
                shape,
                offset,
                len,
            },
            region_words,
            regions,
        });
    }
    if r.remaining() != 0 {
        return Err(DecodeError::corrupt("trailing bytes in the segment table"));
    }
    if pos != pre.original_len {
        return Err(DecodeError::corrupt(
            "segments do not cover the original file",
        ));
    }
    if body != pre.table_offset {
        return Err(DecodeError::corrupt(
            "programs do not fill the archive body",
        ));
    }
    Ok(segments)
}

/// Open an archive file.
pub fn open(path: &Path) -> Result<Archive<std::fs::File>, DecodeError> {
    let f = std::fs::File::open(path).map_err(|e| DecodeError::io(path, e))?;
    Archive::new(f).map_err(|e| match e {
        DecodeError::Io { source, .. } => DecodeError::io(path, source),
        e => e,
    })
}

/// A safetensors file of one f16 tensor, `w`, of these bytes (for tests).
#[cfg(all(test, feature = "search"))]
pub(crate) fn f16_file(tensor: &[u8]) -> Vec<u8> {
    let n = tensor.len() / 2;
    let header = format!(
        r#"{{"w":{{"dtype":"F16","shape":[{n}],"data_offsets":[0,{}]}}}}"#,
        2 * n
    );
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend_from_slice(tensor);
    file
}

pub(crate) fn xxh3(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// Words to their little-endian bytes (`width` in 8, 16, 32, 64).
pub(crate) fn words_to_bytes(words: &[u64], width: u8, out: &mut Vec<u8>) {
    // Other widths take all eight bytes.
    let bpw = match width as usize / 8 {
        b @ (1 | 2 | 4) => b,
        _ => 8,
    };
    let at = out.len();
    out.resize(at + words.len() * bpw, 0);
    let dst = &mut out[at..];
    // Indexed loops over a preallocated output, one per word size: these
    // vectorize (a word's bytes pushed one by one do not).
    match bpw {
        1 => dst.iter_mut().zip(words).for_each(|(o, &w)| *o = w as u8),
        2 => dst
            .chunks_exact_mut(2)
            .zip(words)
            .for_each(|(o, &w)| o.copy_from_slice(&(w as u16).to_le_bytes())),
        4 => dst
            .chunks_exact_mut(4)
            .zip(words)
            .for_each(|(o, &w)| o.copy_from_slice(&(w as u32).to_le_bytes())),
        _ => dst
            .chunks_exact_mut(8)
            .zip(words)
            .for_each(|(o, &w)| o.copy_from_slice(&w.to_le_bytes())),
    }
}

/// Little-endian bytes to words (`width` in 8, 16, 32, 64).
pub(crate) fn bytes_to_words(bytes: &[u8], width: u8) -> Vec<u64> {
    match width {
        8 => bytes.iter().map(|&b| b as u64).collect(),
        16 => bytes
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]) as u64)
            .collect(),
        32 => bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4")) as u64)
            .collect(),
        _ => bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8")))
            .collect(),
    }
}

/// Where parallel work runs: a pool of the threads asked for, shared by
/// every call that asks for as many (or rayon's global pool, should a
/// thread fail to start).
pub(crate) enum Workers {
    Global,
    Own(std::sync::Arc<rayon::ThreadPool>),
}

impl Workers {
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match self {
            Workers::Global => f(),
            Workers::Own(p) => p.install(f),
        }
    }

    /// A rayon scope whose body runs on the calling thread while its
    /// spawned jobs run on the workers.
    #[cfg(feature = "search")]
    pub fn in_place_scope<'scope, R>(&self, op: impl FnOnce(&rayon::Scope<'scope>) -> R) -> R {
        match self {
            Workers::Global => rayon::in_place_scope(op),
            Workers::Own(p) => p.in_place_scope(op),
        }
    }

    pub fn current_num_threads(&self) -> usize {
        match self {
            Workers::Global => rayon::current_num_threads(),
            Workers::Own(p) => p.current_num_threads(),
        }
    }
}

/// Workers for `n` threads (0 = all cores): one pool per number of threads
/// for the life of the process. (A pool of its own for every file started
/// threads per file, and code on a thread outside the pool handed each
/// batch of regions over and slept until it was done: at one thread,
/// human-tfjs's 41 files spent a sixth of their time waking threads.)
pub(crate) fn pool(n: usize) -> Workers {
    static POOLS: std::sync::Mutex<Vec<(usize, std::sync::Arc<rayon::ThreadPool>)>> =
        std::sync::Mutex::new(Vec::new());
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = pools.iter().find(|(k, _)| *k == n) {
        return Workers::Own(p.clone());
    }
    match rayon::ThreadPoolBuilder::new().num_threads(n).build() {
        Ok(p) => {
            let p = std::sync::Arc::new(p);
            pools.push((n, p.clone()));
            Workers::Own(p)
        }
        Err(_) => Workers::Global,
    }
}
