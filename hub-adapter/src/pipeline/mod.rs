//! The mirror, pull and verify pipelines.
//!
//! [`mirror`] and [`pull`] are each a short sequence of phases;
//! [`verify_mirror`] downloads and checks. The work folder, the naming
//! plan, the source check and the per-file restore live in their own files.

use crate::error::{HubError, Result};

mod archive;
mod at_once;
mod download;
mod mirror;
mod options;
mod plan;
mod pull;
mod report;
mod restore;
mod scale;
mod source_check;
mod verify;
mod work;

pub use at_once::each_file;
pub use mirror::mirror;
pub use options::{MirrorOptions, Notes, PullOptions};
pub use pull::pull;
pub use report::{MirrorReport, PullReport, VerifyEntry, VerifyReport, human};
pub use scale::{
    MirrorPlan, PLAN_VERSION, PlanStatus, PlannedFile, PlannedRepo, Unit, UnitState, UnitStatus,
    WORK_BRANCH_PREFIX, WorkerReport, commit_plan, make_plan, plan_status, run_worker,
};
pub use verify::{verify_local, verify_mirror, verify_mirror_against};

fn safe_name(repo: &str) -> String {
    repo.replace('/', "--")
}

fn codec_err_e(file: &str, e: brevis_core::EncodeError) -> HubError {
    HubError::Encode {
        file: file.into(),
        source: Box::new(e),
    }
}

fn codec_err_d(file: &str, e: brevis_core::DecodeError) -> HubError {
    HubError::Decode {
        file: file.into(),
        source: Box::new(e),
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| HubError::io("<worker>", std::io::Error::other(e.to_string())))?
}

/// The error for `--include` / `--exclude` filters that leave no file of
/// `repo`, naming the patterns.
fn nothing_selected(repo: &str, include: &[String], exclude: &[String]) -> HubError {
    let list = |flag: &str, globs: &[String]| {
        globs
            .iter()
            .map(|g| format!("{flag} {g:?}"))
            .collect::<Vec<_>>()
    };
    let mut filters = list("--include", include);
    filters.extend(list("--exclude", exclude));
    let reason = if filters.is_empty() {
        "no file selected".to_string()
    } else {
        format!("no file matches {}", filters.join(" "))
    };
    HubError::invalid("selection", repo, reason)
}
