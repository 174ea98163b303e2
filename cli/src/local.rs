//! Local commands: compress, decompress, verify, inspect, bench, prior.

use std::collections::BTreeMap;
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
    after_help = "Examples:\n  brevis-hub compress model.safetensors            # writes model.safetensors.brv\n  brevis-hub compress ./my-model -o ./packed -T 2   # a folder, one prior for all shards"
)]
pub struct CompressArgs {
    /// Files or folders (folders are walked; `.brv` files are skipped).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Output file (one input) or folder (several inputs, or an existing folder).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Worker threads (0 = all cores).
    #[arg(short = 'T', long, default_value_t = 0, value_parser = crate::threads_parser())]
    pub threads: usize,
    /// Overwrite existing outputs.
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
    after_help = "Example:\n  brevis-hub decompress model.safetensors.brv   # writes model.safetensors"
)]
pub struct DecompressArgs {
    /// Archives.
    #[arg(required = true)]
    pub archives: Vec<PathBuf>,
    /// Output file (one archive) or folder.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Worker threads (0 = all cores).
    #[arg(short = 'T', long, default_value_t = 0, value_parser = crate::threads_parser())]
    pub threads: usize,
    /// Overwrite existing outputs.
    #[arg(short, long)]
    pub force: bool,
}

/// Check that archives decode to their recorded SHA-256 (exit 0 all match,
/// 1 a mismatch, 2 an error).
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  brevis-hub verify model.safetensors.brv --original model.safetensors\n  brevis-hub verify ./mirror-folder --json\n  HF_ENDPOINT=http://127.0.0.1:8080 brevis-hub verify owner/model-brevis"
)]
pub struct VerifyArgs {
    /// Archives, a mirror folder (holding brevis.manifest.json), or a mirror repo id.
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
        #[arg(long, default_value_t = 64)]
        budget: u32,
        /// Most tensors sampled.
        #[arg(long, default_value_t = 96)]
        max_tensors: usize,
        /// Overwrite the output.
        #[arg(short, long)]
        force: bool,
    },
}

/// Files under the given paths (folders walked, sorted), skipping `.brv`.
fn collect_files(paths: &[PathBuf], skip_brv: bool) -> Result<Vec<PathBuf>> {
    fn walk(p: &Path, out: &mut Vec<PathBuf>, skip_brv: bool) -> Result<()> {
        let meta = std::fs::metadata(p).with_context(|| format!("reading {}", p.display()))?;
        if meta.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
                .with_context(|| format!("listing {}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|e| {
                    !e.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                })
                .collect();
            entries.sort();
            for e in entries {
                walk(&e, out, skip_brv)?;
            }
        } else if !(skip_brv && is_brv(p)) {
            out.push(p.to_path_buf());
        }
        Ok(())
    }
    let mut out = Vec::new();
    for p in paths {
        walk(p, &mut out, skip_brv)?;
    }
    Ok(out)
}

fn is_brv(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "brv")
}

fn is_safetensors(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "safetensors")
}

/// Where each output goes: next to the input, into `-o DIR`, or `-o FILE`.
fn outputs(
    inputs: &[PathBuf],
    output: Option<&Path>,
    rename: impl Fn(&Path) -> Result<String>,
) -> Result<Vec<PathBuf>> {
    let into_dir = match output {
        None => None,
        Some(o) if inputs.len() > 1 || o.is_dir() || o.to_string_lossy().ends_with('/') => {
            std::fs::create_dir_all(o).with_context(|| format!("creating {}", o.display()))?;
            Some(o.to_path_buf())
        }
        Some(o) => return Ok(vec![o.to_path_buf()]),
    };
    inputs
        .iter()
        .map(|i| {
            let name = rename(i)?;
            Ok(match &into_dir {
                Some(d) => d.join(name),
                None => i.with_file_name(name),
            })
        })
        .collect()
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
        &DecompressOptions::default().threads(threads),
    )
}

pub fn compress(a: CompressArgs, ui: &Ui) -> Result<Outcome> {
    let inputs = collect_files(&a.paths, true)?;
    if inputs.is_empty() {
        bail!("no files to compress");
    }
    let outs = outputs(&inputs, a.output.as_deref(), |p| {
        Ok(format!(
            "{}.brv",
            p.file_name()
                .context("input has no file name")?
                .to_string_lossy()
        ))
    })?;
    let mut seen = std::collections::HashSet::new();
    for (o, i) in outs.iter().zip(&inputs) {
        if !seen.insert(o.clone()) {
            bail!(
                "two inputs would both be written to {} (e.g. {}); compress them into separate folders",
                o.display(),
                i.display()
            );
        }
        if o.exists() && !a.force {
            bail!("{} already exists (use --force to overwrite)", o.display());
        }
    }
    let shards: Vec<&Path> = inputs
        .iter()
        .filter(|p| is_safetensors(p))
        .map(|p| p.as_path())
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
    for (src, dst) in inputs.iter().zip(&outs) {
        let t = Instant::now();
        // With verification, the archive is decoded and checked against
        // the input before it is renamed into place.
        let r = brevis_core::compress_file(src, dst, a.force, &opts)?;
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
            "input": src, "output": dst, "original_bytes": r.original_len,
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
    if b == 0 { 1.0 } else { a as f64 / b as f64 }
}

pub fn decompress(a: DecompressArgs, ui: &Ui) -> Result<Outcome> {
    let outs = outputs(&a.archives, a.output.as_deref(), |p| {
        let name = p
            .file_name()
            .context("archive has no file name")?
            .to_string_lossy()
            .into_owned();
        match name.strip_suffix(".brv") {
            Some(s) if !s.is_empty() => Ok(s.to_owned()),
            _ => bail!("{}: not named *.brv; give -o", p.display()),
        }
    })?;
    let sink = Arc::new(ui.sink());
    let opts = DecompressOptions::default()
        .threads(a.threads)
        .progress(sink);
    for (src, dst) in a.archives.iter().zip(&outs) {
        let t = Instant::now();
        let r = brevis_core::decompress_file(src, dst, a.force, &opts)
            .with_context(|| format!("decompressing {}", src.display()))?;
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

pub fn verify(a: VerifyArgs, ui: &Ui) -> Result<Outcome> {
    // A folder with a manifest, or a repo id that is no local path: a mirror.
    if a.targets.len() == 1 {
        let t = &a.targets[0];
        let p = Path::new(t);
        if (p.is_dir() && p.join("brevis.manifest.json").exists())
            || (!p.exists() && t.contains('/') && !t.ends_with(".brv"))
        {
            return crate::hub_cmds::verify_mirror(t, a.json, ui);
        }
    }
    let files = collect_files(
        &a.targets.iter().map(PathBuf::from).collect::<Vec<_>>(),
        false,
    )?;
    let files: Vec<PathBuf> = files.into_iter().filter(|f| is_brv(f)).collect();
    if files.is_empty() {
        bail!("no .brv archives to verify");
    }
    if a.original.is_some() && files.len() != 1 {
        bail!("--original needs exactly one archive");
    }
    let original = match &a.original {
        Some(p) => Some(sha256_file(p)?),
        None => None,
    };
    let mut rows = Vec::new();
    let mut worst = 0u8; // 0 ok, 1 mismatch, 2 error
    for f in &files {
        let (status, detail) = match check_archive(f, a.threads) {
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
            Err(e @ (DecodeError::Checksum { .. } | DecodeError::ShaMismatch { .. })) => {
                (1, e.to_string())
            }
            Err(e) => (2, e.to_string()),
        };
        worst = worst.max(status);
        let word = ["ok", "MISMATCH", "ERROR"][status as usize];
        if !a.json {
            outln!("{word}  {}  {detail}", f.display());
        }
        rows.push(json!({"archive": f, "status": word.to_lowercase(), "detail": detail}));
    }
    if a.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({"files": rows, "ok": worst == 0}))?
        );
    }
    let _ = ui;
    match worst {
        0 => Ok(Outcome::Ok),
        1 => Ok(Outcome::Mismatch),
        _ => bail!("some archives could not be verified"),
    }
}

pub fn inspect(a: InspectArgs, _ui: &Ui) -> Result<Outcome> {
    let ar =
        container::open(&a.archive).with_context(|| format!("opening {}", a.archive.display()))?;
    let info = ar.info();
    let mut rows = Vec::new();
    // Summary by program shape and by production.
    let tensors = ar.tensors().unwrap_or_default();
    let mut by_program: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    let mut by_production: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
    for (i, s) in ar.segments().iter().enumerate() {
        let mut texts: Vec<String> = Vec::new();
        for r in 0..s.regions.len() {
            let node = ar.program(i, r)?;
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

pub fn prior(c: PriorCommand, ui: &Ui) -> Result<Outcome> {
    match c {
        PriorCommand::Learn {
            paths,
            output,
            budget,
            max_tensors,
            force,
        } => {
            if output.exists() && !force {
                bail!(
                    "{} already exists (use --force to overwrite)",
                    output.display()
                );
            }
            let files: Vec<PathBuf> = collect_files(&paths, true)?
                .into_iter()
                .filter(|p| is_safetensors(p))
                .collect();
            if files.is_empty() {
                bail!("no .safetensors files under the given paths");
            }
            let refs: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
            let t = Instant::now();
            let p = Prior::learn(
                &refs,
                &LearnOptions::default()
                    .budget(budget)
                    .max_tensors(max_tensors),
            )?;
            let tmp = output.with_extension("json.tmp");
            std::fs::write(&tmp, p.to_json())
                .with_context(|| format!("writing {}", tmp.display()))?;
            std::fs::rename(&tmp, &output)
                .with_context(|| format!("writing {}", output.display()))?;
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
