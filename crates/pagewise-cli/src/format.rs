//! Shared output helpers: byte sizes, one-line errors, tables.

use comfy_table::{presets::UTF8_BORDERS_ONLY, ColumnConstraint, ContentArrangement, Table, Width};
use std::io::IsTerminal;
use std::process::ExitCode;

/// Formats a byte count with a binary unit: `2 MiB`, `48 KiB`, `1.5 GiB`
/// (the library's one formatter).
pub use pagewise::units::format_bytes as bytes;

/// `n` and a noun that agrees with it: `1 trial`, `5 trials` (`plural` for
/// every count but 1).
pub fn count(n: impl Into<u64>, singular: &str, plural: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { singular } else { plural })
}

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

/// The exit status of every usage error: clap's, and [`UsageError`]s found
/// after parsing (as `grep`, `diff` and clap itself use it).
pub const USAGE_STATUS: u8 = 2;

/// A command line that parses but asks for what cannot be done: a missing
/// choice, options that contradict each other, a value only the command can
/// check. `main` reports it as clap's own usage errors are reported (one
/// line, [`USAGE_STATUS`]); errors of files, programs and the system stay
/// status 1.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A [`UsageError`] as the `anyhow::Error` commands return.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    UsageError(message.into()).into()
}

/// `anyhow::ensure!` for usage errors: `Err(usage(message()))` unless `ok`.
pub fn usage_unless(ok: bool, message: impl FnOnce() -> String) -> anyhow::Result<()> {
    match ok {
        true => Ok(()),
        false => Err(usage(message())),
    }
}

/// Prints a clap error: help and version as clap renders them; the help that
/// a command without its subcommand (or bare `pagewise`) gets, as clap
/// renders it (on stderr) with [`USAGE_STATUS`]; anything else as one line
/// on stderr with [`USAGE_STATUS`], naming the help of `command`, the
/// (sub)command the error is about ([`subcommand_of`]).
pub fn usage_error(err: clap::Error, command: &str) -> ExitCode {
    use clap::error::ErrorKind;
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => match err.print() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => crate::output::exit_status(&crate::output::OutputError(e)),
        },
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // To stderr: nowhere left to report a failure to write it.
            let _ = err.print();
            ExitCode::from(USAGE_STATUS)
        }
        _ => {
            let rendered = err.render().to_string();
            match command_hint(&err, &rendered) {
                Some(hint) => {
                    crate::output::errln!("pagewise: {}: {hint}", first_paragraph(&rendered))
                }
                None => crate::output::errln!(
                    "pagewise: {} (see '{command} --help')",
                    first_paragraph(&rendered)
                ),
            }
            ExitCode::from(USAGE_STATUS)
        }
    }
}

/// The (sub)command a command line `args` (without the program) is for, as
/// its help names it: `pagewise bench run` for `bench run -n x -- true`,
/// `pagewise` when no subcommand is named. The subcommands are the leading
/// words that name one (aliases as their names). Walks `cmd`'s tree.
pub fn subcommand_of(cmd: &clap::Command, args: &[std::ffi::OsString]) -> String {
    let mut names = vec![cmd.get_name().to_owned()];
    let mut at = cmd;
    for arg in args {
        match arg.to_str().and_then(|a| at.find_subcommand(a)) {
            Some(sub) => {
                names.push(sub.get_name().to_owned());
                at = sub;
            }
            None => break,
        }
    }
    names.join(" ")
}

/// What to do instead, for the two mistakes around a command to run
/// (`stat`, `run`, `bench run`, `text profile`): a command given without the
/// `--` before it, and `stat --seconds` without `--pid`.
fn command_hint(err: &clap::Error, rendered: &str) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    // "Usage: pagewise stat [OPTIONS] [-- <CMD>...]": the subcommand, and
    // whether it runs a command.
    let usage = rendered
        .lines()
        .find_map(|l| l.trim().strip_prefix("Usage: "))?;
    if !usage.contains("-- <CMD>") {
        return None;
    }
    let command: String = usage
        .split_whitespace()
        .take_while(|w| !w.starts_with(['[', '-', '<']))
        .collect::<Vec<_>>()
        .join(" ");
    match err.kind() {
        ErrorKind::UnknownArgument => {
            let Some(ContextValue::String(arg)) = err.get(ContextKind::InvalidArg) else {
                return None;
            };
            (!arg.starts_with('-')).then(|| {
                format!("to run a command, put it after `--`: {command} [OPTIONS] -- {arg} ...")
            })
        }
        ErrorKind::MissingRequiredArgument
            if rendered.contains("--pid <PID>") && rendered.contains("<CMD>") =>
        {
            Some(format!(
                "give the command to run after `--` ({command} -- CMD ...), or --pid PID to \
                 watch a running process (--seconds goes with --pid)"
            ))
        }
        _ => None,
    }
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

/// `text` with its spaces made non-breaking, for a table cell whose words
/// must stay on one line when the table wraps the cell (`44.4 MiB`: a
/// value and its unit). Tables wrap only at plain spaces ([`TextTable`]).
pub fn unbroken(text: &str) -> String {
    text.replace(' ', "\u{a0}")
}

/// A borderless table with the given header.
pub fn table(header: &[&str]) -> TextTable {
    let mut table = Table::new();
    table
        .load_preset(UTF8_BORDERS_ONLY)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.iter().copied());
    if !std::io::stdout().is_terminal() {
        // Pipes and files get no terminal width; wrap at a readable one.
        table.set_width(140);
    }
    TextTable(table)
}

/// Words longer than this may still be broken across lines (a long path),
/// so that one cell cannot make a table far wider than the terminal.
const LONGEST_WHOLE_WORD: usize = 32;

/// A [`Table`] that wraps its cells between words: comfy-table fits columns
/// to the width by breaking words anywhere (`region-backgrou` / `nd`), so
/// each column is given at least the width of its longest word (up to
/// [`LONGEST_WHOLE_WORD`]) when printed. Dereferences to the table.
pub struct TextTable(Table);

impl std::ops::Deref for TextTable {
    type Target = Table;

    fn deref(&self) -> &Table {
        &self.0
    }
}

impl std::ops::DerefMut for TextTable {
    fn deref_mut(&mut self) -> &mut Table {
        &mut self.0
    }
}

impl std::fmt::Display for TextTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut t = self.0.clone();
        for i in 0..t.column_count() {
            let longest = t
                .column_cells_with_header_iter(i)
                .flatten()
                .filter_map(|cell| {
                    // Words as comfy-table wraps them: between plain spaces
                    // only, so a non-breaking space ([`unbroken`]) is inside one.
                    cell.content()
                        .lines()
                        .flat_map(|line| line.split(' '))
                        .map(|w| w.chars().count())
                        .max()
                })
                .max()
                .unwrap_or(0)
                .min(LONGEST_WHOLE_WORD);
            if let Some(column) = t.column_mut(i) {
                // The bound counts the column's padding too.
                let width = longest as u16 + column.padding_width();
                column.set_constraint(ColumnConstraint::LowerBoundary(Width::Fixed(width)));
            }
        }
        write!(f, "{t}")
    }
}

#[cfg(test)]
mod tests {

    /// The hint for a command given without `--`, or `--seconds` without
    /// `--pid`, for each subcommand that runs one; none for other mistakes.
    #[test]
    fn command_mistakes_get_a_hint() {
        let hint = |argv: &[&str]| {
            let err = crate::parse(argv).map(|_| ()).unwrap_err();
            super::command_hint(&err, &err.render().to_string())
        };
        for (sub, shown) in [
            (&["stat"][..], "pagewise stat"),
            (&["run", "--keep-heap"], "pagewise run"),
            (&["bench", "run"], "pagewise bench run"),
            (&["text", "profile"], "pagewise text profile"),
        ] {
            let argv = [&["pagewise"][..], sub, &["python3", "-c", "1"]].concat();
            assert_eq!(
                hint(&argv).as_deref(),
                Some(&*format!(
                    "to run a command, put it after `--`: {shown} [OPTIONS] -- python3 ..."
                ))
            );
        }
        let seconds = hint(&["pagewise", "stat", "--seconds", "3"]).unwrap();
        assert!(seconds.contains("--seconds goes with --pid"), "{seconds}");
        assert_eq!(hint(&["pagewise", "stat", "--bogus", "--", "ls"]), None);
        assert_eq!(hint(&["pagewise", "doctor", "extra"]), None);
    }

    #[test]
    fn a_count_agrees_with_its_noun() {
        assert_eq!(super::count(1u32, "trial", "trials"), "1 trial");
        assert_eq!(super::count(0u32, "trial", "trials"), "0 trials");
        assert_eq!(super::count(5u64, "thread", "threads"), "5 threads");
    }

    use super::*;

    #[test]
    fn a_narrow_table_wraps_between_words_not_inside_them() {
        let mut t = table(&["row", "what"]);
        t.set_width(40);
        t.add_row(vec![
            "region-background",
            "a long explanation that has to wrap onto several lines of the cell",
        ]);
        let text = t.to_string();
        // 40 columns leave the first column 15 characters without the bound.
        assert!(text.contains("region-background"), "{text}");
        // The long cell still wraps, between words.
        assert!(
            text.lines().filter(|l| l.contains('│')).count() > 3,
            "{text}"
        );
    }

    /// A value and its unit joined by [`unbroken`] stay on one line when
    /// the table wraps the cell: the cell breaks between values only.
    #[test]
    fn a_value_and_its_unit_stay_together_when_a_cell_wraps() {
        let cell = format!(
            "{} ({}-{})",
            unbroken("44.4 MiB"),
            unbroken("44.3 MiB"),
            unbroken("44.4 MiB")
        );
        let mut t = table(&["variant", "wall s", "peak RSS", "text moved"]);
        t.set_width(48);
        t.add_row(vec![
            "baseline".to_owned(),
            "0.001 (0.001-0.001)".to_owned(),
            cell,
            unbroken("6 MiB"),
        ]);
        let text = t.to_string();
        assert!(text.contains("(44.3\u{a0}MiB-44.4\u{a0}MiB)"), "{text}");
        assert!(text.contains("44.4\u{a0}MiB "), "{text}");
        for line in text.lines() {
            let starts_with_unit = line
                .split(['│', ' '])
                .any(|w| w.starts_with("MiB") || w.starts_with("B-"));
            assert!(!starts_with_unit, "a unit apart from its value: {text}");
        }
    }

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
