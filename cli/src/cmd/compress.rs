//! `compress`: files or folders into `.brv` archives.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use brevis_core::{CompressOptions, CompressReport, LearnOptions, Prior, Sidecars};
use clap::Args;
use serde_json::json;

use crate::Outcome;
use crate::args::{Budget, Json, Output, PriorChoice, Threads};
use crate::files::{self, Input, Plan, Want, about, ratio, ratio_text};
use crate::progress::Ui;

/// Compress files or folders into `.brv` archives.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  brevis-hub compress model.safetensors            # writes model.safetensors.brv\n  brevis-hub compress ./my-model -o ./packed -T 2   # a folder, one prior for all shards\n  brevis-hub compress model.gguf --json             # any container: GGUF, PyTorch, ONNX, ...\n\nWeight containers are told from their first bytes (safetensors, GGUF, PyTorch zip,\nONNX, CTranslate2, NumPy). TF.js shards and ONNX external data files are read as the\nmodel.json or .onnx file given with them, or beside them in their folder, describes\nthem. Anything else is coded as bytes; every file decodes exactly.\n\nWith -o and a folder among the inputs (or several inputs), -o is a folder and\nthe files found in a folder keep their path below it (./my-model/1_Pooling/config.json\n-> ./packed/1_Pooling/config.json.brv). There, a file whose archive would be no
smaller than itself (a small config.json: an archive has ~100 bytes of fixed cost)
is stored as it is, under its own name, instead (checked by SHA-256, its mode kept);
decompress of the folder copies it back. Without --force neither NAME nor NAME.brv
may exist in the output folder. A file compressed on its own always gets an archive.\n\nOnly regular files are read (not pipes, devices or /proc files); symlinks to files\nare followed, symlinks to folders are not.\nAn empty input has no ratio: n/a in the text, 1.0 in --json (the field stays a number)."
)]
pub struct CompressArgs {
    /// Files or folders (folders are walked; `.brv` files and hidden entries are skipped).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    #[command(flatten)]
    pub output: Output,
    #[command(flatten)]
    pub threads: Threads,
    #[command(flatten)]
    pub budget: Budget,
    #[command(flatten)]
    pub prior: PriorChoice,
    /// Skip the proof: by default each archive is decoded and checked
    /// against the input's length and SHA-256 before it is renamed into
    /// place (it is the only check that the programs rebuild the input).
    #[arg(long)]
    pub no_verify: bool,
    #[command(flatten)]
    pub json: Json,
    /// Words per region (advanced: the unit of parallelism and of coder adaptivity).
    #[arg(long, hide = true, default_value_t = brevis_core::DEFAULT_REGION_WORDS)]
    pub region_words: u64,
}

pub fn run(a: CompressArgs, ui: &Ui) -> Result<Outcome> {
    let force = a.output.force.force;
    let (inputs, plan) = files::inputs_and_outputs(
        &a.paths,
        Want::Sources,
        a.output.output.as_deref(),
        force,
        ui,
        |i| {
            let mut n = files::file_name(&i.path)?;
            n.push(".brv");
            Ok(n)
        },
    )?;
    let as_is = as_is_paths(&inputs, &plan, force)?;
    // Files whose tensors another input describes (TF.js shards beside
    // their model.json, an ONNX model's external data).
    let sidecars = files::sidecars(&inputs.iter().map(|i| i.path.as_path()).collect::<Vec<_>>());
    let prior = choose_prior(&a.prior, &inputs, &sidecars, a.threads.threads, ui)?;
    files::make_parents(&plan)?;
    let opts = a
        .budget
        .apply(CompressOptions::default())
        .threads(a.threads.threads)
        .prior(prior)
        .region_words(a.region_words)
        .verify(!a.no_verify);
    let run = ui.run("compress", inputs.iter().map(|i| i.path.as_path()));
    let (mut total_in, mut total_out) = (0u64, 0u64);
    let mut rows = Vec::new();
    for ((src, dst), as_is) in inputs.iter().map(|i| &i.path).zip(&plan.outs).zip(&as_is) {
        let t = Instant::now();
        // With verification, the archive is decoded and checked against
        // the input before it is renamed into place.
        let opts = opts
            .clone()
            .progress(run.file(src))
            .sidecar(sidecars.get(src).cloned());
        let r = brevis_core::compress_file(src, dst, force, &opts)
            .map_err(|e| about("compressing", src, e))?;
        let stored = match as_is {
            Some(plain) if r.archive_len >= r.original_len => {
                store_as_is(src, dst, plain, &r, force)?;
                Some(plain.as_path())
            }
            _ => None,
        };
        let done = Done {
            src,
            dst: stored.unwrap_or(dst),
            stored: stored.is_some(),
            secs: t.elapsed().as_secs_f64(),
            verified: !a.no_verify || stored.is_some(),
        };
        total_in += r.original_len;
        total_out += done.written(&r);
        rows.push(done.report(&r, ui));
    }
    drop(run);
    if a.json.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({
            "files": rows, "original_bytes": total_in, "archive_bytes": total_out,
            "ratio": ratio(total_out, total_in), "level": a.budget.level().get(),
            "budget": a.budget.budget()}))?
        );
    } else if inputs.len() > 1 {
        ui.note(format!(
            "total: {total_in} -> {total_out} bytes ({})",
            ratio_text(total_out, total_in)
        ));
    }
    Ok(Outcome::Ok)
}

/// In folder mode (outputs in the `-o` folder, several inputs or a folder
/// among them), where each input is written if stored as it is: under its
/// own name beside its archive's, checked now as the archive's path was.
/// `None`: not in folder mode (a file compressed on its own, even into a
/// folder, gets the archive asked for), or that path is an input (`-o` the
/// input folder: the file is already there).
fn as_is_paths(inputs: &[Input], plan: &Plan, force: bool) -> Result<Vec<Option<PathBuf>>> {
    let one_named = inputs.len() == 1 && inputs[0].below.is_none();
    if plan.folder.is_none() || one_named {
        return Ok(vec![None; inputs.len()]);
    }
    inputs
        .iter()
        .zip(&plan.outs)
        .map(|(i, o)| {
            let plain = o.with_file_name(files::file_name(&i.path)?);
            if files::input_at(&plain, inputs).is_some() {
                return Ok(None);
            }
            files::check_output(&plain, inputs, force)?;
            Ok(Some(plain))
        })
        .collect()
}

/// Store `src` as it is at `plain` instead of its archive `dst` (written,
/// no smaller than `src`): the copy checked against the SHA-256 the
/// archive recorded, then the archive removed.
fn store_as_is(
    src: &Path,
    dst: &Path,
    plain: &Path,
    r: &CompressReport,
    force: bool,
) -> Result<()> {
    files::copy_checked(src, plain, force, Some(r.sha256))?;
    std::fs::remove_file(dst).with_context(|| format!("removing {}", dst.display()))
}

/// One input compressed, as reported.
struct Done<'a> {
    src: &'a Path,
    /// The archive, or the file stored as it is.
    dst: &'a Path,
    /// Stored as it is ([`store_as_is`]).
    stored: bool,
    secs: f64,
    /// The archive was proven, or the stored copy checked.
    verified: bool,
}

impl Done<'_> {
    /// Bytes written: the archive's, or the file's stored as it is.
    fn written(&self, r: &CompressReport) -> u64 {
        if self.stored {
            r.original_len
        } else {
            r.archive_len
        }
    }

    /// The text line (noted) and the `--json` row.
    fn report(&self, r: &CompressReport, ui: &Ui) -> serde_json::Value {
        let (src, dst, secs) = (self.src.display(), self.dst.display(), self.secs);
        let out = self.written(r);
        for why in &r.unread {
            ui.note(format!(
                "{src}: not read as tensors ({why}); coded as plain bytes"
            ));
        }
        ui.note(if self.stored {
            format!(
                "{src} -> {dst}: stored as is ({} bytes; its archive would be {} bytes) in {secs:.2}s",
                r.original_len, r.archive_len
            )
        } else {
            format!(
                "{src} -> {dst}: {} -> {out} bytes ({}) in {secs:.2}s",
                r.original_len,
                ratio_text(out, r.original_len),
            )
        });
        json!({
            "input": self.src.to_string_lossy(), "output": self.dst.to_string_lossy(),
            "original_bytes": r.original_len, "stored": self.stored,
            "archive_bytes": out, "ratio": ratio(out, r.original_len),
            "sha256": hex::encode(r.sha256), "seconds": secs, "verified": self.verified,
            "container": r.format, "unread": r.unread, "searched_tensors": r.searched_tensors, "candidates_judged": r.judged,
            "search_seconds": r.search_seconds,
        })
    }
}

/// The prior to compress with: `--prior`'s, none with `--no-prior` or no
/// weight file (a container with tensors) among the inputs, else one learned from all the shards.
fn choose_prior(
    choice: &PriorChoice,
    inputs: &[Input],
    sidecars: &Sidecars,
    threads: usize,
    ui: &Ui,
) -> Result<Option<Arc<Prior>>> {
    let shards: Vec<&Path> = inputs
        .iter()
        .map(|i| i.path.as_path())
        .filter(|p| sidecars.has_tensors(p))
        .collect();
    if let Some(p) = &choice.prior {
        return Ok(Some(Arc::new(files::load_prior(p)?)));
    }
    if choice.no_prior || shards.is_empty() {
        return Ok(None);
    }
    // One prior for all the shards, learned from a sample of their
    // tensors: it costs less than the search time it saves.
    let t = Instant::now();
    let p = Prior::learn(
        &shards,
        &LearnOptions::default()
            .threads(threads)
            .sidecars(sidecars.clone()),
    )?;
    if p.tensors == 0 {
        // The files claimed a format but none could be read as tensors.
        return Ok(None);
    }
    ui.note(format!(
        "learned a prior from {} tensors in {:.1}s",
        p.tensors,
        t.elapsed().as_secs_f64()
    ));
    Ok(Some(Arc::new(p)))
}
