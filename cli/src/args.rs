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

/// `--level N`, `-1` .. `-9`, `--fast`, `--best` (one of them) and
/// `--budget` of the commands that compress, in zstd's habit.
#[derive(Args, Debug, Clone, Copy)]
#[group(skip)]
pub struct Budget {
    #[command(flatten)]
    levels: Levels,
    /// Search budget: candidate programs judged per tensor (advanced: the
    /// level's unless given).
    #[arg(long)]
    budget: Option<u32>,
}

/// The level flags, of which one may be given.
#[derive(Args, Debug, Clone, Copy)]
#[group(id = "levels", multiple = false)]
struct Levels {
    /// Compression level, 1 (fastest) to 9 (smallest); -1 .. -9 say the
    /// same. Every level decodes with the same decoder. [default: 6]
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=9), group = "levels")]
    level: Option<u8>,
    /// Level 1: floats split as bytes (decode fastest), order-0 coders,
    /// zstd -3 on bytes.
    #[arg(long, group = "levels")]
    fast: bool,
    /// Level 9: the most search and every context coder.
    #[arg(long, group = "levels")]
    best: bool,
    #[arg(short = '1', hide = true, group = "levels")]
    l1: bool,
    #[arg(short = '2', hide = true, group = "levels")]
    l2: bool,
    #[arg(short = '3', hide = true, group = "levels")]
    l3: bool,
    #[arg(short = '4', hide = true, group = "levels")]
    l4: bool,
    #[arg(short = '5', hide = true, group = "levels")]
    l5: bool,
    #[arg(short = '6', hide = true, group = "levels")]
    l6: bool,
    #[arg(short = '7', hide = true, group = "levels")]
    l7: bool,
    #[arg(short = '8', hide = true, group = "levels")]
    l8: bool,
    #[arg(short = '9', hide = true, group = "levels")]
    l9: bool,
}

impl Budget {
    /// The level asked for, [`Level::DEFAULT`](brevis_core::Level) if none.
    pub fn level(&self) -> brevis_core::Level {
        let s = &self.levels;
        let digits = [s.l1, s.l2, s.l3, s.l4, s.l5, s.l6, s.l7, s.l8, s.l9];
        let n = match (s.level, s.fast, s.best) {
            (Some(n), ..) => n,
            (_, true, _) => brevis_core::Level::FASTEST.get(),
            (_, _, true) => brevis_core::Level::BEST.get(),
            _ => digits
                .iter()
                .position(|&d| d)
                .map_or(brevis_core::Level::DEFAULT.get(), |i| i as u8 + 1),
        };
        brevis_core::Level::new(n).expect("clap keeps levels in 1..=9")
    }

    /// `--budget`, if given.
    pub fn given_budget(&self) -> Option<u32> {
        self.budget
    }

    /// The search budget: `--budget`, else the level's.
    pub fn budget(&self) -> u32 {
        self.budget.unwrap_or_else(|| self.level().budget())
    }

    /// The level, and `--budget` over it, on compress options.
    pub fn apply(&self, o: brevis_core::CompressOptions) -> brevis_core::CompressOptions {
        o.level(self.level()).budget(self.budget())
    }
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
