//! `verify`: archives decode to their recorded SHA-256 (mirrors, local or
//! on a Hub, in [`super::verify_mirror`]).

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use brevis_core::{DecodeError, DecompressOptions};
use clap::Args;
use serde_json::json;

use crate::Outcome;
use crate::args::{Json, Threads};
use crate::files::{self, Want, workers_for};
use crate::hub_args::{HubArgs, SourceArgs, WorkDirArg};
use crate::progress::Ui;

/// Check that archives decode to their recorded SHA-256 (exit 0 all match;
/// 1 a mismatch: an archive that was read and decodes to other bytes than
/// it records, or than --original; 2 an error: a target that could not be
/// read at all: missing, unreadable, not an archive, truncated, damaged
/// past decoding, or of a newer format).
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  brevis-hub verify model.safetensors.brv --original model.safetensors\n  brevis-hub verify ./packed --json                 # every *.brv below ./packed\n  brevis-hub verify ./mirror-folder --json          # a folder holding brevis.manifest.json\n  HF_ENDPOINT=http://127.0.0.1:8080 brevis-hub verify owner/model-brevis\n  brevis-hub verify org/a-brevis org/b-brevis --endpoint http://127.0.0.1:8080 --revision main --json\n  brevis-hub verify org/model-brevis --work-dir /tmp/brevis-work   # downloads there, not under $HF_HOME\n  brevis-hub verify org/model-brevis --require-source --json   # CI: the source itself must vouch\n\nA file named on the command line is verified as an archive whatever its name.\nAn argument that is no local path is a Hub mirror repo id if it looks like one\n(owner/name), fetched from --endpoint (HF_ENDPOINT) with --token (HF_TOKEN).\nMirrors, local or remote, are verified together, not with archives.\nA mirror's manifest is checked against its source repo where that can be read\n(at --source-endpoint, default --endpoint); where it cannot, the mirror passes on\nits manifest alone (source_checked: false), unless --require-source.\n\nExit codes: 0 every archive matches; 1 a mismatch: an archive that was read\nand does not match (a region's checksum, the recorded SHA-256, or --original);\n2 an error: a target that could not be read at all (missing, not an archive,\ntruncated, damaged past decoding, a newer format, an I/O error). Every target\nis reported before the exit; the worst decides it. A mirror follows the same\nrule, a status per file: 1 `missing`, `corrupt` (an archive read that does not\nmatch) or `mismatch` (not what its manifest or source says); 2 `unreadable` (a\nstored file that is not an archive, truncated, or damaged past decoding),\n`error` (a file that could not be fetched), or a mirror that could not be read."
)]
pub struct VerifyArgs {
    /// Archives, folders of archives, a mirror folder (holding
    /// brevis.manifest.json), or a mirror repo id.
    #[arg(required = true)]
    pub targets: Vec<String>,
    /// The original file: also check the archive records its SHA-256.
    #[arg(long)]
    pub original: Option<PathBuf>,
    #[command(flatten)]
    pub threads: Threads,
    #[command(flatten)]
    pub json: Json,
    /// Revision of a remote mirror (branch or commit).
    #[arg(long, default_value = "main")]
    pub revision: String,
    /// A mirror whose source repo could not be read (private, gone, on
    /// another Hub without --source-endpoint; a local mirror folder never
    /// is) fails (exit 1) instead of passing on its manifest alone.
    #[arg(long)]
    pub require_source: bool,
    /// Where remote mirrors are (--endpoint / HF_ENDPOINT, --token / HF_TOKEN).
    #[command(flatten)]
    pub hub: HubArgs,
    /// Where their source repos are (default: with the mirrors).
    #[command(flatten)]
    pub source: SourceArgs,
    /// Where remote mirrors are downloaded to be checked.
    #[command(flatten)]
    pub work: WorkDirArg,
}

/// Whether a target that is no local path names a Hub repo: `owner/name`,
/// one slash, no leading `.` or `/`, not ending in `.brv`.
fn looks_like_repo_id(t: &str) -> bool {
    let Some((owner, name)) = t.split_once('/') else {
        return false;
    };
    let part = |s: &str| {
        !s.is_empty()
            && !s.starts_with(['.', '-'])
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    part(owner) && part(name) && !t.contains("..") && !t.ends_with(".brv")
}

/// The archives a verify target names: a file (whatever its name), or the
/// `*.brv` files below a folder.
fn archives_of(t: &str, targets: usize) -> Result<Vec<PathBuf>> {
    let p = Path::new(t);
    if std::fs::symlink_metadata(p).is_err() && looks_like_repo_id(t) && targets > 1 {
        bail!("{t}: no such file or folder (nor a mirror repo id: not beside archives)");
    }
    let meta = files::stat(p)?;
    if meta.is_dir() {
        let found = files::collect(&[p.to_path_buf()], Want::Archives)?;
        if found.files.is_empty() {
            bail!("{t}: no .brv archives in this folder");
        }
        return Ok(found.files.into_iter().map(|i| i.path).collect());
    }
    files::check_regular(p, &meta)?;
    Ok(vec![p.to_path_buf()])
}

/// A row's status: all is well.
const OK: u8 = 0;
/// A row's status: the archive does not give its original back (exit 1).
const MISMATCH: u8 = 1;
/// A row's status: the target could not be checked at all (exit 2).
const ERROR: u8 = 2;

/// One line of a verify report.
struct Checked {
    path: PathBuf,
    /// [`OK`], [`MISMATCH`] or [`ERROR`].
    status: u8,
    detail: String,
    /// As the archive records them (`None` when it cannot be read).
    info: Option<brevis_core::ArchiveInfo>,
    /// The row is about `--original`, not an archive.
    original: bool,
}

impl Checked {
    fn error(path: impl Into<PathBuf>, e: &anyhow::Error) -> Checked {
        Checked {
            path: path.into(),
            status: ERROR,
            detail: format!("{e:#}"),
            info: None,
            original: false,
        }
    }

    /// The detail without the path in front (it is printed beside it).
    fn short_detail(&self) -> &str {
        let path = self.path.to_string_lossy();
        self.detail
            .strip_prefix(&*path)
            .and_then(|d| d.strip_prefix(": "))
            .unwrap_or(&self.detail)
    }

    fn word(&self) -> &'static str {
        ["ok", "MISMATCH", "ERROR"][self.status.min(ERROR) as usize]
    }

    fn json(&self) -> serde_json::Value {
        let mut v = json!({
            "path": self.path.to_string_lossy(),
            "archive": (!self.original).then(|| self.path.to_string_lossy()),
            "role": if self.original { "original" } else { "archive" },
            "ok": self.status == OK,
            "status": self.word().to_lowercase(), "detail": self.detail,
            "sha256": self.info.as_ref().map(|i| hex::encode(i.sha256)),
            "size": self.info.as_ref().map(|i| i.original_len),
            "archive_bytes": self.info.as_ref().map(|i| i.archive_len),
        });
        if self.status == ERROR {
            v["error"] = json!(self.detail);
        }
        v
    }
}

/// Decode an archive to nowhere, checking checksums and the SHA-256.
fn check_archive(
    path: &Path,
    threads: usize,
) -> Result<brevis_core::DecompressReport, DecodeError> {
    brevis_core::decompress_to(
        path,
        &mut std::io::sink(),
        &DecompressOptions::default().threads(workers_for(path, threads)),
    )
}

pub fn run(a: VerifyArgs, ui: &Ui) -> Result<Outcome> {
    if is_mirror_run(&a)? {
        return super::verify_mirror::run(&a, ui);
    }
    if a.require_source {
        bail!("--require-source is for mirrors on a Hub, not archives");
    }
    // Every argument is reported: its archives, or why it has none.
    let mut targets: Vec<Result<PathBuf, Checked>> = Vec::new();
    for t in &a.targets {
        match archives_of(t, a.targets.len()) {
            Ok(files) => targets.extend(files.into_iter().map(Ok)),
            Err(e) => targets.push(Err(Checked::error(t, &e))),
        }
    }
    let archives = targets.iter().filter(|t| t.is_ok()).count();
    let mut rows: Vec<Checked> = Vec::new();
    let original = original_sha256(a.original.as_deref(), archives, &mut rows);
    for t in targets {
        rows.push(match t {
            Ok(f) => check_one(f, original, a.threads.threads),
            Err(c) => c,
        });
    }
    report(&rows, a.json.json, ui)?;
    outcome(&rows)
}

/// Whether the targets are mirrors (folders holding a manifest, or repo
/// ids that are no local path), checked to be all mirrors and the
/// options to fit them.
fn is_mirror_run(a: &VerifyArgs) -> Result<bool> {
    let mirror_folder = |p: &Path| p.is_dir() && p.join("brevis.manifest.json").exists();
    // Beside an archive or a folder of archives, a missing path is a typo,
    // not a repo id: it gets its error row beside the others' results.
    let local = a.targets.iter().any(|t| {
        let p = Path::new(t);
        std::fs::symlink_metadata(p).is_ok() && !mirror_folder(p)
    });
    let is_mirror = |t: &String| {
        let p = Path::new(t);
        mirror_folder(p)
            || (!local && std::fs::symlink_metadata(p).is_err() && looks_like_repo_id(t))
    };
    let mirrors = a.targets.iter().filter(|t| is_mirror(t)).count();
    if mirrors == 0 {
        return Ok(false);
    }
    if mirrors != a.targets.len() {
        bail!("mirrors (folders or repo ids) and archives cannot be verified in one run");
    }
    if a.original.is_some() {
        bail!("--original is for one archive, not a mirror");
    }
    if a.require_source
        && let Some(folder) = a.targets.iter().find(|t| Path::new(t).is_dir())
    {
        bail!(
            "--require-source is for mirrors on a Hub: {folder} is a local mirror folder, \
             whose source is never checked"
        );
    }
    Ok(true)
}

/// `--original`'s SHA-256, or `None` (with an error row in `rows` when it
/// is given but cannot be used).
fn original_sha256(
    original: Option<&Path>,
    archives: usize,
    rows: &mut Vec<Checked>,
) -> Option<[u8; 32]> {
    let p = original?;
    let e = if archives != 1 {
        anyhow::anyhow!("--original needs exactly one archive, {archives} given")
    } else {
        match files::sha256_file(p) {
            Ok(h) => return Some(h),
            Err(e) => e,
        }
    };
    rows.push(Checked {
        original: true,
        ..Checked::error(p, &e)
    });
    None
}

/// The row of one archive: decoded to nowhere and compared.
fn check_one(f: PathBuf, original: Option<[u8; 32]>, threads: usize) -> Checked {
    let info = brevis_core::read_info(&f).ok();
    let (status, detail) = match check_archive(&f, threads) {
        Ok(r) => match original {
            Some(o) if o != r.sha256 => (
                MISMATCH,
                format!(
                    "decodes to sha256 {} but the original is {}",
                    hex::encode(r.sha256),
                    hex::encode(o)
                ),
            ),
            _ => (OK, format!("sha256 {}", hex::encode(r.sha256))),
        },
        Err(e) => (status_of(&e), e.to_string()),
    };
    Checked {
        path: f,
        status,
        detail,
        info,
        original: false,
    }
}

/// One rule: a mismatch is an archive that was read to the end and whose
/// bytes are not what it records (a region's checksum, the file's
/// SHA-256). Anything that stops the reading itself is an error: not an
/// archive, truncated, a stream that no longer decodes, a limit, a newer
/// format, an I/O error.
fn status_of(e: &DecodeError) -> u8 {
    match e {
        DecodeError::Checksum { .. } | DecodeError::ShaMismatch { .. } => MISMATCH,
        _ => ERROR,
    }
}

/// The rows on stdout: JSON, or a line each (-q: only those not ok).
fn report(rows: &[Checked], json: bool, ui: &Ui) -> Result<()> {
    if json {
        let worst = rows.iter().map(|r| r.status).max().unwrap_or(OK);
        let mut v = json!({
            "files": rows.iter().map(Checked::json).collect::<Vec<_>>(),
            "ok": worst == OK,
        });
        if let Some(e) = rows.iter().find(|r| r.status == ERROR) {
            v["error"] = json!(e.detail);
        }
        outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    for r in rows {
        if !(ui.quiet && r.status == OK) {
            outln!("{}  {}  {}", r.word(), r.path.display(), r.short_detail());
        }
    }
    Ok(())
}

/// Exit 0, 1 (a mismatch) or an error naming the first row that could not
/// be checked (exit 2).
fn outcome(rows: &[Checked]) -> Result<Outcome> {
    match rows.iter().map(|r| r.status).max().unwrap_or(OK) {
        OK => Ok(Outcome::Ok),
        MISMATCH => Ok(Outcome::Mismatch),
        _ => {
            let errors: Vec<&Checked> = rows.iter().filter(|r| r.status == ERROR).collect();
            let first = errors
                .first()
                .map(|r| {
                    if r.detail.contains(&*r.path.to_string_lossy()) {
                        r.detail.clone()
                    } else {
                        format!("{}: {}", r.path.display(), r.detail)
                    }
                })
                .unwrap_or_default();
            match errors.len() {
                0 | 1 => bail!("{first}"),
                n => bail!("{first} (and {} more errors)", n - 1),
            }
        }
    }
}
