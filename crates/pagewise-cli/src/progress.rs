//! Progress on stderr for long-running work: a bar on a terminal, one line per
//! step otherwise (CI logs), nothing with `--quiet`.

use crate::output::errln;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

/// A [`pagewise_bench::Progress`] that draws on stderr.
// Used by the bench experiments that are being written on another branch.
pub struct StderrProgress {
    bar: Option<ProgressBar>,
    quiet: bool,
}

impl StderrProgress {
    /// A progress display; `quiet` silences it.
    pub fn new(quiet: bool) -> Self {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len} {msg}")
                    .expect("static template")
                    .progress_chars("=> "),
            );
            // The elapsed time keeps moving during a long step (one run of a
            // user's program may take minutes), so a stuck run is visible.
            bar.enable_steady_tick(std::time::Duration::from_millis(500));
            bar
        });
        StderrProgress { bar, quiet }
    }
}

impl pagewise_bench::Progress for StderrProgress {
    fn update(&self, done: usize, total: usize, what: &str) {
        match &self.bar {
            Some(bar) => {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
                bar.set_message(what.to_owned());
            }
            None if !self.quiet => errln!("[{done}/{total}] {what}"),
            None => {}
        }
    }
}

impl Drop for StderrProgress {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
