//! The self-check: a fresh archive decoded, as a reader would, and checked
//! against its source.

use std::io::Write;

use super::CompressReport;
use crate::container::{Archive, DecompressOptions, ReadAt};
use crate::error::EncodeError;

/// Decode a fresh archive and check it against the report of its source.
/// `given`: whether the report's SHA-256 was given, not taken from the
/// source (a mismatch is then the caller's digest, not a bug).
pub(super) fn self_check<R: ReadAt>(
    archive: Archive<R>,
    report: &CompressReport,
    threads: usize,
    given: bool,
) -> Result<(), EncodeError> {
    let bug = |what: String| {
        EncodeError::SelfCheck(format!(
            "the archive does not decode to its source ({what}); this is a bug in brevis, please report it"
        ))
    };
    let mut out = LenSink(0);
    let r = archive
        .decode_to(&mut out, &DecompressOptions::default().threads(threads))
        .map_err(|e| match e {
            crate::DecodeError::ShaMismatch { expected, actual } if given => {
                EncodeError::SourceSha256 {
                    given: expected,
                    actual,
                }
            }
            e => bug(e.to_string()),
        })?;
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
