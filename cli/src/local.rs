//! Local commands: compress, decompress, verify, inspect, bench, prior.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use brevis_core::container::{self, SegmentKind};
use brevis_core::{CompressOptions, DecodeError, DecompressOptions, Dtype, LearnOptions, Prior};
use clap::{Args, Subcommand};
use serde_json::json;

use crate::Outcome;
use crate::progress::Ui;

/// Compress files or folders into `.brv` archives.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  brevis-hub compress model.safetensors            # writes model.safetensors.brv\n  brevis-hub compress ./my-model -o ./packed -T 2   # a folder, one prior for all shards\n\nWith -o and a folder among the inputs (or several inputs), -o is a folder and\nthe files found in a folder keep their path below it (./my-model/1_Pooling/config.json\n-> ./packed/1_Pooling/config.json.brv). Only regular files are read (not pipes,\ndevices or /proc files); symlinks to files are followed, symlinks to folders are not."
)]
pub struct CompressArgs {
    /// Files or folders (folders are walked; `.brv` files and hidden entries are skipped).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Output file (one file given) or folder (several inputs, a folder
    /// among them, an existing folder, or a name ending in `/`).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Worker threads (0 = all cores).
    #[arg(short = 'T', long, default_value_t = 0, value_parser = crate::threads_parser())]
    pub threads: usize,
    /// Overwrite existing outputs (never an input).
    #[arg(short, long)]
    pub force: bool,
    /// Search budget: candidate programs judged per tensor.
    #[arg(long, default_value_t = brevis_core::container::DEFAULT_BUDGET)]
    pub budget: u32,
    /// Prior to steer the search (from `brevis-hub prior learn`). Without
    /// it, one prior is learned from a sample of all the inputs' tensors.
    #[arg(long)]
    pub prior: Option<PathBuf>,
    /// Use the uniform prior (no learning).
    #[arg(long, conflicts_with = "prior")]
    pub no_prior: bool,
    /// Skip the proof: by default each archive is decoded and checked
    /// against the input's length and SHA-256 before it is renamed into
    /// place (it is the only check that the programs rebuild the input).
    #[arg(long)]
    pub no_verify: bool,
    /// JSON report on stdout.
    #[arg(long)]
    pub json: bool,
    /// Words per region (advanced: the unit of parallelism and of coder adaptivity).
    #[arg(long, hide = true, default_value_t = brevis_core::container::DEFAULT_REGION_WORDS)]
    pub region_words: u64,
}

/// Decompress `.brv` archives back to the original files.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  brevis-hub decompress model.safetensors.brv      # writes model.safetensors\n  brevis-hub decompress ./packed -o ./restored      # every *.brv below ./packed\n\nEach output is named after its archive minus .brv (model.safetensors.brv ->\nmodel.safetensors); an archive named otherwise gives NAME.out (a.bin -> a.bin.out).\nWith -o and a folder among the inputs (or several inputs), -o is a folder and the\narchives found in a folder keep their path below it."
)]
pub struct DecompressArgs {
    /// Archives (any name), or folders (their `*.brv` files, walked).
    #[arg(required = true)]
    pub archives: Vec<PathBuf>,
    /// Output file (one archive given) or folder (several inputs, a folder
    /// among them, an existing folder, or a name ending in `/`).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Worker threads (0 = all cores).
    #[arg(short = 'T', long, default_value_t = 0, value_parser = crate::threads_parser())]
    pub threads: usize,
    /// Overwrite existing outputs (never an input).
    #[arg(short, long)]
    pub force: bool,
}

/// Check that archives decode to their recorded SHA-256 (exit 0 all match;
/// 1 a mismatch: an archive that is damaged or decodes to other bytes; 2 an
/// error: a target that cannot be checked, missing, unreadable, not an
/// archive or of a newer format).
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  brevis-hub verify model.safetensors.brv --original model.safetensors\n  brevis-hub verify ./packed --json                 # every *.brv below ./packed\n  brevis-hub verify ./mirror-folder --json          # a folder holding brevis.manifest.json\n  HF_ENDPOINT=http://127.0.0.1:8080 brevis-hub verify owner/model-brevis\n  brevis-hub verify org/a-brevis org/b-brevis --endpoint http://127.0.0.1:8080 --revision main --json\n  brevis-hub verify org/model-brevis --work-dir /tmp/brevis-work   # downloads there, not under $HF_HOME\n  brevis-hub verify org/model-brevis --require-source --json   # CI: the source itself must vouch\n\nA file named on the command line is verified as an archive whatever its name.\nAn argument that is no local path is a Hub mirror repo id if it looks like one\n(owner/name), fetched from --endpoint (HF_ENDPOINT) with --token (HF_TOKEN).\nMirrors, local or remote, are verified together, not with archives.\nA mirror's manifest is checked against its source repo where that can be read\n(at --source-endpoint, default --endpoint); where it cannot, the mirror passes on\nits manifest alone (source_checked: false), unless --require-source."
)]
pub struct VerifyArgs {
    /// Archives, folders of archives, a mirror folder (holding
    /// brevis.manifest.json), or a mirror repo id.
    #[arg(required = true)]
    pub targets: Vec<String>,
    /// The original file: also check the archive records its SHA-256.
    #[arg(long)]
    pub original: Option<PathBuf>,
    /// Worker threads (0 = all cores).
    #[arg(short = 'T', long, default_value_t = 0, value_parser = crate::threads_parser())]
    pub threads: usize,
    /// JSON report on stdout.
    #[arg(long)]
    pub json: bool,
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
    pub hub: crate::hub_cmds::HubArgs,
    /// Where their source repos are (default: with the mirrors).
    #[command(flatten)]
    pub source: crate::hub_cmds::SourceArgs,
    /// Where remote mirrors are downloaded to be checked.
    #[command(flatten)]
    pub work: crate::hub_cmds::WorkDirArg,
}

/// Show each tensor's program and what it saved.
#[derive(Args, Debug)]
#[command(
    after_help = "Example:\n  brevis-hub inspect model.safetensors.brv --json | jq '.summary'"
)]
pub struct InspectArgs {
    /// The archive.
    pub archive: PathBuf,
    /// JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Ratio and speed beside zstd -3 and -19 on the same files, in one run.
#[derive(Args, Debug)]
#[command(
    after_help = "Example:\n  brevis-hub bench ~/.cache/brevis-data/models/minilm-l6-v2 --json"
)]
pub struct BenchArgs {
    /// Files or folders.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Search budget.
    #[arg(long, default_value_t = brevis_core::container::DEFAULT_BUDGET)]
    pub budget: u32,
    /// Skip zstd -19 (slow on big files).
    #[arg(long)]
    pub no_zstd19: bool,
    /// Prior to use (default: learn one from the files, timed separately).
    #[arg(long)]
    pub prior: Option<PathBuf>,
    /// Use the uniform prior.
    #[arg(long, conflicts_with = "prior")]
    pub no_prior: bool,
}

/// Prior commands.
#[derive(Subcommand, Debug)]
pub enum PriorCommand {
    /// Learn a prior from a stratified sample of these files' tensors.
    #[command(
        after_help = "Example:\n  brevis-hub prior learn ./my-model -o brevis.prior.json\n  brevis-hub compress ./my-model --prior brevis.prior.json"
    )]
    Learn {
        /// Files or folders.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Output file.
        #[arg(short, long, default_value = "brevis.prior.json")]
        output: PathBuf,
        /// Search budget per sampled tensor.
        #[arg(long, default_value_t = LearnOptions::default().budget)]
        budget: u32,
        /// Most tensors sampled (two a group of tensors, at least 96).
        #[arg(long, default_value_t = LearnOptions::default().max_tensors)]
        max_tensors: usize,
        /// Overwrite the output.
        #[arg(short, long)]
        force: bool,
    },
}

/// One file found under the paths given.
#[derive(Debug, Clone)]
struct Input {
    /// The file.
    path: PathBuf,
    /// Its path below the folder argument it was found in (`None`: the
    /// file was named on the command line).
    below: Option<PathBuf>,
}

/// What [`collect`] found.
#[derive(Default)]
struct Found {
    files: Vec<Input>,
    /// Inputs left out, and why (`X.brv is already a Brevis archive`).
    skipped: Vec<String>,
    /// Whether any argument was a folder.
    any_folder: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Want {
    /// Files to compress: `.brv` files are skipped.
    Sources,
    /// Archives: `*.brv` in folders; a file named on the command line
    /// whatever its name.
    Archives,
}

/// The files under `paths`: files as named, folders walked in name order
/// (hidden entries skipped; symlinks to files followed, symlinks to
/// folders not). Everything taken must be a regular file, and a dangling
/// symlink is an error, all found before anything is written.
fn collect(paths: &[PathBuf], want: Want) -> Result<Found> {
    let mut found = Found::default();
    for p in paths {
        let meta = stat(p)?;
        if meta.is_dir() {
            found.any_folder = true;
            let before = found.files.len();
            let mut archives = 0;
            walk(p, p, want, &mut found, &mut archives)?;
            let why = format!("{archives} .brv file(s), already Brevis archives");
            if found.files.len() == before {
                found.skipped.push(format!(
                    "{} holds no {}{}",
                    p.display(),
                    match want {
                        Want::Sources => "files to compress",
                        Want::Archives => ".brv archives",
                    },
                    if archives > 0 {
                        format!(" (only {why})")
                    } else {
                        String::new()
                    }
                ));
            } else if archives > 0 {
                found.skipped.push(format!("in {}: {why}", p.display()));
            }
        } else {
            check_regular(p, &meta)?;
            if want == Want::Sources && is_brv(p) {
                found
                    .skipped
                    .push(format!("{} is already a Brevis archive", p.display()));
            } else {
                found.files.push(Input {
                    path: p.clone(),
                    below: None,
                });
            }
        }
    }
    // One file named twice (`a` and `./a`, a hard link, a folder and a
    // file in it) is taken once: twice would code it twice, or write its
    // output and then refuse to overwrite it half-way.
    let mut seen: std::collections::HashMap<(u64, u64), PathBuf> = Default::default();
    let mut unique = Vec::with_capacity(found.files.len());
    for f in std::mem::take(&mut found.files) {
        use std::os::unix::fs::MetadataExt;
        let m = stat(&f.path)?;
        match seen.entry((m.dev(), m.ino())) {
            std::collections::hash_map::Entry::Occupied(first) => found.skipped.push(format!(
                "{} is {} again",
                f.path.display(),
                first.get().display()
            )),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(f.path.clone());
                unique.push(f);
            }
        }
    }
    found.files = unique;
    Ok(found)
}

fn walk(
    root: &Path,
    dir: &Path,
    want: Want,
    found: &mut Found,
    archives: &mut usize,
) -> Result<()> {
    let listing = || format!("listing {}", dir.display());
    let mut entries = Vec::new();
    for e in std::fs::read_dir(dir).with_context(listing)? {
        entries.push(e.with_context(listing)?.path());
    }
    entries.sort();
    for e in entries {
        if e.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        {
            continue;
        }
        let own =
            std::fs::symlink_metadata(&e).with_context(|| format!("reading {}", e.display()))?;
        let meta = if own.file_type().is_symlink() {
            let m = stat(&e)?;
            if m.is_dir() {
                // Not followed: a link to a parent would loop, and a link
                // elsewhere would pull in files from outside the folder.
                found.skipped.push(format!(
                    "{} is a symlink to a folder (not followed)",
                    e.display()
                ));
                continue;
            }
            m
        } else {
            own
        };
        if meta.is_dir() {
            walk(root, &e, want, found, archives)?;
            continue;
        }
        match want {
            Want::Sources if is_brv(&e) => {
                *archives += 1;
                continue;
            }
            Want::Archives if !is_brv(&e) => continue,
            _ => {}
        }
        check_regular(&e, &meta)?;
        let below = e.strip_prefix(root).map(Path::to_path_buf).ok();
        found.files.push(Input { path: e, below });
    }
    Ok(())
}

/// `metadata` (following symlinks), with errors that say what is wrong.
fn stat(p: &Path) -> Result<std::fs::Metadata> {
    let e = match std::fs::metadata(p) {
        Ok(m) => return Ok(m),
        Err(e) => e,
    };
    if e.kind() == std::io::ErrorKind::NotFound {
        if let Ok(target) = std::fs::read_link(p) {
            bail!(
                "{}: dangling symlink (its target {} does not exist)",
                p.display(),
                target.display()
            );
        }
        bail!("{}: no such file or folder", p.display());
    }
    Err(anyhow::Error::new(e).context(p.display().to_string()))
}

/// Only regular files are read: the codec reads a file by position up to
/// the length `stat` gives, which a pipe or a device does not have, and
/// which a /proc or /sys file gets wrong (an archive of an empty file).
fn check_regular(p: &Path, meta: &std::fs::Metadata) -> Result<()> {
    use std::io::Read as _;
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if !meta.is_file() {
        let what = if t.is_dir() {
            "a folder"
        } else if t.is_fifo() {
            "a pipe"
        } else if t.is_char_device() || t.is_block_device() {
            "a device"
        } else if t.is_socket() {
            "a socket"
        } else {
            "not a file"
        };
        bail!(
            "{} is not a regular file ({what}); only regular files can be read (save it to a file first)",
            p.display()
        );
    }
    if meta.len() == 0 {
        let mut one = [0u8; 1];
        let n = std::fs::File::open(p)
            .and_then(|mut f| f.read(&mut one))
            .with_context(|| format!("reading {}", p.display()))?;
        if n > 0 {
            bail!(
                "{} is not a regular file: its size says 0 bytes but it has content (a /proc or /sys file?); save it to a file first",
                p.display()
            );
        }
    }
    Ok(())
}

fn is_brv(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "brv")
}

fn is_safetensors(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "safetensors")
}

/// `p`'s file name as the file system has it (not necessarily UTF-8: an
/// output is named after its input byte for byte).
fn file_name(p: &Path) -> Result<OsString> {
    Ok(p.file_name()
        .with_context(|| format!("{}: no file name", p.display()))?
        .to_owned())
}

/// Where each output goes: beside its input (no `-o`); into the folder
/// `-o` when several inputs are given, a folder is among them, `-o` is a
/// folder or ends in `/` (a file found in a folder keeps its path below
/// it); else the file `-o`.
///
/// The folder `-o` and the subfolders below it are created when the
/// outputs are written ([`make_parents`]); a missing folder in front of a
/// file `-o` is an error.
fn plan(
    inputs: &[Input],
    output: Option<&Path>,
    any_folder: bool,
    name: impl Fn(&Path) -> Result<OsString>,
) -> Result<Plan> {
    let Some(o) = output else {
        let outs = inputs
            .iter()
            .map(|i| Ok(i.path.with_file_name(name(&i.path)?)))
            .collect::<Result<_>>()?;
        return Ok(Plan { outs, folder: None });
    };
    let into_folder = any_folder
        || inputs.len() > 1
        || o.is_dir()
        || o.as_os_str().to_string_lossy().ends_with('/');
    if !into_folder {
        return Ok(Plan {
            outs: vec![o.to_path_buf()],
            folder: None,
        });
    }
    if std::fs::symlink_metadata(o).is_ok() && !o.is_dir() {
        bail!(
            "{}: -o must be a folder here (a folder or several inputs were given), but it is not",
            o.display()
        );
    }
    let outs = inputs
        .iter()
        .map(|i| {
            let n = name(&i.path)?;
            Ok(match i.below.as_deref().and_then(Path::parent) {
                Some(sub) => o.join(sub).join(n),
                None => o.join(n),
            })
        })
        .collect::<Result<_>>()?;
    Ok(Plan {
        outs,
        folder: Some(o.to_path_buf()),
    })
}

/// Where the outputs go.
struct Plan {
    /// One per input.
    outs: Vec<PathBuf>,
    /// The `-o` folder they are in, if they are.
    folder: Option<PathBuf>,
}

/// The input that `o` is (same device and inode), if any.
fn input_at<'a>(o: &Path, inputs: &'a [Input]) -> Option<&'a Path> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(o).ok()?;
    inputs
        .iter()
        .map(|i| i.path.as_path())
        .find(|i| std::fs::metadata(i).is_ok_and(|im| im.dev() == m.dev() && im.ino() == m.ino()))
}

/// Refuse an output that is one of the inputs, that exists without
/// `--force`, or that exists and is not a regular file.
fn check_output(o: &Path, inputs: &[Input], force: bool) -> Result<()> {
    let Ok(own) = std::fs::symlink_metadata(o) else {
        return Ok(());
    };
    if let Some(i) = input_at(o, inputs) {
        bail!(
            "{} is the same file as the input {}; refusing to write over an input",
            o.display(),
            i.display()
        );
    }
    if !force {
        bail!("{} already exists (use --force to overwrite)", o.display());
    }
    if !own.file_type().is_symlink() && !own.is_file() {
        bail!(
            "{} exists and is not a regular file; refusing to replace it",
            o.display()
        );
    }
    Ok(())
}

/// Every check on the outputs, before anything is written: two inputs
/// sharing an output, then [`check_output`] for each.
fn check_outputs(inputs: &[Input], outs: &[PathBuf], force: bool) -> Result<()> {
    let mut seen: std::collections::HashMap<&Path, &Path> = std::collections::HashMap::new();
    for (o, i) in outs.iter().zip(inputs) {
        if let Some(first) = seen.insert(o, &i.path) {
            bail!(
                "{} and {} would both be written to {}; give them separate -o folders",
                first.display(),
                i.path.display(),
                o.display()
            );
        }
    }
    for o in outs {
        check_output(o, inputs, force)?;
    }
    Ok(())
}

/// Create the `-o` folder and the subfolders the outputs go into.
fn make_parents(plan: &Plan) -> Result<()> {
    let Some(folder) = &plan.folder else {
        return Ok(());
    };
    std::fs::create_dir_all(folder).with_context(|| format!("creating {}", folder.display()))?;
    for o in &plan.outs {
        if let Some(d) = o.parent().filter(|d| d != folder) {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
    }
    Ok(())
}

/// `e` about `path`, naming it once: the core's errors mostly start with
/// the path already. Else the context is `PATH`, or `DOING PATH`.
fn about<E>(doing: &str, path: &Path, e: E) -> anyhow::Error
where
    E: std::error::Error + Send + Sync + 'static,
{
    let shown = path.display().to_string();
    if e.to_string().contains(&shown) {
        anyhow::Error::new(e)
    } else if doing.is_empty() {
        anyhow::Error::new(e).context(shown)
    } else {
        anyhow::Error::new(e).context(format!("{doing} {shown}"))
    }
}

/// Threads to decode `archive` with: never more than its regions (the
/// unit of work), so `-T 1000` on a small archive starts a few threads.
fn workers_for(archive: &Path, threads: usize) -> usize {
    if threads <= 1 {
        return threads;
    }
    match container::open(archive) {
        Ok(a) => {
            let regions: usize = a.segments().iter().map(|s| s.regions.len()).sum();
            threads.min(regions.max(1))
        }
        Err(_) => threads,
    }
}

pub(crate) fn load_prior(path: &Path) -> Result<Prior> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Prior::from_json(&text).with_context(|| format!("parsing {}", path.display()))
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

/// The inputs under `paths` (what was skipped noted) and where each output
/// goes, checked before anything is written ([`check_outputs`]).
fn inputs_and_outputs(
    paths: &[PathBuf],
    want: Want,
    output: Option<&Path>,
    force: bool,
    ui: &Ui,
    name: impl Fn(&Path) -> Result<OsString>,
) -> Result<(Vec<Input>, Plan)> {
    let found = collect(paths, want)?;
    if found.files.is_empty() {
        let what = match want {
            Want::Sources => "files to compress",
            Want::Archives => "archives to decompress",
        };
        bail!("no {what}: {}", found.skipped.join("; "));
    }
    for s in &found.skipped {
        ui.note(format!("skipped: {s}"));
    }
    let plan = plan(&found.files, output, found.any_folder, name)?;
    check_outputs(&found.files, &plan.outs, force)?;
    Ok((found.files, plan))
}

pub fn compress(a: CompressArgs, ui: &Ui) -> Result<Outcome> {
    let (inputs, plan) = inputs_and_outputs(
        &a.paths,
        Want::Sources,
        a.output.as_deref(),
        a.force,
        ui,
        |p| {
            let mut n = file_name(p)?;
            n.push(".brv");
            Ok(n)
        },
    )?;
    let inputs = &inputs;
    let outs = &plan.outs;
    let shards: Vec<&Path> = inputs
        .iter()
        .map(|i| i.path.as_path())
        .filter(|p| is_safetensors(p))
        .collect();
    let prior = if let Some(p) = &a.prior {
        Some(Arc::new(load_prior(p)?))
    } else if !a.no_prior && !shards.is_empty() {
        // One prior for all the shards, learned from a sample of their
        // tensors: it costs less than the search time it saves.
        let t = Instant::now();
        let p = Prior::learn(&shards, &LearnOptions::default().threads(a.threads))?;
        ui.note(format!(
            "learned a prior from {} tensors in {:.1}s",
            p.tensors,
            t.elapsed().as_secs_f64()
        ));
        Some(Arc::new(p))
    } else {
        None
    };
    make_parents(&plan)?;
    let sink = Arc::new(ui.sink());
    let opts = CompressOptions::default()
        .threads(a.threads)
        .budget(a.budget)
        .prior(prior)
        .region_words(a.region_words)
        .verify(!a.no_verify)
        .progress(sink.clone());
    let (mut total_in, mut total_out) = (0u64, 0u64);
    let mut rows = Vec::new();
    for (src, dst) in inputs.iter().map(|i| &i.path).zip(outs) {
        let t = Instant::now();
        // With verification, the archive is decoded and checked against
        // the input before it is renamed into place.
        let r = brevis_core::compress_file(src, dst, a.force, &opts)
            .map_err(|e| about("compressing", src, e))?;
        let secs = t.elapsed().as_secs_f64();
        total_in += r.original_len;
        total_out += r.archive_len;
        ui.note(format!(
            "{} -> {}: {} -> {} bytes ({:.4}) in {:.2}s",
            src.display(),
            dst.display(),
            r.original_len,
            r.archive_len,
            ratio(r.archive_len, r.original_len),
            secs
        ));
        rows.push(json!({
            "input": src.to_string_lossy(), "output": dst.to_string_lossy(),
            "original_bytes": r.original_len,
            "archive_bytes": r.archive_len, "ratio": ratio(r.archive_len, r.original_len),
            "sha256": hex::encode(r.sha256), "seconds": secs, "verified": !a.no_verify,
            "searched_tensors": r.searched_tensors, "candidates_judged": r.judged,
            "search_seconds": r.search_seconds,
        }));
    }
    if a.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({
            "files": rows, "original_bytes": total_in, "archive_bytes": total_out,
            "ratio": ratio(total_out, total_in)}))?
        );
    } else if inputs.len() > 1 {
        ui.note(format!(
            "total: {total_in} -> {total_out} bytes ({:.4})",
            ratio(total_out, total_in)
        ));
    }
    Ok(Outcome::Ok)
}

fn ratio(a: u64, b: u64) -> f64 {
    brevis_core::ratio(a, b)
}

/// The name an archive decodes to: its own minus `.brv`, or `NAME.out`.
fn restored_name(p: &Path) -> Result<OsString> {
    use std::os::unix::ffi::OsStrExt;
    let mut name = file_name(p)?;
    Ok(match name.as_bytes().strip_suffix(b".brv") {
        Some(s) if !s.is_empty() => OsStr::from_bytes(s).to_owned(),
        _ => {
            name.push(".out");
            name
        }
    })
}

pub fn decompress(a: DecompressArgs, ui: &Ui) -> Result<Outcome> {
    let (inputs, plan) = inputs_and_outputs(
        &a.archives,
        Want::Archives,
        a.output.as_deref(),
        a.force,
        ui,
        restored_name,
    )?;
    let inputs = &inputs;
    make_parents(&plan)?;
    let sink = Arc::new(ui.sink());
    for (src, dst) in inputs.iter().map(|i| &i.path).zip(&plan.outs) {
        let t = Instant::now();
        let opts = DecompressOptions::default()
            .threads(workers_for(src, a.threads))
            .progress(sink.clone());
        let r = brevis_core::decompress_file(src, dst, a.force, &opts)
            .map_err(|e| about("decompressing", src, e))?;
        ui.note(format!(
            "{} -> {}: {} bytes, sha256 {} ok in {:.2}s",
            src.display(),
            dst.display(),
            r.original_len,
            hex::encode(r.sha256),
            t.elapsed().as_secs_f64()
        ));
    }
    Ok(Outcome::Ok)
}

fn sha256_file(p: &Path) -> Result<[u8; 32]> {
    use sha2::Digest;
    let mut f = std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?;
    let mut h = sha2::Sha256::new();
    std::io::copy(&mut f, &mut h).with_context(|| format!("reading {}", p.display()))?;
    Ok(h.finalize().into())
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
    let meta = stat(p)?;
    if meta.is_dir() {
        let found = collect(&[p.to_path_buf()], Want::Archives)?;
        if found.files.is_empty() {
            bail!("{t}: no .brv archives in this folder");
        }
        return Ok(found.files.into_iter().map(|i| i.path).collect());
    }
    check_regular(p, &meta)?;
    Ok(vec![p.to_path_buf()])
}

/// One line of a verify report.
struct Checked {
    path: PathBuf,
    /// 0 ok, 1 mismatch, 2 error.
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
            status: 2,
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
        ["ok", "MISMATCH", "ERROR"][self.status.min(2) as usize]
    }

    fn json(&self) -> serde_json::Value {
        let mut v = json!({
            "path": self.path.to_string_lossy(),
            "archive": (!self.original).then(|| self.path.to_string_lossy()),
            "role": if self.original { "original" } else { "archive" },
            "ok": self.status == 0,
            "status": self.word().to_lowercase(), "detail": self.detail,
            "sha256": self.info.as_ref().map(|i| hex::encode(i.sha256)),
            "size": self.info.as_ref().map(|i| i.original_len),
            "archive_bytes": self.info.as_ref().map(|i| i.archive_len),
        });
        if self.status == 2 {
            v["error"] = json!(self.detail);
        }
        v
    }
}

pub fn verify(a: VerifyArgs, ui: &Ui) -> Result<Outcome> {
    // A folder with a manifest, or a repo id that is no local path: a mirror.
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
    if mirrors > 0 {
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
        return crate::hub_cmds::verify_mirrors(
            &a.targets,
            &a.revision,
            (&a.hub, &a.source),
            &a.work,
            (a.threads, a.require_source),
            a.json,
            ui,
        );
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
    let original = match &a.original {
        None => None,
        Some(p) if archives != 1 => {
            let e = anyhow::anyhow!("--original needs exactly one archive, {archives} given");
            rows.push(Checked {
                original: true,
                ..Checked::error(p, &e)
            });
            None
        }
        Some(p) => match sha256_file(p) {
            Ok(h) => Some(h),
            Err(e) => {
                rows.push(Checked {
                    original: true,
                    ..Checked::error(p, &e)
                });
                None
            }
        },
    };
    for t in targets {
        let f = match t {
            Ok(f) => f,
            Err(c) => {
                rows.push(c);
                continue;
            }
        };
        let info = brevis_core::read_info(&f).ok();
        let (status, detail) = match check_archive(&f, a.threads) {
            Ok(r) => match original {
                Some(o) if o != r.sha256 => (
                    1,
                    format!(
                        "decodes to sha256 {} but the original is {}",
                        hex::encode(r.sha256),
                        hex::encode(o)
                    ),
                ),
                _ => (0, format!("sha256 {}", hex::encode(r.sha256))),
            },
            // A damaged archive (whichever byte was hit: a checksum, a
            // stream that no longer decodes, a cut end) does not give its
            // original back: a mismatch. An error is what stops the check
            // itself: unreadable, not an archive, a newer format.
            Err(
                e @ (DecodeError::Checksum { .. }
                | DecodeError::ShaMismatch { .. }
                | DecodeError::Corrupt(_)
                | DecodeError::Truncated { .. }
                | DecodeError::Limit { .. }),
            ) => (1, e.to_string()),
            Err(e) => (2, e.to_string()),
        };
        rows.push(Checked {
            path: f,
            status,
            detail,
            info,
            original: false,
        });
    }
    let worst = rows.iter().map(|r| r.status).max().unwrap_or(0);
    if a.json {
        let mut v = json!({
            "files": rows.iter().map(Checked::json).collect::<Vec<_>>(),
            "ok": worst == 0,
        });
        if let Some(e) = rows.iter().find(|r| r.status == 2) {
            v["error"] = json!(e.detail);
        }
        outln!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for r in &rows {
            // -q: nothing but the mismatches and errors.
            if !(ui.quiet && r.status == 0) {
                outln!("{}  {}  {}", r.word(), r.path.display(), r.short_detail());
            }
        }
    }
    match worst {
        0 => Ok(Outcome::Ok),
        1 => Ok(Outcome::Mismatch),
        _ => {
            let errors: Vec<&Checked> = rows.iter().filter(|r| r.status == 2).collect();
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

pub fn inspect(a: InspectArgs, _ui: &Ui) -> Result<Outcome> {
    check_regular(&a.archive, &stat(&a.archive)?)?;
    let ar = container::open(&a.archive).map_err(|e| about("", &a.archive, e))?;
    let info = ar.info();
    let mut rows = Vec::new();
    // Summary by program shape and by production.
    let tensors = ar.tensors().unwrap_or_default();
    let mut by_program: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    let mut by_production: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
    for (i, s) in ar.segments().iter().enumerate() {
        let mut texts: Vec<String> = Vec::new();
        for r in 0..s.regions.len() {
            let node = ar.program(i, r).map_err(|e| about("", &a.archive, e))?;
            node.walk(&mut |n| {
                let e = by_production.entry(n.production()).or_default();
                e.0 += 1;
                if let brevis_core::dsl::Node::Lit { payload, .. } = n {
                    e.1 += payload.len() as u64;
                }
            });
            texts.push(node.to_string());
        }
        let program = summarize(&texts);
        let enc = s.encoded_len();
        let e = by_program.entry(program.clone()).or_default();
        e.0 += 1;
        e.1 += s.desc.len;
        e.2 += enc;
        let (s0, s1) = (s.desc.offset, s.desc.offset + s.desc.len);
        let members: Vec<_> = tensors
            .iter()
            .filter(|t| t.len > 0 && t.offset >= s0 && t.offset + t.len <= s1)
            .collect();
        if s.desc.kind == SegmentKind::Tensor && members.len() > 1 {
            // Small tensors coded together: one row each, sharing the
            // group's program; bytes after are the group's, pro rata.
            for t in members {
                rows.push(json!({
                    "name": t.name,
                    "kind": "tensor",
                    "dtype": t.dtype.name(),
                    "shape": t.shape,
                    "program": program,
                    "group": s.desc.name,
                    "regions": s.regions.len(),
                    "bytes_before": t.len,
                    "bytes_after": (enc as f64 * t.len as f64 / s.desc.len as f64).round() as u64,
                }));
            }
            continue;
        }
        rows.push(json!({
            "name": s.desc.name,
            "kind": if s.desc.kind == SegmentKind::Tensor { "tensor" } else { "bytes" },
            "dtype": if s.desc.dtype == Dtype::Bytes { "" } else { s.desc.dtype.name() },
            "shape": s.desc.shape,
            "program": program,
            "regions": s.regions.len(),
            "bytes_before": s.desc.len,
            "bytes_after": enc,
        }));
    }
    let summary: Vec<_> = by_program
        .iter()
        .map(|(p, (n, b, e))| json!({"program": p, "segments": n, "bytes_before": b, "bytes_after": e, "bytes_saved": *b as i64 - *e as i64}))
        .collect();
    let productions: Vec<_> = by_production
        .iter()
        .map(|(p, (n, lit))| json!({"production": p, "nodes": n, "literal_payload_bytes": lit}))
        .collect();
    if a.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({
            "archive": a.archive, "format_version": info.format_version,
            "original_bytes": info.original_len, "archive_bytes": info.archive_len,
            "sha256": hex::encode(info.sha256), "segments": rows,
            "summary": summary, "productions": productions}))?
        );
        return Ok(Outcome::Ok);
    }
    outln!(
        "{}: format v{}, {} -> {} bytes ({:.4}), sha256 {}",
        a.archive.display(),
        info.format_version,
        info.original_len,
        info.archive_len,
        ratio(info.archive_len, info.original_len),
        hex::encode(info.sha256)
    );
    outln!(
        "{:<48} {:<7} {:<18} {:>12} {:>12}  program",
        "name",
        "dtype",
        "shape",
        "before",
        "after"
    );
    for r in &rows {
        outln!(
            "{:<48} {:<7} {:<18} {:>12} {:>12}  {}",
            trunc(r["name"].as_str().unwrap_or(""), 48),
            r["dtype"].as_str().unwrap_or(""),
            trunc(&r["shape"].to_string(), 18),
            r["bytes_before"],
            r["bytes_after"],
            r["program"].as_str().unwrap_or("")
        );
    }
    outln!("\nby program:");
    for s in &summary {
        outln!(
            "  {:>4} x {}  {} -> {} bytes, saved {}",
            s["segments"],
            s["program"].as_str().unwrap_or(""),
            s["bytes_before"],
            s["bytes_after"],
            s["bytes_saved"]
        );
    }
    outln!("productions used:");
    for p in &productions {
        outln!(
            "  {:<8} {:>8} nodes, literal payload {} bytes",
            p["production"].as_str().unwrap_or(""),
            p["nodes"],
            p["literal_payload_bytes"]
        );
    }
    Ok(Outcome::Ok)
}

/// One text for a segment's regions: `P` when all share it, else `Concat[k](...)`.
fn summarize(texts: &[String]) -> String {
    match texts {
        [] => "(empty)".into(),
        [one] => one.clone(),
        _ if texts.iter().all(|t| *t == texts[0]) => {
            format!("Concat[{}x]({})", texts.len(), texts[0])
        }
        _ => {
            let mut uniq: Vec<&String> = Vec::new();
            for t in texts {
                if !uniq.contains(&t) {
                    uniq.push(t);
                }
            }
            format!(
                "Concat[{}x]({})",
                texts.len(),
                uniq.iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(" | ")
            )
        }
    }
}

fn trunc(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let t: String = s.chars().take(n - 1).collect();
        format!("{t}~")
    }
}

pub fn bench(a: BenchArgs, ui: &Ui) -> Result<Outcome> {
    crate::bench::run(a, ui)
}

/// Write `bytes` to `dst` as compress and decompress do: a temp file in
/// its folder (unnamed where the system allows), synced, then published;
/// without `force` an existing `dst` is never replaced.
fn write_atomic(dst: &Path, bytes: &[u8], force: bool) -> Result<()> {
    use std::io::Write as _;
    let tmp = brevis_core::fsutil::TempFile::beside(dst).map_err(|e| about("writing", dst, e))?;
    tmp.file()
        .and_then(|mut f| f.write_all(bytes))
        .map_err(|e| about("writing", dst, e))?;
    tmp.persist(dst, force).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            anyhow::anyhow!(
                "{} already exists (use --force to overwrite)",
                dst.display()
            )
        } else {
            about("writing", dst, e)
        }
    })
}

pub fn prior(c: PriorCommand, ui: &Ui) -> Result<Outcome> {
    match c {
        PriorCommand::Learn {
            paths,
            output,
            budget,
            max_tensors,
            force,
        } => {
            let found = collect(&paths, Want::Sources)?;
            let files: Vec<Input> = found
                .files
                .into_iter()
                .filter(|i| is_safetensors(&i.path))
                .collect();
            if files.is_empty() {
                bail!("no .safetensors files under the given paths");
            }
            // Before the (long) learning: an input, or an existing file
            // without --force, is refused.
            check_output(&output, &files, force)?;
            let refs: Vec<&Path> = files.iter().map(|i| i.path.as_path()).collect();
            let t = Instant::now();
            let p = Prior::learn(
                &refs,
                &LearnOptions::default()
                    .budget(budget)
                    .max_tensors(max_tensors),
            )?;
            write_atomic(&output, p.to_json().as_bytes(), force)?;
            ui.note(format!(
                "learned from {} tensors of {} files in {:.1}s -> {}",
                p.tensors,
                files.len(),
                t.elapsed().as_secs_f64(),
                output.display()
            ));
            Ok(Outcome::Ok)
        }
    }
}
