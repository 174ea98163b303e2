//! Checking a mirror's manifest against the source repo itself.

use std::collections::HashMap;

use crate::client::{HubClient, RepoFile};
use crate::error::{HubError, Result};
use crate::manifest::{FileEntry, Manifest};

/// What checking a mirror's manifest against its source found.
pub(super) enum SourceCheck {
    /// The source repo was read at the commit the manifest names: each
    /// file where the manifest says otherwise, as `(path, what the manifest
    /// says, what the source holds)`.
    Read(Vec<(String, String, String)>),
    /// There is no source repo to read on this endpoint (private, gone, on
    /// another Hub, or served decoded from a mirror): why.
    Unread(String),
    /// The source repo is on this endpoint but has no such commit: the
    /// mirror names a commit its source does not hold (a false claim, or
    /// the source's history was rewritten).
    NoCommit,
}

impl SourceCheck {
    /// Why the mirror `mirror` (of `m`) does not restore its source's
    /// commit, if it does not: where the source holds `files` otherwise, or
    /// lacks the commit.
    pub(super) fn refusal(&self, m: &Manifest) -> Option<String> {
        let src = &m.source;
        match self {
            SourceCheck::Read(d) if !d.is_empty() => {
                let (path, claim, held) = &d[0];
                let more = match d.len() {
                    1 => String::new(),
                    n => format!(" (and {} more file(s))", n - 1),
                };
                Some(format!(
                    "its manifest says {path} of {}@{} is {claim}, but the source holds \
                     {held}{more}: this mirror does not restore that commit",
                    src.repo, src.commit
                ))
            }
            SourceCheck::NoCommit => Some(format!(
                "its source {} is on this endpoint but has no commit {}: the mirror names a \
                 commit its source does not hold (a false claim, or the source's history \
                 was rewritten)",
                src.repo, src.commit
            )),
            _ => None,
        }
    }
}

/// Check what the mirror `mirror`'s manifest says of `files` against the
/// source repo itself at the source commit: each file's size and hash (LFS
/// SHA-256, else git blob id) from the Hub's tree listing. A manifest is
/// only the mirror's word: unchecked, a mirror that names another repo's
/// commit would have its own bytes filed in the HF cache under that repo's
/// name. A source readable here that has no such commit is an error (the
/// mirror names a commit its source does not hold); so is a source that
/// cannot be read for now (5xx, 429, network), rather than a check
/// silently skipped.
pub(super) async fn check_source(
    client: &HubClient,
    m: &Manifest,
    files: &[&FileEntry],
    mirror: &str,
) -> Result<SourceCheck> {
    let src = &m.source;
    let unread = |e: &HubError| match e {
        HubError::RepoNotFound { .. }
        | HubError::Unauthorized { .. }
        | HubError::TokenRequired { .. }
        | HubError::Gated { .. } => true,
        HubError::Http { status, .. } => *status < 500 && *status != 429,
        _ => false,
    };
    // An error reading the source (5xx, 429, the network) fails the check
    // rather than skipping it, and says what was being checked.
    let context = |e: HubError| HubError::Manifest {
        repo: mirror.into(),
        reason: format!(
            "checking it against its source {}@{}: {e}",
            src.repo,
            &src.commit[..12]
        ),
    };
    let decoded = |from: &str| {
        SourceCheck::Unread(format!(
            "this endpoint serves it decoded from the mirror {from}, not from a source repo"
        ))
    };
    match client.repo_info(&src.repo, &src.commit).await {
        Ok(info) => {
            if let Some(from) = info.decoded_from {
                return Ok(decoded(&from));
            }
            // An endpoint that answers another commit for a full commit id
            // (one that ignores the revision) would check the wrong tree.
            if !info.sha.eq_ignore_ascii_case(&src.commit) {
                return Err(context(HubError::Protocol {
                    repo: src.repo.clone(),
                    what: "repo info",
                    reason: format!("asked for commit {}, answered {}", src.commit, info.sha),
                }));
            }
        }
        Err(HubError::RevisionNotFound { .. }) => {
            // (Asking for `main` tells a repo that lacks the commit from
            // one that cannot be read; a repo without a `main` branch lacks
            // it too.)
            return match client.repo_info(&src.repo, "main").await {
                Ok(info) => Ok(match info.decoded_from {
                    Some(from) => decoded(&from),
                    None => SourceCheck::NoCommit,
                }),
                Err(HubError::RevisionNotFound { .. }) => Ok(SourceCheck::NoCommit),
                Err(e) if unread(&e) => Ok(SourceCheck::Unread(e.to_string())),
                Err(e) => Err(context(e)),
            };
        }
        Err(e) if unread(&e) => return Ok(SourceCheck::Unread(e.to_string())),
        Err(e) => return Err(context(e)),
    }
    // The listing is classified as the revision was: a source that turns
    // unreadable (or is answered decoded from a mirror) between the two
    // calls is unread, not checked.
    let tree = match client.list_files_marked(&src.repo, &src.commit).await {
        Ok((_, Some(from))) => return Ok(decoded(&from)),
        Ok((tree, None)) => tree,
        Err(e) if unread(&e) => return Ok(SourceCheck::Unread(e.to_string())),
        Err(e) => return Err(context(e)),
    };
    let by_path: HashMap<&str, &RepoFile> = tree.iter().map(|f| (f.path.as_str(), f)).collect();
    let mut out = Vec::new();
    // Size, LFS or not, and the id the HF cache names the blob by (LFS
    // SHA-256, else git blob id).
    let says = |size: u64, lfs: bool, id: &str| {
        format!(
            "{size} bytes, {} {id}",
            if lfs { "SHA-256" } else { "git blob" }
        )
    };
    for f in files {
        let held = match by_path.get(f.path.as_str()) {
            None => Some("no such file".to_string()),
            Some(r) => {
                let lfs = r.lfs_sha256.is_some();
                let same =
                    r.size == f.size && lfs == f.lfs && r.etag().eq_ignore_ascii_case(f.etag());
                (!same).then(|| says(r.size, lfs, r.etag()))
            }
        };
        if let Some(held) = held {
            out.push((f.path.clone(), says(f.size, f.lfs, f.etag()), held));
        }
    }
    Ok(SourceCheck::Read(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manifest of one file of `org/model` at commit `commit`.
    fn manifest(commit: &str) -> Manifest {
        let m = serde_json::json!({
            "manifest_version": 1, "tool": "t", "format_version": 1,
            "source": {"repo": "org/model", "revision": "main", "commit": commit},
            "files": [{"path": "a.bin", "size": 1, "sha256": "d".repeat(64), "git_oid": "e".repeat(40),
                       "lfs": true, "encoding": "identity", "archive": "a.bin", "archive_size": 1}]
        });
        Manifest::from_json(m.to_string().as_bytes(), "t").unwrap()
    }

    /// A source the endpoint cannot answer for now (5xx, 429) fails the
    /// check, naming what was checked, where it had been skipped as if the
    /// source were private; a 404 is a source not here.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_source_that_fails_to_answer_fails_the_check() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // ("unread", "error", or "no commit": a repo that answers, without
        // the commit or a `main` branch.)
        let other = format!("{{\"sha\":\"{}\"}}", "d".repeat(40));
        for (status, body, expect) in [
            ("503 Service Unavailable", "{}", "error"),
            ("429 Too Many Requests", "{}", "error"),
            ("404 Not Found", "{}", "unread"),
            (
                "404 Not Found\r\nx-error-code: RevisionNotFound",
                "{}",
                "no commit",
            ),
            // An endpoint that answers another commit than the one asked.
            ("200 OK", other.as_str(), "error"),
        ] {
            let body = body.to_owned();
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}", l.local_addr().unwrap());
            tokio::spawn(async move {
                while let Ok((mut s, _)) = l.accept().await {
                    let body = body.clone();
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 4096];
                        while let Ok(n) = s.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                            let r = format!(
                                "HTTP/1.1 {status}\r\ncontent-length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            if s.write_all(r.as_bytes()).await.is_err() {
                                break;
                            }
                        }
                    });
                }
            });
            let client = HubClient::new(&url, None).unwrap().with_retry(
                crate::client::RetryPolicy::default()
                    .max_retries(1)
                    .base_delay(std::time::Duration::from_millis(1)),
            );
            let m = manifest(&"c".repeat(40));
            let files: Vec<&FileEntry> = m.files.iter().collect();
            let r = check_source(&client, &m, &files, "org/model-brevis").await;
            match r {
                Ok(SourceCheck::Unread(_)) => assert_eq!(expect, "unread", "{status}"),
                Ok(SourceCheck::NoCommit) => assert_eq!(expect, "no commit", "{status}"),
                Err(e) => {
                    assert_eq!(expect, "error", "{status}: {e}");
                    if status.starts_with("200") {
                        assert!(e.to_string().contains("asked for commit"), "{e}");
                    }
                    assert!(
                        e.to_string()
                            .contains("checking it against its source org/model@"),
                        "{e}"
                    );
                }
                Ok(_) => panic!("{status}: checked"),
            }
        }
    }

    #[test]
    fn a_manifest_commit_id_is_lower_case() {
        let m = manifest(&"ABCDEF0123".repeat(4));
        assert_eq!(m.source.commit, "abcdef0123".repeat(4));
    }
}
