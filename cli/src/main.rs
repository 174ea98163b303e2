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

mod args;
mod cmd;
mod files;
mod hub_args;
mod progress;

use std::process::ExitCode;

// Compression allocates and frees a few MiB per region on every worker;
// glibc's allocator hands such blocks back to the kernel each time, and
// the page faults that follow are a large share of a compress. mimalloc
// keeps them.
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
    Compress(cmd::compress::CompressArgs),
    /// Decompress .brv archives back to the original files.
    Decompress(cmd::decompress::DecompressArgs),
    /// Check that archives (or a mirror) decode to their recorded SHA-256.
    Verify(cmd::verify::VerifyArgs),
    /// Show each tensor's program and what it saved.
    Inspect(cmd::inspect::InspectArgs),
    /// Ratio and speed beside zstd on the same files.
    Bench(cmd::bench::BenchArgs),
    /// Learn a prior (which programs a checkpoint's tensors favour).
    #[command(
        subcommand,
        after_help = "Example:\n  brevis-hub prior learn ./my-model -o brevis.prior.json"
    )]
    Prior(cmd::prior::PriorCommand),
    /// Download a Hub model repo, compress it and upload a compressed mirror.
    Mirror(cmd::mirror::MirrorArgs),
    /// Download a mirror and restore the original files into the HF cache.
    Pull(cmd::pull::PullArgs),
    /// Serve a local store with the Hugging Face Hub's HTTP protocol.
    Serve(cmd::serve::ServeArgs),
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
    // mimalloc's arena zero all of it, used or not: time and memory spent
    // on pages never used. Best effort.
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
    let cli = Cli::parse();
    let ui = progress::Ui::new(cli.quiet, cli.no_progress);
    let result = match cli.command {
        Command::Compress(a) => cmd::compress::run(a, &ui),
        Command::Decompress(a) => cmd::decompress::run(a, &ui),
        Command::Verify(a) => cmd::verify::run(a, &ui),
        Command::Inspect(a) => cmd::inspect::run(a, &ui),
        Command::Bench(a) => cmd::bench::run(a, &ui),
        Command::Prior(c) => cmd::prior::run(c, &ui),
        Command::Mirror(a) => cmd::mirror::run(a, &ui),
        Command::Pull(a) => cmd::pull::run(a, &ui),
        Command::Serve(a) => cmd::serve::run(a, &ui),
    };
    match result {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::Mismatch) => ExitCode::from(1),
        Err(e) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {}", message(&e));
            if let Some(h) = hint(&e) {
                eprintln!("hint: {h}");
            }
            ExitCode::from(2)
        }
    }
}

/// The error and its causes, `a: b: c`, leaving out a cause whose text
/// the message already ends with (the core's I/O errors print their
/// source in their own text, `path: cause`, and also return it as the
/// source).
pub(crate) fn message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for c in e.chain() {
        let s = c.to_string();
        if s.is_empty() || out.ends_with(&s) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&s);
    }
    out
}

/// What to do about an error the library reports in its own terms, in
/// this command's flags.
fn hint(e: &anyhow::Error) -> Option<&'static str> {
    use brevis_hub::HubError;
    e.chain()
        .find_map(|c| c.downcast_ref::<HubError>())
        .and_then(|h| match h {
            HubError::DestinationTaken { .. } => {
                Some("pass --force to replace it, or choose another --to")
            }
            HubError::SourceUnchecked { .. } => Some(
                "pass --source-endpoint (and --source-token) where the source can be read, \
                 --local-dir to write a plain folder, or --trust-mirror to file the files \
                 in the HF cache on the mirror's word",
            ),
            HubError::Unreachable { .. } => {
                Some("the endpoint is --endpoint / HF_ENDPOINT (default https://huggingface.co)")
            }
            _ => None,
        })
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn library_refusals_get_this_commands_flags_as_a_hint() {
        let e = anyhow::Error::new(brevis_hub::HubError::DestinationTaken {
            dest: "org/x".into(),
            reason: "is not a Brevis mirror".into(),
        })
        .context("mirroring org/m");
        assert!(!message(&e).contains("--"), "{}", message(&e));
        assert!(hint(&e).is_some_and(|h| h.contains("--force")));
        assert!(hint(&anyhow::anyhow!("anything else")).is_none());
    }

    #[test]
    fn an_io_error_is_printed_once() {
        // What the core returns: `path: cause`, with the cause as source.
        let e = brevis_core::DecodeError::Io {
            path: "rod/x.brv".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        let e = anyhow::Error::new(e);
        assert_eq!(message(&e), "rod/x.brv: permission denied");
        let e = e.context("decompressing x.brv");
        assert_eq!(
            message(&e),
            "decompressing x.brv: rod/x.brv: permission denied"
        );
        // A context over a plain I/O error keeps both.
        let e = anyhow::Error::new(std::io::Error::other("disk full")).context("writing a");
        assert_eq!(message(&e), "writing a: disk full");
    }

    /// The `brevis-hub ...` commands of a help text, as words (comments,
    /// pipes and leading `VAR=value` dropped).
    fn examples(help: &str) -> Vec<Vec<String>> {
        help.lines()
            .filter_map(|l| l.find("brevis-hub ").map(|i| &l[i..]))
            .map(|l| {
                let l = l.split("  #").next().unwrap_or(l);
                let l = l.split(" | ").next().unwrap_or(l);
                l.split_whitespace().map(String::from).collect()
            })
            .collect()
    }

    #[test]
    fn every_help_example_parses() {
        let mut todo = vec![(Vec::<String>::new(), Cli::command())];
        let mut checked = 0;
        while let Some((path, cmd)) = todo.pop() {
            for h in [cmd.get_after_help(), cmd.get_after_long_help()]
                .into_iter()
                .flatten()
            {
                for words in examples(&h.to_string()) {
                    if let Err(e) = Cli::try_parse_from(&words) {
                        panic!(
                            "`{}` --help: `{}` does not parse:\n{e}",
                            path.join(" "),
                            words.join(" ")
                        );
                    }
                    checked += 1;
                }
            }
            for sub in cmd.get_subcommands() {
                let mut p = path.clone();
                p.push(sub.get_name().to_string());
                todo.push((p, sub.clone()));
            }
        }
        assert!(checked >= 15, "only {checked} examples found");
    }

    #[test]
    fn threads_above_the_cap_are_refused() {
        let ok = Cli::try_parse_from(["brevis-hub", "decompress", "a.brv", "-T", "1024"]);
        assert!(ok.is_ok());
        for cmd in ["compress", "decompress", "verify"] {
            let e = Cli::try_parse_from(["brevis-hub", cmd, "a.brv", "-T", "100000"]).unwrap_err();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{cmd}: {e}"
            );
        }
        for cmd in ["mirror", "pull"] {
            let e =
                Cli::try_parse_from(["brevis-hub", cmd, "a/b", "--threads", "100000"]).unwrap_err();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{cmd}: {e}"
            );
        }
    }
}
