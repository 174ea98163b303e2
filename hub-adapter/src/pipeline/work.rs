//! The work folder: a lock per run, and the temp files a killed run left.

use std::path::{Path, PathBuf};

use crate::error::{HubError, Result};

use super::blocking;
use super::options::Notes;

/// A held `DIR/NAME.lock`. Dropping it removes the file while still holding
/// the lock, then releases it: no lock file is left behind, and a run that
/// opened the file before it was removed sees, once it holds the lock, that
/// the path no longer names its file and takes the lock again
/// ([`lock_work`]).
pub(super) struct WorkLock {
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
pub(super) async fn lock_work(dir: &Path, name: &str, note: &Notes) -> Result<WorkLock> {
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
pub(super) fn clean_stale_temps(dst: &Path) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::options::quiet_notes;

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
