//! Raw HTTP/1.1 over TCP for the server tests: every header exactly as
//! sent and as answered.

use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// An answer read off the wire.
#[derive(Debug)]
pub(crate) struct Raw {
    pub(crate) status: u16,
    /// Header lines, names lower-cased.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Raw {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Parse an answer (status line, headers, body).
pub(crate) fn parse(bytes: &[u8]) -> Raw {
    let split = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(bytes.len());
    let head = String::from_utf8_lossy(&bytes[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Raw {
        status,
        headers,
        body: bytes.get(split + 4..).unwrap_or(&[]).to_vec(),
    }
}

/// Send `head` (a request's line and headers, ending in a blank line) and
/// `body` on `s`, and read the whole answer. The body is written beside the
/// reading, so an early answer to a body the server stops reading is still
/// seen; the write side stays open (hyper closes a connection whose client
/// shuts down its writing before the answer).
pub(crate) async fn exchange(s: tokio::net::TcpStream, head: String, body: Vec<u8>) -> Raw {
    let (mut rd, mut wr) = s.into_split();
    let writer = tokio::spawn(async move {
        if wr.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        for c in body.chunks(64 << 10) {
            if wr.write_all(c).await.is_err() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(wr);
    });
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), rd.read_to_end(&mut out)).await;
    writer.abort();
    parse(&out)
}
