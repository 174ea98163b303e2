//! The Hugging Face cache layout:
//! `models--org--name/{blobs/<etag>, snapshots/<commit>/<path>, refs/<revision>}`,
//! with snapshot entries as relative symlinks into `blobs/`.

use std::path::{Path, PathBuf};

use crate::error::{HubError, Result};
use crate::paths::{check_repo_id, check_repo_path, check_revision, is_commit_id};

/// The default cache folder: `HF_HUB_CACHE`, else `HF_HOME/hub`, else
/// `~/.cache/huggingface/hub` (what `huggingface_hub` uses).
pub fn default_cache_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("HF_HUB_CACHE").filter(|v| !v.is_empty()) {
        return PathBuf::from(p);
    }
    hf_home().join("hub")
}

/// `HF_HOME`, else `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`.
pub fn hf_home() -> PathBuf {
    if let Some(p) = std::env::var_os("HF_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(p);
    }
    if let Some(p) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(p).join("huggingface");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("huggingface")
}

/// One model repo's folder in an HF cache.
#[derive(Debug, Clone)]
pub struct RepoCache {
    root: PathBuf,
}

impl RepoCache {
    /// The folder of `repo` under `cache_dir`.
    pub fn new(cache_dir: &Path, repo: &str) -> Result<RepoCache> {
        check_repo_id(repo)?;
        Ok(RepoCache {
            root: cache_dir.join(format!("models--{}", repo.replace('/', "--"))),
        })
    }

    /// `models--org--name`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Path of a blob.
    pub fn blob_path(&self, etag: &str) -> Result<PathBuf> {
        if etag.is_empty() || !etag.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(HubError::invalid("etag", etag, "not hex"));
        }
        Ok(self.root.join("blobs").join(etag))
    }

    /// Path of a file in a snapshot.
    pub fn snapshot_path(&self, commit: &str, path: &str) -> Result<PathBuf> {
        check_revision(commit)?;
        check_repo_path(path)?;
        Ok(self.root.join("snapshots").join(commit).join(path))
    }

    /// Point `snapshots/<commit>/<path>` at `blobs/<etag>` (relative symlink,
    /// replaced atomically).
    pub fn link(&self, commit: &str, path: &str, etag: &str) -> Result<()> {
        let dst = self.snapshot_path(commit, path)?;
        self.blob_path(etag)?;
        let depth = path.split('/').count() - 1;
        let mut target = PathBuf::new();
        for _ in 0..depth + 2 {
            target.push("..");
        }
        target.push("blobs");
        target.push(etag);
        let parent = dst.parent().unwrap_or(&self.root);
        std::fs::create_dir_all(parent).map_err(|e| HubError::io(parent, e))?;
        // Unique per call, not only per process: two pulls in one process
        // (a library user's tasks) may link the same path at once.
        static LINKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let tmp = parent.join(format!(
            ".{}.brevis-link-{}-{}",
            dst.file_name().and_then(|n| n.to_str()).unwrap_or("x"),
            std::process::id(),
            LINKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&tmp);
        symlink(&target, &tmp).map_err(|e| HubError::io(&tmp, e))?;
        if let Err(e) = std::fs::rename(&tmp, &dst) {
            // E.g. a folder where the link goes: leave no stray link behind.
            let _ = std::fs::remove_file(&tmp);
            return Err(HubError::io(&dst, e));
        }
        Ok(())
    }

    /// The commit `refs/<revision>` names, if the cache has that ref.
    pub fn get_ref(&self, revision: &str) -> Result<Option<String>> {
        check_revision(revision)?;
        match std::fs::read_to_string(self.root.join("refs").join(revision)) {
            Ok(s) => Ok(Some(s.trim().to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(HubError::io(self.root.join("refs").join(revision), e)),
        }
    }

    /// Write `refs/<revision>` = `commit` (atomically). A revision that is
    /// a commit id names no ref: nothing is written (as `huggingface_hub`).
    pub fn set_ref(&self, revision: &str, commit: &str) -> Result<()> {
        check_revision(revision)?;
        if revision == commit || is_commit_id(revision) {
            return Ok(());
        }
        let p = self.root.join("refs").join(revision);
        write_atomic(&p, commit.as_bytes())
    }
}

/// Write a file through a temp file in the same folder and a rename. The
/// temp file is unnamed (`O_TMPFILE`) where the system allows, so a killed
/// run leaves nothing behind.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    use std::io::Write;
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| HubError::io(parent, e))?;
    let tmp = brevis_core::TempFile::beside(path).map_err(|e| HubError::io(path, e))?;
    let mut f = tmp.file().map_err(|e| HubError::io(path, e))?;
    f.write_all(data).map_err(|e| HubError::io(path, e))?;
    // Refs and manifests are ordinary files (0644, as `huggingface_hub`
    // leaves them), whatever the umask made of the temp file.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o644))
            .map_err(|e| HubError::io(path, e))?;
    }
    drop(f);
    tmp.persist(path, true).map_err(|e| HubError::io(path, e))?;
    Ok(())
}

#[cfg(unix)]
fn symlink(target: &Path, link: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, link)
}

#[cfg(not(unix))]
fn symlink(target: &Path, link: &Path) -> std::io::Result<()> {
    // Without symlinks, copy the blob (as huggingface_hub does on Windows).
    let base = link.parent().unwrap_or(Path::new("."));
    std::fs::copy(base.join(target), link).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let d = tempfile::tempdir().unwrap();
        let c = RepoCache::new(d.path(), "org/name").unwrap();
        let etag = "ab".repeat(32);
        std::fs::create_dir_all(c.root().join("blobs")).unwrap();
        std::fs::write(c.blob_path(&etag).unwrap(), b"x").unwrap();
        let commit = "1".repeat(40);
        c.link(&commit, "sub/dir/f.bin", &etag).unwrap();
        c.set_ref("main", &commit).unwrap();
        // A commit id names no ref.
        c.set_ref(&"2".repeat(40), &commit).unwrap();
        assert!(!c.root().join("refs").join("2".repeat(40)).exists());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(c.root().join("refs/main"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o644);
        }
        let p = c.snapshot_path(&commit, "sub/dir/f.bin").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"x");
        assert!(std::fs::read_link(&p).unwrap().starts_with("../../../.."));
        assert!(c.snapshot_path(&commit, "../x").is_err());
    }

    #[test]
    fn failed_link_leaves_nothing_behind() {
        let d = tempfile::tempdir().unwrap();
        let c = RepoCache::new(d.path(), "org/name").unwrap();
        let etag = "ab".repeat(32);
        let commit = "1".repeat(40);
        let snap = c.root().join("snapshots").join(&commit);
        // A non-empty folder where the link goes: the rename fails.
        std::fs::create_dir_all(snap.join("LICENSE/x")).unwrap();
        assert!(c.link(&commit, "LICENSE", &etag).is_err());
        let names: Vec<String> = std::fs::read_dir(&snap)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["LICENSE"]);
    }
}
