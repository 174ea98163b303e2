//! The server's on-disk store.
//!
//! ```text
//! ROOT/models/<org>/<name>/repo.json             {"private": bool, "created": secs}
//! ROOT/models/<org>/<name>/refs/heads/<branch>   commit id
//! ROOT/models/<org>/<name>/commits/<oid>.json    parent, summary, time, files
//! ROOT/objects/<aa>/<sha256>                     every file's content, by SHA-256
//! ROOT/sources/<org>/<name>.json                 {"mirror": repo}: served decoded
//! ROOT/tmp/                                      uploads in flight
//! ROOT/secret                                    the ticket key (owner-only)
//! ROOT/lock                                      held by the one server using ROOT
//! ```
//! Objects are shared by all repos (content-addressed); commits are small
//! JSON files listing every path with its size and hashes.
//!
//! Every path is built from a parsed identifier ([`RepoId`], [`Revision`],
//! [`CommitId`], [`Oid`]), never from a string: a value that could climb out
//! of the store cannot be one of those types. Records read back from disk
//! are parsed into the same types, so a damaged or hand-edited commit file
//! cannot name a path either.

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha1::Sha1;
use sha2::Digest as _;

use crate::cache::write_atomic;
use crate::error::{HubError, Result};
use crate::hashing::{FileHashes, hash_file};
use crate::ids::{BlobId, CommitId, Oid, RepoId, RepoPath, Revision};
use crate::manifest::{MANIFEST_NAME, Manifest};

/// Files at least this large are stored with LFS (as on the Hub).
pub const LFS_SIZE_THRESHOLD: u64 = 10 << 20;

/// Largest commit record written or read back (JSON).
pub const MAX_COMMIT_RECORD: u64 = 64 << 20;
/// Largest repo or source record read back (JSON of a few fields).
const MAX_META_RECORD: u64 = 64 << 10;
/// Largest branch ref read back (a commit id and a newline).
const MAX_REF_RECORD: u64 = 1024;
/// Bytes of a file's start [`wants_lfs`] looks at, as many as a client's
/// preupload sample.
const LFS_SAMPLE: usize = 512;
/// Parsed commit records kept in memory, by the size of their JSON.
const COMMIT_CACHE_BYTES: u64 = 128 << 20;

/// Values parsed from immutable records (commits, manifests), shared by
/// the requests that read them, within a budget of (about) bytes: when a
/// value would go past it, the cache starts over.
#[derive(Debug)]
pub(crate) struct Cache<K, V> {
    map: HashMap<K, (Arc<V>, u64)>,
    bytes: u64,
    budget: u64,
}

impl<K: std::hash::Hash + Eq, V> Cache<K, V> {
    pub(crate) fn new(budget: u64) -> Self {
        Cache {
            map: HashMap::new(),
            bytes: 0,
            budget,
        }
    }
    pub(crate) fn get(&self, k: &K) -> Option<Arc<V>> {
        self.map.get(k).map(|(v, _)| v.clone())
    }
    pub(crate) fn insert(&mut self, k: K, v: Arc<V>, cost: u64) {
        if cost > self.budget {
            return;
        }
        if self.bytes + cost > self.budget {
            self.map.clear();
            self.bytes = 0;
        }
        self.bytes += cost;
        if let Some((_, old)) = self.map.insert(k, (v, cost)) {
            self.bytes -= old;
        }
    }
}

/// Parsed manifests of mirrors, by object, within this budget of JSON.
const MANIFEST_CACHE_BYTES: u64 = 64 << 20;

/// One file in a commit.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileRec {
    /// Content length.
    pub size: u64,
    /// SHA-256 of the content (the object's name).
    pub sha256: Oid,
    /// Git blob id of the tree entry (pointer file for LFS).
    pub git_oid: BlobId,
    /// Stored with LFS.
    pub lfs: bool,
}

impl FileRec {
    /// A record for content with these hashes (which hold the git blob id
    /// when the file is regular).
    pub fn new(h: &FileHashes, lfs: bool) -> FileRec {
        let sha = Oid::from_digest(&h.sha256);
        if lfs {
            return FileRec::lfs(sha, h.size);
        }
        let git_oid = h
            .git_oid
            .as_deref()
            .and_then(|g| BlobId::parse(g).ok())
            .expect("a regular file is hashed with its blob id");
        FileRec {
            size: h.size,
            sha256: sha,
            git_oid,
            lfs,
        }
    }

    /// A record for an LFS object: its tree entry is the pointer file.
    pub fn lfs(sha256: Oid, size: u64) -> FileRec {
        let pointer = lfs_pointer(&sha256, size);
        let git_oid = BlobId::parse(&crate::hashing::git_blob_id(pointer.as_bytes()))
            .expect("a SHA-1 is 40 hex digits");
        FileRec {
            size,
            sha256,
            git_oid,
            lfs: true,
        }
    }

    /// The ETag of the file: SHA-256 for LFS, git blob id otherwise.
    pub fn etag(&self) -> &str {
        if self.lfs {
            self.sha256.as_str()
        } else {
            self.git_oid.as_str()
        }
    }
}

/// The text of an LFS pointer file.
pub fn lfs_pointer(sha256: &Oid, size: u64) -> String {
    format!("version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n")
}

/// A commit.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Commit {
    /// Commit id.
    pub oid: CommitId,
    /// Parent commit id.
    pub parent: Option<CommitId>,
    /// Title.
    pub summary: String,
    /// Seconds since the epoch.
    pub time: u64,
    /// Every file.
    pub files: BTreeMap<RepoPath, FileRec>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct RepoMeta {
    private: bool,
    created: u64,
}

/// Whether a file goes to LFS: large, a known binary extension, or a NUL
/// byte in its first bytes.
pub fn wants_lfs(path: &str, size: u64, sample: &[u8]) -> bool {
    const EXT: &[&str] = &[
        "safetensors",
        "bin",
        "pt",
        "pth",
        "ckpt",
        "h5",
        "onnx",
        "gguf",
        "msgpack",
        "model",
        "brv",
        "npy",
        "npz",
        "tflite",
        "zip",
        "gz",
        "tar",
        "zst",
        "pkl",
        "pb",
        "ot",
        "arrow",
        "parquet",
        "joblib",
        "mlmodel",
        "7z",
        "bz2",
        "xz",
        "rar",
        "wasm",
        "tgz",
        "lz4",
    ];
    let ext = path.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
    size >= LFS_SIZE_THRESHOLD
        || (path.contains('.') && EXT.contains(&ext.as_str()))
        || sample.contains(&0)
}

/// The store.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    commits: Arc<Mutex<Cache<(RepoId, CommitId), Commit>>>,
    manifests: Arc<Mutex<Cache<Oid, Manifest>>>,
}

/// The store's lock, held while a server uses it: one server a store, so a
/// server starting may clear what a killed one left in `tmp/`.
#[derive(Debug)]
pub struct StoreLock {
    _file: std::fs::File,
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn io<T>(p: &Path, r: std::io::Result<T>) -> Result<T> {
    r.map_err(|e| HubError::io(p, e))
}

/// Read a small JSON record, refusing one larger than `limit`.
fn read_record(p: &Path, limit: u64) -> Result<Option<Vec<u8>>> {
    let f = match std::fs::File::open(p) {
        Ok(f) => f,
        // A branch `a/b` asked for where a branch `a` is a file, or `a`
        // where `a/b` makes `a` a folder: none.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound
                    | std::io::ErrorKind::NotADirectory
                    | std::io::ErrorKind::IsADirectory
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(HubError::io(p, e)),
    };
    // Opening a folder works on Linux; reading it does not. A branch `a`
    // where `a/b` made `a` a folder: none.
    if f.metadata().is_ok_and(|m| !m.is_file()) {
        return Ok(None);
    }
    let mut out = Vec::new();
    io(
        p,
        std::io::Read::read_to_end(&mut std::io::Read::take(f, limit + 1), &mut out),
    )?;
    if out.len() as u64 > limit {
        return Err(HubError::io(
            p,
            std::io::Error::other(format!("record larger than {limit} bytes")),
        ));
    }
    Ok(Some(out))
}

impl Store {
    /// Open (and create) a store.
    pub fn open(root: &Path) -> Result<Store> {
        for d in ["models", "objects", "sources", "tmp"] {
            io(root, std::fs::create_dir_all(root.join(d)))?;
        }
        Ok(Store {
            root: root.to_path_buf(),
            commits: Arc::new(Mutex::new(Cache::new(COMMIT_CACHE_BYTES))),
            manifests: Arc::new(Mutex::new(Cache::new(MANIFEST_CACHE_BYTES))),
        })
    }

    /// The root folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A folder for temp files.
    pub fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// The file holding the ticket key.
    pub fn secret_path(&self) -> PathBuf {
        self.root.join("secret")
    }

    /// Take the store's lock (fails at once when another server holds it).
    pub fn lock(&self) -> Result<StoreLock> {
        let p = self.root.join("lock");
        let f = io(
            &p,
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&p),
        )?;
        match f.try_lock() {
            Ok(()) => Ok(StoreLock { _file: f }),
            Err(std::fs::TryLockError::WouldBlock) => Err(HubError::io(
                &p,
                std::io::Error::other("another `brevis-hub serve` is using this store"),
            )),
            Err(std::fs::TryLockError::Error(e)) => Err(HubError::io(&p, e)),
        }
    }

    /// Remove what uploads left in `tmp/` (temp files, parts of uploads
    /// never completed): all of it when `older_than` is `None` (the server
    /// starting, holding the lock), else what was last changed longer ago.
    /// Returns how many entries were removed.
    pub fn sweep_uploads(&self, older_than: Option<Duration>) -> usize {
        let dir = self.tmp_dir();
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return 0;
        };
        let mut removed = 0;
        for e in entries.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            let old = older_than.is_none_or(|age| {
                meta.modified()
                    .ok()
                    .and_then(|m| m.elapsed().ok())
                    .is_some_and(|e| e > age)
            });
            if !old {
                continue;
            }
            let p = e.path();
            let r = if meta.is_dir() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
            removed += usize::from(r.is_ok());
        }
        removed
    }

    fn repo_dir(&self, repo: &RepoId) -> PathBuf {
        self.root
            .join("models")
            .join(repo.namespace())
            .join(repo.name())
    }

    /// Whether a repo is stored under this id in another case (repo ids are
    /// case-insensitive on the Hub).
    pub fn stored_in_other_case(&self, repo: &RepoId) -> bool {
        let (org, name) = (repo.namespace(), repo.name());
        let entries = |d: &Path| {
            std::fs::read_dir(d)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| e.file_name().to_str().map(String::from))
                .collect::<Vec<_>>()
        };
        let models = self.root.join("models");
        entries(&models)
            .iter()
            .filter(|o| o.eq_ignore_ascii_case(org))
            .any(|o| {
                entries(&models.join(o)).iter().any(|n| {
                    n.eq_ignore_ascii_case(name)
                        && (o != org || n != name)
                        && RepoId::from_parts(o, n).is_ok_and(|r| self.repo_private(&r).is_some())
                })
            })
    }

    /// Whether a repo exists; `Some(private)` when it does.
    pub fn repo_private(&self, repo: &RepoId) -> Option<bool> {
        let text = read_record(&self.repo_dir(repo).join("repo.json"), MAX_META_RECORD)
            .ok()
            .flatten()?;
        let m: RepoMeta = serde_json::from_slice(&text).ok()?;
        Some(m.private)
    }

    /// Create a repo with an empty first commit on `main`. `Ok(false)` if it exists.
    pub fn create_repo(&self, repo: &RepoId, private: bool) -> Result<bool> {
        let dir = self.repo_dir(repo);
        if dir.join("repo.json").exists() {
            return Ok(false);
        }
        io(&dir, std::fs::create_dir_all(dir.join("commits")))?;
        let c = self.make_commit(repo, None, "initial commit", BTreeMap::new())?;
        self.set_head(repo, &Revision::main(), &c.oid)?;
        let meta = RepoMeta {
            private,
            created: now(),
        };
        write_atomic(
            &dir.join("repo.json"),
            &serde_json::to_vec(&meta).unwrap_or_default(),
        )?;
        Ok(true)
    }

    /// The commit a branch points at.
    pub fn head(&self, repo: &RepoId, branch: &Revision) -> Result<Option<CommitId>> {
        let p = self.repo_dir(repo).join("refs/heads").join(branch.as_str());
        match read_record(&p, MAX_REF_RECORD)? {
            None => Ok(None),
            Some(t) => {
                let t = String::from_utf8_lossy(&t);
                CommitId::parse(t.trim()).map(Some)
            }
        }
    }

    /// Every branch (`refs/heads/<name>`, names may hold `/`) and the
    /// commit it points at, sorted by name.
    pub fn branches(&self, repo: &RepoId) -> Result<Vec<(Revision, CommitId)>> {
        let mut out = Vec::new();
        let mut todo = vec![(self.repo_dir(repo).join("refs/heads"), String::new())];
        while let Some((dir, prefix)) = todo.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(HubError::io(dir, e)),
            };
            for e in entries {
                let e = io(&dir, e)?;
                // Not UTF-8, or a temp file of a write in flight: no branch.
                let Some(name) = e.file_name().to_str().map(String::from) else {
                    continue;
                };
                if name.starts_with('.') {
                    continue;
                }
                let full = format!("{prefix}{name}");
                if io(&dir, e.file_type())?.is_dir() {
                    todo.push((e.path(), format!("{full}/")));
                } else if let Ok(branch) = Revision::parse(&full)
                    && let Some(oid) = self.head(repo, &branch)?
                {
                    out.push((branch, oid));
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Point a branch at a commit.
    pub fn set_head(&self, repo: &RepoId, branch: &Revision, oid: &CommitId) -> Result<()> {
        let p = self.repo_dir(repo).join("refs/heads").join(branch.as_str());
        write_atomic(&p, oid.as_str().as_bytes())
    }

    /// Remove a branch (its commits stay); `false` if there was none. The
    /// folders a `a/b` name made are removed when they hold nothing else.
    pub fn delete_head(&self, repo: &RepoId, branch: &Revision) -> Result<bool> {
        let heads = self.repo_dir(repo).join("refs/heads");
        let p = heads.join(branch.as_str());
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            // A folder `a` of branches `a/...` is no branch `a`.
            Err(e) if e.kind() == std::io::ErrorKind::IsADirectory => return Ok(false),
            Err(e) => return Err(HubError::io(p, e)),
        }
        let mut dir = p.parent();
        while let Some(d) = dir
            && d != heads
            && std::fs::remove_dir(d).is_ok()
        {
            dir = d.parent();
        }
        Ok(true)
    }

    fn commit_path(&self, repo: &RepoId, oid: &CommitId) -> PathBuf {
        self.repo_dir(repo)
            .join("commits")
            .join(format!("{oid}.json"))
    }

    /// Read a commit by id (parsed once, then shared while it is cached).
    pub fn commit(&self, repo: &RepoId, oid: &CommitId) -> Result<Option<Arc<Commit>>> {
        let key = (repo.clone(), oid.clone());
        let cache = || self.commits.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = cache().get(&key) {
            return Ok(Some(c));
        }
        let p = self.commit_path(repo, oid);
        let Some(t) = read_record(&p, MAX_COMMIT_RECORD)? else {
            return Ok(None);
        };
        let c: Arc<Commit> = Arc::new(
            serde_json::from_slice(&t).map_err(|e| HubError::io(&p, std::io::Error::other(e)))?,
        );
        cache().insert(key, c.clone(), t.len() as u64);
        Ok(Some(c))
    }

    /// Resolve a branch name or commit id.
    pub fn resolve(&self, repo: &RepoId, rev: &Revision) -> Result<Option<Arc<Commit>>> {
        if let Some(oid) = self.head(repo, rev)? {
            return self.commit(repo, &oid);
        }
        match rev.commit_id() {
            Some(oid) => self.commit(repo, &oid),
            None => Ok(None),
        }
    }

    /// Write a new commit (not yet on any branch).
    pub fn make_commit(
        &self,
        repo: &RepoId,
        parent: Option<&CommitId>,
        summary: &str,
        files: BTreeMap<RepoPath, FileRec>,
    ) -> Result<Commit> {
        let time = now();
        let mut h = Sha1::new();
        h.update(format!(
            "{parent:?}\n{summary}\n{:?}\n",
            std::time::SystemTime::now()
        ));
        h.update(serde_json::to_vec(&files).unwrap_or_default());
        let oid = CommitId::from_digest(&h.finalize().into());
        let c = Commit {
            oid: oid.clone(),
            parent: parent.cloned(),
            summary: summary.to_string(),
            time,
            files,
        };
        let record = serde_json::to_vec(&c).unwrap_or_default();
        if record.len() as u64 > MAX_COMMIT_RECORD {
            return Err(HubError::invalid(
                "commit",
                repo.as_str(),
                format!("its record would be larger than {MAX_COMMIT_RECORD} bytes"),
            ));
        }
        write_atomic(&self.commit_path(repo, &oid), &record)?;
        if c.files.contains_key(MANIFEST_NAME) {
            self.index_mirror(repo, &c);
        }
        Ok(c)
    }

    fn source_record(&self, source: &RepoId) -> PathBuf {
        self.root
            .join("sources")
            .join(source.namespace())
            .join(format!("{}.json", source.name()))
    }

    /// Record that `repo` is a mirror of its manifest's source, so the source
    /// can be served decoded. The first mirror of a source keeps serving it
    /// while its `main` still mirrors that source: another mirror naming
    /// the same source (a filtered copy, or anyone's claim) does not take
    /// its place.
    fn index_mirror(&self, repo: &RepoId, c: &Commit) {
        let Some(m) = self.manifest_of(repo, c) else {
            return;
        };
        let Ok(source) = RepoId::parse(&m.source.repo) else {
            return;
        };
        if let Some(prev) = self.mirror_of(&source)
            && prev != *repo
            && self
                .resolve(&prev, &Revision::main())
                .ok()
                .flatten()
                .and_then(|pc| self.manifest_of(&prev, &pc))
                .is_some_and(|pm| pm.source.repo == m.source.repo)
        {
            return;
        }
        let _ = write_atomic(
            &self.source_record(&source),
            &serde_json::to_vec(&serde_json::json!({"mirror": repo})).unwrap_or_default(),
        );
    }

    /// The manifest in commit `c` of `repo`, if it holds a valid one
    /// (parsed once, then shared while it is cached).
    pub fn manifest_of(&self, repo: &RepoId, c: &Commit) -> Option<Arc<Manifest>> {
        let rec = c.files.get(MANIFEST_NAME)?;
        let cache = || self.manifests.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = cache().get(&rec.sha256) {
            return Some(m);
        }
        let text = read_record(
            &self.object_path(&rec.sha256),
            crate::manifest::MAX_MANIFEST_LEN,
        )
        .ok()??;
        let m = Arc::new(Manifest::from_json(&text, repo.as_str()).ok()?);
        cache().insert(rec.sha256.clone(), m.clone(), text.len() as u64);
        Some(m)
    }

    /// The mirror repo that serves `source` decoded, if any.
    pub fn mirror_of(&self, source: &RepoId) -> Option<RepoId> {
        let text = read_record(&self.source_record(source), MAX_META_RECORD).ok()??;
        let v: serde_json::Value = serde_json::from_slice(&text).ok()?;
        RepoId::parse(v.get("mirror")?.as_str()?).ok()
    }

    /// Path of an object.
    pub fn object_path(&self, oid: &Oid) -> PathBuf {
        self.root
            .join("objects")
            .join(oid.prefix())
            .join(oid.as_str())
    }

    /// The folder of the parts of a multipart upload of `oid` in flight.
    pub fn parts_dir(&self, oid: &Oid) -> PathBuf {
        self.tmp_dir().join(format!("parts-{oid}"))
    }

    /// Whether an object exists with this size.
    pub fn has_object(&self, oid: &Oid, size: u64) -> bool {
        std::fs::metadata(self.object_path(oid)).is_ok_and(|m| m.is_file() && m.len() == size)
    }

    /// Move a finished temp file into the objects (after checking its hash).
    pub fn put_object_file(&self, tmp: &Path, oid: &Oid) -> Result<()> {
        let dst = self.object_path(oid);
        if let Some(p) = dst.parent() {
            io(p, std::fs::create_dir_all(p))?;
        }
        io(&dst, std::fs::rename(tmp, &dst))
    }

    /// Store bytes as an object; returns its hashes.
    pub fn put_object_bytes(&self, data: &[u8]) -> Result<FileHashes> {
        let h = crate::hashing::hash_bytes(data);
        let oid = Oid::from_digest(&h.sha256);
        if !self.has_object(&oid, h.size) {
            let mut tmp = io(&self.root, tempfile::NamedTempFile::new_in(self.tmp_dir()))?;
            let tp = tmp.path().to_path_buf();
            io(&tp, tmp.write_all(data))?;
            let (_, p) = tmp.keep().map_err(|e| HubError::io(&self.root, e.error))?;
            self.put_object_file(&p, &oid)?;
        }
        Ok(h)
    }

    /// Commit the files of a local folder as `repo` (created if needed) on
    /// `main`, replacing its content. Nothing happens when it already matches.
    pub fn seed(&self, repo: &RepoId, dir: &Path) -> Result<CommitId> {
        self.create_repo(repo, false)?;
        let mut files = BTreeMap::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in io(&d, std::fs::read_dir(&d))? {
                let e = io(&d, e)?;
                let p = e.path();
                let name = e.file_name().to_string_lossy().into_owned();
                if name == ".git" || name == ".cache" {
                    continue;
                }
                let meta = io(&p, std::fs::metadata(&p))?;
                if meta.is_dir() {
                    stack.push(p);
                    continue;
                }
                let rel = p
                    .strip_prefix(dir)
                    .map_err(|_| {
                        HubError::invalid("path", &p.display().to_string(), "outside seed")
                    })?
                    .to_string_lossy()
                    .replace('\\', "/");
                let rel = RepoPath::parse(&rel)?;
                let h = hash_file(&p, true)?;
                let oid = Oid::from_digest(&h.sha256);
                if !self.has_object(&oid, h.size) {
                    let tmp = io(&self.root, tempfile::NamedTempFile::new_in(self.tmp_dir()))?;
                    let (_, tp) = tmp.keep().map_err(|e| HubError::io(&self.root, e.error))?;
                    io(&tp, std::fs::copy(&p, &tp))?;
                    self.put_object_file(&tp, &oid)?;
                }
                let sample = {
                    let mut b = vec![0u8; LFS_SAMPLE];
                    let mut f = io(&p, std::fs::File::open(&p))?;
                    let n = io(&p, std::io::Read::read(&mut f, &mut b))?;
                    b.truncate(n);
                    b
                };
                let lfs = wants_lfs(rel.as_str(), h.size, &sample);
                files.insert(rel, FileRec::new(&h, lfs));
            }
        }
        let main = Revision::main();
        let head = self.head(repo, &main)?;
        if let Some(h) = &head
            && let Some(c) = self.commit(repo, h)?
            && c.files == files
        {
            return Ok(c.oid.clone());
        }
        let c = self.make_commit(
            repo,
            head.as_ref(),
            &format!("Seed from {}", dir.display()),
            files,
        )?;
        self.set_head(repo, &main, &c.oid)?;
        Ok(c.oid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_record_naming_a_path_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path()).unwrap();
        let repo = RepoId::parse("org/pub").unwrap();
        store.create_repo(&repo, false).unwrap();
        let head = store.head(&repo, &Revision::main()).unwrap().unwrap();
        // What an older server let a commit write: an oid that is a path.
        let p = store.commit_path(&repo, &head);
        let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        v["files"]["leak.bin"] = serde_json::json!({"size": 1, "sha256": "/etc/shadow",
            "git_oid": "0000000000000000000000000000000000000000", "lfs": true});
        std::fs::write(&p, v.to_string()).unwrap();
        assert!(store.resolve(&repo, &Revision::main()).is_err());
    }

    #[test]
    fn sweeping_removes_upload_leftovers() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path()).unwrap();
        std::fs::write(store.tmp_dir().join(".tmpABC"), b"x").unwrap();
        let oid = Oid::parse(&"a".repeat(64)).unwrap();
        std::fs::create_dir_all(store.parts_dir(&oid)).unwrap();
        std::fs::write(store.parts_dir(&oid).join("00000001"), b"x").unwrap();
        assert_eq!(store.sweep_uploads(Some(Duration::from_secs(3600))), 0);
        assert_eq!(store.sweep_uploads(None), 2);
        assert_eq!(std::fs::read_dir(store.tmp_dir()).unwrap().count(), 0);
        let _lock = store.lock().unwrap();
        assert!(store.lock().is_err(), "a second server on one store");
    }
}
