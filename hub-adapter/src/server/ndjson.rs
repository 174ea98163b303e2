//! The lines of the Hub's NDJSON commit payload, parsed into typed
//! operations. A pure function over one line, which the fuzz target
//! `serve_request` drives.

use std::borrow::Cow;

use base64::Engine as _;
use serde::Deserialize;

use super::limits::MAX_REGULAR_FILE;
use crate::ids::{CommitId, Oid, RepoPath, Revision};

/// One operation of a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitOp {
    /// The commit's title and the parent it expects.
    Header {
        /// Title.
        summary: Option<String>,
        /// The head the client expects the branch at.
        parent: Option<CommitId>,
    },
    /// A regular file, its content inline.
    File {
        /// Where.
        path: RepoPath,
        /// The bytes (at most [`MAX_REGULAR_FILE`]).
        content: Vec<u8>,
    },
    /// A file whose content is an uploaded LFS object.
    LfsFile {
        /// Where.
        path: RepoPath,
        /// The object.
        oid: Oid,
        /// Its size, when given.
        size: Option<u64>,
    },
    /// A file removed.
    DeletedFile {
        /// Which.
        path: RepoPath,
    },
    /// A folder removed, with everything below.
    DeletedFolder {
        /// Which.
        path: RepoPath,
    },
    /// A file copied from another path (and revision) of the repo.
    CopyFile {
        /// From.
        src: RepoPath,
        /// To.
        dst: RepoPath,
        /// At this revision (the head when not given).
        src_rev: Option<Revision>,
    },
}

#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow)]
    key: Cow<'a, str>,
    #[serde(borrow, default)]
    value: Value<'a>,
}

#[derive(Deserialize, Default)]
struct Value<'a> {
    #[serde(borrow, default)]
    path: Option<Cow<'a, str>>,
    #[serde(default)]
    summary: Option<String>,
    #[serde(borrow, default, rename = "parentCommit")]
    parent_commit: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    encoding: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    oid: Option<Cow<'a, str>>,
    #[serde(default)]
    size: Option<u64>,
    #[serde(borrow, default, rename = "srcPath")]
    src_path: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "srcRevision")]
    src_revision: Option<Cow<'a, str>>,
}

fn path(p: Option<&str>) -> Result<RepoPath, String> {
    let p = p.unwrap_or("");
    RepoPath::parse(p).map_err(|_| format!("invalid path {p:?}"))
}

/// Parse one line; `Ok(None)` for a blank one.
pub fn parse_line(line: &[u8]) -> Result<Option<CommitOp>, String> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let l: Line =
        serde_json::from_slice(line).map_err(|_| "a commit line is not JSON".to_string())?;
    let v = l.value;
    let op = match &*l.key {
        "header" => CommitOp::Header {
            summary: v.summary,
            parent: match v.parent_commit.as_deref() {
                None => None,
                Some(p) => Some(
                    CommitId::parse(p)
                        .map_err(|_| format!("parentCommit {p:?} is not a commit id"))?,
                ),
            },
        },
        "file" => {
            let path = path(v.path.as_deref())?;
            let content = v.content.as_deref().unwrap_or("");
            let data = match v.encoding.as_deref() {
                Some("base64") => {
                    if (content.len() as u64) / 4 * 3 > MAX_REGULAR_FILE + 3 {
                        return Err(format!(
                            "{path}: a regular file may be at most {MAX_REGULAR_FILE} bytes; \
                             upload larger files with LFS"
                        ));
                    }
                    base64::engine::general_purpose::STANDARD
                        .decode(content)
                        .map_err(|_| format!("{path}: bad base64"))?
                }
                _ => content.as_bytes().to_vec(),
            };
            if data.len() as u64 > MAX_REGULAR_FILE {
                return Err(format!(
                    "{path}: a regular file may be at most {MAX_REGULAR_FILE} bytes; \
                     upload larger files with LFS"
                ));
            }
            CommitOp::File {
                path,
                content: data,
            }
        }
        "lfsFile" => {
            let path = path(v.path.as_deref())?;
            let oid = v.oid.as_deref().unwrap_or("");
            let oid = Oid::parse(oid).map_err(|_| format!("{path}: {oid:?} is not an LFS oid"))?;
            CommitOp::LfsFile {
                path,
                oid,
                size: v.size,
            }
        }
        "deletedFile" => CommitOp::DeletedFile {
            path: path(v.path.as_deref())?,
        },
        "deletedFolder" => CommitOp::DeletedFolder {
            path: path(v.path.as_deref().map(|p| p.trim_end_matches('/')))?,
        },
        "copyFile" => CommitOp::CopyFile {
            src: path(v.src_path.as_deref())?,
            dst: path(v.path.as_deref())?,
            src_rev: match v.src_revision.as_deref() {
                None => None,
                Some(r) => {
                    Some(Revision::parse(r).map_err(|_| format!("invalid srcRevision {r:?}"))?)
                }
            },
        },
        _ => return Err("unknown commit line key".into()),
    };
    Ok(Some(op))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_into_typed_operations() {
        let oid = "a".repeat(64);
        let l = format!(
            r#"{{"key":"lfsFile","value":{{"path":"m.bin","algo":"sha256","oid":"{oid}","size":3}}}}"#
        );
        assert_eq!(
            parse_line(l.as_bytes()),
            Ok(Some(CommitOp::LfsFile {
                path: RepoPath::parse("m.bin").unwrap(),
                oid: Oid::parse(&oid).unwrap(),
                size: Some(3)
            }))
        );
        let l = br#"{"key":"file","value":{"path":"a.txt","content":"aGk=","encoding":"base64"}}"#;
        assert!(
            matches!(parse_line(l), Ok(Some(CommitOp::File { content, .. })) if content == b"hi")
        );
        assert_eq!(parse_line(b"  "), Ok(None));
    }

    #[test]
    fn hostile_lines_are_refused() {
        for l in [
            r#"{"key":"lfsFile","value":{"path":"leak.bin","oid":"/etc/shadow"}}"#,
            r#"{"key":"lfsFile","value":{"path":"leak.bin","oid":"./../secret"}}"#,
            r#"{"key":"lfsFile","value":{"path":"../x","oid":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}}"#,
            r#"{"key":"file","value":{"path":".git/config","content":""}}"#,
            r#"{"key":"file","value":{"path":"a","content":"!!","encoding":"base64"}}"#,
            r#"{"key":"deletedFile","value":{"path":"/etc"}}"#,
            r#"{"key":"copyFile","value":{"srcPath":"a","path":"b","srcRevision":"../x"}}"#,
            r#"{"key":"header","value":{"parentCommit":"../../x"}}"#,
            r#"{"key":"evil","value":{}}"#,
            r#"{"key":1}"#,
            "not json",
        ] {
            assert!(parse_line(l.as_bytes()).is_err(), "{l}");
        }
        let big = format!(
            r#"{{"key":"file","value":{{"path":"a","content":"{}","encoding":"base64"}}}}"#,
            "A".repeat((MAX_REGULAR_FILE as usize / 3 + 2) * 4)
        );
        assert!(parse_line(big.as_bytes()).unwrap_err().contains("LFS"));
    }
}
