//! Strict mode's S3: the listener that the LFS batch API's upload URLs
//! point at, standing for the presigned S3 URLs the Hub answers.
//!
//! The URLs carry the same HMAC upload tickets as without strict mode
//! ([`super::ticket`]); what this listener adds is S3's manners:
//! - `Transfer-Encoding` (a chunked body) is refused with `501 Not
//!   Implemented` and S3's `NotImplemented` XML, before the body is read;
//! - a PUT without `Content-Length` is refused with `411 Length Required`
//!   (`MissingContentLength`);
//! - a request with an `Authorization` header is refused (400): the
//!   presigned URL is the one auth mechanism;
//! - only the PUTs of whole objects and of parts are served here (each
//!   answers an `ETag`); a multipart upload's completion and the verify
//!   call stay on the Hub listener, as on the Hub.
//!
//! Then the upload is checked as without strict mode: exact length, exact
//! SHA-256. Errors are S3's XML bodies.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Response, StatusCode, Uri};

use super::route::{Route, RouteError};
use super::ticket::TicketError;
use super::{Resp, State, lfs, now_secs};

/// An S3 error: `<Error><Code>..</Code><Message>..</Message></Error>`,
/// with `extra` elements after the message.
pub(super) fn xml_error_with(
    status: StatusCode,
    code: &str,
    msg: &str,
    extra: &[(&str, &str)],
) -> Resp {
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let mut x = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{}</Code><Message>{}</Message>",
        esc(code),
        esc(msg)
    );
    for (k, v) in extra {
        x.push_str(&format!("<{k}>{}</{k}>", esc(v)));
    }
    x.push_str("</Error>");
    Response::builder()
        .status(status)
        .header("content-type", "application/xml")
        .body(Body::from(x))
        .unwrap_or_default()
}

/// An S3 error without further elements.
pub(super) fn xml_error(status: StatusCode, code: &str, msg: &str) -> Resp {
    xml_error_with(status, code, msg, &[])
}

/// A finished upload answer, its error (if any) told as S3 tells it.
fn as_s3(r: Resp) -> Resp {
    if r.status().is_success() {
        return r;
    }
    let msg = r
        .headers()
        .get("x-error-message")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("upload refused")
        .to_string();
    let code = match r.status() {
        StatusCode::BAD_REQUEST if msg.contains("does not match") => "BadDigest",
        StatusCode::BAD_REQUEST if msg.contains("Content-Length") => "IncompleteBody",
        StatusCode::BAD_REQUEST => "InvalidRequest",
        StatusCode::FORBIDDEN => "AccessDenied",
        StatusCode::REQUEST_TIMEOUT => "RequestTimeout",
        StatusCode::PAYLOAD_TOO_LARGE => "EntityTooLarge",
        StatusCode::SERVICE_UNAVAILABLE => "SlowDown",
        _ => "InternalError",
    };
    let mut x = xml_error(r.status(), code, &msg);
    if let Some(c) = r.headers().get("connection") {
        x.headers_mut().insert("connection", c.clone());
    }
    x
}

/// A request on the S3 listener.
pub(super) async fn handle(
    st: Arc<State>,
    method: Method,
    uri: Uri,
    h: HeaderMap,
    body: Body,
) -> Resp {
    if h.contains_key("transfer-encoding") {
        let mut r = xml_error_with(
            StatusCode::NOT_IMPLEMENTED,
            "NotImplemented",
            "A header you provided implies functionality that is not implemented",
            &[("Header", "Transfer-Encoding")],
        );
        // The body is not read: the connection cannot be reused.
        r.headers_mut()
            .insert("connection", HeaderValue::from_static("close"));
        return r;
    }
    if h.contains_key("authorization") {
        return xml_error_with(
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
            "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, \
             Signature query string parameter or the Authorization header should be specified",
            &[("ArgumentName", "Authorization")],
        );
    }
    let denied = || xml_error(StatusCode::FORBIDDEN, "AccessDenied", "Access Denied");
    let route = match Route::parse(method.as_str(), uri.path()) {
        Ok(r @ (Route::LfsPut(_) | Route::LfsPart(..))) => r,
        Ok(_) | Err(RouteError::NoEndpoint) => {
            return xml_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                "The specified method is not allowed against this resource.",
            );
        }
        Err(RouteError::Part) => {
            return xml_error(
                StatusCode::BAD_REQUEST,
                "InvalidArgument",
                "Part number must be an integer between 1 and 10000, inclusive",
            );
        }
        Err(_) => return denied(),
    };
    if super::body::content_length(&h).is_none() {
        return xml_error(
            StatusCode::LENGTH_REQUIRED,
            "MissingContentLength",
            "You must provide the Content-Length HTTP header.",
        );
    }
    let claim = match &route {
        Route::LfsPut(t) | Route::LfsPart(t, _) => t,
        _ => return denied(),
    };
    let t = match claim.verify(&st.key, now_secs()) {
        Ok(t) => t,
        Err(TicketError::Forged) => return denied(),
        Err(TicketError::Expired) => {
            return xml_error(StatusCode::FORBIDDEN, "AccessDenied", "Request has expired");
        }
    };
    let r = match route {
        Route::LfsPart(_, n) => lfs::part(&st, &t, n, &h, body).await,
        _ => {
            let mut r = lfs::put(&st, &t, &h, body).await;
            if r.status().is_success()
                && let Ok(v) = HeaderValue::from_str(&format!("\"{}\"", t.oid))
            {
                r.headers_mut().insert("etag", v);
            }
            r
        }
    };
    as_s3(r)
}
