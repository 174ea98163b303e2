//! Progress bars (indicatif, stderr, off when stderr is not a terminal).

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::Path;
use std::sync::{Arc, Mutex};

use brevis_core::FileProgress;
use brevis_core::ProgressSink;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How the command talks to the user.
pub struct Ui {
    /// Print nothing but errors and data.
    pub quiet: bool,
    bars: bool,
    multi: MultiProgress,
}

impl Ui {
    pub fn new(quiet: bool, no_progress: bool) -> Ui {
        let bars = !quiet
            && !no_progress
            && std::io::stderr().is_terminal()
            && std::env::var_os("NO_COLOR").is_none();
        let multi = MultiProgress::with_draw_target(if bars {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        });
        Ui { quiet, bars, multi }
    }

    /// Whether bars are drawn.
    #[allow(dead_code)]
    pub fn bars(&self) -> bool {
        self.bars
    }

    /// A status line on stderr (not when quiet), printed above any bars.
    pub fn note(&self, msg: impl AsRef<str>) {
        if !self.quiet {
            let _ = self.multi.println(msg.as_ref());
            if !self.bars {
                eprintln!("{}", msg.as_ref());
            }
        }
    }

    /// A sink for the library's progress: a bar for the unit of work or
    /// the run's total, and one below it for each file of the run in flight.
    pub fn sink(&self) -> BarSink {
        BarSink {
            multi: self.multi.clone(),
            bars: self.bars,
            bar: Mutex::new(None),
            files: Mutex::new(HashMap::new()),
        }
    }
}

/// A local run over files done one after another (compress, decompress):
/// with several, a total bar and one for the file at work; one file is a
/// unit of its own (one bar). The run ends when this is dropped.
pub struct Run {
    sink: Arc<dyn ProgressSink>,
    several: bool,
}

impl Ui {
    /// The run `label` over `paths` (their sizes are its total).
    pub fn run<'p>(&self, label: &str, paths: impl ExactSizeIterator<Item = &'p Path>) -> Run {
        let sink: Arc<dyn ProgressSink> = Arc::new(self.sink());
        let several = paths.len() > 1;
        if several {
            let files = paths.len();
            let bytes = paths
                .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
                .sum();
            sink.begin(label, files, bytes);
        }
        Run { sink, several }
    }
}

impl Run {
    /// The sink for the file `p` of the run.
    pub fn file(&self, p: &Path) -> Arc<dyn ProgressSink> {
        if self.several {
            FileProgress::arc(&self.sink, p.display().to_string())
        } else {
            self.sink.clone()
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if self.several {
            self.sink.end();
        }
    }
}

/// Core progress events drawn as indicatif bars.
pub struct BarSink {
    multi: MultiProgress,
    bars: bool,
    /// The unit's bar, or the run's total.
    bar: Mutex<Option<ProgressBar>>,
    /// The bar of each file of the run in flight, by name.
    files: Mutex<HashMap<String, ProgressBar>>,
}

/// What a bar shows: its label, then bytes, rate and time left.
const BAR_TEMPLATE: &str = "{msg:30!} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}";

impl BarSink {
    /// A bar of `total` bytes labelled `label`, below those drawn.
    fn bar(&self, label: &str, total: u64) -> ProgressBar {
        let pb = self.multi.add(ProgressBar::new(total));
        pb.set_style(
            ProgressStyle::with_template(BAR_TEMPLATE)
                .expect("valid template")
                .progress_chars("=> "),
        );
        pb.set_message(label.to_string());
        pb
    }

    /// `f` on the unit's (or the run's) bar, if one is drawn.
    fn with_bar(&self, f: impl FnOnce(&ProgressBar)) {
        if let Ok(b) = self.bar.lock()
            && let Some(pb) = b.as_ref()
        {
            f(pb);
        }
    }
}

impl ProgressSink for BarSink {
    fn start(&self, label: &str, total: u64) {
        if !self.bars {
            return;
        }
        let pb = self.bar(label, total);
        if let Ok(mut b) = self.bar.lock()
            && let Some(old) = b.replace(pb)
        {
            old.finish_and_clear();
        }
    }
    fn advance(&self, bytes: u64) {
        self.with_bar(|pb| pb.inc(bytes));
    }
    fn finish(&self) {
        if let Ok(mut b) = self.bar.lock()
            && let Some(pb) = b.take()
        {
            pb.finish_and_clear();
        }
    }

    fn begin(&self, label: &str, files: usize, bytes: u64) {
        self.start(&format!("{label} ({files} files)"), bytes);
    }
    fn file_start(&self, name: &str, bytes: u64) {
        if !self.bars {
            return;
        }
        let pb = self.bar(name, bytes);
        if let Ok(mut m) = self.files.lock()
            && let Some(old) = m.insert(name.to_string(), pb)
        {
            old.finish_and_clear();
        }
    }
    fn file_advance(&self, name: &str, bytes: u64) {
        if !self.bars {
            return;
        }
        if let Ok(m) = self.files.lock()
            && let Some(pb) = m.get(name)
        {
            pb.inc(bytes);
        }
        self.advance(bytes);
    }
    fn file_done(&self, name: &str) {
        if let Ok(mut m) = self.files.lock()
            && let Some(pb) = m.remove(name)
        {
            pb.finish_and_clear();
        }
    }
    fn end(&self) {
        if let Ok(mut m) = self.files.lock() {
            for (_, pb) in m.drain() {
                pb.finish_and_clear();
            }
        }
        self.finish();
    }
}
