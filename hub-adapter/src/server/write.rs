//! The write endpoints: whoami, repo and branch creation, preupload and the
//! NDJSON commit.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use serde_json::{Value, json};

use super::body::{BoundedBody, Lines};
use super::limits::{
    COMMIT_QUEUE_WAIT, COMMIT_RETRY_AFTER, MAX_COMMIT_LINE, MAX_JSON_BODY, MAX_PREUPLOAD_BODY,
    MAX_REPO_FILES,
};
use super::ndjson::{CommitOp, parse_line};
use super::store::{self, FileRec};
use super::{
    Access, Resp, State, base_url, body_error, error, internal, json_resp, repo_not_found,
    rev_not_found,
};
use crate::error::HubError;
use crate::ids::{CommitId, RepoId, RepoPath, Revision};

pub(super) fn whoami(st: &State, access: Access) -> Resp {
    if access == Access::Anonymous && !st.open() {
        return error(
            StatusCode::UNAUTHORIZED,
            None,
            "Invalid credentials in Authorization header",
        );
    }
    let role = if access == Access::Write {
        "write"
    } else {
        "read"
    };
    json_resp(
        StatusCode::OK,
        &json!({"type": "user", "name": "local", "fullname": "local", "orgs": [],
                "auth": {"type": "access_token", "accessToken": {"displayName": "local", "role": role}}}),
    )
}

pub(super) fn need_write(access: Access) -> Option<Resp> {
    match access {
        Access::Write => None,
        Access::Read => Some(error(
            StatusCode::FORBIDDEN,
            None,
            "this token may only read",
        )),
        Access::Anonymous => Some(error(
            StatusCode::UNAUTHORIZED,
            None,
            "a write token is required",
        )),
    }
}

/// A small JSON body, read within `limit` (a body that is not JSON is
/// `null`).
pub(super) async fn json_body(
    st: &State,
    h: &HeaderMap,
    body: Body,
    limit: u64,
) -> std::result::Result<Value, Resp> {
    let b = BoundedBody::new(h, body, limit, st.opts.limits.body_idle_timeout)
        .map_err(|e| body_error(&e))?
        .to_bytes()
        .await
        .map_err(|e| body_error(&e))?;
    Ok(serde_json::from_slice(&b).unwrap_or(Value::Null))
}

pub(super) async fn create(st: &State, access: Access, h: &HeaderMap, body: Body) -> Resp {
    if let Some(r) = need_write(access) {
        return r;
    }
    let v = match json_body(st, h, body, MAX_JSON_BODY).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let name = v.get("name").and_then(Value::as_str).unwrap_or("");
    let org = v
        .get("organization")
        .and_then(Value::as_str)
        .filter(|o| !o.is_empty())
        .unwrap_or("local");
    if let Some(t) = v.get("type").and_then(Value::as_str)
        && t != "model"
    {
        return error(StatusCode::BAD_REQUEST, None, "only model repos are served");
    }
    let Ok(repo) = RepoId::from_parts(org, name) else {
        return error(StatusCode::BAD_REQUEST, None, "invalid repo name");
    };
    let private = v.get("private").and_then(Value::as_bool).unwrap_or(false)
        || v.get("visibility").and_then(Value::as_str) == Some("private");
    let url = format!("{}/{}", base_url(h), repo);
    let _g = st.write_lock.lock().unwrap_or_else(|p| p.into_inner());
    match st.store.create_repo(&repo, private) {
        Ok(true) => json_resp(
            StatusCode::OK,
            &json!({"url": url, "name": repo, "id": repo}),
        ),
        Ok(false) => {
            let mut r = error(
                StatusCode::CONFLICT,
                None,
                "You already created this model repo",
            );
            *r.body_mut() = Body::from(
                json!({"error": "You already created this model repo", "url": url}).to_string(),
            );
            r
        }
        Err(e) => internal(e),
    }
}

/// The caller may write and `repo` exists.
pub(super) fn repo_writable(
    st: &State,
    access: Access,
    repo: &RepoId,
) -> std::result::Result<(), Resp> {
    if let Some(r) = need_write(access) {
        return Err(r);
    }
    if st.store.repo_private(repo).is_none() {
        return Err(repo_not_found());
    }
    Ok(())
}

/// [`repo_writable`], and `rev` is one of its branches.
fn writable(
    st: &State,
    access: Access,
    repo: &RepoId,
    rev: &Revision,
) -> std::result::Result<(), Resp> {
    repo_writable(st, access, repo)?;
    match st.store.head(repo, rev) {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(rev_not_found(rev.as_str())),
        Err(e) => Err(internal(e)),
    }
}

/// `POST /api/models/{repo}/branch/{branch}` (`huggingface_hub`'s
/// `create_branch`): a new branch at `startingPoint` (default `main`); 409
/// if it exists.
pub(super) async fn create_branch(
    st: &State,
    access: Access,
    h: &HeaderMap,
    repo: &RepoId,
    branch: &Revision,
    body: Body,
) -> Resp {
    if let Err(r) = repo_writable(st, access, repo) {
        return r;
    }
    let v = match json_body(st, h, body, MAX_JSON_BODY).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let start = v
        .get("startingPoint")
        .and_then(Value::as_str)
        .unwrap_or("main");
    let Ok(start) = Revision::parse(start) else {
        return rev_not_found(start);
    };
    let _g = st.write_lock.lock().unwrap_or_else(|p| p.into_inner());
    match st.store.head(repo, branch) {
        Ok(None) => {}
        Ok(Some(_)) => {
            return error(
                StatusCode::CONFLICT,
                None,
                &format!("branch {branch} already exists"),
            );
        }
        Err(e) => return internal(e),
    }
    let from = match st.store.resolve(repo, &start) {
        Ok(Some(c)) => c,
        Ok(None) => return rev_not_found(start.as_str()),
        Err(e) => return internal(e),
    };
    match st.store.set_head(repo, branch, &from.oid) {
        Ok(()) => json_resp(StatusCode::OK, &json!({})),
        Err(e) => internal(e),
    }
}

/// `DELETE /api/models/{repo}/branch/{branch}` (`huggingface_hub`'s
/// `delete_branch`): the branch goes, its commits stay; `main` cannot be
/// deleted; 404 if there is no such branch.
pub(super) fn delete_branch(st: &State, access: Access, repo: &RepoId, branch: &Revision) -> Resp {
    if let Err(r) = repo_writable(st, access, repo) {
        return r;
    }
    if *branch == Revision::main() {
        return error(
            StatusCode::FORBIDDEN,
            None,
            "the default branch main cannot be deleted",
        );
    }
    let _g = st.write_lock.lock().unwrap_or_else(|p| p.into_inner());
    match st.store.delete_head(repo, branch) {
        Ok(true) => json_resp(StatusCode::OK, &json!({})),
        Ok(false) => rev_not_found(branch.as_str()),
        Err(e) => internal(e),
    }
}

pub(super) async fn preupload(
    st: &State,
    access: Access,
    h: &HeaderMap,
    repo: &RepoId,
    rev: &Revision,
    body: Body,
) -> Resp {
    if let Err(r) = writable(st, access, repo, rev) {
        return r;
    }
    let v = match json_body(st, h, body, MAX_PREUPLOAD_BODY).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let Some(files) = v.get("files").and_then(Value::as_array) else {
        return error(StatusCode::BAD_REQUEST, None, "expected {\"files\": [...]}");
    };
    let head = st.store.resolve(repo, rev).ok().flatten();
    let mut out = Vec::new();
    for f in files {
        let path = f.get("path").and_then(Value::as_str).unwrap_or("");
        let Ok(path) = RepoPath::parse(path) else {
            return error(
                StatusCode::BAD_REQUEST,
                None,
                &format!("invalid path {path:?}"),
            );
        };
        let size = f.get("size").and_then(Value::as_u64).unwrap_or(0);
        let sample = f
            .get("sample")
            .and_then(Value::as_str)
            .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
            .unwrap_or_default();
        // The Hub takes an empty file as a regular one whatever its name
        // (S3 would refuse its empty upload): strict mode says so too.
        let lfs = store::wants_lfs(path.as_str(), size, &sample) && !(st.opts.strict && size == 0);
        let mut a = json!({"path": path, "uploadMode": if lfs {"lfs"} else {"regular"}, "shouldIgnore": false});
        if let Some(rec) = head.as_ref().and_then(|c| c.files.get(&path)) {
            a["oid"] = json!(rec.git_oid);
        }
        out.push(a);
    }
    json_resp(
        StatusCode::OK,
        &json!({"files": out, "commitOid": head.map(|c| c.oid.clone())}),
    )
}

/// `POST /api/models/{repo}/commit/{rev}`: the NDJSON payload is read one
/// line at a time (a regular file's content is stored as its line is read),
/// by at most [`super::limits::Limits::max_concurrent_commits`] requests at
/// once, then the commit is made under the write lock.
pub(super) async fn commit(
    st: &Arc<State>,
    access: Access,
    h: &HeaderMap,
    repo: &RepoId,
    rev: &Revision,
    body: Body,
) -> Resp {
    if let Err(r) = writable(st, access, repo, rev) {
        return r;
    }
    let limit = st.opts.limits.max_commit_body;
    if super::body::content_length(h).is_some_and(|n| n > limit) {
        return body_error(&super::body::BodyError::TooLarge { limit });
    }
    // A slot first, then the body's clock starts: a commit waiting its
    // turn is not cut for being slow.
    let slot = tokio::time::timeout(COMMIT_QUEUE_WAIT, st.commit_slots.acquire()).await;
    let Ok(Ok(_slot)) = slot else {
        return super::busy(
            "other commits are being read; retry shortly",
            COMMIT_RETRY_AFTER,
        );
    };
    let body = match BoundedBody::new(h, body, limit, st.opts.limits.body_idle_timeout) {
        Ok(b) => b,
        Err(e) => return body_error(&e),
    };
    let mut lines = Lines::new(body, MAX_COMMIT_LINE);
    let mut summary = String::from("Upload files");
    let mut parent_req = None;
    let mut changes = Vec::new();
    loop {
        let line = match lines.next_line().await {
            Ok(Some(l)) => l,
            Ok(None) => break,
            Err(e) => return body_error(&e),
        };
        let op = match parse_line(&line) {
            Ok(Some(op)) => op,
            Ok(None) => continue,
            Err(m) => return error(StatusCode::BAD_REQUEST, None, &m),
        };
        let change = match op {
            CommitOp::Header { summary: s, parent } => {
                if let Some(s) = s {
                    summary = s;
                }
                parent_req = parent;
                continue;
            }
            CommitOp::File { path, content } => match st.store.put_object_bytes(&content) {
                Ok(hs) => Change::Add(path, FileRec::new(&hs, false)),
                Err(e) => return internal(e),
            },
            CommitOp::LfsFile { path, oid, size } => {
                let Ok(meta) = std::fs::metadata(st.store.object_path(&oid)) else {
                    return error(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        None,
                        &format!("{path}: LFS object {oid} was not uploaded"),
                    );
                };
                if size.is_some_and(|s| s != meta.len()) {
                    return error(
                        StatusCode::BAD_REQUEST,
                        None,
                        &format!("{path}: size does not match the LFS object"),
                    );
                }
                Change::Add(path, FileRec::lfs(oid, meta.len()))
            }
            CommitOp::DeletedFile { path } => Change::Delete(path),
            CommitOp::DeletedFolder { path } => Change::DeleteFolder(path),
            CommitOp::CopyFile { src, dst, src_rev } => Change::Copy { src, dst, src_rev },
        };
        changes.push(change);
        if changes.len() > MAX_REPO_FILES {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                None,
                &format!("at most {MAX_REPO_FILES} changes a commit"),
            );
        }
    }
    drop(lines);
    drop(_slot);
    let (st2, base, repo2, rev2) = (st.clone(), base_url(h), repo.clone(), rev.clone());
    tokio::task::spawn_blocking(move || {
        apply(
            &st2,
            &base,
            &repo2,
            &rev2,
            &summary,
            parent_req.as_ref(),
            changes,
        )
    })
    .await
    .unwrap_or_else(|e| internal(HubError::protocol(repo.as_str(), "commit", e.to_string())))
}

/// One change of a commit, its content already in the store.
enum Change {
    Add(RepoPath, FileRec),
    Delete(RepoPath),
    DeleteFolder(RepoPath),
    Copy {
        src: RepoPath,
        dst: RepoPath,
        src_rev: Option<Revision>,
    },
}

/// Make the commit on `rev`'s head (see [`changed_files`]) under the write
/// lock, and answer it.
fn apply(
    st: &State,
    base: &str,
    repo: &RepoId,
    rev: &Revision,
    summary: &str,
    parent_req: Option<&CommitId>,
    changes: Vec<Change>,
) -> Resp {
    let _g = st.write_lock.lock().unwrap_or_else(|p| p.into_inner());
    let (head_oid, head) = match branch_head(st, repo, rev, parent_req) {
        Ok(h) => h,
        Err(r) => return r,
    };
    let files = match changed_files(st, repo, &head, changes) {
        Ok(f) => f,
        Err(r) => return r,
    };
    let c = match st.store.make_commit(repo, Some(&head_oid), summary, files) {
        Ok(c) => c,
        Err(e) => return internal(e),
    };
    if let Err(e) = st.store.set_head(repo, rev, &c.oid) {
        return internal(e);
    }
    let lose = &st.opts.faults.lose_commit_answers;
    if lose
        .fetch_update(
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
            |n| n.checked_sub(1),
        )
        .is_ok()
    {
        return error(StatusCode::GATEWAY_TIMEOUT, None, "lost by test hook");
    }
    json_resp(
        StatusCode::OK,
        &json!({"success": true, "commitOid": c.oid, "commitMessage": summary,
                "commitUrl": format!("{base}/{repo}/commit/{}", c.oid), "hookOutput": ""}),
    )
}

/// The head of branch `rev` and its commit, which must be `parent_req`
/// when the commit names one (412 otherwise).
fn branch_head(
    st: &State,
    repo: &RepoId,
    rev: &Revision,
    parent_req: Option<&CommitId>,
) -> Result<(CommitId, Arc<store::Commit>), Resp> {
    let head_oid = match st.store.head(repo, rev) {
        Ok(Some(h)) => h,
        Ok(None) => {
            return Err(error(
                StatusCode::NOT_FOUND,
                Some("RevisionNotFound"),
                "branch vanished",
            ));
        }
        Err(e) => return Err(internal(e)),
    };
    if let Some(p) = parent_req
        && *p != head_oid
    {
        return Err(error(
            StatusCode::PRECONDITION_FAILED,
            None,
            "parentCommit is not the head of the branch",
        ));
    }
    match st.store.commit(repo, &head_oid) {
        Ok(Some(c)) => Ok((head_oid, c)),
        Ok(None) => Err(internal(HubError::invalid(
            "commit",
            head_oid.as_str(),
            "missing",
        ))),
        Err(e) => Err(internal(e)),
    }
}

/// The files of `head` with `changes` made: copies (from the head as it
/// was) first, then deletions, then additions; each change costs a lookup,
/// whatever the repo's size.
fn changed_files(
    st: &State,
    repo: &RepoId,
    head: &Arc<store::Commit>,
    changes: Vec<Change>,
) -> Result<BTreeMap<RepoPath, FileRec>, Resp> {
    let mut files = head.files.clone();
    let mut revs: std::collections::HashMap<Revision, Option<Arc<store::Commit>>> =
        std::collections::HashMap::new();
    let mut folders = std::collections::BTreeSet::new();
    let mut adds = Vec::new();
    let mut deletes = Vec::new();
    // Copies (from the head as it was) first, then deletions, then
    // additions.
    for c in changes {
        match c {
            Change::Copy { src, dst, src_rev } => {
                let from = match src_rev {
                    Some(r) => revs
                        .entry(r)
                        .or_insert_with_key(|r| st.store.resolve(repo, r).ok().flatten())
                        .clone(),
                    None => Some(head.clone()),
                };
                let Some(rec) = from.and_then(|c| c.files.get(&src).cloned()) else {
                    return Err(error(
                        StatusCode::NOT_FOUND,
                        Some("EntryNotFound"),
                        &format!("{src} does not exist"),
                    ));
                };
                files.insert(dst, rec);
            }
            Change::Delete(p) => deletes.push(p),
            Change::DeleteFolder(p) => {
                folders.insert(p.as_str().to_string());
            }
            Change::Add(p, rec) => adds.push((p, rec)),
        }
    }
    for p in deletes {
        files.remove(&p);
    }
    if !folders.is_empty() {
        // A file goes when one of its folders does.
        files.retain(|k, _| {
            !k.as_str()
                .match_indices('/')
                .any(|(i, _)| folders.contains(&k.as_str()[..i]))
        });
    }
    files.extend(adds);
    if files.len() > MAX_REPO_FILES {
        return Err(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            None,
            &format!("a repo may hold at most {MAX_REPO_FILES} files"),
        ));
    }
    Ok(files)
}
