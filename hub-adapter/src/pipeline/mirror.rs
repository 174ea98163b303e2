//! The mirror pipeline: source repo to compressed mirror.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use brevis_core::NoProgress;

use crate::cache::write_atomic;
use crate::client::{Expect, HubClient, RepoFile, UploadFile};
use crate::error::{HubError, Result};
use crate::hashing::{FileHashes, hash_file};
use crate::manifest::{Encoding, FileEntry, MANIFEST_NAME, Manifest, PRIOR_NAME, Source};
use crate::paths::{check_globs, check_repo_id, check_revision, selected};

use super::download::fetch_manifest;
use super::options::MirrorOptions;
use super::plan::{check_plan, is_safetensors, plan_names};
use super::report::{MirrorReport, model_card};
use super::work::lock_work;
use super::{blocking, codec_err_d, codec_err_e, nothing_selected, safe_name};

fn same_content(remote: &RepoFile, h: &FileHashes) -> bool {
    remote.size == h.size
        && (remote.lfs_sha256.as_deref() == Some(h.sha256_hex().as_str())
            || h.git_oid.as_deref() == Some(remote.oid.as_str()))
}

/// Download `opts.src`, compress its safetensors shards, prove each decodes to
/// the Hub's SHA-256, and upload the mirror with `dst` (which may be another
/// endpoint). Re-runs upload only what the destination lacks; a destination
/// that already matches is left alone.
pub async fn mirror(
    src: &HubClient,
    dst: &HubClient,
    opts: &MirrorOptions,
) -> Result<MirrorReport> {
    check_repo_id(&opts.src)?;
    check_revision(&opts.revision)?;
    check_globs(&opts.include, &opts.exclude)?;
    let note = &opts.notes;
    let info = src.repo_info(&opts.src, &opts.revision).await?;
    let commit = info.sha.clone();
    let mut files = src.list_files(&opts.src, &commit).await?;
    files.retain(|f| selected(&f.path, &opts.include, &opts.exclude));
    if files.is_empty() {
        return Err(nothing_selected(&opts.src, &opts.include, &opts.exclude));
    }
    let name = opts.src.split('/').nth(1).unwrap_or("model");
    let dest = match &opts.dest {
        Some(d) => d.clone(),
        None => {
            let owner = match dst.whoami().await {
                Ok(n) if dst.has_token() => n,
                _ => opts.src.split('/').next().unwrap_or("local").to_string(),
            };
            format!("{owner}/{name}-brevis")
        }
    };
    check_repo_id(&dest)?;
    if dest == opts.src && src.endpoint() == dst.endpoint() {
        return Err(HubError::invalid(
            "destination",
            &dest,
            "is the source repo",
        ));
    }
    let names = plan_names(&files);
    check_plan(&opts.src, &files, &names)?;
    let work_name = format!("mirror-{}-{}", safe_name(&opts.src), &commit[..12]);
    let _lock = lock_work(&opts.work_dir, &work_name, note).await?;
    let work = opts.work_dir.join(&work_name);
    std::fs::create_dir_all(&work).map_err(|e| HubError::io(&work, e))?;
    let source_bytes: u64 = files.iter().map(|f| f.size).sum();
    let mut report = MirrorReport {
        source_repo: opts.src.clone(),
        source_commit: commit.clone(),
        dest_repo: dest.clone(),
        dest_commit: None,
        up_to_date: false,
        dry_run: opts.dry_run,
        files: Vec::new(),
        source_bytes,
        mirror_bytes: 0,
        downloaded_bytes: 0,
        uploaded_bytes: 0,
        lfs_objects_sent: 0,
        lfs_objects_present: 0,
    };

    // Is the destination already this mirror?
    let existing = match dst.repo_info(&dest, "main").await {
        Ok(i) => Some(i),
        Err(HubError::RepoNotFound { .. }) => None,
        Err(e) => return Err(e),
    };
    let existing_manifest = match &existing {
        Some(di) => fetch_manifest(dst, &dest, &di.sha, &work).await?,
        None => None,
    };
    // A repo that exists and is no Brevis mirror is someone's work: never
    // replace it without being told to.
    if let Some(di) = &existing
        && existing_manifest.is_none()
        && !opts.force
    {
        let tree = dst.list_files(&dest, &di.sha).await?;
        let theirs: Vec<&str> = tree
            .iter()
            .map(|f| f.path.as_str())
            .filter(|p| *p != ".gitattributes")
            .collect();
        if !theirs.is_empty() {
            let _ = std::fs::remove_dir_all(&work);
            let mut list = theirs
                .iter()
                .take(10)
                .copied()
                .collect::<Vec<_>>()
                .join(", ");
            if theirs.len() > 10 {
                list.push_str(&format!(" and {} more", theirs.len() - 10));
            }
            return Err(HubError::invalid(
                "destination",
                &dest,
                format!(
                    "exists and is not a Brevis mirror (no {MANIFEST_NAME}); mirroring into it \
                     would replace or delete its {} file(s): {list}. Pass --force to replace it, \
                     or choose another --to",
                    theirs.len()
                ),
            ));
        }
    }
    // A mirror of another source (or of another branch of it) is someone
    // else's mirror: replacing it takes --force too. The same source and
    // branch at a newer commit is an update, not a replacement.
    if let Some(m) = &existing_manifest
        && !opts.force
        && (m.source.repo != opts.src || m.source.revision != opts.revision)
    {
        let _ = std::fs::remove_dir_all(&work);
        return Err(HubError::invalid(
            "destination",
            &dest,
            format!(
                "is a Brevis mirror of {} (revision {}, commit {}), not of {} (revision {}); \
                 mirroring into it would replace that mirror. Pass --force to replace it, or \
                 choose another --to",
                m.source.repo,
                m.source.revision,
                &m.source.commit[..12],
                opts.src,
                opts.revision
            ),
        ));
    }
    if let Some(di) = &existing
        && let Some(m) = existing_manifest
        && m.source.commit == commit
        && m.format_version == brevis_core::FORMAT_VERSION
        && m.files.len() == files.len()
        && m.files.iter().zip(&files).all(|(e, f)| {
            e.path == f.path
                && e.size == f.size
                && e.git_oid == f.oid
                && f.lfs_sha256.as_ref().is_none_or(|s| *s == e.sha256)
        })
    {
        let tree = dst.list_files(&dest, &di.sha).await?;
        let have: HashMap<&str, u64> = tree.iter().map(|f| (f.path.as_str(), f.size)).collect();
        if m.files
            .iter()
            .all(|e| have.get(e.archive.as_str()) == Some(&e.archive_size))
        {
            note(&format!(
                "{dest} already mirrors {}@{}: nothing to do",
                opts.src,
                &commit[..12]
            ));
            report.up_to_date = true;
            report.mirror_bytes = m.stored_bytes()
                + tree
                    .iter()
                    .filter(|f| f.path == MANIFEST_NAME || f.path == PRIOR_NAME)
                    .map(|f| f.size)
                    .sum::<u64>();
            report.files = m.files;
            let _ = std::fs::remove_dir_all(&work);
            return Ok(report);
        }
    }

    if opts.dry_run {
        for (f, (archive, enc)) in files.iter().zip(&names) {
            report.files.push(FileEntry {
                path: f.path.clone(),
                size: f.size,
                sha256: f.lfs_sha256.clone().unwrap_or_default(),
                git_oid: f.oid.clone(),
                lfs: f.lfs_sha256.is_some(),
                encoding: *enc,
                archive: archive.clone(),
                archive_size: 0,
            });
        }
        let _ = std::fs::remove_dir_all(&work);
        return Ok(report);
    }

    // The destination must take what is made before anything is
    // downloaded: a missing token or permission fails in seconds.
    note(&format!(
        "mirroring {}@{} into {dest} at {}",
        opts.src,
        &commit[..12],
        dst.endpoint()
    ));
    dst.ensure_writable(&dest, opts.private).await?;

    // Download what is not already complete in the work folder.
    let src_dir = work.join("src");
    let mut todo = Vec::new();
    // The hashes each source file was checked with against the Hub, by path.
    let mut checked: HashMap<String, FileHashes> = HashMap::new();
    for f in &files {
        let local = src_dir.join(&f.path);
        // A file left by an earlier run is kept only if it is the Hub's
        // bytes; one that is not (a flipped byte, another version) is
        // downloaded again rather than failing every later run.
        let expect = Expect::of(f);
        let mut done = std::fs::metadata(&local).is_ok_and(|m| m.is_file() && m.len() == f.size);
        if done {
            let (l2, git) = (local.clone(), expect.git_oid.is_some());
            let h = blocking(move || hash_file(&l2, git)).await?;
            done = expect.matches(&h);
            if done {
                checked.insert(f.path.clone(), h);
            } else {
                note(&format!(
                    "{} in the work folder is not {}@{}: downloading it again",
                    local.display(),
                    f.path,
                    &commit[..12]
                ));
                let _ = std::fs::remove_file(&local);
            }
        }
        if !done {
            todo.push((f.path.clone(), local, expect));
        }
    }
    if !todo.is_empty() {
        note(&format!(
            "downloading {} file(s) of {}@{}",
            todo.len(),
            opts.src,
            &commit[..12]
        ));
        let stats = src
            .download_many(&opts.src, &commit, &todo, opts.progress.clone())
            .await?;
        report.downloaded_bytes = stats.iter().map(|s| s.bytes_on_wire).sum();
        for ((path, _, _), s) in todo.iter().zip(stats) {
            if let Some(h) = s.hashes {
                checked.insert(path.clone(), h);
            }
        }
    }

    // Hashes of every source file (LFS sha256 from the Hub for LFS files):
    // those the download or the kept-file check just took, else the file's.
    // (What is compressed is proven below against these, by decoding.)
    let mut src_hashes = Vec::new();
    for f in &files {
        let h = match checked.remove(&f.path) {
            Some(h) => h,
            None => {
                let (local, git) = (src_dir.join(&f.path), f.lfs_sha256.is_none());
                blocking(move || hash_file(&local, git)).await?
            }
        };
        let want = f.lfs_sha256.clone().unwrap_or_else(|| h.sha256_hex());
        let blob = h.git_oid.as_deref().unwrap_or("not computed");
        let differs = if h.sha256_hex() != want {
            Some(("SHA-256", want, h.sha256_hex()))
        } else if f.lfs_sha256.is_none() && blob != f.oid {
            Some(("git blob id", f.oid.clone(), blob.to_string()))
        } else {
            None
        };
        if let Some((what, expected, actual)) = differs {
            let _ = std::fs::remove_file(src_dir.join(&f.path));
            return Err(HubError::Integrity {
                repo: opts.src.clone(),
                file: f.path.clone(),
                what,
                expected,
                actual,
            });
        }
        src_hashes.push(h);
    }

    // The prior.
    let shards: Vec<PathBuf> = files
        .iter()
        .filter(|f| is_safetensors(&f.path))
        .map(|f| src_dir.join(&f.path))
        .collect();
    let out_dir = work.join("out");
    std::fs::create_dir_all(&out_dir).map_err(|e| HubError::io(&out_dir, e))?;
    let prior_json = if let Some(p) = &opts.prior {
        let text = std::fs::read_to_string(p).map_err(|e| HubError::io(p, e))?;
        brevis_core::Prior::from_json(&text)
            .map_err(|e| codec_err_d(&p.display().to_string(), e))?;
        Some(text)
    } else if !shards.is_empty() {
        note(&format!("learning a prior from {} shard(s)", shards.len()));
        let shards2 = shards.clone();
        let prior = blocking(move || {
            let refs: Vec<&Path> = shards2.iter().map(PathBuf::as_path).collect();
            brevis_core::Prior::learn(&refs, &brevis_core::LearnOptions::default())
                .map_err(|e| codec_err_e("prior", e))
        })
        .await?;
        Some(prior.to_json())
    } else {
        None
    };
    let prior = match &prior_json {
        Some(t) => Some(Arc::new(
            brevis_core::Prior::from_json(t).map_err(|e| codec_err_d(PRIOR_NAME, e))?,
        )),
        None => None,
    };

    // Compress, then prove every archive decodes to the Hub's SHA-256.
    // Each proven archive's LFS object is sent while the next file is
    // compressed (the commit's LFS batch then finds it present).
    let mut uploads: Vec<UploadFile> = Vec::new();
    // At most the client's concurrency (`--jobs`) of them at once.
    let mut sending: tokio::task::JoinSet<Result<Sent>> = tokio::task::JoinSet::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(dst.concurrency()));
    let mut sent_early = Sent::default();
    let compressed: Result<()> = async {
        for ((f, (archive, enc)), h) in files.iter().zip(&names).zip(&src_hashes) {
            let local = src_dir.join(&f.path);
            let sha_hex = h.sha256_hex();
            let stored = match enc {
                Encoding::Identity => local.clone(),
                Encoding::Brv => {
                    let out = out_dir.join(archive);
                    if let Some(parent) = out.parent() {
                        std::fs::create_dir_all(parent).map_err(|e| HubError::io(parent, e))?;
                    }
                    // An archive left by an earlier run is reused only if it
                    // proves itself below; one that does not is rebuilt.
                    let mut reuse = brevis_core::read_info(&out)
                        .ok()
                        .is_some_and(|i| i.sha256 == h.sha256 && i.original_len == h.size);
                    loop {
                        if !reuse {
                            note(&format!("compressing {}", f.path));
                            // Proven below, against the Hub's SHA-256.
                            let mut co = brevis_core::CompressOptions::default()
                                .verify(false)
                                .threads(opts.threads)
                                .prior(prior.clone())
                                .progress(opts.progress.clone());
                            if let Some(b) = opts.budget {
                                co = co.budget(b);
                            }
                            let (l, o, p) = (local.clone(), out.clone(), f.path.clone());
                            blocking(move || {
                                brevis_core::compress_file(&l, &o, true, &co)
                                    .map_err(|e| codec_err_e(&p, e))
                            })
                            .await?;
                        }
                        let (o, p, threads) = (out.clone(), f.path.clone(), opts.threads);
                        // The decoder hashes what it writes (and checks it
                        // against the archive's own SHA-256): its digest is
                        // the proof.
                        let proof = blocking(move || {
                            let r = brevis_core::decompress_to(
                                &o,
                                &mut std::io::sink(),
                                &brevis_core::DecompressOptions::default().threads(threads),
                            )
                            .map_err(|e| codec_err_d(&p, e))?;
                            Ok((r.sha256, r.original_len))
                        })
                        .await;
                        let failure = match proof {
                            Ok((digest, len)) if hex::encode(digest) == sha_hex && len == f.size => {
                                break;
                            }
                            Ok((digest, len)) => HubError::Integrity {
                                repo: opts.src.clone(),
                                file: archive.clone(),
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
                        note(&format!(
                            "{} in the work folder does not decode to {} ({failure}): rebuilding it",
                            out.display(),
                            f.path
                        ));
                        reuse = false;
                    }
                    out
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
            // the Hub above (an archive was proven by decoding): a file changed
            // in the work folder since (or two source paths that one
            // case-insensitive file system holds as one) is refused, not
            // published under the source's SHA-256.
            if *enc == Encoding::Identity && (sh.size != h.size || sh.sha256 != h.sha256) {
                let _ = std::fs::remove_file(&stored);
                return Err(HubError::Integrity {
                    repo: opts.src.clone(),
                    file: f.path.clone(),
                    what: "SHA-256",
                    expected: sha_hex,
                    actual: sh.sha256_hex(),
                });
            }
            report.files.push(FileEntry {
                path: f.path.clone(),
                size: f.size,
                sha256: sha_hex,
                git_oid: f.oid.clone(),
                lfs: f.lfs_sha256.is_some(),
                encoding: *enc,
                archive: archive.clone(),
                archive_size: sh.size,
            });
            uploads.push(UploadFile {
                path_in_repo: archive.clone(),
                local: stored,
                hashes: sh,
            });
            if *enc == Encoding::Brv {
                let file = uploads.last().expect("just pushed").clone();
                let slot = slots.clone();
                sending.spawn(send_object(dst.clone(), dest.clone(), file, slot));
            }
            // A send that failed fails the mirror now, not after the last file.
            while let Some(r) = sending.try_join_next() {
                sent_early.add(r)?;
            }
        }
        Ok(())
    }
    .await;
    // A failure lets the sends in flight finish (each bounded by the
    // client's timeouts and retries): a re-run finds what they sent.
    let mut failed = compressed.err();
    while let Some(r) = sending.join_next().await {
        if let Err(e) = sent_early.add(r) {
            failed.get_or_insert(e);
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }

    let manifest = Manifest {
        manifest_version: 1,
        tool: concat!("brevis-hub ", env!("CARGO_PKG_VERSION")).into(),
        format_version: brevis_core::FORMAT_VERSION,
        source: Source {
            repo: opts.src.clone(),
            revision: opts.revision.clone(),
            commit: commit.clone(),
        },
        files: report.files.clone(),
    };
    let mut extra: Vec<(String, Vec<u8>)> =
        vec![(MANIFEST_NAME.into(), manifest.to_json().into_bytes())];
    if let Some(p) = &prior_json {
        extra.push((PRIOR_NAME.into(), p.clone().into_bytes()));
    }
    report.mirror_bytes =
        manifest.stored_bytes() + extra.iter().map(|(_, d)| d.len() as u64).sum::<u64>();
    extra.push((
        "README.md".into(),
        model_card(&manifest, &dest, src.endpoint(), report.mirror_bytes).into_bytes(),
    ));
    for (name, data) in &extra {
        let p = out_dir.join(name);
        write_atomic(&p, data)?;
        uploads.push(UploadFile {
            path_in_repo: name.clone(),
            local: p,
            hashes: crate::hashing::hash_bytes(data),
        });
    }

    // Upload what differs.
    let tree = dst.list_files(&dest, "main").await?;
    let remote: HashMap<&str, &RepoFile> = tree.iter().map(|f| (f.path.as_str(), f)).collect();
    let planned: std::collections::HashSet<&str> =
        uploads.iter().map(|u| u.path_in_repo.as_str()).collect();
    let deleted: Vec<String> = tree
        .iter()
        .filter(|f| !planned.contains(f.path.as_str()) && f.path != ".gitattributes")
        .map(|f| f.path.clone())
        .collect();
    let unchanged = uploads.iter().all(|u| {
        remote
            .get(u.path_in_repo.as_str())
            .is_some_and(|r| same_content(r, &u.hashes))
    });
    if unchanged && deleted.is_empty() {
        note(&format!(
            "{dest} already holds this mirror: nothing to upload"
        ));
        report.up_to_date = true;
        report.uploaded_bytes = sent_early.bytes;
        report.lfs_objects_sent = sent_early.objects;
    } else {
        note(&format!("uploading to {dest}"));
        let summary = format!("Brevis mirror of {}@{}", opts.src, &commit[..12]);
        let st = dst
            .upload_files(
                &dest,
                "main",
                &summary,
                &uploads,
                &deleted,
                opts.progress.clone(),
            )
            .await?;
        // The objects sent early are present to the commit's batch, for
        // every file that holds one (two files may hold the same bytes).
        let early = uploads
            .iter()
            .filter(|u| sent_early.oids.contains(&u.hashes.sha256_hex()))
            .count();
        report.uploaded_bytes = sent_early.bytes + st.lfs_bytes_sent + st.inline_bytes_sent;
        report.lfs_objects_sent = sent_early.objects + st.lfs_objects_sent;
        report.lfs_objects_present = st.lfs_objects_present.saturating_sub(early);
        report.dest_commit = st.commit.map(|c| c.oid);
    }
    if !opts.keep_work {
        let _ = std::fs::remove_dir_all(&work);
    }
    Ok(report)
}

/// What `mirror` sent while it compressed.
#[derive(Default)]
struct Sent {
    bytes: u64,
    objects: usize,
    /// SHA-256 of each object sent.
    oids: std::collections::HashSet<String>,
}

impl Sent {
    /// Add what a finished [`send_object`] sent.
    fn add(&mut self, r: std::result::Result<Result<Sent>, tokio::task::JoinError>) -> Result<()> {
        let s = r.map_err(|e| HubError::io("<upload>", std::io::Error::other(e.to_string())))??;
        self.bytes += s.bytes;
        self.objects += s.objects;
        self.oids.extend(s.oids);
        Ok(())
    }
}

/// Send `file`'s LFS object to `repo` now, holding one of `slots`, if the
/// server says the file goes by LFS and lacks it. No progress bar (the
/// compression of the next file has it).
async fn send_object(
    dst: HubClient,
    repo: String,
    file: UploadFile,
    slots: Arc<tokio::sync::Semaphore>,
) -> Result<Sent> {
    let _slot = slots
        .acquire_owned()
        .await
        .map_err(|e| HubError::io("<upload>", std::io::Error::other(e.to_string())))?;
    let modes = dst
        .preupload(&repo, "main", std::slice::from_ref(&file))
        .await?;
    let mut sent = Sent::default();
    if modes.first().is_some_and(|m| m.0) {
        let (bytes, objects, _) = dst
            .upload_lfs(&repo, "main", &[&file], Arc::new(NoProgress))
            .await?;
        sent.bytes = bytes;
        sent.objects = objects;
        if objects > 0 {
            sent.oids.insert(file.hashes.sha256_hex());
        }
    }
    Ok(sent)
}
