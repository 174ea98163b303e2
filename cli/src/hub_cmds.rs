//! Hub commands: mirror, pull, serve (and verify of a mirror).

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use brevis_hub::pipeline::human;
use brevis_hub::{HubClient, MirrorOptions, PullOptions, ServerOptions};
use clap::Args;

use crate::Outcome;
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

    fn client(&self, ui: &Ui) -> Result<HubClient> {
        let (token, hint) = self.token();
        self.configured(self.endpoint(), token, &hint, ui)
    }

    /// A client for another endpoint with its own token: `--token` is never
    /// sent anywhere but `--endpoint`, unless `endpoint` is the same one.
    /// `opt` names the other token's option and `role` the other endpoint
    /// (for the message when a token is refused).
    fn client_for(
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

/// Download a Hub model repo, compress it, and upload a compressed mirror.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  brevis-hub mirror org/model                       # uploads <you>/model-brevis (you: the token's user)\n  brevis-hub mirror org/model --to org/model-brevis --public\n  brevis-hub mirror org/model --to me/model-small --revision main --private\n  brevis-hub mirror org/model --endpoint https://hub-a --token A --to-endpoint https://hub-b --to-token B\n  HF_ENDPOINT=http://127.0.0.1:8080 brevis-hub mirror org/model --dry-run\n  brevis-hub mirror org/model --work-dir /tmp/brevis-work --keep-work   # not under $HF_HOME\n\nThe destination is named before any work and checked writable (created if\nmissing, with the namespace's default visibility unless --private/--public)\nbefore anything is downloaded."
)]
pub struct MirrorArgs {
    /// Source repo, `org/model`.
    pub src: String,
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
    /// Codec threads (0 = all cores).
    #[arg(long, default_value_t = 0, value_parser = crate::threads_parser())]
    pub threads: usize,
    /// Codec search budget.
    #[arg(long)]
    pub budget: Option<u32>,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    pub json: bool,
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
    /// Codec threads (0 = all cores).
    #[arg(long, default_value_t = 0, value_parser = crate::threads_parser())]
    pub threads: usize,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Serve a local store with the Hub's HTTP protocol.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  brevis-hub serve --root ./hub-store --addr 127.0.0.1:8080 --token secret\n  brevis-hub serve --root /tmp/store --addr 127.0.0.1:0 --seed org/model=./my-model\n  brevis-hub serve --root /tmp/store --addr 127.0.0.1:0 --strict --plain-get-cap 100MB --cdn-rate 50MB/s --rate-limit 500/300\n\nStrict mode (--strict) behaves like huggingface.co, so a client that passes\nagainst it works on the Hub: resolve of an LFS file answers 302 to a signed,\nexpiring URL on a second listener standing for the CDN (it refuses a request\nwith an Authorization header, and a GET without Range of a file over\n--plain-get-cap); the LFS batch API's upload URLs point at a third listener\nstanding for S3 (it refuses chunked bodies with 501, a missing Content-Length\nwith 411 and an Authorization header with 400); trees come in pages of 3.\nThe first stdout line stays `listening on http://ADDR`; the next two are\n`cdn on http://ADDR` and `s3 on http://ADDR`.\n\n--rate-limit N/SECS (either mode) allows N Hub API requests (/api/..., LFS\nbatch, resolve) per client address in each fixed window of SECS seconds;\nover it: 429 with `RateLimit: \"api\";r=0;t=<seconds left>` and\n`RateLimit-Policy`, and no Retry-After, as the Hub answers."
)]
pub struct ServeArgs {
    /// Store root.
    #[arg(long)]
    pub root: PathBuf,
    /// Address to listen on (port 0 picks a free one; the first stdout line
    /// says `listening on http://ADDR`).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// A read+write token (repeatable). Without any token the server is open.
    #[arg(long = "token")]
    pub tokens: Vec<String>,
    /// A read-only token (repeatable).
    #[arg(long = "read-token")]
    pub read_tokens: Vec<String>,
    /// Commit a local folder as a repo at startup: `org/name=DIR` (repeatable).
    #[arg(long)]
    pub seed: Vec<String>,
    /// Tree listing page size [default: 1000, or 3 with --strict].
    #[arg(long, hide = true)]
    pub tree_page_size: Option<usize>,
    /// LFS uploads larger than this use the multipart transfer (bytes, or
    /// with a unit: 64MiB).
    #[arg(long, default_value = "64MiB", value_parser = brevis_hub::server::cdn::parse_size)]
    pub multipart_threshold: u64,
    /// Part size of multipart uploads (bytes, or with a unit: 16MiB).
    #[arg(long, default_value = "16MiB", value_parser = brevis_hub::server::cdn::parse_size)]
    pub multipart_chunk: u64,
    /// Behave like huggingface.co: CDN redirects, S3 uploads, paged trees
    /// (see below).
    #[arg(long)]
    pub strict: bool,
    /// With --strict: the CDN refuses a GET without Range of a file larger
    /// than this (bytes, or with a unit: 50GB, 100MiB).
    #[arg(long, default_value = "50GB", requires = "strict", value_parser = brevis_hub::server::cdn::parse_size)]
    pub plain_get_cap: u64,
    /// With --strict: send each CDN response body at most this fast
    /// (bytes a second: 1048576, 50MB/s).
    #[arg(long, requires = "strict", value_parser = brevis_hub::server::cdn::parse_rate)]
    pub cdn_rate: Option<u64>,
    /// With --strict: read each upload on the S3 listener at most this fast
    /// (bytes a second: 1048576, 20MB/s).
    #[arg(long, requires = "strict", value_parser = brevis_hub::server::cdn::parse_rate)]
    pub s3_rate: Option<u64>,
    /// With --strict: how long a CDN URL is good for (seconds).
    #[arg(long, default_value_t = brevis_hub::server::cdn::CDN_URL_TTL.as_secs(), requires = "strict", hide = true)]
    pub cdn_url_ttl: u64,
    /// At most N Hub API requests per client address every SECS seconds
    /// (N/SECS, e.g. 500/300); over it, 429 with the Hub's RateLimit headers.
    #[arg(long, value_name = "N/SECS")]
    pub rate_limit: Option<brevis_hub::server::RateLimit>,
    /// Files decoded on the fly at once (each takes a thread and about one
    /// region of memory); further requests wait, then get 503.
    #[arg(long, default_value_t = brevis_hub::server::limits::MAX_DECODED_STREAMS)]
    pub max_decoded_streams: usize,
    /// Open connections allowed from one client address.
    #[arg(long, default_value_t = brevis_hub::server::limits::MAX_CONNECTIONS_PER_ADDR)]
    pub max_connections_per_addr: usize,
    /// Open connections allowed in all.
    #[arg(long, default_value_t = brevis_hub::server::limits::MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// How long a request for a decoded file waits for a slot (ms).
    #[arg(long, hide = true)]
    pub decode_queue_wait_ms: Option<u64>,
    /// How long a request body may send nothing (ms).
    #[arg(long, hide = true)]
    pub body_idle_timeout_ms: Option<u64>,
    /// How long a download may wait for its client to take bytes (ms).
    #[arg(long, hide = true)]
    pub send_stall_timeout_ms: Option<u64>,
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn notes(ui: &Ui) -> brevis_hub::pipeline::Notes {
    let quiet = ui.quiet;
    Arc::new(move |m: &str| {
        if !quiet {
            eprintln!("{m}");
        }
    })
}

fn print_json(v: &impl serde::Serialize) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, v)?;
    writeln!(out)?;
    Ok(())
}

pub fn mirror(a: MirrorArgs, ui: &Ui) -> Result<Outcome> {
    let src = a.hub.client(ui)?;
    let dst = a.hub.client_for(
        a.to_endpoint.as_deref(),
        a.to_token.as_deref(),
        ("--to-token / BREVIS_TO_TOKEN", "the destination"),
        ui,
    )?;
    let mut opts = MirrorOptions::new(a.src.clone(), a.work.path())
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
    opts.threads = a.threads;
    opts.budget = a.budget;
    let started = std::time::Instant::now();
    let rep = runtime()?
        .block_on(brevis_hub::mirror(&src, &dst, &opts))
        .with_context(|| format!("mirroring {}", a.src))?;
    let secs = started.elapsed().as_secs_f64();
    if a.json {
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
    let mut out = std::io::stdout().lock();
    if rep.dry_run {
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
        return Ok(Outcome::Ok);
    }
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
    writeln!(out, "ratio: {:.4}", rep.ratio())?;
    writeln!(
        out,
        "downloaded {}, uploaded {} ({} LFS object(s) sent, {} already there) in {secs:.1} s",
        human(rep.downloaded_bytes),
        human(rep.uploaded_bytes),
        rep.lfs_objects_sent,
        rep.lfs_objects_present
    )?;
    Ok(Outcome::Ok)
}

pub fn pull(a: PullArgs, ui: &Ui) -> Result<Outcome> {
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
    opts.threads = a.threads;
    opts.progress = Arc::new(ui.sink());
    opts.notes = notes(ui);
    opts.source = Some(a.hub.source_client(&a.source, ui)?);
    opts.trust_mirror = a.trust_mirror;
    let started = std::time::Instant::now();
    let rep = runtime()?
        .block_on(brevis_hub::pull(&client, &opts))
        .with_context(|| format!("pulling {}", a.repo))?;
    let secs = started.elapsed().as_secs_f64();
    if a.json {
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

pub fn serve(a: ServeArgs, ui: &Ui) -> Result<Outcome> {
    let mut opts = ServerOptions::new(a.root.clone())
        .strict(a.strict)
        .multipart(a.multipart_threshold, a.multipart_chunk)
        .limits({
            let ms = std::time::Duration::from_millis;
            let mut l = brevis_hub::server::Limits::default()
                .max_decoded_streams(a.max_decoded_streams)
                .connections(a.max_connections, a.max_connections_per_addr);
            if let Some(t) = a.decode_queue_wait_ms {
                l = l.decode_queue_wait(ms(t));
            }
            if let Some(t) = a.body_idle_timeout_ms {
                l = l.body_idle_timeout(ms(t));
            }
            if let Some(t) = a.send_stall_timeout_ms {
                l = l.send_stall_timeout(ms(t));
            }
            l
        });
    if let Some(n) = a.tree_page_size {
        opts = opts.tree_page_size(n);
    }
    if a.strict {
        opts = opts
            .plain_get_cap(a.plain_get_cap)
            .cdn_url_ttl(std::time::Duration::from_secs(a.cdn_url_ttl));
        if let Some(r) = a.cdn_rate {
            opts = opts.cdn_rate(r);
        }
        if let Some(r) = a.s3_rate {
            opts = opts.s3_rate(r);
        }
    }
    if let Some(r) = a.rate_limit {
        opts = opts.rate_limit(r);
    }
    for t in &a.tokens {
        opts = opts.token(t.clone());
    }
    for t in &a.read_tokens {
        opts = opts.read_token(t.clone());
    }
    let store = brevis_hub::server::Store::open(&a.root)
        .with_context(|| format!("opening store {}", a.root.display()))?;
    for s in &a.seed {
        let (repo, dir) = s
            .split_once('=')
            .with_context(|| format!("--seed {s:?}: expected org/name=DIR"))?;
        let repo = brevis_hub::ids::RepoId::parse(repo).with_context(|| format!("--seed {s:?}"))?;
        let oid = store
            .seed(&repo, std::path::Path::new(dir))
            .with_context(|| format!("seeding {repo} from {dir}"))?;
        ui.note(format!("seeded {repo} at {oid} from {dir}"));
    }
    // Blocking threads: one a decoded stream (the server caps those), and
    // room for file reads and multipart completions.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(opts.limits.max_decoded_streams + 32)
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let server = brevis_hub::server::start(opts, a.addr)
            .await
            .with_context(|| format!("listening on {}", a.addr))?;
        {
            let mut out = std::io::stdout().lock();
            writeln!(out, "listening on {}", server.url())?;
            if let Some(u) = server.cdn_url() {
                writeln!(out, "cdn on {u}")?;
            }
            if let Some(u) = server.s3_url() {
                writeln!(out, "s3 on {u}")?;
            }
            out.flush()?;
        }
        wait_for_signal().await;
        ui.note("shutting down");
        server.shutdown().await;
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(Outcome::Ok)
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Verify mirrors: local folders holding `brevis.manifest.json`, or remote
/// mirror repo ids (at `revision`, on `hub`'s endpoint with its token,
/// downloading into `work`).
/// Every target is checked and reported, in text or JSON, whatever happens
/// to the others. Ok(Mismatch) when a file differs; an error (exit 2) when a
/// target could not be checked at all.
pub fn verify_mirrors(
    targets: &[String],
    revision: &str,
    (hub, source): (&HubArgs, &SourceArgs),
    work: &WorkDirArg,
    (threads, require_source): (usize, bool),
    json: bool,
    ui: &Ui,
) -> Result<Outcome> {
    let mut results: Vec<(String, Result<brevis_hub::VerifyReport>)> = Vec::new();
    let mut client: Option<(HubClient, HubClient)> = None;
    let mut rt: Option<tokio::runtime::Runtime> = None;
    for target in targets {
        let path = std::path::Path::new(target);
        let r = if path.is_dir() {
            brevis_hub::verify_local(path, threads).with_context(|| format!("verifying {target}"))
        } else {
            (|| {
                if client.is_none() {
                    client = Some((hub.client(ui)?, hub.source_client(source, ui)?));
                }
                if rt.is_none() {
                    rt = Some(runtime()?);
                }
                let (Some((c, src)), Some(rt)) = (&client, &rt) else {
                    anyhow::bail!("no client");
                };
                rt.block_on(brevis_hub::verify_mirror_against(
                    c,
                    src,
                    target,
                    revision,
                    &work.path(),
                    threads,
                    Arc::new(ui.sink()),
                ))
                .with_context(|| format!("verifying {target}"))
            })()
        };
        results.push((target.clone(), r));
    }
    // --require-source: a mirror its source did not vouch for is not ok.
    let unvouched = |rep: &brevis_hub::VerifyReport| require_source && !rep.source_checked;
    for rep in results.iter_mut().filter_map(|(_, r)| r.as_mut().ok()) {
        if unvouched(rep) {
            rep.ok = false;
        }
    }
    let ok = results
        .iter()
        .all(|(_, r)| r.as_ref().is_ok_and(|rep| rep.ok));
    if json {
        let rows: Vec<serde_json::Value> = results
            .iter()
            .map(|(t, r)| match r {
                Ok(rep) => serde_json::to_value(rep).unwrap_or_default(),
                Err(e) => serde_json::json!({
                    "target": t, "ok": false, "files": [], "error": crate::message(e),
                }),
            })
            .collect();
        match rows.as_slice() {
            [one] => print_json(one)?,
            _ => print_json(&serde_json::json!({ "ok": ok, "mirrors": rows }))?,
        }
    } else {
        let mut out = std::io::stdout().lock();
        // Several mirrors: each row names its mirror (with -q the rows are
        // all there is).
        let several = results.len() > 1;
        for (target, r) in &results {
            let Ok(rep) = r else { continue };
            let remote = !std::path::Path::new(target).is_dir();
            let prefix = if several {
                format!("{}: ", rep.target)
            } else {
                String::new()
            };
            // -q: nothing but the files that are not ok.
            for f in rep.files.iter().filter(|f| !(ui.quiet && f.status == "ok")) {
                writeln!(
                    out,
                    "{prefix}{:<8} {}{}",
                    f.status,
                    f.path,
                    f.detail
                        .as_deref()
                        .map(|d| format!(" ({d})"))
                        .unwrap_or_default()
                )?;
            }
            // (-q: the summary too when it alone says why the mirror
            // fails: its source was not checked under --require-source.)
            if !ui.quiet || unvouched(rep) {
                let bad = rep.files.iter().filter(|f| f.status != "ok").count();
                let why = rep.source_unread.as_deref().unwrap_or("not read");
                writeln!(
                    out,
                    "{}: {} file(s), {} ok, {} bad (source {}@{}{})",
                    rep.target,
                    rep.files.len(),
                    rep.files.len() - bad,
                    bad,
                    rep.source.repo,
                    rep.source.commit,
                    match (unvouched(rep), remote && !rep.source_checked) {
                        (true, _) => format!(
                            "; the source was not checked ({why}): not ok with --require-source"
                        ),
                        (false, true) => {
                            format!(
                                "; not readable here ({why}), so checked against the manifest only"
                            )
                        }
                        (false, false) => String::new(),
                    }
                )?;
            }
        }
    }
    // Files that could not be fetched make the run an error (exit 2),
    // after every row was reported.
    let mut errors: Vec<anyhow::Error> = Vec::new();
    for (target, r) in results {
        match r {
            Err(e) => errors.push(e),
            Ok(rep) => {
                let failed: Vec<&brevis_hub::VerifyEntry> =
                    rep.files.iter().filter(|f| f.status == "error").collect();
                if let Some(first) = failed.first() {
                    errors.push(anyhow::anyhow!(
                        "verifying {target}: {} file(s) could not be checked; {}: {}",
                        failed.len(),
                        first.path,
                        first.detail.as_deref().unwrap_or("")
                    ));
                }
            }
        }
    }
    let mut errors = errors.into_iter();
    match (errors.next(), errors.len()) {
        (None, _) => Ok(if ok { Outcome::Ok } else { Outcome::Mismatch }),
        (Some(e), 0) => Err(e),
        (Some(e), n) => Err(anyhow::anyhow!(
            "{} (and {n} more target(s) could not be checked)",
            crate::message(&e)
        )),
    }
}
