//! Upload tickets: the capability in an LFS upload URL.
//!
//! The batch endpoint answers each object it wants with upload and verify
//! URLs that carry a ticket: the repo, the object's oid and size, the part
//! size of a multipart upload and an expiry, with an HMAC-SHA256 of all of
//! them under the store's secret key. An upload needs no token (S3's
//! presigned URLs need none either), so the ticket is all the server checks:
//! the MAC is compared in constant time, an expired ticket is refused, and a
//! ticket is good only for its own object: the body must be exactly `size`
//! bytes hashing to `oid`, and a part only `chunk` bytes at its place. A
//! leaked ticket can therefore put only the object it names into the store,
//! which is content-addressed: nothing anyone can use.
//!
//! URL form: `/lfs-upload/{ns}/{name}/{oid}/{size}/{chunk}/{expires}/{mac}`,
//! with `/part/{n}` for a part, and the same under `/lfs-verify/`.

use std::path::Path;
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::route::RouteError;
use crate::error::{HubError, Result};
use crate::ids::{Oid, RepoId};

/// How long an upload ticket is good for (the Hub's presigned URLs last a
/// day too).
pub const TICKET_TTL: Duration = Duration::from_secs(24 * 3600);

/// Shortest secret key accepted from the store's `secret` file.
pub const MIN_KEY_LEN: usize = 32;

pub(super) type HmacSha256 = Hmac<Sha256>;

/// The store's secret key for tickets. Never served, never printed.
pub struct TicketKey(Vec<u8>);

impl std::fmt::Debug for TicketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TicketKey(..)")
    }
}

impl TicketKey {
    /// Read the key at `path`, or make a new one there from the OS's random
    /// source (readable by the owner only) when there is none.
    pub fn load_or_create(path: &Path) -> Result<TicketKey> {
        match std::fs::read(path) {
            Ok(k) if k.len() >= MIN_KEY_LEN => return Ok(TicketKey(k)),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(HubError::io(path, e)),
        }
        let mut raw = [0u8; 32];
        std::io::Read::read_exact(
            &mut std::fs::File::open("/dev/urandom")
                .map_err(|e| HubError::io("/dev/urandom", e))?,
            &mut raw,
        )
        .map_err(|e| HubError::io("/dev/urandom", e))?;
        let key = hex::encode(raw).into_bytes();
        write_private(path, &key)?;
        Ok(TicketKey(key))
    }

    /// A key of these bytes (tests and fuzzing).
    pub fn from_bytes(b: &[u8]) -> TicketKey {
        TicketKey(b.to_vec())
    }

    /// A fresh HMAC-SHA256 under this key, for the other capabilities the
    /// server signs (the strict mode's CDN URLs); each starts with a domain
    /// string of its own so no MAC stands for another kind.
    pub(super) fn hmac(&self) -> HmacSha256 {
        HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length")
    }

    fn mac(&self, t: &Ticket) -> HmacSha256 {
        let mut m = HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        m.update(b"brevis-lfs-ticket-v1\0");
        m.update(t.repo.as_str().as_bytes());
        m.update(b"\0");
        m.update(t.oid.as_str().as_bytes());
        m.update(b"\0");
        m.update(&t.size.to_le_bytes());
        m.update(&t.chunk.to_le_bytes());
        m.update(&t.expires.to_le_bytes());
        m
    }
}

/// Write `data` to a new file at `path` readable by its owner only (temp
/// file, then rename).
fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let tmp = brevis_core::TempFile::beside(path).map_err(|e| HubError::io(path, e))?;
    let mut f = tmp.file().map_err(|e| HubError::io(path, e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| HubError::io(path, e))?;
    }
    f.write_all(data).map_err(|e| HubError::io(path, e))?;
    drop(f);
    tmp.persist(path, true).map_err(|e| HubError::io(path, e))
}

/// Bytes of an HMAC-SHA256 tag (twice as many hex digits in a URL).
pub(super) const MAC_LEN: usize = 32;

/// Digits of the largest `u64`: a longer number in a URL is refused before
/// it is parsed.
pub(super) const MAX_U64_DIGITS: usize = 20;

/// A ticket as parsed from a URL, not yet checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketClaim {
    ticket: Ticket,
    mac: [u8; MAC_LEN],
}

/// A ticket whose MAC and expiry were checked (or that this server issued).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// The repo the upload is for.
    pub repo: RepoId,
    /// The object.
    pub oid: Oid,
    /// Its size in bytes.
    pub size: u64,
    /// The part size of a multipart upload (the whole size for one PUT).
    pub chunk: u64,
    /// Seconds since the epoch after which the ticket is refused.
    pub expires: u64,
}

/// Why a ticket is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TicketError {
    /// The MAC does not match: forged or altered.
    Forged,
    /// Past its expiry.
    Expired,
}

fn number(s: &str) -> std::result::Result<u64, RouteError> {
    if s.is_empty() || s.len() > MAX_U64_DIGITS || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(RouteError::Ticket);
    }
    s.parse().map_err(|_| RouteError::Ticket)
}

impl TicketClaim {
    /// Parse the seven URL segments of a ticket.
    pub fn parse(seg: &[&str]) -> std::result::Result<TicketClaim, RouteError> {
        let [ns, name, oid, size, chunk, expires, mac] = seg else {
            return Err(RouteError::Ticket);
        };
        let repo = RepoId::from_parts(ns, name).map_err(|_| RouteError::Ticket)?;
        let oid = Oid::parse(oid).map_err(|_| RouteError::Ticket)?;
        let mut m = [0u8; MAC_LEN];
        if mac.len() != MAC_LEN * 2 {
            return Err(RouteError::Ticket);
        }
        hex::decode_to_slice(mac, &mut m).map_err(|_| RouteError::Ticket)?;
        let chunk = number(chunk)?;
        if chunk == 0 {
            return Err(RouteError::Ticket);
        }
        Ok(TicketClaim {
            ticket: Ticket {
                repo,
                oid,
                size: number(size)?,
                chunk,
                expires: number(expires)?,
            },
            mac: m,
        })
    }

    /// Check the MAC (in constant time) and the expiry against `now`
    /// (seconds since the epoch).
    pub fn verify(&self, key: &TicketKey, now: u64) -> std::result::Result<Ticket, TicketError> {
        key.mac(&self.ticket)
            .verify_slice(&self.mac)
            .map_err(|_| TicketError::Forged)?;
        if now > self.ticket.expires {
            return Err(TicketError::Expired);
        }
        Ok(self.ticket.clone())
    }
}

impl Ticket {
    /// A ticket for `oid` of `size` bytes in parts of `chunk`, good for
    /// [`TICKET_TTL`] from `now`.
    pub fn issue(repo: RepoId, oid: Oid, size: u64, chunk: u64, now: u64) -> Ticket {
        Ticket {
            repo,
            oid,
            size,
            chunk: chunk.max(1),
            expires: now.saturating_add(TICKET_TTL.as_secs()),
        }
    }

    /// The ticket's URL segments, `{ns}/{name}/{oid}/{size}/{chunk}/{expires}/{mac}`.
    pub fn url_path(&self, key: &TicketKey) -> String {
        let mac = hex::encode(key.mac(self).finalize().into_bytes());
        format!(
            "{}/{}/{}/{}/{}/{}/{mac}",
            self.repo.namespace(),
            self.repo.name(),
            self.oid,
            self.size,
            self.chunk,
            self.expires
        )
    }

    /// How many parts a multipart upload of this object has.
    pub fn parts(&self) -> u64 {
        self.size.div_ceil(self.chunk).max(1)
    }

    /// The length part `n` (from 1) must have, or `None` past the last.
    pub fn part_len(&self, n: u64) -> Option<u64> {
        if n == 0 || n > self.parts() {
            return None;
        }
        let start = (n - 1).checked_mul(self.chunk)?;
        Some(self.chunk.min(self.size - start.min(self.size)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(path: &str) -> TicketClaim {
        let seg: Vec<&str> = path.split('/').collect();
        TicketClaim::parse(&seg).unwrap()
    }

    #[test]
    fn an_issued_ticket_verifies_and_nothing_else_does() {
        let key = TicketKey::from_bytes(&[7; 32]);
        let oid = Oid::parse(&"ab".repeat(32)).unwrap();
        let t = Ticket::issue(RepoId::parse("org/m").unwrap(), oid, 100, 40, 1000);
        let path = t.url_path(&key);
        assert_eq!(claim(&path).verify(&key, 1000), Ok(t.clone()));
        assert_eq!(
            (t.parts(), t.part_len(3), t.part_len(4)),
            (3, Some(20), None)
        );
        // Expired.
        assert_eq!(
            claim(&path).verify(&key, 1000 + TICKET_TTL.as_secs() + 1),
            Err(TicketError::Expired)
        );
        // Another key, or any field changed: forged.
        let other = TicketKey::from_bytes(&[8; 32]);
        assert_eq!(claim(&path).verify(&other, 1000), Err(TicketError::Forged));
        let seg: Vec<&str> = path.split('/').collect();
        for i in 0..6 {
            let mut s: Vec<String> = seg.iter().map(|s| s.to_string()).collect();
            s[i] = match i {
                0 => "evil".into(),
                1 => "x".into(),
                2 => "cd".repeat(32),
                _ => "99999".into(),
            };
            let s: Vec<&str> = s.iter().map(String::as_str).collect();
            let c = TicketClaim::parse(&s).unwrap();
            assert_eq!(c.verify(&key, 1000), Err(TicketError::Forged), "field {i}");
        }
    }

    #[test]
    fn malformed_tickets_do_not_parse() {
        let mac = "0".repeat(64);
        let oid = "a".repeat(64);
        for bad in [
            format!("%2F..%2F..%2Fpwned/{mac}"),
            format!("org/m/{oid}/1/1/1"),
            format!("org/m/../1/1/1/{mac}"),
            format!("../m/{oid}/1/1/1/{mac}"),
            format!("org/m/{oid}/-1/1/1/{mac}"),
            format!("org/m/{oid}/1/0/1/{mac}"),
            format!("org/m/{oid}/1/1/1/{}", "g".repeat(64)),
            format!("org/m/{oid}/1/1/99999999999999999999999/{mac}"),
            format!("org/m/{oid}/1/1/1/{mac}/x"),
        ] {
            let seg: Vec<&str> = bad.split('/').collect();
            assert!(TicketClaim::parse(&seg).is_err(), "{bad}");
        }
    }
}
