//! [`Encoder`]: compression behind `std::io::Write`.

use std::io::{self, Write};

use super::{CompressOptions, compress};
use crate::error::EncodeError;

/// Takes the original bytes through `std::io::Write` and writes the archive
/// to `W` when [`Encoder::finish`] is called.
///
/// The input is held in memory until then: an archive's programs are chosen
/// per tensor from a prior learned over the whole file, and its table is
/// written after the data it describes, so nothing can be written before
/// the input ends. For files on disk, [`crate::compress_file`] reads them
/// without a copy in memory and writes through a temp file.
///
/// ```
/// use std::io::Write;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut enc = brevis_core::Encoder::new(Vec::new(), brevis_core::CompressOptions::default());
/// enc.write_all(&b"any bytes at all".repeat(1000))?;
/// let archive = enc.finish()?;
/// assert_eq!(brevis_core::decompress(&archive)?, b"any bytes at all".repeat(1000));
/// # Ok(()) }
/// ```
pub struct Encoder<W: Write> {
    out: W,
    input: Vec<u8>,
    opts: CompressOptions,
}

impl<W: Write> Encoder<W> {
    /// An encoder that will write the archive to `out`.
    pub fn new(out: W, opts: CompressOptions) -> Self {
        Encoder {
            out,
            input: Vec::new(),
            opts,
        }
    }

    /// Compress what was written (the archive is proven to decode to it
    /// unless the options turn the check off), write the archive to the
    /// writer, and return the writer.
    pub fn finish(mut self) -> Result<W, EncodeError> {
        let archive = compress(&self.input, &self.opts)?;
        self.out
            .write_all(&archive)
            .and_then(|()| self.out.flush())
            .map_err(|e| EncodeError::io("<writer>", e))?;
        Ok(self.out)
    }
}

impl<W: Write> Write for Encoder<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.input.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
