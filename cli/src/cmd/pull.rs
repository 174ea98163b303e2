//! `pull`: download a mirror and restore the original files into the HF
//! cache (or a plain folder).

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use brevis_hub::PullOptions;
use brevis_hub::pipeline::human;
use clap::Args;

use crate::Outcome;
use crate::args::{Json, Threads};
use crate::hub_args::{FileFilter, HubArgs, SourceArgs, WorkDirArg, notes, print_json, runtime};
use crate::progress::Ui;

/// Download a mirror and restore the originals into the HF cache.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  brevis-hub pull org/model-brevis                  # into the HF cache as org/model\n  HF_HUB_OFFLINE=1 python -c \"from transformers import AutoModel; AutoModel.from_pretrained('org/model')\"\n  brevis-hub pull org/model-brevis --local-dir ./model\n  brevis-hub pull org/model-brevis --work-dir /tmp/brevis-work   # $HF_HOME may be read-only (with --cache-dir or --local-dir elsewhere)\n  brevis-hub pull me/model-brevis --endpoint https://hub.example --source-endpoint https://huggingface.co\n  brevis-hub pull me/private-model-brevis --trust-mirror   # its source cannot be read: take the mirror's word\n\nThe mirror's manifest is checked against its source repo (at --source-endpoint,\ndefault --endpoint) before anything is written. A source that cannot be read there\n(private, gone, on another Hub, or served decoded from the mirror itself) leaves only\nthe mirror's word for what it holds: the pull is refused unless --local-dir (a plain\nfolder) or --trust-mirror (the files go into the HF cache under the source's name;\nan existing ref is never moved, a missing one is set where the endpoint says the\nsource's revision is at that commit)."
)]
pub struct PullArgs {
    /// Mirror repo, `owner/model-brevis`.
    pub repo: String,
    /// Mirror revision.
    #[arg(long, default_value = "main")]
    pub revision: String,
    #[command(flatten)]
    pub hub: HubArgs,
    #[command(flatten)]
    pub source: SourceArgs,
    /// HF cache folder (default `$HF_HUB_CACHE`, `$HF_HOME/hub`, `~/.cache/huggingface/hub`).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Write the originals into this plain folder instead of the cache.
    #[arg(long)]
    pub local_dir: Option<PathBuf>,
    /// When the source repo cannot be read (private, gone, on another Hub
    /// without --source-endpoint), file the originals in the HF cache under
    /// its name anyway, on the mirror's word (every file is still checked
    /// against the manifest). Without it such a pull is refused, unless
    /// --local-dir.
    #[arg(long)]
    pub trust_mirror: bool,
    #[command(flatten)]
    pub work: WorkDirArg,
    #[command(flatten)]
    pub files: FileFilter,
    #[command(flatten)]
    pub threads: Threads,
    #[command(flatten)]
    pub json: Json,
}

pub fn run(a: PullArgs, ui: &Ui) -> Result<Outcome> {
    let client = a.hub.client(ui)?;
    let cache = a
        .cache_dir
        .clone()
        .unwrap_or_else(brevis_hub::cache::default_cache_dir);
    let mut opts = PullOptions::new(a.repo.clone(), cache, a.work.path());
    opts.revision = a.revision.clone();
    opts.local_dir = a.local_dir.clone();
    opts.include = a.files.include.clone();
    opts.exclude = a.files.exclude.clone();
    opts.threads = a.threads.threads;
    opts.progress = Arc::new(ui.sink());
    opts.notes = notes(ui);
    opts.source = Some(a.hub.source_client(&a.source, ui)?);
    opts.trust_mirror = a.trust_mirror;
    let started = std::time::Instant::now();
    let rep = runtime()?
        .block_on(brevis_hub::pull(&client, &opts))
        .with_context(|| format!("pulling {}", a.repo))?;
    let secs = started.elapsed().as_secs_f64();
    if a.json.json {
        let mut v = serde_json::to_value(&rep)?;
        v["seconds"] = serde_json::json!(secs);
        print_json(&v)?;
    } else if !ui.quiet {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "{} -> {}@{}: {} file(s), {} ({} reused), downloaded {} in {secs:.1} s{}",
            rep.mirror_repo,
            rep.source_repo,
            rep.source_commit,
            rep.files,
            human(rep.original_bytes),
            rep.reused,
            human(rep.downloaded_bytes),
            if rep.source_checked {
                ""
            } else {
                "; the source cannot be read here, so checked against the manifest only"
            }
        )?;
        writeln!(out, "{}", rep.path.display())?;
    }
    Ok(Outcome::Ok)
}
