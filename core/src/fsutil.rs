//! Atomic file writes: a temp file beside the destination, renamed over it
//! only when complete. A temp file that is never persisted is removed.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// A temp file in the destination's folder, removed on drop unless persisted.
pub struct TempFile {
    path: PathBuf,
    done: bool,
}

impl TempFile {
    /// Create `.NAME.PID.N.tmp` beside `dst`.
    pub fn beside(dst: &Path) -> io::Result<TempFile> {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let dir = match dst.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = dst
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "out".into());
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
        File::create(&path)?;
        Ok(TempFile { path, done: false })
    }

    /// Open the temp file for writing (and reading back).
    pub fn file(&self) -> io::Result<File> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
    }

    /// Where the temp file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sync and rename over `dst`. Without `overwrite`, fails if `dst` exists.
    pub fn persist(mut self, dst: &Path, overwrite: bool) -> io::Result<()> {
        File::open(&self.path)?.sync_all()?;
        if !overwrite {
            // hard_link fails if dst exists: no window where it is clobbered.
            std::fs::hard_link(&self.path, dst)?;
            std::fs::remove_file(&self.path)?;
        } else {
            std::fs::rename(&self.path, dst)?;
        }
        self.done = true;
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
