//! Repo info, tree listing (cursor pages), who am I, repo creation.

use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::{HubError, Result};
use crate::paths::{check_repo_id, check_repo_path, check_revision, encode};

use super::{HubClient, RepoFile, RepoInfo, check};

/// Hex digits of a git commit id (SHA-1).
const COMMIT_ID_HEX: usize = 40;

/// Hex digits of an LFS oid (SHA-256).
const SHA256_HEX: usize = 64;

/// Pages of one tree listing at most: a server whose `Link` pages never
/// end is refused rather than followed forever.
const MAX_TREE_PAGES: usize = 100_000;

#[derive(Deserialize)]
pub(super) struct TreeItem {
    #[serde(rename = "type")]
    kind: String,
    path: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    oid: String,
    #[serde(default)]
    lfs: Option<TreeLfs>,
}

#[derive(Deserialize)]
pub(super) struct TreeLfs {
    oid: String,
    size: u64,
}

pub(super) fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `<url>; rel="next"` from a `Link` header.
pub(super) fn next_link(h: &HeaderMap) -> Option<String> {
    let link = h.get("link")?.to_str().ok()?;
    for part in link.split(',') {
        let mut it = part.split(';');
        let url = it.next()?.trim();
        if it.any(|p| p.trim().replace(' ', "") == "rel=\"next\"") {
            return Some(
                url.trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_string(),
            );
        }
    }
    None
}

impl HubClient {
    /// `/api/models/{repo}/revision/{rev}`.
    pub async fn repo_info(&self, repo: &str, revision: &str) -> Result<RepoInfo> {
        check_repo_id(repo)?;
        check_revision(revision)?;
        let url = format!(
            "{}/api/models/{}/revision/{}",
            self.endpoint,
            repo,
            encode(revision, false)
        );
        let resp = self
            .send(repo, "repo info", || Ok(self.request(Method::GET, &url)))
            .await?;
        let resp = check(resp, repo, None, Some(revision), "repo info", self).await?;
        let decoded_from = resp
            .headers()
            .get(crate::server::DECODED_FROM)
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        let v = self.json(resp, repo, "repo info").await?;
        let sha = v
            .get("sha")
            .and_then(Value::as_str)
            .ok_or_else(|| HubError::protocol(repo, "repo info", "no sha"))?;
        if !is_hex(sha, COMMIT_ID_HEX) {
            return Err(HubError::protocol(
                repo,
                "repo info",
                "sha is not a commit id",
            ));
        }
        let siblings = v
            .get("siblings")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.get("rfilename").and_then(Value::as_str))
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        Ok(RepoInfo {
            id: repo.to_string(),
            sha: sha.to_string(),
            private: v.get("private").and_then(Value::as_bool).unwrap_or(false),
            siblings,
            decoded_from,
        })
    }

    /// Recursive tree listing at `revision` (following `Link` cursor pages).
    /// Every path is validated; a listing with `..`, absolute paths or
    /// backslashes is refused as a whole.
    pub async fn list_files(&self, repo: &str, revision: &str) -> Result<Vec<RepoFile>> {
        Ok(self.list_files_marked(repo, revision).await?.0)
    }

    /// [`HubClient::list_files`], and the mirror `brevis-hub serve` says it
    /// decoded the listing from (`x-brevis-decoded-from` on any page), if
    /// it does: such a listing is the mirror's word, not a source repo's.
    pub async fn list_files_marked(
        &self,
        repo: &str,
        revision: &str,
    ) -> Result<(Vec<RepoFile>, Option<String>)> {
        check_repo_id(repo)?;
        check_revision(revision)?;
        let mut url = format!(
            "{}/api/models/{}/tree/{}?recursive=true&expand=false",
            self.endpoint,
            repo,
            encode(revision, false)
        );
        let mut out = Vec::new();
        let mut decoded_from = None;
        for _page in 0..MAX_TREE_PAGES {
            let u = url.clone();
            let resp = self
                .send(repo, "tree listing", || Ok(self.request(Method::GET, &u)))
                .await?;
            let resp = check(resp, repo, None, Some(revision), "tree listing", self).await?;
            let next = next_link(resp.headers());
            if let Some(from) = resp
                .headers()
                .get(crate::server::DECODED_FROM)
                .and_then(|v| v.to_str().ok())
            {
                decoded_from.get_or_insert_with(|| from.to_owned());
            }
            let v = self.json(resp, repo, "tree listing").await?;
            let items: Vec<TreeItem> = serde_json::from_value(v)
                .map_err(|e| HubError::protocol(repo, "tree listing", e.to_string()))?;
            for it in items {
                check_repo_path(&it.path)?;
                if it.kind != "file" {
                    continue;
                }
                let lfs_sha256 = match it.lfs {
                    Some(l) => {
                        if !is_hex(&l.oid, SHA256_HEX) {
                            return Err(HubError::protocol(repo, "tree listing", "bad LFS oid"));
                        }
                        if l.size != it.size {
                            return Err(HubError::protocol(
                                repo,
                                "tree listing",
                                "LFS size differs",
                            ));
                        }
                        Some(l.oid.to_ascii_lowercase())
                    }
                    None => None,
                };
                out.push(RepoFile {
                    path: it.path,
                    size: it.size,
                    oid: it.oid,
                    lfs_sha256,
                });
            }
            match next {
                Some(n) => {
                    url = if n.starts_with('/') {
                        format!("{}{}", self.endpoint, n)
                    } else {
                        n
                    }
                }
                None => {
                    out.sort_by(|a, b| a.path.cmp(&b.path));
                    out.dedup_by(|a, b| a.path == b.path);
                    return Ok((out, decoded_from));
                }
            }
        }
        Err(HubError::protocol(repo, "tree listing", "too many pages"))
    }

    /// The user name behind the token (`/api/whoami-v2`).
    pub async fn whoami(&self) -> Result<String> {
        let url = format!("{}/api/whoami-v2", self.endpoint);
        let resp = self
            .send("", "whoami", || Ok(self.request(Method::GET, &url)))
            .await?;
        let resp = check(resp, "", None, None, "whoami", self).await?;
        let v = self.json(resp, "", "whoami").await?;
        v.get("name")
            .and_then(Value::as_str)
            .map(String::from)
            .ok_or_else(|| HubError::protocol("", "whoami", "no name"))
    }

    /// Create a model repo (`/api/repos/create`). With `exist_ok`, an
    /// existing repo (409) is fine. `private`: `None` leaves the visibility
    /// to the namespace's default (an organisation may make new repos
    /// private).
    pub async fn create_repo(
        &self,
        repo: &str,
        private: Option<bool>,
        exist_ok: bool,
    ) -> Result<()> {
        check_repo_id(repo)?;
        let (org, name) = repo.split_once('/').unwrap_or(("", repo));
        let url = format!("{}/api/repos/create", self.endpoint);
        let mut body = json!({"name": name, "organization": org, "type": "model"});
        if let Some(p) = private {
            body["private"] = json!(p);
        }
        let resp = self
            .send(repo, "create repo", || {
                Ok(self.request(Method::POST, &url).json(&body))
            })
            .await?;
        if resp.status() == StatusCode::CONFLICT {
            return if exist_ok {
                Ok(())
            } else {
                Err(HubError::RepoExists { repo: repo.into() })
            };
        }
        check(resp, repo, None, None, "create repo", self).await?;
        Ok(())
    }

    /// Create branch `branch` of `repo` at `from`'s head
    /// (`POST /api/models/{repo}/branch/{branch}`); one that exists already
    /// is left as it is.
    pub async fn ensure_branch(&self, repo: &str, branch: &str, from: &str) -> Result<()> {
        check_repo_id(repo)?;
        crate::paths::check_revision(branch)?;
        let url = format!(
            "{}/api/models/{}/branch/{}",
            self.endpoint,
            repo,
            crate::paths::encode(branch, false)
        );
        let body = json!({"startingPoint": from});
        let resp = self
            .send(repo, "create branch", || {
                Ok(self.request(Method::POST, &url).json(&body))
            })
            .await?;
        if resp.status() == StatusCode::CONFLICT {
            return Ok(());
        }
        check(resp, repo, None, Some(branch), "create branch", self).await?;
        Ok(())
    }

    /// Delete `branch` of `repo` (`huggingface_hub`'s `delete_branch`):
    /// `false` if it was not there. `main` is never asked for.
    pub async fn delete_branch(&self, repo: &str, branch: &str) -> Result<bool> {
        check_repo_id(repo)?;
        crate::paths::check_revision(branch)?;
        if branch == "main" {
            return Err(HubError::invalid(
                "branch",
                branch,
                "is the default branch: never deleted",
            ));
        }
        let url = format!(
            "{}/api/models/{}/branch/{}",
            self.endpoint,
            repo,
            crate::paths::encode(branch, false)
        );
        let resp = self
            .send(repo, "delete branch", || {
                Ok(self.request(Method::DELETE, &url))
            })
            .await?;
        match check(resp, repo, None, Some(branch), "delete branch", self).await {
            Ok(_) => Ok(true),
            // A lost answer sent again finds it gone.
            Err(HubError::RevisionNotFound { .. } | HubError::Http { status: 404, .. }) => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Make sure `repo` exists (created with `private`, see
    /// [`HubClient::create_repo`]) and that this client may write to it,
    /// without changing it: a preupload of no files needs write access. A
    /// missing token or permission fails here, in a second or two.
    pub async fn ensure_writable(&self, repo: &str, private: Option<bool>) -> Result<()> {
        self.create_repo(repo, private, true).await?;
        let url = format!("{}/api/models/{}/preupload/main", self.endpoint, repo);
        let body = json!({"files": []});
        let resp = self
            .send(repo, "write check", || {
                Ok(self.request(Method::POST, &url).json(&body))
            })
            .await?;
        check(resp, repo, None, Some("main"), "write check", self).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn link_header() {
        let mut h = HeaderMap::new();
        h.insert(
            "link",
            HeaderValue::from_static(
                "<http://x/api/models/a/b/tree/main?cursor=abc>; rel=\"next\"",
            ),
        );
        assert_eq!(
            next_link(&h).as_deref(),
            Some("http://x/api/models/a/b/tree/main?cursor=abc")
        );
    }
}
