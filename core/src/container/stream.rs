//! [`Decoder`]: an archive read as the original file, through `std::io::Read`.

use std::io::{self, Read};
use std::path::Path;

use sha2::{Digest, Sha256};

use super::ArchiveInfo;
use super::read::{Archive, ReadAt};
use crate::error::DecodeError;

/// Reads the original file out of a `.brv` archive, one region at a time:
/// it holds one decoded region (a few MiB; up to 32 MiB for plain bytes) whatever the file's size, and
/// decodes on the calling thread.
///
/// The archive's recorded SHA-256 is checked before the last region is
/// handed out: a reader that reaches the end of the stream (`read` returns
/// `Ok(0)`) without an error has read the exact original bytes. Damage is
/// an [`io::Error`] of kind [`io::ErrorKind::InvalidData`] whose inner error
/// is the [`DecodeError`].
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let data = b"any bytes at all".repeat(1000);
/// let archive = brevis_core::compress(&data, &brevis_core::CompressOptions::default())?;
/// let mut back = Vec::new();
/// std::io::copy(&mut brevis_core::Decoder::new(&archive[..])?, &mut back)?;
/// assert_eq!(back, data);
/// # Ok(()) }
/// ```
pub struct Decoder<R: ReadAt> {
    archive: Archive<R>,
    /// The next region to decode: (segment, region).
    next: (usize, usize),
    buf: Vec<u8>,
    pos: usize,
    /// Regions not yet decoded.
    left: usize,
    sha: Sha256,
    failed: bool,
}

impl<R: ReadAt> Decoder<R> {
    /// Open an archive: its preamble and segment table are read and checked.
    pub fn new(src: R) -> Result<Self, DecodeError> {
        Decoder::from_archive(Archive::new(src)?)
    }

    /// Read an opened archive from its start.
    pub fn from_archive(archive: Archive<R>) -> Result<Self, DecodeError> {
        let left = archive.segments().iter().map(|s| s.regions.len()).sum();
        let mut decoder = Decoder {
            archive,
            next: (0, 0),
            buf: Vec::new(),
            pos: 0,
            left,
            sha: Sha256::new(),
            failed: false,
        };
        if left == 0 {
            decoder.check_sha()?;
        }
        Ok(decoder)
    }

    /// The archive's summary: the original length and SHA-256.
    pub fn info(&self) -> ArchiveInfo {
        self.archive.info()
    }

    /// Decode the next region into `buf`; false at the end. The SHA-256 is
    /// checked when the last region is decoded, before it is handed out
    /// (or at the end, for a file with no regions).
    fn refill(&mut self) -> Result<bool, DecodeError> {
        if self.left == 0 {
            return Ok(false);
        }
        let segments = self.archive.segments();
        while self.next.1 >= segments[self.next.0].regions.len() {
            self.next = (self.next.0 + 1, 0);
        }
        let (s, r) = self.next;
        // Into the last region's buffer: no allocation a region.
        self.buf.resize(segments[s].region_bytes(r) as usize, 0);
        self.pos = 0;
        if let Err(e) = self.archive.decode_region_to(s, r, true, &mut self.buf) {
            self.buf.clear();
            return Err(e);
        }
        self.sha.update(&self.buf);
        self.next = (s, r + 1);
        self.left -= 1;
        if self.left == 0 {
            self.check_sha().inspect_err(|_| self.buf.clear())?;
        }
        Ok(true)
    }

    fn check_sha(&mut self) -> Result<(), DecodeError> {
        let expected = self.archive.info().sha256;
        let actual: [u8; 32] = std::mem::take(&mut self.sha).finalize().into();
        if actual != expected {
            return Err(DecodeError::ShaMismatch {
                expected: hex::encode(expected),
                actual: hex::encode(actual),
            });
        }
        Ok(())
    }
}

impl Decoder<std::fs::File> {
    /// Open the archive at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, DecodeError> {
        Decoder::from_archive(super::open(path.as_ref())?)
    }
}

impl<R: ReadAt> Read for Decoder<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.failed {
            return Err(io::Error::other("the archive failed to decode earlier"));
        }
        while self.pos == self.buf.len() {
            match self.refill() {
                Ok(true) => {}
                Ok(false) => return Ok(0),
                Err(e) => {
                    self.failed = true;
                    return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                }
            }
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}
