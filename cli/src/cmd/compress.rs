//! `compress`: files or folders into `.brv` archives.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use brevis_core::{CompressOptions, LearnOptions, Prior};
use clap::Args;
use serde_json::json;

use crate::Outcome;
use crate::args::{Budget, Json, Output, PriorChoice, Threads};
use crate::files::{self, Input, Want, about, is_safetensors, ratio, ratio_text};
use crate::progress::Ui;

/// Compress files or folders into `.brv` archives.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  brevis-hub compress model.safetensors            # writes model.safetensors.brv\n  brevis-hub compress ./my-model -o ./packed -T 2   # a folder, one prior for all shards\n\nWith -o and a folder among the inputs (or several inputs), -o is a folder and\nthe files found in a folder keep their path below it (./my-model/1_Pooling/config.json\n-> ./packed/1_Pooling/config.json.brv). Only regular files are read (not pipes,\ndevices or /proc files); symlinks to files are followed, symlinks to folders are not.\nAn empty input has no ratio: n/a in the text, 1.0 in --json (the field stays a number)."
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
        |p| {
            let mut n = files::file_name(p)?;
            n.push(".brv");
            Ok(n)
        },
    )?;
    let prior = choose_prior(&a.prior, &inputs, a.threads.threads, ui)?;
    files::make_parents(&plan)?;
    let opts = CompressOptions::default()
        .threads(a.threads.threads)
        .budget(a.budget.budget)
        .prior(prior)
        .region_words(a.region_words)
        .verify(!a.no_verify);
    let run = ui.run("compress", inputs.iter().map(|i| i.path.as_path()));
    let (mut total_in, mut total_out) = (0u64, 0u64);
    let mut rows = Vec::new();
    for (src, dst) in inputs.iter().map(|i| &i.path).zip(&plan.outs) {
        let t = Instant::now();
        // With verification, the archive is decoded and checked against
        // the input before it is renamed into place.
        let opts = opts.clone().progress(run.file(src));
        let r = brevis_core::compress_file(src, dst, force, &opts)
            .map_err(|e| about("compressing", src, e))?;
        let secs = t.elapsed().as_secs_f64();
        total_in += r.original_len;
        total_out += r.archive_len;
        ui.note(format!(
            "{} -> {}: {} -> {} bytes ({}) in {:.2}s",
            src.display(),
            dst.display(),
            r.original_len,
            r.archive_len,
            ratio_text(r.archive_len, r.original_len),
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
    drop(run);
    if a.json.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({
            "files": rows, "original_bytes": total_in, "archive_bytes": total_out,
            "ratio": ratio(total_out, total_in)}))?
        );
    } else if inputs.len() > 1 {
        ui.note(format!(
            "total: {total_in} -> {total_out} bytes ({})",
            ratio_text(total_out, total_in)
        ));
    }
    Ok(Outcome::Ok)
}

/// The prior to compress with: `--prior`'s, none with `--no-prior` or no
/// safetensors among the inputs, else one learned from all the shards.
fn choose_prior(
    choice: &PriorChoice,
    inputs: &[Input],
    threads: usize,
    ui: &Ui,
) -> Result<Option<Arc<Prior>>> {
    let shards: Vec<&Path> = inputs
        .iter()
        .map(|i| i.path.as_path())
        .filter(|p| is_safetensors(p))
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
    let p = Prior::learn(&shards, &LearnOptions::default().threads(threads))?;
    ui.note(format!(
        "learned a prior from {} tensors in {:.1}s",
        p.tensors,
        t.elapsed().as_secs_f64()
    ));
    Ok(Some(Arc::new(p)))
}
