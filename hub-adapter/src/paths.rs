//! Validation of names that come from users or servers: repo ids, revisions,
//! file paths inside a repo; percent-encoding for URLs; include/exclude globs.

use crate::error::{HubError, Result};

/// Longest file path accepted inside a repo.
pub const MAX_PATH_LEN: usize = 1024;

/// Check a repo id `namespace/name` (one slash, `[A-Za-z0-9._-]`, no `..`).
pub fn check_repo_id(id: &str) -> Result<()> {
    let bad = |r: &str| Err(HubError::invalid("repo id", id, r));
    let mut parts = id.split('/');
    let (Some(ns), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
        return bad("expected namespace/name");
    };
    for p in [ns, name] {
        if p.is_empty() || p.len() > 96 {
            return bad("each part must be 1 to 96 characters");
        }
        if !p
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return bad("only letters, digits, '.', '_' and '-' are allowed");
        }
        if p.starts_with('.') || p.contains("..") || p.starts_with('-') {
            return bad("a part may not start with '.' or '-' or contain '..'");
        }
    }
    Ok(())
}

/// Check a revision (branch name or commit id).
pub fn check_revision(rev: &str) -> Result<()> {
    let ok = !rev.is_empty()
        && rev.len() <= 255
        && !rev.contains("..")
        && !rev.starts_with('/')
        && !rev.ends_with('/')
        && !rev.contains("//")
        && rev
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'))
        // As git's check-ref-format: no part starts with '.' or ends in
        // `.lock` (a store keeps branches as files under those names).
        && rev
            .split('/')
            .all(|p| !p.starts_with('.') && !p.ends_with(".lock"));
    if ok {
        Ok(())
    } else {
        Err(HubError::invalid(
            "revision",
            rev,
            "use letters, digits, '.', '_', '-' and '/' (no part starting with '.' or ending in '.lock')",
        ))
    }
}

/// Whether a revision is a full commit id (40 hex digits) rather than a
/// branch or tag name. `huggingface_hub` writes `refs/<revision>` only for
/// names: a commit id names no ref.
pub fn is_commit_id(rev: &str) -> bool {
    crate::manifest::is_hex(rev, 40)
}

/// Check a file path inside a repo as given by a server or a user: relative,
/// `/`-separated, no empty, `.` or `..` parts, no backslash, no NUL or
/// control characters, no drive letters, and no `.git` component (in any
/// case: `.git/config`, `sub/.GIT/hooks/x`), which `huggingface_hub` refuses
/// too since writing there could reconfigure a git checkout. Returns it
/// unchanged when safe.
pub fn check_repo_path(p: &str) -> Result<&str> {
    let bad = |r: &str| Err(HubError::invalid("file path", p, r));
    if p.is_empty() || p.len() > MAX_PATH_LEN {
        return bad("empty or too long");
    }
    if p.starts_with('/') {
        return bad("absolute path");
    }
    if p.contains('\\') {
        return bad("backslash in path");
    }
    if p.chars().any(|c| c.is_control()) {
        return bad("control character in path");
    }
    if p.as_bytes().get(1) == Some(&b':') {
        return bad("drive letter in path");
    }
    for part in p.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return bad("empty, '.' or '..' component");
        }
        if part.eq_ignore_ascii_case(".git") {
            return bad("a '.git' component is not allowed");
        }
    }
    Ok(p)
}

/// Percent-encode a string for a URL, keeping `/` when `keep_slash`.
pub fn encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'.' | b'_' | b'~')
            || (keep_slash && b == b'/')
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decode `%XX` escapes (and nothing else). `None` on bad escapes or non-UTF-8.
pub fn decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = b.get(i + 1..i + 3)?;
            let h = std::str::from_utf8(h).ok()?;
            out.push(u8::from_str_radix(h, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `fnmatch`-style glob as `huggingface_hub` applies `allow_patterns`:
/// `*` matches any run of characters (including `/`), `?` one character,
/// `[abc]` / `[!abc]` a set. A pattern ending in `/` matches everything below.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let pat: Vec<char> = if pattern.ends_with('/') {
        format!("{pattern}*").chars().collect()
    } else {
        pattern.chars().collect()
    };
    let s: Vec<char> = name.chars().collect();
    glob_rec(&pat, &s)
}

fn glob_rec(p: &[char], s: &[char]) -> bool {
    // Iterative with backtracking on the last '*'.
    let (mut pi, mut si) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() {
            match p[pi] {
                '*' => {
                    star = Some((pi, si));
                    pi += 1;
                    continue;
                }
                '?' => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                '[' => {
                    if let Some((matched, next)) = class_match(&p[pi..], s[si])
                        && matched
                    {
                        pi += next;
                        si += 1;
                        continue;
                    }
                }
                c if c == s[si] => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, ss)) => {
                pi = sp + 1;
                si = ss + 1;
                star = Some((sp, ss + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Match a `[...]` class at the start of `p`; returns (matched, length of class).
fn class_match(p: &[char], c: char) -> Option<(bool, usize)> {
    let mut i = 1;
    let negate = matches!(p.get(1), Some('!') | Some('^'));
    if negate {
        i += 1;
    }
    let mut found = false;
    let start = i;
    while let Some(&pc) = p.get(i) {
        if pc == ']' && i > start {
            return Some((found != negate, i + 1));
        }
        if p.get(i + 1) == Some(&'-') && p.get(i + 2).is_some_and(|&e| e != ']') {
            let hi = p[i + 2];
            if pc <= c && c <= hi {
                found = true;
            }
            i += 3;
        } else {
            if pc == c {
                found = true;
            }
            i += 1;
        }
    }
    None
}

/// Check a glob: every `[` opens a class that is closed by a `]` (a glob
/// like `[` or `model[0-9` would silently match nothing).
pub fn check_glob(pattern: &str) -> Result<()> {
    let p: Vec<char> = pattern.chars().collect();
    let mut i = 0;
    while i < p.len() {
        if p[i] == '[' {
            match class_match(&p[i..], '\0') {
                Some((_, len)) => i += len,
                None => {
                    return Err(HubError::invalid(
                        "glob",
                        pattern,
                        "'[' without a closing ']'",
                    ));
                }
            }
        } else {
            i += 1;
        }
    }
    Ok(())
}

/// Check every include and exclude glob with [`check_glob`].
pub fn check_globs(include: &[String], exclude: &[String]) -> Result<()> {
    include
        .iter()
        .chain(exclude)
        .try_for_each(|g| check_glob(g))
}

/// Whether `path` passes include (any, or all when empty) and exclude (none) globs.
pub fn selected(path: &str, include: &[String], exclude: &[String]) -> bool {
    (include.is_empty() || include.iter().any(|g| glob_match(g, path)))
        && !exclude.iter().any(|g| glob_match(g, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids() {
        assert!(check_repo_id("org/name-1.0").is_ok());
        for bad in [
            "org",
            "a/b/c",
            "../x",
            "org/..",
            "org/.hidden",
            "o rg/x",
            "/x",
            "org/",
        ] {
            assert!(check_repo_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn paths() {
        assert!(check_repo_path("a/b/model.safetensors").is_ok());
        assert!(check_repo_path(".gitattributes").is_ok());
        assert!(check_repo_path("a/.github/x").is_ok());
        for bad in [
            "../../x",
            "/etc/passwd",
            "a/../b",
            "a\\..\\b",
            "C:x",
            "a//b",
            "./a",
            "",
            "a/\0",
            ".git/config",
            "sub/.GIT/hooks/pre-commit",
            ".Git",
        ] {
            assert!(check_repo_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn globs() {
        assert!(glob_match("*.safetensors", "model.safetensors"));
        assert!(glob_match("*.safetensors", "sub/model.safetensors"));
        assert!(!glob_match("*.json", "model.safetensors"));
        assert!(glob_match("onnx/", "onnx/model.onnx"));
        assert!(glob_match(
            "model-0000[1-2]-*",
            "model-00001-of-00002.safetensors"
        ));
        assert!(glob_match("?odel*", "model"));
        assert!(selected("a.json", &[], &["*.bin".into()]));
        assert!(check_glob("model-0000[1-2]-*").is_ok());
        assert!(check_glob("[!a]*").is_ok());
        assert!(check_glob("*.json").is_ok());
        for bad in ["[", "model[0-9", "a[]"] {
            assert!(check_glob(bad).is_err(), "{bad}");
        }
        assert!(!selected("a.bin", &[], &["*.bin".into()]));
    }

    #[test]
    fn percent() {
        assert_eq!(encode("refs/pr/1", false), "refs%2Fpr%2F1");
        assert_eq!(encode("a b/c", true), "a%20b/c");
        assert_eq!(decode("refs%2Fpr%2F1").as_deref(), Some("refs/pr/1"));
        assert_eq!(decode("%zz"), None);
    }
}
