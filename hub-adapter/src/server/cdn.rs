//! Strict mode's CDN: the listener that `resolve` redirects LFS files to,
//! standing for the Hub's CloudFront/S3 download hosts.
//!
//! `resolve` of an LFS file answers `302 Found` with a URL on this listener
//! that carries a [`Capability`]: the stored object to send (the file, or
//! the mirror archive it is decoded from), whether it is decoded, the
//! file's size and SHA-256 and an expiry, with an HMAC-SHA256 of all of them
//! under the store's secret key (as upload tickets are; a domain string of
//! its own keeps either from standing for the other). No path is in it: the
//! object is named by its oid, parsed into an [`Oid`].
//!
//! Like the real CDN, the listener
//! - refuses a request with an `Authorization` header (400: a signed URL is
//!   the one auth mechanism; clients must drop their token when they follow
//!   the redirect to another host);
//! - refuses a GET without `Range` of a file larger than the plain-GET cap
//!   (50 GB by default, as the Hub's CDN does): such files are read in
//!   `Range` parts, which it answers with 206;
//! - answers 403 to a forged, altered or expired capability;
//! - optionally sends each response body at a capped rate, so that a client
//!   reading ranges in parallel is faster than one reading a single stream.
//!
//! Errors are S3's XML bodies.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Response, StatusCode, Uri};
use futures_util::StreamExt as _;
use hmac::Mac as _;

use super::read::{object_stream, parse_range};
use super::s3::xml_error;
use super::ticket::{HmacSha256, MAC_LEN, MAX_U64_DIGITS, TicketError, TicketKey};
use super::{Resp, State, now_secs};
use crate::ids::Oid;

/// How long a CDN URL is good for by default.
pub const CDN_URL_TTL: Duration = Duration::from_secs(3600);

/// Largest file the CDN sends to a GET without `Range` by default (the
/// Hub's 50 GB).
pub const PLAIN_GET_CAP: u64 = 50_000_000_000;

/// Pieces a second a rate-capped body is cut into, so a slow rate never
/// holds one piece for long.
const THROTTLE_TICKS: u64 = 20;

/// Largest piece of a rate-capped body, so a fast rate is still smooth.
const MAX_THROTTLE_PIECE: u64 = 64 << 10;

/// A byte count: digits with an optional unit, decimal (`kB`, `MB`, `GB`,
/// `TB`: powers of 1000) or binary (`KiB`, `MiB`, `GiB`, `TiB`), `B` or
/// none for bytes, case-insensitive: `50GB`, `64MiB`, `1000`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let bad = || format!("{s:?}: expected a byte count such as 1000, 64MiB or 50GB");
    let n: u64 = n.parse().map_err(|_| bad())?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        "t" | "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => return Err(bad()),
    };
    n.checked_mul(mult).ok_or_else(bad)
}

/// A rate in bytes a second: a [`parse_size`] count, optionally followed by
/// `/s` (`50MB/s`, `1048576`), at least 1.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("/s")
        .or_else(|| t.strip_suffix("/S"))
        .unwrap_or(t);
    match parse_size(t) {
        Ok(0) => Err(format!("{s:?}: a rate must be above 0")),
        r => r,
    }
}

/// What a CDN URL lets its bearer download.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capability {
    /// The stored object: the file itself, or the archive it is decoded
    /// from.
    pub object: Oid,
    /// The file's SHA-256 (its ETag).
    pub sha256: Oid,
    /// Decoded on the fly from `object` (a mirror archive).
    pub decode: bool,
    /// The file's size in bytes.
    pub size: u64,
    /// Seconds since the epoch after which the URL is refused.
    pub expires: u64,
}

/// A capability as parsed from a URL, not yet checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapabilityClaim {
    cap: Capability,
    mac: [u8; MAC_LEN],
}

fn mac(key: &TicketKey, c: &Capability) -> HmacSha256 {
    let mut m = key.hmac();
    m.update(b"brevis-cdn-v1\0");
    m.update(c.object.as_str().as_bytes());
    m.update(b"\0");
    m.update(c.sha256.as_str().as_bytes());
    m.update(b"\0");
    m.update(&[u8::from(c.decode)]);
    m.update(&c.size.to_le_bytes());
    m.update(&c.expires.to_le_bytes());
    m
}

fn number(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > MAX_U64_DIGITS || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl Capability {
    /// The URL path, `/cdn/{object}/{sha256}/{raw|brv}/{size}/{expires}/{mac}`.
    pub fn url_path(&self, key: &TicketKey) -> String {
        let m = hex::encode(mac(key, self).finalize().into_bytes());
        format!(
            "/cdn/{}/{}/{}/{}/{}/{m}",
            self.object,
            self.sha256,
            if self.decode { "brv" } else { "raw" },
            self.size,
            self.expires
        )
    }
}

impl CapabilityClaim {
    /// Parse a raw URL path (no percent escapes are taken).
    pub fn parse(path: &str) -> Option<CapabilityClaim> {
        let seg: Vec<&str> = path.split('/').collect();
        let ["", "cdn", object, sha, enc, size, expires, m] = seg.as_slice() else {
            return None;
        };
        let decode = match *enc {
            "raw" => false,
            "brv" => true,
            _ => return None,
        };
        let mut mac = [0u8; MAC_LEN];
        if m.len() != MAC_LEN * 2 {
            return None;
        }
        hex::decode_to_slice(m, &mut mac).ok()?;
        Some(CapabilityClaim {
            cap: Capability {
                object: Oid::parse(object).ok()?,
                sha256: Oid::parse(sha).ok()?,
                decode,
                size: number(size)?,
                expires: number(expires)?,
            },
            mac,
        })
    }

    /// Check the MAC (in constant time), then the expiry against `now`.
    pub fn verify(&self, key: &TicketKey, now: u64) -> Result<Capability, TicketError> {
        mac(key, &self.cap)
            .verify_slice(&self.mac)
            .map_err(|_| TicketError::Forged)?;
        if now > self.cap.expires {
            return Err(TicketError::Expired);
        }
        Ok(self.cap.clone())
    }
}

/// The CDN URL of a capability for `cap` (good for the server's CDN TTL),
/// on the CDN listener at the host the client named.
pub(super) fn location(st: &State, h: &HeaderMap, mut cap: Capability) -> Option<String> {
    let port = st.cdn_addr?.port();
    cap.expires = now_secs().saturating_add(st.opts.cdn_url_ttl.as_secs());
    Some(format!(
        "{}{}",
        super::sibling_url(h, port),
        cap.url_path(&st.key)
    ))
}

/// A request on the CDN listener.
pub(super) async fn handle(st: Arc<State>, method: Method, uri: Uri, h: HeaderMap) -> Resp {
    let head = match method {
        Method::GET => false,
        Method::HEAD => true,
        _ => {
            return xml_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                "The specified method is not allowed against this resource.",
            );
        }
    };
    if h.contains_key("authorization") {
        return xml_error(
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
            "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, \
             Signature query string parameter or the Authorization header should be specified",
        );
    }
    let Some(claim) = CapabilityClaim::parse(uri.path()) else {
        return xml_error(StatusCode::FORBIDDEN, "AccessDenied", "Access Denied");
    };
    let cap = match claim.verify(&st.key, now_secs()) {
        Ok(c) => c,
        Err(TicketError::Forged) => {
            return xml_error(StatusCode::FORBIDDEN, "AccessDenied", "Access Denied");
        }
        Err(TicketError::Expired) => {
            return xml_error(StatusCode::FORBIDDEN, "AccessDenied", "Request has expired");
        }
    };
    let obj = st.store.object_path(&cap.object);
    let size = cap.size;
    match std::fs::metadata(&obj) {
        Ok(m) if m.is_file() && (cap.decode || m.len() == size) => {}
        _ => {
            return xml_error(
                StatusCode::NOT_FOUND,
                "NoSuchKey",
                "The specified key does not exist.",
            );
        }
    }
    let range = match parse_range(&h, size) {
        Ok(r) => r,
        Err(()) => {
            let mut r = xml_error(
                StatusCode::RANGE_NOT_SATISFIABLE,
                "InvalidRange",
                "The requested range is not satisfiable",
            );
            if let Ok(v) = format!("bytes */{size}").parse() {
                r.headers_mut().insert("content-range", v);
            }
            return r;
        }
    };
    let cap_bytes = st.opts.plain_get_cap;
    if range.is_none() && !head && size > cap_bytes {
        return xml_error(
            StatusCode::BAD_REQUEST,
            "InvalidRequest",
            &format!(
                "The file is {size} bytes, over the limit of {cap_bytes} bytes for a single GET: \
                 request it in parts with Range headers (Range: bytes=START-END)"
            ),
        );
    }
    let (start, end) = range.unwrap_or((0, size.saturating_sub(1)));
    let len = if size == 0 { 0 } else { end - start + 1 };
    let mut r = Response::builder()
        .status(if range.is_some() {
            StatusCode::PARTIAL_CONTENT
        } else {
            StatusCode::OK
        })
        .header("etag", format!("\"{}\"", cap.sha256))
        .header("accept-ranges", "bytes")
        .header("content-type", "application/octet-stream")
        .header("content-length", len.to_string());
    if range.is_some() {
        r = r.header("content-range", format!("bytes {start}-{end}/{size}"));
    }
    if head || len == 0 {
        return r.body(Body::empty()).unwrap_or_default();
    }
    let stream = match object_stream(&st, obj, cap.decode, start, len, cap.size).await {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    let body = match st.opts.cdn_rate {
        Some(rate) => Body::from_stream(throttle(stream, rate)),
        None => Body::from_stream(stream),
    };
    r.body(body).unwrap_or_default()
}

/// `s` sent at most `rate` bytes a second (at least 1): chunks are cut to
/// a twentieth of a second's worth (so a slow rate never holds one chunk
/// for long) and each waits until the bytes before it are due.
pub(super) fn throttle<S>(
    s: S,
    rate: u64,
) -> impl futures_util::Stream<Item = std::io::Result<Bytes>> + Send + use<S>
where
    S: futures_util::Stream<Item = std::io::Result<Bytes>> + Send,
{
    let rate = rate.max(1);
    let piece = (rate / THROTTLE_TICKS).clamp(1, MAX_THROTTLE_PIECE) as usize;
    let mut start: Option<tokio::time::Instant> = None;
    let mut sent = 0u64;
    s.flat_map(move |item| {
        let pieces: Vec<std::io::Result<Bytes>> = match item {
            Ok(b) => (0..b.len())
                .step_by(piece)
                .map(|i| Ok(b.slice(i..(i + piece).min(b.len()))))
                .collect(),
            Err(e) => vec![Err(e)],
        };
        futures_util::stream::iter(pieces)
    })
    .then(move |item| {
        let t0 = *start.get_or_insert_with(tokio::time::Instant::now);
        let due = item.as_ref().ok().map(|b| {
            sent += b.len() as u64;
            t0 + Duration::from_secs_f64(sent as f64 / rate as f64)
        });
        async move {
            if let Some(d) = due {
                tokio::time::sleep_until(d).await;
            }
            item
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_issued_capability_verifies_and_nothing_else_does() {
        let key = TicketKey::from_bytes(&[7; 32]);
        let cap = Capability {
            object: Oid::parse(&"ab".repeat(32)).unwrap(),
            sha256: Oid::parse(&"cd".repeat(32)).unwrap(),
            decode: true,
            size: 1234,
            expires: 1000,
        };
        let path = cap.url_path(&key);
        let claim = CapabilityClaim::parse(&path).unwrap();
        assert_eq!(claim.verify(&key, 1000), Ok(cap.clone()));
        assert_eq!(claim.verify(&key, 1001), Err(TicketError::Expired));
        let other = TicketKey::from_bytes(&[8; 32]);
        assert_eq!(claim.verify(&other, 0), Err(TicketError::Forged));
        // Any field changed: forged.
        let seg: Vec<&str> = path.split('/').collect();
        for (i, v) in [
            (2, "ef".repeat(32)),
            (3, "ef".repeat(32)),
            (4, "raw".into()),
            (5, "99999".into()),
            (6, "99999".into()),
        ] {
            let mut s: Vec<String> = seg.iter().map(|x| x.to_string()).collect();
            s[i] = v;
            let c = CapabilityClaim::parse(&s.join("/")).unwrap();
            assert_eq!(c.verify(&key, 0), Err(TicketError::Forged), "field {i}");
        }
        // Malformed: not parsed at all.
        let mac = "0".repeat(64);
        let oid = "a".repeat(64);
        for bad in [
            format!("/cdn/{oid}/{oid}/raw/1/1"),
            format!("/cdn/{oid}/{oid}/zip/1/1/{mac}"),
            format!("/cdn/..%2F{oid}/{oid}/raw/1/1/{mac}"),
            format!("/cdn/{oid}/{oid}/raw/-1/1/{mac}"),
            format!("/cdn/{oid}/{oid}/raw/1/1/{mac}/x"),
            format!("/cdn/{oid}/{oid}/raw/1/1/{}", "g".repeat(64)),
        ] {
            assert!(CapabilityClaim::parse(&bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn sizes_and_rates_parse() {
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size("50GB"), Ok(PLAIN_GET_CAP));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("2 kb"), Ok(2000));
        assert_eq!(parse_rate("50MB/s"), Ok(50_000_000));
        assert_eq!(parse_rate("4096"), Ok(4096));
        for bad in ["", "MB", "-1", "1.5GB", "1XB", "99999999999TB"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert!(parse_rate("0/s").is_err());
    }

    #[tokio::test]
    async fn a_throttled_stream_keeps_its_rate() {
        let data: Vec<std::io::Result<Bytes>> =
            (0..4).map(|_| Ok(Bytes::from(vec![1u8; 25_000]))).collect();
        let t = std::time::Instant::now();
        let out: Vec<_> = throttle(futures_util::stream::iter(data), 200_000)
            .collect()
            .await;
        let n: usize = out.iter().map(|b| b.as_ref().unwrap().len()).sum();
        assert_eq!(n, 100_000);
        // 100 kB at 200 kB/s: half a second.
        assert!(
            t.elapsed() >= Duration::from_millis(450),
            "{:?}",
            t.elapsed()
        );
    }
}
