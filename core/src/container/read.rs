//! Decoding: archive -> programs -> interpreter -> bytes. Needs no search code.

use std::io::Write;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::{
    ArchiveInfo, DecompressOptions, DecompressReport, PREAMBLE_LEN, Preamble, ProgramInfo,
    ProgramStep, Segment, SegmentKind, read_table, xxh3,
};
use crate::dsl::exec::{NoRefs, Resolver, execute_to};
use crate::dsl::{Node, wire};
use crate::error::DecodeError;
use crate::pool::pool;

/// Random-access reads (positional, so threads can share one source):
/// what an [`Archive`] reads from. Implemented for byte slices and files.
// An archive is never empty (it has a preamble): `is_empty` would add nothing.
#[allow(clippy::len_without_is_empty)]
pub trait ReadAt: Sync {
    /// Total length.
    fn len(&self) -> std::io::Result<u64>;
    /// Fill `buf` from `offset`.
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()>;
    /// The `len` bytes at `offset`, borrowed, when the source holds them in
    /// memory (`None` otherwise, or out of range: [`ReadAt::read_exact_at`]
    /// then reads them, or says why not).
    fn slice_at(&self, _offset: u64, _len: usize) -> Option<&[u8]> {
        None
    }
    /// The first `len` bytes, in a buffer of their own.
    fn read_prefix(&self, len: usize) -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.read_exact_at(0, &mut buf)?;
        Ok(buf)
    }
}

impl ReadAt for [u8] {
    fn len(&self) -> std::io::Result<u64> {
        Ok(<[u8]>::len(self) as u64)
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let s = usize::try_from(offset)
            .ok()
            .and_then(|o| self.get(o..o.checked_add(buf.len())?))
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(s);
        Ok(())
    }
    fn slice_at(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let o = usize::try_from(offset).ok()?;
        self.get(o..o.checked_add(len)?)
    }
}

impl ReadAt for std::fs::File {
    fn len(&self) -> std::io::Result<u64> {
        Ok(self.metadata()?.len())
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset)
    }
    /// Read into a buffer that is not zeroed first (the file's cursor moves:
    /// every other read is positional).
    fn read_prefix(&self, len: usize) -> std::io::Result<Vec<u8>> {
        use std::io::{Read, Seek};
        let mut f = self;
        f.seek(std::io::SeekFrom::Start(0))?;
        let mut buf = Vec::with_capacity(len);
        f.take(len as u64).read_to_end(&mut buf)?;
        if buf.len() != len {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(buf)
    }
}

impl<T: ReadAt + ?Sized> ReadAt for &T {
    fn len(&self) -> std::io::Result<u64> {
        (**self).len()
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        (**self).read_exact_at(offset, buf)
    }
    fn slice_at(&self, offset: u64, len: usize) -> Option<&[u8]> {
        (**self).slice_at(offset, len)
    }
    fn read_prefix(&self, len: usize) -> std::io::Result<Vec<u8>> {
        (**self).read_prefix(len)
    }
}

fn io_err(e: std::io::Error) -> DecodeError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        DecodeError::damaged("it ends early")
    } else {
        DecodeError::io("<archive>", e)
    }
}

/// An opened archive: preamble and segment table read and validated.
pub struct Archive<R: ReadAt> {
    src: R,
    pre: Preamble,
    segments: Vec<Segment>,
    archive_len: u64,
}

impl<R: ReadAt> Archive<R> {
    /// Read and validate the preamble and the table.
    pub fn new(src: R) -> Result<Self, DecodeError> {
        let archive_len = src.len().map_err(io_err)?;
        if archive_len < PREAMBLE_LEN {
            return Err(if archive_len >= 4 {
                let mut m = [0u8; 4];
                src.read_exact_at(0, &mut m).map_err(io_err)?;
                if m != super::MAGIC {
                    DecodeError::BadMagic
                } else {
                    DecodeError::Truncated {
                        offset: 0,
                        needed: PREAMBLE_LEN,
                        have: archive_len,
                    }
                }
            } else {
                DecodeError::BadMagic
            });
        }
        let mut pb = [0u8; PREAMBLE_LEN as usize];
        src.read_exact_at(0, &mut pb).map_err(io_err)?;
        let pre = Preamble::read(&pb, archive_len)?;
        let mut table = vec![0u8; pre.table_len as usize];
        src.read_exact_at(pre.table_offset, &mut table)
            .map_err(io_err)?;
        if xxh3(&table) != pre.table_checksum {
            return Err(DecodeError::Checksum {
                what: "segment table".into(),
            });
        }
        let table = super::unpack_table(&table)?;
        let segments = read_table(&table, &pre)?;
        Ok(Archive {
            src,
            pre,
            segments,
            archive_len,
        })
    }

    /// Summary.
    pub fn info(&self) -> ArchiveInfo {
        ArchiveInfo {
            format_version: self.pre.version,
            original_len: self.pre.original_len,
            sha256: self.pre.sha256,
            archive_len: self.archive_len,
        }
    }

    /// The segments in file order.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// What the program of region `r` of segment `s` is made of: its text
    /// and each of its steps, for display (`brevis-hub inspect`).
    pub fn describe_program(&self, s: usize, r: usize) -> Result<ProgramInfo, DecodeError> {
        let node = self.program(s, r)?;
        let mut steps = Vec::new();
        node.walk(&mut |n| {
            let literal_bytes = match n {
                Node::Lit { payload, .. } => payload.len() as u64,
                _ => 0,
            };
            steps.push(ProgramStep {
                production: n.production(),
                literal_bytes,
            });
        });
        Ok(ProgramInfo {
            text: node.to_string(),
            steps,
        })
    }

    /// Parse the program of region `r` of segment `s`.
    pub(crate) fn program(&self, s: usize, r: usize) -> Result<Node, DecodeError> {
        let seg = self
            .segments
            .get(s)
            .ok_or_else(|| DecodeError::damaged(format!("no segment {s}")))?;
        let reg = seg
            .regions
            .get(r)
            .ok_or_else(|| DecodeError::damaged(format!("segment {s} has no region {r}")))?;
        // Borrowed where the archive is in memory: no copy, no zeroed buffer.
        let read;
        let body = match self.src.slice_at(reg.body_offset, reg.body_len as usize) {
            Some(b) => b,
            None => {
                let mut buf = vec![0u8; reg.body_len as usize];
                self.src
                    .read_exact_at(reg.body_offset, &mut buf)
                    .map_err(io_err)?;
                read = buf;
                &read[..]
            }
        };
        let node = wire::read_exact(body)?;
        let want = seg.region_len(r);
        if node.width() != seg.desc.width() || node.len() != want {
            return Err(DecodeError::corrupt(format!(
                "segment {s} region {r}: program has type u{}[{}], expected u{}[{want}]",
                node.width(),
                node.len(),
                seg.desc.width()
            )));
        }
        Ok(node)
    }

    /// Decode region `r` of segment `s` into `dst` (exactly its bytes),
    /// checking its checksum. `allow_refs`: whether its program may
    /// reference earlier segments.
    pub(crate) fn decode_region_to(
        &self,
        s: usize,
        r: usize,
        allow_refs: bool,
        dst: &mut [u8],
    ) -> Result<(), DecodeError> {
        let node = self.program(s, r)?;
        let seg = &self.segments[s];
        let width = seg.desc.width();
        if allow_refs {
            let refs = SegmentRefs {
                archive: self,
                current: s,
                decoded: std::cell::Cell::new(0),
            };
            execute_to(&node, &refs, width, dst)?;
        } else {
            execute_to(&node, &NoRefs, width, dst)?;
        }
        if xxh3(dst) != seg.regions[r].checksum {
            return Err(DecodeError::Checksum {
                what: format!("segment {s} ({}) region {r}", seg.desc.name),
            });
        }
        Ok(())
    }

    /// [`Archive::decode_region_to`] into a new buffer.
    pub(crate) fn decode_region(
        &self,
        s: usize,
        r: usize,
        allow_refs: bool,
    ) -> Result<Vec<u8>, DecodeError> {
        // (At most a region's bytes, 32 MiB: the table bounds them.)
        let len = self.segments.get(s).map_or(0, |g| g.region_bytes(r));
        let mut out = vec![0u8; len as usize];
        self.decode_region_to(s, r, allow_refs, &mut out)?;
        Ok(out)
    }

    /// Decode one segment (e.g. one tensor) alone.
    pub fn decode_segment(&self, s: usize) -> Result<Vec<u8>, DecodeError> {
        let seg = self
            .segments
            .get(s)
            .ok_or_else(|| DecodeError::damaged(format!("no segment {s}")))?;
        // The table's length is untrusted: grow as regions decode.
        let mut out = Vec::with_capacity((seg.desc.len as usize).min(64 << 20));
        for r in 0..seg.regions.len() {
            out.extend_from_slice(&self.decode_region(s, r, true)?);
        }
        Ok(out)
    }

    /// Every tensor of the source's safetensors header, in data order
    /// (empty when the source is not safetensors). Decodes only the header.
    pub fn tensors(&self) -> Result<Vec<super::layout::TensorEntry>, DecodeError> {
        let total = self.pre.original_len;
        if total < 9 {
            return Ok(Vec::new());
        }
        let head = self.read_range(0, 8)?;
        let n = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        if n > super::layout::MAX_SAFETENSORS_HEADER || n + 8 > total {
            return Ok(Vec::new());
        }
        let header = self.read_range(0, 8 + n)?;
        match super::layout::parse_header(&header, self.pre.original_len) {
            Ok(Some((_, t))) => Ok(t),
            Ok(None) => Ok(Vec::new()),
            Err(e) => Err(DecodeError::corrupt(format!("safetensors header: {e}"))),
        }
    }

    /// Decode one tensor alone, by name: only the header and the regions
    /// that hold the tensor are decoded (small tensors share a segment).
    /// In a container other than safetensors, a tensor is found by its
    /// segment's name (small tensors coded together in one segment are
    /// not found one by one).
    pub fn tensor(&self, name: &str) -> Result<Option<Vec<u8>>, DecodeError> {
        if let Some(t) = self.tensors()?.into_iter().find(|t| t.name == name) {
            return self.read_range(t.offset, t.len).map(Some);
        }
        match self
            .segments
            .iter()
            .position(|s| s.desc.kind == super::SegmentKind::Tensor && s.desc.name == name)
        {
            Some(s) => self.decode_segment(s).map(Some),
            None => Ok(None),
        }
    }

    /// The container format the source's first bytes claim (`"safetensors"`,
    /// `"gguf"`, `"pytorch"`, ...; see `brevis-hub inspect`), `None` for
    /// none a format reader knows. Decodes only the first region.
    pub fn format(&self) -> Result<Option<&'static str>, DecodeError> {
        let len = self.pre.original_len;
        let head = self.read_range(0, len.min(crate::formats::HEAD_LEN as u64))?;
        Ok(crate::formats::detect(&head, len))
    }

    /// Decode bytes `offset..offset+len` of the original file.
    pub fn read_range(&self, offset: u64, len: u64) -> Result<Vec<u8>, DecodeError> {
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.pre.original_len)
            .ok_or(DecodeError::OutOfRange {
                offset,
                len,
                file_len: self.pre.original_len,
            })?;
        let mut out = Vec::with_capacity((len as usize).min(64 << 20));
        for (i, seg) in self.segments.iter().enumerate() {
            let (s0, s1) = (seg.desc.offset, seg.desc.offset + seg.desc.len);
            if s1 <= offset || s0 >= end {
                continue;
            }
            let rb = seg.region_words * seg.desc.dtype.word_bytes() as u64;
            for r in 0..seg.regions.len() {
                let r0 = s0 + r as u64 * rb;
                let r1 = (r0 + rb).min(s1);
                if r1 <= offset || r0 >= end {
                    continue;
                }
                let bytes = self.decode_region(i, r, true)?;
                let lo = (offset.max(r0) - r0) as usize;
                let hi = (end.min(r1) - r0) as usize;
                out.extend_from_slice(&bytes[lo..hi]);
            }
        }
        Ok(out)
    }

    /// Index of the segment holding exactly the tensor called `name` (small
    /// tensors coded in a group have none: use [`Archive::tensor`]).
    pub fn find(&self, name: &str) -> Option<usize> {
        self.segments
            .iter()
            .position(|s| s.desc.kind == SegmentKind::Tensor && s.desc.name == name)
    }

    /// Decode everything into `out`, in order, regions in parallel with
    /// memory bounded by threads x 32 MiB of regions decoded ahead of the
    /// one being written (this thread hashes and writes each region as soon
    /// as it is decoded, and decodes others meanwhile); verify length and
    /// SHA-256.
    pub fn decode_to(
        &self,
        out: &mut dyn Write,
        opts: &DecompressOptions,
    ) -> Result<DecompressReport, DecodeError> {
        self.decode_proven(Sink::Write(out), opts)
    }

    /// [`Archive::decode_to`] without the file's SHA-256: to time the
    /// decoder alone, as other compressors are timed. Each region's
    /// checksum and the length are still checked, but nothing proves the
    /// whole file: use [`Archive::decode_to`] for anything kept.
    pub fn decode_unhashed_to(
        &self,
        out: &mut dyn Write,
        opts: &DecompressOptions,
    ) -> Result<u64, DecodeError> {
        self.decode_into(Sink::Write(out), opts, false)?;
        Ok(self.pre.original_len)
    }

    /// [`Archive::decode_to`] into `dst`, which must be exactly
    /// [`ArchiveInfo::original_len`] bytes long: every region decodes in
    /// place, with no copy and no buffer of its own (the fastest way to
    /// decode in memory).
    ///
    /// ```
    /// let data = b"weights ".repeat(1000);
    /// let archive = brevis_core::compress(&data, &Default::default()).unwrap();
    /// let archive = brevis_core::Archive::new(&archive[..]).unwrap();
    /// let mut out = vec![0u8; archive.info().original_len as usize];
    /// archive.decode_to_slice(&mut out, &Default::default()).unwrap();
    /// assert_eq!(out, data);
    /// ```
    pub fn decode_to_slice(
        &self,
        dst: &mut [u8],
        opts: &DecompressOptions,
    ) -> Result<DecompressReport, DecodeError> {
        self.decode_proven(Sink::Slice(dst), opts)
    }

    /// [`Archive::decode_to_slice`] without the file's SHA-256 (see
    /// [`Archive::decode_unhashed_to`]).
    pub fn decode_unhashed_to_slice(
        &self,
        dst: &mut [u8],
        opts: &DecompressOptions,
    ) -> Result<u64, DecodeError> {
        self.decode_into(Sink::Slice(dst), opts, false)?;
        Ok(self.pre.original_len)
    }

    /// [`Archive::decode_into`] with the file's SHA-256, checked.
    fn decode_proven(
        &self,
        sink: Sink<'_>,
        opts: &DecompressOptions,
    ) -> Result<DecompressReport, DecodeError> {
        let digest = self.decode_into(sink, opts, true)?;
        Ok(DecompressReport {
            original_len: self.pre.original_len,
            sha256: digest.expect("hashed"),
        })
    }

    /// Decode into `sink`; the file's SHA-256, checked, when `hash`.
    fn decode_into(
        &self,
        sink: Sink<'_>,
        opts: &DecompressOptions,
        hash: bool,
    ) -> Result<Option<[u8; 32]>, DecodeError> {
        let mut sha = Sha256::new();
        opts.progress.start("decompress", self.pre.original_len);
        let mut seen = |b: &[u8]| {
            if hash {
                sha.update(b);
            }
            opts.progress.advance(b.len() as u64);
        };
        match sink {
            Sink::Slice(dst) => {
                if dst.len() as u64 != self.pre.original_len {
                    return Err(DecodeError::OutOfRange {
                        offset: 0,
                        len: dst.len() as u64,
                        file_len: self.pre.original_len,
                    });
                }
                // Each region decodes into the next piece of `dst`.
                let mut rest = dst;
                let next = move |len: usize| {
                    let (head, tail) = std::mem::take(&mut rest).split_at_mut(len);
                    rest = tail;
                    head
                };
                self.decode_regions(opts, next, |b: &mut [u8]| {
                    seen(b);
                    Ok(())
                })?;
            }
            Sink::Write(out) => {
                // Each region decodes into a buffer that comes back once
                // written: as many buffers as regions in flight, reused.
                let (free_tx, free_rx) = std::sync::mpsc::channel::<Vec<u8>>();
                let next = move |len: usize| {
                    let mut buf = free_rx.try_recv().unwrap_or_default();
                    buf.resize(len, 0);
                    buf
                };
                self.decode_regions(opts, next, |b: Vec<u8>| {
                    seen(&b);
                    out.write_all(&b).map_err(DecodeError::Write)?;
                    let _ = free_tx.send(b);
                    Ok(())
                })?;
            }
        }
        opts.progress.finish();
        if !hash {
            return Ok(None);
        }
        let digest: [u8; 32] = sha.finalize().into();
        if digest != self.pre.sha256 {
            return Err(DecodeError::ShaMismatch {
                expected: hex::encode(self.pre.sha256),
                actual: hex::encode(digest),
            });
        }
        Ok(Some(digest))
    }

    /// Decode every region, in order, each into the buffer `next` gives
    /// for its length, and hand them to `done` in order on this thread.
    /// One thread decodes a region at a time (memory: one region). With
    /// more, helpers and this thread take regions as they come free
    /// ([`crate::ordered`]), at most [`super::BATCH_BYTES_PER_THREAD`]
    /// bytes and [`super::DECODED_AHEAD_PER_THREAD`] regions a thread
    /// ahead of the next one `done` takes; this thread hands each region
    /// to `done` (which hashes and writes it) as soon as it is decoded. The
    /// first error, in order, ends it.
    fn decode_regions<B, N, D>(
        &self,
        opts: &DecompressOptions,
        next: N,
        mut done: D,
    ) -> Result<(), DecodeError>
    where
        B: AsMut<[u8]> + Send,
        N: FnMut(usize) -> B + Send,
        D: FnMut(B) -> Result<(), DecodeError>,
    {
        let threads = pool(opts.threads).current_num_threads();
        let jobs: Vec<(usize, usize)> = self
            .segments
            .iter()
            .enumerate()
            .flat_map(|(s, seg)| (0..seg.regions.len()).map(move |r| (s, r)))
            .collect();
        let sizes: Vec<u64> = jobs
            .iter()
            .map(|&(s, r)| self.segments[s].region_bytes(r))
            .collect();
        if sizes.iter().sum::<u64>() != self.pre.original_len {
            return Err(DecodeError::corrupt(
                "decoded length differs from the recorded one",
            ));
        }
        let region = |i: usize, mut buf: B| -> Result<B, DecodeError> {
            let (s, r) = jobs[i];
            self.decode_region_to(s, r, true, buf.as_mut())
                .map(|()| buf)
        };
        if threads < 2 {
            let mut next = next;
            for (i, &len) in sizes.iter().enumerate() {
                done(region(i, next(len as usize))?)?;
            }
            return Ok(());
        }
        let ahead = crate::ordered::Ahead {
            bytes: threads as u64 * super::BATCH_BYTES_PER_THREAD,
            items: threads * super::DECODED_AHEAD_PER_THREAD,
        };
        let work = crate::ordered::InOrder::new(&sizes, ahead, next);
        // (Should decoding panic, the region fails first and the panic
        // goes on: the scope raises it.)
        let panicked = || DecodeError::corrupt("the decoder panicked");
        std::thread::scope(|scope| {
            for _ in 1..threads {
                scope.spawn(|| work.help(&region, panicked));
            }
            work.hand_out(&region, panicked, |_, buf| done(buf))
        })
    }
}

/// Where [`Archive::decode_into`] puts the decoded file.
enum Sink<'a> {
    /// Written out, region by region.
    Write(&'a mut dyn Write),
    /// Decoded in place: exactly the file's length.
    Slice(&'a mut [u8]),
}

/// Resolves `Ref` nodes by decoding the earlier segment's regions (which
/// may not themselves hold references: no chains, no cycles).
struct SegmentRefs<'a, R: ReadAt> {
    archive: &'a Archive<R>,
    current: usize,
    /// Bytes of referenced regions decoded so far for this region.
    decoded: std::cell::Cell<u64>,
}

/// Most bytes of referenced regions one region's program may have decoded
/// (a `Ref` decodes whole regions: without a bound, thousands of one-word
/// references into 32 MiB regions would decode terabytes). What Brevis
/// writes needs at most two regions a program: one `Ref` per region of a
/// duplicate tensor.
const MAX_REF_DECODED_BYTES: u64 = 4 * crate::dsl::MAX_BYTE_REGION_WORDS;

impl<R: ReadAt> Resolver for SegmentRefs<'_, R> {
    fn resolve(
        &self,
        segment: u32,
        offset: u64,
        n: u64,
        width: u8,
    ) -> Result<Vec<u64>, DecodeError> {
        let s = segment as usize;
        if s >= self.current {
            return Err(DecodeError::corrupt("reference to a later segment"));
        }
        let seg = &self.archive.segments[s];
        if seg.desc.width() != width {
            return Err(DecodeError::corrupt(
                "reference to a segment of another width",
            ));
        }
        let end = offset
            .checked_add(n)
            .filter(|&e| e <= seg.words())
            .ok_or_else(|| DecodeError::corrupt("reference past the end of its segment"))?;
        let mut words = Vec::with_capacity(n as usize);
        let wb = seg.desc.dtype.word_bytes();
        let mut r = (offset / seg.region_words) as usize;
        while (words.len() as u64) < n {
            let start = r as u64 * seg.region_words;
            let total = self.decoded.get().saturating_add(seg.region_bytes(r));
            if total > MAX_REF_DECODED_BYTES {
                return Err(DecodeError::Limit {
                    what: "bytes decoded for one region's references",
                    value: total,
                    limit: MAX_REF_DECODED_BYTES,
                });
            }
            self.decoded.set(total);
            let bytes = self.archive.decode_region(s, r, false)?;
            // Only the referenced words become words (a region may be far
            // larger than the reference: 32 MiB of bytes).
            let lo = offset.saturating_sub(start) as usize;
            let hi = (end - start).min((bytes.len() / wb) as u64) as usize;
            if lo >= hi {
                return Err(DecodeError::corrupt("reference past its region"));
            }
            let w = crate::words::bytes_to_words(&bytes[lo * wb..hi * wb], width);
            words.extend_from_slice(&w);
            r += 1;
        }
        Ok(words)
    }
}

/// Decompress an archive in memory, checking every checksum and the SHA-256.
pub fn decompress(archive: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let a = Archive::new(archive)?;
    let cap = a
        .pre
        .original_len
        .min(archive.len() as u64 * 64 + (1 << 20));
    let mut out = Vec::with_capacity(cap as usize);
    a.decode_to(&mut out, &DecompressOptions::default())?;
    Ok(out)
}

/// Decompress `src` into a writer, streaming, verifying the SHA-256 at the
/// end (a mismatch is an error after the bytes were written: callers that
/// must not expose wrong bytes write to a temp file).
pub fn decompress_to(
    src: &Path,
    out: &mut dyn Write,
    opts: &DecompressOptions,
) -> Result<DecompressReport, DecodeError> {
    let a = super::open(src)?;
    a.decode_to(out, opts)
}

/// Decompress `src` into `dst` atomically (temp file + rename), verifying
/// the SHA-256 before the rename. Fails if `dst` exists unless `overwrite`.
pub fn decompress_file(
    src: &Path,
    dst: &Path,
    overwrite: bool,
    opts: &DecompressOptions,
) -> Result<DecompressReport, DecodeError> {
    if !overwrite && dst.exists() {
        return Err(DecodeError::Exists(dst.to_path_buf()));
    }
    let a = super::open(src)?;
    let tmp = crate::fsutil::TempFile::beside(dst).map_err(|e| DecodeError::io(dst, e))?;
    let mut w = crate::fsutil::buffered(tmp.file().map_err(|e| DecodeError::io(dst, e))?);
    let report = a.decode_to(&mut w, opts).map_err(|e| match e {
        DecodeError::Write(e) => DecodeError::io(dst, e),
        e => e,
    })?;
    w.flush().map_err(|e| DecodeError::io(dst, e))?;
    drop(w);
    tmp.set_mode_from(src);
    tmp.persist(dst, overwrite)
        .map_err(|e| DecodeError::io(dst, e))?;
    Ok(report)
}

/// Read an archive's summary (length, SHA-256) without decoding it.
pub fn read_info(src: &Path) -> Result<ArchiveInfo, DecodeError> {
    Ok(super::open(src)?.info())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With two threads, regions decode ahead of the writer: the output is
    /// the source, a writer that fails stops the decoder (an error, not a
    /// hang), and a damaged region ends the output before it.
    #[cfg(feature = "search")]
    #[test]
    fn threaded_decoding_writes_in_order_and_stops_on_the_first_error() {
        use std::io::Write;
        // One f16 tensor in 256 regions.
        let n = 1usize << 18;
        let tensor: Vec<u8> = (0..n as u64)
            .flat_map(|i| {
                // Float-like: four exponents, noise in the mantissa
                // (splitmix64: nothing zstd finds).
                let mut h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                h = (h ^ h >> 30).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                h = (h ^ h >> 27).wrapping_mul(0x94D0_49BB_1331_11EB);
                ((h >> 54) as u16 | (12 + (h >> 40) as u16 % 4) << 10).to_le_bytes()
            })
            .collect();
        let file = super::super::f16_file(&tensor);
        let opts = crate::CompressOptions::default()
            .region_words(1024)
            .whole_file(false)
            .verify(false);
        let archive = crate::compress(&file, &opts).unwrap();
        let two = DecompressOptions {
            threads: 2,
            ..Default::default()
        };
        let a = Archive::new(archive.as_slice()).unwrap();
        let regions: usize = a.segments().iter().map(|s| s.regions.len()).sum();
        assert!(regions >= 256, "{regions} regions");
        let mut out = Vec::new();
        a.decode_to(&mut out, &two).unwrap();
        assert!(out == file);
        for threads in [1, 2, 8] {
            let mut out = Vec::new();
            let opts = DecompressOptions::default().threads(threads);
            assert_eq!(
                a.decode_unhashed_to(&mut out, &opts).unwrap(),
                file.len() as u64
            );
            assert!(out == file);
            // In place: the same bytes, and the same SHA-256 as written out.
            let mut dst = vec![0xAAu8; file.len()];
            let report = a.decode_to_slice(&mut dst, &opts).unwrap();
            assert!(dst == file);
            assert_eq!(report.sha256, a.info().sha256);
            let mut dst = vec![0u8; file.len()];
            a.decode_unhashed_to_slice(&mut dst, &opts).unwrap();
            assert!(dst == file);
            // A buffer of any other length is refused before anything is
            // decoded.
            for len in [0, file.len() - 1, file.len() + 1] {
                let mut dst = vec![0u8; len];
                assert!(matches!(
                    a.decode_to_slice(&mut dst, &opts),
                    Err(DecodeError::OutOfRange { .. })
                ));
                assert!(dst.iter().all(|&b| b == 0));
            }
        }

        /// Takes `.0` more bytes (and counts them in `.1`), then fails.
        struct Full(usize, usize);
        impl Write for Full {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                if b.len() > self.0 {
                    return Err(std::io::Error::other("disk full"));
                }
                self.0 -= b.len();
                self.1 += b.len();
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut full = Full(file.len() / 3, 0);
        assert!(a.decode_to(&mut full, &two).is_err());
        assert!(full.1 <= file.len() / 3);

        // A byte flipped in the body of a region in the middle.
        let seg = a.segments().iter().find(|s| s.regions.len() > 100).unwrap();
        let r = &seg.regions[seg.regions.len() / 2];
        let at = (r.body_offset + r.body_len / 2) as usize;
        let mut bad = archive.clone();
        bad[at] ^= 0x10;
        let b = Archive::new(bad.as_slice()).unwrap();
        // Without the file's SHA-256, the region's checksum still fails it.
        assert!(b.decode_unhashed_to(&mut Vec::new(), &two).is_err());
        let mut out = Vec::new();
        assert!(b.decode_to(&mut out, &two).is_err());
        assert!(
            out.len() < file.len() / 2 + 1024,
            "{} bytes written",
            out.len()
        );
        assert!(out == file[..out.len()]);
        for threads in [1, 2, 8] {
            let opts = DecompressOptions::default().threads(threads);
            let mut dst = vec![0u8; file.len()];
            assert!(matches!(
                b.decode_to_slice(&mut dst, &opts),
                Err(DecodeError::Checksum { .. })
            ));
        }
    }

    /// Bytes in memory are lent, out of range never (no short or wrapped
    /// slice); a file read whole is its first bytes, after positional reads
    /// too, and an error past its end.
    #[test]
    fn memory_lends_slices_and_files_read_their_prefix() {
        let data: Vec<u8> = (0..=255).collect();
        let mem: &[u8] = &data;
        assert_eq!(mem.slice_at(10, 20), Some(&data[10..30]));
        for (offset, len) in [(250, 7), (256, 1), (u64::MAX, 2), (1, usize::MAX)] {
            assert!(mem.slice_at(offset, len).is_none());
        }
        assert_eq!(mem.read_prefix(256).unwrap(), data);
        let dir = std::env::temp_dir().join(format!("brevis-read-prefix-{}", std::process::id()));
        std::fs::write(&dir, &data).unwrap();
        let file = std::fs::File::open(&dir).unwrap();
        assert!(file.slice_at(0, 1).is_none());
        let mut buf = [0u8; 20];
        file.read_exact_at(10, &mut buf).unwrap();
        assert_eq!(file.read_prefix(256).unwrap(), data);
        assert_eq!(file.read_prefix(100).unwrap(), &data[..100]);
        assert!(file.read_prefix(257).is_err());
        std::fs::remove_file(&dir).unwrap();
    }
}
