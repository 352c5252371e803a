//! `pagewise queue inspect|tail|append`: look at, follow and feed a queue file.

use crate::format::{bytes, table};
use anyhow::Context;
use pagewise::queue::{self, Options, PreTouch, Reader, ReaderOptions, Start, Wait, Writer};
use std::io::{BufRead, Write};
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
    /// Chunk size of a new queue (a power of two, 64KiB to 1GiB).
    #[arg(long, default_value = "64MiB", value_parser = crate::format::parse_size_arg)]
    chunk_size: u64,
    /// Give every record of a new queue a CRC-32.
    #[arg(long)]
    crc: bool,
    /// Run the background pre-toucher (worth it for long, fast feeds).
    #[arg(long)]
    pretouch: bool,
    /// Do not flush (msync) before exiting.
    #[arg(long)]
    no_flush: bool,
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
        println!("{}", serde_json::to_string_pretty(&info)?);
        return Ok(status);
    }
    let pos = |p: Option<queue::Position>| p.map_or_else(|| "-".to_owned(), |p| p.to_string());
    let mut t = table(&["field", "value"]);
    let rows: Vec<(&str, String)> = vec![
        ("path", info.path.clone()),
        ("format version", info.version.to_string()),
        ("chunk size", bytes(info.chunk_size)),
        ("largest record", format!("{} bytes", info.max_payload)),
        (
            "record CRC",
            if info.record_crc {
                "yes".into()
            } else {
                "no".into()
            },
        ),
        ("file system", info.fs.clone()),
        ("file size", bytes(info.file_size)),
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
                "none, and none can start: another process holds a read lock on byte 0 (find it with lslocks)".to_owned()
            } else {
                format!(
                    "none (last: pid {}, {} opens)",
                    info.last_writer_pid, info.writer_opens
                )
            },
        ),
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
    println!("{t}");
    if let Some(p) = &info.problem {
        println!("problem: {p}");
    }
    Ok(status)
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
pub fn unescape(line: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        let b = line[i];
        i += 1;
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let Some(&e) = line.get(i) else {
            return Err("a lone backslash at the end of the line".into());
        };
        i += 1;
        match e {
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'\\' => out.push(b'\\'),
            b'x' => {
                let hex = line
                    .get(i..i + 2)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or("\\x must be followed by two hex digits")?;
                out.push(hex);
                i += 2;
            }
            b'u' => {
                let rest = &line[i..];
                let close = rest
                    .iter()
                    .position(|&c| c == b'}')
                    .filter(|_| rest.first() == Some(&b'{'))
                    .ok_or("\\u must be followed by {hex}")?;
                let c = std::str::from_utf8(&rest[1..close])
                    .ok()
                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                    .and_then(char::from_u32)
                    .ok_or("\\u{…} must hold a Unicode scalar value in hex")?;
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                i += close + 1;
            }
            other => {
                return Err(format!(
                    "\\{} is not an escape `pagewise queue tail` writes",
                    char::from(other).escape_default()
                ))
            }
        }
    }
    Ok(out)
}

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
                if let Err(e) = out.flush() {
                    return quiet_on_broken_pipe(e);
                }
            }
            reader.next_wait(Wait::Block { spins: 100 }, None)?
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
        if let Err(e) = out.write_all(&line) {
            return quiet_on_broken_pipe(e);
        }
    }
    if let Err(e) = out.flush() {
        return quiet_on_broken_pipe(e);
    }
    Ok(ExitCode::SUCCESS)
}

fn quiet_on_broken_pipe(e: std::io::Error) -> anyhow::Result<ExitCode> {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(e).context("writing to stdout")
    }
}

fn append(args: &AppendArgs) -> anyhow::Result<ExitCode> {
    let options = Options {
        chunk_size: args.chunk_size,
        record_crc: args.crc,
        pretouch: args.pretouch.then(PreTouch::default),
        ..Options::default()
    };
    let mut writer = Writer::open_or_create(&args.path, options)?;
    let mut count = 0u64;
    let mut positions = None;
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = input
            .read_until(b'\n', &mut line)
            .context("reading stdin")?;
        if n == 0 {
            break;
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        let p = if args.raw {
            writer.append(&line)?
        } else {
            let payload = unescape(&line).map_err(|e| {
                anyhow::anyhow!(
                    "line {}: {e}; {count} records were appended before it (use --raw to append lines as they are)",
                    count + 1
                )
            });
            let payload = match payload {
                Ok(p) => p,
                Err(e) => {
                    if !args.no_flush {
                        writer.flush()?;
                    }
                    return Err(e);
                }
            };
            writer.append(&payload)?
        };
        positions = Some((positions.map_or(p, |(first, _)| first), p));
        count += 1;
    }
    if !args.no_flush {
        writer.flush()?;
    }
    match positions {
        Some((first, last)) => eprintln!("appended {count} records, positions {first} to {last}"),
        None => eprintln!("appended 0 records"),
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::{escape, unescape};

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
    }
}
