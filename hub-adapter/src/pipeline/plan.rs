//! Where each source file goes in a mirror.

use std::collections::HashMap;

use crate::client::RepoFile;
use crate::error::{HubError, Result};
use crate::manifest::{Encoding, MANIFEST_NAME, PRIOR_NAME, SOURCE_PREFIX};

pub(super) fn is_safetensors(p: &str) -> bool {
    p.to_ascii_lowercase().ends_with(".safetensors")
}

/// Mirror names a mirror uses for its own files.
fn reserved(p: &str) -> bool {
    matches!(
        p,
        "README.md" | ".gitattributes" | MANIFEST_NAME | PRIOR_NAME
    ) || p.starts_with(SOURCE_PREFIX)
}

/// Where each source file goes in the mirror.
pub(super) fn plan_names(files: &[RepoFile]) -> Vec<(String, Encoding)> {
    let taken: std::collections::HashSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    files
        .iter()
        .map(|f| {
            if is_safetensors(&f.path) {
                let a = format!("{}.brv", f.path);
                if taken.contains(a.as_str()) {
                    (format!("{SOURCE_PREFIX}{a}"), Encoding::Brv)
                } else {
                    (a, Encoding::Brv)
                }
            } else if reserved(&f.path) || f.path.ends_with(".brv") {
                (format!("{SOURCE_PREFIX}{}", f.path), Encoding::Identity)
            } else {
                (f.path.clone(), Encoding::Identity)
            }
        })
        .collect()
}

/// Refuse a plan where two source files would be stored under one mirror
/// path, or one's path would be a folder holding another's (the mirror
/// could not be committed or pulled).
pub(super) fn check_plan(
    repo: &str,
    files: &[RepoFile],
    names: &[(String, Encoding)],
) -> Result<()> {
    let mut by_name: HashMap<&str, &str> = HashMap::new();
    for extra in ["README.md", ".gitattributes", MANIFEST_NAME, PRIOR_NAME] {
        by_name.insert(extra, "(the mirror's own file)");
    }
    for (f, (archive, _)) in files.iter().zip(names) {
        if let Some(other) = by_name.insert(archive.as_str(), f.path.as_str()) {
            return Err(HubError::invalid(
                "mirror path",
                archive,
                format!(
                    "both {other} and {} of {repo} would be stored there; \
                     rename one in the source or leave one out with --exclude",
                    f.path
                ),
            ));
        }
    }
    for (f, (archive, _)) in files.iter().zip(names) {
        let mut prefix = archive.as_str();
        while let Some((parent, _)) = prefix.rsplit_once('/') {
            if let Some(other) = by_name.get(parent) {
                return Err(HubError::invalid(
                    "mirror path",
                    archive,
                    format!(
                        "{} of {repo} would be stored below {parent}, which holds {other}",
                        f.path
                    ),
                ));
            }
            prefix = parent;
        }
    }
    Ok(())
}
