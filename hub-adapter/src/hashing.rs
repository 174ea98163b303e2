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
    /// Git blob id of the content (hex).
    pub git_oid: String,
}

impl FileHashes {
    /// SHA-256 as lowercase hex.
    pub fn sha256_hex(&self) -> String {
        hex::encode(self.sha256)
    }
}

/// Hash a file (blocking).
pub fn hash_file(path: &Path) -> Result<FileHashes> {
    let mut f = std::fs::File::open(path).map_err(|e| HubError::io(path, e))?;
    let size = f.metadata().map_err(|e| HubError::io(path, e))?.len();
    let mut sha = Sha256::new();
    let mut git = Sha1::new();
    git.update(format!("blob {size}\0").as_bytes());
    let mut buf = vec![0u8; 1 << 20];
    let mut seen = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(|e| HubError::io(path, e))?;
        if n == 0 {
            break;
        }
        sha.update(&buf[..n]);
        git.update(&buf[..n]);
        seen += n as u64;
    }
    if seen != size {
        return Err(HubError::io(
            path,
            std::io::Error::other("file changed while hashing"),
        ));
    }
    Ok(FileHashes {
        size,
        sha256: sha.finalize().into(),
        git_oid: hex::encode(git.finalize()),
    })
}

/// Hash bytes in memory.
pub fn hash_bytes(data: &[u8]) -> FileHashes {
    let mut git = Sha1::new();
    git.update(format!("blob {}\0", data.len()).as_bytes());
    git.update(data);
    FileHashes {
        size: data.len() as u64,
        sha256: Sha256::digest(data).into(),
        git_oid: hex::encode(git.finalize()),
    }
}

/// Hash a file on the blocking pool.
pub async fn hash_file_async(path: &Path) -> Result<FileHashes> {
    let p = path.to_path_buf();
    tokio::task::spawn_blocking(move || hash_file(&p))
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

/// A writer that only hashes (and counts) what goes through it.
#[derive(Default)]
pub struct HashWriter {
    sha: Sha256,
    /// Bytes written.
    pub len: u64,
}

impl HashWriter {
    /// A fresh writer.
    pub fn new() -> Self {
        Self::default()
    }
    /// The SHA-256 of everything written.
    pub fn finish(self) -> [u8; 32] {
        self.sha.finalize().into()
    }
}

impl Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.sha.update(buf);
        self.len += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A writer that passes everything to `inner` while computing the SHA-256
/// and the git blob id of it. The git blob id needs the length first: it is
/// computed for `expected_len` bytes, and is only meaningful (and only
/// checked by callers) when that many bytes went through.
pub struct TeeHasher<W: Write> {
    inner: W,
    sha: Sha256,
    git: Sha1,
    len: u64,
}

impl<W: Write> TeeHasher<W> {
    /// Hash what is written to `inner`, expecting `expected_len` bytes.
    pub fn new(inner: W, expected_len: u64) -> Self {
        let mut git = Sha1::new();
        git.update(format!("blob {expected_len}\0").as_bytes());
        TeeHasher {
            inner,
            sha: Sha256::new(),
            git,
            len: 0,
        }
    }
    /// The inner writer and the hashes of everything written.
    pub fn finish(self) -> (W, FileHashes) {
        (
            self.inner,
            FileHashes {
                size: self.len,
                sha256: self.sha.finalize().into(),
                git_oid: hex::encode(self.git.finalize()),
            },
        )
    }
}

impl<W: Write> Write for TeeHasher<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        let done = buf.get(..n).unwrap_or(buf);
        self.sha.update(done);
        self.git.update(done);
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
            hash_bytes(b"hello\n").git_oid,
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
    }

    #[test]
    fn tee_hashes_what_it_passes_on() {
        let mut t = TeeHasher::new(Vec::new(), 6);
        t.write_all(b"hel").unwrap();
        t.write_all(b"lo\n").unwrap();
        let (out, h) = t.finish();
        assert_eq!(out, b"hello\n");
        assert_eq!(h, hash_bytes(b"hello\n"));
    }
}
