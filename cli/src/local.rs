//! Local commands: compress, decompress, verify, inspect, bench, prior.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};

use crate::Outcome;
use crate::progress::Ui;

/// Compress files or folders into `.brv` archives.
#[derive(Args, Debug)]
pub struct CompressArgs {
    /// Files or folders.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
}

/// Decompress archives.
#[derive(Args, Debug)]
pub struct DecompressArgs {
    /// Archives.
    #[arg(required = true)]
    pub archives: Vec<PathBuf>,
}

/// Verify archives or a mirror.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// Archives, a mirror folder, or a mirror repo id.
    #[arg(required = true)]
    pub targets: Vec<String>,
    /// Print a JSON report on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Inspect one archive.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The archive.
    pub archive: PathBuf,
    /// JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Benchmark.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Files or folders.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Prior commands.
#[derive(Subcommand, Debug)]
pub enum PriorCommand {
    /// Learn a prior from a sample of these files' tensors.
    Learn {
        /// Files or folders.
        paths: Vec<PathBuf>,
        /// Output.
        #[arg(short, long, default_value = "brevis.prior.json")]
        output: PathBuf,
    },
}

pub fn compress(_a: CompressArgs, _ui: &Ui) -> Result<Outcome> {
    anyhow::bail!("todo")
}
pub fn decompress(_a: DecompressArgs, _ui: &Ui) -> Result<Outcome> {
    anyhow::bail!("todo")
}
pub fn verify(_a: VerifyArgs, _ui: &Ui) -> Result<Outcome> {
    anyhow::bail!("todo")
}
pub fn inspect(_a: InspectArgs, _ui: &Ui) -> Result<Outcome> {
    anyhow::bail!("todo")
}
pub fn bench(_a: BenchArgs, _ui: &Ui) -> Result<Outcome> {
    anyhow::bail!("todo")
}
pub fn prior(_c: PriorCommand, _ui: &Ui) -> Result<Outcome> {
    anyhow::bail!("todo")
}
