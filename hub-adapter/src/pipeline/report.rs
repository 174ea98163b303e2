//! What the pipelines report, and the mirror's model card.

use std::path::PathBuf;

use serde::Serialize;

use crate::manifest::{FileEntry, MANIFEST_NAME, Manifest, Source};

/// What a mirror run did.
#[derive(Debug, Clone, Serialize)]
pub struct MirrorReport {
    /// Source repo.
    pub source_repo: String,
    /// Source commit.
    pub source_commit: String,
    /// Destination repo.
    pub dest_repo: String,
    /// Commit made on the destination (None when nothing changed or dry run).
    pub dest_commit: Option<String>,
    /// Nothing had to change.
    pub up_to_date: bool,
    /// Only planned.
    pub dry_run: bool,
    /// The files (archive sizes are 0 in a dry run).
    pub files: Vec<FileEntry>,
    /// Sum of source file sizes.
    pub source_bytes: u64,
    /// Sum of stored sizes plus manifest and prior.
    pub mirror_bytes: u64,
    /// Bytes downloaded from the source.
    pub downloaded_bytes: u64,
    /// Bytes uploaded (LFS objects and inline files).
    pub uploaded_bytes: u64,
    /// LFS objects uploaded.
    pub lfs_objects_sent: usize,
    /// LFS objects the destination already had.
    pub lfs_objects_present: usize,
}

impl MirrorReport {
    /// mirror bytes / source bytes.
    pub fn ratio(&self) -> f64 {
        if self.source_bytes == 0 {
            1.0
        } else {
            self.mirror_bytes as f64 / self.source_bytes as f64
        }
    }
}

/// What a pull did.
#[derive(Debug, Clone, Serialize)]
pub struct PullReport {
    /// Mirror repo.
    pub mirror_repo: String,
    /// Mirror commit.
    pub mirror_commit: String,
    /// Source repo the files were restored as.
    pub source_repo: String,
    /// Source commit.
    pub source_commit: String,
    /// Files restored (or already in place and verified).
    pub files: usize,
    /// Files already in place.
    pub reused: usize,
    /// Bytes of originals in place.
    pub original_bytes: u64,
    /// Bytes downloaded.
    pub downloaded_bytes: u64,
    /// The snapshot folder (or the local folder).
    pub path: PathBuf,
    /// Whether the source repo at its commit was read on the endpoint and
    /// every restored file's size and hash checked against it (else only
    /// against the mirror's manifest: the source is private, gated, gone,
    /// or on another Hub).
    pub source_checked: bool,
}

/// The verdict on one file of a mirror.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyEntry {
    /// Source path.
    pub path: String,
    /// Stored file.
    pub archive: String,
    /// `ok`; `mismatch` (the manifest or the source says otherwise),
    /// `missing` (no stored file), `corrupt` (an archive read to the end
    /// whose bytes are not what it records: a region's checksum, its
    /// SHA-256): a file that fails (exit 1); `unreadable` (a stored file
    /// that is not an archive, is truncated, or cannot be decoded) and,
    /// for a remote mirror, `error` (it could not be downloaded): a file
    /// that could not be checked (exit 2).
    pub status: String,
    /// SHA-256 from the manifest.
    pub expected: String,
    /// SHA-256 of the decoded bytes, when they could be decoded.
    pub actual: Option<String>,
    /// Why, when not ok.
    pub detail: Option<String>,
}

/// The verdict on a mirror.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// What was checked (folder or repo id).
    pub target: String,
    /// The source it claims to mirror.
    pub source: Source,
    /// Every file.
    pub files: Vec<VerifyEntry>,
    /// True when every file decodes to its manifest SHA-256 (and, where
    /// the source was read, the manifest says what the source holds).
    pub ok: bool,
    /// Whether the manifest was checked against the source repo itself
    /// (a mirror on a Hub that serves its source; never for a folder).
    pub source_checked: bool,
    /// Why the source could not be read, when it was looked for and not
    /// read (private, gone, on another Hub, served decoded from the mirror).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_unread: Option<String>,
}

/// A byte count for people: `826170` -> `806.81 KiB`.
pub fn human(n: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", units[i])
    }
}

pub(super) fn model_card(m: &Manifest, dest: &str, endpoint: &str, mirror_bytes: u64) -> String {
    let src = &m.source;
    let total = m.source_bytes();
    let mut s = String::new();
    s.push_str("---\ntags:\n- brevis\n- compressed\n---\n\n");
    s.push_str(&format!("# {} (Brevis mirror)\n\n", src.repo));
    s.push_str(&format!(
        "A lossless, compressed mirror of [{}]({}/{}) at commit `{}` (revision `{}`).\n\
         Every weight file (safetensors, GGUF, PyTorch, ONNX, ...) and every other file of \
         1 MiB or more whose archive is smaller is stored as a `.brv` archive that decodes \
         to the exact original bytes (checked against the source's SHA-256 before upload); \
         every other file is stored unchanged. `{MANIFEST_NAME}` lists every file and its hash.\n\n",
        src.repo, endpoint, src.repo, src.commit, src.revision
    ));
    s.push_str("| file | original | stored | ratio |\n|---|---:|---:|---:|\n");
    for f in &m.files {
        let r = if f.size == 0 {
            1.0
        } else {
            f.archive_size as f64 / f.size as f64
        };
        s.push_str(&format!(
            "| `{}` | {} | {} | {r:.4} |\n",
            f.path,
            human(f.size),
            human(f.archive_size)
        ));
    }
    let ratio = if total == 0 {
        1.0
    } else {
        mirror_bytes as f64 / total as f64
    };
    s.push_str(&format!(
        "\n**Total:** {} original, {} mirrored (ratio {ratio:.4}).\n\n",
        human(total),
        human(mirror_bytes)
    ));
    s.push_str(&format!(
        "## Use\n\n```sh\nbrevis-hub pull {dest}\n```\n\nThis restores the original files into the Hugging Face cache as `{}` at commit `{}`, \
         so `huggingface_hub` and `transformers` load them with `HF_HUB_OFFLINE=1`. \
         `--local-dir DIR` writes a plain folder instead.\n",
        src.repo, src.commit
    ));
    s
}
