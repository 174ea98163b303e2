//! Hub commands: mirror, pull, serve (and verify of a mirror).

use anyhow::Result;
use clap::Args;

use crate::Outcome;
use crate::progress::Ui;

/// Download a Hub model repo, compress it, and upload a compressed mirror.
#[derive(Args, Debug)]
pub struct MirrorArgs {
    /// Source repo, `org/model`.
    pub src: String,
}

/// Download a mirror and restore the originals into the HF cache.
#[derive(Args, Debug)]
pub struct PullArgs {
    /// Mirror repo, `owner/model-brevis`.
    pub repo: String,
}

/// Serve a local store with the Hub's HTTP protocol.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Store root.
    #[arg(long)]
    pub root: std::path::PathBuf,
}

pub fn mirror(_a: MirrorArgs, _ui: &Ui) -> Result<Outcome> {
    anyhow::bail!("mirror: not implemented yet")
}

pub fn pull(_a: PullArgs, _ui: &Ui) -> Result<Outcome> {
    anyhow::bail!("pull: not implemented yet")
}

pub fn serve(_a: ServeArgs, _ui: &Ui) -> Result<Outcome> {
    anyhow::bail!("serve: not implemented yet")
}

/// Verify a mirror: a local folder holding `brevis.manifest.json`, or a
/// remote mirror repo id. Returns Ok(Mismatch) when any file differs.
pub fn verify_mirror(_target: &str, _json: bool, _ui: &Ui) -> Result<Outcome> {
    anyhow::bail!("verify of a mirror: not implemented yet")
}
