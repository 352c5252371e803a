//! `pagewise queue inspect|tail|append`: look at, follow and feed a queue file.

use crate::format::{bytes, table};
use crate::output::{errln, outln, OutputError};
use anyhow::Context;
use pagewise::queue::{self, Options, PreTouch, Reader, ReaderOptions, Start, Wait, Writer};
use std::io::{BufRead, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::ExitCode;

/// The queue commands.
#[derive(Debug, clap::Subcommand)]
pub enum QueueCommand {
    /// Geometry, record count and whether a writer is alive (exit status 1
    /// when a damaged record stops the walk).
    Inspect(InspectArgs),
    /// Print records, one per line (or raw).
    Tail(TailArgs),
    /// Append one record per line of stdin.
    Append(AppendArgs),
}

/// Arguments of `pagewise queue inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The queue file.
    path: PathBuf,
    /// Print JSON (schema `pagewise.queue.inspect/1`) instead of a table.
    #[arg(long)]
    json: bool,
}

/// Arguments of `pagewise queue tail`.
#[derive(Debug, clap::Args)]
pub struct TailArgs {
    /// The queue file.
    path: PathBuf,
    /// Keep waiting for new records (blocks on the queue's futex).
    #[arg(long, short)]
    follow: bool,
    /// Start after the newest record (only new records; useful with --follow).
    #[arg(long)]
    from_end: bool,
    /// Write payloads as they are, each followed by a newline, instead of
    /// escaping newlines, backslashes, control characters and invalid UTF-8.
    #[arg(long)]
    raw: bool,
    /// Prefix each line with the record's position and a tab.
    #[arg(long)]
    positions: bool,
}

/// Arguments of `pagewise queue append`.
#[derive(Debug, clap::Args)]
pub struct AppendArgs {
    /// The queue file (created if missing).
    path: PathBuf,
    /// Take each line's bytes as they are (only the newline is removed)
    /// instead of decoding the escapes `pagewise queue tail` writes (`\n`,
    /// `\r`, `\t`, `\\`, `\u{…}`, `\xNN`).
    #[arg(long)]
    raw: bool,
    /// Chunk size of a new queue (a power of two, 64KiB to 1GiB; default
    /// 64MiB). An existing queue with another chunk size is an error.
    #[arg(long, value_parser = chunk_size)]
    chunk_size: Option<u64>,
    /// Give every record of a new queue a CRC-32. An existing queue without
    /// record CRCs is an error.
    #[arg(long)]
    crc: bool,
    /// Pack the records of a new queue to multiples of 8 bytes instead of
    /// padding those of up to 56 payload bytes to end on a multiple of 16,
    /// 32 or 64 (so that a run of them sits one to a cache line). An
    /// existing queue with line-fitting records is an error.
    #[arg(long)]
    packed: bool,
    /// Run the background pre-toucher (worth it for long, fast feeds).
    #[arg(long)]
    pretouch: bool,
    /// Do not flush (msync) before exiting.
    #[arg(long)]
    no_flush: bool,
    /// When a record whose CRC fails has intact records after it, or a
    /// record running past the end of the file holds whole records (the
    /// file was damaged, not torn by a crash or cut short), drop it and
    /// everything after it instead of refusing. What was dropped is printed.
    #[arg(long)]
    discard_damaged: bool,
}

/// `--chunk-size`: a size a new queue can have (a power of two in range),
/// refused as it is parsed.
fn chunk_size(text: &str) -> Result<u64, String> {
    let n = crate::args::size_in(queue::layout::MIN_CHUNK, queue::layout::MAX_CHUNK)(text)?;
    queue::layout::Geometry::check_new(n)?;
    Ok(n)
}

/// Runs a queue command.
pub fn run(command: &QueueCommand) -> anyhow::Result<ExitCode> {
    match command {
        QueueCommand::Inspect(a) => inspect(a),
        QueueCommand::Tail(a) => tail(a),
        QueueCommand::Append(a) => append(a),
    }
}

fn inspect(args: &InspectArgs) -> anyhow::Result<ExitCode> {
    let info = queue::inspect(&args.path)?;
    // A damaged record stops the walk: the report is printed, the exit status says so.
    let status = if info.problem.is_some() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&info)?)?;
        return Ok(status);
    }
    let pos = |p: Option<queue::Position>| p.map_or_else(|| "-".to_owned(), |p| p.to_string());
    let mut t = table(&["field", "value"]);
    let rows: Vec<(&str, String)> = vec![
        ("path", info.path.clone()),
        ("format version", info.version.to_string()),
        ("chunk size", bytes(info.chunk_size_bytes)),
        (
            "record sizes",
            if info.line_fitting_records {
                "line-fitting (up to 64 bytes: 16, 32 or 64)".into()
            } else {
                "packed (multiples of 8)".into()
            },
        ),
        (
            "largest record",
            format!("{} bytes", info.max_payload_bytes),
        ),
        (
            "record CRC",
            if info.record_crc {
                "yes".into()
            } else {
                "no".into()
            },
        ),
        ("file system", info.fs.clone()),
        ("file size", bytes(info.file_size_bytes)),
        ("allocated", bytes(info.allocated_bytes)),
        (
            "chunks",
            format!("{} (first kept: {})", info.chunks, info.first_chunk),
        ),
        ("records", info.records.to_string()),
        ("payload bytes", bytes(info.payload_bytes)),
        (
            "first / last position",
            format!("{} / {}", pos(info.first_position), pos(info.last_position)),
        ),
        ("next position", info.end_position.to_string()),
        (
            "writer",
            if info.writer_alive {
                format!(
                    "alive (holds the lock; last opened by pid {})",
                    info.last_writer_pid
                )
            } else if info.read_locked {
                format!(
                    "none seen (a read lock on byte 0 hides a writer's sign of life, and this user cannot open the lock file; last: pid {})",
                    info.last_writer_pid
                )
            } else {
                format!(
                    "none (last: pid {}, {} opens)",
                    info.last_writer_pid, info.writer_opens
                )
            },
        ),
        ("writer's pre-touch", pretouch_summary(&info)),
        (
            "after the end",
            if info.uncommitted_bytes_after_end {
                "uncommitted bytes (a record being written, or a torn one the next writer discards)"
                    .into()
            } else {
                "clean".into()
            },
        ),
    ];
    for (k, v) in rows {
        t.add_row(vec![k.to_owned(), v]);
    }
    outln!("{t}")?;
    if let Some(p) = &info.problem {
        outln!("problem: {p}")?;
    }
    Ok(status)
}

/// The last writer's pre-toucher in one line: what, the CPUs `Auto` found,
/// the switches it made and since when the current one runs.
fn pretouch_summary(info: &queue::Inspection) -> String {
    let Some(mode) = info.last_writer_pretouch else {
        return "not recorded (an earlier pagewise, or a newer one's mode)".to_owned();
    };
    let mut out = mode.name().to_owned();
    let mut notes = Vec::new();
    if let Some(n) = info.last_writer_usable_cpus {
        notes.push(format!(
            "auto, {n} usable CPU{}",
            if n == 1 { "" } else { "s" }
        ));
    }
    match info.last_writer_pretouch_switches {
        0 => {}
        1 => notes.push("1 switch".to_owned()),
        n => notes.push(format!("{n} switches")),
    }
    // When the writer set this mode (at its open, or its last switch):
    // said of the mode, which reads right for `off` too.
    if let Some(since) = info.last_writer_pretouch_since_unix_ns {
        notes.push(if info.writer_alive {
            format!("set {}", ago(since))
        } else {
            format!("the last writer's, set {}; no writer now", ago(since))
        });
    }
    if !notes.is_empty() {
        out.push_str(&format!(" ({})", notes.join("; ")));
    }
    out
}

/// How long ago `ns` (since the Unix epoch) was: `12.3 s ago`.
fn ago(ns: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    match now.checked_sub(ns) {
        Some(d) => format!("{:.1} s ago", d as f64 / 1e9),
        None => "in the future (the clock moved back)".to_owned(),
    }
}

/// Escapes a payload for one line: `\n`, `\r`, `\t`, `\\`, other control
/// characters as `\u{…}`, invalid UTF-8 bytes as `\xNN`.
pub fn escape(payload: &[u8]) -> String {
    let mut out = String::with_capacity(payload.len());
    for chunk in payload.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Decodes what [`escape`] writes; the error names the offending escape.
/// (`queue append` decodes a piece at a time with [`Unescaper`].)
#[cfg(test)]
pub fn unescape(line: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(line.len());
    let mut decoder = Unescaper::default();
    decoder.feed(line, &mut out)?;
    decoder.finish()?;
    Ok(out)
}

/// The longest escape: `\u{` and six hex digits and `}`.
const LONGEST_ESCAPE: usize = 10;

/// One decoded escape.
enum Decoded {
    Byte(u8),
    Char(char),
}

impl Decoded {
    fn push_to(self, out: &mut Vec<u8>) {
        match self {
            Decoded::Byte(b) => out.push(b),
            Decoded::Char(c) => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
}

/// Decodes the escape at the start of `bytes` (a backslash): the result and
/// the bytes it took; `None` when `bytes` ends before the escape could.
fn escape_at(bytes: &[u8]) -> Result<Option<(Decoded, usize)>, String> {
    let hex = |digits: &[u8]| {
        // Digits only: from_str_radix alone would also take a sign.
        (!digits.is_empty() && digits.iter().all(u8::is_ascii_hexdigit))
            .then(|| std::str::from_utf8(digits).ok())
            .flatten()
            .and_then(|h| u32::from_str_radix(h, 16).ok())
    };
    let Some(&e) = bytes.get(1) else {
        return Ok(None);
    };
    let simple = |b| Ok(Some((Decoded::Byte(b), 2)));
    match e {
        b'n' => simple(b'\n'),
        b'r' => simple(b'\r'),
        b't' => simple(b'\t'),
        b'\\' => simple(b'\\'),
        b'x' => {
            let digits = &bytes[2..bytes.len().min(4)];
            if !digits.iter().all(u8::is_ascii_hexdigit) {
                return Err("\\x must be followed by two hex digits".into());
            }
            if digits.len() < 2 {
                return Ok(None);
            }
            let value = hex(digits).ok_or("\\x must be followed by two hex digits")?;
            Ok(Some((Decoded::Byte(value as u8), 4)))
        }
        b'u' => {
            match bytes.get(2) {
                None => return Ok(None),
                Some(b'{') => {}
                Some(_) => return Err("\\u must be followed by {hex}".into()),
            }
            let rest = &bytes[3..];
            let Some(close) = rest.iter().position(|c| !c.is_ascii_hexdigit()) else {
                return if rest.len() > 6 {
                    Err("\\u{…} must hold 1 to 6 hex digits".into())
                } else {
                    Ok(None)
                };
            };
            if rest[close] != b'}' {
                return Err("\\u must be followed by {hex}".into());
            }
            if !(1..=6).contains(&close) {
                return Err("\\u{…} must hold 1 to 6 hex digits".into());
            }
            let c = hex(&rest[..close])
                .and_then(char::from_u32)
                .ok_or("\\u{…} must hold a Unicode scalar value in hex")?;
            Ok(Some((Decoded::Char(c), 3 + close + 1)))
        }
        other => Err(format!(
            "\\{} is not an escape `pagewise queue tail` writes",
            char::from(other).escape_default()
        )),
    }
}

/// Decodes one line written by [`escape`] a piece at a time, so that a line
/// longer than any record can be refused before it is all in memory. An
/// escape split between pieces is kept (at most 10 bytes) until the next.
#[derive(Debug, Default)]
pub struct Unescaper {
    /// The start of an escape the last piece ended in.
    carry: Vec<u8>,
}

impl Unescaper {
    /// Decodes the next `piece` of the line onto `out`.
    pub fn feed(&mut self, mut piece: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        if !self.carry.is_empty() {
            let had = self.carry.len();
            let take = piece.len().min(LONGEST_ESCAPE - had);
            self.carry.extend_from_slice(&piece[..take]);
            match escape_at(&self.carry)? {
                // Still not complete: the whole piece went into the carry.
                None => return Ok(()),
                Some((decoded, used)) => {
                    decoded.push_to(out);
                    piece = &piece[used - had..];
                    self.carry.clear();
                }
            }
        }
        while let Some(k) = piece.iter().position(|&b| b == b'\\') {
            out.extend_from_slice(&piece[..k]);
            piece = &piece[k..];
            match escape_at(piece)? {
                Some((decoded, used)) => {
                    decoded.push_to(out);
                    piece = &piece[used..];
                }
                None => {
                    self.carry.extend_from_slice(piece);
                    return Ok(());
                }
            }
        }
        out.extend_from_slice(piece);
        Ok(())
    }

    /// Ends the line: an escape cut off by its end is an error.
    pub fn finish(self) -> Result<(), String> {
        match self.carry.get(1) {
            None if self.carry.is_empty() => Ok(()),
            None => Err("a lone backslash at the end of the line".into()),
            Some(b'x') => Err("\\x must be followed by two hex digits".into()),
            Some(_) => Err("\\u must be followed by {hex}".into()),
        }
    }
}

/// How long `tail --follow` waits for a record before it checks whether its
/// output was closed: the longest it lingers after `| head` exits.
const FOLLOW_CHECK: std::time::Duration = std::time::Duration::from_millis(200);

fn tail(args: &TailArgs) -> anyhow::Result<ExitCode> {
    let options = ReaderOptions {
        start: if args.from_end {
            Start::End
        } else {
            Start::Beginning
        },
        ..ReaderOptions::default()
    };
    let mut reader = Reader::open_with(&args.path, options)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    loop {
        let record = if args.follow {
            // Flush what we have before sleeping.
            if !reader.poll()? {
                out.flush().map_err(OutputError)?;
            }
            match reader.next_wait(Wait::Block { spins: 100 }, Some(FOLLOW_CHECK))? {
                Some(record) => Some(record),
                // No record for a while: end quietly if nobody reads our
                // output any more (`tail -f | head -1`), as a write would.
                None if pagewise::os::file::output_closed(std::io::stdout().as_fd()) => {
                    return Err(OutputError(std::io::ErrorKind::BrokenPipe.into()).into());
                }
                None => continue,
            }
        } else {
            reader.next()?
        };
        let Some(record) = record else {
            break;
        };
        let mut line = Vec::with_capacity(record.payload.len() + 24);
        if args.positions {
            line.extend_from_slice(format!("{}\t", record.position).as_bytes());
        }
        if args.raw {
            line.extend_from_slice(record.payload);
        } else {
            line.extend_from_slice(escape(record.payload).as_bytes());
        }
        line.push(b'\n');
        out.write_all(&line).map_err(OutputError)?;
    }
    out.flush().map_err(OutputError)?;
    Ok(ExitCode::SUCCESS)
}

fn append(args: &AppendArgs) -> anyhow::Result<ExitCode> {
    let options = Options {
        chunk_size: args.chunk_size.unwrap_or(queue::layout::DEFAULT_CHUNK),
        record_crc: args.crc,
        packed_records: args.packed,
        pretouch: args.pretouch.then(PreTouch::default),
        discard_damaged: args.discard_damaged,
        ..Options::default()
    };
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    // A new queue is created once its first record is read and fits (or
    // stdin is empty): a first line that is refused leaves nothing behind,
    // neither the queue file nor its lock file. A path that could not be
    // created is said before stdin is read.
    let first = match std::fs::symlink_metadata(&args.path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            pagewise::host::user_files::check_creatable(&args.path)
                .with_context(|| format!("cannot create {}", args.path.display()))?;
            let new = queue::layout::Geometry::new_queue(
                options.chunk_size,
                options.record_crc,
                !options.packed_records,
                0,
            );
            Some(read_record(args, &mut input, new.max_payload(), 0)?)
        }
        _ => None,
    };
    let mut writer = Writer::open_or_create(&args.path, options)?;
    report_recovery(&args.path, writer.recovery());
    check_settings(args, &writer)?;
    let appended = append_lines(args, &mut writer, &mut input, first);
    // What was appended stays, also when a line failed.
    if !args.no_flush {
        writer.flush()?;
    }
    if let Some(e) = writer.report().wake_error {
        errln!("pagewise: warning: waking blocked readers failed ({e}); they see new records within 250 ms");
    }
    match appended? {
        (count, Some((first, last))) => {
            if count == 1 {
                errln!("appended 1 record, at position {first}")
            } else {
                errln!("appended {count} records, positions {first} to {last}")
            }
        }
        (_, None) => errln!("appended 0 records"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Says on stderr what the writer's recovery threw away, if anything: a
/// record whose CRC failed and those after it, a record the file was cut
/// short inside (and, with `--discard-damaged`, the records inside it), or
/// the bytes of a record torn by a crash. Silent when the queue ended
/// cleanly.
fn report_recovery(path: &std::path::Path, r: &queue::Recovery) {
    let why = match (r.crc_failed_at, r.cut_record_at, r.records_after_end_at) {
        (Some(at), _, _) => Some((at, "the record there failed its CRC check")),
        (None, Some(at), _) => Some((
            at,
            "the file ends inside the record there (it was cut short: a truncation, or an interrupted copy; or its length was damaged)",
        )),
        (None, None, Some(_)) => Some((
            r.end,
            "the records ended there with more after them (a length before them was damaged)",
        )),
        (None, None, None) => None,
    };
    if let Some((at, why)) = why {
        let records = match r.discarded_records {
            1 => "1 record".to_owned(),
            n => format!("{n} records"),
        };
        errln!(
            "pagewise: warning: {}: recovery dropped {records} from position {at} on ({} of them intact): {why}; the queue now ends at {}",
            path.display(),
            r.discarded_intact,
            r.end
        );
    } else if r.torn_record_discarded {
        errln!(
            "pagewise: warning: {}: recovery zeroed the bytes of an uncommitted record at position {} (a writer stopped while appending it)",
            path.display(),
            r.end
        );
    }
}

/// Refuses `--chunk-size`, `--crc` and `--packed` when the queue already
/// existed with other settings: they apply only to a new queue, and ignoring
/// them silently would leave the user believing they took effect.
fn check_settings(args: &AppendArgs, writer: &Writer) -> anyhow::Result<()> {
    let g = writer.geometry();
    if args.chunk_size.is_some_and(|c| c != g.chunk_size)
        || (args.crc && !g.record_crc())
        || (args.packed && g.line_fitting())
    {
        anyhow::bail!(
            "{}: already exists with {} chunks, {} record CRCs, {} records; --chunk-size, --crc and --packed apply only to a new queue: leave them out to append to this one",
            args.path.display(),
            bytes(g.chunk_size),
            if g.record_crc() { "with" } else { "without" },
            if g.line_fitting() { "line-fitting" } else { "packed" }
        );
    }
    Ok(())
}

/// Appends one record per line of `input`, after `first` when the caller
/// read the first line already (`Some(None)`: there was none); returns how
/// many and the first and last positions.
fn append_lines(
    args: &AppendArgs,
    writer: &mut Writer,
    input: &mut impl BufRead,
    first: Option<Option<Vec<u8>>>,
) -> anyhow::Result<(u64, Option<(queue::Position, queue::Position)>)> {
    let max = writer.max_payload();
    let mut count = 0u64;
    let mut positions = None;
    let mut next = first;
    loop {
        let payload = match next.take() {
            Some(read) => read,
            None => read_record(args, input, max, count)?,
        };
        let Some(payload) = payload else {
            return Ok((count, positions));
        };
        let p = writer.append(&payload)?;
        positions = Some((positions.map_or(p, |(first, _)| first), p));
        count += 1;
    }
}

/// The next record of `input`: one line, decoded (or, with `--raw`, taken)
/// a piece at a time, and refused as soon as it is longer than `max` bytes,
/// so that memory stays bounded by that size whatever the input; `None` at
/// the end of the input. `count` records were appended before it (for the
/// error).
fn read_record(
    args: &AppendArgs,
    input: &mut impl BufRead,
    max: usize,
    count: u64,
) -> anyhow::Result<Option<Vec<u8>>> {
    let mut payload = Vec::new();
    let mut decoder = Unescaper::default();
    let mut read_any = false;
    let bad_line = |e: String| {
        anyhow::anyhow!(
            "line {}: {e}; {} appended before it (use --raw to append lines as they are)",
            count + 1,
            crate::format::count(count, "record was", "records were")
        )
    };
    loop {
        let buf = input.fill_buf().context("reading stdin")?;
        if buf.is_empty() {
            break;
        }
        read_any = true;
        let (piece, used, ends) = match buf.iter().position(|&b| b == b'\n') {
            Some(k) => (&buf[..k], k + 1, true),
            None => (buf, buf.len(), false),
        };
        if args.raw {
            payload.extend_from_slice(&piece[..piece.len().min(max + 1 - payload.len())]);
        } else {
            decoder.feed(piece, &mut payload).map_err(bad_line)?;
        }
        input.consume(used);
        if payload.len() > max {
            anyhow::bail!(
                "line {} is longer than the largest record this queue takes ({max} bytes; a new queue with a larger --chunk-size takes more); {} appended before it",
                count + 1,
                crate::format::count(count, "record was", "records were")
            );
        }
        if ends {
            break;
        }
    }
    if !read_any {
        return Ok(None);
    }
    decoder.finish().map_err(bad_line)?;
    Ok(Some(payload))
}

#[cfg(test)]
mod tests {
    use super::{escape, unescape, Unescaper};
    use proptest::prelude::*;

    /// Decodes `line` fed in pieces cut at `cuts` (positions, any order).
    fn unescape_in_pieces(line: &[u8], cuts: &[usize]) -> Result<Vec<u8>, String> {
        let mut at: Vec<usize> = cuts.iter().map(|c| c % (line.len() + 1)).collect();
        at.push(0);
        at.push(line.len());
        at.sort_unstable();
        let mut out = Vec::new();
        let mut d = Unescaper::default();
        for w in at.windows(2) {
            d.feed(&line[w[0]..w[1]], &mut out)?;
        }
        d.finish()?;
        Ok(out)
    }

    /// Lines made mostly of escapes and near-escapes, where the decoder's
    /// edge cases are.
    fn escapish() -> impl Strategy<Value = Vec<u8>> {
        let part = prop_oneof![
            Just(b"\\".to_vec()),
            Just(b"\\x".to_vec()),
            Just(b"\\u{".to_vec()),
            Just(b"}".to_vec()),
            Just(b"+".to_vec()),
            Just(b"-".to_vec()),
            "[0-9a-fA-FxuntrgG]{1,3}".prop_map(String::into_bytes),
            any::<u8>().prop_map(|b| vec![b]),
        ];
        prop::collection::vec(part, 0..12).prop_map(|parts| parts.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn escape_then_unescape_gives_the_bytes_back(
            bytes in prop::collection::vec(any::<u8>(), 0..200),
            cuts in prop::collection::vec(any::<usize>(), 0..6),
        ) {
            let line = escape(&bytes);
            prop_assert!(!line.contains('\n'), "one record, one line");
            prop_assert_eq!(unescape(line.as_bytes()).unwrap(), bytes.clone());
            prop_assert_eq!(unescape_in_pieces(line.as_bytes(), &cuts).unwrap(), bytes);
        }

        #[test]
        fn decoding_in_pieces_agrees_with_decoding_the_line(
            line in escapish(),
            cuts in prop::collection::vec(any::<usize>(), 0..6),
        ) {
            let whole = unescape(&line);
            prop_assert_eq!(unescape_in_pieces(&line, &cuts), whole.clone());
            if let Ok(out) = whole {
                prop_assert!(out.len() <= line.len(), "decoding never grows a line");
            }
        }

        #[test]
        fn only_hex_digits_follow_x(a in any::<u8>(), b in any::<u8>()) {
            let line = [b'\\', b'x', a, b];
            let ok = a.is_ascii_hexdigit() && b.is_ascii_hexdigit();
            prop_assert_eq!(unescape(&line).is_ok(), ok, "{:?}", line);
        }

        #[test]
        fn u_takes_one_to_six_hex_digits_of_a_scalar_value(inner in "[0-9a-fA-F+ -]{0,8}") {
            let line = format!("\\u{{{inner}}}");
            let expect = (1..=6).contains(&inner.len())
                && inner.bytes().all(|b| b.is_ascii_hexdigit())
                && u32::from_str_radix(&inner, 16).ok().and_then(char::from_u32).is_some();
            prop_assert_eq!(unescape(line.as_bytes()).is_ok(), expect, "{}", line);
        }
    }

    #[test]
    fn escaping_keeps_one_record_per_line() {
        assert_eq!(escape(b"plain text"), "plain text");
        assert_eq!(escape(b"a\nb\tc\\d\re"), "a\\nb\\tc\\\\d\\re");
        assert_eq!(escape(b"\x00\xff"), "\\u{0}\\xff");
        assert_eq!(escape("h\u{e9}llo".as_bytes()), "h\u{e9}llo");
    }

    #[test]
    fn unescape_inverts_escape() {
        let samples: [&[u8]; 6] = [
            b"",
            b"plain",
            b"a\nb\tc\\d\re",
            b"\x00\x01\x7f\xff\xc3",
            "h\u{e9}llo \u{1f600}".as_bytes(),
            b"\\x41 stays as written",
        ];
        for s in samples {
            assert_eq!(unescape(escape(s).as_bytes()).unwrap(), s);
        }
        for all in 0..=255u8 {
            assert_eq!(
                unescape(escape(&[all, b'z']).as_bytes()).unwrap(),
                [all, b'z']
            );
        }
    }

    #[test]
    fn unescape_names_bad_escapes() {
        assert!(unescape(b"C:\\path").unwrap_err().contains("\\p"));
        assert!(unescape(b"end\\").unwrap_err().contains("lone backslash"));
        assert!(unescape(b"\\xZZ").is_err());
        assert!(unescape(b"\\u{d800}").is_err());
        assert!(unescape(b"\\u{41").is_err());
        // Only hex digits: from_str_radix alone would take a sign.
        assert!(unescape(b"\\x+1").is_err());
        assert!(unescape(b"\\u{+41}").is_err());
        assert!(unescape(b"\\u{}").is_err());
        assert!(unescape(b"\\u{0000041}").is_err());
        assert_eq!(unescape(b"\\u{41}\\x42").unwrap(), b"AB");
    }
}
