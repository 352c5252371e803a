//! Shared output helpers: byte sizes, one-line errors, tables.

use comfy_table::{presets::UTF8_BORDERS_ONLY, ContentArrangement, Table};
use std::io::IsTerminal;
use std::process::ExitCode;

/// Formats a byte count with a binary unit: `2 MiB`, `48 KiB`, `1.5 GiB`
/// (the library's one formatter).
pub use pagewise::units::format_bytes as bytes;

/// An optional value, or a mark that it could not be read.
pub fn or_unread<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "(not readable)".to_owned(), |v| v.to_string())
}

/// A measured value, or `n/a (why)` when it was not measured: a table never
/// shows 0 or a guess for a number that could not be measured.
pub fn measured<T>(value: Option<T>, why: &str, show: impl FnOnce(T) -> String) -> String {
    value.map_or_else(|| format!("n/a ({why})"), show)
}

/// An error chain on one line: `outer: inner: innermost`.
pub fn one_line(err: &anyhow::Error) -> String {
    err.chain()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(": ")
        .replace('\n', " ")
}

/// Prints a clap error: help and version as clap renders them, anything else
/// as one line on stderr with exit status 2.
pub fn usage_error(err: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => match err.print() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => crate::output::exit_status(&crate::output::OutputError(e)),
        },
        _ => {
            let rendered = err.render().to_string();
            crate::output::errln!(
                "pagewise: {} (see 'pagewise --help')",
                first_paragraph(&rendered)
            );
            ExitCode::from(2)
        }
    }
}

/// A usage error clap cannot see (a combination of options it cannot
/// express), printed and numbered like the ones it finds: one line on
/// stderr, exit status 2.
pub fn usage(message: &str) -> ExitCode {
    usage_error(clap::Error::raw(
        clap::error::ErrorKind::ArgumentConflict,
        format!("{message}\n"),
    ))
}

/// The first paragraph of a clap error on one line: clap puts the missing
/// arguments on indented lines after "the following required arguments were
/// not provided:".
fn first_paragraph(rendered: &str) -> String {
    let text = rendered
        .lines()
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ");
    let text = text.trim_start_matches("error: ").trim().to_owned();
    if text.is_empty() {
        "invalid arguments".to_owned()
    } else {
        text
    }
}

/// A borderless table with the given header.
pub fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table
        .load_preset(UTF8_BORDERS_ONLY)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.iter().copied());
    if !std::io::stdout().is_terminal() {
        // Pipes and files get no terminal width; wrap at a readable one.
        table.set_width(140);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unmeasured_value_is_n_a_with_its_reason_never_zero() {
        assert_eq!(measured(Some(0u64), "x", |n| n.to_string()), "0");
        assert_eq!(
            measured(None::<u64>, "not counted", |n| n.to_string()),
            "n/a (not counted)"
        );
        assert_eq!(measured(None, "not read", bytes), "n/a (not read)");
    }

    #[test]
    fn clap_errors_keep_their_continuation_lines() {
        let rendered = "error: the following required arguments were not provided:\n  <CMD>...\n\nUsage: pagewise stat\n";
        assert_eq!(
            first_paragraph(rendered),
            "the following required arguments were not provided: <CMD>..."
        );
        assert_eq!(first_paragraph("\n\n"), "invalid arguments");
    }

    #[test]
    fn error_chain_is_one_line() {
        let err = anyhow::anyhow!("inner\nsecond").context("outer");
        assert_eq!(one_line(&err), "outer: inner second");
    }
}
