//! `serve`: a local store with the Hugging Face Hub's HTTP protocol.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use brevis_hub::ServerOptions;
use clap::Args;

use crate::Outcome;
use crate::progress::Ui;

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

/// Blocking threads beside one a decoded stream: room for file reads and
/// multipart completions.
const SPARE_BLOCKING_THREADS: usize = 32;

/// The server's options from the command line.
fn options(a: &ServeArgs) -> ServerOptions {
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
    opts
}

/// Commit each `--seed org/name=DIR` into the store.
fn seed(a: &ServeArgs, ui: &Ui) -> Result<()> {
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
    Ok(())
}

pub fn run(a: ServeArgs, ui: &Ui) -> Result<Outcome> {
    let opts = options(&a);
    seed(&a, ui)?;
    // Blocking threads: one a decoded stream (the server caps those), and
    // spare ones.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(opts.limits.max_decoded_streams + SPARE_BLOCKING_THREADS)
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
