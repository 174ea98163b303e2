//! Responses: the Hub's error bodies and codes, JSON answers.

use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode};
use serde_json::{Value, json};

use super::body;
use crate::error::HubError;

pub(super) type Resp = Response<Body>;

/// `x-error-code` of a 500 for a file whose stored object is missing or of
/// the wrong size: retrying will not help (clients need not).
pub const STORE_DAMAGED: &str = "StoreDamaged";

/// Header on a decoded source's answers naming the mirror they come from,
/// so that a client checking a mirror against its source knows there is
/// no source here to check against.
pub const DECODED_FROM: &str = "x-brevis-decoded-from";

pub(super) fn error(status: StatusCode, code: Option<&str>, msg: &str) -> Resp {
    let mut r = Response::builder()
        .status(status)
        .header("content-type", "application/json");
    if let Some(c) = code {
        r = r.header("x-error-code", c);
    }
    if let Ok(v) = HeaderValue::from_str(msg) {
        r = r.header("x-error-message", v);
    }
    r.body(Body::from(json!({"error": msg}).to_string()))
        .unwrap_or_default()
}

pub(super) fn json_resp(status: StatusCode, v: &Value) -> Resp {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(v.to_string()))
        .unwrap_or_default()
}

/// A 500 that tells the client nothing of the server's disk: the cause
/// goes to the server's standard error.
pub(super) fn internal(e: HubError) -> Resp {
    eprintln!("serve: internal error: {e}");
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        None,
        "internal error (the server's log says more)",
    )
}

pub(super) fn repo_not_found() -> Resp {
    error(
        StatusCode::NOT_FOUND,
        Some("RepoNotFound"),
        "Repository not found",
    )
}

pub(super) fn rev_not_found(rev: &str) -> Resp {
    error(
        StatusCode::NOT_FOUND,
        Some("RevisionNotFound"),
        &format!("Invalid rev id: {rev}"),
    )
}

/// 503 with `Retry-After`: a bounded resource is busy.
pub(super) fn busy(what: &str, retry_after_secs: u64) -> Resp {
    let mut r = error(StatusCode::SERVICE_UNAVAILABLE, None, what);
    r.headers_mut()
        .insert("retry-after", HeaderValue::from(retry_after_secs));
    r
}

pub(super) fn body_error(e: &body::BodyError) -> Resp {
    let mut r = error(e.status(), None, &e.message());
    // The rest of the body is not read: the connection cannot be reused.
    r.headers_mut()
        .insert("connection", HeaderValue::from_static("close"));
    r
}
