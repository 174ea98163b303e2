//! Atomic file writes: a temp file in the destination's folder, published
//! under the destination's name only when complete and synced.
//!
//! On Linux the temp file is made with `O_TMPFILE`: it has no name until it
//! is published, so a process that dies before that (SIGINT, SIGTERM,
//! SIGKILL, a crash) leaves nothing behind. It is published with
//! `linkat("/proc/self/fd/N", dst, AT_SYMLINK_FOLLOW)`, which fails if `dst`
//! exists (no clobber); when overwriting, it is linked under a unique temp
//! name that is then renamed over `dst`. Where `O_TMPFILE` is not supported
//! (other systems, file systems without it, no `/proc`), the temp file is a
//! named `.NAME.PID.N.tmp` beside `dst`, removed on drop unless persisted.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Temp names made by this process (`.NAME.PID.N.tmp`), unique per call.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Bytes handed to one `write` call at most by [`Chunked`].
pub const WRITE_CHUNK: usize = 1 << 20;

/// A writer that hands its inner writer at most [`WRITE_CHUNK`] bytes a
/// call (`write_all` loops over them): one write(2) of several MiB from
/// memory costs the kernel several times the time per byte of 1 MiB
/// writes, and a `BufWriter` passes any write at least as long as its
/// buffer straight through.
#[derive(Debug)]
pub struct Chunked<W>(pub W);

impl<W: io::Write> io::Write for Chunked<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(&buf[..buf.len().min(WRITE_CHUNK)])
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl<W: io::Seek> io::Seek for Chunked<W> {
    fn seek(&mut self, pos: io::SeekFrom) -> io::Result<u64> {
        self.0.seek(pos)
    }
}

/// An output file buffered in [`WRITE_CHUNK`] bytes and written in calls
/// of at most that many.
pub fn buffered(file: File) -> io::BufWriter<Chunked<File>> {
    io::BufWriter::with_capacity(WRITE_CHUNK, Chunked(file))
}

/// A temp file in the destination's folder, gone on drop unless persisted.
pub struct TempFile {
    kind: Kind,
    done: bool,
}

enum Kind {
    /// An `O_TMPFILE` file: `file` keeps it alive, `proc` names it.
    #[cfg(target_os = "linux")]
    Unnamed {
        file: File,
        proc: PathBuf,
        dir: PathBuf,
    },
    /// A named temp file.
    Named { path: PathBuf },
}

fn folder_of(dst: &Path) -> PathBuf {
    match dst.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// `DIR/.NAME.PID.N.tmp` for `dst` (not created).
fn temp_name(dir: &Path, dst: &Path) -> PathBuf {
    let name = dst
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()))
}

impl TempFile {
    /// Create a temp file in `dst`'s folder: unnamed (`O_TMPFILE`) where the
    /// system supports it, else `.NAME.PID.N.tmp`.
    pub fn beside(dst: &Path) -> io::Result<TempFile> {
        let dir = folder_of(dst);
        #[cfg(target_os = "linux")]
        if let Some(t) = Self::unnamed_in(&dir)? {
            return Ok(t);
        }
        Self::named_beside(&dir, dst)
    }

    /// The named fallback: `.NAME.PID.N.tmp` in `dir`, created new (never
    /// an existing file opened).
    fn named_beside(dir: &Path, dst: &Path) -> io::Result<TempFile> {
        let mut tries = 0;
        loop {
            let path = temp_name(dir, dst);
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(_) => {
                    return Ok(TempFile {
                        kind: Kind::Named { path },
                        done: false,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 100 => tries += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// An `O_TMPFILE` file in `dir`, or `None` where that is not supported
    /// (or `/proc/self/fd` is missing, without which it cannot be published).
    #[cfg(target_os = "linux")]
    fn unnamed_in(dir: &Path) -> io::Result<Option<TempFile>> {
        use rustix::fs::{Mode, OFlags};
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let fd = match rustix::fs::open(
            dir,
            OFlags::RDWR | OFlags::TMPFILE | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o666),
        ) {
            Ok(fd) => fd,
            // No O_TMPFILE: the file system lacks it (EOPNOTSUPP), or an
            // old kernel read it as O_DIRECTORY (EISDIR) or rejected it.
            Err(e)
                if e == rustix::io::Errno::OPNOTSUPP
                    || e == rustix::io::Errno::ISDIR
                    || e == rustix::io::Errno::INVAL =>
            {
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        let file = File::from(fd);
        let proc = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        // Publishing links this path: it must name this very file.
        let ours = match (std::fs::metadata(&proc), file.metadata()) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        };
        if !ours {
            return Ok(None);
        }
        Ok(Some(TempFile {
            kind: Kind::Unnamed {
                file,
                proc,
                dir: dir.to_path_buf(),
            },
            done: false,
        }))
    }

    /// A new handle on the temp file, for writing (and reading back), with
    /// its own offset at 0.
    pub fn file(&self) -> io::Result<File> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.path())
    }

    /// A path that opens the temp file while it exists (for an unnamed
    /// one, `/proc/self/fd/N`).
    pub fn path(&self) -> &Path {
        match &self.kind {
            #[cfg(target_os = "linux")]
            Kind::Unnamed { proc, .. } => proc,
            Kind::Named { path } => path,
        }
    }

    /// Give the temp file `src`'s permission bits (as `cp`, zstd and gzip
    /// do: a private source stays private in its archive and back), best
    /// effort: a file system without modes keeps its own.
    pub fn set_mode_from(&self, src: &Path) {
        #[cfg(unix)]
        if let Ok(m) = std::fs::metadata(src) {
            use std::os::unix::fs::PermissionsExt;
            let mode = m.permissions().mode() & 0o7777 & !0o6000;
            let _ = std::fs::set_permissions(self.path(), std::fs::Permissions::from_mode(mode));
        }
    }

    /// Sync, then publish as `dst`. Without `overwrite`, fails with
    /// `AlreadyExists` if `dst` exists, and never replaces it.
    pub fn persist(mut self, dst: &Path, overwrite: bool) -> io::Result<()> {
        match &self.kind {
            #[cfg(target_os = "linux")]
            Kind::Unnamed { file, proc, dir } => {
                use rustix::fs::{AtFlags, CWD};
                file.sync_all()?;
                let link = |to: &Path| {
                    rustix::fs::linkat(CWD, proc.as_path(), CWD, to, AtFlags::SYMLINK_FOLLOW)
                        .map_err(io::Error::from)
                };
                if !overwrite {
                    // linkat fails if dst exists: no window where it is clobbered.
                    link(dst)?;
                } else {
                    let mut tries = 0;
                    let named = loop {
                        let t = temp_name(dir, dst);
                        match link(&t) {
                            Ok(()) => break t,
                            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 100 => {
                                tries += 1
                            }
                            Err(e) => return Err(e),
                        }
                    };
                    if let Err(e) = std::fs::rename(&named, dst) {
                        let _ = std::fs::remove_file(&named);
                        return Err(e);
                    }
                }
            }
            Kind::Named { path } => {
                File::open(path)?.sync_all()?;
                if !overwrite {
                    // hard_link fails if dst exists: no window where it is clobbered.
                    std::fs::hard_link(path, dst)?;
                    self.done = true;
                    // dst is published; the temp name is only a second link.
                    let _ = std::fs::remove_file(path);
                } else {
                    std::fs::rename(path, dst)?;
                }
            }
        }
        self.done = true;
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        // An unnamed file vanishes when its descriptor is closed.
        if let Kind::Named { path } = &self.kind
            && !self.done
        {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// Both kinds of temp file, made one at a time: the one `beside`
    /// picks, and the named fallback.
    fn both(dst: &Path) -> impl Iterator<Item = TempFile> + '_ {
        (0..2).map(move |k| match k {
            0 => TempFile::beside(dst).unwrap(),
            _ => TempFile::named_beside(&folder_of(dst), dst).unwrap(),
        })
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn on_linux_the_temp_file_has_no_name_until_published() {
        let d = tempfile::tempdir().unwrap();
        let dst = d.path().join("out.brv");
        let t = TempFile::beside(&dst).unwrap();
        assert!(matches!(t.kind, Kind::Unnamed { .. }), "O_TMPFILE unused");
        t.file().unwrap().write_all(b"half an archive").unwrap();
        // A process killed now leaves nothing in the folder.
        assert!(names(d.path()).is_empty(), "{:?}", names(d.path()));
        t.persist(&dst, false).unwrap();
        assert_eq!(names(d.path()), ["out.brv"]);
        assert_eq!(std::fs::read(&dst).unwrap(), b"half an archive");
    }

    #[test]
    fn persist_publishes_and_leaves_nothing_else() {
        for overwrite in [false, true] {
            let d = tempfile::tempdir().unwrap();
            let dst = d.path().join("out");
            for (i, t) in both(&dst).enumerate() {
                let mut f = t.file().unwrap();
                f.write_all(format!("content {i}").as_bytes()).unwrap();
                // A second handle reads from the start, whatever the first did.
                let mut back = String::new();
                t.file().unwrap().read_to_string(&mut back).unwrap();
                assert_eq!(back, format!("content {i}"));
                f.rewind().unwrap();
                drop(f);
                if i == 1 && !overwrite {
                    std::fs::remove_file(&dst).unwrap();
                }
                t.persist(&dst, overwrite).unwrap();
                assert_eq!(
                    std::fs::read(&dst).unwrap(),
                    format!("content {i}").as_bytes()
                );
                assert_eq!(names(d.path()), ["out"]);
            }
        }
    }

    #[test]
    fn without_overwrite_an_existing_file_is_kept() {
        let d = tempfile::tempdir().unwrap();
        let dst = d.path().join("mine");
        std::fs::write(&dst, b"keep me").unwrap();
        for t in both(&dst) {
            t.file().unwrap().write_all(b"new").unwrap();
            let e = t.persist(&dst, false).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
            assert_eq!(std::fs::read(&dst).unwrap(), b"keep me");
            assert_eq!(names(d.path()), ["mine"]);
        }
    }

    #[test]
    fn a_temp_file_dropped_unpersisted_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        let dst = d.path().join("out");
        for t in both(&dst) {
            t.file().unwrap().write_all(b"partial").unwrap();
            drop(t);
            assert!(names(d.path()).is_empty(), "{:?}", names(d.path()));
        }
    }

    #[test]
    fn the_named_fallback_never_opens_an_existing_file() {
        let d = tempfile::tempdir().unwrap();
        let dst = d.path().join("out");
        let t = TempFile::named_beside(d.path(), &dst).unwrap();
        let taken = t.path().to_path_buf();
        drop(t);
        // Someone else's file under the next names is left alone.
        let n = COUNTER.load(Ordering::Relaxed);
        let theirs = d
            .path()
            .join(format!(".out.{}.{n}.tmp", std::process::id()));
        std::fs::write(&theirs, b"theirs").unwrap();
        let t = TempFile::named_beside(d.path(), &dst).unwrap();
        assert_ne!(t.path(), theirs);
        assert_ne!(t.path(), taken);
        drop(t);
        assert_eq!(std::fs::read(&theirs).unwrap(), b"theirs");
    }
}
