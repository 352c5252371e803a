//! tracefs: where it is mounted, and the id and record layout of a
//! tracepoint (`events/GROUP/EVENT/{id,format}`), which perf needs to open
//! `PERF_TYPE_TRACEPOINT` events and read their raw records. The parsers are
//! pure and tested against fixture text; the readers cost one small file read each.
//!
//! [`lookup`] reads several tracepoints at once, and works where tracefs is
//! not mounted (a fresh machine): as root it reads the files through
//! [`crate::sys::tracefs::read_in_private_mount`], a helper process that
//! mounts tracefs in a mount namespace of its own. Nothing is mounted for
//! anyone else, and the result says which way the files were read.

use crate::sys::tracefs::read_in_private_mount;
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
/// `syscalls:sys_enter_mmap`), from the live tracefs or, where it is not
/// mounted, through a private mount ([`lookup`]); the error says what is
/// missing. Costs a read of `/proc/mounts` and of one small file, or a fork.
pub fn live_tracepoint_id(name: &str) -> Result<u64, String> {
    lookup(&[name]).get(name).map(|tp| tp.id)
}

/// Where tracefs is mounted when nobody has mounted it: the mount point the
/// kernel creates for it.
pub const DEFAULT_MOUNT_POINT: &str = "/sys/kernel/tracing";

/// The `perf_event_paranoid` level at which a user other than root may count
/// kernel events: the fault kinds (`exceptions:page_fault_user` fires in the
/// kernel), faults inside system calls and kernel samples. The rest of what
/// `stat` opens is allowed at 2, the usual default: user-mode counters and
/// samples, and the `syscalls` tracepoints of one's own processes.
pub const UNPRIVILEGED_PARANOID: i64 = 1;

/// The command that lets users other than root count kernel events.
pub const KERNEL_EVENTS_FIX: &str = "sysctl kernel.perf_event_paranoid=1";

/// The alternative to [`KERNEL_EVENTS_FIX`] that lowers no limit for other
/// programs.
pub const KERNEL_EVENTS_ALTERNATIVE: &str =
    "or give the pagewise binary CAP_PERFMON: `setcap cap_perfmon+ep PATH`";

/// The group pagewise advises for reading tracefs: one of its own, made for
/// it, whatever user asks (a user's primary group can be a shared one such
/// as `nogroup`, whose every member would get the kernel's traces).
pub const TRACING_GROUP: &str = "tracing";

/// What a user other than root is told to have root do so that they can read
/// tracefs: let [`TRACING_GROUP`] read it ([`group_access_command`]) and add
/// them to that group. Free.
pub const JOIN_TRACING_GROUP: &str =
    "as root, let a group `tracing` of its own read it and add this user to that group \
     (`usermod -aG tracing USER`, then log in again)";

/// The command (for root) that lets the members of [`TRACING_GROUP`] read
/// tracefs: the group made if missing, then a mount with `gid=` and mode
/// 0750 where it is not mounted, a remount where it is (mounted plainly, it
/// is root's alone: mode 0700, files 0440 of group root). The options
/// belong to tracefs's one superblock, so they hold for every mount of it.
/// Builds a string.
pub fn group_access_command(mounted_at: Option<&str>) -> String {
    let make = format!("groupadd -f {TRACING_GROUP} && ");
    let gid = format!("$(getent group {TRACING_GROUP} | cut -d: -f3)");
    match mounted_at {
        Some(point) => format!("{make}mount -o remount,gid={gid},mode=0750 {point}"),
        None => {
            format!("{make}mount -t tracefs -o gid={gid},mode=0750 nodev {DEFAULT_MOUNT_POINT}")
        }
    }
}

/// How tracepoint ids and formats were read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// From tracefs mounted at this path.
    Mounted(String),
    /// tracefs is not mounted here: a helper process mounted it in a mount
    /// namespace of its own and read the files.
    PrivateMount,
}

impl Access {
    /// Short name for reports: `mounted` or `private-mount`.
    pub fn name(&self) -> &'static str {
        match self {
            Access::Mounted(_) => "mounted",
            Access::PrivateMount => "private-mount",
        }
    }

    /// One line for a person.
    pub fn describe(&self) -> String {
        match self {
            Access::Mounted(path) => format!("read from tracefs at {path}"),
            Access::PrivateMount => format!(
                "tracefs is not mounted: read through a private mount of {DEFAULT_MOUNT_POINT} \
                 in a helper process's own mount namespace (nothing was mounted for anyone else)"
            ),
        }
    }
}

/// A tracepoint's perf id and record layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracepoint {
    /// The id for `PERF_TYPE_TRACEPOINT`.
    pub id: u64,
    /// Field positions from the `format` file.
    pub fields: HashMap<String, FieldSpec>,
}

/// Tracepoints looked up together by [`lookup`].
#[derive(Debug, Clone)]
pub struct Tracepoints {
    /// How the files were read; `None` when tracefs could not be read at all.
    pub access: Option<Access>,
    /// Why tracefs could not be read at all, when it could not.
    pub unavailable: Option<String>,
    found: HashMap<String, Result<Tracepoint, String>>,
}

impl Tracepoints {
    /// The tracepoint `group:event`, or why it cannot be used (in words, with what to do).
    pub fn get(&self, name: &str) -> Result<&Tracepoint, String> {
        match self.found.get(name) {
            Some(Ok(tp)) => Ok(tp),
            Some(Err(why)) => Err(why.clone()),
            None => Err(self
                .unavailable
                .clone()
                .unwrap_or_else(|| format!("{name} was not looked up"))),
        }
    }
}

/// Why reading `path` under tracefs (mounted at `point`) failed, in words
/// with what to do.
fn read_error(point: &str, path: &str, source: &std::io::Error) -> String {
    if source.kind() == std::io::ErrorKind::PermissionDenied {
        format!(
            "cannot read {path} ({source}): tracefs is mounted for root alone (mode 0700); \
             {JOIN_TRACING_GROUP}: `{}`",
            group_access_command(Some(point))
        )
    } else {
        format!("cannot read {path}: {source}")
    }
}

/// The id and fields of `group:event` from the texts of its `id` and `format` files.
fn parse_files(
    id_path: &str,
    id: Result<String, String>,
    format: Result<String, String>,
) -> Result<Tracepoint, String> {
    let id = id?.trim().parse().map_err(|_| {
        TracepointError::NotANumber {
            path: id_path.to_owned(),
        }
        .to_string()
    })?;
    Ok(Tracepoint {
        id,
        fields: parse_format(&format?),
    })
}

/// Looks up tracepoints named `group:event`: from the mounted tracefs when
/// there is one, else (root) through a private mount in a helper process.
/// Costs a few small file reads, or one `fork` and mount (about a millisecond).
pub fn lookup(names: &[&str]) -> Tracepoints {
    let split = |name: &'_ str| {
        let (group, event) = name.split_once(':').unwrap_or(("", name));
        (
            format!("events/{group}/{event}/id"),
            format!("events/{group}/{event}/format"),
        )
    };
    if let Some(point) = live_mount_point().filter(|p| std::path::Path::new(p).is_dir()) {
        let read = |rel: &str| {
            let path = format!("{point}/{rel}");
            std::fs::read_to_string(&path).map_err(|e| read_error(&point, &path, &e))
        };
        let found = names
            .iter()
            .map(|name| {
                let (id, format) = split(name);
                let id_path = format!("{point}/{id}");
                let tp = parse_files(&id_path, read(&id), read(&format));
                ((*name).to_owned(), tp)
            })
            .collect();
        return Tracepoints {
            access: Some(Access::Mounted(point)),
            unavailable: None,
            found,
        };
    }
    let not_mounted = |why: String| Tracepoints {
        access: None,
        unavailable: Some(why),
        found: HashMap::new(),
    };
    if !std::path::Path::new(DEFAULT_MOUNT_POINT).is_dir() {
        return not_mounted(format!(
            "tracefs is not mounted and {DEFAULT_MOUNT_POINT} does not exist \
             (a kernel without tracefs?)"
        ));
    }
    let files: Vec<String> = names
        .iter()
        .flat_map(|n| {
            let (id, format) = split(n);
            [id, format]
        })
        .collect();
    let rels: Vec<&str> = files.iter().map(String::as_str).collect();
    let contents = match read_in_private_mount(DEFAULT_MOUNT_POINT, &rels) {
        Ok(c) => c,
        Err(e) => {
            return not_mounted(format!(
                "tracefs is not mounted here, and reading it through a private mount needs \
                 root (CAP_SYS_ADMIN): {}; a plain mount is root's alone (mode 0700): \
                 {JOIN_TRACING_GROUP}: `{}`",
                e.source,
                group_access_command(None)
            ))
        }
    };
    let text = |i: usize| -> Result<String, String> {
        let path = format!("{DEFAULT_MOUNT_POINT}/{}", rels[i]);
        match &contents[i] {
            Ok(bytes) => Ok(String::from_utf8_lossy(bytes).into_owned()),
            Err(errno) => Err(read_error(
                DEFAULT_MOUNT_POINT,
                &path,
                &std::io::Error::from_raw_os_error(*errno),
            )),
        }
    };
    let found = names
        .iter()
        .enumerate()
        .map(|(n, name)| {
            let id_path = format!("{DEFAULT_MOUNT_POINT}/{}", rels[2 * n]);
            let tp = parse_files(&id_path, text(2 * n), text(2 * n + 1));
            ((*name).to_owned(), tp)
        })
        .collect();
    Tracepoints {
        access: Some(Access::PrivateMount),
        unavailable: None,
        found,
    }
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
    fn tracepoint_files_parse_into_id_and_fields() {
        let tp = parse_files("x/id", Ok("190\n".into()), Ok(FORMAT.into())).unwrap();
        assert_eq!(tp.id, 190);
        assert_eq!(tp.fields["error_code"].offset, 24);
        let bad = parse_files("x/id", Ok("many".into()), Ok(FORMAT.into())).unwrap_err();
        assert!(bad.contains("x/id holds no number"), "{bad}");
        let missing = parse_files("x/id", Err("cannot read x/id".into()), Ok(String::new()));
        assert_eq!(missing.unwrap_err(), "cannot read x/id");
        let denied = read_error("/t", "/t/p", &crate::sys::Errno::ACCES.io_error());
        assert!(
            denied.contains("root alone") && denied.contains("mount -o remount,gid="),
            "{denied}"
        );
        assert!(denied.contains(",mode=0750 /t`"), "{denied}");
    }

    #[test]
    fn group_access_mounts_or_remounts_for_the_tracing_group_with_mode_0750() {
        assert_eq!(
            group_access_command(None),
            "groupadd -f tracing && mount -t tracefs -o gid=$(getent group tracing | cut -d: -f3),mode=0750 nodev /sys/kernel/tracing"
        );
        assert_eq!(
            group_access_command(Some("/sys/kernel/debug/tracing")),
            "groupadd -f tracing && mount -o remount,gid=$(getent group tracing | cut -d: -f3),mode=0750 /sys/kernel/debug/tracing"
        );
    }

    #[test]
    fn live_lookup_reads_tracepoints_mounted_or_not() {
        let names = ["exceptions:page_fault_user", "no_such_group:no_such_event"];
        let tps = lookup(&names);
        match &tps.access {
            None => {
                let why = tps.get(names[0]).unwrap_err();
                assert!(why.contains("tracefs is not mounted"), "{why}");
                if pagewise_testkit::is_root() {
                    panic!("root reads tracepoints mounted or not: {why}");
                }
                pagewise_testkit::skip!(pagewise_testkit::Need::Root, "{why}");
            }
            Some(access) => {
                let mounted = live_mount_point().is_some();
                assert_eq!(matches!(access, Access::Mounted(_)), mounted, "{access:?}");
                let tp = match tps.get(names[0]) {
                    Ok(tp) => tp,
                    Err(e) if !pagewise_testkit::is_root() => {
                        pagewise_testkit::skip!(pagewise_testkit::Need::Root, "{e}")
                    }
                    Err(e) => panic!("{e}"),
                };
                assert!(tp.id > 0);
                assert!(tp.fields.contains_key("error_code"), "{:?}", tp.fields);
                let missing = tps.get(names[1]).unwrap_err();
                assert!(missing.contains("no_such_event"), "{missing}");
            }
        }
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
