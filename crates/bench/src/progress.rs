//! The progress bar: one tick per input sent, the scenario as its message,
//! on stderr so `--json` output on stdout stays clean. Hidden when stderr
//! is not a terminal (CI logs); the per-row lines still go to stderr then.

use std::io::IsTerminal as _;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Cheap to clone: clones share one bar.
#[derive(Debug, Clone)]
pub struct Progress {
    bar: ProgressBar,
    drawn: bool,
}

impl Progress {
    /// A bar for `total` inputs; `show` false keeps it off even on a terminal.
    pub fn new(total: u64, show: bool) -> Progress {
        let drawn = show && std::io::stderr().is_terminal();
        let target = if drawn {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(total), target);
        if let Ok(style) =
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} inputs  {msg}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        Progress { bar, drawn }
    }

    pub fn inc(&self) {
        self.bar.inc(1);
    }

    pub fn message(&self, message: String) {
        if !self.drawn {
            eprintln!("bench: {message}");
        }
        self.bar.set_message(message);
    }

    /// A line above the bar (or on stderr when there is no bar).
    pub fn println(&self, line: String) {
        if self.drawn {
            self.bar.println(line);
        } else {
            eprintln!("{line}");
        }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
