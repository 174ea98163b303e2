//! Request bodies read within limits: a length cap checked from
//! `Content-Length` before anything is read (413 at once) and again while
//! streaming, an idle timeout (a body that sends nothing for a while), and
//! a minimum average rate once a grace period is over (408), so a client
//! trickling bytes cannot hold a connection and its buffers for ever.

use std::time::Duration;

use axum::body::{Body, BodyDataStream, Bytes};
use axum::http::{HeaderMap, StatusCode};
use futures_util::StreamExt as _;
use tokio::time::Instant;

use super::limits::{BODY_GRACE, MIN_BODY_RATE};

/// Why a body was not read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Longer than allowed (or than it said).
    TooLarge {
        /// The limit.
        limit: u64,
    },
    /// Nothing came for too long, or the whole body took too long.
    Timeout,
    /// The connection broke or the body was malformed.
    Broken,
}

impl BodyError {
    /// The status answered.
    pub fn status(&self) -> StatusCode {
        match self {
            BodyError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Timeout => StatusCode::REQUEST_TIMEOUT,
            BodyError::Broken => StatusCode::BAD_REQUEST,
        }
    }

    /// The message answered.
    pub fn message(&self) -> String {
        match self {
            BodyError::TooLarge { limit } => {
                format!("request body larger than the limit of {limit} bytes")
            }
            BodyError::Timeout => "request body too slow".into(),
            BodyError::Broken => "request body broken".into(),
        }
    }
}

/// The `Content-Length` of a request, when it has a valid one.
pub fn content_length(h: &HeaderMap) -> Option<u64> {
    h.get("content-length")?.to_str().ok()?.trim().parse().ok()
}

/// A request body read chunk by chunk within a limit and deadlines.
pub struct BoundedBody {
    stream: BodyDataStream,
    limit: u64,
    read: u64,
    idle: Duration,
    start: Instant,
}

impl BoundedBody {
    /// Start reading `body` of at most `limit` bytes: a `Content-Length`
    /// over the limit is refused before anything is read.
    pub fn new(
        h: &HeaderMap,
        body: Body,
        limit: u64,
        idle: Duration,
    ) -> Result<BoundedBody, BodyError> {
        let declared = content_length(h);
        if declared.is_some_and(|n| n > limit) {
            return Err(BodyError::TooLarge { limit });
        }
        Ok(BoundedBody {
            stream: body.into_data_stream(),
            limit,
            read: 0,
            idle,
            start: Instant::now(),
        })
    }

    /// Bytes read so far.
    pub fn read(&self) -> u64 {
        self.read
    }

    /// The next chunk, `None` at the end.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, BodyError> {
        // The body must keep up [`MIN_BODY_RATE`] on average once
        // [`BODY_GRACE`] is over: what has come so far buys time until then.
        let due = self.start + BODY_GRACE + Duration::from_secs(self.read / MIN_BODY_RATE);
        let wait = self.idle.min(due.saturating_duration_since(Instant::now()));
        let next = tokio::time::timeout(wait, self.stream.next())
            .await
            .map_err(|_| BodyError::Timeout)?;
        match next {
            None => Ok(None),
            Some(Err(_)) => Err(BodyError::Broken),
            Some(Ok(c)) => {
                self.read += c.len() as u64;
                if self.read > self.limit {
                    return Err(BodyError::TooLarge { limit: self.limit });
                }
                Ok(Some(c))
            }
        }
    }

    /// The whole body in memory (it is at most `limit` bytes).
    pub async fn to_bytes(mut self) -> Result<Bytes, BodyError> {
        let mut out = Vec::new();
        while let Some(c) = self.chunk().await? {
            out.extend_from_slice(&c);
        }
        Ok(Bytes::from(out))
    }
}

/// NDJSON lines of a bounded body, one at a time, each at most `max_line`
/// bytes (without its newline). Each byte is scanned once and copied out
/// once, whatever the lines' lengths.
pub struct Lines {
    body: BoundedBody,
    buf: Vec<u8>,
    /// Where the next line starts in `buf`.
    start: usize,
    /// Bytes of `buf` from `start` known to hold no newline.
    scanned: usize,
    max_line: u64,
    done: bool,
}

impl Lines {
    /// Split `body` into lines of at most `max_line` bytes.
    pub fn new(body: BoundedBody, max_line: u64) -> Lines {
        Lines {
            body,
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            max_line,
            done: false,
        }
    }

    /// The next line (without its `\n`), `None` at the end.
    pub async fn next_line(&mut self) -> Result<Option<Vec<u8>>, BodyError> {
        loop {
            let from = self.start + self.scanned;
            if let Some(i) = self.buf[from..].iter().position(|&b| b == b'\n') {
                let end = from + i;
                if (end - self.start) as u64 > self.max_line {
                    return Err(BodyError::TooLarge {
                        limit: self.max_line,
                    });
                }
                let line = self.buf[self.start..end].to_vec();
                self.start = end + 1;
                self.scanned = 0;
                return Ok(Some(line));
            }
            self.scanned = self.buf.len() - self.start;
            if self.scanned as u64 > self.max_line {
                return Err(BodyError::TooLarge {
                    limit: self.max_line,
                });
            }
            if self.done {
                let rest = self.buf.split_off(self.start);
                self.buf.clear();
                self.start = 0;
                self.scanned = 0;
                return Ok((!rest.is_empty()).then_some(rest));
            }
            // Drop the lines already handed out before reading more.
            if self.start > 0 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            match self.body.chunk().await? {
                Some(c) => self.buf.extend_from_slice(&c),
                None => self.done = true,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body_of(parts: Vec<&'static [u8]>) -> Body {
        Body::from_stream(futures_util::stream::iter(
            parts
                .into_iter()
                .map(|p| Ok::<_, std::io::Error>(Bytes::from_static(p))),
        ))
    }

    #[tokio::test]
    async fn limits_and_lines() {
        let mut h = HeaderMap::new();
        h.insert("content-length", "100".parse().unwrap());
        let idle = Duration::from_secs(5);
        assert_eq!(
            BoundedBody::new(&h, Body::empty(), 99, idle).err(),
            Some(BodyError::TooLarge { limit: 99 })
        );
        // A body longer than it said, or than the limit, without a length.
        let b = BoundedBody::new(&HeaderMap::new(), body_of(vec![b"abc", b"def"]), 5, idle);
        assert_eq!(
            b.unwrap().to_bytes().await,
            Err(BodyError::TooLarge { limit: 5 })
        );
        let b = BoundedBody::new(
            &HeaderMap::new(),
            body_of(vec![b"a\nbb", b"b\n\nc"]),
            64,
            idle,
        );
        let mut l = Lines::new(b.unwrap(), 3);
        let mut got = Vec::new();
        while let Some(x) = l.next_line().await.unwrap() {
            got.push(x);
        }
        assert_eq!(
            got,
            vec![b"a".to_vec(), b"bbb".to_vec(), vec![], b"c".to_vec()]
        );
        let b = BoundedBody::new(
            &HeaderMap::new(),
            body_of(vec![b"aaaa", b"aaaa\n"]),
            64,
            idle,
        );
        let mut l = Lines::new(b.unwrap(), 5);
        assert_eq!(l.next_line().await, Err(BodyError::TooLarge { limit: 5 }));
    }

    #[tokio::test]
    async fn many_short_lines() {
        static NL: [u8; 1 << 20] = [b'\n'; 1 << 20];
        let b = BoundedBody::new(
            &HeaderMap::new(),
            body_of(vec![&NL, b"x"]),
            2 << 20,
            Duration::from_secs(5),
        );
        let mut l = Lines::new(b.unwrap(), 16);
        let mut n = 0;
        while let Some(x) = l.next_line().await.unwrap() {
            assert!(x.is_empty() || x == b"x");
            n += 1;
        }
        assert_eq!(n, (1 << 20) + 1);
    }

    #[tokio::test]
    async fn a_silent_body_times_out() {
        let s = futures_util::stream::pending::<std::io::Result<Bytes>>();
        let b = BoundedBody::new(
            &HeaderMap::new(),
            Body::from_stream(s),
            10,
            Duration::from_millis(50),
        );
        assert_eq!(b.unwrap().to_bytes().await, Err(BodyError::Timeout));
    }
}
