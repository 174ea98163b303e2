//! `decompress`: `.brv` archives back to the original files.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use brevis_core::DecompressOptions;
use clap::Args;

use crate::Outcome;
use crate::args::{Output, Threads};
use crate::files::{self, Input, Want, about, workers_for};
use crate::progress::Ui;

/// Decompress `.brv` archives back to the original files.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  brevis-hub decompress model.safetensors.brv      # writes model.safetensors\n  brevis-hub decompress ./packed -o ./restored      # every file below ./packed back\n\nEach output is named after its archive minus .brv (model.safetensors.brv ->\nmodel.safetensors); an archive named otherwise gives NAME.out (a.bin -> a.bin.out).\nWith -o and a folder among the inputs (or several inputs), -o is a folder and the\narchives found in a folder keep their path below it. The other regular files in a
folder are copied as they are (compress -o FOLDER stores a file so when its archive
would be no smaller), unless NAME.brv is beside NAME (the archive restores it), so
compressing a folder and decompressing the result gives back every file. Hidden
entries are skipped; without -o (or with -o the folder itself) nothing is copied."
)]
pub struct DecompressArgs {
    /// Archives (any name), or folders (their `*.brv` files, walked; other files copied).
    #[arg(required = true)]
    pub archives: Vec<PathBuf>,
    #[command(flatten)]
    pub output: Output,
    #[command(flatten)]
    pub threads: Threads,
}

/// The name an archive decodes to: its own minus `.brv`, or `NAME.out`;
/// a copy keeps its name.
fn restored_name(i: &Input) -> Result<OsString> {
    use std::os::unix::ffi::OsStrExt;
    let mut name = files::file_name(&i.path)?;
    if i.copy {
        return Ok(name);
    }
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
        Want::Restore,
        a.output.output.as_deref(),
        force,
        ui,
        restored_name,
    )?;
    files::make_parents(&plan)?;
    let run = ui.run("decompress", inputs.iter().map(|i| i.path.as_path()));
    let mut archives = Vec::new();
    for (i, dst) in inputs.iter().zip(&plan.outs) {
        let (src, t) = (&i.path, Instant::now());
        if !i.copy {
            let len = std::fs::metadata(src).map_or(0, |m| m.len());
            archives.push((src, dst, len));
            continue;
        }
        let (len, sha) = files::copy_checked(src, dst, force, None)?;
        let bar = run.file(src);
        bar.start(&src.display().to_string(), len);
        bar.advance(len);
        bar.finish();
        ui.note(format!(
            "{} -> {}: copied (not an archive), {len} bytes, sha256 {} in {:.2}s",
            src.display(),
            dst.display(),
            hex::encode(sha),
            t.elapsed().as_secs_f64()
        ));
    }
    // Several archives decode at once, each with a share of the threads
    // (a file's SHA-256 is serial: one file a core keeps them busier).
    brevis_hub::pipeline::each_file(
        &archives,
        a.threads.threads,
        |&(_, _, len)| len,
        |&(src, dst, _), threads| {
            let t = Instant::now();
            let opts = DecompressOptions::default()
                .threads(workers_for(src, threads))
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
            anyhow::Ok(())
        },
    )?;
    Ok(Outcome::Ok)
}
