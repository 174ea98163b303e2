//! File hashes: SHA-256 (the LFS oid) and the git blob id (SHA-1 of
//! `blob <len>\0` + content, the ETag of regular files).

use std::io::{Read, Write};
use std::path::Path;

use sha1::Sha1;
use sha2::{Digest, Sha256};

use crate::error::{HubError, Result};

/// Size and hashes of one file's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileHashes {
    /// Length in bytes.
    pub size: u64,
    /// SHA-256 of the content.
    pub sha256: [u8; 32],
    /// Git blob id of the content (hex), where it was asked for: it is the
    /// identity of a regular (non-LFS) file only, and a second full pass
    /// over the bytes (SHA-1) that LFS files do not need.
    pub git_oid: Option<String>,
}

impl FileHashes {
    /// SHA-256 as lowercase hex.
    pub fn sha256_hex(&self) -> String {
        hex::encode(self.sha256)
    }
}

/// Hash a file (blocking): its SHA-256, and its git blob id when `git`.
pub fn hash_file(path: &Path, git: bool) -> Result<FileHashes> {
    let mut f = std::fs::File::open(path).map_err(|e| HubError::io(path, e))?;
    let size = f.metadata().map_err(|e| HubError::io(path, e))?.len();
    let mut h = StreamHasher::new(size, git);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| HubError::io(path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    if h.len() != size {
        return Err(HubError::io(
            path,
            std::io::Error::other("file changed while hashing"),
        ));
    }
    Ok(h.finish())
}

/// A SHA-1 fed git's blob header for `size` bytes of content.
fn blob_hasher(size: u64) -> Sha1 {
    let mut git = Sha1::new();
    git.update(format!("blob {size}\0").as_bytes());
    git
}

/// The git blob id of bytes in memory (hex).
pub fn git_blob_id(data: &[u8]) -> String {
    let mut git = blob_hasher(data.len() as u64);
    git.update(data);
    hex::encode(git.finalize())
}

/// Hash bytes in memory (both hashes).
pub fn hash_bytes(data: &[u8]) -> FileHashes {
    FileHashes {
        size: data.len() as u64,
        sha256: Sha256::digest(data).into(),
        git_oid: Some(git_blob_id(data)),
    }
}

/// [`hash_file`] on the blocking pool.
pub async fn hash_file_async(path: &Path, git: bool) -> Result<FileHashes> {
    let p = path.to_path_buf();
    tokio::task::spawn_blocking(move || hash_file(&p, git))
        .await
        .map_err(|e| HubError::io(path, std::io::Error::other(e.to_string())))?
}

/// The first `n` bytes of a file (fewer if it is shorter).
pub async fn read_sample(path: &Path, n: usize) -> Result<Vec<u8>> {
    read_range(path, 0, n as u64).await
}

/// `len` bytes of a file from `start` (fewer at the end of the file).
pub async fn read_range(path: &Path, start: u64, len: u64) -> Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let mut f = tokio::fs::File::open(path)
        .await
        .map_err(|e| HubError::io(path, e))?;
    f.seek(std::io::SeekFrom::Start(start))
        .await
        .map_err(|e| HubError::io(path, e))?;
    let mut out = Vec::new();
    f.take(len)
        .read_to_end(&mut out)
        .await
        .map_err(|e| HubError::io(path, e))?;
    Ok(out)
}

/// A streaming request body reading a file.
pub fn file_body(path: &Path) -> Result<reqwest::Body> {
    let f = std::fs::File::open(path).map_err(|e| HubError::io(path, e))?;
    let f = tokio::fs::File::from_std(f);
    Ok(reqwest::Body::wrap_stream(
        tokio_util::io::ReaderStream::new(f),
    ))
}

/// The SHA-256 and, when asked, the git blob id of bytes fed in order (a
/// download hashed as it arrives, not read back afterwards).
pub struct StreamHasher {
    sha: Sha256,
    git: Option<Sha1>,
    len: u64,
}

impl StreamHasher {
    /// A hasher for content of `expected_len` bytes (the git blob id needs
    /// the length first, and is only meaningful if that many are fed).
    pub fn new(expected_len: u64, git: bool) -> Self {
        StreamHasher {
            sha: Sha256::new(),
            git: git.then(|| blob_hasher(expected_len)),
            len: 0,
        }
    }
    /// Feed the next bytes.
    pub fn update(&mut self, data: &[u8]) {
        self.sha.update(data);
        if let Some(g) = &mut self.git {
            g.update(data);
        }
        self.len += data.len() as u64;
    }
    /// Bytes fed so far.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// Whether nothing was fed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The hashes of everything fed.
    pub fn finish(self) -> FileHashes {
        FileHashes {
            size: self.len,
            sha256: self.sha.finalize().into(),
            git_oid: self.git.map(|g| hex::encode(g.finalize())),
        }
    }
}

/// A writer that passes everything to `inner`, counting it and hashing it
/// as asked: the SHA-256 (not where the producer already hashes what it
/// writes, as the archive decoder does) and the git blob id (only regular
/// files need it). The git blob id needs the length first: it is computed
/// for `expected_len` bytes, and is only meaningful (and only checked by
/// callers) when that many bytes went through.
pub struct TeeHasher<W: Write> {
    inner: W,
    sha: Option<Sha256>,
    git: Option<Sha1>,
    len: u64,
}

/// What a [`TeeHasher`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Teed {
    /// Bytes passed on.
    pub len: u64,
    /// Their SHA-256, if asked for.
    pub sha256: Option<[u8; 32]>,
    /// Their git blob id (hex), if asked for.
    pub git_oid: Option<String>,
}

impl<W: Write> TeeHasher<W> {
    /// Pass what is written on to `inner`, expecting `expected_len` bytes,
    /// hashing it with SHA-256 when `sha256` and git's blob id when `git`.
    pub fn new(inner: W, expected_len: u64, sha256: bool, git: bool) -> Self {
        TeeHasher {
            inner,
            sha: sha256.then(Sha256::new),
            git: git.then(|| blob_hasher(expected_len)),
            len: 0,
        }
    }
    /// The inner writer and what went through.
    pub fn finish(self) -> (W, Teed) {
        (
            self.inner,
            Teed {
                len: self.len,
                sha256: self.sha.map(|s| s.finalize().into()),
                git_oid: self.git.map(|g| hex::encode(g.finalize())),
            },
        )
    }
}

impl<W: Write> Write for TeeHasher<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        let done = buf.get(..n).unwrap_or(buf);
        if let Some(s) = &mut self.sha {
            s.update(done);
        }
        if let Some(g) = &mut self.git {
            g.update(done);
        }
        self.len += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_blob_id() {
        // `printf 'hello\n' | git hash-object --stdin`
        assert_eq!(
            hash_bytes(b"hello\n").git_oid.as_deref(),
            Some("ce013625030ba8dba906f756967f9e9ca394464a")
        );
    }

    #[test]
    fn tee_hashes_what_it_passes_on() {
        let want = hash_bytes(b"hello\n");
        for (sha256, git) in [(true, true), (true, false), (false, true), (false, false)] {
            let mut t = TeeHasher::new(Vec::new(), 6, sha256, git);
            t.write_all(b"hel").unwrap();
            t.write_all(b"lo\n").unwrap();
            let (out, h) = t.finish();
            assert_eq!(out, b"hello\n");
            assert_eq!(h.len, 6);
            assert_eq!(h.sha256, sha256.then_some(want.sha256));
            assert_eq!(h.git_oid, want.git_oid.clone().filter(|_| git));
        }
    }

    #[test]
    fn file_hashes_compute_the_blob_id_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"hello\n").unwrap();
        assert_eq!(hash_file(&p, true).unwrap(), hash_bytes(b"hello\n"));
        let h = hash_file(&p, false).unwrap();
        assert_eq!(
            (h.size, h.sha256, h.git_oid),
            (6, hash_bytes(b"hello\n").sha256, None)
        );
    }

    #[test]
    fn a_stream_hashes_as_the_whole() {
        let mut s = StreamHasher::new(6, true);
        s.update(b"hel");
        s.update(b"");
        s.update(b"lo\n");
        assert_eq!(s.len(), 6);
        assert_eq!(s.finish(), hash_bytes(b"hello\n"));
        let mut s = StreamHasher::new(6, false);
        s.update(b"hello\n");
        let h = s.finish();
        assert_eq!((h.sha256, h.git_oid), (hash_bytes(b"hello\n").sha256, None));
    }
}
