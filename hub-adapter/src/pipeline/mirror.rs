//! The mirror pipeline: source repo to compressed mirror.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use brevis_core::NoProgress;
use futures_util::StreamExt;

use crate::cache::write_atomic;
use crate::client::{DownloadStats, Expect, HubClient, RepoFile, UploadFile};
use crate::error::{HubError, Result};
use crate::hashing::{FileHashes, hash_file};
use crate::manifest::{Encoding, FileEntry, MANIFEST_NAME, Manifest, PRIOR_NAME, Source};
use crate::paths::{check_globs, check_repo_id, check_revision, selected};

use super::archive::{Coding, store};
use super::download::{fetch_manifest, run_size};
use super::options::MirrorOptions;
use super::plan::{check_plan, is_describer, is_weight, learning_set, plan_names};
use super::report::{MirrorReport, model_card};
use super::work::lock_work;
use super::{blocking, codec_err_d, codec_err_e, nothing_selected, safe_name};

fn same_content(remote: &RepoFile, h: &FileHashes) -> bool {
    remote.size == h.size
        && (remote.lfs_sha256.as_deref() == Some(h.sha256_hex().as_str())
            || h.git_oid.as_deref() == Some(remote.oid.as_str()))
}

/// Download `opts.src`, compress its weight files, prove each decodes to
/// the Hub's SHA-256, and upload the mirror with `dst` (which may be another
/// endpoint). Re-runs upload only what the destination lacks; a destination
/// that already matches is left alone.
pub async fn mirror(
    src: &HubClient,
    dst: &HubClient,
    opts: &MirrorOptions,
) -> Result<MirrorReport> {
    let plan = plan(src, dst, opts).await?;
    let work_name = format!("mirror-{}-{}", safe_name(&opts.src), plan.short());
    let _lock = lock_work(&opts.work_dir, &work_name, &opts.notes).await?;
    let work = Work::new(opts.work_dir.join(&work_name))?;
    let mut report = plan.report(opts);
    if let Some(current) = check_destination(dst, opts, &plan, &work.dir).await? {
        report.up_to_date = true;
        report.mirror_bytes = current.mirror_bytes;
        report.files = current.files;
        work.remove();
        return Ok(report);
    }
    if opts.dry_run {
        report.files = plan.entries_unbuilt();
        work.remove();
        return Ok(report);
    }
    // The destination must take what is made before anything is
    // downloaded: a missing token or permission fails in seconds.
    (opts.notes)(&format!(
        "mirroring {}@{} into {} at {}",
        opts.src,
        plan.short(),
        plan.dest,
        dst.endpoint()
    ));
    dst.ensure_writable(&plan.dest, opts.private).await?;
    let all: Vec<usize> = (0..plan.files.len()).collect();
    let (checked, downloaded) = download_sources(src, opts, &plan, &work, &all).await?;
    report.downloaded_bytes = downloaded;
    let hashes = source_hashes(opts, &plan, &work, &all, checked).await?;
    std::fs::create_dir_all(&work.out).map_err(|e| HubError::io(&work.out, e))?;
    let sidecars = sidecars(&plan.files, &work.src).await?;
    let prior = prior(opts, &plan.files, &work.src, &sidecars).await?;
    let coding = Coding {
        prior: prior.prior.clone(),
        sidecars,
    };
    let built = compress_and_prove(dst, opts, &plan, &work, &hashes, &coding).await?;
    report.files = built.files;
    let mut uploads = built.uploads;
    let (own, mirror_bytes) = own_files(src, opts, &plan, &report.files, &prior.json, &work)?;
    uploads.extend(own);
    report.mirror_bytes = mirror_bytes;
    upload(dst, opts, &plan, &[], &uploads, &built.sent, &mut report).await?;
    if !opts.keep_work {
        work.remove();
    }
    Ok(report)
}

/// A mirror run's plan: the source at its commit, the files selected, where
/// each goes in the mirror, and the destination repo.
pub(super) struct Plan {
    pub(super) commit: String,
    pub(super) files: Vec<RepoFile>,
    pub(super) names: Vec<(String, Encoding)>,
    pub(super) dest: String,
}

impl Plan {
    /// The commit as status lines name it.
    pub(super) fn short(&self) -> &str {
        &self.commit[..12]
    }

    /// The report of a run that has done nothing yet.
    pub(super) fn report(&self, opts: &MirrorOptions) -> MirrorReport {
        MirrorReport {
            source_repo: opts.src.clone(),
            source_commit: self.commit.clone(),
            dest_repo: self.dest.clone(),
            dest_commit: None,
            up_to_date: false,
            dry_run: opts.dry_run,
            files: Vec::new(),
            source_bytes: self.files.iter().map(|f| f.size).sum(),
            mirror_bytes: 0,
            downloaded_bytes: 0,
            uploaded_bytes: 0,
            lfs_objects_sent: 0,
            lfs_objects_present: 0,
        }
    }

    /// The manifest entries of a dry run (archive sizes 0: nothing built).
    fn entries_unbuilt(&self) -> Vec<FileEntry> {
        self.files
            .iter()
            .zip(&self.names)
            .map(|(f, (archive, enc))| FileEntry {
                path: f.path.clone(),
                size: f.size,
                sha256: f.lfs_sha256.clone().unwrap_or_default(),
                git_oid: f.oid.clone(),
                lfs: f.lfs_sha256.is_some(),
                encoding: *enc,
                archive: archive.clone(),
                archive_size: 0,
            })
            .collect()
    }
}

/// The work folder of a run: `src/` holds the downloads, `out/` what is
/// uploaded.
pub(super) struct Work {
    pub(super) dir: PathBuf,
    pub(super) src: PathBuf,
    pub(super) out: PathBuf,
}

impl Work {
    pub(super) fn new(dir: PathBuf) -> Result<Work> {
        std::fs::create_dir_all(&dir).map_err(|e| HubError::io(&dir, e))?;
        // Canonical: the paths files are described by (see `sidecars`).
        let dir = std::fs::canonicalize(&dir).map_err(|e| HubError::io(&dir, e))?;
        Ok(Work {
            src: dir.join("src"),
            out: dir.join("out"),
            dir,
        })
    }

    pub(super) fn remove(&self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Read the source at `opts.revision`, select its files, name the
/// destination and place every file in the mirror.
pub(super) async fn plan(src: &HubClient, dst: &HubClient, opts: &MirrorOptions) -> Result<Plan> {
    check_repo_id(&opts.src)?;
    check_revision(&opts.revision)?;
    check_globs(&opts.include, &opts.exclude)?;
    let info = src.repo_info(&opts.src, &opts.revision).await?;
    let commit = info.sha.clone();
    let mut files = src.list_files(&opts.src, &commit).await?;
    files.retain(|f| selected(&f.path, &opts.include, &opts.exclude));
    if files.is_empty() {
        return Err(nothing_selected(&opts.src, &opts.include, &opts.exclude));
    }
    let dest = destination(dst, opts).await?;
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
    Ok(Plan {
        commit,
        files,
        names,
        dest,
    })
}

/// `opts.dest`, else `<user or source namespace>/<name>-brevis`.
async fn destination(dst: &HubClient, opts: &MirrorOptions) -> Result<String> {
    if let Some(d) = &opts.dest {
        return Ok(d.clone());
    }
    let name = opts.src.split('/').nth(1).unwrap_or("model");
    let owner = match dst.whoami().await {
        Ok(n) if dst.has_token() => n,
        _ => opts.src.split('/').next().unwrap_or("local").to_string(),
    };
    Ok(format!("{owner}/{name}-brevis"))
}

/// A destination that already is this mirror.
pub(super) struct Current {
    pub(super) files: Vec<FileEntry>,
    pub(super) mirror_bytes: u64,
}

/// Whether the destination already is this mirror (`Some`), may be written
/// (`None`), or must not be replaced without `--force` (an error, and the
/// work folder is removed).
pub(super) async fn check_destination(
    dst: &HubClient,
    opts: &MirrorOptions,
    plan: &Plan,
    work: &Path,
) -> Result<Option<Current>> {
    let dest = &plan.dest;
    let di = match dst.repo_info(dest, "main").await {
        Ok(i) => i,
        Err(HubError::RepoNotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some(m) = fetch_manifest(dst, dest, &di.sha, work).await? else {
        // A repo that exists and is no Brevis mirror is someone's work:
        // never replace it without being told to.
        if !opts.force {
            refuse_non_mirror(dst, dest, &di.sha, work).await?;
        }
        return Ok(None);
    };
    // A mirror of another source (or of another branch of it) is someone
    // else's mirror: replacing it takes --force too. The same source and
    // branch at a newer commit is an update, not a replacement.
    if !opts.force && (m.source.repo != opts.src || m.source.revision != opts.revision) {
        let _ = std::fs::remove_dir_all(work);
        return Err(HubError::DestinationTaken {
            dest: dest.to_string(),
            reason: format!(
                "is a Brevis mirror of {} (revision {}, commit {}), not of {} (revision {}); \
                 mirroring into it would replace that mirror",
                m.source.repo,
                m.source.revision,
                &m.source.commit[..12],
                opts.src,
                opts.revision
            ),
        });
    }
    if !mirrors_plan(&m, plan) {
        return Ok(None);
    }
    let tree = dst.list_files(dest, &di.sha).await?;
    let have: HashMap<&str, u64> = tree.iter().map(|f| (f.path.as_str(), f.size)).collect();
    if !m
        .files
        .iter()
        .all(|e| have.get(e.archive.as_str()) == Some(&e.archive_size))
    {
        return Ok(None);
    }
    (opts.notes)(&format!(
        "{dest} already mirrors {}@{}: nothing to do",
        opts.src,
        plan.short()
    ));
    let own: u64 = tree
        .iter()
        .filter(|f| f.path == MANIFEST_NAME || f.path == PRIOR_NAME)
        .map(|f| f.size)
        .sum();
    Ok(Some(Current {
        mirror_bytes: m.stored_bytes() + own,
        files: m.files,
    }))
}

/// Whether the manifest `m` describes the planned files at the planned
/// commit, in the codec's current format.
fn mirrors_plan(m: &Manifest, plan: &Plan) -> bool {
    m.source.commit == plan.commit
        && m.format_version == brevis_core::FORMAT_VERSION
        && m.files.len() == plan.files.len()
        && m.files.iter().zip(&plan.files).all(|(e, f)| {
            e.path == f.path
                && e.size == f.size
                && e.git_oid == f.oid
                && f.lfs_sha256.as_ref().is_none_or(|s| *s == e.sha256)
        })
}

/// Refuse to mirror into `dest` (at `sha`, no Brevis mirror) when it holds
/// any file but `.gitattributes`, naming the first few.
async fn refuse_non_mirror(dst: &HubClient, dest: &str, sha: &str, work: &Path) -> Result<()> {
    /// Files named in the refusal; the rest are counted.
    const NAMED: usize = 10;
    let tree = dst.list_files(dest, sha).await?;
    let theirs: Vec<&str> = tree
        .iter()
        .map(|f| f.path.as_str())
        .filter(|p| *p != ".gitattributes")
        .collect();
    if theirs.is_empty() {
        return Ok(());
    }
    let _ = std::fs::remove_dir_all(work);
    let mut list = theirs
        .iter()
        .take(NAMED)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if theirs.len() > NAMED {
        list.push_str(&format!(" and {} more", theirs.len() - NAMED));
    }
    Err(HubError::DestinationTaken {
        dest: dest.to_string(),
        reason: format!(
            "exists and is not a Brevis mirror (no {MANIFEST_NAME}); mirroring into it \
             would replace or delete its {} file(s): {list}",
            theirs.len()
        ),
    })
}

/// Download the files `which` (indices into the plan's files) that are not
/// already complete in the work folder: the hashes each was checked with
/// against the Hub (by path), and the bytes downloaded.
pub(super) async fn download_sources(
    src: &HubClient,
    opts: &MirrorOptions,
    plan: &Plan,
    work: &Work,
    which: &[usize],
) -> Result<(HashMap<String, FileHashes>, u64)> {
    let mut todo = Vec::new();
    let mut checked: HashMap<String, FileHashes> = HashMap::new();
    for f in which.iter().map(|&i| &plan.files[i]) {
        let local = work.src.join(&f.path);
        let expect = Expect::of(f);
        match kept_source(opts, plan, f, &local, &expect).await? {
            Some(h) => {
                checked.insert(f.path.clone(), h);
            }
            None => todo.push((f.path.clone(), local, expect)),
        }
    }
    if todo.is_empty() {
        return Ok((checked, 0));
    }
    (opts.notes)(&format!(
        "downloading {} file(s) of {}@{}",
        todo.len(),
        opts.src,
        plan.short()
    ));
    let stats = download_all(src, opts, plan, &todo).await?;
    let downloaded = stats.iter().map(|s| s.bytes_on_wire).sum();
    for ((path, _, _), s) in todo.iter().zip(stats) {
        if let Some(h) = s.hashes {
            checked.insert(path.clone(), h);
        }
    }
    Ok((checked, downloaded))
}

/// Download `todo` from the source as one progress run, each file a file
/// of it: the outcome of each, in `todo`'s order (the first error, after
/// every download ended).
async fn download_all(
    src: &HubClient,
    opts: &MirrorOptions,
    plan: &Plan,
    todo: &[(String, PathBuf, Expect)],
) -> Result<Vec<DownloadStats>> {
    let run = &opts.progress;
    let (files, bytes) = run_size(todo, []);
    run.begin(&format!("download {}", opts.src), files, bytes);
    let mut results: Vec<(usize, Result<DownloadStats>)> = src
        .download_stream(&opts.src, &plan.commit, todo, run.clone())
        .collect()
        .await;
    run.end();
    results.sort_by_key(|r| r.0);
    results.into_iter().map(|r| r.1).collect()
}

/// The hashes of `f` left at `local` by an earlier run, if it is the Hub's
/// bytes. One that is not (a flipped byte, another version) is removed, to
/// be downloaded again rather than failing every later run.
async fn kept_source(
    opts: &MirrorOptions,
    plan: &Plan,
    f: &RepoFile,
    local: &Path,
    expect: &Expect,
) -> Result<Option<FileHashes>> {
    if !std::fs::metadata(local).is_ok_and(|m| m.is_file() && m.len() == f.size) {
        return Ok(None);
    }
    let (l2, git) = (local.to_path_buf(), expect.git_oid.is_some());
    let h = blocking(move || hash_file(&l2, git)).await?;
    if expect.matches(&h) {
        return Ok(Some(h));
    }
    (opts.notes)(&format!(
        "{} in the work folder is not {}@{}: downloading it again",
        local.display(),
        f.path,
        plan.short()
    ));
    let _ = std::fs::remove_file(local);
    Ok(None)
}

/// Hashes of the source files `which` (LFS sha256 from the Hub for LFS
/// files), in that order: those the download or the kept-file check took
/// (`checked`), else the file's. (What is compressed is proven against
/// these, by decoding.)
pub(super) async fn source_hashes(
    opts: &MirrorOptions,
    plan: &Plan,
    work: &Work,
    which: &[usize],
    mut checked: HashMap<String, FileHashes>,
) -> Result<Vec<FileHashes>> {
    let mut out = Vec::new();
    for f in which.iter().map(|&i| &plan.files[i]) {
        let h = match checked.remove(&f.path) {
            Some(h) => h,
            None => {
                let (local, git) = (work.src.join(&f.path), f.lfs_sha256.is_none());
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
            let _ = std::fs::remove_file(work.src.join(&f.path));
            return Err(HubError::Integrity {
                repo: opts.src.clone(),
                file: f.path.clone(),
                what,
                expected,
                actual,
            });
        }
        out.push(h);
    }
    Ok(out)
}

/// The files of `files` (held under `dir`) whose tensors another of them
/// describes (TF.js shards beside their model.json, an ONNX model's
/// external data). Only the describing files need be there (see
/// `is_describer`): the rest are known by their sizes. `dir` is under a
/// [`Work`] folder, whose path is canonical: a worker that has not fetched
/// a file names it as one that has.
pub(super) async fn sidecars(files: &[RepoFile], dir: &Path) -> Result<brevis_core::Sidecars> {
    let describers: Vec<PathBuf> = files
        .iter()
        .filter(|f| is_describer(f))
        .map(|f| dir.join(&f.path))
        .collect();
    let all: Vec<(PathBuf, u64)> = files.iter().map(|f| (dir.join(&f.path), f.size)).collect();
    blocking(move || Ok(brevis_core::Sidecars::find_with(&describers, &all))).await
}

/// The prior the shards are compressed with: its JSON as uploaded, and
/// the prior itself (none when there is no shard and none was given).
pub(super) struct PriorText {
    pub(super) json: Option<String>,
    pub(super) prior: Option<Arc<brevis_core::Prior>>,
}

impl PriorText {
    /// The prior of this JSON text (none: no prior).
    pub(super) fn parse(json: Option<String>) -> Result<PriorText> {
        let prior = match &json {
            Some(t) => Some(Arc::new(
                brevis_core::Prior::from_json(t).map_err(|e| codec_err_d(PRIOR_NAME, e))?,
            )),
            None => None,
        };
        Ok(PriorText { json, prior })
    }
}

/// `opts.prior`, else one learned from the source's shards among the
/// files of its `learning_set` (held under `dir`).
pub(super) async fn prior(
    opts: &MirrorOptions,
    files: &[RepoFile],
    dir: &Path,
    sidecars: &brevis_core::Sidecars,
) -> Result<PriorText> {
    // Every weight file whose bytes a format reader knows, whatever its
    // container, or whose tensors another file describes: one prior for
    // all of the repo's tensors.
    let shards: Vec<PathBuf> = learning_set(files)
        .into_iter()
        .map(|i| (is_weight(&files[i].path), dir.join(&files[i].path)))
        .filter(|(weight, p)| sidecars.get(p).is_some() || (*weight && sidecars.has_tensors(p)))
        .map(|(_, p)| p)
        .collect();
    let learn = brevis_core::LearnOptions::default().sidecars(sidecars.clone());
    let json = if let Some(p) = &opts.prior {
        let text = std::fs::read_to_string(p).map_err(|e| HubError::io(p, e))?;
        brevis_core::Prior::from_json(&text)
            .map_err(|e| codec_err_d(&p.display().to_string(), e))?;
        Some(text)
    } else if !shards.is_empty() {
        (opts.notes)(&format!("learning a prior from {} shard(s)", shards.len()));
        let prior = blocking(move || {
            let refs: Vec<&Path> = shards.iter().map(PathBuf::as_path).collect();
            brevis_core::Prior::learn(&refs, &learn).map_err(|e| codec_err_e("prior", e))
        })
        .await?;
        Some(prior.to_json())
    } else {
        None
    };
    PriorText::parse(json)
}

/// What [`compress_and_prove`] made: the manifest entries, the files to
/// upload, and the LFS objects already sent.
struct Built {
    files: Vec<FileEntry>,
    uploads: Vec<UploadFile>,
    sent: Sent,
}

/// Compress, then prove every archive decodes to the Hub's SHA-256. Each
/// proven archive's LFS object is sent while the next file is compressed
/// (the commit's LFS batch then finds it present), at most the client's
/// concurrency (`--jobs`) of them at once.
async fn compress_and_prove(
    dst: &HubClient,
    opts: &MirrorOptions,
    plan: &Plan,
    work: &Work,
    hashes: &[FileHashes],
    coding: &Coding,
) -> Result<Built> {
    let mut built = Built {
        files: Vec::new(),
        uploads: Vec::new(),
        sent: Sent::default(),
    };
    let mut sending: tokio::task::JoinSet<Result<Sent>> = tokio::task::JoinSet::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(dst.concurrency()));
    // The run: each archive compressed, then proven by decoding.
    let brv: Vec<u64> = (plan.files.iter().zip(&plan.names))
        .filter(|(_, (_, e))| *e == Encoding::Brv)
        .map(|(f, _)| f.size)
        .collect();
    let run = &opts.progress;
    run.begin(
        &format!("compress {}", opts.src),
        2 * brv.len(),
        2 * brv.iter().sum::<u64>(),
    );
    let compressed: Result<()> = async {
        for ((f, (archive, enc)), h) in plan.files.iter().zip(&plan.names).zip(hashes) {
            let (entry, upload) = store(opts, coding, work, f, archive, *enc, h).await?;
            let archived = entry.encoding == Encoding::Brv;
            built.files.push(entry);
            if archived {
                let slot = slots.clone();
                let (to, file) = (plan.dest.clone(), upload.clone());
                sending.spawn(send_object(dst.clone(), to, file, slot));
            }
            built.uploads.push(upload);
            // A send that failed fails the mirror now, not after the last file.
            while let Some(r) = sending.try_join_next() {
                built.sent.add(r)?;
            }
        }
        Ok(())
    }
    .await;
    run.end();
    // A failure lets the sends in flight finish (each bounded by the
    // client's timeouts and retries): a re-run finds what they sent.
    let mut failed = compressed.err();
    while let Some(r) = sending.join_next().await {
        if let Err(e) = built.sent.add(r) {
            failed.get_or_insert(e);
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(built),
    }
}

/// The mirror's own files (manifest, prior, model card), written into the
/// work folder, as uploads; and the mirror's size (stored files, manifest
/// and prior).
pub(super) fn own_files(
    src: &HubClient,
    opts: &MirrorOptions,
    plan: &Plan,
    files: &[FileEntry],
    prior: &Option<String>,
    work: &Work,
) -> Result<(Vec<UploadFile>, u64)> {
    let manifest = Manifest {
        manifest_version: 1,
        tool: concat!("brevis-hub ", env!("CARGO_PKG_VERSION")).into(),
        format_version: brevis_core::FORMAT_VERSION,
        source: Source {
            repo: opts.src.clone(),
            revision: opts.revision.clone(),
            commit: plan.commit.clone(),
        },
        files: files.to_vec(),
    };
    let mut extra: Vec<(String, Vec<u8>)> =
        vec![(MANIFEST_NAME.into(), manifest.to_json().into_bytes())];
    if let Some(p) = prior {
        extra.push((PRIOR_NAME.into(), p.clone().into_bytes()));
    }
    let mirror_bytes =
        manifest.stored_bytes() + extra.iter().map(|(_, d)| d.len() as u64).sum::<u64>();
    extra.push((
        "README.md".into(),
        model_card(&manifest, &plan.dest, src.endpoint(), mirror_bytes).into_bytes(),
    ));
    let mut uploads = Vec::new();
    for (name, data) in &extra {
        let p = work.out.join(name);
        write_atomic(&p, data)?;
        uploads.push(UploadFile {
            path_in_repo: name.clone(),
            local: p,
            hashes: crate::hashing::hash_bytes(data),
        });
    }
    Ok((uploads, mirror_bytes))
}

/// Upload what differs from the destination's `main` (and delete what the
/// mirror no longer holds) in one commit, and count it in `report` with
/// what was `sent` early. `objects` are files whose LFS objects the
/// destination holds already (a plan's workers sent them), committed by
/// their SHA-256 before `uploads`.
pub(super) async fn upload(
    dst: &HubClient,
    opts: &MirrorOptions,
    plan: &Plan,
    objects: &[UploadFile],
    uploads: &[UploadFile],
    sent: &Sent,
    report: &mut MirrorReport,
) -> Result<()> {
    let dest = &plan.dest;
    let tree = dst.list_files(dest, "main").await?;
    let remote: HashMap<&str, &RepoFile> = tree.iter().map(|f| (f.path.as_str(), f)).collect();
    let planned: std::collections::HashSet<&str> = (objects.iter().chain(uploads))
        .map(|u| u.path_in_repo.as_str())
        .collect();
    let deleted: Vec<String> = tree
        .iter()
        .filter(|f| !planned.contains(f.path.as_str()) && f.path != ".gitattributes")
        .map(|f| f.path.clone())
        .collect();
    let unchanged = objects.iter().chain(uploads).all(|u| {
        remote
            .get(u.path_in_repo.as_str())
            .is_some_and(|r| same_content(r, &u.hashes))
    });
    if unchanged && deleted.is_empty() {
        (opts.notes)(&format!(
            "{dest} already holds this mirror: nothing to upload"
        ));
        report.up_to_date = true;
        report.uploaded_bytes = sent.bytes;
        report.lfs_objects_sent = sent.objects;
        return Ok(());
    }
    (opts.notes)(&format!("uploading to {dest}"));
    let summary = format!("Brevis mirror of {}@{}", opts.src, plan.short());
    let st = dst
        .upload_files_with(
            dest,
            "main",
            &summary,
            objects,
            uploads,
            &deleted,
            opts.progress.clone(),
        )
        .await?;
    // The objects sent early are present to the commit's batch, for
    // every file that holds one (two files may hold the same bytes).
    let early = uploads
        .iter()
        .filter(|u| sent.oids.contains(&u.hashes.sha256_hex()))
        .count();
    report.uploaded_bytes = sent.bytes + st.lfs_bytes_sent + st.inline_bytes_sent;
    report.lfs_objects_sent = sent.objects + st.lfs_objects_sent;
    report.lfs_objects_present = st.lfs_objects_present.saturating_sub(early);
    report.dest_commit = st.commit.map(|c| c.oid);
    Ok(())
}

/// What `mirror` sent while it compressed.
#[derive(Default)]
pub(super) struct Sent {
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
