//! tracefs: where it is mounted, and the id and record layout of a
//! tracepoint (`events/GROUP/EVENT/{id,format}`), which perf needs to open
//! `PERF_TYPE_TRACEPOINT` events and read their raw records. The parsers are
//! pure and tested against fixture text; the readers cost one small file read each.

use std::collections::HashMap;

/// Why a tracepoint could not be looked up.
#[derive(Debug, thiserror::Error)]
pub enum TracepointError {
    /// Neither tracefs nor debugfs is mounted.
    #[error("tracefs is not mounted")]
    NotMounted,
    /// A tracefs file could not be read (missing event, no permission).
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// The `id` file does not hold a number.
    #[error("{path} holds no number")]
    NotANumber {
        /// The file.
        path: String,
    },
}

/// The mount point of tracefs in `/proc/mounts`, else debugfs's `tracing` folder.
pub fn mount_point(mounts: &str) -> Option<String> {
    let mut debugfs = None;
    for line in mounts.lines() {
        let mut fields = line.split_whitespace();
        let (_dev, Some(point), Some(fstype)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        match fstype {
            "tracefs" => return Some(point.to_owned()),
            "debugfs" if debugfs.is_none() => debugfs = Some(format!("{point}/tracing")),
            _ => {}
        }
    }
    debugfs
}

/// Where tracefs is mounted on this machine, from `/proc/mounts`. One file read.
pub fn live_mount_point() -> Option<String> {
    mount_point(&std::fs::read_to_string("/proc/mounts").ok()?)
}

fn read_event_file(
    tracefs: &str,
    group: &str,
    event: &str,
    file: &str,
) -> Result<(String, String), TracepointError> {
    let path = format!("{tracefs}/events/{group}/{event}/{file}");
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok((path, text)),
        Err(source) => Err(TracepointError::Read {
            path,
            error: source,
        }),
    }
}

/// The perf id of tracepoint `group:event` under the tracefs mounted at
/// `tracefs`. One small file read.
pub fn tracepoint_id(tracefs: &str, group: &str, event: &str) -> Result<u64, TracepointError> {
    let (path, text) = read_event_file(tracefs, group, event, "id")?;
    text.trim()
        .parse()
        .map_err(|_| TracepointError::NotANumber { path })
}

/// The field layout of tracepoint `group:event` (its `format` file). One small file read.
pub fn tracepoint_format(
    tracefs: &str,
    group: &str,
    event: &str,
) -> Result<HashMap<String, FieldSpec>, TracepointError> {
    let (_, text) = read_event_file(tracefs, group, event, "format")?;
    Ok(parse_format(&text))
}

/// The perf id of a tracepoint named `group:event` (such as
/// `syscalls:sys_enter_mmap`), read from the live tracefs; the error says
/// what is missing (tracefs not mounted, no permission). Costs a read of
/// `/proc/mounts` and of one small file.
pub fn live_tracepoint_id(name: &str) -> Result<u64, TracepointError> {
    let tracefs = live_mount_point().ok_or(TracepointError::NotMounted)?;
    let (group, event) = name.split_once(':').unwrap_or(("", name));
    tracepoint_id(&tracefs, group, event)
}

/// Where a field sits in a tracepoint record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldSpec {
    /// Byte offset from the start of the record.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
    /// Signed integer.
    pub signed: bool,
}

/// Parses a tracefs `format` file: field name -> position. The name is the
/// last word of the declaration (`unsigned long address` -> `address`).
pub fn parse_format(text: &str) -> HashMap<String, FieldSpec> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(decl) = line.strip_prefix("field:") else {
            continue;
        };
        let mut parts = decl.split(';').map(str::trim);
        let Some(decl) = parts.next() else { continue };
        let mut offset = None;
        let mut size = None;
        let mut signed = false;
        for part in parts {
            if let Some(v) = part.strip_prefix("offset:") {
                offset = v.parse().ok();
            } else if let Some(v) = part.strip_prefix("size:") {
                size = v.parse().ok();
            } else if let Some(v) = part.strip_prefix("signed:") {
                signed = v == "1";
            }
        }
        // `char comm[16]` -> `comm`.
        let name = decl
            .rsplit(' ')
            .next()
            .unwrap_or(decl)
            .split('[')
            .next()
            .unwrap_or("");
        if let (Some(offset), Some(size), false) = (offset, size, name.is_empty()) {
            out.insert(
                name.to_owned(),
                FieldSpec {
                    offset,
                    size,
                    signed,
                },
            );
        }
    }
    out
}

/// Reads an integer field from a raw tracepoint record, sign-extending signed fields.
pub fn raw_field(record: &[u8], spec: FieldSpec) -> Option<u64> {
    let bytes = record.get(spec.offset..spec.offset.checked_add(spec.size)?)?;
    if !matches!(spec.size, 1 | 2 | 4 | 8) {
        return None;
    }
    // The record is in native byte order: widen the field to 64 bits in place.
    let mut word = [0u8; 8];
    let v = if cfg!(target_endian = "little") {
        word[..spec.size].copy_from_slice(bytes);
        u64::from_le_bytes(word)
    } else {
        word[8 - spec.size..].copy_from_slice(bytes);
        u64::from_be_bytes(word)
    };
    // Moves the field's top bit to bit 63 and back, copying it when signed.
    let unused = 64 - 8 * spec.size as u32;
    Some(if spec.signed {
        ((v << unused) as i64 >> unused) as u64
    } else {
        v
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracefs_mount_points() {
        let both = "sysfs /sys sysfs rw 0 0\ndebugfs /sys/kernel/debug debugfs rw 0 0\ntracefs /sys/kernel/tracing tracefs rw 0 0\n";
        assert_eq!(mount_point(both).as_deref(), Some("/sys/kernel/tracing"));
        let debug_only = "debugfs /sys/kernel/debug debugfs rw 0 0\n";
        assert_eq!(
            mount_point(debug_only).as_deref(),
            Some("/sys/kernel/debug/tracing")
        );
        assert_eq!(mount_point("proc /proc proc rw 0 0\nbroken\n"), None);
    }

    #[test]
    fn missing_events_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_str().unwrap();
        let err = tracepoint_id(root, "syscalls", "sys_enter_mmap").unwrap_err();
        let want = format!("cannot read {root}/events/syscalls/sys_enter_mmap/id: ");
        assert!(err.to_string().starts_with(&want), "{err}");
        let event = dir.path().join("events/syscalls/sys_enter_mmap");
        std::fs::create_dir_all(&event).unwrap();
        std::fs::write(event.join("id"), "many\n").unwrap();
        assert!(matches!(
            tracepoint_id(root, "syscalls", "sys_enter_mmap"),
            Err(TracepointError::NotANumber { .. })
        ));
        std::fs::write(event.join("id"), "612\n").unwrap();
        assert_eq!(
            tracepoint_id(root, "syscalls", "sys_enter_mmap").unwrap(),
            612
        );
    }

    const FORMAT: &str = "\
name: page_fault_user
ID: 190
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:unsigned long address;	offset:8;	size:8;	signed:0;
	field:unsigned long ip;	offset:16;	size:8;	signed:0;
	field:unsigned long error_code;	offset:24;	size:8;	signed:0;
	field:char comm[16];	offset:32;	size:16;	signed:0;
	field:long ret;	offset:48;	size:8;	signed:1;

print fmt: \"address=%ps ip=%ps error_code=0x%lx\", (void *)REC->address
";

    #[test]
    fn tracefs_format_fields() {
        let f = parse_format(FORMAT);
        assert_eq!(
            f["error_code"],
            FieldSpec {
                offset: 24,
                size: 8,
                signed: false
            }
        );
        assert_eq!(f["common_pid"].size, 4);
        assert!(f["common_pid"].signed);
        assert_eq!(f["comm"].size, 16);
        assert!(f["ret"].signed);
        let mut record = vec![0u8; 56];
        record[24..32].copy_from_slice(&6u64.to_ne_bytes());
        record[4..8].copy_from_slice(&(-5i32).to_ne_bytes());
        record[48..56].copy_from_slice(&(-12i64).to_ne_bytes());
        assert_eq!(raw_field(&record, f["error_code"]), Some(6));
        assert_eq!(raw_field(&record, f["common_pid"]), Some(-5i64 as u64));
        assert_eq!(raw_field(&record, f["ret"]).map(|v| v as i64), Some(-12));
        assert_eq!(raw_field(&record[..20], f["error_code"]), None);
    }

    #[test]
    fn raw_fields_of_every_width() {
        let spec = |offset, size, signed| FieldSpec {
            offset,
            size,
            signed,
        };
        let mut record = vec![0u8; 16];
        record[0] = 0xfe;
        record[2..4].copy_from_slice(&(-300i16).to_ne_bytes());
        record[4..8].copy_from_slice(&0x8000_0001u32.to_ne_bytes());
        record[8..16].copy_from_slice(&u64::MAX.to_ne_bytes());
        assert_eq!(raw_field(&record, spec(0, 1, false)), Some(0xfe));
        assert_eq!(raw_field(&record, spec(0, 1, true)), Some(-2i64 as u64));
        assert_eq!(raw_field(&record, spec(2, 2, true)), Some(-300i64 as u64));
        assert_eq!(
            raw_field(&record, spec(2, 2, false)),
            Some((-300i16) as u16 as u64)
        );
        assert_eq!(raw_field(&record, spec(4, 4, false)), Some(0x8000_0001));
        assert_eq!(
            raw_field(&record, spec(4, 4, true)),
            Some(0x8000_0001u32 as i32 as i64 as u64)
        );
        assert_eq!(raw_field(&record, spec(8, 8, true)), Some(u64::MAX));
        assert_eq!(raw_field(&record, spec(0, 3, false)), None);
        assert_eq!(raw_field(&record, spec(usize::MAX, 8, false)), None);
    }
}
