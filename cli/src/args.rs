//! Argument groups shared by several commands, each flag declared once
//! and flattened (`#[command(flatten)]`) where it is taken.

use std::path::PathBuf;

use clap::Args;

/// Most worker threads `-T` / `--threads` takes: more would only cost
/// memory and start-up time (work is split into regions of megabytes).
pub const MAX_THREADS: u64 = 1024;

/// `-T`: 0 (all cores) to [`MAX_THREADS`], larger values a usage error.
pub fn threads_parser() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(0..=MAX_THREADS)
}

/// `-T` / `--threads`.
#[derive(Args, Debug, Clone, Copy)]
pub struct Threads {
    /// Worker threads (0 = all cores).
    #[arg(short = 'T', long, default_value_t = 0, value_parser = threads_parser())]
    pub threads: usize,
}

/// `--json`.
#[derive(Args, Debug, Clone, Copy)]
pub struct Json {
    /// JSON report on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `-f` / `--force` of a command that writes files.
#[derive(Args, Debug, Clone, Copy)]
pub struct Force {
    /// Overwrite existing outputs (never an input).
    #[arg(short, long)]
    pub force: bool,
}

/// `-o` and `-f` of compress and decompress.
#[derive(Args, Debug)]
pub struct Output {
    /// Output file (one input given) or folder (several inputs, a folder
    /// among them, an existing folder, or a name ending in `/`).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub force: Force,
}

/// `--budget` of compress and bench.
#[derive(Args, Debug, Clone, Copy)]
pub struct Budget {
    /// Search budget: candidate programs judged per tensor.
    #[arg(long, default_value_t = brevis_core::DEFAULT_BUDGET)]
    pub budget: u32,
}

/// `--prior` / `--no-prior` of compress and bench.
#[derive(Args, Debug)]
pub struct PriorChoice {
    /// Prior to steer the search (from `brevis-hub prior learn`). Without
    /// it, one prior is learned from a sample of all the inputs' tensors.
    #[arg(long)]
    pub prior: Option<PathBuf>,
    /// Use the uniform prior (no learning).
    #[arg(long, conflicts_with = "prior")]
    pub no_prior: bool,
}
