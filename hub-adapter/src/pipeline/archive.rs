//! Building a mirror's stored files: each weight file (and each large
//! file) compressed and proven, by decoding, to be the source's bytes; a
//! file whose archive is no smaller (and is no safetensors shard) stored
//! as it is.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use brevis_core::FileProgress;
use brevis_core::ProgressSink;

use crate::client::{RepoFile, UploadFile};
use crate::error::{HubError, Result};
use crate::hashing::{FileHashes, hash_file};
use crate::manifest::{Encoding, FileEntry};

use super::mirror::Work;
use super::options::MirrorOptions;
use super::plan::is_safetensors;
use super::{blocking, codec_err_d, codec_err_e};

/// What every file of a mirror is compressed with.
pub(super) struct Coding {
    /// The repo's prior.
    pub prior: Option<Arc<brevis_core::Prior>>,
    /// The files whose tensors other files of the repo describe (TF.js
    /// shards, ONNX external data), by local path.
    pub sidecars: brevis_core::Sidecars,
}

/// The stored form of the source file `f` (hashes `h`): its archive (built
/// and proven) or the file itself, as a manifest entry and an upload.
pub(super) async fn store(
    opts: &MirrorOptions,
    coding: &Coding,
    work: &Work,
    f: &RepoFile,
    archive: &str,
    enc: Encoding,
    h: &FileHashes,
) -> Result<(FileEntry, UploadFile)> {
    let sha_hex = h.sha256_hex();
    let (mut enc, mut archive) = (enc, archive);
    let stored = match enc {
        Encoding::Identity => work.src.join(&f.path),
        Encoding::Brv => {
            let out = build_archive(opts, coding, work, f, archive, h).await?;
            let len = std::fs::metadata(&out)
                .map_err(|e| HubError::io(&out, e))?
                .len();
            if len < f.size || is_safetensors(&f.path) {
                out
            } else {
                // No smaller: the file itself, under its own name (which
                // no other file of the plan can have, see `plan_names`).
                (opts.notes)(&format!(
                    "{}: the archive is no smaller, stored as it is",
                    f.path
                ));
                let _ = std::fs::remove_file(&out);
                (enc, archive) = (Encoding::Identity, f.path.as_str());
                work.src.join(&f.path)
            }
        }
    };
    // A file of 10 MiB or more goes by LFS on the Hub (and on `serve`):
    // its SHA-256 is its identity there, and its blob id (a second pass
    // of SHA-1) is never asked for.
    let s2 = stored.clone();
    let regular = std::fs::metadata(&stored)
        .map_err(|e| HubError::io(&stored, e))?
        .len()
        < crate::server::store::LFS_SIZE_THRESHOLD;
    let sh = blocking(move || hash_file(&s2, regular)).await?;
    // A file uploaded as it is must still be the bytes checked against
    // the Hub (an archive was proven by decoding): a file changed in the
    // work folder since (or two source paths that one case-insensitive
    // file system holds as one) is refused, not published under the
    // source's SHA-256.
    if enc == Encoding::Identity && (sh.size != h.size || sh.sha256 != h.sha256) {
        let _ = std::fs::remove_file(&stored);
        return Err(HubError::Integrity {
            repo: opts.src.clone(),
            file: f.path.clone(),
            what: "SHA-256",
            expected: sha_hex,
            actual: sh.sha256_hex(),
        });
    }
    let entry = FileEntry {
        path: f.path.clone(),
        size: f.size,
        sha256: sha_hex,
        git_oid: f.oid.clone(),
        lfs: f.lfs_sha256.is_some(),
        encoding: enc,
        archive: archive.to_owned(),
        archive_size: sh.size,
    };
    let upload = UploadFile {
        path_in_repo: archive.to_owned(),
        local: stored,
        hashes: sh,
    };
    Ok((entry, upload))
}

/// Build the archive of `f` in the work folder, or reuse one an earlier run
/// left there, and prove it decodes to the source's bytes (`h`). An archive
/// left behind that does not prove itself is rebuilt; one just built that
/// does not fails the mirror.
async fn build_archive(
    opts: &MirrorOptions,
    coding: &Coding,
    work: &Work,
    f: &RepoFile,
    archive: &str,
    h: &FileHashes,
) -> Result<PathBuf> {
    let local = work.src.join(&f.path);
    let out = work.out.join(archive);
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).map_err(|e| HubError::io(parent, e))?;
    }
    let sha_hex = h.sha256_hex();
    let mut reuse = brevis_core::read_info(&out)
        .ok()
        .is_some_and(|i| i.sha256 == h.sha256 && i.original_len == h.size);
    loop {
        if !reuse {
            (opts.notes)(&format!("compressing {}", f.path));
            compress(opts, coding, &local, &out, (&f.path, h.sha256)).await?;
        } else {
            // Its compression is done: an earlier run did it.
            opts.progress.file_advance(&f.path, f.size);
        }
        let proving = FileProgress::arc(&opts.progress, archive);
        let failure = match prove(&out, &f.path, opts.threads, proving).await {
            Ok((digest, len)) if hex::encode(digest) == sha_hex && len == f.size => {
                return Ok(out);
            }
            Ok((digest, len)) => HubError::Integrity {
                repo: opts.src.clone(),
                file: archive.to_owned(),
                what: if len != f.size { "size" } else { "SHA-256" },
                expected: sha_hex.clone(),
                actual: hex::encode(digest),
            },
            Err(e) => e,
        };
        let _ = std::fs::remove_file(&out);
        if !reuse {
            return Err(failure);
        }
        (opts.notes)(&format!(
            "{} in the work folder does not decode to {} ({failure}): rebuilding it",
            out.display(),
            f.path
        ));
        reuse = false;
    }
}

/// Compress `local` (the source file `path`, whose SHA-256 is `sha256`:
/// checked as it was downloaded, so not hashed again) into `out`,
/// unverified: the caller proves it against the Hub's SHA-256, which a
/// source that changed since fails.
async fn compress(
    opts: &MirrorOptions,
    coding: &Coding,
    local: &Path,
    out: &Path,
    (path, sha256): (&str, [u8; 32]),
) -> Result<()> {
    let mut co = brevis_core::CompressOptions::default()
        .verify(false)
        .source_sha256(Some(sha256))
        .threads(opts.threads)
        .level(opts.level)
        .prior(coding.prior.clone())
        .sidecar(coding.sidecars.get(local).cloned())
        .progress(FileProgress::arc(&opts.progress, path));
    if let Some(b) = opts.budget {
        co = co.budget(b);
    }
    let (l, o, p) = (local.to_path_buf(), out.to_path_buf(), path.to_owned());
    blocking(move || {
        brevis_core::compress_file(&l, &o, true, &co).map_err(|e| codec_err_e(&p, e))?;
        Ok(())
    })
    .await
}

/// The SHA-256 and length of what the archive `out` decodes to. The decoder
/// hashes what it writes (and checks it against the archive's own
/// SHA-256): its digest is the proof.
async fn prove(
    out: &Path,
    path: &str,
    threads: usize,
    progress: Arc<dyn ProgressSink>,
) -> Result<([u8; 32], u64)> {
    let (o, p) = (out.to_path_buf(), path.to_owned());
    blocking(move || {
        let r = brevis_core::decompress_to(
            &o,
            &mut std::io::sink(),
            &brevis_core::DecompressOptions::default()
                .threads(threads)
                .progress(progress),
        )
        .map_err(|e| codec_err_d(&p, e))?;
        Ok((r.sha256, r.original_len))
    })
    .await
}
