//! Hugging Face Hub adapter for Brevis.
//!
//! A compressed *mirror* of a Hub model repo holds one `.brv` archive per
//! weight file (any container), every other file as it is, a `brevis.manifest.json`
//! (source repo and commit; per file its size, SHA-256 and archive) and the
//! prior the shards were compressed with. This crate moves such mirrors to and
//! from a Hub:
//!
//! - [`HubClient`]: repo info, recursive tree listing (cursor pages),
//!   downloads that resume with `Range` across runs and retry on 429/5xx and
//!   dropped connections, repo creation, preupload, the LFS batch API (basic
//!   and multipart transfers, verify) and the NDJSON commit API.
//! - [`mirror`], [`pull`], [`verify_mirror`]: the pipelines behind the CLI.
//! - [`cache::RepoCache`]: the Hugging Face cache layout (`blobs`,
//!   `snapshots/<commit>`, `refs/<revision>`), so `huggingface_hub` finds the
//!   originals with `HF_HUB_OFFLINE=1`.
//! - [`server`]: a Hub-compatible server over a local store, which also serves
//!   mirrors decoded on the fly as their source repos.
//!
//! Endpoint, token and cache folder are always passed in explicitly; only the
//! CLI reads `HF_ENDPOINT`, `HF_TOKEN` and `HF_HOME`. Tokens never appear in
//! errors or `Debug` output. Progress is reported through
//! [`brevis_core::ProgressSink`]; this crate draws nothing.
//!
//! # Why plain `reqwest` and not the `hf-hub` crate
//!
//! `hf-hub` 1.x pulls in `hf-xet` (a very long build on a small machine) and
//! uploads only through Xet, which a local server cannot offer; 0.x has no
//! upload at all. Brevis needs the classic LFS upload path (preupload, LFS
//! batch, commit), `Range` resume of partial files across runs, its own
//! retry policy, and the same code to talk to `brevis-hub serve`. All of that
//! is a few hundred lines over `reqwest` (rustls, no OpenSSL), so the client is
//! written here against the Hub's documented HTTP endpoints.
//!
//! ```
//! use brevis_hub::paths::{check_repo_path, glob_match};
//! assert!(check_repo_path("../../etc/passwd").is_err());
//! assert!(glob_match("*.safetensors", "sub/model.safetensors"));
//! ```
//!
//! Features: none yet; TLS is rustls with the webpki roots.
#![warn(missing_docs)]

pub mod cache;
pub mod client;
pub mod error;
pub mod hashing;
pub mod ids;
pub mod manifest;
pub mod paths;
pub mod pipeline;
pub mod server;

pub use client::{Expect, HubClient, RepoFile, RetryPolicy, UploadFile};
pub use error::{HubError, Result};
pub use manifest::{Encoding, FileEntry, Manifest};
pub use pipeline::{
    MirrorOptions, MirrorPlan, MirrorReport, PlanStatus, PullOptions, PullReport, VerifyEntry,
    VerifyReport, WorkerReport, commit_plan, make_plan, mirror, plan_status, pull, run_worker,
    verify_local, verify_mirror, verify_mirror_against,
};
pub use server::{RunningServer, ServerOptions};
