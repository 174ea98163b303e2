//! `decompress`: `.brv` archives back to the original files.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;
use brevis_core::DecompressOptions;
use clap::Args;

use crate::Outcome;
use crate::args::{Output, Threads};
use crate::files::{self, Want, about, workers_for};
use crate::progress::Ui;

/// Decompress `.brv` archives back to the original files.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  brevis-hub decompress model.safetensors.brv      # writes model.safetensors\n  brevis-hub decompress ./packed -o ./restored      # every *.brv below ./packed\n\nEach output is named after its archive minus .brv (model.safetensors.brv ->\nmodel.safetensors); an archive named otherwise gives NAME.out (a.bin -> a.bin.out).\nWith -o and a folder among the inputs (or several inputs), -o is a folder and the\narchives found in a folder keep their path below it."
)]
pub struct DecompressArgs {
    /// Archives (any name), or folders (their `*.brv` files, walked).
    #[arg(required = true)]
    pub archives: Vec<PathBuf>,
    #[command(flatten)]
    pub output: Output,
    #[command(flatten)]
    pub threads: Threads,
}

/// The name an archive decodes to: its own minus `.brv`, or `NAME.out`.
fn restored_name(p: &Path) -> Result<OsString> {
    use std::os::unix::ffi::OsStrExt;
    let mut name = files::file_name(p)?;
    Ok(match name.as_bytes().strip_suffix(b".brv") {
        Some(s) if !s.is_empty() => OsStr::from_bytes(s).to_owned(),
        _ => {
            name.push(".out");
            name
        }
    })
}

pub fn run(a: DecompressArgs, ui: &Ui) -> Result<Outcome> {
    let force = a.output.force.force;
    let (inputs, plan) = files::inputs_and_outputs(
        &a.archives,
        Want::Archives,
        a.output.output.as_deref(),
        force,
        ui,
        restored_name,
    )?;
    files::make_parents(&plan)?;
    let run = ui.run("decompress", inputs.iter().map(|i| i.path.as_path()));
    for (src, dst) in inputs.iter().map(|i| &i.path).zip(&plan.outs) {
        let t = Instant::now();
        let opts = DecompressOptions::default()
            .threads(workers_for(src, a.threads.threads))
            .progress(run.file(src));
        let r = brevis_core::decompress_file(src, dst, force, &opts)
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
