//! The LFS endpoints: the batch API, which answers upload URLs carrying a
//! [`Ticket`], and the uploads themselves (one PUT, or parts and a
//! completion), each checked against its ticket: exact length, exact hash.

use std::sync::atomic::Ordering;

use axum::body::Body;
use axum::http::{HeaderMap, Response, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt as _;

use super::body::{BodyError, BoundedBody};
use super::limits::{
    MAX_BATCH_BODY, MAX_BATCH_OBJECTS, MAX_BATCH_PARTS, MAX_COMPLETE_BODY, MAX_JSON_BODY,
    MAX_LFS_OBJECT,
};
use super::ticket::Ticket;
use super::write::{json_body, repo_writable};
use super::{Access, Resp, State, base_url, body_error, error, internal, json_resp, now_secs};
use crate::error::HubError;
use crate::ids::{Oid, PartNumber, RepoId};

/// The part size for an object of `size` bytes: the server's, or larger
/// when that would take more than 10,000 parts (S3's limit).
fn part_size(st: &State, size: u64) -> u64 {
    st.opts
        .multipart_chunk
        .max(size.div_ceil(u64::from(PartNumber::MAX)))
        .max(1)
}

pub(super) async fn batch(
    st: &State,
    access: Access,
    h: &HeaderMap,
    repo: &RepoId,
    body: Body,
) -> Resp {
    if let Err(r) = repo_writable(st, access, repo) {
        return r;
    }
    let v = match json_body(st, h, body, MAX_BATCH_BODY).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    if v.get("operation").and_then(Value::as_str) != Some("upload") {
        return error(
            StatusCode::BAD_REQUEST,
            None,
            "only the upload operation is served",
        );
    }
    let base = base_url(h);
    // Strict mode: objects and parts are PUT to the S3 listener; the
    // completion and verify calls stay on the Hub.
    let put_base = match st.s3_addr {
        Some(a) if st.opts.strict => super::sibling_url(h, a.port()),
        _ => base.clone(),
    };
    let now = now_secs();
    let objects = v.get("objects").and_then(Value::as_array);
    if objects.is_some_and(|o| o.len() > MAX_BATCH_OBJECTS) {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            None,
            &format!("at most {MAX_BATCH_OBJECTS} objects a batch"),
        );
    }
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut parts_out = 0u64;
    for o in objects.into_iter().flatten() {
        let raw = o.get("oid").and_then(Value::as_str).unwrap_or("");
        let size = o.get("size").and_then(Value::as_u64).unwrap_or(0);
        let Ok(oid) = Oid::parse(raw) else {
            out.push(
                json!({"oid": raw, "size": size, "error": {"code": 422, "message": "invalid oid"}}),
            );
            continue;
        };
        if size > MAX_LFS_OBJECT {
            out.push(json!({"oid": oid, "size": size, "error": {"code": 422,
                "message": format!("larger than this server's limit of {MAX_LFS_OBJECT} bytes")}}));
            continue;
        }
        if !seen.insert((oid.clone(), size)) {
            continue;
        }
        if st.store.has_object(&oid, size) {
            out.push(json!({"oid": oid, "size": size}));
            continue;
        }
        let multipart = size > st.opts.multipart_threshold;
        let chunk = if multipart {
            part_size(st, size)
        } else {
            size.max(1)
        };
        let t = Ticket::issue(repo.clone(), oid.clone(), size, chunk, now).url_path(&st.key);
        let upload_url = format!("{base}/lfs-upload/{t}");
        let put_url = format!("{put_base}/lfs-upload/{t}");
        let verify = json!({"href": format!("{base}/lfs-verify/{t}")});
        let upload = if multipart {
            parts_out += size.div_ceil(chunk);
            if parts_out > MAX_BATCH_PARTS {
                return error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    None,
                    "too many parts for one batch answer: ask for fewer objects at once",
                );
            }
            let mut header = serde_json::Map::new();
            header.insert("chunk_size".into(), json!(chunk.to_string()));
            for n in 1..=size.div_ceil(chunk) {
                header.insert(n.to_string(), json!(format!("{put_url}/part/{n}")));
            }
            json!({"href": upload_url, "header": header, "expires_in": super::ticket::TICKET_TTL.as_secs()})
        } else {
            json!({"href": put_url, "expires_in": super::ticket::TICKET_TTL.as_secs()})
        };
        out.push(json!({"oid": oid, "size": size, "authenticated": true, "actions": {"upload": upload, "verify": verify}}));
    }
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/vnd.git-lfs+json")
        .body(Body::from(
            json!({"transfer": "basic", "objects": out, "hash_algo": "sha256"}).to_string(),
        ))
        .unwrap_or_default()
}

fn take_put_budget(st: &State) -> bool {
    let b = st
        .opts
        .faults
        .lfs_put_budget
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    // Reserve a slot first, so concurrent uploads cannot all slip through.
    let before = st.opts.faults.lfs_puts.fetch_add(1, Ordering::SeqCst);
    match *b {
        Some(n) => before < n,
        None => true,
    }
}

/// Stream a request body of exactly `len` bytes into a temp file in the
/// store's `tmp/`, hashing it. A `Content-Length` other than `len` is
/// refused before anything is read.
async fn body_to_tmp(
    st: &State,
    h: &HeaderMap,
    body: Body,
    len: u64,
) -> std::result::Result<(tempfile::TempPath, String), Resp> {
    if super::body::content_length(h).is_some_and(|n| n != len) {
        return Err(error(
            StatusCode::BAD_REQUEST,
            None,
            &format!("Content-Length differs from the {len} bytes the upload is for"),
        ));
    }
    let mut body = BoundedBody::new(h, body, len, st.opts.limits.body_idle_timeout)
        .map_err(|e| body_error(&e))?;
    let tmp = tempfile::NamedTempFile::new_in(st.store.tmp_dir())
        .map_err(|e| internal(HubError::io(st.store.tmp_dir(), e)))?;
    let (f, path) = tmp.into_parts();
    let mut f = tokio::fs::File::from_std(f);
    let mut sha = Sha256::new();
    let t0 = tokio::time::Instant::now();
    loop {
        let c = match body.chunk().await {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => return Err(body_error(&e)),
        };
        // Strict mode's S3 may stand for a slow link: read no faster than it.
        if let Some(rate) = st.opts.s3_rate.filter(|_| st.opts.strict) {
            let due = t0 + std::time::Duration::from_secs_f64(body.read() as f64 / rate as f64);
            tokio::time::sleep_until(due).await;
        }
        sha.update(&c);
        f.write_all(&c)
            .await
            .map_err(|e| internal(HubError::io(&*path, e)))?;
    }
    if body.read() != len {
        return Err(body_error(&BodyError::Broken));
    }
    f.flush()
        .await
        .map_err(|e| internal(HubError::io(&*path, e)))?;
    Ok((path, hex::encode(sha.finalize())))
}

fn ok_empty() -> Resp {
    Response::builder()
        .status(StatusCode::OK)
        .body(Body::empty())
        .unwrap_or_default()
}

/// `PUT` of a whole object.
pub(super) async fn put(st: &State, t: &Ticket, h: &HeaderMap, body: Body) -> Resp {
    if !take_put_budget(st) {
        return error(StatusCode::BAD_REQUEST, None, "upload refused by test hook");
    }
    let (tmp, sha) = match body_to_tmp(st, h, body, t.size).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    if sha != t.oid.as_str() {
        return error(
            StatusCode::BAD_REQUEST,
            None,
            "content does not match the oid",
        );
    }
    let p = match tmp.keep() {
        Ok(p) => p,
        Err(e) => return internal(HubError::io(st.store.tmp_dir(), e.error)),
    };
    if let Err(e) = st.store.put_object_file(&p, &t.oid) {
        let _ = std::fs::remove_file(&p);
        return internal(e);
    }
    ok_empty()
}

/// `PUT` of part `n`: exactly its length, into the object's parts folder.
pub(super) async fn part(st: &State, t: &Ticket, n: PartNumber, h: &HeaderMap, body: Body) -> Resp {
    let Some(len) = t.part_len(u64::from(n.get())) else {
        return error(
            StatusCode::BAD_REQUEST,
            None,
            &format!("part {n} is past the last of {}", t.parts()),
        );
    };
    if !take_put_budget(st) {
        return error(StatusCode::BAD_REQUEST, None, "upload refused by test hook");
    }
    let (tmp, sha) = match body_to_tmp(st, h, body, len).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let dir = st.store.parts_dir(&t.oid);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return internal(HubError::io(dir, e));
    }
    if let Err(e) = tmp.persist(dir.join(format!("{:08}", n.get()))) {
        return internal(HubError::io(dir, e.error));
    }
    Response::builder()
        .status(StatusCode::OK)
        .header("etag", format!("\"{sha}\""))
        .body(Body::empty())
        .unwrap_or_default()
}

/// `POST` completing a multipart upload: the parts, in order, must be all
/// of them and hash to the oid; they are joined by streaming (never held in
/// memory), then removed.
pub(super) async fn complete(st: &State, t: &Ticket, h: &HeaderMap, body: Body) -> Resp {
    let v = match json_body(st, h, body, MAX_COMPLETE_BODY).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    if st.store.has_object(&t.oid, t.size) {
        let _ = std::fs::remove_dir_all(st.store.parts_dir(&t.oid));
        return json_resp(StatusCode::OK, &json!({}));
    }
    let parts = v
        .get("parts")
        .and_then(Value::as_array)
        .map(|p| {
            p.iter()
                .map(|x| x.get("partNumber").and_then(Value::as_u64).unwrap_or(0))
                .collect::<Vec<u64>>()
        })
        .unwrap_or_default();
    let want = t.parts();
    if parts.len() as u64 != want || parts.iter().enumerate().any(|(i, &n)| n != i as u64 + 1) {
        return error(
            StatusCode::BAD_REQUEST,
            None,
            &format!("expected parts 1 to {want}, in order"),
        );
    }
    // One completion of an object at a time (each joins its parts on a
    // blocking thread).
    let Some(_joining) = Joining::start(st, &t.oid) else {
        return error(
            StatusCode::CONFLICT,
            None,
            "this object's parts are being joined already",
        );
    };
    let store = st.store.clone();
    let t = t.clone();
    let res = tokio::task::spawn_blocking(move || -> std::result::Result<(), String> {
        let dir = store.parts_dir(&t.oid);
        let mut tmp =
            tempfile::NamedTempFile::new_in(store.tmp_dir()).map_err(|e| e.to_string())?;
        let mut sha = Sha256::new();
        let mut total = 0u64;
        let mut buf = vec![0u8; JOIN_BUF];
        for n in 1..=want {
            let p = dir.join(format!("{n:08}"));
            let mut f = std::fs::File::open(&p).map_err(|e| format!("part {n}: {e}"))?;
            loop {
                let k =
                    std::io::Read::read(&mut f, &mut buf).map_err(|e| format!("part {n}: {e}"))?;
                if k == 0 {
                    break;
                }
                sha.update(&buf[..k]);
                total += k as u64;
                std::io::Write::write_all(&mut tmp, &buf[..k]).map_err(|e| e.to_string())?;
            }
        }
        if total != t.size || hex::encode(sha.finalize()) != t.oid.as_str() {
            return Err("assembled parts do not match the oid".into());
        }
        let (_, p) = tmp.keep().map_err(|e| e.to_string())?;
        store
            .put_object_file(&p, &t.oid)
            .map_err(|e| e.to_string())?;
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    })
    .await;
    match res {
        Ok(Ok(())) => json_resp(StatusCode::OK, &json!({})),
        Ok(Err(m)) => error(StatusCode::BAD_REQUEST, None, &m),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, None, &e.to_string()),
    }
}

/// Bytes copied at a time when parts are joined into one object.
const JOIN_BUF: usize = 256 << 10;

/// An object whose parts are being joined, for as long as this lives.
struct Joining<'a> {
    st: &'a State,
    oid: Oid,
}

impl<'a> Joining<'a> {
    fn start(st: &'a State, oid: &Oid) -> Option<Joining<'a>> {
        let mut j = st.joining.lock().unwrap_or_else(|p| p.into_inner());
        j.insert(oid.clone()).then(|| Joining {
            st,
            oid: oid.clone(),
        })
    }
}

impl Drop for Joining<'_> {
    fn drop(&mut self) {
        self.st
            .joining
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.oid);
    }
}

/// `POST` verify: the object is stored with its size.
pub(super) async fn verify(st: &State, t: &Ticket, h: &HeaderMap, body: Body) -> Resp {
    if let Err(r) = json_body(st, h, body, MAX_JSON_BODY).await {
        return r;
    }
    if st.store.has_object(&t.oid, t.size) {
        json_resp(StatusCode::OK, &json!({"message": "Object verified"}))
    } else {
        error(StatusCode::NOT_FOUND, None, "object not found")
    }
}
