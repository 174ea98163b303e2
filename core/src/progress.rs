//! Progress events. The library reports, only the CLI draws bars.

/// Receives progress events from long operations. All methods have empty
/// defaults, so a sink implements only what it shows.
pub trait ProgressSink: Send + Sync {
    /// A new unit of work of `total` bytes starts (e.g. one file).
    fn start(&self, _label: &str, _total: u64) {}
    /// `bytes` more bytes of the current unit are done.
    fn advance(&self, _bytes: u64) {}
    /// The current unit is finished.
    fn finish(&self) {}
}

/// A sink that ignores every event.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl ProgressSink for NoProgress {}
