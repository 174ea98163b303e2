//! Identifiers that come from the network, parsed once into types that can
//! only hold a valid value.
//!
//! Whatever names something on disk (an object, a repo folder, a branch
//! file, a commit file, an upload part) is one of these types before it
//! reaches a path: the store's path functions take nothing else, so a string
//! from a request can never become a path. Each type's `parse` is the only
//! way in, and `serde` goes through it too, so a record read back from disk
//! is checked the same way.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{HubError, Result};
use crate::manifest::is_hex;
use crate::paths::{check_repo_id, check_repo_path, check_revision};

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// The validated text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl std::str::FromStr for $name {
            type Err = HubError;
            fn from_str(s: &str) -> Result<Self> {
                $name::parse(s)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
                $name::parse(&s).map_err(|_| {
                    serde::de::Error::custom(concat!("not a valid ", $what))
                })
            }
        }
    };
}

string_id!(
    /// The SHA-256 of a file's content, as the LFS protocol names objects:
    /// 64 hex digits, held in lower case (the store's object names).
    Oid,
    "LFS oid"
);

impl Oid {
    /// Parse 64 hex digits (either case; held in lower case).
    pub fn parse(s: &str) -> Result<Oid> {
        if !is_hex(s, 64) {
            return Err(HubError::invalid("LFS oid", s, "expected 64 hex digits"));
        }
        Ok(Oid(s.to_ascii_lowercase()))
    }

    /// The oid of these 32 digest bytes.
    pub fn from_digest(d: &[u8; 32]) -> Oid {
        Oid(hex::encode(d))
    }

    /// The first two digits: the store's fan-out folder.
    pub fn prefix(&self) -> &str {
        &self.0[..2]
    }
}

string_id!(
    /// A git commit id: 40 hex digits, held in lower case.
    CommitId,
    "commit id"
);

impl CommitId {
    /// Parse 40 hex digits (either case; held in lower case).
    pub fn parse(s: &str) -> Result<CommitId> {
        if !is_hex(s, 40) {
            return Err(HubError::invalid("commit id", s, "expected 40 hex digits"));
        }
        Ok(CommitId(s.to_ascii_lowercase()))
    }

    /// The commit id of these 20 digest bytes.
    pub fn from_digest(d: &[u8; 20]) -> CommitId {
        CommitId(hex::encode(d))
    }
}

string_id!(
    /// A git blob id (the id of a tree entry): 40 hex digits, held in lower
    /// case.
    BlobId,
    "git blob id"
);

impl BlobId {
    /// Parse 40 hex digits (either case; held in lower case).
    pub fn parse(s: &str) -> Result<BlobId> {
        if !is_hex(s, 40) {
            return Err(HubError::invalid(
                "git blob id",
                s,
                "expected 40 hex digits",
            ));
        }
        Ok(BlobId(s.to_ascii_lowercase()))
    }
}

string_id!(
    /// A repo id `namespace/name`: one slash, each part 1 to 96 of
    /// `[A-Za-z0-9._-]`, not starting with `.` or `-`, no `..`.
    RepoId,
    "repo id"
);

impl RepoId {
    /// Parse `namespace/name` (see [`check_repo_id`]).
    pub fn parse(s: &str) -> Result<RepoId> {
        check_repo_id(s)?;
        Ok(RepoId(s.to_string()))
    }

    /// `namespace/name` from its two parts.
    pub fn from_parts(namespace: &str, name: &str) -> Result<RepoId> {
        RepoId::parse(&format!("{namespace}/{name}"))
    }

    /// The namespace (user or organisation).
    pub fn namespace(&self) -> &str {
        self.0.split_once('/').map_or("", |(ns, _)| ns)
    }

    /// The name inside the namespace.
    pub fn name(&self) -> &str {
        self.0.split_once('/').map_or("", |(_, n)| n)
    }
}

string_id!(
    /// A revision as a branch name or commit id: 1 to 255 of
    /// `[A-Za-z0-9._-/]`, no `..`, no empty `/` part, no leading or
    /// trailing `/`.
    Revision,
    "revision"
);

impl Revision {
    /// Parse a branch name or commit id (see [`check_revision`]).
    pub fn parse(s: &str) -> Result<Revision> {
        check_revision(s)?;
        Ok(Revision(s.to_string()))
    }

    /// `main`.
    pub fn main() -> Revision {
        Revision("main".into())
    }

    /// The commit id this revision is, when it is one.
    pub fn commit_id(&self) -> Option<CommitId> {
        CommitId::parse(&self.0).ok()
    }
}

string_id!(
    /// A file path inside a repo: relative, `/`-separated, no empty, `.` or
    /// `..` part, no backslash, control character, drive letter or `.git`
    /// part (see [`check_repo_path`]).
    RepoPath,
    "file path"
);

impl RepoPath {
    /// Parse a path inside a repo.
    pub fn parse(s: &str) -> Result<RepoPath> {
        check_repo_path(s)?;
        Ok(RepoPath(s.to_string()))
    }
}

/// The number of one part of a multipart upload: 1 to [`PartNumber::MAX`]
/// (S3's range).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartNumber(u32);

impl PartNumber {
    /// The largest part number (as on S3).
    pub const MAX: u32 = 10_000;

    /// Parse a decimal part number in `1..=MAX` (digits only, no sign, no
    /// leading zeros).
    pub fn parse(s: &str) -> Result<PartNumber> {
        let bad = || HubError::invalid("part number", s, "expected 1 to 10000");
        if s.is_empty()
            || s.len() > 5
            || s.starts_with('0')
            || !s.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(bad());
        }
        let n: u32 = s.parse().map_err(|_| bad())?;
        PartNumber::new(n).ok_or_else(bad)
    }

    /// `n` when it is in `1..=MAX`.
    pub fn new(n: u32) -> Option<PartNumber> {
        (1..=Self::MAX).contains(&n).then_some(PartNumber(n))
    }

    /// The number.
    pub fn get(self) -> u32 {
        self.0
    }
}

impl fmt::Display for PartNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oids_are_64_hex_digits_in_lower_case() {
        let a = "A".repeat(64);
        assert_eq!(Oid::parse(&a).unwrap().as_str(), "a".repeat(64));
        for bad in [
            "/etc/shadow",
            "./../secret",
            "",
            &"a".repeat(63),
            &"a".repeat(65),
            &format!("{}g", "a".repeat(63)),
            &format!("../{}", "a".repeat(61)),
            &format!("{}\u{e9}", "a".repeat(62)),
        ] {
            assert!(Oid::parse(bad).is_err(), "{bad:?}");
        }
        let o: std::result::Result<Oid, _> = serde_json::from_str("\"/etc/shadow\"");
        assert!(o.is_err());
    }

    #[test]
    fn commit_ids_revisions_repo_ids_and_paths() {
        assert!(CommitId::parse(&"0".repeat(40)).is_ok());
        assert!(CommitId::parse("../../x").is_err());
        assert!(Revision::parse("refs/pr/1").is_ok());
        assert_eq!(
            Revision::parse(&"f".repeat(40)).unwrap().commit_id(),
            Some(CommitId::parse(&"f".repeat(40)).unwrap())
        );
        for bad in ["../main", "/main", "main/", "a//b", "", "m\u{e9}"] {
            assert!(Revision::parse(bad).is_err(), "{bad:?}");
        }
        let r = RepoId::parse("org/model").unwrap();
        assert_eq!((r.namespace(), r.name()), ("org", "model"));
        assert!(RepoId::from_parts("..", "x").is_err());
        assert!(RepoPath::parse("a/../b").is_err());
        assert!(RepoPath::parse("sub/model.safetensors").is_ok());
    }

    #[test]
    fn part_numbers() {
        assert_eq!(PartNumber::parse("1").unwrap().get(), 1);
        assert_eq!(PartNumber::parse("10000").unwrap().get(), 10_000);
        for bad in [
            "0",
            "10001",
            "01",
            "-1",
            "+1",
            "",
            "1e3",
            " 1",
            "99999999999",
        ] {
            assert!(PartNumber::parse(bad).is_err(), "{bad:?}");
        }
    }
}
