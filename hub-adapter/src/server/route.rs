//! Request routing: a method and a raw URL path become a [`Route`] whose
//! every identifier is already a type ([`RepoId`], [`Revision`],
//! [`RepoPath`], a [`TicketClaim`], a [`PartNumber`]), or an error that says
//! which part was wrong. Nothing here touches the store: it is a pure
//! function, which the fuzz target `serve_request` drives.

use super::ticket::TicketClaim;
use crate::ids::{PartNumber, RepoId, RepoPath, Revision};
use crate::paths::decode;

/// Longest raw URL path routed; longer ones are refused before decoding.
pub const MAX_URL_PATH: usize = 8 << 10;

/// Most `/`-separated segments in a routed path.
pub const MAX_SEGMENTS: usize = 64;

/// What a request asks for, its identifiers parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `GET /api/whoami-v2`.
    WhoAmI,
    /// `POST /api/repos/create` (the repo id is in the body).
    CreateRepo,
    /// `POST /api/validate-yaml`.
    ValidateYaml,
    /// `GET /api/models/{repo}` and `GET /api/models/{repo}/revision/{rev}`.
    Info {
        /// The repo.
        repo: RepoId,
        /// The revision (`main` when not given).
        rev: Revision,
    },
    /// `GET /api/models/{repo}/refs`.
    Refs {
        /// The repo.
        repo: RepoId,
    },
    /// `GET /api/models/{repo}/tree/{rev}/{path...}`.
    Tree {
        /// The repo.
        repo: RepoId,
        /// The revision.
        rev: Revision,
        /// The folder listed (`None`: the root).
        prefix: Option<RepoPath>,
    },
    /// `POST /api/models/{repo}/preupload/{rev}`.
    Preupload {
        /// The repo.
        repo: RepoId,
        /// The branch.
        rev: Revision,
    },
    /// `POST /api/models/{repo}/branch/{branch}`.
    CreateBranch {
        /// The repo.
        repo: RepoId,
        /// The new branch's name.
        branch: Revision,
    },
    /// `DELETE /api/models/{repo}/branch/{branch}`.
    DeleteBranch {
        /// The repo.
        repo: RepoId,
        /// The branch.
        branch: Revision,
    },
    /// `POST /api/models/{repo}/commit/{rev}`.
    Commit {
        /// The repo.
        repo: RepoId,
        /// The branch.
        rev: Revision,
    },
    /// `POST /{repo}.git/info/lfs/objects/batch`.
    LfsBatch {
        /// The repo.
        repo: RepoId,
    },
    /// `GET` or `HEAD /{repo}/resolve/{rev}/{path...}`.
    Resolve {
        /// The repo.
        repo: RepoId,
        /// The revision.
        rev: Revision,
        /// The file.
        path: RepoPath,
        /// `HEAD`: headers only.
        head: bool,
    },
    /// `PUT /lfs-upload/{ticket}`: a whole object.
    LfsPut(TicketClaim),
    /// `PUT /lfs-upload/{ticket}/part/{n}`: one part of a multipart upload.
    LfsPart(TicketClaim, PartNumber),
    /// `POST /lfs-upload/{ticket}`: complete a multipart upload.
    LfsComplete(TicketClaim),
    /// `POST /lfs-verify/{ticket}`.
    LfsVerify(TicketClaim),
}

/// Why a request has no route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteError {
    /// No endpoint has this method and shape.
    NoEndpoint,
    /// A `%` escape is broken or the path is not UTF-8, too long or has too
    /// many parts.
    BadPath,
    /// The repo id is not one (answered as a missing repo).
    Repo,
    /// The revision is not one (answered as a missing revision).
    Revision(String),
    /// The file path is not one (answered as a missing file).
    Path(String),
    /// A new branch's name is not acceptable.
    Branch(String),
    /// The upload ticket is malformed.
    Ticket,
    /// The part number is not in `1..=10000`.
    Part,
}

fn repo(ns: &str, name: &str) -> Result<RepoId, RouteError> {
    RepoId::from_parts(ns, name).map_err(|_| RouteError::Repo)
}

fn rev(parts: &[&str]) -> Result<Revision, RouteError> {
    let r = parts.join("/");
    Revision::parse(&r).map_err(|_| RouteError::Revision(r))
}

impl Route {
    /// Route `method` (`GET`, `HEAD`, `POST`, `PUT`, `DELETE`) and the raw (still
    /// percent-encoded) `path`.
    pub fn parse(method: &str, path: &str) -> Result<Route, RouteError> {
        if path.len() > MAX_URL_PATH {
            return Err(RouteError::BadPath);
        }
        let raw: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        if raw.len() > MAX_SEGMENTS {
            return Err(RouteError::BadPath);
        }
        let seg: Vec<String> = raw
            .iter()
            .map(|s| decode(s))
            .collect::<Option<_>>()
            .ok_or(RouteError::BadPath)?;
        let s: Vec<&str> = seg.iter().map(String::as_str).collect();
        let get = method == "GET";
        let head = method == "HEAD";
        let post = method == "POST";
        let put = method == "PUT";
        let delete = method == "DELETE";
        Ok(match s.as_slice() {
            ["api", "whoami-v2"] if get => Route::WhoAmI,
            ["api", "repos", "create"] if post => Route::CreateRepo,
            ["api", "validate-yaml"] if post => Route::ValidateYaml,
            ["api", "models", ns, name] if get => Route::Info {
                repo: repo(ns, name)?,
                rev: Revision::main(),
            },
            ["api", "models", ns, name, "revision", r @ ..] if get && !r.is_empty() => {
                Route::Info {
                    repo: repo(ns, name)?,
                    rev: rev(r)?,
                }
            }
            ["api", "models", ns, name, "refs"] if get => Route::Refs {
                repo: repo(ns, name)?,
            },
            ["api", "models", ns, name, "tree", r, p @ ..] if get => {
                let repo = repo(ns, name)?;
                let rev = rev(&[r])?;
                let prefix = match p.join("/").trim_end_matches('/') {
                    "" => None,
                    p => Some(RepoPath::parse(p).map_err(|_| RouteError::Path(p.to_string()))?),
                };
                Route::Tree { repo, rev, prefix }
            }
            ["api", "models", ns, name, "preupload", r @ ..] if post => Route::Preupload {
                repo: repo(ns, name)?,
                rev: rev(r)?,
            },
            ["api", "models", ns, name, "branch", b @ ..] if (post || delete) && !b.is_empty() => {
                let repo = repo(ns, name)?;
                let b = b.join("/");
                match Revision::parse(&b) {
                    Ok(branch) if branch.commit_id().is_none() && !b.starts_with("refs/") => {
                        if post {
                            Route::CreateBranch { repo, branch }
                        } else {
                            Route::DeleteBranch { repo, branch }
                        }
                    }
                    _ => return Err(RouteError::Branch(b)),
                }
            }
            ["api", "models", ns, name, "commit", r @ ..] if post => Route::Commit {
                repo: repo(ns, name)?,
                rev: rev(r)?,
            },
            [ns, name_git, "info", "lfs", "objects", "batch"] if post => {
                let name = name_git
                    .strip_suffix(".git")
                    .ok_or(RouteError::NoEndpoint)?;
                Route::LfsBatch {
                    repo: repo(ns, name)?,
                }
            }
            [ns, name, "resolve", r, p @ ..] if (get || head) && !p.is_empty() => {
                let repo = repo(ns, name)?;
                let rev = rev(&[r])?;
                let p = p.join("/");
                let path = RepoPath::parse(&p).map_err(|_| RouteError::Path(p))?;
                Route::Resolve {
                    repo,
                    rev,
                    path,
                    head: !get,
                }
            }
            ["lfs-upload", t @ ..] if put || post => {
                if let [t @ .., "part", n] = t
                    && put
                {
                    let part = PartNumber::parse(n).map_err(|_| RouteError::Part)?;
                    Route::LfsPart(TicketClaim::parse(t)?, part)
                } else if put {
                    Route::LfsPut(TicketClaim::parse(t)?)
                } else {
                    Route::LfsComplete(TicketClaim::parse(t)?)
                }
            }
            ["lfs-verify", t @ ..] if post => Route::LfsVerify(TicketClaim::parse(t)?),
            _ => return Err(RouteError::NoEndpoint),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(m: &str, p: &str) -> Result<Route, RouteError> {
        Route::parse(m, p)
    }

    #[test]
    fn hub_endpoints_route_with_typed_identifiers() {
        assert_eq!(
            route("GET", "/api/models/org/m/revision/refs%2Fpr%2F1"),
            Ok(Route::Info {
                repo: RepoId::parse("org/m").unwrap(),
                rev: Revision::parse("refs/pr/1").unwrap()
            })
        );
        assert!(matches!(
            route("HEAD", "/org/m/resolve/main/sub/a.json"),
            Ok(Route::Resolve { head: true, .. })
        ));
        assert!(matches!(
            route("GET", "/api/models/org/m/tree/main"),
            Ok(Route::Tree { prefix: None, .. })
        ));
        assert_eq!(
            route("DELETE", "/api/models/org/m/branch/brevis-work%2Fx"),
            Ok(Route::DeleteBranch {
                repo: RepoId::parse("org/m").unwrap(),
                branch: Revision::parse("brevis-work/x").unwrap()
            })
        );
    }

    #[test]
    fn path_like_identifiers_are_refused() {
        for (m, p, want) in [
            ("GET", "/api/models/../etc/tree/main", RouteError::Repo),
            ("GET", "/api/models/%2E%2E/x", RouteError::Repo),
            (
                "GET",
                "/org/m/resolve/main/..%2F..%2Fsecret",
                RouteError::Path("../../secret".into()),
            ),
            (
                "GET",
                "/org/m/resolve/main/%2Fetc%2Fshadow",
                RouteError::Path("/etc/shadow".into()),
            ),
            (
                "GET",
                "/org/m/resolve/..%2F..%2Fx/a",
                RouteError::Revision("../../x".into()),
            ),
            (
                "GET",
                "/org/m/resolve/main/a%00b",
                RouteError::Path("a\0b".into()),
            ),
            ("GET", "/org/m/resolve/main/%zz", RouteError::BadPath),
            ("GET", "/org/m/resolve/main/%C3%28", RouteError::BadPath),
            (
                "POST",
                "/api/models/org/m/branch/refs%2Fheads%2Fx",
                RouteError::Branch("refs/heads/x".into()),
            ),
            (
                "PUT",
                "/lfs-upload/%2F..%2F..%2Fpwned/abc/part/1",
                RouteError::Ticket,
            ),
            ("PUT", "/lfs-upload/org/m/x/part/0", RouteError::Part),
            ("DELETE", "/api/models/org/m", RouteError::NoEndpoint),
            (
                "DELETE",
                "/api/models/org/m/branch/..%2F..%2Fsecret",
                RouteError::Branch("../../secret".into()),
            ),
            (
                "DELETE",
                "/api/models/org/m/branch/refs%2Fheads%2Fmain",
                RouteError::Branch("refs/heads/main".into()),
            ),
        ] {
            assert_eq!(route(m, p), Err(want), "{m} {p}");
        }
        let long = format!("/{}", "a/".repeat(MAX_SEGMENTS));
        assert_eq!(route("GET", &long), Err(RouteError::BadPath));
    }
}
