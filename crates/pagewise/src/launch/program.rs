//! Finding a program on PATH and telling how it is linked, from its ELF headers.

use crate::host::user_files;
use crate::sys::Errno;
use object::elf;
use object::elf::{FileHeader64, ProgramHeader64};
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};
use object::{Endianness, ReadRef};
use serde::Serialize;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// How a program is linked, as far as pagewise cares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Linkage {
    /// Dynamically linked against glibc (an `ld-linux` interpreter).
    Glibc {
        /// The program interpreter (`PT_INTERP`).
        interpreter: String,
    },
    /// Dynamically linked against musl.
    Musl {
        /// The program interpreter.
        interpreter: String,
    },
    /// No program interpreter: statically linked, and not against glibc (Go,
    /// musl, a libc pagewise does not recognise).
    Static,
    /// No program interpreter, statically linked against glibc (static or
    /// static-pie, as `gcc -static` makes it, or `ldconfig`): it reads
    /// `GLIBC_TUNABLES` itself, but no `LD_PRELOAD`.
    StaticGlibc {
        /// Whether its glibc knows `glibc.malloc.hugetlb` (2.35 or later).
        malloc_hugetlb: bool,
    },
    /// Dynamically linked, but neither glibc nor musl was recognised.
    Other {
        /// The program interpreter.
        interpreter: String,
    },
}

/// Why a program cannot be launched as asked.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// Not found on PATH or at the given path.
    #[error("{0}: command not found")]
    NotFound(String),
    /// Found, but not executable (or not a regular file).
    #[error("{}: cannot execute: {error}", path.display())]
    NotExecutable {
        /// The file.
        path: PathBuf,
        /// Why (`EACCES`).
        error: std::io::Error,
    },
    /// Could not be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// Not an ELF file pagewise understands.
    #[error("{path} is not a 64-bit ELF program ({reason})")]
    NotElf {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// The program does not use glibc's dynamic loader, so the fix cannot apply.
    #[error("{path} is {what}: {fix} would change nothing; {remedy}")]
    NotGlibc {
        /// The file.
        path: PathBuf,
        /// `statically linked`, `linked against musl`…
        what: String,
        /// The fix and how it works, e.g. "--keep-heap works through glibc's malloc tunables and".
        fix: &'static str,
        /// What to do instead.
        remedy: &'static str,
    },
    /// The program would run in secure mode, where the fix cannot apply.
    #[error("{path} runs in secure mode ({why}): {consequence}")]
    SecureMode {
        /// The file.
        path: PathBuf,
        /// What puts it in secure mode.
        why: SecureMode,
        /// What that does to the fix, e.g. "the loader ignores LD_PRELOAD
        /// there, so --huge-text cannot apply".
        consequence: String,
    },
}

impl LaunchError {
    /// The exit status a shell gives when a program cannot start this way:
    /// 127 when it (or its `#!` interpreter) is not found, 126 when it is
    /// found but cannot be executed (no execute permission, not a program),
    /// 1 when it would run but the fix cannot apply to it (another C library,
    /// secure mode).
    pub fn exit_code(&self) -> u8 {
        match self {
            LaunchError::NotFound(_) => 127,
            LaunchError::Read { error, .. } if error.kind() == std::io::ErrorKind::NotFound => 127,
            LaunchError::NotExecutable { .. }
            | LaunchError::Read { .. }
            | LaunchError::NotElf { .. } => 126,
            LaunchError::NotGlibc { .. } | LaunchError::SecureMode { .. } => 1,
        }
    }
}

/// Finds `program` the way a shell does: as given when it holds a `/` (it
/// must exist), else the first executable regular file of that name in the
/// `PATH` folders (an empty entry is the current folder). A file of that name
/// that is not executable, and no executable one, gives
/// [`LaunchError::NotExecutable`]; nothing at all gives [`LaunchError::NotFound`].
/// The one PATH lookup of pagewise (`run`, `stat`, `text profile`). Costs a
/// `stat` per `PATH` folder.
pub fn resolve_program(program: &OsStr) -> Result<PathBuf, LaunchError> {
    let not_found = || LaunchError::NotFound(program.to_string_lossy().into_owned());
    if program.is_empty() {
        return Err(not_found());
    }
    if program.as_bytes().contains(&b'/') {
        let path = PathBuf::from(program);
        return match path.metadata() {
            Ok(m) if m.is_file() => Ok(path),
            Ok(_) => Err(not_executable(path)),
            Err(_) => Err(not_found()),
        };
    }
    let path_var =
        std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut found_unexecutable = None;
    for dir in std::env::split_paths(&path_var) {
        let candidate = if dir.as_os_str().is_empty() {
            PathBuf::from(".").join(program)
        } else {
            dir.join(program)
        };
        match candidate.metadata() {
            Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => return Ok(candidate),
            Ok(m) if m.is_file() => {
                found_unexecutable.get_or_insert(candidate);
            }
            _ => {}
        }
    }
    Err(found_unexecutable.map_or_else(not_found, not_executable))
}

/// [`LaunchError::NotExecutable`] with `EACCES`, what `exec` gives.
fn not_executable(path: PathBuf) -> LaunchError {
    LaunchError::NotExecutable {
        path,
        error: Errno::ACCES.io_error(),
    }
}

/// The shell that runs a script without a `#!` line, as `execvp` and POSIX
/// shells do.
pub const SCRIPT_SHELL: &str = "/bin/sh";

/// ELF's magic number, the first four bytes of every ELF file.
const ELF_MAGIC: &[u8] = b"\x7fELF";

/// Whether a file that starts with `head` (its first bytes: four or more,
/// or all of a shorter file) is a script without a `#!` line: it starts with
/// neither `#!` nor ELF's magic number, so `exec` refuses it with `ENOEXEC`
/// (unless a binfmt_misc handler claims its format), and `execvp` and POSIX
/// shells then run it with [`SCRIPT_SHELL`]. Free.
fn is_script_without_interpreter(head: &[u8]) -> bool {
    !head.starts_with(b"#!") && !head.starts_with(ELF_MAGIC)
}

/// The shell that runs the program file at `path` when it is a script
/// without a `#!` line ([`SCRIPT_SHELL`]), else `None`: the file runs
/// itself (so does one without an execute permission bit, or that cannot
/// be read, and `exec` says why). One `stat` ([`require_executable`]), then
/// a read of the first four bytes of a regular file; never blocks on a FIFO.
pub fn script_shell(path: &Path) -> Option<&'static Path> {
    use std::io::Read;
    require_executable(path).ok()?;
    let mut head = Vec::with_capacity(ELF_MAGIC.len());
    let file = user_files::open_input(path).ok()?;
    file.take(ELF_MAGIC.len() as u64)
        .read_to_end(&mut head)
        .ok()?;
    is_script_without_interpreter(&head).then_some(Path::new(SCRIPT_SHELL))
}

/// The command line that runs `argv` (a program, found at `path`, and its
/// arguments) as `execvp` and POSIX shells run it: the file to execute and
/// the whole argument list, `argv[0]` included. That is `path` with `argv`,
/// or for a script without a `#!` line ([`script_shell`]) `/bin/sh` with
/// `/bin/sh PATH ARGS…`. The one place where `run`, `stat` and `bench run`
/// decide it. Costs what [`script_shell`] costs.
pub fn command_line(path: &Path, argv: &[OsString]) -> (PathBuf, Vec<OsString>) {
    match script_shell(path) {
        Some(shell) => {
            let line = [shell.as_os_str(), path.as_os_str()]
                .into_iter()
                .map(OsString::from)
                .chain(argv.iter().skip(1).cloned())
                .collect();
            (shell.to_owned(), line)
        }
        None => (path.to_owned(), argv.to_vec()),
    }
}

/// Refuses `path` unless it is a regular file with an execute permission
/// bit (for someone), before pagewise reads it to see how it is linked: a
/// data file is then "cannot execute", the status-126 error `exec` would
/// give, not "not an ELF program". One `stat`.
pub fn require_executable(path: &Path) -> Result<(), LaunchError> {
    match path.metadata() {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Ok(()),
        Ok(_) => Err(not_executable(path.to_owned())),
        Err(error) => Err(LaunchError::Read {
            path: path.to_owned(),
            error,
        }),
    }
}

/// Reads `path` (following a `#!` line to its interpreter, and `env NAME` to
/// NAME on PATH; a script without a `#!` line to [`SCRIPT_SHELL`], which
/// runs it) and tells how the program that will really run is linked.
/// Returns the file inspected and its linkage. Reads only the start of the
/// file (a `#!` line, the ELF and program headers, the interpreter's name),
/// never all of it: a 99 MB `node` costs a few KiB, not 99 MB of memory.
pub fn inspect_program(path: &Path) -> Result<(PathBuf, Linkage), LaunchError> {
    let read_error = |error| LaunchError::Read {
        path: path.to_owned(),
        error,
    };
    // A regular file only: a FIFO is refused at once, never waited on.
    let file = user_files::open_input(path).map_err(read_error)?;
    let size = file.metadata().map_err(read_error)?.len();
    let data = object::ReadCache::new(file);
    // The kernel reads at most 256 bytes of a `#!` line.
    let head = data.read_bytes_at(0, size.min(256)).unwrap_or_default();
    if let Some(rest) = head.strip_prefix(b"#!") {
        let line = rest.split(|&b| b == b'\n').next().unwrap_or_default();
        let line = String::from_utf8_lossy(line);
        let mut words = line.split_whitespace();
        let interpreter = words.next().ok_or_else(|| LaunchError::NotElf {
            path: path.to_owned(),
            reason: "empty #! line".into(),
        })?;
        let target = if Path::new(interpreter)
            .file_name()
            .is_some_and(|n| n == "env")
        {
            let name = words
                .find(|w| !w.starts_with('-'))
                .ok_or_else(|| LaunchError::NotElf {
                    path: path.to_owned(),
                    reason: "#!env without a program".into(),
                })?;
            resolve_program(OsStr::new(name))?
        } else {
            PathBuf::from(interpreter)
        };
        if target == path {
            return Err(LaunchError::NotElf {
                path: path.to_owned(),
                reason: "#! line names itself".into(),
            });
        }
        return inspect_program(&target);
    }
    if is_script_without_interpreter(head) {
        return inspect_program(Path::new(SCRIPT_SHELL));
    }
    let linkage = linkage_of(&data).map_err(|reason| LaunchError::NotElf {
        path: path.to_owned(),
        reason,
    })?;
    Ok((path.to_owned(), linkage))
}

/// The program that will really run (following a `#!` line), if it is a
/// dynamically linked glibc program (one that takes `LD_PRELOAD`);
/// otherwise [`LaunchError::NotGlibc`] naming `fix` and `remedy`.
pub fn require_glibc(
    path: &Path,
    fix: &'static str,
    remedy: &'static str,
) -> Result<PathBuf, LaunchError> {
    let found = require(path, fix, remedy, |l| matches!(l, Linkage::Glibc { .. }))?;
    Ok(found.0)
}

/// The program that will really run (following a `#!` line) and how it is
/// linked, if glibc's tunables apply to it: dynamically or statically
/// linked against glibc (`GLIBC_TUNABLES` is read by glibc's start-up code
/// in both); otherwise [`LaunchError::NotGlibc`] naming `fix` and `remedy`.
pub fn require_glibc_tunables(
    path: &Path,
    fix: &'static str,
    remedy: &'static str,
) -> Result<(PathBuf, Linkage), LaunchError> {
    require(path, fix, remedy, |l| {
        matches!(l, Linkage::Glibc { .. } | Linkage::StaticGlibc { .. })
    })
}

/// [`inspect_program`], refused with [`LaunchError::NotGlibc`] unless its
/// linkage is `accepted`.
fn require(
    path: &Path,
    fix: &'static str,
    remedy: &'static str,
    accepted: impl Fn(&Linkage) -> bool,
) -> Result<(PathBuf, Linkage), LaunchError> {
    let (inspected, linkage) = inspect_program(path)?;
    if accepted(&linkage) {
        return Ok((inspected, linkage));
    }
    let what = match linkage {
        Linkage::Glibc { interpreter } => format!("dynamically linked ({interpreter})"),
        Linkage::Musl { .. } => "linked against musl".to_owned(),
        Linkage::Static => "statically linked, not against glibc".to_owned(),
        Linkage::StaticGlibc { .. } => "statically linked (against glibc)".to_owned(),
        Linkage::Other { interpreter } => format!("linked with an unknown loader ({interpreter})"),
    };
    Err(LaunchError::NotGlibc {
        path: inspected,
        what,
        fix,
        remedy,
    })
}

/// What makes the kernel run a program in secure mode (`AT_SECURE`), where
/// the dynamic loader ignores `LD_PRELOAD` (but for libraries in the system
/// directories) and glibc ignores `GLIBC_TUNABLES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecureMode {
    /// Set-user-ID, owned by another user than the one running it.
    SetUid {
        /// The file's owner.
        owner: u32,
        /// The real user id of the one running it.
        real: u32,
    },
    /// Set-group-ID (and group-executable), of another group than the real one.
    SetGid {
        /// The file's group.
        group: u32,
        /// The real group id of the one running it.
        real: u32,
    },
    /// The file carries capabilities and the one running it is not root.
    Capabilities,
    /// The one running it runs set-user-ID or set-group-ID itself (its
    /// effective ids are not its real ones): every program it starts is.
    OwnIds,
}

impl std::fmt::Display for SecureMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecureMode::SetUid { owner, real } => {
                write!(
                    f,
                    "set-user-ID, owned by uid {owner}, and you are uid {real}"
                )
            }
            SecureMode::SetGid { group, real } => {
                write!(f, "set-group-ID, group gid {group}, and your gid is {real}")
            }
            SecureMode::Capabilities => {
                write!(
                    f,
                    "file capabilities in security.capability, and you are not root"
                )
            }
            SecureMode::OwnIds => write!(
                f,
                "pagewise itself runs with effective ids other than its real ones"
            ),
        }
    }
}

/// What [`secure_mode_of`] decides from: the program file and who runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecFacts {
    /// The file's mode bits (`st_mode`).
    pub mode: u32,
    /// Its owner.
    pub uid: u32,
    /// Its group.
    pub gid: u32,
    /// Whether it carries file capabilities.
    pub capabilities: bool,
    /// Whether its file system is mounted `nosuid`.
    pub nosuid: bool,
    /// Whether the one running it has `no_new_privs` set (set-ID bits are
    /// then ignored).
    pub no_new_privs: bool,
    /// Whether the one running it has effective ids other than its real ones.
    pub ids_differ: bool,
    /// The real user id of the one who runs it.
    pub real_uid: u32,
    /// Their real group id.
    pub real_gid: u32,
}

/// Whether `exec` of a file runs it in secure mode, as the kernel decides
/// (`cap_bprm_creds_from_file`): set-user-ID when its owner is not the real
/// user, set-group-ID (with the group execute bit; without it the bit means
/// mandatory locking) when its group is not the real group, or file
/// capabilities for anyone but root. On a `nosuid` mount none of these
/// count, and with `no_new_privs` the set-ID bits do not. Root running a
/// set-user-ID-root program is not in secure mode. A caller whose own
/// effective ids are not its real ones starts everything in secure mode.
/// Free.
pub fn secure_mode_of(f: &ExecFacts) -> Option<SecureMode> {
    if f.ids_differ {
        return Some(SecureMode::OwnIds);
    }
    if f.nosuid {
        return None;
    }
    let set_ids_count = !f.no_new_privs;
    if set_ids_count && f.mode & 0o4000 != 0 && f.uid != f.real_uid {
        return Some(SecureMode::SetUid {
            owner: f.uid,
            real: f.real_uid,
        });
    }
    if set_ids_count && f.mode & 0o2010 == 0o2010 && f.gid != f.real_gid {
        return Some(SecureMode::SetGid {
            group: f.gid,
            real: f.real_gid,
        });
    }
    (f.capabilities && f.real_uid != 0).then_some(SecureMode::Capabilities)
}

/// Refuses the program file at `path` (the one that really runs: a
/// script's interpreter) when this process would start it in secure mode
/// ([`secure_mode_of`]), where `consequence` says what that does to the fix.
/// A `stat`, a `getxattr` (not for root) and, for a file that would run in
/// secure mode, a `statvfs`.
pub fn require_not_secure(path: &Path, consequence: &str) -> Result<(), LaunchError> {
    let read_error = |error| LaunchError::Read {
        path: path.to_owned(),
        error,
    };
    let meta = path.metadata().map_err(read_error)?;
    let (real_uid, real_gid) = crate::sys::create::real_ids();
    let sys_error = |e: crate::sys::SysError| read_error(e.source);
    let facts = ExecFacts {
        mode: meta.mode(),
        uid: meta.uid(),
        gid: meta.gid(),
        capabilities: real_uid != 0
            && crate::sys::file::has_file_capabilities(path).map_err(sys_error)?,
        nosuid: false,
        // Unknown counts as unset: the stricter answer.
        no_new_privs: crate::sys::prctl::no_new_privs().unwrap_or(false),
        ids_differ: crate::sys::create::ids_differ(),
        real_uid,
        real_gid,
    };
    let Some(why) = secure_mode_of(&facts) else {
        return Ok(());
    };
    // Only now: most programs have no set-ID bit and no capabilities.
    if crate::sys::file::is_nosuid_mount(path).map_err(sys_error)? {
        return Ok(());
    }
    Err(LaunchError::SecureMode {
        path: path.to_owned(),
        why,
        consequence: consequence.to_owned(),
    })
}

/// Tells how an ELF image is linked from its program interpreter
/// (`PT_INTERP`): `ld-linux*` is glibc's, `ld-musl*` musl's, none is static,
/// against glibc when [`static_glibc`] recognises it. Works over a file
/// (through a read cache) or bytes, and reads only the ELF header, the
/// program headers and the interpreter's name; for a static program also
/// its notes and, when one is glibc's ABI tag, what [`static_glibc`] reads.
pub fn linkage_of<'data, R: ReadRef<'data>>(data: R) -> Result<Linkage, String> {
    let header = FileHeader64::<Endianness>::parse(data).map_err(|e| e.to_string())?;
    let endian = header.endian().map_err(|e| e.to_string())?;
    let segments = header
        .program_headers(endian, data)
        .map_err(|e| e.to_string())?;
    let mut interpreter = None;
    for segment in segments {
        if segment.p_type(endian) == elf::PT_INTERP {
            let bytes = segment
                .data(endian, data)
                .map_err(|_| "bad PT_INTERP".to_owned())?;
            let text = bytes.split(|&b| b == 0).next().unwrap_or_default();
            interpreter = Some(String::from_utf8_lossy(text).into_owned());
        }
    }
    Ok(match interpreter {
        None => static_glibc(header, endian, data, segments).unwrap_or(Linkage::Static),
        Some(i) if i.contains("ld-musl") => Linkage::Musl { interpreter: i },
        Some(i) if i.contains("ld-linux") => Linkage::Glibc { interpreter: i },
        Some(i) => Linkage::Other { interpreter: i },
    })
}

/// The string glibc's tunables code looks for in the environment: in a
/// static program only when glibc's start-up code, which reads
/// `GLIBC_TUNABLES`, is linked in.
const TUNABLES_MARK: &[u8] = b"GLIBC_TUNABLES\0";

/// The name of the tunable `--thp-heap` sets, in glibc's list of tunables.
const HUGETLB_MARK: &[u8] = b"glibc.malloc.hugetlb";

/// The largest section (or, without section headers, segment) that
/// [`static_glibc`] reads: glibc's strings are in small ones.
const MARK_SCAN_LIMIT: u64 = 64 << 20;

/// Whether a static program (`segments`, no `PT_INTERP`) is linked against
/// glibc, and what its glibc knows; `None` when it is not recognised as such.
/// It must carry glibc's ABI tag (an `NT_GNU_ABI_TAG` note, from glibc's
/// `crt1.o`: Go and musl programs have none) and glibc's tunables code
/// ([`TUNABLES_MARK`] in `.rodata` or `.data.rel.ro`, where glibc keeps its
/// strings and its list of tunables; without section headers, in the
/// loaded segments). Reads the notes, and only for a program with the tag
/// the section headers and those two sections (about 130 KiB for a small
/// `gcc -static` program); a section over [`MARK_SCAN_LIMIT`] is not read.
fn static_glibc<'data, R: ReadRef<'data>>(
    header: &FileHeader64<Endianness>,
    endian: Endianness,
    data: R,
    segments: &[ProgramHeader64<Endianness>],
) -> Option<Linkage> {
    let abi_tag = segments.iter().any(|segment| {
        let Ok(Some(mut notes)) = segment.notes(endian, data) else {
            return false;
        };
        while let Ok(Some(note)) = notes.next() {
            if note.name() == b"GNU" && note.n_type(endian) == elf::NT_GNU_ABI_TAG {
                return true;
            }
        }
        false
    });
    if !abi_tag {
        return None;
    }
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    if let Ok(sections) = header.sections(endian, data) {
        for name in [&b".rodata"[..], b".data.rel.ro"] {
            if let Some(range) = sections
                .section_by_name(endian, name)
                .and_then(|(_, section)| section.file_range(endian))
            {
                ranges.push(range);
            }
        }
    }
    if ranges.is_empty() {
        ranges = segments
            .iter()
            .filter(|s| s.p_type(endian) == elf::PT_LOAD)
            .map(|s| s.file_range(endian))
            .collect();
    }
    let contents: Vec<&[u8]> = ranges
        .into_iter()
        .filter(|&(_, size)| size <= MARK_SCAN_LIMIT)
        .filter_map(|(offset, size)| data.read_bytes_at(offset, size).ok())
        .collect();
    let holds = |mark: &[u8]| {
        contents
            .iter()
            .any(|c| c.windows(mark.len()).any(|w| w == mark))
    };
    holds(TUNABLES_MARK).then(|| Linkage::StaticGlibc {
        malloc_hugetlb: holds(HUGETLB_MARK),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_binary_is_glibc() {
        let exe = std::env::current_exe().unwrap();
        let (_, linkage) = inspect_program(&exe).unwrap();
        assert!(matches!(linkage, Linkage::Glibc { .. }), "{linkage:?}");
    }

    /// Secure mode as the kernel decides it: root running a set-user-ID-root
    /// program is not in it (it was refused for --huge-text), a set-ID
    /// file of another user or group is, and so is a file with
    /// capabilities for anyone but root.
    #[test]
    fn secure_mode_follows_the_kernels_rule() {
        let facts = |mode: u32, uid, gid, real_uid, real_gid| ExecFacts {
            mode: 0o100000 | mode,
            uid,
            gid,
            capabilities: false,
            nosuid: false,
            no_new_privs: false,
            ids_differ: false,
            real_uid,
            real_gid,
        };
        assert_eq!(secure_mode_of(&facts(0o755, 0, 0, 1000, 1000)), None);
        // Set-user-ID.
        assert_eq!(secure_mode_of(&facts(0o4755, 0, 0, 0, 0)), None);
        assert_eq!(secure_mode_of(&facts(0o4755, 1000, 1000, 1000, 1000)), None);
        let uid = SecureMode::SetUid {
            owner: 0,
            real: 1000,
        };
        assert_eq!(secure_mode_of(&facts(0o4755, 0, 0, 1000, 1000)), Some(uid));
        let as_root = secure_mode_of(&facts(0o4755, 65534, 0, 0, 0)).unwrap();
        assert_eq!(
            as_root.to_string(),
            "set-user-ID, owned by uid 65534, and you are uid 0"
        );
        // Set-group-ID counts only with the group execute bit.
        assert_eq!(secure_mode_of(&facts(0o2755, 0, 0, 0, 0)), None);
        let gid = SecureMode::SetGid { group: 5, real: 0 };
        assert_eq!(secure_mode_of(&facts(0o2755, 0, 5, 0, 0)), Some(gid));
        assert_eq!(secure_mode_of(&facts(0o2745, 0, 5, 0, 0)), None);
        // Capabilities: not for root.
        let caps = |real_uid| ExecFacts {
            capabilities: true,
            ..facts(0o755, 0, 0, real_uid, 0)
        };
        assert_eq!(secure_mode_of(&caps(0)), None);
        assert_eq!(secure_mode_of(&caps(1000)), Some(SecureMode::Capabilities));
        // A nosuid mount ignores all of it.
        let nosuid = ExecFacts {
            nosuid: true,
            ..facts(0o6755, 0, 5, 1000, 1000)
        };
        assert_eq!(secure_mode_of(&nosuid), None);
        // no_new_privs: exec ignores the set-ID bits, not the capabilities.
        let nnp = |f: ExecFacts| ExecFacts {
            no_new_privs: true,
            ..f
        };
        assert_eq!(secure_mode_of(&nnp(facts(0o6755, 0, 5, 1000, 1000))), None);
        assert_eq!(
            secure_mode_of(&nnp(caps(1000))),
            Some(SecureMode::Capabilities)
        );
        // A caller running set-ID itself starts everything in secure mode.
        let own = ExecFacts {
            ids_differ: true,
            ..facts(0o755, 0, 0, 0, 0)
        };
        assert_eq!(secure_mode_of(&own), Some(SecureMode::OwnIds));
    }

    /// Static programs linked against glibc (static and static-pie) are
    /// told apart from other static programs (here one without a C
    /// library): glibc's own copy in them reads GLIBC_TUNABLES.
    #[test]
    fn static_glibc_programs_are_recognised() {
        let dir = tempfile::tempdir().unwrap();
        for flags in [&["-static"][..], &["-static-pie"]] {
            if let Err(why) = pagewise_testkit::compiler_supports(dir.path(), flags) {
                pagewise_testkit::skip_part!(flags[0], pagewise_testkit::Need::Compiler, "{why}");
                continue;
            }
            let source = "#include <stdlib.h>\nint main(void) { free(malloc(1)); return 0; }\n";
            let bin = pagewise_testkit::compile_c(dir.path(), "s", source, flags).unwrap();
            let (_, linkage) = inspect_program(&bin).unwrap();
            // Every glibc this test runs with is 2.35 or later.
            let expected = Linkage::StaticGlibc {
                malloc_hugetlb: crate::launch::thp_heap::check(
                    crate::sys::libc_info::glibc_version().as_deref(),
                    Some("always"),
                )
                .is_ok(),
            };
            assert_eq!(linkage, expected, "{flags:?}");
            // Stripped of its section headers' help (no .rodata by name): the
            // segments are read instead.
            let mut bytes = std::fs::read(&bin).unwrap();
            bytes[0x3c..0x3e].copy_from_slice(&0u16.to_le_bytes()); // e_shnum
            bytes[0x28..0x30].copy_from_slice(&0u64.to_le_bytes()); // e_shoff
            assert_eq!(linkage_of(&bytes[..]).unwrap(), expected, "{flags:?}");
        }
        // Static, and not against glibc: no ABI tag, no tunables.
        let flags = ["-static", "-nostdlib", "-nostartfiles"];
        let source =
            "void _start(void) { __asm__ volatile(\"mov $60, %eax; xor %edi, %edi; syscall\"); }\n";
        match pagewise_testkit::compiler_supports(dir.path(), &flags) {
            Ok(()) => {
                let bin = pagewise_testkit::compile_c(dir.path(), "bare", source, &flags).unwrap();
                assert_eq!(inspect_program(&bin).unwrap().1, Linkage::Static);
            }
            Err(why) => {
                pagewise_testkit::skip_part!("bare", pagewise_testkit::Need::Compiler, "{why}")
            }
        }
        // Debian's ldconfig is static-pie glibc; Ubuntu's is a shell script
        // around ldconfig.real, which is.
        let ldconfig = ["/usr/sbin/ldconfig.real", "/usr/sbin/ldconfig"]
            .into_iter()
            .map(Path::new)
            .find(|p| std::fs::read(p).is_ok_and(|b| b.starts_with(b"\x7fELF")));
        if let Some(path) = ldconfig {
            let (_, ldconfig) = inspect_program(path).unwrap();
            assert!(
                matches!(ldconfig, Linkage::StaticGlibc { .. }),
                "{ldconfig:?}"
            );
        }
    }

    #[test]
    fn path_lookup_finds_sh() {
        let sh = resolve_program(OsStr::new("sh")).unwrap();
        assert!(sh.is_absolute());
        assert!(matches!(
            resolve_program(OsStr::new("no-such-program-pagewise")),
            Err(LaunchError::NotFound(_))
        ));
        assert!(matches!(
            resolve_program(OsStr::new("")),
            Err(LaunchError::NotFound(_))
        ));
        assert_eq!(resolve_program(sh.as_os_str()).unwrap(), sh);
    }

    #[test]
    fn paths_are_taken_as_given() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            resolve_program(dir.path().as_os_str()),
            Err(LaunchError::NotExecutable { .. })
        ));
        let missing = dir.path().join("missing");
        assert!(matches!(
            resolve_program(missing.as_os_str()),
            Err(LaunchError::NotFound(_))
        ));
        // A file given by path is found even when not executable: exec says why.
        let data = dir.path().join("data.txt");
        std::fs::write(&data, "text").unwrap();
        assert_eq!(resolve_program(data.as_os_str()).unwrap(), data);
    }

    #[test]
    fn garbage_is_not_elf() {
        assert!(linkage_of(&b"hello world"[..]).is_err());
        assert!(linkage_of(&[0x7f, b'E', b'L', b'F', 2, 1, 1][..]).is_err());
        assert!(linkage_of(&[][..]).is_err());
    }

    proptest::proptest! {
        #[test]
        fn corrupted_elf_never_panics(flips in proptest::collection::vec((0usize..4096, proptest::num::u8::ANY), 1..16)) {
            static HEAD: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
            let mut data = HEAD
                .get_or_init(|| {
                    use std::io::Read;
                    let mut head = Vec::new();
                    let file = std::fs::File::open(std::env::current_exe().unwrap()).unwrap();
                    file.take(64 << 10).read_to_end(&mut head).unwrap();
                    head
                })
                .clone();
            for (at, value) in flips {
                data[at] = value;
            }
            let _ = linkage_of(&data[..]);
        }

        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = linkage_of(&data[..]);
        }
    }

    #[test]
    fn scripts_without_a_shebang_line_run_with_the_shell() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("s");
        std::fs::write(&script, "echo hi\n").unwrap();
        let mode = |m| std::fs::set_permissions(&script, std::fs::Permissions::from_mode(m));
        mode(0o755).unwrap();
        let (target, linkage) = inspect_program(&script).unwrap();
        assert_eq!(target, Path::new(SCRIPT_SHELL));
        assert!(matches!(linkage, Linkage::Glibc { .. }), "{linkage:?}");
        let argv = ["s".into(), "a".into(), "b".into()];
        let (exe, line) = command_line(&script, &argv);
        assert_eq!(exe, Path::new(SCRIPT_SHELL));
        let sh_line: Vec<OsString> = vec![
            SCRIPT_SHELL.into(),
            script.clone().into(),
            "a".into(),
            "b".into(),
        ];
        assert_eq!(line, sh_line);
        // Programs, `#!` scripts and files that cannot be read run themselves.
        let exe = std::env::current_exe().unwrap();
        assert_eq!(command_line(&exe, &argv), (exe.clone(), argv.to_vec()));
        std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        assert_eq!(script_shell(&script), None);
        assert_eq!(script_shell(&dir.path().join("missing")), None);
        // Without an execute permission bit, exec refuses it (EACCES): no shell.
        std::fs::write(&script, "echo hi\n").unwrap();
        mode(0o644).unwrap();
        assert_eq!(script_shell(&script), None);
        mode(0o755).unwrap();
        assert_eq!(script_shell(dir.path()), None);
        // An empty file is a script (exec refuses it; sh runs nothing).
        std::fs::write(&script, "").unwrap();
        assert_eq!(script_shell(&script), Some(Path::new(SCRIPT_SHELL)));
    }

    #[test]
    fn scripts_follow_their_interpreter() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("s");
        std::fs::write(&script, "#!/usr/bin/env sh\necho hi\n").unwrap();
        let (target, linkage) = inspect_program(&script).unwrap();
        assert!(target.ends_with("sh"), "{target:?}");
        assert!(matches!(linkage, Linkage::Glibc { .. }), "{linkage:?}");
    }
}
