//! Compression: source file -> segments -> one program per region ->
//! archive. Built with the `search` feature only; decoding never needs it.
//!
//! [`segments`] cuts the source and samples its tensors, [`dedup`] finds
//! repeated tensors, [`regions`] codes and writes the regions, [`whole`]
//! screens small files for coding whole, [`check`] proves the archive, and
//! [`learn`] learns a prior from a sample of tensors.

mod check;
mod dedup;
mod learn;
mod level;
mod options;
mod regions;
mod segments;
mod stream;
#[cfg(test)]
mod tests;
mod whole;

use std::borrow::Cow;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

pub use learn::LearnOptions;
pub use level::Level;
pub use options::{CompressOptions, CompressReport};
pub use stream::Encoder;

use crate::container::{Archive, ReadAt, SegmentKind, layout};
use crate::error::EncodeError;
use crate::pool::pool;
use check::self_check;
use regions::encode_segments;
use segments::read_segments;
use whole::{WHOLE_FILE_MAX, whole_may_win};

fn io(path: &str, e: std::io::Error) -> EncodeError {
    EncodeError::io(path, e)
}

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
    let found = read_segments(src, name, opts.strict_safetensors, opts.sidecar.as_deref())?;
    let format = found.format;
    // Formats the file claimed, and why none could be read (it is then
    // coded as plain bytes, still exactly).
    let unread: Vec<String> = match format {
        Some(_) => vec![],
        None => found
            .refused
            .into_iter()
            .map(|(f, why)| format!("{f}: {why}"))
            .collect(),
    };
    let with_format = |r: CompressReport| CompressReport {
        format,
        unread,
        ..r
    };
    compress_segments(src, name, len, found.segments, out, opts).map(with_format)
}

/// Code the segments of a source: tensors by their programs, plain bytes
/// generically; a small file also whole, when that is smaller.
fn compress_segments<W: Sink>(
    src: &dyn ReadAt,
    name: &Path,
    len: u64,
    descs: Vec<crate::container::SegmentDesc>,
    out: &mut W,
    opts: &CompressOptions,
) -> Result<CompressReport, EncodeError> {
    let label = name.display().to_string();
    let has_tensors = descs.iter().any(|d| d.kind == SegmentKind::Tensor);
    if !has_tensors {
        // Plain bytes: small files in one region (one zstd window).
        let region = if len <= WHOLE_FILE_MAX {
            crate::dsl::MAX_NODE_WORDS
        } else {
            opts.region_words
        };
        let level = plain_level(src, len, opts.level).map_err(|e| io(&label, e))?;
        return encode_segments(src, name, descs, region, level, out, opts);
    }
    // The whole-file alternative is a search over programs too: budget 0
    // (no search) writes only the incumbent literals.
    if len > WHOLE_FILE_MAX || !opts.whole_file || opts.budget == 0 {
        return encode_segments(src, name, descs, opts.region_words, 19, out, opts);
    }
    // The file is read once, whole (it is small): both codings and the
    // screen read it from memory.
    let whole = match src.slice_at(0, len as usize) {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(src.read_prefix(len as usize).map_err(|e| io(&label, e))?),
    };
    let src: &[u8] = &whole;
    // Reserved whole (archives are rarely larger than their source; pages
    // never written are never touched): grown by doubling, the archive
    // would be copied twice over.
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
    let (written, may_win) = crate::pool::join(
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

/// zstd level of a file no format reader knows, unless a sample says
/// otherwise: some 50 MB/s and more a thread.
const PLAIN_LEVEL: i32 = 6;
/// zstd's slowest level (a few MB/s): only where it pays.
const PLAIN_ULTRA_LEVEL: i32 = 19;
/// Bytes of the sample that judges the two levels (the middle of the file).
const PLAIN_SAMPLE: u64 = 1 << 20;
/// Percent of the sample [`PLAIN_ULTRA_LEVEL`] must save over
/// [`PLAIN_LEVEL`] to be paid for on the whole file (text such as a
/// tokenizer's JSON gains 10% and more; weights of an unknown container
/// gain nothing).
const PLAIN_ULTRA_GAIN_PERCENT: usize = 2;

/// The zstd level for a file of plain bytes: [`PLAIN_LEVEL`], or
/// [`PLAIN_ULTRA_LEVEL`] when a bounded sample shows it pays.
/// A compression level that caps zstd below the ultra level skips the
/// sample.
fn plain_level(src: &dyn ReadAt, len: u64, level: Level) -> std::io::Result<i32> {
    let n = len.min(PLAIN_SAMPLE);
    if n == 0 || level.zstd(PLAIN_ULTRA_LEVEL) < PLAIN_ULTRA_LEVEL {
        return Ok(PLAIN_LEVEL);
    }
    let sample = segments::read_cow(src, (len - n) / 2, n as usize)?;
    let z = |level| crate::entropy::zstd_compress(&sample, level).map(|z| z.len());
    let (fast, ultra) = (z(PLAIN_LEVEL)?, z(PLAIN_ULTRA_LEVEL)?);
    Ok(if ultra * 100 <= fast * (100 - PLAIN_ULTRA_GAIN_PERCENT) {
        PLAIN_ULTRA_LEVEL
    } else {
        PLAIN_LEVEL
    })
}

fn file_label(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "<memory>".into())
}

/// Compress bytes in memory.
pub fn compress(data: &[u8], opts: &CompressOptions) -> Result<Vec<u8>, EncodeError> {
    // Room for the whole archive at once: an archive is rarely larger than
    // its source, and pages never written are never touched. Grown by
    // doubling from half the source, a float checkpoint's archive (0.6-0.9 of
    // it) was copied once more into fresh pages, a quarter of the time.
    let mut out = std::io::Cursor::new(Vec::with_capacity(data.len() + 1024));
    let report = compress_source(&data, Path::new("<memory>"), &mut out, opts)?;
    let out = out.into_inner();
    if opts.verify {
        let archive = Archive::new(&out[..]).map_err(|e| EncodeError::SelfCheck(e.to_string()))?;
        self_check(archive, &report, opts.threads, opts.source_sha256.is_some())?;
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
        self_check(archive, &report, opts.threads, opts.source_sha256.is_some())?;
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
