//! The server's on-disk store.
//!
//! ```text
//! ROOT/models/<org>/<name>/repo.json             {"private": bool, "created": secs}
//! ROOT/models/<org>/<name>/refs/heads/<branch>   commit id
//! ROOT/models/<org>/<name>/commits/<oid>.json    parent, summary, time, files
//! ROOT/objects/<aa>/<sha256>                     every file's content, by SHA-256
//! ROOT/sources/<org>/<name>.json                 {"mirror": repo}: served decoded
//! ROOT/tmp/                                      uploads in flight
//! ```
//! Objects are shared by all repos (content-addressed); commits are small
//! JSON files listing every path with its size and hashes.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha1::Sha1;
use sha2::{Digest, Sha256};

use crate::cache::write_atomic;
use crate::error::{HubError, Result};
use crate::hashing::{FileHashes, hash_file};
use crate::manifest::{MANIFEST_NAME, Manifest};
use crate::paths::{check_repo_id, check_repo_path, check_revision};

/// Files at least this large are stored with LFS (as on the Hub).
pub const LFS_SIZE_THRESHOLD: u64 = 10 << 20;

/// One file in a commit.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileRec {
    /// Content length.
    pub size: u64,
    /// SHA-256 of the content (the object's name).
    pub sha256: String,
    /// Git blob id of the tree entry (pointer file for LFS).
    pub git_oid: String,
    /// Stored with LFS.
    pub lfs: bool,
}

impl FileRec {
    /// A record for content with these hashes (which hold the git blob id
    /// when the file is regular).
    pub fn new(h: &FileHashes, lfs: bool) -> FileRec {
        let sha = h.sha256_hex();
        let git_oid = if lfs {
            crate::hashing::git_blob_id(lfs_pointer(&sha, h.size).as_bytes())
        } else {
            h.git_oid
                .clone()
                .expect("a regular file is hashed with its blob id")
        };
        FileRec {
            size: h.size,
            sha256: sha,
            git_oid,
            lfs,
        }
    }
    /// The ETag of the file: SHA-256 for LFS, git blob id otherwise.
    pub fn etag(&self) -> &str {
        if self.lfs {
            &self.sha256
        } else {
            &self.git_oid
        }
    }
}

/// The text of an LFS pointer file.
pub fn lfs_pointer(sha256: &str, size: u64) -> String {
    format!("version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n")
}

/// A commit.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Commit {
    /// Commit id.
    pub oid: String,
    /// Parent commit id.
    pub parent: Option<String>,
    /// Title.
    pub summary: String,
    /// Seconds since the epoch.
    pub time: u64,
    /// Every file.
    pub files: BTreeMap<String, FileRec>,
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

impl Store {
    /// Open (and create) a store.
    pub fn open(root: &Path) -> Result<Store> {
        for d in ["models", "objects", "sources", "tmp"] {
            io(root, std::fs::create_dir_all(root.join(d)))?;
        }
        Ok(Store {
            root: root.to_path_buf(),
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

    /// A persistent secret for upload tickets.
    pub fn secret(&self) -> Result<Vec<u8>> {
        let p = self.root.join("secret");
        if let Ok(s) = std::fs::read(&p)
            && s.len() >= 32
        {
            return Ok(s);
        }
        let mut h = Sha256::new();
        h.update(format!(
            "{:?}{}{:?}",
            std::time::SystemTime::now(),
            std::process::id(),
            self.root
        ));
        let v = [0u8; 1];
        h.update(format!("{:p}", &v));
        if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
            let mut b = [0u8; 32];
            if std::io::Read::read_exact(&mut f, &mut b).is_ok() {
                h.update(b);
            }
        }
        let s = hex::encode(h.finalize()).into_bytes();
        write_atomic(&p, &s)?;
        Ok(s)
    }

    fn repo_dir(&self, repo: &str) -> Result<PathBuf> {
        check_repo_id(repo)?;
        Ok(self.root.join("models").join(repo))
    }

    /// Whether a repo is stored under this id in another case (repo ids are
    /// case-insensitive on the Hub).
    pub fn stored_in_other_case(&self, repo: &str) -> bool {
        let Some((org, name)) = repo.split_once('/') else {
            return false;
        };
        let entries = |d: &Path| {
            std::fs::read_dir(d)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
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
                        && models.join(o).join(n).join("repo.json").exists()
                })
            })
    }

    /// Whether a repo exists; `Some(private)` when it does.
    pub fn repo_private(&self, repo: &str) -> Option<bool> {
        let p = self.repo_dir(repo).ok()?.join("repo.json");
        let text = std::fs::read(p).ok()?;
        let m: RepoMeta = serde_json::from_slice(&text).ok()?;
        Some(m.private)
    }

    /// Create a repo with an empty first commit on `main`. `Ok(false)` if it exists.
    pub fn create_repo(&self, repo: &str, private: bool) -> Result<bool> {
        let dir = self.repo_dir(repo)?;
        if dir.join("repo.json").exists() {
            return Ok(false);
        }
        io(&dir, std::fs::create_dir_all(dir.join("commits")))?;
        let c = self.make_commit(repo, None, "initial commit", BTreeMap::new())?;
        self.set_head(repo, "main", &c.oid)?;
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
    pub fn head(&self, repo: &str, branch: &str) -> Result<Option<String>> {
        check_revision(branch)?;
        let p = self.repo_dir(repo)?.join("refs/heads").join(branch);
        match std::fs::read_to_string(&p) {
            Ok(s) => Ok(Some(s.trim().to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(HubError::io(p, e)),
        }
    }

    /// Every branch (`refs/heads/<name>`, names may hold `/`) and the
    /// commit it points at, sorted by name.
    pub fn branches(&self, repo: &str) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        let mut todo = vec![(self.repo_dir(repo)?.join("refs/heads"), String::new())];
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
                } else if let Some(oid) = self.head(repo, &full)? {
                    out.push((full, oid));
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Point a branch at a commit.
    pub fn set_head(&self, repo: &str, branch: &str, oid: &str) -> Result<()> {
        check_revision(branch)?;
        let p = self.repo_dir(repo)?.join("refs/heads").join(branch);
        write_atomic(&p, oid.as_bytes())
    }

    /// Read a commit by id.
    pub fn commit(&self, repo: &str, oid: &str) -> Result<Option<Commit>> {
        if oid.len() != 40 || !oid.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(None);
        }
        let p = self
            .repo_dir(repo)?
            .join("commits")
            .join(format!("{oid}.json"));
        match std::fs::read(&p) {
            Ok(t) => serde_json::from_slice(&t)
                .map(Some)
                .map_err(|e| HubError::io(&p, std::io::Error::other(e))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(HubError::io(p, e)),
        }
    }

    /// Resolve a branch name or commit id.
    pub fn resolve(&self, repo: &str, rev: &str) -> Result<Option<Commit>> {
        if check_revision(rev).is_err() {
            return Ok(None);
        }
        if let Some(oid) = self.head(repo, rev)? {
            return self.commit(repo, &oid);
        }
        self.commit(repo, rev)
    }

    /// Write a new commit (not yet on any branch).
    pub fn make_commit(
        &self,
        repo: &str,
        parent: Option<&str>,
        summary: &str,
        files: BTreeMap<String, FileRec>,
    ) -> Result<Commit> {
        let time = now();
        let mut h = Sha1::new();
        h.update(format!(
            "{parent:?}\n{summary}\n{:?}\n",
            std::time::SystemTime::now()
        ));
        h.update(serde_json::to_vec(&files).unwrap_or_default());
        let oid = hex::encode(h.finalize());
        let c = Commit {
            oid: oid.clone(),
            parent: parent.map(String::from),
            summary: summary.to_string(),
            time,
            files,
        };
        let p = self
            .repo_dir(repo)?
            .join("commits")
            .join(format!("{oid}.json"));
        write_atomic(&p, &serde_json::to_vec(&c).unwrap_or_default())?;
        if c.files.contains_key(MANIFEST_NAME) {
            self.index_mirror(repo, &c);
        }
        Ok(c)
    }

    /// Record that `repo` is a mirror of its manifest's source, so the source
    /// can be served decoded. The first mirror of a source keeps serving it
    /// while its `main` still mirrors that source: another mirror naming
    /// the same source (a filtered copy, or anyone's claim) does not take
    /// its place.
    fn index_mirror(&self, repo: &str, c: &Commit) {
        let Some(m) = self.manifest_of(repo, c) else {
            return;
        };
        if let Some(prev) = self.mirror_of(&m.source.repo)
            && prev != repo
            && self
                .resolve(&prev, "main")
                .ok()
                .flatten()
                .and_then(|pc| self.manifest_of(&prev, &pc))
                .is_some_and(|pm| pm.source.repo == m.source.repo)
        {
            return;
        }
        let p = self
            .root
            .join("sources")
            .join(format!("{}.json", m.source.repo));
        let _ = write_atomic(
            &p,
            &serde_json::to_vec(&serde_json::json!({"mirror": repo})).unwrap_or_default(),
        );
    }

    /// The manifest in commit `c` of `repo`, if it holds a valid one.
    fn manifest_of(&self, repo: &str, c: &Commit) -> Option<Manifest> {
        let rec = c.files.get(MANIFEST_NAME)?;
        let text = std::fs::read(self.object_path(&rec.sha256)).ok()?;
        Manifest::from_json(&text, repo).ok()
    }

    /// The mirror repo that serves `source` decoded, if any.
    pub fn mirror_of(&self, source: &str) -> Option<String> {
        check_repo_id(source).ok()?;
        let text = std::fs::read(self.root.join("sources").join(format!("{source}.json"))).ok()?;
        let v: serde_json::Value = serde_json::from_slice(&text).ok()?;
        v.get("mirror")?.as_str().map(String::from)
    }

    /// Path of an object.
    pub fn object_path(&self, sha256: &str) -> PathBuf {
        let pre = sha256.get(..2).unwrap_or("00");
        self.root.join("objects").join(pre).join(sha256)
    }

    /// Whether an object exists with this size.
    pub fn has_object(&self, sha256: &str, size: u64) -> bool {
        std::fs::metadata(self.object_path(sha256)).is_ok_and(|m| m.len() == size)
    }

    /// Move a finished temp file into the objects (after checking its hash).
    pub fn put_object_file(&self, tmp: &Path, sha256: &str) -> Result<()> {
        let dst = self.object_path(sha256);
        if let Some(p) = dst.parent() {
            io(p, std::fs::create_dir_all(p))?;
        }
        io(&dst, std::fs::rename(tmp, &dst))
    }

    /// Store bytes as an object; returns its hashes.
    pub fn put_object_bytes(&self, data: &[u8]) -> Result<FileHashes> {
        let h = crate::hashing::hash_bytes(data);
        let sha = h.sha256_hex();
        if !self.has_object(&sha, h.size) {
            let mut tmp = io(&self.root, tempfile::NamedTempFile::new_in(self.tmp_dir()))?;
            let tp = tmp.path().to_path_buf();
            io(&tp, tmp.write_all(data))?;
            let (_, p) = tmp.keep().map_err(|e| HubError::io(&self.root, e.error))?;
            self.put_object_file(&p, &sha)?;
        }
        Ok(h)
    }

    /// Commit the files of a local folder as `repo` (created if needed) on
    /// `main`, replacing its content. Nothing happens when it already matches.
    pub fn seed(&self, repo: &str, dir: &Path) -> Result<String> {
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
                check_repo_path(&rel)?;
                let h = hash_file(&p, true)?;
                let sha = h.sha256_hex();
                if !self.has_object(&sha, h.size) {
                    let tmp = self.tmp_dir().join(format!("seed-{sha}"));
                    io(&tmp, std::fs::copy(&p, &tmp))?;
                    self.put_object_file(&tmp, &sha)?;
                }
                let sample = {
                    let mut b = vec![0u8; 512];
                    let mut f = io(&p, std::fs::File::open(&p))?;
                    let n = io(&p, std::io::Read::read(&mut f, &mut b))?;
                    b.truncate(n);
                    b
                };
                files.insert(
                    rel.clone(),
                    FileRec::new(&h, wants_lfs(&rel, h.size, &sample)),
                );
            }
        }
        let head = self.head(repo, "main")?;
        if let Some(h) = &head
            && let Some(c) = self.commit(repo, h)?
            && c.files == files
        {
            return Ok(c.oid);
        }
        let c = self.make_commit(
            repo,
            head.as_deref(),
            &format!("Seed from {}", dir.display()),
            files,
        )?;
        self.set_head(repo, "main", &c.oid)?;
        Ok(c.oid)
    }
}
