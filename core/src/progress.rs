//! Progress events. The library reports, only the CLI draws bars.
//!
//! Two shapes of work report here. One unit at a time (one file compressed
//! or decoded): [`ProgressSink::start`], [`ProgressSink::advance`],
//! [`ProgressSink::finish`]. A run over several files, some in flight at
//! once (a download of a repo, a pull, compressing a folder):
//! [`ProgressSink::begin`] with the run's total, per-file events keyed by
//! the file's name, then [`ProgressSink::end`]. A file's advances count
//! toward the run's total. Code that handles one file of a run takes a
//! [`FileProgress`]: a sink whose unit events are that file's events.

use std::sync::Arc;

/// Receives progress events from long operations. All methods have
/// defaults, so a sink implements only what it shows; one that implements
/// only the unit events sees a run as one unit (`begin` is `start`, `end`
/// is `finish`, a file's advance is `advance`).
///
/// Events are called from many threads at once and often (every chunk of
/// every file): an implementation keeps them cheap (no allocation per
/// advance).
pub trait ProgressSink: Send + Sync {
    /// A new unit of work of `total` bytes starts (e.g. one file).
    fn start(&self, _label: &str, _total: u64) {}
    /// `bytes` more bytes of the current unit are done.
    fn advance(&self, _bytes: u64) {}
    /// The current unit is finished.
    fn finish(&self) {}

    /// A run over `files` files of `bytes` bytes in all starts: the total.
    fn begin(&self, label: &str, _files: usize, bytes: u64) {
        self.start(label, bytes);
    }
    /// File `name` of the run, of `bytes` bytes, starts.
    fn file_start(&self, _name: &str, _bytes: u64) {}
    /// `bytes` more bytes of file `name` are done (and of the run's total).
    fn file_advance(&self, _name: &str, bytes: u64) {
        self.advance(bytes);
    }
    /// File `name` is done (or given up).
    fn file_done(&self, _name: &str) {}
    /// The run is over.
    fn end(&self) {
        self.finish();
    }
}

/// A sink that ignores every event.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl ProgressSink for NoProgress {}

/// One file of a run as a sink of its own: its unit events (`start`,
/// `advance`, `finish`) are the run's events for file `name`. What the code
/// handling one file (a download, a decode, a compress) is given, so it
/// need not know it is one of several.
pub struct FileProgress {
    run: Arc<dyn ProgressSink>,
    name: String,
}

impl FileProgress {
    /// File `name` of the run that `run` reports.
    pub fn new(run: Arc<dyn ProgressSink>, name: impl Into<String>) -> FileProgress {
        FileProgress {
            run,
            name: name.into(),
        }
    }

    /// [`FileProgress::new`], ready to pass where an `Arc` sink is wanted.
    pub fn arc(run: &Arc<dyn ProgressSink>, name: impl Into<String>) -> Arc<dyn ProgressSink> {
        Arc::new(FileProgress::new(run.clone(), name))
    }
}

impl ProgressSink for FileProgress {
    fn start(&self, _label: &str, total: u64) {
        self.run.file_start(&self.name, total);
    }
    fn advance(&self, bytes: u64) {
        self.run.file_advance(&self.name, bytes);
    }
    fn finish(&self) {
        self.run.file_done(&self.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Every event, in order, as text.
    #[derive(Default)]
    struct Recording(Mutex<Vec<String>>);

    impl Recording {
        fn push(&self, s: String) {
            self.0.lock().unwrap().push(s);
        }
    }

    impl ProgressSink for Recording {
        fn start(&self, label: &str, total: u64) {
            self.push(format!("start {label} {total}"));
        }
        fn advance(&self, bytes: u64) {
            self.push(format!("advance {bytes}"));
        }
        fn finish(&self) {
            self.push("finish".into());
        }
        fn begin(&self, label: &str, files: usize, bytes: u64) {
            self.push(format!("begin {label} {files} {bytes}"));
        }
        fn file_start(&self, name: &str, bytes: u64) {
            self.push(format!("file_start {name} {bytes}"));
        }
        fn file_advance(&self, name: &str, bytes: u64) {
            self.push(format!("file_advance {name} {bytes}"));
        }
        fn file_done(&self, name: &str) {
            self.push(format!("file_done {name}"));
        }
        fn end(&self) {
            self.push("end".into());
        }
    }

    /// A run of two files, each handled by code that knows only one unit.
    fn two_files(run: &Arc<dyn ProgressSink>) {
        run.begin("run", 2, 30);
        for (name, len) in [("a", 10), ("b", 20)] {
            let f = FileProgress::arc(run, name);
            f.start("compress", len);
            f.advance(len / 2);
            f.advance(len - len / 2);
            f.finish();
        }
        run.end();
    }

    #[test]
    fn a_file_s_unit_events_are_the_run_s_events_for_that_file() {
        let rec = Arc::new(Recording::default());
        two_files(&(rec.clone() as Arc<dyn ProgressSink>));
        let got = rec.0.lock().unwrap().clone();
        let want = [
            "begin run 2 30",
            "file_start a 10",
            "file_advance a 5",
            "file_advance a 5",
            "file_done a",
            "file_start b 20",
            "file_advance b 10",
            "file_advance b 10",
            "file_done b",
            "end",
        ];
        assert_eq!(got, want);
    }

    /// A sink of unit events only sees a run as one unit.
    #[test]
    fn a_unit_sink_sees_a_run_as_one_unit() {
        #[derive(Default)]
        struct Units(Recording);
        impl ProgressSink for Units {
            fn start(&self, label: &str, total: u64) {
                self.0.start(label, total);
            }
            fn advance(&self, bytes: u64) {
                self.0.advance(bytes);
            }
            fn finish(&self) {
                self.0.finish();
            }
        }
        let units = Arc::new(Units::default());
        two_files(&(units.clone() as Arc<dyn ProgressSink>));
        let got = units.0.0.lock().unwrap().clone();
        let want = [
            "start run 30",
            "advance 5",
            "advance 5",
            "advance 10",
            "advance 10",
            "finish",
        ];
        assert_eq!(got, want);
    }
}
