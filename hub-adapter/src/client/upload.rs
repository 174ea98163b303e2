//! Uploads: preupload, the LFS batch API (basic and multipart), the NDJSON commit.

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine as _;
use brevis_core::ProgressSink;
use futures_util::StreamExt as _;
use reqwest::Method;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

use crate::error::{HubError, Result};
use crate::hashing;
use crate::paths::{check_repo_id, check_repo_path, check_revision, encode};

use super::{CommitInfo, HubClient, RepoFile, UploadFile, UploadStats, check};

/// The most changes (files added, changed or deleted) one commit holds, as
/// the Hub advises.
pub const MAX_COMMIT_FILES: usize = 100;

/// Files asked about in one preupload request, as `huggingface_hub` sends
/// them (the Hub refuses longer lists).
const PREUPLOAD_BATCH: usize = 250;

/// Bytes of a file's start sent with its preupload question (the Hub
/// looks at them to choose LFS or not).
const PREUPLOAD_SAMPLE: usize = 512;

/// Objects asked about in one LFS batch request (the batch API's usual
/// limit).
const LFS_BATCH: usize = 100;

pub(super) fn header_map(h: Option<&serde_json::Map<String, Value>>) -> HeaderMap {
    let mut out = HeaderMap::new();
    if let Some(h) = h {
        for (k, v) in h {
            if let (Ok(name), Some(Ok(val))) = (
                reqwest::header::HeaderName::from_bytes(k.as_bytes()),
                v.as_str().map(HeaderValue::from_str),
            ) {
                out.insert(name, val);
            }
        }
    }
    out
}

/// The NDJSON body of a commit on `parent` (see [`HubClient::commit`]),
/// and the bytes of the files sent inline in it.
async fn commit_lines(
    summary: &str,
    parent: &str,
    lfs: &[&UploadFile],
    regular: &[&UploadFile],
    deleted: &[String],
) -> Result<(Vec<u8>, u64)> {
    let mut lines = Vec::new();
    let mut header = serde_json::to_vec(&json!({"key": "header", "value": {
        "summary": summary, "description": "", "parentCommit": parent,
    }}))
    .unwrap_or_default();
    header.push(b'\n');
    lines.extend(header);
    let mut inline = 0u64;
    for f in regular {
        let data = tokio::fs::read(&f.local)
            .await
            .map_err(|e| HubError::io(&f.local, e))?;
        inline += data.len() as u64;
        let v = json!({"key": "file", "value": {
            "path": f.path_in_repo,
            "encoding": "base64",
            "content": base64::engine::general_purpose::STANDARD.encode(&data),
        }});
        lines.extend(serde_json::to_vec(&v).unwrap_or_default());
        lines.push(b'\n');
    }
    for f in lfs {
        let v = json!({"key": "lfsFile", "value": {
            "path": f.path_in_repo, "algo": "sha256", "oid": f.hashes.sha256_hex(), "size": f.hashes.size,
        }});
        lines.extend(serde_json::to_vec(&v).unwrap_or_default());
        lines.push(b'\n');
    }
    for p in deleted {
        let v = json!({"key": "deletedFile", "value": {"path": p}});
        lines.extend(serde_json::to_vec(&v).unwrap_or_default());
        lines.push(b'\n');
    }
    Ok((lines, inline))
}

impl HubClient {
    /// Ask which files go through LFS and which the server already has
    /// (`/api/models/{repo}/preupload/{rev}`). Returns, per file in order,
    /// (is LFS, remote git blob id if the path already exists).
    pub async fn preupload(
        &self,
        repo: &str,
        revision: &str,
        files: &[UploadFile],
    ) -> Result<Vec<(bool, Option<String>)>> {
        let url = format!(
            "{}/api/models/{}/preupload/{}",
            self.endpoint,
            repo,
            encode(revision, false)
        );
        let mut out = Vec::with_capacity(files.len());
        for chunk in files.chunks(PREUPLOAD_BATCH) {
            let mut list = Vec::new();
            for f in chunk {
                let sample = hashing::read_sample(&f.local, PREUPLOAD_SAMPLE).await?;
                list.push(json!({
                    "path": f.path_in_repo,
                    "size": f.hashes.size,
                    "sample": base64::engine::general_purpose::STANDARD.encode(sample),
                }));
            }
            let body = json!({"files": list});
            let resp = self
                .send(repo, "preupload", || {
                    Ok(self.request(Method::POST, &url).json(&body))
                })
                .await?;
            let resp = check(resp, repo, None, Some(revision), "preupload", self).await?;
            let v = self.json(resp, repo, "preupload").await?;
            let answers = v
                .get("files")
                .and_then(Value::as_array)
                .ok_or_else(|| HubError::protocol(repo, "preupload", "no files"))?;
            for f in chunk {
                let a = answers
                    .iter()
                    .find(|a| a.get("path").and_then(Value::as_str) == Some(&f.path_in_repo))
                    .ok_or_else(|| {
                        HubError::protocol(
                            repo,
                            "preupload",
                            format!("no answer for {}", f.path_in_repo),
                        )
                    })?;
                let lfs = a.get("uploadMode").and_then(Value::as_str) == Some("lfs");
                let oid = a.get("oid").and_then(Value::as_str).map(String::from);
                out.push((lfs, oid));
            }
        }
        Ok(out)
    }

    /// Upload LFS objects the server does not have yet (LFS batch API, basic
    /// or multipart transfer, then verify). Returns (bytes sent, objects
    /// sent, objects already present).
    pub async fn upload_lfs(
        &self,
        repo: &str,
        revision: &str,
        files: &[&UploadFile],
        progress: Arc<dyn ProgressSink>,
    ) -> Result<(u64, usize, usize)> {
        let url = format!("{}/{}.git/info/lfs/objects/batch", self.endpoint, repo);
        let mut todo: Vec<(&UploadFile, Value)> = Vec::new();
        let mut present = 0usize;
        for chunk in files.chunks(LFS_BATCH) {
            let objects: Vec<Value> = chunk
                .iter()
                .map(|f| json!({"oid": f.hashes.sha256_hex(), "size": f.hashes.size}))
                .collect();
            let body = json!({
                "operation": "upload",
                "transfers": ["basic", "multipart"],
                "objects": objects,
                "hash_algo": "sha256",
                "ref": {"name": format!("refs/heads/{revision}")},
            });
            let body = serde_json::to_vec(&body).unwrap_or_default();
            let resp = self
                .send(repo, "LFS batch", || {
                    Ok(self
                        .request(Method::POST, &url)
                        .header("Accept", "application/vnd.git-lfs+json")
                        .header("Content-Type", "application/vnd.git-lfs+json")
                        .body(body.clone()))
                })
                .await?;
            let resp = check(resp, repo, None, Some(revision), "LFS batch", self).await?;
            let v = self.json(resp, repo, "LFS batch").await?;
            let objs = v
                .get("objects")
                .and_then(Value::as_array)
                .ok_or_else(|| HubError::protocol(repo, "LFS batch", "no objects"))?;
            for f in chunk {
                let oid = f.hashes.sha256_hex();
                let o = objs
                    .iter()
                    .find(|o| o.get("oid").and_then(Value::as_str) == Some(&oid))
                    .ok_or_else(|| {
                        HubError::protocol(repo, "LFS batch", "object missing in answer")
                    })?;
                if let Some(err) = o.get("error") {
                    return Err(HubError::Http {
                        repo: repo.into(),
                        file: Some(f.path_in_repo.clone()),
                        what: "LFS batch",
                        status: err.get("code").and_then(Value::as_u64).unwrap_or(0) as u16,
                        message: err
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .into(),
                    });
                }
                match o.get("actions") {
                    Some(a) if a.get("upload").is_some() => todo.push((f, a.clone())),
                    _ => present += 1,
                }
            }
        }
        let total: u64 = todo.iter().map(|(f, _)| f.hashes.size).sum();
        progress.begin(&format!("upload {repo}"), todo.len(), total);
        // The futures are made first: a stream holding the closure that
        // makes them is not `Send` for every lifetime, and `mirror` sends
        // objects from spawned tasks.
        let sends: Vec<_> = todo
            .iter()
            .map(|(f, actions)| {
                let p = brevis_core::FileProgress::new(progress.clone(), f.path_in_repo.clone());
                async move {
                    p.start("upload", f.hashes.size);
                    let sent = self.upload_one(repo, f, actions, &p).await;
                    p.finish();
                    sent
                }
            })
            .collect();
        let results: Vec<Result<u64>> = futures_util::stream::iter(sends)
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        progress.end();
        let mut sent = 0;
        for r in results {
            sent += r?;
        }
        Ok((sent, todo.len(), present))
    }

    /// Send one LFS object as the batch answer's `actions` say (basic or
    /// multipart, then verify); returns its size.
    pub(super) async fn upload_one(
        &self,
        repo: &str,
        f: &UploadFile,
        actions: &Value,
        progress: &dyn ProgressSink,
    ) -> Result<u64> {
        let upload = &actions["upload"];
        let href = upload
            .get("href")
            .and_then(Value::as_str)
            .ok_or_else(|| HubError::protocol(repo, "LFS upload", "no href"))?;
        let header = upload.get("header").and_then(Value::as_object);
        let chunk_size = header.and_then(|h| h.get("chunk_size")).and_then(|c| {
            c.as_str()
                .and_then(|s| s.parse::<u64>().ok())
                .or(c.as_u64())
        });
        let size = f.hashes.size;
        if let (Some(chunk), Some(h)) = (chunk_size, header) {
            self.upload_parts(repo, f, href, h, chunk, progress).await?;
        } else {
            let local = f.local.clone();
            let hdrs = header_map(header);
            let resp = self
                .send(repo, "LFS upload", || {
                    let body = hashing::file_body(&local)?;
                    // With its length: S3's presigned PUTs refuse a chunked
                    // body (501) and a missing length (411).
                    Ok(self
                        .request(Method::PUT, href)
                        .headers(hdrs.clone())
                        .header(reqwest::header::CONTENT_LENGTH, size)
                        .body(body))
                })
                .await?;
            check(resp, repo, Some(&f.path_in_repo), None, "LFS upload", self).await?;
            progress.advance(size);
        }
        if let Some(verify) = actions.get("verify") {
            self.verify_lfs(repo, f, verify).await?;
        }
        Ok(size)
    }

    /// Send `f` in parts of `chunk` bytes to the part URLs of `h` (the
    /// multipart transfer's header), then complete it at `href`.
    async fn upload_parts(
        &self,
        repo: &str,
        f: &UploadFile,
        href: &str,
        h: &serde_json::Map<String, Value>,
        chunk: u64,
        progress: &dyn ProgressSink,
    ) -> Result<()> {
        let size = f.hashes.size;
        if chunk == 0 {
            return Err(HubError::protocol(repo, "LFS upload", "chunk_size 0"));
        }
        let mut parts: Vec<(u64, String)> = h
            .iter()
            .filter_map(|(k, v)| Some((k.parse::<u64>().ok()?, v.as_str()?.to_string())))
            .collect();
        parts.sort();
        if parts.len() as u64 != size.div_ceil(chunk) {
            return Err(HubError::protocol(
                repo,
                "LFS upload",
                "wrong number of parts",
            ));
        }
        let mut etags = Vec::new();
        for (i, (n, part_url)) in parts.iter().enumerate() {
            let start = i as u64 * chunk;
            let len = chunk.min(size - start);
            let data = hashing::read_range(&f.local, start, len).await?;
            let resp = self
                .send(repo, "LFS part upload", || {
                    Ok(self.request(Method::PUT, part_url).body(data.clone()))
                })
                .await?;
            let resp = check(
                resp,
                repo,
                Some(&f.path_in_repo),
                None,
                "LFS part upload",
                self,
            )
            .await?;
            let etag = resp
                .headers()
                .get("etag")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            etags.push(json!({"partNumber": n, "etag": etag}));
            progress.advance(len);
        }
        let body = json!({"oid": f.hashes.sha256_hex(), "parts": etags});
        let resp = self
            .send(repo, "LFS multipart completion", || {
                Ok(self
                    .request(Method::POST, href)
                    .header("Accept", "application/vnd.git-lfs+json")
                    .header("Content-Type", "application/vnd.git-lfs+json")
                    .json(&body))
            })
            .await?;
        check(
            resp,
            repo,
            Some(&f.path_in_repo),
            None,
            "LFS multipart completion",
            self,
        )
        .await?;
        Ok(())
    }

    /// The LFS `verify` action: tell the server the object is complete.
    async fn verify_lfs(&self, repo: &str, f: &UploadFile, verify: &Value) -> Result<()> {
        let size = f.hashes.size;
        let vurl = verify
            .get("href")
            .and_then(Value::as_str)
            .ok_or_else(|| HubError::protocol(repo, "LFS verify", "no href"))?;
        let hdrs = header_map(verify.get("header").and_then(Value::as_object));
        let body = json!({"oid": f.hashes.sha256_hex(), "size": size});
        let resp = self
            .send(repo, "LFS verify", || {
                Ok(self
                    .request(Method::POST, vurl)
                    .headers(hdrs.clone())
                    .json(&body))
            })
            .await?;
        check(resp, repo, Some(&f.path_in_repo), None, "LFS verify", self).await?;
        Ok(())
    }

    /// Make a commit with the NDJSON commit API. `lfs` files are referenced by
    /// SHA-256 (their objects must be uploaded already); `regular` files are
    /// sent inline; `deleted` paths are removed.
    ///
    /// The commit names the branch's head as its parent, and is never sent
    /// twice blindly: when its POST fails without an answer or with a 5xx,
    /// the branch is read again; if it moved to a commit that holds exactly
    /// these changes, that is this commit, else (unmoved) it is sent again.
    pub async fn commit(
        &self,
        repo: &str,
        revision: &str,
        summary: &str,
        lfs: &[&UploadFile],
        regular: &[&UploadFile],
        deleted: &[String],
    ) -> Result<(CommitInfo, u64)> {
        let parent = self.repo_info(repo, revision).await?.sha;
        let (lines, inline) = commit_lines(summary, &parent, lfs, regular, deleted).await?;
        let url = format!(
            "{}/api/models/{}/commit/{}",
            self.endpoint,
            repo,
            encode(revision, false)
        );
        let mut attempt = 0u32;
        loop {
            let mut stalls = 0u32;
            let sent = self
                .send_with(
                    repo,
                    "commit",
                    &mut || {
                        Ok(self
                            .request(Method::POST, &url)
                            .header("Content-Type", "application/x-ndjson")
                            .body(lines.clone()))
                    },
                    &mut stalls,
                    false,
                )
                .await;
            let failure = match sent {
                Ok(resp) if !resp.status().is_server_error() => {
                    return Ok((self.committed(resp, repo, revision).await?, inline));
                }
                Ok(resp) => check(resp, repo, None, Some(revision), "commit", self)
                    .await
                    .err()
                    .unwrap_or_else(|| HubError::protocol(repo, "commit", "server error")),
                Err(e @ (HubError::Network { .. } | HubError::Stalled { .. })) => e,
                Err(e) => return Err(e),
            };
            // Did it land? Read the branch again before sending it again.
            let now = self.repo_info(repo, revision).await?.sha;
            if now != parent {
                let landed = self.holds(repo, &now, lfs, regular, deleted).await?;
                if landed {
                    self.note(&format!(
                        "{repo}: the commit whose answer was lost ({failure}) is there: {now}"
                    ));
                    return Ok((
                        CommitInfo {
                            oid: now,
                            url: String::new(),
                        },
                        inline,
                    ));
                }
                return Err(HubError::protocol(
                    repo,
                    "commit",
                    format!(
                        "{failure}; meanwhile {revision} moved to {now}, which is not this commit: \
                         not sending it again"
                    ),
                ));
            }
            attempt += 1;
            if attempt > self.retry.max_retries {
                return Err(failure);
            }
            let wait = self.retry.delay(attempt - 1);
            self.note(&format!(
                "{repo}: commit: {failure}; it did not land: sending it again in {:.1} s",
                wait.as_secs_f64()
            ));
            tokio::time::sleep(wait).await;
        }
    }

    /// The commit a commit POST's answer names (an error status is the
    /// error).
    async fn committed(
        &self,
        resp: reqwest::Response,
        repo: &str,
        revision: &str,
    ) -> Result<CommitInfo> {
        let resp = check(resp, repo, None, Some(revision), "commit", self).await?;
        let v = self.json(resp, repo, "commit").await?;
        let oid = v
            .get("commitOid")
            .and_then(Value::as_str)
            .ok_or_else(|| HubError::protocol(repo, "commit", "no commitOid"))?;
        let url = v.get("commitUrl").and_then(Value::as_str).unwrap_or("");
        Ok(CommitInfo {
            oid: oid.into(),
            url: url.into(),
        })
    }

    /// Whether commit `at` of `repo` holds exactly these changes: each file
    /// with its hashes, each deleted path gone.
    async fn holds(
        &self,
        repo: &str,
        at: &str,
        lfs: &[&UploadFile],
        regular: &[&UploadFile],
        deleted: &[String],
    ) -> Result<bool> {
        let tree = self.list_files(repo, at).await?;
        let at: HashMap<&str, &RepoFile> = tree.iter().map(|f| (f.path.as_str(), f)).collect();
        Ok(lfs.iter().all(|f| {
            at.get(f.path_in_repo.as_str())
                .is_some_and(|r| r.lfs_sha256.as_deref() == Some(&f.hashes.sha256_hex()))
        }) && regular.iter().all(|f| {
            at.get(f.path_in_repo.as_str())
                .is_some_and(|r| Some(&r.oid) == f.hashes.git_oid.as_ref())
        }) && deleted.iter().all(|p| !at.contains_key(p.as_str())))
    }

    /// Upload files in commits of at most [`MAX_COMMIT_FILES`] changes:
    /// preupload to sort LFS from regular files (empty files are regular,
    /// as on the Hub), LFS batch to send only objects the server lacks,
    /// then the commits, in the order of `files` (the last commit holds the
    /// last files, so a file that makes the others valid, such as a mirror's
    /// manifest, goes last), with `deleted` paths removed by the first.
    /// Regular files whose remote blob id already matches are left out.
    pub async fn upload_files(
        &self,
        repo: &str,
        revision: &str,
        summary: &str,
        files: &[UploadFile],
        deleted: &[String],
        progress: Arc<dyn ProgressSink>,
    ) -> Result<UploadStats> {
        self.upload_files_with(repo, revision, summary, &[], files, deleted, progress)
            .await
    }

    /// [`HubClient::upload_files`], with `objects` first: LFS files whose
    /// objects the repo holds already (another machine sent them), put in
    /// the commits by their SHA-256 and size alone (their `local` is never
    /// read). An object the repo lacks fails the commit.
    #[allow(clippy::too_many_arguments)]
    pub async fn upload_files_with(
        &self,
        repo: &str,
        revision: &str,
        summary: &str,
        objects: &[UploadFile],
        files: &[UploadFile],
        deleted: &[String],
        progress: Arc<dyn ProgressSink>,
    ) -> Result<UploadStats> {
        check_repo_id(repo)?;
        check_revision(revision)?;
        for f in objects.iter().chain(files) {
            check_repo_path(&f.path_in_repo)?;
        }
        let modes = self.preupload(repo, revision, files).await?;
        let mut lfs = Vec::new();
        // Each change in order: (is LFS, file).
        let mut changes: Vec<(bool, &UploadFile)> = objects.iter().map(|f| (true, f)).collect();
        for (f, (is_lfs, remote)) in files.iter().zip(modes) {
            if is_lfs && f.hashes.size > 0 {
                lfs.push(f);
                changes.push((true, f));
            } else if remote.is_none() || remote != f.hashes.git_oid {
                changes.push((false, f));
            }
        }
        let mut stats = UploadStats::default();
        let (sent, n_sent, n_present) = self.upload_lfs(repo, revision, &lfs, progress).await?;
        stats.lfs_bytes_sent = sent;
        stats.lfs_objects_sent = n_sent;
        stats.lfs_objects_present = n_present;
        let mut batches: Vec<(Vec<&UploadFile>, Vec<&UploadFile>, &[String])> = Vec::new();
        let mut deletes = deleted;
        loop {
            let take = deletes.len().min(MAX_COMMIT_FILES);
            let (now, later) = deletes.split_at(take);
            deletes = later;
            let room = MAX_COMMIT_FILES - take;
            let n = room.min(changes.len());
            let mut l = Vec::new();
            let mut r = Vec::new();
            for (is_lfs, f) in changes.drain(..n) {
                if is_lfs { l.push(f) } else { r.push(f) }
            }
            batches.push((l, r, now));
            if deletes.is_empty() && changes.is_empty() {
                break;
            }
        }
        let count = batches.len();
        for (k, (l, r, d)) in batches.into_iter().enumerate() {
            let title = if count == 1 {
                summary.to_string()
            } else {
                format!("{summary} ({} of {count})", k + 1)
            };
            let (info, inline) = self.commit(repo, revision, &title, &l, &r, d).await?;
            stats.inline_bytes_sent += inline;
            stats.commit = Some(info);
        }
        Ok(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An LFS PUT of a file goes out with its `Content-Length` and no
    /// chunked encoding (S3's presigned PUTs refuse those), and no token to
    /// another host.
    #[tokio::test]
    async fn a_file_put_has_a_length_and_no_token_elsewhere() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let head = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = Vec::new();
            let mut b = [0u8; 4096];
            let end = loop {
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i + 4;
                }
                let n = s.read(&mut b).await.unwrap();
                assert!(n > 0, "the connection closed inside the headers");
                buf.extend_from_slice(&b[..n]);
            };
            // The whole body before the answer, as S3 reads it: answering
            // early would race the client's write of the rest.
            while buf.len() < end + 100_000 {
                let n = s.read(&mut b).await.unwrap();
                assert!(n > 0, "the body ended early");
                buf.extend_from_slice(&b[..n]);
            }
            buf.truncate(end);
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
            String::from_utf8_lossy(&buf).to_ascii_lowercase()
        });
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("x.bin");
        std::fs::write(&f, vec![7u8; 100_000]).unwrap();
        let c = HubClient::new("http://127.0.0.1:1", Some("hf_secret".into())).unwrap();
        let up = UploadFile {
            path_in_repo: "x.bin".into(),
            local: f.clone(),
            hashes: hashing::hash_file(&f, false).unwrap(),
        };
        let actions = json!({"upload": {"href": format!("http://{addr}/put")}});
        c.upload_one("org/m", &up, &actions, &brevis_core::NoProgress)
            .await
            .unwrap();
        let head = head.await.unwrap();
        assert!(head.contains("content-length: 100000"), "{head}");
        assert!(!head.contains("transfer-encoding"), "{head}");
        assert!(!head.contains("authorization"), "{head}");
    }
}
