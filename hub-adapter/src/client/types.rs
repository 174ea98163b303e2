//! What the client hands out and takes: repo files, expected hashes, stats.

use std::path::PathBuf;

use crate::hashing::FileHashes;

/// One file of a repo, as the tree listing describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoFile {
    /// Path inside the repo (validated: relative, no `..`).
    pub path: String,
    /// Size of the file's content in bytes.
    pub size: u64,
    /// Git blob id (of the content for regular files, of the pointer for LFS files).
    pub oid: String,
    /// LFS SHA-256 (hex) of the content, for LFS files.
    pub lfs_sha256: Option<String>,
}

impl RepoFile {
    /// The id the HF cache and `ETag` use: LFS SHA-256, else the git blob id.
    pub fn etag(&self) -> &str {
        self.lfs_sha256.as_deref().unwrap_or(&self.oid)
    }
}

/// What the client expects of a downloaded file.
#[derive(Debug, Clone, Default)]
pub struct Expect {
    /// Size in bytes.
    pub size: Option<u64>,
    /// SHA-256, hex.
    pub sha256: Option<String>,
    /// Git blob id of the content, hex (regular files).
    pub git_oid: Option<String>,
}

impl Expect {
    /// What a file of a repo's tree must be: its size, and its LFS SHA-256
    /// or, for a regular file, its git blob id.
    pub fn of(f: &RepoFile) -> Expect {
        Expect {
            size: Some(f.size),
            sha256: f.lfs_sha256.clone(),
            git_oid: f.lfs_sha256.is_none().then(|| f.oid.clone()),
        }
    }

    /// Whether a file with these hashes is what is expected (every part
    /// named; hashes taken without the blob id never match one).
    pub fn matches(&self, h: &FileHashes) -> bool {
        self.size.is_none_or(|s| s == h.size)
            && self
                .sha256
                .as_ref()
                .is_none_or(|s| s.eq_ignore_ascii_case(&h.sha256_hex()))
            && self.git_oid.as_ref().is_none_or(|want| {
                h.git_oid
                    .as_deref()
                    .is_some_and(|g| g.eq_ignore_ascii_case(want))
            })
    }
}

/// What `/api/models/{repo}/revision/{rev}` says.
#[derive(Debug, Clone)]
pub struct RepoInfo {
    /// Repo id.
    pub id: String,
    /// Commit id the revision resolves to.
    pub sha: String,
    /// Whether the repo is private.
    pub private: bool,
    /// Paths of the files at that commit.
    pub siblings: Vec<String>,
    /// For a source `brevis-hub serve` answers decoded from a mirror (no
    /// source repo of its own there), that mirror.
    pub decoded_from: Option<String>,
}

/// What a `HEAD` on a resolve URL says.
#[derive(Debug, Clone)]
pub struct FileMetadata {
    /// `X-Repo-Commit`.
    pub commit: String,
    /// `X-Linked-Etag` or `ETag`, without quotes.
    pub etag: String,
    /// `X-Linked-Size` or `Content-Length`.
    pub size: u64,
}

/// What one download did.
#[derive(Debug, Clone, Default)]
pub struct DownloadStats {
    /// Bytes received over the wire.
    pub bytes_on_wire: u64,
    /// Bytes already present from an earlier interrupted run.
    pub resumed_from: u64,
    /// Hashes of the complete file (its git blob id only where the
    /// [`Expect`] named one).
    pub hashes: Option<FileHashes>,
}

/// A local file to put into a commit.
#[derive(Debug, Clone)]
pub struct UploadFile {
    /// Path in the repo.
    pub path_in_repo: String,
    /// Local file.
    pub local: PathBuf,
    /// Its size and hashes (without the git blob id, a regular file is
    /// committed even when the repo already holds it).
    pub hashes: FileHashes,
}

/// What an upload did.
#[derive(Debug, Clone, Default)]
pub struct UploadStats {
    /// Bytes sent as LFS objects.
    pub lfs_bytes_sent: u64,
    /// LFS objects sent.
    pub lfs_objects_sent: usize,
    /// LFS objects the server already had.
    pub lfs_objects_present: usize,
    /// Bytes sent inline in the commit (regular files).
    pub inline_bytes_sent: u64,
    /// The commit made, if any.
    pub commit: Option<CommitInfo>,
}

/// A commit made on the Hub.
#[derive(Debug, Clone)]
pub struct CommitInfo {
    /// Commit id.
    pub oid: String,
    /// URL of the commit.
    pub url: String,
}
