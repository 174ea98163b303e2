//! The mirror, pull and verify pipelines.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use brevis_core::{NoProgress, ProgressSink};
use futures_util::StreamExt;
use serde::Serialize;

use crate::cache::{RepoCache, write_atomic};
use crate::client::{Expect, HubClient, RepoFile, UploadFile};
use crate::error::{HubError, Result};
use crate::hashing::{FileHashes, hash_file};
use crate::manifest::{
    Encoding, FileEntry, MANIFEST_NAME, MAX_MANIFEST_LEN, Manifest, PRIOR_NAME, SOURCE_PREFIX,
    Source,
};
use crate::paths::{
    check_globs, check_repo_id, check_repo_path, check_revision, is_commit_id, selected,
};

/// A callback for status lines (the CLI prints them on stderr).
pub type Notes = Arc<dyn Fn(&str) + Send + Sync>;

fn quiet_notes() -> Notes {
    Arc::new(|_: &str| {})
}

/// What to mirror and how.
#[derive(Clone)]
#[non_exhaustive]
pub struct MirrorOptions {
    /// Source repo id.
    pub src: String,
    /// Destination repo id; default `<user or source namespace>/<name>-brevis`.
    pub dest: Option<String>,
    /// Source revision.
    pub revision: String,
    /// A prior to use instead of learning one.
    pub prior: Option<PathBuf>,
    /// Create the destination private (`Some(true)`) or public
    /// (`Some(false)`); `None` keeps its namespace's default.
    pub private: Option<bool>,
    /// Only plan: list what would be done.
    pub dry_run: bool,
    /// Only source files matching one of these globs (all when empty).
    pub include: Vec<String>,
    /// Leave out source files matching these globs.
    pub exclude: Vec<String>,
    /// Folder for downloads and archives (kept across interrupted runs).
    pub work_dir: PathBuf,
    /// Keep the work folder after success.
    pub keep_work: bool,
    /// Replace the destination even when it exists and is not a Brevis
    /// mirror, or is the mirror of another source repo or revision (its
    /// files are deleted).
    pub force: bool,
    /// Codec threads (0 = all cores).
    pub threads: usize,
    /// Codec search budget (None = the codec's default).
    pub budget: Option<u32>,
    /// Progress events.
    pub progress: Arc<dyn ProgressSink>,
    /// Status lines.
    pub notes: Notes,
}

impl MirrorOptions {
    /// Mirror `src` at `main`, working in `work_dir`.
    pub fn new(src: impl Into<String>, work_dir: impl Into<PathBuf>) -> Self {
        MirrorOptions {
            src: src.into(),
            dest: None,
            revision: "main".into(),
            prior: None,
            private: None,
            dry_run: false,
            include: Vec::new(),
            exclude: Vec::new(),
            work_dir: work_dir.into(),
            keep_work: false,
            force: false,
            threads: 0,
            budget: None,
            progress: Arc::new(NoProgress),
            notes: quiet_notes(),
        }
    }
    /// Set the destination repo.
    pub fn dest(mut self, d: impl Into<String>) -> Self {
        self.dest = Some(d.into());
        self
    }
    /// Set the source revision.
    pub fn revision(mut self, r: impl Into<String>) -> Self {
        self.revision = r.into();
        self
    }
    /// Set the progress sink.
    pub fn progress(mut self, p: Arc<dyn ProgressSink>) -> Self {
        self.progress = p;
        self
    }
    /// Set the status-line callback.
    pub fn notes(mut self, n: Notes) -> Self {
        self.notes = n;
        self
    }
}

/// What a mirror run did.
#[derive(Debug, Clone, Serialize)]
pub struct MirrorReport {
    /// Source repo.
    pub source_repo: String,
    /// Source commit.
    pub source_commit: String,
    /// Destination repo.
    pub dest_repo: String,
    /// Commit made on the destination (None when nothing changed or dry run).
    pub dest_commit: Option<String>,
    /// Nothing had to change.
    pub up_to_date: bool,
    /// Only planned.
    pub dry_run: bool,
    /// The files (archive sizes are 0 in a dry run).
    pub files: Vec<FileEntry>,
    /// Sum of source file sizes.
    pub source_bytes: u64,
    /// Sum of stored sizes plus manifest and prior.
    pub mirror_bytes: u64,
    /// Bytes downloaded from the source.
    pub downloaded_bytes: u64,
    /// Bytes uploaded (LFS objects and inline files).
    pub uploaded_bytes: u64,
    /// LFS objects uploaded.
    pub lfs_objects_sent: usize,
    /// LFS objects the destination already had.
    pub lfs_objects_present: usize,
}

impl MirrorReport {
    /// mirror bytes / source bytes.
    pub fn ratio(&self) -> f64 {
        if self.source_bytes == 0 {
            1.0
        } else {
            self.mirror_bytes as f64 / self.source_bytes as f64
        }
    }
}

fn safe_name(repo: &str) -> String {
    repo.replace('/', "--")
}

fn codec_err_e(file: &str, e: brevis_core::EncodeError) -> HubError {
    HubError::Encode {
        file: file.into(),
        source: Box::new(e),
    }
}

fn codec_err_d(file: &str, e: brevis_core::DecodeError) -> HubError {
    HubError::Decode {
        file: file.into(),
        source: Box::new(e),
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| HubError::io("<worker>", std::io::Error::other(e.to_string())))?
}

/// A held `DIR/NAME.lock`. Dropping it removes the file while still holding
/// the lock, then releases it: no lock file is left behind, and a run that
/// opened the file before it was removed sees, once it holds the lock, that
/// the path no longer names its file and takes the lock again
/// ([`lock_work`]).
struct WorkLock {
    file: std::fs::File,
    path: PathBuf,
}

impl Drop for WorkLock {
    fn drop(&mut self) {
        // Only where the path is known to name the file held (and only on
        // Unix, where an open file can be removed); `self.file` is closed,
        // which releases the lock, after this.
        if cfg!(unix) && names_same_file(&self.file, &self.path).unwrap_or(false) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Whether `path` still names the open file `f` (false when it is gone or
/// names another file: the holder removed it as it finished).
fn names_same_file(f: &std::fs::File, path: &Path) -> Result<bool> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let held = f.metadata().map_err(|e| HubError::io(path, e))?;
        match std::fs::metadata(path) {
            Ok(now) => Ok(now.dev() == held.dev() && now.ino() == held.ino()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(HubError::io(path, e)),
        }
    }
    #[cfg(not(unix))]
    {
        // Lock files are not removed there: the path always names it.
        let _ = (f, path);
        Ok(true)
    }
}

/// Hold `DIR/NAME.lock` exclusively (released and removed when the guard is
/// dropped): two runs sharing a work folder (two pulls of one mirror, say)
/// take turns instead of writing the same download files at once.
async fn lock_work(dir: &Path, name: &str, note: &Notes) -> Result<WorkLock> {
    std::fs::create_dir_all(dir).map_err(|e| HubError::io(dir, e))?;
    let p = dir.join(format!("{name}.lock"));
    let mut told = false;
    loop {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&p)
            .map_err(|e| HubError::io(&p, e))?;
        let f = match f.try_lock() {
            Ok(()) => f,
            Err(std::fs::TryLockError::WouldBlock) => {
                if !told {
                    note(&format!(
                        "waiting for another brevis-hub working in {}",
                        p.display()
                    ));
                    told = true;
                }
                let p2 = p.clone();
                blocking(move || {
                    f.lock().map_err(|e| HubError::io(&p2, e))?;
                    Ok(f)
                })
                .await?
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(HubError::io(&p, e)),
        };
        // The run we waited for removed the file it held: this lock is on a
        // file no one else will ever open. Take the lock on the path again.
        if names_same_file(&f, &p)? {
            return Ok(WorkLock { file: f, path: p });
        }
    }
}

fn is_safetensors(p: &str) -> bool {
    p.to_ascii_lowercase().ends_with(".safetensors")
}

/// Mirror names a mirror uses for its own files.
fn reserved(p: &str) -> bool {
    matches!(
        p,
        "README.md" | ".gitattributes" | MANIFEST_NAME | PRIOR_NAME
    ) || p.starts_with(SOURCE_PREFIX)
}

/// Where each source file goes in the mirror.
fn plan_names(files: &[RepoFile]) -> Vec<(String, Encoding)> {
    let taken: std::collections::HashSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    files
        .iter()
        .map(|f| {
            if is_safetensors(&f.path) {
                let a = format!("{}.brv", f.path);
                if taken.contains(a.as_str()) {
                    (format!("{SOURCE_PREFIX}{a}"), Encoding::Brv)
                } else {
                    (a, Encoding::Brv)
                }
            } else if reserved(&f.path) || f.path.ends_with(".brv") {
                (format!("{SOURCE_PREFIX}{}", f.path), Encoding::Identity)
            } else {
                (f.path.clone(), Encoding::Identity)
            }
        })
        .collect()
}

/// Refuse a plan where two source files would be stored under one mirror
/// path, or one's path would be a folder holding another's (the mirror
/// could not be committed or pulled).
fn check_plan(repo: &str, files: &[RepoFile], names: &[(String, Encoding)]) -> Result<()> {
    let mut by_name: HashMap<&str, &str> = HashMap::new();
    for extra in ["README.md", ".gitattributes", MANIFEST_NAME, PRIOR_NAME] {
        by_name.insert(extra, "(the mirror's own file)");
    }
    for (f, (archive, _)) in files.iter().zip(names) {
        if let Some(other) = by_name.insert(archive.as_str(), f.path.as_str()) {
            return Err(HubError::invalid(
                "mirror path",
                archive,
                format!(
                    "both {other} and {} of {repo} would be stored there; \
                     rename one in the source or leave one out with --exclude",
                    f.path
                ),
            ));
        }
    }
    for (f, (archive, _)) in files.iter().zip(names) {
        let mut prefix = archive.as_str();
        while let Some((parent, _)) = prefix.rsplit_once('/') {
            if let Some(other) = by_name.get(parent) {
                return Err(HubError::invalid(
                    "mirror path",
                    archive,
                    format!(
                        "{} of {repo} would be stored below {parent}, which holds {other}",
                        f.path
                    ),
                ));
            }
            prefix = parent;
        }
    }
    Ok(())
}

/// The error for `--include` / `--exclude` filters that leave no file of
/// `repo`, naming the patterns.
fn nothing_selected(repo: &str, include: &[String], exclude: &[String]) -> HubError {
    let list = |flag: &str, globs: &[String]| {
        globs
            .iter()
            .map(|g| format!("{flag} {g:?}"))
            .collect::<Vec<_>>()
    };
    let mut filters = list("--include", include);
    filters.extend(list("--exclude", exclude));
    let reason = if filters.is_empty() {
        "no file selected".to_string()
    } else {
        format!("no file matches {}", filters.join(" "))
    };
    HubError::invalid("selection", repo, reason)
}

async fn fetch_manifest(
    client: &HubClient,
    repo: &str,
    commit: &str,
    work: &Path,
) -> Result<Option<Manifest>> {
    let dst = work.join(format!("manifest-{commit}.json"));
    match client
        .download_file(
            repo,
            commit,
            MANIFEST_NAME,
            &dst,
            &Expect::default(),
            &NoProgress,
        )
        .await
    {
        Ok(_) => {}
        Err(HubError::EntryNotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = std::fs::metadata(&dst)
        .map_err(|e| HubError::io(&dst, e))?
        .len();
    if len > MAX_MANIFEST_LEN {
        return Err(HubError::Manifest {
            repo: repo.into(),
            reason: "manifest too large".into(),
        });
    }
    let text = std::fs::read(&dst).map_err(|e| HubError::io(&dst, e))?;
    let _ = std::fs::remove_file(&dst);
    Manifest::from_json(&text, repo).map(Some)
}

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

/// A byte count for people: `826170` -> `806.81 KiB`.
pub fn human(n: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", units[i])
    }
}

fn model_card(m: &Manifest, dest: &str, endpoint: &str, mirror_bytes: u64) -> String {
    let src = &m.source;
    let total = m.source_bytes();
    let mut s = String::new();
    s.push_str("---\ntags:\n- brevis\n- compressed\n---\n\n");
    s.push_str(&format!("# {} (Brevis mirror)\n\n", src.repo));
    s.push_str(&format!(
        "A lossless, compressed mirror of [{}]({}/{}) at commit `{}` (revision `{}`).\n\
         Every safetensors shard is stored as a `.brv` archive that decodes to the exact \
         original bytes (checked against the source's LFS SHA-256 before upload); every \
         other file is stored unchanged. `{MANIFEST_NAME}` lists every file and its hash.\n\n",
        src.repo, endpoint, src.repo, src.commit, src.revision
    ));
    s.push_str("| file | original | stored | ratio |\n|---|---:|---:|---:|\n");
    for f in &m.files {
        let r = if f.size == 0 {
            1.0
        } else {
            f.archive_size as f64 / f.size as f64
        };
        s.push_str(&format!(
            "| `{}` | {} | {} | {r:.4} |\n",
            f.path,
            human(f.size),
            human(f.archive_size)
        ));
    }
    let ratio = if total == 0 {
        1.0
    } else {
        mirror_bytes as f64 / total as f64
    };
    s.push_str(&format!(
        "\n**Total:** {} original, {} mirrored (ratio {ratio:.4}).\n\n",
        human(total),
        human(mirror_bytes)
    ));
    s.push_str(&format!(
        "## Use\n\n```sh\nbrevis-hub pull {dest}\n```\n\nThis restores the original files into the Hugging Face cache as `{}` at commit `{}`, \
         so `huggingface_hub` and `transformers` load them with `HF_HUB_OFFLINE=1`. \
         `--local-dir DIR` writes a plain folder instead.\n",
        src.repo, src.commit
    ));
    s
}

/// What to pull and where.
#[derive(Clone)]
#[non_exhaustive]
pub struct PullOptions {
    /// Mirror repo id.
    pub repo: String,
    /// Mirror revision.
    pub revision: String,
    /// HF cache folder (`.../hub`).
    pub cache_dir: PathBuf,
    /// Write a plain folder here instead of the cache.
    pub local_dir: Option<PathBuf>,
    /// Only source files matching one of these globs (all when empty).
    pub include: Vec<String>,
    /// Leave out source files matching these globs.
    pub exclude: Vec<String>,
    /// Folder for downloads in flight.
    pub work_dir: PathBuf,
    /// Codec threads (0 = all cores).
    pub threads: usize,
    /// Progress events.
    pub progress: Arc<dyn ProgressSink>,
    /// Status lines.
    pub notes: Notes,
    /// The endpoint holding the source repo the mirror's manifest is
    /// checked against, and whose revision refs follow (default: the
    /// mirror's endpoint).
    pub source: Option<HubClient>,
    /// File the originals in the HF cache under the source's name even when
    /// the source cannot be read at `source` (private, gone, on another Hub,
    /// or `brevis-hub serve`'s view decoded from the mirror itself), on the
    /// mirror's word: off by default, such a pull is refused
    /// ([`HubError::SourceUnchecked`]) unless it writes a plain folder
    /// (`local_dir`), where nothing is filed under the source's name.
    /// Trusted, an existing ref is still never moved; a missing one is set
    /// where the endpoint says the source's revision is at the commit.
    pub trust_mirror: bool,
}

impl PullOptions {
    /// Pull `repo` at `main` into `cache_dir`.
    pub fn new(
        repo: impl Into<String>,
        cache_dir: impl Into<PathBuf>,
        work_dir: impl Into<PathBuf>,
    ) -> Self {
        PullOptions {
            repo: repo.into(),
            revision: "main".into(),
            cache_dir: cache_dir.into(),
            local_dir: None,
            include: Vec::new(),
            exclude: Vec::new(),
            work_dir: work_dir.into(),
            threads: 0,
            progress: Arc::new(NoProgress),
            notes: quiet_notes(),
            source: None,
            trust_mirror: false,
        }
    }
}

/// What a pull did.
#[derive(Debug, Clone, Serialize)]
pub struct PullReport {
    /// Mirror repo.
    pub mirror_repo: String,
    /// Mirror commit.
    pub mirror_commit: String,
    /// Source repo the files were restored as.
    pub source_repo: String,
    /// Source commit.
    pub source_commit: String,
    /// Files restored (or already in place and verified).
    pub files: usize,
    /// Files already in place.
    pub reused: usize,
    /// Bytes of originals in place.
    pub original_bytes: u64,
    /// Bytes downloaded.
    pub downloaded_bytes: u64,
    /// The snapshot folder (or the local folder).
    pub path: PathBuf,
    /// Whether the source repo at its commit was read on the endpoint and
    /// every restored file's size and hash checked against it (else only
    /// against the mirror's manifest: the source is private, gated, gone,
    /// or on another Hub).
    pub source_checked: bool,
}

/// Download a mirror, decode it, verify every file against the manifest, and
/// place the originals in the HF cache under the source repo and commit (or
/// in a plain folder). Nothing half-written is ever visible.
pub async fn pull(client: &HubClient, opts: &PullOptions) -> Result<PullReport> {
    check_repo_id(&opts.repo)?;
    check_revision(&opts.revision)?;
    check_globs(&opts.include, &opts.exclude)?;
    let note = &opts.notes;
    let info = client.repo_info(&opts.repo, &opts.revision).await?;
    let work_name = format!("pull-{}-{}", safe_name(&opts.repo), &info.sha[..12]);
    let _lock = lock_work(&opts.work_dir, &work_name, note).await?;
    let work = opts.work_dir.join(&work_name);
    std::fs::create_dir_all(&work).map_err(|e| HubError::io(&work, e))?;
    // A refusal leaves no work folder behind (a failed download keeps it,
    // to be resumed).
    let refuse = |e: HubError| -> Result<PullReport> {
        let _ = std::fs::remove_dir_all(&work);
        Err(e)
    };
    let m = fetch_manifest(client, &opts.repo, &info.sha, &work)
        .await?
        .ok_or_else(|| HubError::Manifest {
            repo: opts.repo.clone(),
            reason: format!("no {MANIFEST_NAME}: not a Brevis mirror"),
        })?;
    let tree = client.list_files(&opts.repo, &info.sha).await?;
    let remote: HashMap<&str, &RepoFile> = tree.iter().map(|f| (f.path.as_str(), f)).collect();
    let chosen: Vec<&FileEntry> = m
        .files
        .iter()
        .filter(|f| selected(&f.path, &opts.include, &opts.exclude))
        .collect();
    // Filters that match nothing are a mistake: restoring nothing and still
    // writing the ref would look like a successful pull.
    if chosen.is_empty() {
        return refuse(nothing_selected(&opts.repo, &opts.include, &opts.exclude));
    }
    let cache = RepoCache::new(&opts.cache_dir, &m.source.repo)?;
    let final_path = |f: &FileEntry| -> Result<PathBuf> {
        match &opts.local_dir {
            Some(d) => Ok(d.join(check_repo_path(&f.path)?)),
            None => cache.blob_path(f.etag()),
        }
    };
    // The manifest against the source itself, before anything is written.
    let source = opts.source.as_ref().unwrap_or(client);
    let checked = match check_source(source, &m, &chosen, &opts.repo).await {
        Ok(c) => c,
        Err(e) => return refuse(e),
    };
    if let Some(reason) = checked.refusal(&m) {
        return refuse(HubError::Manifest {
            repo: opts.repo.clone(),
            reason: format!("{reason}, and nothing was written"),
        });
    }
    let source_checked = match &checked {
        SourceCheck::Unread(why) if opts.local_dir.is_none() && !opts.trust_mirror => {
            return refuse(HubError::SourceUnchecked {
                mirror: opts.repo.clone(),
                endpoint: source.endpoint().to_owned(),
                source_repo: m.source.repo.clone(),
                commit: m.source.commit[..12].to_owned(),
                why: why.clone(),
            });
        }
        SourceCheck::Unread(why) => {
            note(&format!(
                "{}@{} cannot be read here ({why}): {}'s files are checked against its \
                 manifest only",
                m.source.repo,
                &m.source.commit[..12],
                opts.repo
            ));
            false
        }
        _ => true,
    };
    let mut report = PullReport {
        mirror_repo: opts.repo.clone(),
        mirror_commit: info.sha.clone(),
        source_repo: m.source.repo.clone(),
        source_commit: m.source.commit.clone(),
        files: chosen.len(),
        reused: 0,
        original_bytes: chosen.iter().map(|f| f.size).sum(),
        downloaded_bytes: 0,
        path: match &opts.local_dir {
            Some(d) => d.clone(),
            None => cache.root().join("snapshots").join(&m.source.commit),
        },
        source_checked,
    };

    // A commit's files never change: a snapshot already in the cache that
    // names another blob for a file, or holds it as a regular file (a copy,
    // as `huggingface_hub` makes where there are no symlinks) with other
    // bytes, means this mirror (or the cache) is wrong, and its bytes must
    // not replace the cached ones. A regular file with the manifest's bytes
    // is already in place: it is kept as it is.
    let mut kept = std::collections::HashSet::new();
    if opts.local_dir.is_none() {
        for f in &chosen {
            let p = cache.snapshot_path(&m.source.commit, &f.path)?;
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            let clash = if meta.file_type().is_symlink() {
                std::fs::read_link(&p)
                    .ok()
                    .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
                    .filter(|blob| !blob.eq_ignore_ascii_case(f.etag()))
                    .map(|blob| (format!("as blob {blob}"), format!("as blob {}", f.etag())))
            } else if !meta.is_file() {
                None
            } else if meta.len() != f.size {
                Some((
                    format!("as a regular file of {} bytes", meta.len()),
                    format!("with {} bytes", f.size),
                ))
            } else {
                let p2 = p.clone();
                let sha = blocking(move || hash_file(&p2, false)).await?.sha256_hex();
                if sha.eq_ignore_ascii_case(&f.sha256) {
                    kept.insert(f.path.as_str());
                    None
                } else {
                    Some((
                        format!("as a regular file with SHA-256 {sha}"),
                        format!("with SHA-256 {}", f.sha256),
                    ))
                }
            };
            if let Some((held, restored)) = clash {
                return refuse(HubError::Manifest {
                    repo: opts.repo.clone(),
                    reason: format!(
                        "the HF cache already holds {}@{} with {} {held} ({}), but this mirror \
                         restores it {restored}; a commit's files never change, so one of them is \
                         wrong (remove {} to replace the cached snapshot)",
                        m.source.repo,
                        m.source.commit,
                        f.path,
                        p.display(),
                        cache
                            .root()
                            .join("snapshots")
                            .join(&m.source.commit)
                            .display()
                    ),
                });
            }
        }
    }

    // What is already in place (and verified)?
    let mut need = Vec::new();
    for f in &chosen {
        if kept.contains(f.path.as_str()) {
            report.reused += 1;
            continue;
        }
        let p = final_path(f)?;
        let ok = if std::fs::metadata(&p).is_ok_and(|x| x.is_file() && x.len() == f.size) {
            let (p2, git) = (p.clone(), !f.lfs);
            let h = blocking(move || hash_file(&p2, git)).await?;
            check_identity(&opts.repo, f, &h).is_ok()
        } else {
            false
        };
        if ok {
            report.reused += 1;
        } else {
            need.push(*f);
        }
    }
    let mut dl = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for f in &need {
        if !seen.insert(f.archive.as_str()) {
            continue;
        }
        let r = remote
            .get(f.archive.as_str())
            .ok_or_else(|| HubError::EntryNotFound {
                repo: opts.repo.clone(),
                file: f.archive.clone(),
            })?;
        if r.size != f.archive_size {
            return Err(HubError::Manifest {
                repo: opts.repo.clone(),
                reason: format!(
                    "{} is {} bytes, the manifest says {}",
                    f.archive, r.size, f.archive_size
                ),
            });
        }
        let expect = Expect::of(r);
        let local = work.join("dl").join(&f.archive);
        // A complete download left by an interrupted run is kept if it checks.
        if std::fs::metadata(&local).is_ok_and(|m| m.is_file() && m.len() == r.size) {
            let (l2, git) = (local.clone(), expect.git_oid.is_some());
            let h = blocking(move || hash_file(&l2, git)).await?;
            if expect.matches(&h) {
                continue;
            }
            let _ = std::fs::remove_file(&local);
        }
        dl.push((f.archive.clone(), local, expect));
    }
    if !dl.is_empty() {
        note(&format!(
            "downloading {} file(s) of {}",
            dl.len(),
            opts.repo
        ));
    }
    // Each stored file's restores start as soon as it is here (those left
    // complete by an earlier run at once), one at a time, while the others
    // download: a sharded mirror decodes shard k while k + 1 arrives. The
    // download has the progress bar while it runs.
    let (files_of, ready) = by_stored_file(&need, &dl);
    let restore_files = |archive: &str, progress: Arc<dyn ProgressSink>| {
        let jobs = files_of[archive]
            .iter()
            .map(|&i| {
                let f = need[i];
                let stored = work.join("dl").join(&f.archive);
                Ok((stored, final_path(f)?, (*f).clone()))
            })
            .collect::<Result<Vec<_>>>();
        let (threads, repo) = (opts.threads, opts.repo.clone());
        tokio::task::spawn_blocking(move || -> Result<()> {
            for (stored, dst, f) in jobs? {
                if let Some(parent) = dst.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| HubError::io(parent, e))?;
                }
                clean_stale_temps(&dst);
                restore(&stored, &dst, &f, threads, progress.clone(), &repo)?;
            }
            Ok(())
        })
    };
    let downloaded = &mut report.downloaded_bytes;
    download_and_run(
        client,
        &opts.repo,
        &info.sha,
        &dl,
        ready,
        &opts.progress,
        |_, r| {
            *downloaded += r?.bytes_on_wire;
            Ok(())
        },
        restore_files,
    )
    .await?;
    if opts.local_dir.is_none() {
        for f in chosen.iter().filter(|f| !kept.contains(f.path.as_str())) {
            clean_stale_temps(&cache.snapshot_path(&m.source.commit, &f.path)?);
            cache.link(&m.source.commit, &f.path, f.etag())?;
        }
        // A ref names what the source's revision is now: it is set (or
        // moved) only where the endpoint says the source's revision is at
        // this commit, and one the cache has is moved to another commit
        // only by a source that was checked. An older mirror, or a source
        // that cannot be read here, leaves it alone: the restored commit
        // loads by its id. (Refs follow branches, as `huggingface_hub`
        // writes them: a pull of the mirror at a commit id moves no ref.)
        if !is_commit_id(&opts.revision) {
            let now = source
                .repo_info(&m.source.repo, &m.source.revision)
                .await
                .map(|i| i.sha);
            let held = cache.get_ref(&m.source.revision)?;
            let moves = held.as_deref().is_some_and(|h| h != m.source.commit);
            match now {
                Ok(sha) if sha == m.source.commit && (source_checked || !moves) => {
                    cache.set_ref(&m.source.revision, &m.source.commit)?;
                }
                Ok(sha) if sha == m.source.commit => note(&format!(
                    "refs/{} of {} stays at {}: the source could not be checked, so this pull \
                     does not move it to {} (load that commit by its id)",
                    m.source.revision,
                    m.source.repo,
                    held.as_deref().unwrap_or_default(),
                    m.source.commit
                )),
                other => note(&format!(
                    "refs/{} of {} is not set to {}: {} (load that commit by its id)",
                    m.source.revision,
                    m.source.repo,
                    &m.source.commit[..12],
                    match other {
                        Ok(sha) =>
                            format!("the source's {} is at {}", m.source.revision, &sha[..12]),
                        Err(e) => format!(
                            "the source's {} cannot be read here ({e})",
                            m.source.revision
                        ),
                    }
                )),
            }
        }
    }
    note(&format!(
        "restored {} file(s) of {}@{} into {}",
        report.files,
        m.source.repo,
        &m.source.commit[..12],
        report.path.display()
    ));
    let _ = std::fs::remove_dir_all(&work);
    Ok(report)
}

/// What checking a mirror's manifest against its source found.
enum SourceCheck {
    /// The source repo was read at the commit the manifest names: each
    /// file where the manifest says otherwise, as `(path, what the manifest
    /// says, what the source holds)`.
    Read(Vec<(String, String, String)>),
    /// There is no source repo to read on this endpoint (private, gone, on
    /// another Hub, or served decoded from a mirror): why.
    Unread(String),
    /// The source repo is on this endpoint but has no such commit: the
    /// mirror names a commit its source does not hold (a false claim, or
    /// the source's history was rewritten).
    NoCommit,
}

impl SourceCheck {
    /// Why the mirror `mirror` (of `m`) does not restore its source's
    /// commit, if it does not: where the source holds `files` otherwise, or
    /// lacks the commit.
    fn refusal(&self, m: &Manifest) -> Option<String> {
        let src = &m.source;
        match self {
            SourceCheck::Read(d) if !d.is_empty() => {
                let (path, claim, held) = &d[0];
                let more = match d.len() {
                    1 => String::new(),
                    n => format!(" (and {} more file(s))", n - 1),
                };
                Some(format!(
                    "its manifest says {path} of {}@{} is {claim}, but the source holds \
                     {held}{more}: this mirror does not restore that commit",
                    src.repo, src.commit
                ))
            }
            SourceCheck::NoCommit => Some(format!(
                "its source {} is on this endpoint but has no commit {}: the mirror names a \
                 commit its source does not hold (a false claim, or the source's history \
                 was rewritten)",
                src.repo, src.commit
            )),
            _ => None,
        }
    }
}

/// Check what the mirror `mirror`'s manifest says of `files` against the
/// source repo itself at the source commit: each file's size and hash (LFS
/// SHA-256, else git blob id) from the Hub's tree listing. A manifest is
/// only the mirror's word: unchecked, a mirror that names another repo's
/// commit would have its own bytes filed in the HF cache under that repo's
/// name. A source readable here that has no such commit is an error (the
/// mirror names a commit its source does not hold); so is a source that
/// cannot be read for now (5xx, 429, network), rather than a check
/// silently skipped.
async fn check_source(
    client: &HubClient,
    m: &Manifest,
    files: &[&FileEntry],
    mirror: &str,
) -> Result<SourceCheck> {
    let src = &m.source;
    let unread = |e: &HubError| match e {
        HubError::RepoNotFound { .. }
        | HubError::Unauthorized { .. }
        | HubError::TokenRequired { .. }
        | HubError::Gated { .. } => true,
        HubError::Http { status, .. } => *status < 500 && *status != 429,
        _ => false,
    };
    // An error reading the source (5xx, 429, the network) fails the check
    // rather than skipping it, and says what was being checked.
    let context = |e: HubError| HubError::Manifest {
        repo: mirror.into(),
        reason: format!(
            "checking it against its source {}@{}: {e}",
            src.repo,
            &src.commit[..12]
        ),
    };
    let decoded = |from: &str| {
        SourceCheck::Unread(format!(
            "this endpoint serves it decoded from the mirror {from}, not from a source repo"
        ))
    };
    match client.repo_info(&src.repo, &src.commit).await {
        Ok(info) => {
            if let Some(from) = info.decoded_from {
                return Ok(decoded(&from));
            }
            // An endpoint that answers another commit for a full commit id
            // (one that ignores the revision) would check the wrong tree.
            if !info.sha.eq_ignore_ascii_case(&src.commit) {
                return Err(context(HubError::Protocol {
                    repo: src.repo.clone(),
                    what: "repo info",
                    reason: format!("asked for commit {}, answered {}", src.commit, info.sha),
                }));
            }
        }
        Err(HubError::RevisionNotFound { .. }) => {
            // (Asking for `main` tells a repo that lacks the commit from
            // one that cannot be read; a repo without a `main` branch lacks
            // it too.)
            return match client.repo_info(&src.repo, "main").await {
                Ok(info) => Ok(match info.decoded_from {
                    Some(from) => decoded(&from),
                    None => SourceCheck::NoCommit,
                }),
                Err(HubError::RevisionNotFound { .. }) => Ok(SourceCheck::NoCommit),
                Err(e) if unread(&e) => Ok(SourceCheck::Unread(e.to_string())),
                Err(e) => Err(context(e)),
            };
        }
        Err(e) if unread(&e) => return Ok(SourceCheck::Unread(e.to_string())),
        Err(e) => return Err(context(e)),
    }
    // The listing is classified as the revision was: a source that turns
    // unreadable (or is answered decoded from a mirror) between the two
    // calls is unread, not checked.
    let tree = match client.list_files_marked(&src.repo, &src.commit).await {
        Ok((_, Some(from))) => return Ok(decoded(&from)),
        Ok((tree, None)) => tree,
        Err(e) if unread(&e) => return Ok(SourceCheck::Unread(e.to_string())),
        Err(e) => return Err(context(e)),
    };
    let by_path: HashMap<&str, &RepoFile> = tree.iter().map(|f| (f.path.as_str(), f)).collect();
    let mut out = Vec::new();
    // Size, LFS or not, and the id the HF cache names the blob by (LFS
    // SHA-256, else git blob id).
    let says = |size: u64, lfs: bool, id: &str| {
        format!(
            "{size} bytes, {} {id}",
            if lfs { "SHA-256" } else { "git blob" }
        )
    };
    for f in files {
        let held = match by_path.get(f.path.as_str()) {
            None => Some("no such file".to_string()),
            Some(r) => {
                let lfs = r.lfs_sha256.is_some();
                let same =
                    r.size == f.size && lfs == f.lfs && r.etag().eq_ignore_ascii_case(f.etag());
                (!same).then(|| says(r.size, lfs, r.etag()))
            }
        };
        if let Some(held) = held {
            out.push((f.path.clone(), says(f.size, f.lfs, f.etag()), held));
        }
    }
    Ok(SourceCheck::Read(out))
}

/// How long a temp file whose process is not seen must have been left
/// unwritten before [`clean_stale_temps`] removes it.
const STALE_TEMP_AGE: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// Remove the temp files a process that is gone left for `dst`:
/// `.NAME.PID.N.tmp` and `.NAME.incomplete.PID.N.tmp` (a killed run of an
/// earlier version, or of the named temp-file fallback where `O_TMPFILE` is
/// missing) and `.NAME.brevis-link-PID-N` (a snapshot link not yet renamed),
/// NAME being `dst`'s file name. Only where `/proc` tells which processes
/// live, and only files untouched for [`STALE_TEMP_AGE`]: a cache shared
/// between containers (PID namespaces) holds temp files of processes this
/// one cannot see, and a writer keeps its file's time fresh. A temp file
/// of a live process, or any other file, is never touched.
fn clean_stale_temps(dst: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let (Some(dir), Some(name)) = (dst.parent(), dst.file_name().and_then(|n| n.to_str())) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let dead = |pid: &str| !Path::new("/proc").join(pid).exists();
    for e in entries.flatten() {
        let entry = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = entry.strip_prefix('.').and_then(|r| r.strip_prefix(name)) else {
            continue;
        };
        let stale = if let Some(id) = rest.strip_prefix(".brevis-link-") {
            // PID-N (PID alone from earlier versions).
            let (pid, n) = id.split_once('-').unwrap_or((id, "0"));
            digits(pid) && digits(n) && dead(pid)
        } else if let Some(mid) = rest.strip_suffix(".tmp") {
            let mid = mid.strip_prefix(".incomplete").unwrap_or(mid);
            match mid.strip_prefix('.').and_then(|m| m.split_once('.')) {
                Some((pid, n)) => digits(pid) && digits(n) && dead(pid),
                None => false,
            }
        } else {
            false
        };
        let is_ours = e.file_type().is_ok_and(|t| t.is_file() || t.is_symlink());
        // (The entry's own time: a link's, not its target's.)
        let idle = e
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age >= STALE_TEMP_AGE));
        if stale && is_ours && idle {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Check restored bytes against the manifest: size, SHA-256, and for a file
/// the source does not keep in LFS its git blob id (the name the HF cache
/// gives its blob, and its ETag): a manifest whose `git_oid` is not that of
/// the bytes would file them under another file's name.
fn check_identity(repo: &str, f: &FileEntry, h: &FileHashes) -> Result<()> {
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

/// The indices of `entries` by stored file, and the stored files not among
/// the downloads `dl` (already here, or not on the Hub), in the entries'
/// order: those are ready for [`download_and_run`]'s job at once.
fn by_stored_file<'a>(
    entries: &[&'a FileEntry],
    dl: &[(String, PathBuf, Expect)],
) -> (
    HashMap<&'a str, Vec<usize>>,
    std::collections::VecDeque<&'a str>,
) {
    let downloading: std::collections::HashSet<&str> =
        dl.iter().map(|(a, _, _)| a.as_str()).collect();
    let mut files_of: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut ready = std::collections::VecDeque::new();
    for (i, f) in entries.iter().enumerate() {
        let v = files_of.entry(f.archive.as_str()).or_default();
        if v.is_empty() && !downloading.contains(f.archive.as_str()) {
            ready.push_back(f.archive.as_str());
        }
        v.push(i);
    }
    (files_of, ready)
}

/// Downloads `dl` (up to the client's concurrency) and runs `job`, one at a
/// time on the blocking pool, for each stored file as soon as it is here:
/// those of `ready` at once, each download as it ends, after `arrived` has
/// seen its outcome. An error (from `arrived` or a job) stops everything:
/// the downloads in flight are given up (their partial files resume next
/// time), a running job is awaited, and the first error is returned. The
/// download has the progress bar while it runs; a job started meanwhile
/// gets none.
#[allow(clippy::too_many_arguments)]
async fn download_and_run<'a>(
    client: &HubClient,
    repo: &str,
    commit: &str,
    dl: &'a [(String, PathBuf, Expect)],
    mut ready: std::collections::VecDeque<&'a str>,
    progress: &Arc<dyn ProgressSink>,
    mut arrived: impl FnMut(&'a str, Result<crate::client::DownloadStats>) -> Result<()>,
    job: impl Fn(&'a str, Arc<dyn ProgressSink>) -> tokio::task::JoinHandle<Result<()>>,
) -> Result<()> {
    if !dl.is_empty() {
        let total: u64 = dl.iter().filter_map(|(_, _, e)| e.size).sum();
        progress.start(&format!("download {repo}"), total);
    }
    let mut downloads = Some(client.download_stream(repo, commit, dl, progress.clone()));
    let (mut left, mut running) = (dl.len(), None);
    let mut failed = None;
    loop {
        if running.is_none()
            && failed.is_none()
            && let Some(a) = ready.pop_front()
        {
            let sink: Arc<dyn ProgressSink> = if left > 0 {
                Arc::new(NoProgress)
            } else {
                progress.clone()
            };
            running = Some(job(a, sink));
        }
        tokio::select! {
            Some((i, r)) = async { downloads.as_mut().expect("guarded").next().await },
                if left > 0 && failed.is_none() =>
            {
                left -= 1;
                let archive = dl[i].0.as_str();
                if left == 0 {
                    progress.finish();
                }
                match arrived(archive, r) {
                    Ok(()) => ready.push_back(archive),
                    Err(e) => failed = Some(e),
                }
            }
            r = async { running.as_mut().expect("guarded").await }, if running.is_some() => {
                running = None;
                let r = r
                    .map_err(|e| HubError::io("<worker>", std::io::Error::other(e.to_string())))
                    .and_then(|r| r);
                if let Err(e) = r {
                    failed.get_or_insert(e);
                }
            }
            else => break,
        }
        if failed.is_some() {
            // Given up now, not kept open while a running job ends.
            downloads = None;
        }
    }
    if failed.is_none() && left > 0 {
        failed = Some(HubError::protocol(
            repo,
            "download",
            "the downloads ended early",
        ));
    }
    match failed {
        Some(e) => {
            if left > 0 {
                progress.finish();
            }
            Err(e)
        }
        None => Ok(()),
    }
}

/// The hashes of bytes that went through a [`crate::hashing::TeeHasher`]:
/// `decoded`, the digest of the decoder that wrote them (it hashes what it
/// writes), or else the tee's own (which then was asked for one).
fn teed_hashes(t: crate::hashing::Teed, decoded: Option<[u8; 32]>) -> FileHashes {
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
fn restore(
    stored: &Path,
    dst: &Path,
    f: &FileEntry,
    threads: usize,
    progress: Arc<dyn ProgressSink>,
    repo: &str,
) -> Result<()> {
    use std::io::Write as _;
    let tmp = brevis_core::fsutil::TempFile::beside(dst).map_err(|e| HubError::io(dst, e))?;
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

/// The verdict on one file of a mirror.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyEntry {
    /// Source path.
    pub path: String,
    /// Stored file.
    pub archive: String,
    /// `ok`, `mismatch`, `missing` or `corrupt`; for a remote mirror also
    /// `error` (the stored file could not be downloaded: not a verdict).
    pub status: String,
    /// SHA-256 from the manifest.
    pub expected: String,
    /// SHA-256 of the decoded bytes, when they could be decoded.
    pub actual: Option<String>,
    /// Why, when not ok.
    pub detail: Option<String>,
}

/// The verdict on a mirror.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// What was checked (folder or repo id).
    pub target: String,
    /// The source it claims to mirror.
    pub source: Source,
    /// Every file.
    pub files: Vec<VerifyEntry>,
    /// True when every file decodes to its manifest SHA-256 (and, where
    /// the source was read, the manifest says what the source holds).
    pub ok: bool,
    /// Whether the manifest was checked against the source repo itself
    /// (a mirror on a Hub that serves its source; never for a folder).
    pub source_checked: bool,
    /// Why the source could not be read, when it was looked for and not
    /// read (private, gone, on another Hub, served decoded from the mirror).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_unread: Option<String>,
}

/// The verdict on one manifest entry whose stored file is (or should be)
/// in `folder`. Blocking. An error is one reading the stored file (not a
/// verdict); an archive that does not decode is `corrupt`.
fn verify_entry(folder: &Path, repo: &str, f: &FileEntry, threads: usize) -> Result<VerifyEntry> {
    let stored = folder.join(&f.archive);
    if !stored.is_file() {
        return Ok(missing_entry(f));
    }
    let mut e = VerifyEntry {
        status: "ok".into(),
        ..missing_entry(f)
    };
    let got = match f.encoding {
        Encoding::Identity => hash_file(&stored, !f.lfs),
        Encoding::Brv => {
            // The decoder's digest, and the blob id of a regular file.
            let mut w = crate::hashing::TeeHasher::new(std::io::sink(), f.size, false, !f.lfs);
            match brevis_core::decompress_to(
                &stored,
                &mut w,
                &brevis_core::DecompressOptions::default().threads(threads),
            ) {
                Ok(r) => Ok(teed_hashes(w.finish().1, Some(r.sha256))),
                Err(brevis_core::DecodeError::Io { path, source }) if path == stored => {
                    return Err(HubError::io(path, source));
                }
                Err(err) => {
                    e.status = "corrupt".into();
                    e.detail = Some(err.to_string());
                    return Ok(e);
                }
            }
        }
    };
    let h = got?;
    if let Err(err) = check_identity(repo, f, &h) {
        e.status = "mismatch".into();
        e.detail = Some(match err {
            HubError::Integrity {
                what,
                expected,
                actual,
                ..
            } => format!("{what}: expected {expected}, got {actual}"),
            other => other.to_string(),
        });
    }
    e.actual = Some(h.sha256_hex());
    Ok(e)
}

/// The row of an entry whose stored file is not there.
fn missing_entry(f: &FileEntry) -> VerifyEntry {
    VerifyEntry {
        path: f.path.clone(),
        archive: f.archive.clone(),
        status: "missing".into(),
        expected: f.sha256.clone(),
        actual: None,
        detail: None,
    }
}

/// Verify a mirror laid out in a local folder (one holding
/// `brevis.manifest.json` and the stored files). Blocking.
pub fn verify_local(folder: &Path, threads: usize) -> Result<VerifyReport> {
    let mpath = folder.join(MANIFEST_NAME);
    let text = std::fs::read(&mpath).map_err(|e| HubError::io(&mpath, e))?;
    let m = Manifest::from_json(&text, &folder.display().to_string())?;
    let files = m
        .files
        .iter()
        .map(|f| verify_entry(folder, &m.source.repo, f, threads))
        .collect::<Result<Vec<_>>>()?;
    let ok = files.iter().all(|e| e.status == "ok");
    Ok(VerifyReport {
        target: folder.display().to_string(),
        source: m.source,
        files,
        ok,
        source_checked: false,
        source_unread: None,
    })
}

/// Verify a remote mirror: download its stored files into `work_dir` and
/// check them as [`verify_local`] does.
pub async fn verify_mirror(
    client: &HubClient,
    repo: &str,
    revision: &str,
    work_dir: &Path,
    threads: usize,
    progress: Arc<dyn ProgressSink>,
) -> Result<VerifyReport> {
    verify_mirror_against(client, client, repo, revision, work_dir, threads, progress).await
}

/// [`verify_mirror`], checking the manifest against the source repo on the
/// endpoint of `source`.
pub async fn verify_mirror_against(
    client: &HubClient,
    source: &HubClient,
    repo: &str,
    revision: &str,
    work_dir: &Path,
    threads: usize,
    progress: Arc<dyn ProgressSink>,
) -> Result<VerifyReport> {
    check_repo_id(repo)?;
    let info = client.repo_info(repo, revision).await?;
    let work_name = format!("verify-{}-{}", safe_name(repo), &info.sha[..12]);
    let _lock = lock_work(work_dir, &work_name, &quiet_notes()).await?;
    let work = work_dir.join(&work_name);
    std::fs::create_dir_all(&work).map_err(|e| HubError::io(&work, e))?;
    // The work folder goes whatever happens.
    let r = verify_in(client, source, repo, &info.sha, &work, threads, progress).await;
    let _ = std::fs::remove_dir_all(&work);
    r
}

/// [`verify_mirror`] of `repo` at commit `sha`, in the work folder `work`.
async fn verify_in(
    client: &HubClient,
    source: &HubClient,
    repo: &str,
    sha: &str,
    work: &Path,
    threads: usize,
    progress: Arc<dyn ProgressSink>,
) -> Result<VerifyReport> {
    let m = fetch_manifest(client, repo, sha, work)
        .await?
        .ok_or_else(|| HubError::Manifest {
            repo: repo.into(),
            reason: format!("no {MANIFEST_NAME}: not a Brevis mirror"),
        })?;
    let all: Vec<&FileEntry> = m.files.iter().collect();
    let checked = check_source(source, &m, &all, repo).await?;
    let tree = client.list_files(repo, sha).await?;
    let remote: BTreeMap<&str, &RepoFile> = tree.iter().map(|f| (f.path.as_str(), f)).collect();
    let mut dl = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for f in &m.files {
        // Two entries naming one stored file: download it once (two
        // downloads into one path would trip over each other).
        if !seen.insert(f.archive.as_str()) {
            continue;
        }
        if let Some(r) = remote.get(f.archive.as_str()) {
            let expect = Expect {
                size: Some(r.size),
                sha256: r.lfs_sha256.clone(),
                git_oid: None,
            };
            dl.push((f.archive.clone(), work.join(&f.archive), expect));
        }
    }
    // A stored file that is not what the Hub's tree says (its LFS oid or
    // size) is a finding about that file, not a failure of the whole check.
    // One that could not be fetched at all is reported on its row too
    // (status `error`), so every file has a row whatever happened.
    // Each stored file is checked as soon as it is here, while the others
    // download.
    let mut bad_download: HashMap<String, (&'static str, String)> = HashMap::new();
    let entries: Vec<&FileEntry> = m.files.iter().collect();
    let (files_of, ready) = by_stored_file(&entries, &dl);
    let verdicts = Arc::new(std::sync::Mutex::new(vec![None; entries.len()]));
    let check = |archive: &str, _: Arc<dyn ProgressSink>| {
        let todo: Vec<(usize, FileEntry)> = files_of[archive]
            .iter()
            .map(|&i| (i, entries[i].clone()))
            .collect();
        let (folder, source, verdicts) =
            (work.to_path_buf(), m.source.repo.clone(), verdicts.clone());
        // A stored file the Hub does not hold is missing, whatever the work
        // folder holds under its name (a manifest may name another file's
        // partial download).
        let on_hub = remote.contains_key(archive);
        tokio::task::spawn_blocking(move || -> Result<()> {
            for (i, f) in todo {
                let v = if on_hub {
                    verify_entry(&folder, &source, &f, threads)?
                } else {
                    missing_entry(&f)
                };
                verdicts.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(v);
            }
            Ok(())
        })
    };
    download_and_run(
        client,
        repo,
        sha,
        &dl,
        ready,
        &progress,
        |archive, r| {
            match r {
                Ok(_) => {}
                Err(e @ HubError::Integrity { .. }) => {
                    bad_download.insert(archive.into(), ("mismatch", format!("stored file: {e}")));
                }
                Err(e) => {
                    bad_download.insert(archive.into(), ("error", e.to_string()));
                }
            }
            Ok(())
        },
        check,
    )
    .await?;
    let files = std::mem::take(&mut *verdicts.lock().unwrap_or_else(|p| p.into_inner()))
        .into_iter()
        .collect::<Option<Vec<VerifyEntry>>>()
        .ok_or_else(|| HubError::protocol(repo, "verify", "a stored file was left unchecked"))?;
    let mut rep = VerifyReport {
        target: repo.to_string(),
        source: m.source.clone(),
        files,
        ok: false,
        source_checked: false,
        source_unread: None,
    };
    let disagree = match checked {
        SourceCheck::Read(d) => {
            rep.source_checked = true;
            d
        }
        SourceCheck::Unread(why) => {
            rep.source_unread = Some(why);
            Vec::new()
        }
        // Every file: none restores a commit the source does not hold.
        SourceCheck::NoCommit => {
            rep.source_checked = true;
            let why = format!(
                "the source {} has no commit {}",
                rep.source.repo, rep.source.commit
            );
            for e in &mut rep.files {
                e.status = "mismatch".into();
                e.detail = Some(why.clone());
            }
            Vec::new()
        }
    };
    // A file the source holds otherwise is a mismatch whatever it decodes
    // to: the mirror does not restore the commit it names.
    for (path, claim, held) in disagree {
        if let Some(e) = rep.files.iter_mut().find(|e| e.path == path) {
            e.status = "mismatch".into();
            e.detail = Some(format!(
                "the manifest says {claim}, the source {}@{} holds {held}",
                rep.source.repo,
                &rep.source.commit[..12]
            ));
        }
    }
    for e in &mut rep.files {
        if let Some((status, d)) = bad_download.get(&e.archive) {
            e.status = (*status).into();
            e.detail = Some(d.clone());
        } else if e.status == "missing" {
            e.detail = Some(format!("{} is not in {repo}", e.archive));
        }
    }
    rep.ok = rep.files.iter().all(|e| e.status == "ok");
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manifest of one file of `org/model` at commit `commit`.
    fn manifest(commit: &str) -> Manifest {
        let m = serde_json::json!({
            "manifest_version": 1, "tool": "t", "format_version": 1,
            "source": {"repo": "org/model", "revision": "main", "commit": commit},
            "files": [{"path": "a.bin", "size": 1, "sha256": "d".repeat(64), "git_oid": "e".repeat(40),
                       "lfs": true, "encoding": "identity", "archive": "a.bin", "archive_size": 1}]
        });
        Manifest::from_json(m.to_string().as_bytes(), "t").unwrap()
    }

    /// A source the endpoint cannot answer for now (5xx, 429) fails the
    /// check, naming what was checked, where it had been skipped as if the
    /// source were private; a 404 is a source not here.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_source_that_fails_to_answer_fails_the_check() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // ("unread", "error", or "no commit": a repo that answers, without
        // the commit or a `main` branch.)
        let other = format!("{{\"sha\":\"{}\"}}", "d".repeat(40));
        for (status, body, expect) in [
            ("503 Service Unavailable", "{}", "error"),
            ("429 Too Many Requests", "{}", "error"),
            ("404 Not Found", "{}", "unread"),
            (
                "404 Not Found\r\nx-error-code: RevisionNotFound",
                "{}",
                "no commit",
            ),
            // An endpoint that answers another commit than the one asked.
            ("200 OK", other.as_str(), "error"),
        ] {
            let body = body.to_owned();
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}", l.local_addr().unwrap());
            tokio::spawn(async move {
                while let Ok((mut s, _)) = l.accept().await {
                    let body = body.clone();
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 4096];
                        while let Ok(n) = s.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                            let r = format!(
                                "HTTP/1.1 {status}\r\ncontent-length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            if s.write_all(r.as_bytes()).await.is_err() {
                                break;
                            }
                        }
                    });
                }
            });
            let client = HubClient::new(&url, None).unwrap().with_retry(
                crate::client::RetryPolicy::default()
                    .max_retries(1)
                    .base_delay(std::time::Duration::from_millis(1)),
            );
            let m = manifest(&"c".repeat(40));
            let files: Vec<&FileEntry> = m.files.iter().collect();
            let r = check_source(&client, &m, &files, "org/model-brevis").await;
            match r {
                Ok(SourceCheck::Unread(_)) => assert_eq!(expect, "unread", "{status}"),
                Ok(SourceCheck::NoCommit) => assert_eq!(expect, "no commit", "{status}"),
                Err(e) => {
                    assert_eq!(expect, "error", "{status}: {e}");
                    if status.starts_with("200") {
                        assert!(e.to_string().contains("asked for commit"), "{e}");
                    }
                    assert!(
                        e.to_string()
                            .contains("checking it against its source org/model@"),
                        "{e}"
                    );
                }
                Ok(_) => panic!("{status}: checked"),
            }
        }
    }

    #[test]
    fn a_manifest_commit_id_is_lower_case() {
        let m = manifest(&"ABCDEF0123".repeat(4));
        assert_eq!(m.source.commit, "abcdef0123".repeat(4));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn work_locks_are_removed_and_a_waiter_takes_a_live_one() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().to_path_buf();
        let p = dir.join("w.lock");
        let first = lock_work(&dir, "w", &quiet_notes()).await.unwrap();
        assert!(p.is_file());
        // A second run opens the same file and waits for it.
        let d2 = dir.clone();
        let waiter = tokio::spawn(async move { lock_work(&d2, "w", &quiet_notes()).await });
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(!waiter.is_finished());
        // The first removes the file as it lets go: the waiter's lock is on
        // a file the path names again (it took it anew), never on the
        // removed one, so a third run cannot hold the lock at the same time.
        drop(first);
        let second = waiter.await.unwrap().unwrap();
        assert!(names_same_file(&second.file, &p).unwrap());
        let third = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        assert!(matches!(
            third.try_lock(),
            Err(std::fs::TryLockError::WouldBlock)
        ));
        drop(third);
        drop(second);
        assert!(!p.exists());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    }
}
