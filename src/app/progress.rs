//! Progress bars with indicatif, on standard error and only when it is a terminal: the
//! application's implementation of the library's [`Progress`].

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::util::progress::{Progress, Silent};

/// A bar on a terminal.
struct Bar(indicatif::ProgressBar);

impl Progress for Bar {
    fn start(&self, stage: &str, total: u64) {
        // named and sized before the first frame is drawn (no empty "0/0" frame)
        self.0.set_prefix(stage.to_string());
        self.0.set_length(total);
        self.0.reset();
    }

    fn message(&self, text: &str) {
        self.0.set_message(text.to_string());
    }

    fn advance(&self, n: u64) {
        self.0.inc(n);
    }

    fn finish(&self) {
        self.0.finish_and_clear();
    }
}

/// `--quiet`, for the process (set once by [`super::run`]).
static QUIET: AtomicBool = AtomicBool::new(false);

pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// A progress bar on standard error when it is a terminal (and `--quiet` is not given), nothing
/// otherwise.
pub fn progress() -> Box<dyn Progress> {
    if QUIET.load(Ordering::Relaxed) || !std::io::stderr().is_terminal() {
        return Box::new(Silent);
    }
    let bar = indicatif::ProgressBar::hidden();
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {wide_msg}")
            .expect("the template is valid")
            .progress_chars("=> "),
    );
    Box::new(Bar(bar))
}

/// A line on standard error where a progress bar would be drawn (a terminal, no `--quiet`).
pub fn note(line: &str) {
    if !QUIET.load(Ordering::Relaxed) && std::io::stderr().is_terminal() {
        eprintln!("{line}");
    }
}
