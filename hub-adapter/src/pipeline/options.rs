//! Options of the mirror and pull pipelines.

use std::path::PathBuf;
use std::sync::Arc;

use brevis_core::{NoProgress, ProgressSink};

use crate::client::HubClient;

/// A callback for status lines (the CLI prints them on stderr).
pub type Notes = Arc<dyn Fn(&str) + Send + Sync>;

pub(super) fn quiet_notes() -> Notes {
    Arc::new(|_: &str| {})
}

/// What to mirror and how.
#[derive(Clone)]
#[non_exhaustive]
pub struct MirrorOptions {
    /// Source repo id.
    pub src: String,
    /// Destination repo id; default `<user or source namespace>/<name>-brevis`.
    pub dest: Option<String>,
    /// Source revision.
    pub revision: String,
    /// A prior to use instead of learning one.
    pub prior: Option<PathBuf>,
    /// Create the destination private (`Some(true)`) or public
    /// (`Some(false)`); `None` keeps its namespace's default.
    pub private: Option<bool>,
    /// Only plan: list what would be done.
    pub dry_run: bool,
    /// Only source files matching one of these globs (all when empty).
    pub include: Vec<String>,
    /// Leave out source files matching these globs.
    pub exclude: Vec<String>,
    /// Folder for downloads and archives (kept across interrupted runs).
    pub work_dir: PathBuf,
    /// Keep the work folder after success.
    pub keep_work: bool,
    /// Replace the destination even when it exists and is not a Brevis
    /// mirror, or is the mirror of another source repo or revision (its
    /// files are deleted).
    pub force: bool,
    /// Codec threads (0 = all cores).
    pub threads: usize,
    /// Compression level.
    pub level: brevis_core::Level,
    /// Codec search budget (None = the level's).
    pub budget: Option<u32>,
    /// A plan's work units: compressed files smaller than this are grouped
    /// up to about this many bytes, larger ones are a unit each.
    pub unit_bytes: u64,
    /// Progress events.
    pub progress: Arc<dyn ProgressSink>,
    /// Status lines.
    pub notes: Notes,
}

impl MirrorOptions {
    /// Mirror `src` at `main`, working in `work_dir`.
    pub fn new(src: impl Into<String>, work_dir: impl Into<PathBuf>) -> Self {
        MirrorOptions {
            src: src.into(),
            dest: None,
            revision: "main".into(),
            prior: None,
            private: None,
            dry_run: false,
            include: Vec::new(),
            exclude: Vec::new(),
            work_dir: work_dir.into(),
            keep_work: false,
            force: false,
            threads: 0,
            level: brevis_core::Level::DEFAULT,
            budget: None,
            unit_bytes: 64 << 20,
            progress: Arc::new(NoProgress),
            notes: quiet_notes(),
        }
    }
    /// Set the destination repo.
    pub fn dest(mut self, d: impl Into<String>) -> Self {
        self.dest = Some(d.into());
        self
    }
    /// Set the source revision.
    pub fn revision(mut self, r: impl Into<String>) -> Self {
        self.revision = r.into();
        self
    }
    /// Set the progress sink.
    pub fn progress(mut self, p: Arc<dyn ProgressSink>) -> Self {
        self.progress = p;
        self
    }
    /// Set the status-line callback.
    pub fn notes(mut self, n: Notes) -> Self {
        self.notes = n;
        self
    }
}

/// What to pull and where.
#[derive(Clone)]
#[non_exhaustive]
pub struct PullOptions {
    /// Mirror repo id.
    pub repo: String,
    /// Mirror revision.
    pub revision: String,
    /// HF cache folder (`.../hub`).
    pub cache_dir: PathBuf,
    /// Write a plain folder here instead of the cache.
    pub local_dir: Option<PathBuf>,
    /// Only source files matching one of these globs (all when empty).
    pub include: Vec<String>,
    /// Leave out source files matching these globs.
    pub exclude: Vec<String>,
    /// Folder for downloads in flight.
    pub work_dir: PathBuf,
    /// Codec threads (0 = all cores).
    pub threads: usize,
    /// Progress events.
    pub progress: Arc<dyn ProgressSink>,
    /// Status lines.
    pub notes: Notes,
    /// The endpoint holding the source repo the mirror's manifest is
    /// checked against, and whose revision refs follow (default: the
    /// mirror's endpoint).
    pub source: Option<HubClient>,
    /// File the originals in the HF cache under the source's name even when
    /// the source cannot be read at `source` (private, gone, on another Hub,
    /// or `brevis-hub serve`'s view decoded from the mirror itself), on the
    /// mirror's word: off by default, such a pull is refused
    /// ([`crate::HubError::SourceUnchecked`]) unless it writes a plain folder
    /// (`local_dir`), where nothing is filed under the source's name.
    /// Trusted, an existing ref is still never moved; a missing one is set
    /// where the endpoint says the source's revision is at the commit.
    pub trust_mirror: bool,
}

impl PullOptions {
    /// Pull `repo` at `main` into `cache_dir`.
    pub fn new(
        repo: impl Into<String>,
        cache_dir: impl Into<PathBuf>,
        work_dir: impl Into<PathBuf>,
    ) -> Self {
        PullOptions {
            repo: repo.into(),
            revision: "main".into(),
            cache_dir: cache_dir.into(),
            local_dir: None,
            include: Vec::new(),
            exclude: Vec::new(),
            work_dir: work_dir.into(),
            threads: 0,
            progress: Arc::new(NoProgress),
            notes: quiet_notes(),
            source: None,
            trust_mirror: false,
        }
    }
}
