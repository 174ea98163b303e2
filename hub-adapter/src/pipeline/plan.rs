//! Where each source file goes in a mirror.

use std::collections::HashMap;

use crate::client::RepoFile;
use crate::error::{HubError, Result};
use crate::manifest::{Encoding, MANIFEST_NAME, PRIOR_NAME, SOURCE_PREFIX};

/// File name extensions the Hub holds weights under (safetensors, GGUF,
/// PyTorch, ONNX, NumPy, Keras, Flax, TF Lite, CTranslate2's `model.bin`):
/// such a file is always stored as an archive. Which container it really
/// is, is read from its bytes when it is compressed.
const WEIGHT_EXTENSIONS: &[&str] = &[
    "safetensors",
    "gguf",
    "bin",
    "pt",
    "pth",
    "ckpt",
    "onnx",
    "npy",
    "npz",
    "h5",
    "msgpack",
    "tflite",
    "ot",
];

/// Any other file at least this large is compressed too, and stored as an
/// archive when that is smaller (a tokenizer, a vocabulary); smaller ones
/// (configs, cards) stay as they are, readable on the Hub's pages.
pub(super) const ARCHIVE_MIN_BYTES: u64 = 1 << 20;

pub(super) fn is_safetensors(p: &str) -> bool {
    p.to_ascii_lowercase().ends_with(".safetensors")
}

/// Whether `p` is named as a weight file (see [`WEIGHT_EXTENSIONS`]).
pub(super) fn is_weight(p: &str) -> bool {
    let name = p.rsplit('/').next().unwrap_or(p).to_ascii_lowercase();
    name.rsplit_once('.')
        .is_some_and(|(_, ext)| WEIGHT_EXTENSIONS.contains(&ext))
}

/// Whether the source file `f` is compressed: every weight file, and any
/// other large file (kept as an archive only when smaller, see
/// `archive::store`).
fn archived(f: &RepoFile) -> bool {
    is_weight(&f.path) || f.size >= ARCHIVE_MIN_BYTES
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
            if !is_safetensors(&f.path) && (reserved(&f.path) || f.path.ends_with(".brv")) {
                (format!("{SOURCE_PREFIX}{}", f.path), Encoding::Identity)
            } else if archived(f) {
                let a = format!("{}.brv", f.path);
                if taken.contains(a.as_str()) {
                    (format!("{SOURCE_PREFIX}{a}"), Encoding::Brv)
                } else {
                    (a, Encoding::Brv)
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, size: u64) -> RepoFile {
        RepoFile {
            path: path.into(),
            size,
            oid: "0".repeat(40),
            lfs_sha256: None,
        }
    }

    #[test]
    fn weights_of_every_container_and_large_files_are_archived() {
        let files = [
            file("model.gguf", 10),
            file("pytorch_model.bin", 10),
            file("onnx/model.onnx", 10),
            file("ct2/model.bin", 10),
            file("weights.npz", 10),
            file("model.safetensors", 10),
            file("tokenizer.json", ARCHIVE_MIN_BYTES),
            file("config.json", 600),
            file("README.md", 5 << 20),
            file("old.bin.brv", 10),
        ];
        let names = plan_names(&files);
        let got: Vec<(&str, Encoding)> = names.iter().map(|(n, e)| (n.as_str(), *e)).collect();
        assert_eq!(
            got,
            [
                ("model.gguf.brv", Encoding::Brv),
                ("pytorch_model.bin.brv", Encoding::Brv),
                ("onnx/model.onnx.brv", Encoding::Brv),
                ("ct2/model.bin.brv", Encoding::Brv),
                ("weights.npz.brv", Encoding::Brv),
                ("model.safetensors.brv", Encoding::Brv),
                ("tokenizer.json.brv", Encoding::Brv),
                ("config.json", Encoding::Identity),
                ("brevis.source/README.md", Encoding::Identity),
                ("brevis.source/old.bin.brv", Encoding::Identity),
            ]
        );
        assert!(check_plan("o/r", &files, &names).is_ok());
        assert!(is_weight("a/B.GGUF") && !is_weight("gguf") && !is_weight("x.json"));
    }
}
