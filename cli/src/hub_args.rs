//! What the Hub commands share: where the Hub is and the token for it
//! (`HubArgs`), the source endpoint, the work folder, the file filter,
//! and the runtime and output helpers.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use brevis_hub::HubClient;
use clap::Args;

use crate::progress::Ui;

const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// Where the Hub is and who we are.
#[derive(Args, Debug)]
pub struct HubArgs {
    /// Hub endpoint (default `https://huggingface.co`, also when
    /// HF_ENDPOINT is empty).
    #[arg(long, env = "HF_ENDPOINT")]
    pub endpoint: Option<String>,
    /// Access token (never printed).
    #[arg(long, env = "HF_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Files to transfer at once.
    #[arg(long, default_value_t = 4)]
    pub jobs: usize,
    /// Keep a partial download when the disk fills, to resume it later
    /// (by default it is removed so the disk is not left full).
    #[arg(long, env = "BREVIS_KEEP_PARTIAL", value_parser = clap::builder::FalseyValueParser::new())]
    pub keep_partial: bool,
}

impl HubArgs {
    /// The endpoint: --endpoint, else HF_ENDPOINT unless empty, else the Hub.
    fn endpoint(&self) -> &str {
        self.endpoint
            .as_deref()
            .filter(|e| !e.is_empty())
            .unwrap_or(DEFAULT_ENDPOINT)
    }

    /// The token, as `hf` finds it: --token, else HF_TOKEN, else the file
    /// `hf auth login` writes (`HF_TOKEN_PATH`, default `$HF_HOME/token`);
    /// and where it came from (for the message when it is refused).
    fn token(&self) -> (Option<String>, String) {
        if let Some(t) = self
            .token
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
        {
            return (Some(t.to_string()), "HF_TOKEN / --token".into());
        }
        let path = std::env::var_os("HF_TOKEN_PATH")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| brevis_hub::cache::hf_home().join("token"));
        match std::fs::read_to_string(&path) {
            Ok(t) if !t.trim().is_empty() => (
                Some(t.trim().to_string()),
                format!(
                    "the token `hf auth login` stored in {} (or HF_TOKEN / --token)",
                    path.display()
                ),
            ),
            _ => (None, "HF_TOKEN / --token".into()),
        }
    }

    /// The client for `--endpoint`: its token, the download chunks
    /// (`BREVIS_CHUNK_SIZE`, `BREVIS_DOWNLOAD_CONNECTIONS`) and how long to
    /// wait out rate limits (`BREVIS_RATE_LIMIT_WAIT`, seconds).
    fn configured(
        &self,
        endpoint: &str,
        token: Option<String>,
        hint: &str,
        ui: &Ui,
    ) -> Result<HubClient> {
        let env_u64 = |k: &str| -> Result<Option<u64>> {
            match std::env::var(k) {
                Ok(v) if !v.trim().is_empty() => v
                    .trim()
                    .parse::<u64>()
                    .map(Some)
                    .with_context(|| format!("{k}={v:?}: expected a whole number")),
                _ => Ok(None),
            }
        };
        let mut plan = brevis_hub::client::ChunkPlan::default();
        if let Some(n) = env_u64("BREVIS_CHUNK_SIZE")? {
            anyhow::ensure!(n > 0, "BREVIS_CHUNK_SIZE must be more than 0");
            plan.chunk_size = n;
        }
        if let Some(n) = env_u64("BREVIS_DOWNLOAD_CONNECTIONS")? {
            anyhow::ensure!(n > 0, "BREVIS_DOWNLOAD_CONNECTIONS must be more than 0");
            plan.connections = n as usize;
        }
        let mut c = HubClient::new(endpoint, token)?
            .with_concurrency(self.jobs)
            .with_keep_partial(self.keep_partial)
            .with_chunks(plan)
            .with_token_hint(hint)
            .with_notes(notes(ui));
        if let Some(s) = env_u64("BREVIS_RATE_LIMIT_WAIT")? {
            c = c.with_max_rate_limit_wait(std::time::Duration::from_secs(s));
        }
        Ok(c)
    }

    /// The client for `--endpoint`, with its token.
    pub(crate) fn client(&self, ui: &Ui) -> Result<HubClient> {
        let (token, hint) = self.token();
        self.configured(self.endpoint(), token, &hint, ui)
    }

    /// A client for another endpoint with its own token: `--token` is never
    /// sent anywhere but `--endpoint`, unless `endpoint` is the same one.
    /// `opt` names the other token's option and `role` the other endpoint
    /// (for the message when a token is refused).
    pub(crate) fn client_for(
        &self,
        endpoint: Option<&str>,
        token: Option<&str>,
        (opt, role): (&str, &str),
        ui: &Ui,
    ) -> Result<HubClient> {
        let same = |e: &str| e.trim_end_matches('/') == self.endpoint().trim_end_matches('/');
        let (endpoint, shared) = match endpoint {
            None => (self.endpoint(), true),
            Some(e) if same(e) => (e, true),
            Some(e) => (e, false),
        };
        // A refused token names the option it came from.
        let (own, own_hint) = self.token();
        let (token, hint) = match (token, shared) {
            (Some(t), _) => (Some(t), opt.to_string()),
            (None, true) => (own.as_deref(), format!("{own_hint} (or {opt} for {role})")),
            (None, false) => (
                None,
                format!("{opt} ({role}'s token: --token goes to --endpoint only)"),
            ),
        };
        self.configured(endpoint, token.map(String::from), &hint, ui)
    }

    /// The client for the source repos of mirrors (`--source-endpoint`,
    /// default `--endpoint`).
    pub fn source_client(&self, src: &SourceArgs, ui: &Ui) -> Result<HubClient> {
        self.client_for(
            src.source_endpoint.as_deref().filter(|e| !e.is_empty()),
            src.source_token.as_deref(),
            (
                "--source-token / BREVIS_SOURCE_TOKEN",
                "the source endpoint",
            ),
            ui,
        )
    }
}

/// Where the source repos of mirrors are, for pull and verify's check of a
/// mirror's manifest against its source.
#[derive(Args, Debug)]
pub struct SourceArgs {
    /// Endpoint holding the mirrors' source repos (default --endpoint):
    /// e.g. `https://huggingface.co` for a mirror kept on another Hub.
    #[arg(long)]
    pub source_endpoint: Option<String>,
    /// Token for --source-endpoint only (--token / HF_TOKEN goes to
    /// --endpoint only; when the two endpoints are the same and this is
    /// not given, --token serves both).
    #[arg(long, env = "BREVIS_SOURCE_TOKEN", hide_env_values = true)]
    pub source_token: Option<String>,
}

/// Where a Hub command keeps its downloads in flight (and `mirror` its
/// archives).
#[derive(Args, Debug)]
pub struct WorkDirArg {
    /// Work folder (default `$HF_HOME/brevis`): any writable folder, so the
    /// HF home may be read-only.
    #[arg(long, env = "BREVIS_WORK_DIR")]
    pub work_dir: Option<PathBuf>,
}

impl WorkDirArg {
    /// --work-dir, else BREVIS_WORK_DIR unless empty, else `$HF_HOME/brevis`.
    pub fn path(&self) -> PathBuf {
        self.work_dir
            .clone()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or_else(|| brevis_hub::cache::hf_home().join("brevis"))
    }
}

/// Which source files a command takes (`--include` / `--exclude` globs).
#[derive(Args, Debug)]
pub struct FileFilter {
    /// Only source files matching this glob (repeatable).
    #[arg(long)]
    pub include: Vec<String>,
    /// Leave out source files matching this glob (repeatable).
    #[arg(long)]
    pub exclude: Vec<String>,
}

/// A multi-threaded tokio runtime for one Hub command.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// The pipeline's notes on stderr (not with -q).
pub(crate) fn notes(ui: &Ui) -> brevis_hub::pipeline::Notes {
    let quiet = ui.quiet;
    Arc::new(move |m: &str| {
        if !quiet {
            eprintln!("{m}");
        }
    })
}

/// `v` as pretty JSON on stdout.
pub(crate) fn print_json(v: &impl serde::Serialize) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, v)?;
    writeln!(out)?;
    Ok(())
}
