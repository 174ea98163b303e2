//! The decoded view: a mirror's source repo served from the mirror,
//! each original decoded on the fly.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::HeaderValue;

use super::store::{Commit, FileRec};
use super::{Access, DECODED_FROM, Resp, State, internal, repo_not_found, rev_not_found};
use crate::error::HubError;
use crate::ids::{CommitId, Oid, RepoId, RepoPath, Revision};
use crate::manifest::{Encoding, MANIFEST_NAME, Manifest};
use crate::paths::is_commit_id;

/// One file as served (stored or decoded from a mirror).
pub(super) struct ViewFile {
    pub(super) rec: FileRec,
    /// Object to stream, or archive object to decode.
    pub(super) object: Oid,
    pub(super) decode: bool,
}

/// The files a repo serves at one commit.
pub(super) type ViewFiles = BTreeMap<RepoPath, ViewFile>;

/// About how many bytes of memory a served file takes (its path, record
/// and map entry), for the view cache's budget.
pub(super) const VIEW_FILE_COST: u64 = 256;

pub(super) struct View {
    pub(super) repo: RepoId,
    pub(super) sha: CommitId,
    pub(super) private: bool,
    pub(super) time: u64,
    pub(super) files: Arc<ViewFiles>,
    /// The mirror a source served decoded comes from (said to clients in
    /// [`DECODED_FROM`]: its listing is that mirror's word, not a source's).
    pub(super) decoded_from: Option<RepoId>,
}

/// Where `repo`'s files come from, once the caller may see it.
pub(super) enum Served {
    /// Its own commits in the store.
    Stored {
        /// Private repo.
        private: bool,
    },
    /// A mirror's archives, decoded on the fly: the mirror's `main` and its
    /// manifest, whose source is `repo`.
    Decoded {
        private: bool,
        mirror_repo: RepoId,
        mirror: Arc<Commit>,
        manifest: Arc<Manifest>,
    },
}

/// Find where `repo` is served from (404 when it is not, or the caller may
/// not see it).
pub(super) fn served(
    st: &State,
    access: Access,
    repo: &RepoId,
) -> std::result::Result<Served, Resp> {
    let hidden = |private: bool| private && access == Access::Anonymous && !st.open();
    if let Some(private) = st.store.repo_private(repo) {
        if hidden(private) {
            return Err(repo_not_found());
        }
        return Ok(Served::Stored { private });
    }
    // A source name that is a stored repo's in another case is not served
    // decoded: a mirror naming `ORG/model` would stand for `org/model`
    // where the HF cache's folders are case-insensitive (macOS).
    if st.store.stored_in_other_case(repo) {
        return Err(repo_not_found());
    }
    let mirror = st.store.mirror_of(repo).ok_or_else(repo_not_found)?;
    let private = st.store.repo_private(&mirror).ok_or_else(repo_not_found)?;
    if hidden(private) {
        return Err(repo_not_found());
    }
    let c = st
        .store
        .resolve(&mirror, &Revision::main())
        .map_err(internal)?
        .ok_or_else(repo_not_found)?;
    if !c.files.contains_key(MANIFEST_NAME) {
        return Err(repo_not_found());
    }
    let manifest = st.store.manifest_of(&mirror, &c).ok_or_else(|| {
        internal(HubError::Manifest {
            repo: mirror.to_string(),
            reason: "unreadable in the store".into(),
        })
    })?;
    if manifest.source.repo != repo.as_str() {
        return Err(repo_not_found());
    }
    Ok(Served::Decoded {
        private,
        mirror_repo: mirror,
        mirror: c,
        manifest,
    })
}

/// The branches a decoded source repo answers to: `main` and the revision
/// it was mirrored from (unless that is a commit id), all at its commit.
pub(super) fn decoded_branches(man: &Manifest) -> Vec<(String, String)> {
    let mut names = vec!["main".to_string()];
    if !is_commit_id(&man.source.revision) && man.source.revision != "main" {
        names.push(man.source.revision.clone());
    }
    names.sort();
    names
        .into_iter()
        .map(|n| (n, man.source.commit.clone()))
        .collect()
}

/// Find what to serve for `repo` at `rev`.
pub(super) fn view(
    st: &State,
    access: Access,
    repo: &RepoId,
    rev: &Revision,
) -> std::result::Result<View, Resp> {
    let (private, mirror_repo, c, man) = match served(st, access, repo)? {
        Served::Stored { private } => {
            let c = st
                .store
                .resolve(repo, rev)
                .map_err(internal)?
                .ok_or_else(|| rev_not_found(rev.as_str()))?;
            let files = cached_files(st, repo, &c.oid, false, || {
                Ok(c.files
                    .iter()
                    .map(|(p, rec)| {
                        let f = ViewFile {
                            rec: rec.clone(),
                            object: rec.sha256.clone(),
                            decode: false,
                        };
                        (p.clone(), f)
                    })
                    .collect())
            })?;
            return Ok(View {
                repo: repo.clone(),
                sha: c.oid.clone(),
                private,
                time: c.time,
                files,
                decoded_from: None,
            });
        }
        Served::Decoded {
            private,
            mirror_repo,
            mirror,
            manifest,
        } => (private, mirror_repo, mirror, manifest),
    };
    if rev != man.source.revision.as_str() && rev != man.source.commit.as_str() && rev != "main" {
        return Err(rev_not_found(rev.as_str()));
    }
    let bad = |what: &str| {
        internal(HubError::Manifest {
            repo: mirror_repo.to_string(),
            reason: format!("{what} is not valid"),
        })
    };
    let files = cached_files(st, &mirror_repo, &c.oid, true, || {
        let mut files = BTreeMap::new();
        for f in &man.files {
            let Some(stored) = c.files.get(f.archive.as_str()) else {
                continue;
            };
            let path = RepoPath::parse(&f.path).map_err(|_| bad("a path"))?;
            let rec = FileRec {
                size: f.size,
                sha256: Oid::parse(&f.sha256).map_err(|_| bad("a sha256"))?,
                git_oid: crate::ids::BlobId::parse(&f.git_oid).map_err(|_| bad("a git oid"))?,
                lfs: f.lfs,
            };
            files.insert(
                path,
                ViewFile {
                    rec,
                    object: stored.sha256.clone(),
                    decode: f.encoding == Encoding::Brv,
                },
            );
        }
        Ok(files)
    })?;
    Ok(View {
        repo: repo.clone(),
        sha: CommitId::parse(&man.source.commit).map_err(|_| bad("the source commit"))?,
        private,
        time: c.time,
        files,
        decoded_from: Some(mirror_repo),
    })
}

/// The files of `repo` at commit `oid`: a stored repo's own, or (`decoded`)
/// what a mirror's commit serves as its source; built once and shared
/// while cached.
pub(super) fn cached_files(
    st: &State,
    repo: &RepoId,
    oid: &CommitId,
    decoded: bool,
    build: impl FnOnce() -> std::result::Result<ViewFiles, Resp>,
) -> std::result::Result<Arc<ViewFiles>, Resp> {
    let key = (repo.clone(), oid.clone(), decoded);
    if let Some(f) = st.views.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(f);
    }
    let files = Arc::new(build()?);
    let cost = files.len() as u64 * VIEW_FILE_COST;
    st.views
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, files.clone(), cost);
    Ok(files)
}

/// `r` with [`DECODED_FROM`] when `v` is a source served decoded.
pub(super) fn mark_decoded(mut r: Resp, v: &View) -> Resp {
    if let Some(m) = v
        .decoded_from
        .as_ref()
        .and_then(|m| HeaderValue::from_str(m.as_str()).ok())
    {
        r.headers_mut().insert(DECODED_FROM, m);
    }
    r
}
