//! `mirror`: download a Hub model repo, compress it and upload a
//! compressed mirror.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use brevis_hub::pipeline::human;
use brevis_hub::{HubClient, MirrorOptions, MirrorReport};
use clap::Args;

use crate::Outcome;
use crate::args::{Budget, Json, Threads};
use crate::hub_args::{FileFilter, HubArgs, WorkDirArg, notes, print_json, runtime};
use crate::progress::Ui;

/// Download a Hub model repo, compress it, and upload a compressed mirror.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  brevis-hub mirror org/model                       # uploads <you>/model-brevis (you: the token's user)\n  brevis-hub mirror org/model --to org/model-brevis --public\n  brevis-hub mirror org/model --to me/model-small --revision main --private\n  brevis-hub mirror org/model --endpoint https://hub-a --token A --to-endpoint https://hub-b --to-token B\n  HF_ENDPOINT=http://127.0.0.1:8080 brevis-hub mirror org/model --dry-run\n  brevis-hub mirror org/model --work-dir /tmp/brevis-work --keep-work   # not under $HF_HOME\n\nAt scale (many repos, many machines; examples/ holds Kubernetes, Slurm and\nGitHub Actions jobs):\n  brevis-hub mirror --plan plan.json org/a org/b       # or --sources repos.txt\n  brevis-hub mirror --plan plan.json --worker 3/8      # on each machine, K = 0..7\n  brevis-hub mirror --plan plan.json --status\n  brevis-hub mirror --plan plan.json --commit\n\nThe destination is named before any work and checked writable (created if\nmissing, with the namespace's default visibility unless --private/--public)\nbefore anything is downloaded."
)]
pub struct MirrorArgs {
    /// Source repo, `org/model` (with --plan: the repos to plan, any
    /// number).
    #[arg(value_name = "SRC")]
    pub src: Vec<String>,
    /// Mirror at scale with a plan file. With SRC... (or --sources): write
    /// the plan of mirroring them (every repo resolved at a commit, its
    /// prior learned and put on the mirror's work branch
    /// `brevis-work-<plan id>`, its compressed files cut into units). With
    /// --worker, --commit or --status: run that step of it (--commit
    /// deletes the work branch once the mirror is committed).
    #[arg(long, value_name = "PLAN.json")]
    pub plan: Option<PathBuf>,
    /// A file listing the source repos to plan, one per line (`#` starts a
    /// comment).
    #[arg(long, value_name = "FILE", requires = "plan")]
    pub sources: Option<PathBuf>,
    /// Run worker K of N (K from 0) of the plan: compress, prove and send
    /// its share of the units. `auto` reads K from JOB_COMPLETION_INDEX
    /// (Kubernetes Indexed Job) or SLURM_ARRAY_TASK_ID, and N from
    /// BREVIS_WORKERS or SLURM_ARRAY_TASK_COUNT.
    #[arg(long, value_name = "K/N|auto", requires = "plan", conflicts_with_all = ["commit", "status"])]
    pub worker: Option<String>,
    /// Commit each planned mirror from its units' results (every unit must
    /// be done).
    #[arg(long, requires = "plan", conflicts_with = "status")]
    pub commit: bool,
    /// Show the plan's units done, in flight and missing, from what the
    /// destination Hub holds.
    #[arg(long, requires = "plan")]
    pub status: bool,
    /// Planning: compressed files smaller than this are grouped into units
    /// of about this many bytes; larger ones are a unit each.
    #[arg(long, value_name = "BYTES", default_value_t = 64 << 20, requires = "plan")]
    pub unit_bytes: u64,
    /// Destination repo (default `<user or org>/<model>-brevis`).
    #[arg(long)]
    pub to: Option<String>,
    /// Source revision (branch or commit).
    #[arg(long, default_value = "main")]
    pub revision: String,
    #[command(flatten)]
    pub hub: HubArgs,
    /// Endpoint to upload the mirror to (default: --endpoint).
    #[arg(long)]
    pub to_endpoint: Option<String>,
    /// Token for the destination (--to-endpoint) only. --token / HF_TOKEN
    /// goes to the source endpoint only; when the two endpoints are the same
    /// and this is not given, --token serves both.
    #[arg(long, env = "BREVIS_TO_TOKEN", hide_env_values = true)]
    pub to_token: Option<String>,
    /// Replace the destination repo even if it exists and is not a Brevis
    /// mirror, or mirrors another source repo or revision (its files are
    /// deleted). Without it, such a repo is refused.
    #[arg(long)]
    pub force: bool,
    /// Use this prior (JSON) instead of learning one.
    #[arg(long)]
    pub prior: Option<PathBuf>,
    /// Create the mirror repo private (default: the namespace's default
    /// visibility).
    #[arg(long, conflicts_with = "public")]
    pub private: bool,
    /// Create the mirror repo public.
    #[arg(long)]
    pub public: bool,
    /// Only show what would be done.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub files: FileFilter,
    #[command(flatten)]
    pub work: WorkDirArg,
    /// Keep the work folder after success.
    #[arg(long)]
    pub keep_work: bool,
    #[command(flatten)]
    pub threads: Threads,
    #[command(flatten)]
    pub level: Budget,
    #[command(flatten)]
    pub json: Json,
}

pub fn run(a: MirrorArgs, ui: &Ui) -> Result<Outcome> {
    if a.plan.is_some() {
        return super::mirror_plan::run(a, ui);
    }
    let [one] = a.src.as_slice() else {
        anyhow::bail!(
            "mirror takes one source repo (got {}); to mirror several, plan them: \
             brevis-hub mirror --plan PLAN.json SRC...",
            a.src.len()
        );
    };
    let (src, dst) = clients(&a, ui)?;
    let opts = options(&a, ui);
    let started = std::time::Instant::now();
    let rep = runtime()?
        .block_on(brevis_hub::mirror(&src, &dst, &opts))
        .with_context(|| format!("mirroring {one}"))?;
    let secs = started.elapsed().as_secs_f64();
    if a.json.json {
        let mut v = serde_json::to_value(&rep)?;
        v["ratio"] = serde_json::json!(rep.ratio());
        v["seconds"] = serde_json::json!(secs);
        print_json(&v)?;
        return Ok(Outcome::Ok);
    }
    // -q: nothing but errors (a plan is what --dry-run asked for).
    if ui.quiet && !rep.dry_run {
        return Ok(Outcome::Ok);
    }
    if rep.dry_run {
        print_plan(&rep)?;
    } else {
        print_done(&rep, secs)?;
    }
    Ok(Outcome::Ok)
}

/// The source's client and the destination's (`--to-endpoint`,
/// `--to-token`).
pub(super) fn clients(a: &MirrorArgs, ui: &Ui) -> Result<(HubClient, HubClient)> {
    let src = a.hub.client(ui)?;
    let dst = a.hub.client_for(
        a.to_endpoint.as_deref(),
        a.to_token.as_deref(),
        ("--to-token / BREVIS_TO_TOKEN", "the destination"),
        ui,
    )?;
    Ok((src, dst))
}

/// The pipeline's options from the command line.
pub(super) fn options(a: &MirrorArgs, ui: &Ui) -> MirrorOptions {
    let src = a.src.first().cloned().unwrap_or_default();
    let mut opts = MirrorOptions::new(src, a.work.path())
        .revision(a.revision.clone())
        .progress(Arc::new(ui.sink()))
        .notes(notes(ui));
    opts.dest = a.to.clone();
    opts.prior = a.prior.clone();
    opts.private = match (a.private, a.public) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    };
    opts.dry_run = a.dry_run;
    opts.include = a.files.include.clone();
    opts.exclude = a.files.exclude.clone();
    opts.keep_work = a.keep_work;
    opts.force = a.force;
    opts.threads = a.threads.threads;
    opts.level = a.level.level();
    opts.budget = a.level.given_budget();
    opts.unit_bytes = a.unit_bytes;
    opts
}

/// `--dry-run`: what would be mirrored.
fn print_plan(rep: &MirrorReport) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "plan: {} -> {}", rep.source_repo, rep.dest_repo)?;
    writeln!(out, "source commit {}", rep.source_commit)?;
    for f in &rep.files {
        writeln!(
            out,
            "  {:>12}  {}  ->  {}",
            human(f.size),
            f.path,
            f.archive
        )?;
    }
    writeln!(
        out,
        "source bytes: {} ({})",
        rep.source_bytes,
        human(rep.source_bytes)
    )?;
    if rep.up_to_date {
        writeln!(out, "the destination is already up to date")?;
    }
    Ok(())
}

/// What a mirror run did, in `secs` seconds.
pub(super) fn print_done(rep: &MirrorReport, secs: f64) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{} -> {}{}",
        rep.source_repo,
        rep.dest_repo,
        if rep.up_to_date {
            " (already up to date)"
        } else {
            ""
        }
    )?;
    writeln!(
        out,
        "source bytes: {} ({})",
        rep.source_bytes,
        human(rep.source_bytes)
    )?;
    writeln!(
        out,
        "mirror bytes: {} ({})",
        rep.mirror_bytes,
        human(rep.mirror_bytes)
    )?;
    if rep.source_bytes == 0 {
        writeln!(out, "ratio: n/a")?;
    } else {
        writeln!(out, "ratio: {:.4}", rep.ratio())?;
    }
    writeln!(
        out,
        "downloaded {}, uploaded {} ({} LFS object(s) sent, {} already there) in {secs:.1} s",
        human(rep.downloaded_bytes),
        human(rep.uploaded_bytes),
        rep.lfs_objects_sent,
        rep.lfs_objects_present
    )?;
    Ok(())
}
