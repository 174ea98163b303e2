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
pub(super) fn archived(f: &RepoFile) -> bool {
    is_weight(&f.path) || f.size >= ARCHIVE_MIN_BYTES
}

/// Largest file read as a describing file (a TF.js `model.json`, an ONNX
/// model naming external data): the TF.js reader's own bound on a
/// manifest. A larger file describes nothing, whoever runs the mirror.
pub(super) const DESCRIBER_MAX_BYTES: u64 = 16 << 20;

/// Whether `f` is read as a possible describing file: a `.json` or
/// `.onnx` file of at most [`DESCRIBER_MAX_BYTES`]. The same rule for a
/// one-machine mirror and every worker of a plan, which each fetch these.
pub(super) fn is_describer(f: &RepoFile) -> bool {
    let name = f.path.to_ascii_lowercase();
    (name.ends_with(".json") || name.ends_with(".onnx")) && f.size <= DESCRIBER_MAX_BYTES
}

/// Bytes of compressed files a prior is learned from: all of a repo's
/// when they hold no more, else a spread sample of its files up to about
/// this much (the prior samples about 200 tensors; a few shards of a
/// 700 GB repo show them as well as all 163).
pub(super) const PRIOR_SAMPLE_BYTES: u64 = 2 << 30;

/// The files (indices into `files`) a prior is learned from: every
/// compressed file when together they hold at most
/// [`PRIOR_SAMPLE_BYTES`], else files spread over the repo by path (half,
/// then quarters, ...) until they hold that much. One rule for a
/// one-machine mirror and a plan, so both learn the same prior.
pub(super) fn learning_set(files: &[RepoFile]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..files.len()).filter(|&i| archived(&files[i])).collect();
    idx.sort_by(|&a, &b| files[a].path.cmp(&files[b].path));
    let total: u64 = idx.iter().map(|&i| files[i].size).sum();
    if total <= PRIOR_SAMPLE_BYTES {
        return idx;
    }
    let mut picked = Vec::new();
    let mut bytes = 0u64;
    for i in spread(&idx) {
        if bytes >= PRIOR_SAMPLE_BYTES {
            break;
        }
        bytes += files[i].size;
        picked.push(i);
    }
    picked.sort_by(|&a, &b| files[a].path.cmp(&files[b].path));
    picked
}

/// `v` in van der Corput order (0, n/2, n/4, 3n/4, ...): every prefix
/// spread over all of it.
fn spread(v: &[usize]) -> Vec<usize> {
    let n = v.len();
    if n < 2 {
        return v.to_vec();
    }
    let bits = usize::BITS - (n - 1).leading_zeros();
    (0..1usize << bits)
        .map(|i| i.reverse_bits() >> (usize::BITS - bits))
        .filter(|&i| i < n)
        .map(|i| v[i])
        .collect()
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

    #[test]
    fn a_prior_learns_from_all_files_or_a_spread_sample_of_them() {
        let small: Vec<RepoFile> = (0..5)
            .map(|i| file(&format!("m-{i}.safetensors"), 1 << 20))
            .chain([file("config.json", 100)])
            .collect();
        assert_eq!(learning_set(&small), [0, 1, 2, 3, 4]);
        // 163 shards of 4.3 GB: a few, spread from first to last.
        let big: Vec<RepoFile> = (0..163)
            .rev()
            .map(|i| file(&format!("m-{i:05}.safetensors"), 4_300_000_000))
            .collect();
        let got = learning_set(&big);
        let names: Vec<&str> = got.iter().map(|&i| big[i].path.as_str()).collect();
        assert_eq!(names, ["m-00000.safetensors"]);
        let mid: Vec<RepoFile> = (0..10)
            .map(|i| file(&format!("m-{i}.safetensors"), 600 << 20))
            .collect();
        let got = learning_set(&mid);
        let names: Vec<&str> = got.iter().map(|&i| mid[i].path.as_str()).collect();
        assert_eq!(
            names,
            [
                "m-0.safetensors",
                "m-2.safetensors",
                "m-4.safetensors",
                "m-8.safetensors"
            ]
        );
        assert!(is_describer(&file("model.json", 10)) && is_describer(&file("a/m.ONNX", 10)));
        assert!(!is_describer(&file("model.json", DESCRIBER_MAX_BYTES + 1)));
        assert!(!is_describer(&file("group1-shard1of2.bin", 10)));
    }
}
