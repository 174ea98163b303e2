//! `brevis-hub`: lossless compression of model checkpoints, and compressed
//! mirrors of Hugging Face model repos.

/// `println!` that returns an error instead of panicking (e.g. on a closed
/// pipe, which `main` turns into a quiet exit 0).
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($t)*)?
    }};
}

mod bench;
mod hub_cmds;
mod local;
mod progress;

use std::process::ExitCode;

// Compression allocates and frees a few MiB per region on every worker;
// glibc's allocator hands such blocks back to the kernel each time, and
// the page faults that follow cost 20% of a compress. mimalloc keeps them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

/// Lossless compression of model checkpoints by program synthesis, and
/// compressed mirrors of Hugging Face model repos.
#[derive(Parser, Debug)]
#[command(
    name = "brevis-hub",
    version,
    about,
    after_help = "Examples:\n  brevis-hub compress model.safetensors\n  brevis-hub mirror org/model --endpoint http://127.0.0.1:8080\n  brevis-hub pull org/model-brevis\n  brevis-hub verify model.safetensors.brv --original model.safetensors"
)]
pub struct Cli {
    /// Print nothing but errors (and --json output).
    #[arg(long, short, global = true)]
    pub quiet: bool,
    /// Never draw progress bars (they are off anyway when stderr is not a terminal).
    #[arg(long, global = true)]
    pub no_progress: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Compress safetensors (or any) files into .brv archives.
    Compress(local::CompressArgs),
    /// Decompress .brv archives back to the original files.
    Decompress(local::DecompressArgs),
    /// Check that archives (or a mirror) decode to their recorded SHA-256.
    Verify(local::VerifyArgs),
    /// Show each tensor's program and what it saved.
    Inspect(local::InspectArgs),
    /// Ratio and speed beside zstd on the same files.
    Bench(local::BenchArgs),
    /// Learn a prior (which programs a checkpoint's tensors favour).
    #[command(
        subcommand,
        after_help = "Example:\n  brevis-hub prior learn ./my-model -o brevis.prior.json"
    )]
    Prior(local::PriorCommand),
    /// Download a Hub model repo, compress it and upload a compressed mirror.
    Mirror(hub_cmds::MirrorArgs),
    /// Download a mirror and restore the original files into the HF cache.
    Pull(hub_cmds::PullArgs),
    /// Serve a local store with the Hugging Face Hub's HTTP protocol.
    Serve(hub_cmds::ServeArgs),
}

/// What a command concluded, beyond success.
pub enum Outcome {
    /// Everything matched.
    Ok,
    /// A verification found a mismatch (exit 1).
    Mismatch,
}

fn main() -> ExitCode {
    // Transparent huge pages make the first touch of each fresh 2 MiB of
    // mimalloc's arena zero all of it, used or not: without them astra
    // compresses 6% faster in 30% less memory. Best effort.
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
    let cli = Cli::parse();
    let ui = progress::Ui::new(cli.quiet, cli.no_progress);
    let result = match cli.command {
        Command::Compress(a) => local::compress(a, &ui),
        Command::Decompress(a) => local::decompress(a, &ui),
        Command::Verify(a) => local::verify(a, &ui),
        Command::Inspect(a) => local::inspect(a, &ui),
        Command::Bench(a) => local::bench(a, &ui),
        Command::Prior(c) => local::prior(c, &ui),
        Command::Mirror(a) => hub_cmds::mirror(a, &ui),
        Command::Pull(a) => hub_cmds::pull(a, &ui),
        Command::Serve(a) => hub_cmds::serve(a, &ui),
    };
    match result {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::Mismatch) => ExitCode::from(1),
        Err(e) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
