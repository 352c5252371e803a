//! Output that cannot panic: [`outln!`] writes a line to stdout and
//! return the error (`println!` panics when stdout is full, closed or gone);
//! [`errln!`] writes to stderr and drops the error, since there is nowhere
//! left to report it.
//!
//! A failed write to stdout travels up as an [`OutputError`] inside the
//! command's `anyhow::Error`; `main` turns it into the exit status with
//! [`exit_status`]: a closed pipe (`pagewise doctor | head -n1`) ends quietly
//! with status 141, what a shell reports for a program that `SIGPIPE` ended
//! (Rust programs ignore `SIGPIPE`, so pagewise sees `EPIPE` instead); any
//! other error (`ENOSPC` on `/dev/full`, `EIO`) is one line on stderr,
//! `pagewise: cannot write output: …`, and status 1.

use std::io::Write;
use std::process::ExitCode;

/// Writing to stdout failed.
#[derive(Debug)]
pub struct OutputError(pub std::io::Error);

impl std::fmt::Display for OutputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot write output: {}", self.0)
    }
}

// The message holds the cause: no separate source(), so a one-line chain says it once.
impl std::error::Error for OutputError {}

/// The status of a command whose output could not be written: 128 + SIGPIPE.
pub const BROKEN_PIPE_STATUS: u8 = 141;

/// Writes formatted text to stdout (no newline added; [`outln!`] adds one). Cost: one `write` per
/// line at most (stdout is line-buffered).
pub fn write_out(args: std::fmt::Arguments<'_>) -> Result<(), OutputError> {
    std::io::stdout()
        .lock()
        .write_fmt(args)
        .map_err(OutputError)
}

/// Flushes stdout; `main` calls it once before exiting, so that a write
/// error in the last buffered bytes is reported too.
pub fn flush_out() -> Result<(), OutputError> {
    std::io::stdout().lock().flush().map_err(OutputError)
}

/// Writes formatted text to stderr, ignoring a failure (a progress line or
/// an error message has nowhere else to go).
pub fn write_err(args: std::fmt::Arguments<'_>) {
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// The exit status for a command that failed to write its output, after
/// saying why on stderr (except for a closed pipe, which is not news to
/// whoever closed it).
pub fn exit_status(err: &OutputError) -> ExitCode {
    if err.0.kind() == std::io::ErrorKind::BrokenPipe {
        return ExitCode::from(BROKEN_PIPE_STATUS);
    }
    write_err(format_args!("pagewise: {err}\n"));
    ExitCode::FAILURE
}

/// Creates (or truncates) `path` for a command's output file (`-o`,
/// `--flame`) before the command does its work, so that a path that cannot
/// be written is one error at once; the message names the path. One `open`
/// and one `fstat` ([`user_files::create_output`]).
///
/// [`user_files::create_output`]: pagewise::host::user_files::create_output
pub fn open_output(path: &std::path::Path) -> anyhow::Result<std::fs::File> {
    pagewise::host::user_files::create_output(path)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}

/// `println!` to stdout, returning `Result<(), OutputError>` instead of panicking.
macro_rules! outln {
    () => {
        $crate::output::write_out(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprintln!` that never panics: a failed write to stderr is dropped.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::write_err(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {errln, outln};
