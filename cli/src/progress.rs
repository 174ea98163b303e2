//! Progress bars (indicatif, stderr, off when stderr is not a terminal).

use std::io::IsTerminal;
use std::sync::Mutex;

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

    /// A sink for the core library drawing one bar per unit of work.
    pub fn sink(&self) -> BarSink {
        BarSink {
            multi: self.multi.clone(),
            bars: self.bars,
            bar: Mutex::new(None),
        }
    }
}

/// Core progress events drawn as indicatif bars.
pub struct BarSink {
    multi: MultiProgress,
    bars: bool,
    bar: Mutex<Option<ProgressBar>>,
}

impl ProgressSink for BarSink {
    fn start(&self, label: &str, total: u64) {
        if !self.bars {
            return;
        }
        let pb = self.multi.add(ProgressBar::new(total));
        pb.set_style(
            ProgressStyle::with_template(
                "{msg:30!} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        pb.set_message(label.to_string());
        if let Ok(mut b) = self.bar.lock() {
            *b = Some(pb);
        }
    }
    fn advance(&self, bytes: u64) {
        if let Ok(b) = self.bar.lock()
            && let Some(pb) = b.as_ref()
        {
            pb.inc(bytes);
        }
    }
    fn finish(&self) {
        if let Ok(mut b) = self.bar.lock()
            && let Some(pb) = b.take()
        {
            pb.finish_and_clear();
        }
    }
}
