//! Restoring one file from its stored form, and checking its identity.

use std::path::Path;
use std::sync::Arc;

use brevis_core::ProgressSink;

use crate::error::{HubError, Result};
use crate::hashing::FileHashes;
use crate::manifest::{Encoding, FileEntry};

use super::codec_err_d;

/// Check restored bytes against the manifest: size, SHA-256, and for a file
/// the source does not keep in LFS its git blob id (the name the HF cache
/// gives its blob, and its ETag): a manifest whose `git_oid` is not that of
/// the bytes would file them under another file's name.
pub(super) fn check_identity(repo: &str, f: &FileEntry, h: &FileHashes) -> Result<()> {
    let bad = |what: &'static str, expected: String, actual: String| HubError::Integrity {
        repo: repo.into(),
        file: f.path.clone(),
        what,
        expected,
        actual,
    };
    if h.size != f.size {
        return Err(bad(
            "size",
            format!("{} bytes", f.size),
            format!("{} bytes", h.size),
        ));
    }
    let sha = h.sha256_hex();
    if !sha.eq_ignore_ascii_case(&f.sha256) {
        return Err(bad("SHA-256", f.sha256.clone(), sha));
    }
    if !f.lfs {
        let got = h.git_oid.as_deref().unwrap_or_default();
        if !got.eq_ignore_ascii_case(&f.git_oid) {
            return Err(bad("git blob id", f.git_oid.clone(), got.to_string()));
        }
    }
    Ok(())
}

/// The hashes of bytes that went through a [`crate::hashing::TeeHasher`]:
/// `decoded`, the digest of the decoder that wrote them (it hashes what it
/// writes), or else the tee's own (which then was asked for one).
pub(super) fn teed_hashes(t: crate::hashing::Teed, decoded: Option<[u8; 32]>) -> FileHashes {
    FileHashes {
        size: t.len,
        sha256: decoded
            .or(t.sha256)
            .expect("bytes not decoded are hashed by the tee"),
        git_oid: t.git_oid,
    }
}

/// Decode (or copy) `stored` into an unnamed temp file beside `dst`, hashing
/// as it is written; publish it as `dst` only when its identity matches the
/// manifest. A failure or a kill leaves nothing behind (`O_TMPFILE`).
pub(super) fn restore(
    stored: &Path,
    dst: &Path,
    f: &FileEntry,
    threads: usize,
    progress: Arc<dyn ProgressSink>,
    repo: &str,
) -> Result<()> {
    use std::io::Write as _;
    let tmp = brevis_core::TempFile::beside(dst).map_err(|e| HubError::io(dst, e))?;
    let file = tmp.file().map_err(|e| HubError::io(dst, e))?;
    // The decoder hashes what it writes: the tee adds the SHA-256 only for
    // a copied file, and the git blob id only for a regular one.
    let brv = f.encoding == Encoding::Brv;
    let mut w = crate::hashing::TeeHasher::new(std::io::BufWriter::new(file), f.size, !brv, !f.lfs);
    let decoded = match f.encoding {
        Encoding::Brv => Some(
            brevis_core::decompress_to(
                stored,
                &mut w,
                &brevis_core::DecompressOptions::default()
                    .threads(threads)
                    .progress(progress),
            )
            .map_err(|e| match e {
                brevis_core::DecodeError::Write(e) => HubError::io(dst, e),
                e => codec_err_d(&f.path, e),
            })?
            .sha256,
        ),
        Encoding::Identity => {
            let mut src = std::fs::File::open(stored).map_err(|e| HubError::io(stored, e))?;
            std::io::copy(&mut src, &mut w).map_err(|e| HubError::io(dst, e))?;
            None
        }
    };
    w.flush().map_err(|e| HubError::io(dst, e))?;
    let (buf, t) = w.finish();
    drop(
        buf.into_inner()
            .map_err(|e| HubError::io(dst, e.into_error()))?,
    );
    check_identity(repo, f, &teed_hashes(t, decoded))?;
    tmp.persist(dst, true).map_err(|e| HubError::io(dst, e))?;
    Ok(())
}
