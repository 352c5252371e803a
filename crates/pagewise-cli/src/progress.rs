//! Progress on stderr for long-running work: a bar on a terminal, one line per
//! step otherwise (CI logs), nothing with `--quiet`; and a spinner for a
//! fixed window that nothing else marks (`stat --pid`), on a terminal only.

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

/// A spinner on stderr with the time so far, while `stat --pid` watches a
/// process for its window and then analyses the samples: that window prints
/// nothing else for seconds. Only on a terminal: a report or JSON that goes
/// to a redirected stderr stays as it was. Cleared when dropped. Drawing
/// costs a redraw every 200 ms on its own thread.
pub struct WindowProgress(Option<ProgressBar>);

impl WindowProgress {
    /// Shows `what` (e.g. "observing process 42 for 10 s") and the elapsed time.
    pub fn new(what: String) -> Self {
        WindowProgress(std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} pagewise: {msg} ({elapsed})")
                    .expect("static template"),
            );
            bar.set_message(what);
            bar.enable_steady_tick(std::time::Duration::from_millis(200));
            bar
        }))
    }
}

impl Drop for WindowProgress {
    fn drop(&mut self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}
