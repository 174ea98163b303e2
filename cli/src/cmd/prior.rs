//! `prior learn`: which programs a checkpoint's tensors favour.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Result, bail};
use brevis_core::{LearnOptions, Prior};
use clap::{Args, Subcommand};

use crate::Outcome;
use crate::args::Force;
use crate::files::{self, Input, Want};
use crate::progress::Ui;

/// Prior commands.
#[derive(Subcommand, Debug)]
pub enum PriorCommand {
    /// Learn a prior from a stratified sample of these files' tensors.
    #[command(
        after_help = "Example:\n  brevis-hub prior learn ./my-model -o brevis.prior.json\n  brevis-hub compress ./my-model --prior brevis.prior.json"
    )]
    Learn(LearnArgs),
}

/// `prior learn`'s arguments.
#[derive(Args, Debug)]
pub struct LearnArgs {
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
    #[command(flatten)]
    force: Force,
}

pub fn run(c: PriorCommand, ui: &Ui) -> Result<Outcome> {
    match c {
        PriorCommand::Learn(a) => learn(a, ui),
    }
}

fn learn(a: LearnArgs, ui: &Ui) -> Result<Outcome> {
    let force = a.force.force;
    let found = files::collect(&a.paths, Want::Sources)?;
    let sidecars = files::sidecars(
        &found
            .files
            .iter()
            .map(|i| i.path.as_path())
            .collect::<Vec<_>>(),
    );
    let inputs: Vec<Input> = found
        .files
        .into_iter()
        .filter(|i| sidecars.has_tensors(&i.path))
        .collect();
    if inputs.is_empty() {
        bail!("no weight files (safetensors, GGUF, PyTorch, ONNX, ...) under the given paths");
    }
    // Before the (long) learning: an input, or an existing file
    // without --force, is refused.
    files::check_parent(&a.output)?;
    files::check_output(&a.output, &inputs, force)?;
    let refs: Vec<&Path> = inputs.iter().map(|i| i.path.as_path()).collect();
    let t = Instant::now();
    let p = Prior::learn(
        &refs,
        &LearnOptions::default()
            .budget(a.budget)
            .max_tensors(a.max_tensors)
            .sidecars(sidecars),
    )?;
    files::write_atomic(&a.output, p.to_json().as_bytes(), force)?;
    ui.note(format!(
        "learned from {} tensors of {} files in {:.1}s -> {}",
        p.tensors,
        inputs.len(),
        t.elapsed().as_secs_f64(),
        a.output.display()
    ));
    Ok(Outcome::Ok)
}
