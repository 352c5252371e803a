//! Files that back shared mappings: space allocation (`fallocate`), hole
//! punching, file-system type (`fstatfs`), open-file-description locks
//! (`F_OFD_SETLK`/`F_OFD_GETLK`) and change notification (`inotify`).
//!
//! Opening, reading, writing and `stat` go through `std::fs`; this module only
//! wraps what the standard library does not offer.

use super::{SysError, SysResult};
use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn einval(call: &'static str) -> SysError {
    SysError {
        call,
        source: std::io::Error::from_raw_os_error(libc::EINVAL),
    }
}

fn to_off(value: u64, call: &'static str) -> SysResult<libc::off_t> {
    libc::off_t::try_from(value).map_err(|_| einval(call))
}

fn fallocate_raw(
    file: &File,
    mode: libc::c_int,
    offset: u64,
    len: u64,
    call: &'static str,
) -> SysResult<()> {
    if len == 0 {
        return Ok(());
    }
    let offset = to_off(offset, call)?;
    let len = to_off(len, call)?;
    loop {
        // SAFETY: fallocate takes an fd and integers; it does not touch our memory.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), mode, offset, len) };
        if rc == 0 {
            return Ok(());
        }
        let err = SysError::last(call);
        if err.errno() != Some(crate::sys::Errno::INTR) {
            return Err(err);
        }
    }
}

/// Allocates `[offset, offset+len)` of `file` (`fallocate`, mode 0), extending
/// its size when the range ends past it. Afterwards writes through a mapping of
/// that range cannot fail for lack of space: a full file system is reported
/// here as `ENOSPC` (and a file-size limit as `EFBIG`) instead of as a SIGBUS
/// on first touch. On tmpfs this also allocates and zeroes the pages.
/// One system call (retried on `EINTR`).
pub fn allocate(file: &File, offset: u64, len: u64) -> SysResult<()> {
    fallocate_raw(file, 0, offset, len, "fallocate")
}

/// Frees the storage of `[offset, offset+len)` and makes it read as zeros,
/// keeping the file size (`fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)`).
/// Mappings of the range see zeros afterwards; nothing faults. `EOPNOTSUPP`
/// on file systems without hole punching. One system call.
pub fn punch_hole(file: &File, offset: u64, len: u64) -> SysResult<()> {
    fallocate_raw(
        file,
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        offset,
        len,
        "fallocate(FALLOC_FL_PUNCH_HOLE)",
    )
}

/// The kind of file system a file lives on, from `fstatfs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsKind {
    /// tmpfs / shmem (memory only).
    Tmpfs,
    /// ext2/3/4.
    Ext4,
    /// XFS.
    Xfs,
    /// Btrfs.
    Btrfs,
    /// Something else, by its magic number.
    Other(i64),
}

impl FsKind {
    /// A short name: `tmpfs`, `ext4`, `xfs`, `btrfs`, or `fs-0x…`.
    pub fn name(self) -> String {
        match self {
            FsKind::Tmpfs => "tmpfs".into(),
            FsKind::Ext4 => "ext4".into(),
            FsKind::Xfs => "xfs".into(),
            FsKind::Btrfs => "btrfs".into(),
            FsKind::Other(magic) => format!("fs-{magic:#x}"),
        }
    }
}

/// The file system `file` lives on. One `fstatfs` call.
pub fn fs_kind(file: &File) -> SysResult<FsKind> {
    // SAFETY: an all-zero statfs is a valid value of this plain C struct.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `buf` is a valid, writable statfs; the fd is open.
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), &mut buf) };
    if rc != 0 {
        return Err(SysError::last("fstatfs"));
    }
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between targets
    let magic = buf.f_type as i64;
    Ok(match magic {
        0x0102_1994 => FsKind::Tmpfs,
        0xEF53 => FsKind::Ext4,
        0x5846_5342 => FsKind::Xfs,
        0x9123_683E => FsKind::Btrfs,
        other => FsKind::Other(other),
    })
}

/// The kind of an advisory lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// A shared (read) lock: needs the file open for reading.
    Shared,
    /// An exclusive (write) lock: needs the file open for writing.
    Exclusive,
}

const F_OFD_GETLK: libc::c_int = 36;
const F_OFD_SETLK: libc::c_int = 37;

fn ofd_flock(
    kind: libc::c_short,
    start: u64,
    len: u64,
    call: &'static str,
) -> SysResult<libc::flock> {
    // SAFETY: an all-zero flock is a valid value of this plain C struct.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = to_off(start, call)?;
    lock.l_len = to_off(len, call)?;
    // OFD locks require l_pid == 0.
    lock.l_pid = 0;
    Ok(lock)
}

fn raw_kind(kind: LockKind) -> libc::c_short {
    match kind {
        LockKind::Shared => libc::F_RDLCK as libc::c_short,
        LockKind::Exclusive => libc::F_WRLCK as libc::c_short,
    }
}
/// Whether nothing can read what is written to `fd` any more, as far as
/// `poll` tells without writing: the read end of a pipe was closed
/// (`POLLERR`), a Unix socket's peer closed (`POLLHUP`), a terminal hung up
/// (`POLLHUP`). `false` for regular files, `/dev/null`, a TCP socket whose
/// peer only shut down (no `POLLHUP` until a write fails), and when `poll`
/// fails. One `poll` system call that does not wait.
pub fn output_closed(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    super::poll::poll_readable(&[fd], std::time::Duration::ZERO)
        .is_ok_and(|ready| ready.first().is_some_and(|r| r.hung_up))
}

/// Tries to take an open-file-description lock on `[start, start+len)`
/// without waiting (`F_OFD_SETLK`). Returns `Ok(false)` when another open file
/// description holds a conflicting lock. The lock belongs to this open file:
/// it is released when the last descriptor for it closes, including when the
/// process dies, and it conflicts with locks taken through other `open`s of
/// the same file even within one process. One `fcntl` call.
pub fn try_lock(file: &File, start: u64, len: u64, kind: LockKind) -> SysResult<bool> {
    let lock = ofd_flock(raw_kind(kind), start, len, "fcntl(F_OFD_SETLK)")?;
    // SAFETY: `lock` is a valid flock the kernel only reads.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), F_OFD_SETLK, &lock as *const libc::flock) };
    if rc == 0 {
        return Ok(true);
    }
    let err = SysError::last("fcntl(F_OFD_SETLK)");
    match err.errno() {
        Some(crate::sys::Errno::AGAIN) | Some(crate::sys::Errno::ACCES) => Ok(false),
        _ => Err(err),
    }
}

/// The kind of a lock another open file description holds on
/// `[start, start+len)` that conflicts with a lock of `kind`, if any
/// (`F_OFD_GETLK`; process-associated `F_SETLK` locks count too). Does not
/// take or disturb any lock and works on a read-only descriptor. One `fcntl`
/// call.
pub fn conflicting_lock(
    file: &File,
    start: u64,
    len: u64,
    kind: LockKind,
) -> SysResult<Option<LockKind>> {
    let mut lock = ofd_flock(raw_kind(kind), start, len, "fcntl(F_OFD_GETLK)")?;
    // SAFETY: `lock` is a valid, writable flock; the kernel fills it in.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), F_OFD_GETLK, &mut lock as *mut libc::flock) };
    if rc != 0 {
        return Err(SysError::last("fcntl(F_OFD_GETLK)"));
    }
    Ok(match i32::from(lock.l_type) {
        libc::F_UNLCK => None,
        libc::F_RDLCK => Some(LockKind::Shared),
        _ => Some(LockKind::Exclusive),
    })
}

/// A name no other call in this process has produced and that others cannot
/// guess ahead: `PREFIX.` and 16 hex digits from a randomly keyed hash of the
/// pid, the time and a counter.
fn unique_name(prefix: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    format!("{prefix}.{:016x}", h.finish())
}

/// Creates a new directory `DIR/PREFIX.XXXXXXXXXXXXXXXX` with mode 0700 that
/// only this user can enter (as `mkdtemp` does: `mkdir` never follows a link
/// and fails on any existing name, which is then retried). Returns its path.
pub fn create_private_dir(dir: &Path, prefix: &str) -> std::io::Result<std::path::PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    loop {
        let path = dir.join(unique_name(prefix));
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The names in `dir`, sorted; none when it cannot be read. One directory read.
pub(crate) fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// `statvfs` of the file system holding `path`.
fn statvfs(path: &Path) -> SysResult<libc::statvfs> {
    let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| einval("statvfs"))?;
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut buf: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c_path is NUL-terminated and `buf` is valid for writes during the call.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), &mut buf) };
    if rc != 0 {
        return Err(SysError::last("statvfs"));
    }
    Ok(buf)
}

/// The mount flags (`ST_*`) of the file system holding `path`. One `statvfs`.
fn mount_flags(path: &Path) -> SysResult<libc::c_ulong> {
    Ok(statvfs(path)?.f_flag)
}

/// Bytes an unprivileged user may still allocate on the file system holding
/// `path` (`f_bavail` blocks of `f_frsize`). One `statvfs`.
pub fn free_bytes(path: &Path) -> SysResult<u64> {
    let s = statvfs(path)?;
    Ok(s.f_bavail.saturating_mul(s.f_frsize))
}

/// Whether the file system holding `path` is mounted `noexec` (code cannot be
/// mapped executable from it, so a library there cannot be loaded). One `statvfs`.
pub fn is_noexec_mount(path: &Path) -> SysResult<bool> {
    Ok(mount_flags(path)? & libc::ST_NOEXEC != 0)
}

/// Whether the file system holding `path` is mounted `nosuid` (`exec` there
/// ignores set-user-ID and set-group-ID bits and file capabilities). One `statvfs`.
pub fn is_nosuid_mount(path: &Path) -> SysResult<bool> {
    Ok(mount_flags(path)? & libc::ST_NOSUID != 0)
}

/// Whether the file at `path` (a link followed) carries file capabilities
/// (the `security.capability` extended attribute, as `setcap` writes it).
/// A file system without extended attributes has none. One `getxattr`.
pub fn has_file_capabilities(path: &Path) -> SysResult<bool> {
    const NAME: &std::ffi::CStr = c"security.capability";
    let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| einval("getxattr"))?;
    // SAFETY: both strings are NUL-terminated; a null buffer of size 0 asks
    // only for the value's size, so nothing is written.
    let rc = unsafe { libc::getxattr(c_path.as_ptr(), NAME.as_ptr(), std::ptr::null_mut(), 0) };
    if rc >= 0 {
        return Ok(true);
    }
    let err = SysError::last("getxattr");
    match err.source.raw_os_error() {
        Some(libc::ENODATA) | Some(libc::ENOTSUP) => Ok(false),
        _ => Err(err),
    }
}

/// Whether this process, by its effective user and group ids, may create
/// entries in the directory `dir` (`faccessat(W_OK | X_OK, AT_EACCESS)`; a
/// read-only mount says no). One system call.
pub fn may_create_in(dir: &Path) -> SysResult<bool> {
    let c_path = CString::new(dir.as_os_str().as_bytes()).map_err(|_| einval("faccessat"))?;
    // SAFETY: c_path is NUL-terminated and lives through the call.
    let rc = unsafe {
        libc::faccessat(
            libc::AT_FDCWD,
            c_path.as_ptr(),
            libc::W_OK | libc::X_OK,
            libc::AT_EACCESS,
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    let err = SysError::last("faccessat");
    match err.source.raw_os_error() {
        Some(libc::EACCES | libc::EROFS | libc::EPERM) => Ok(false),
        _ => Err(err),
    }
}

/// One event from an [`Inotify`] instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InotifyEvent {
    /// The watch it belongs to.
    pub wd: i32,
    /// `IN_*` bits.
    pub mask: u32,
}

/// `IN_MODIFY`: the file's contents or size changed through a system call
/// (`write`, `truncate`, `fallocate`; not stores through a mapping).
pub const IN_MODIFY: u32 = 0x0000_0002;
/// `IN_CLOSE_WRITE`: a file opened for writing was closed (in a watched
/// directory: one of its files).
pub const IN_CLOSE_WRITE: u32 = 0x0000_0008;
/// `IN_IGNORED`: the watch was removed (explicitly, or because the file went away).
pub const IN_IGNORED: u32 = 0x0000_8000;

/// An inotify instance; closed on drop.
#[derive(Debug)]
pub struct Inotify {
    fd: OwnedFd,
}

impl Inotify {
    /// A new blocking inotify instance (`inotify_init1(IN_CLOEXEC)`). Fails
    /// with `EMFILE` when the per-user instance limit
    /// (`fs.inotify.max_user_instances`) is reached.
    pub fn new() -> SysResult<Inotify> {
        // SAFETY: inotify_init1 takes flags only.
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(SysError::last("inotify_init1"));
        }
        // SAFETY: fd is a fresh descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Inotify { fd })
    }

    /// Watches `path` for the events in `mask`; returns the watch descriptor.
    /// Passing `/proc/self/fd/N` watches the open file itself, whatever its
    /// name is now. One `inotify_add_watch` call.
    pub fn add_watch(&self, path: &Path, mask: u32) -> SysResult<i32> {
        let c_path =
            CString::new(path.as_os_str().as_bytes()).map_err(|_| einval("inotify_add_watch"))?;
        // SAFETY: c_path is a valid NUL-terminated string that outlives the call.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), c_path.as_ptr(), mask) };
        if wd < 0 {
            return Err(SysError::last("inotify_add_watch"));
        }
        Ok(wd)
    }

    /// Removes a watch; the kernel queues an `IN_IGNORED` event for it, which
    /// wakes a thread blocked in [`Inotify::read_events`]. One system call.
    pub fn remove_watch(&self, wd: i32) -> SysResult<()> {
        // SAFETY: plain integers.
        let rc = unsafe { libc::inotify_rm_watch(self.fd.as_raw_fd(), wd) };
        if rc != 0 {
            return Err(SysError::last("inotify_rm_watch"));
        }
        Ok(())
    }

    /// Blocks until at least one event is queued and returns the queued events.
    /// One `read` call (retried on `EINTR`).
    pub fn read_events(&self) -> SysResult<Vec<InotifyEvent>> {
        // Large enough for many events with names (we watch files, so names are empty).
        let mut buf = [0u8; 4096];
        let n = loop {
            // SAFETY: buf is valid and writable for its length.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n >= 0 {
                break n as usize;
            }
            let err = SysError::last("read(inotify)");
            if err.errno() != Some(crate::sys::Errno::INTR) {
                return Err(err);
            }
        };
        let header = std::mem::size_of::<libc::inotify_event>();
        let mut events = Vec::new();
        let mut at = 0;
        while at + header <= n {
            // struct inotify_event { int wd; uint32_t mask, cookie, len; char name[]; }
            let field = |i: usize| {
                let b = &buf[at + 4 * i..at + 4 * i + 4];
                u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
            };
            let wd = field(0) as i32;
            let mask = field(1);
            let name_len = field(3) as usize;
            events.push(InotifyEvent { wd, mask });
            at += header + name_len;
        }
        Ok(events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;
    use std::os::fd::AsFd;

    #[test]
    fn free_bytes_of_a_folder_and_of_a_missing_one() {
        let free = free_bytes(Path::new("/dev/shm")).unwrap();
        assert!(free > 0, "{free}");
        assert!(free_bytes(Path::new("/no/such/folder")).is_err());
    }

    #[test]
    fn output_closed_sees_a_pipe_whose_reader_is_gone() {
        let (reader, writer) = std::io::pipe().unwrap();
        assert!(!output_closed(writer.as_fd()));
        drop(reader);
        assert!(output_closed(writer.as_fd()));
        let f = tempfile::tempfile().unwrap();
        assert!(!output_closed(f.as_fd()));
    }

    #[test]
    fn allocate_extends_and_punch_keeps_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        allocate(&file, 0, 1 << 20).unwrap();
        assert_eq!(file.metadata().unwrap().len(), 1 << 20);
        match punch_hole(&file, 0, 1 << 19) {
            Ok(()) => assert_eq!(file.metadata().unwrap().len(), 1 << 20),
            Err(e) => assert_eq!(e.errno(), Some(crate::sys::Errno::OPNOTSUPP), "{e}"),
        }
    }

    #[test]
    fn ofd_locks_conflict_between_opens_of_one_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let a = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let b = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let reader = OpenOptions::new().read(true).open(&path).unwrap();
        let held = |f: &File| conflicting_lock(f, 0, 1, LockKind::Exclusive).unwrap();
        assert_eq!(held(&reader), None);
        assert!(try_lock(&a, 0, 1, LockKind::Exclusive).unwrap());
        assert!(!try_lock(&b, 0, 1, LockKind::Exclusive).unwrap());
        assert_eq!(held(&reader), Some(LockKind::Exclusive));
        drop(a);
        assert_eq!(held(&reader), None);
        // A read lock needs only a read-only descriptor, and keeps writers out.
        assert!(try_lock(&reader, 0, 1, LockKind::Shared).unwrap());
        assert!(!try_lock(&b, 0, 1, LockKind::Exclusive).unwrap());
        assert_eq!(held(&b), Some(LockKind::Shared));
        drop(reader);
        assert!(try_lock(&b, 0, 1, LockKind::Exclusive).unwrap());
    }

    #[test]
    fn fs_kind_of_dev_shm_is_tmpfs() {
        let Ok(file) = tempfile::tempfile_in("/dev/shm") else {
            pagewise_testkit::skip!(
                pagewise_testkit::Need::Other,
                "/dev/shm is not writable here"
            );
        };
        assert_eq!(fs_kind(&file).unwrap(), FsKind::Tmpfs);
    }

    #[test]
    fn private_directories_are_new_and_0700() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let a = create_private_dir(dir.path(), "d").unwrap();
        let b = create_private_dir(dir.path(), "d").unwrap();
        assert_ne!(a, b);
        let meta = std::fs::symlink_metadata(&a).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        assert_eq!(names_in(dir.path()).len(), 2);
    }

    #[test]
    fn inotify_sees_a_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.set_len(8192).unwrap();
        let inotify = match Inotify::new() {
            Ok(i) => i,
            Err(e) => {
                pagewise_testkit::skip!(pagewise_testkit::Need::Kernel, "inotify unavailable: {e}");
            }
        };
        let wd = inotify.add_watch(&path, IN_MODIFY).unwrap();
        file.set_len(0).unwrap();
        let events = inotify.read_events().unwrap();
        assert!(
            events.iter().any(|e| e.wd == wd && e.mask & IN_MODIFY != 0),
            "{events:?}"
        );
        inotify.remove_watch(wd).unwrap();
        let events = inotify.read_events().unwrap();
        assert!(
            events.iter().any(|e| e.mask & IN_IGNORED != 0),
            "{events:?}"
        );
    }
}
