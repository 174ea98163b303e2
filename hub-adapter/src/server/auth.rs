//! Who a request is: tokens compared in constant time, access levels, upload tickets.

use axum::http::{HeaderMap, StatusCode};

use super::ticket::{self, TicketClaim};
use super::{Resp, State, error, now_secs};

#[derive(PartialEq, PartialOrd, Clone, Copy)]
pub(super) enum Access {
    Anonymous,
    Read,
    Write,
}

impl State {
    pub(super) fn open(&self) -> bool {
        self.opts.tokens.is_empty() && self.opts.read_tokens.is_empty()
    }

    pub(super) fn access(&self, h: &HeaderMap) -> std::result::Result<Access, Resp> {
        let tok = h
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or(v.strip_prefix("bearer ")))
            .map(str::trim);
        let known =
            |list: &[String], t: &str| list.iter().any(|x| ct_eq(x.as_bytes(), t.as_bytes()));
        match tok {
            _ if self.open() => Ok(Access::Write),
            None => Ok(Access::Anonymous),
            Some(t) if known(&self.opts.tokens, t) => Ok(Access::Write),
            Some(t) if known(&self.opts.read_tokens, t) => Ok(Access::Read),
            Some(_) => Err(error(
                StatusCode::UNAUTHORIZED,
                None,
                "Invalid credentials in Authorization header",
            )),
        }
    }
}

/// Compare two tokens in constant time: their SHA-256 digests, so neither
/// content nor length shows in the time taken.
pub(super) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    use sha2::Digest as _;
    let (x, y) = (sha2::Sha256::digest(a), sha2::Sha256::digest(b));
    x.iter().zip(y.iter()).fold(0u8, |d, (p, q)| d | (p ^ q)) == 0
}

pub(super) fn verify_ticket(
    st: &State,
    t: &TicketClaim,
) -> std::result::Result<ticket::Ticket, Resp> {
    t.verify(&st.key, now_secs()).map_err(|e| {
        error(
            StatusCode::FORBIDDEN,
            None,
            match e {
                ticket::TicketError::Forged => "bad upload ticket",
                ticket::TicketError::Expired => "upload ticket expired: ask the batch API again",
            },
        )
    })
}
