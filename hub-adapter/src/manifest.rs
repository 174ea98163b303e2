//! `brevis.manifest.json`: what a mirror holds and what it decodes to.

use serde::{Deserialize, Serialize};

use crate::error::{HubError, Result};
use crate::paths::{check_repo_id, check_repo_path, check_revision};

/// File name of the manifest in a mirror repo.
pub const MANIFEST_NAME: &str = "brevis.manifest.json";
/// File name of the prior in a mirror repo.
pub const PRIOR_NAME: &str = "brevis.prior.json";
/// Folder in a mirror for source files whose name a mirror's own file takes.
pub const SOURCE_PREFIX: &str = "brevis.source/";
/// Largest manifest accepted.
pub const MAX_MANIFEST_LEN: u64 = 64 << 20;

/// The manifest of a mirror.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    /// Manifest schema version (1).
    pub manifest_version: u32,
    /// Tool that wrote it, e.g. `brevis-hub 0.1.0`.
    pub tool: String,
    /// `.brv` format version of the archives.
    pub format_version: u16,
    /// Where the files come from.
    pub source: Source,
    /// One entry per source file.
    pub files: Vec<FileEntry>,
}

/// The source repo and commit.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Source {
    /// Source repo id.
    pub repo: String,
    /// Revision asked for (e.g. `main`).
    pub revision: String,
    /// Commit that revision resolved to.
    pub commit: String,
}

/// How a source file is stored in the mirror.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// A `.brv` archive.
    Brv,
    /// The file unchanged.
    Identity,
}

/// One source file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileEntry {
    /// Path in the source repo.
    pub path: String,
    /// Size of the original.
    pub size: u64,
    /// SHA-256 of the original (hex; the Hub's LFS oid for LFS files).
    pub sha256: String,
    /// Git blob id of the source entry (of the LFS pointer for LFS files).
    pub git_oid: String,
    /// Whether the source stores it with LFS.
    pub lfs: bool,
    /// How it is stored in the mirror.
    pub encoding: Encoding,
    /// Path of the stored file (archive) in the mirror.
    pub archive: String,
    /// Size of the stored file.
    pub archive_size: u64,
}

impl FileEntry {
    /// The id the HF cache names the blob by (and the source's ETag).
    pub fn etag(&self) -> &str {
        if self.lfs {
            &self.sha256
        } else {
            &self.git_oid
        }
    }
}

impl Manifest {
    /// Parse and validate (repo ids, paths, hashes).
    pub fn from_json(text: &[u8], origin: &str) -> Result<Manifest> {
        let bad = |r: String| HubError::Manifest {
            repo: origin.into(),
            reason: r,
        };
        let mut m: Manifest = serde_json::from_slice(text).map_err(|e| bad(e.to_string()))?;
        if m.manifest_version != 1 {
            return Err(bad(format!(
                "unknown manifest_version {}",
                m.manifest_version
            )));
        }
        check_repo_id(&m.source.repo)?;
        check_revision(&m.source.revision)?;
        if !is_hex(&m.source.commit, 40) {
            return Err(bad("source commit is not a commit id".into()));
        }
        // Commit ids are lower case on the Hub and in the HF cache (its
        // snapshot folders and refs): the one used as such here too.
        m.source.commit.make_ascii_lowercase();
        let mut seen = std::collections::HashSet::new();
        for f in &m.files {
            check_repo_path(&f.path)?;
            check_repo_path(&f.archive)?;
            if !is_hex(&f.sha256, 64) || !is_hex(&f.git_oid, 40) {
                return Err(bad(format!("{}: bad hash", f.path)));
            }
            if !seen.insert(f.path.as_str()) {
                return Err(bad(format!("{}: listed twice", f.path)));
            }
        }
        Ok(m)
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    /// Sum of original sizes.
    pub fn source_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// Sum of stored sizes.
    pub fn stored_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.archive_size).sum()
    }
}

pub(crate) fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}
