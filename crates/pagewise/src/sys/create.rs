//! Creating and opening files without being fooled by what another user put
//! in a shared directory: a new file appears at its path complete or not at
//! all (built unnamed, then linked), never through a symbolic link and never
//! over an existing name, with the mode asked for minus the umask.
//!
//! [`NewFile::in_dir_of`] makes an unnamed file in the target's directory
//! (`O_TMPFILE`); the caller fills it in, then [`NewFile::link_at`] gives it
//! its name with `linkat`, which fails with `EEXIST` if anything is there — a
//! file, a directory, or a symbolic link, dangling or not — and never follows
//! a link. If the file system has no `O_TMPFILE`, the file is made under a
//! temporary name (`O_CREAT | O_EXCL | O_NOFOLLOW`) and linked from there;
//! the temporary name is removed in either case, and a file that is dropped
//! before it is linked leaves nothing behind.

use super::{SysError, SysResult};
use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

fn c_path(path: &Path, call: &'static str) -> SysResult<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| SysError {
        call,
        source: std::io::Error::from_raw_os_error(libc::EINVAL),
    })
}

/// `open(2)` with `flags | O_CLOEXEC` and `mode`, retried on `EINTR`.
fn open_raw(path: &Path, flags: libc::c_int, mode: u32, call: &'static str) -> SysResult<File> {
    let c = c_path(path, call)?;
    loop {
        // SAFETY: c is a valid NUL-terminated path that outlives the call; open reads it only.
        let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, mode as libc::c_uint) };
        if fd >= 0 {
            // SAFETY: fd is a new descriptor that nothing else owns.
            return Ok(unsafe { File::from_raw_fd(fd) });
        }
        let err = SysError::last(call);
        if err.errno() != Some(crate::sys::Errno::INTR) {
            return Err(err);
        }
    }
}

/// Opens an existing file for reading and writing without following a
/// symbolic link in the last component (a link gives `ELOOP`), and without
/// blocking on a FIFO (`O_NONBLOCK`, which changes nothing for a regular
/// file). One `open` call.
pub fn open_no_follow(path: &Path) -> SysResult<File> {
    open_raw(
        path,
        libc::O_RDWR | libc::O_NOFOLLOW | libc::O_NONBLOCK,
        0,
        "open(O_RDWR|O_NOFOLLOW)",
    )
}

/// Opens `path` for reading and writing, creating it with mode 0600 (minus
/// the umask) if there is nothing at that name, without following a
/// symbolic link in the last component (`ELOOP`) and without blocking on a
/// FIFO (`O_NONBLOCK`); says whether this call created it. An existing file
/// is opened as it is: check its type and owner with `fstat` before trusting
/// it. One `open` call, two when it creates the file (more only while
/// another process creates and removes that name at the same time).
pub fn open_or_create_private(path: &Path) -> SysResult<(File, bool)> {
    let mut tries = 0;
    loop {
        match open_raw(
            path,
            libc::O_RDWR | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            0,
            "open(O_RDWR|O_NOFOLLOW)",
        ) {
            Err(e) if e.errno() == Some(crate::sys::Errno::NOENT) => {}
            opened => return opened.map(|f| (f, false)),
        }
        match open_raw(
            path,
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            0o600,
            "open(O_RDWR|O_CREAT|O_EXCL|O_NOFOLLOW)",
        ) {
            // Made by another process between the two calls: open that.
            Err(e) if e.errno() == Some(crate::sys::Errno::EXIST) && tries < 8 => tries += 1,
            created => return created.map(|f| (f, true)),
        }
    }
}

/// Opens an existing file read-only without following a symbolic link in
/// the last component (`ELOOP`) and without blocking on a FIFO
/// (`O_NONBLOCK`): check its type with `fstat` before reading. One `open` call.
pub fn open_read_no_follow(path: &Path) -> SysResult<File> {
    open_raw(
        path,
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
        0,
        "open(O_RDONLY|O_NOFOLLOW)",
    )
}

/// Opens an existing file read-only, following links, without blocking on
/// a FIFO (`O_NONBLOCK`, which changes nothing for a regular file): check
/// its type with `fstat` before reading. One `open` call.
pub fn open_for_reading(path: &Path) -> SysResult<File> {
    open_raw(path, libc::O_RDONLY | libc::O_NONBLOCK, 0, "open(O_RDONLY)")
}

/// Opens an existing file for writing, following links, without truncating
/// it and without blocking on a FIFO (`O_NONBLOCK`: one no process reads
/// fails at once with `ENXIO`), to learn whether it could be written. One
/// `open` call.
pub fn open_existing_for_writing(path: &Path) -> SysResult<File> {
    open_raw(path, libc::O_WRONLY | libc::O_NONBLOCK, 0, "open(O_WRONLY)")
}

/// Opens `path` for writing, created (mode 0666 minus the umask) or
/// truncated, without blocking on a FIFO: one that no process reads fails at
/// once with `ENXIO` ([`fifo_without_reader`] tells), one that is read is
/// returned in blocking mode, as is anything else. One `open` and one
/// `fstat` (two `fcntl` more for anything but a regular file).
pub fn open_for_writing(path: &Path) -> SysResult<File> {
    let file = open_raw(
        path,
        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_NONBLOCK,
        0o666,
        "open(O_WRONLY|O_CREAT|O_TRUNC)",
    )?;
    let regular = file
        .metadata()
        .map_err(|source| SysError {
            call: "fstat",
            source,
        })?
        .file_type()
        .is_file();
    if !regular {
        let fd = file.as_raw_fd();
        // SAFETY: F_GETFL takes an fd and no pointer; it does not touch our memory.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags < 0 {
            return Err(SysError::last("fcntl(F_GETFL)"));
        }
        // SAFETY: F_SETFL takes an fd and an integer; it does not touch our memory.
        if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
            return Err(SysError::last("fcntl(F_SETFL)"));
        }
    }
    Ok(file)
}

/// Whether `e` is the `ENXIO` of [`open_for_writing`]: a FIFO that no
/// process has open for reading.
pub fn fifo_without_reader(e: &SysError) -> bool {
    e.errno() == Some(crate::sys::Errno::NXIO)
}

/// What kind of file a path names, from its metadata (`lstat` or `fstat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// A regular file.
    Regular,
    /// A directory.
    Directory,
    /// A FIFO (named pipe).
    Fifo,
    /// A character device, such as `/dev/null`.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// A Unix-domain socket.
    Socket,
    /// A symbolic link (seen only through `lstat`).
    SymbolicLink,
}

impl FileKind {
    /// The kind of file `meta` describes.
    pub fn of(meta: &std::fs::Metadata) -> FileKind {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        if t.is_file() {
            FileKind::Regular
        } else if t.is_dir() {
            FileKind::Directory
        } else if t.is_fifo() {
            FileKind::Fifo
        } else if t.is_char_device() {
            FileKind::CharDevice
        } else if t.is_block_device() {
            FileKind::BlockDevice
        } else if t.is_socket() {
            FileKind::Socket
        } else {
            FileKind::SymbolicLink
        }
    }

    /// The kind for messages: "a regular file", "a directory", "a FIFO",
    /// "a character device", "a block device", "a socket", "a symbolic link".
    pub fn name(self) -> &'static str {
        match self {
            FileKind::Regular => "a regular file",
            FileKind::Directory => "a directory",
            FileKind::Fifo => "a FIFO",
            FileKind::CharDevice => "a character device",
            FileKind::BlockDevice => "a block device",
            FileKind::Socket => "a socket",
            FileKind::SymbolicLink => "a symbolic link",
        }
    }
}

impl std::fmt::Display for FileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What kind of file `meta` describes, for messages: [`FileKind::name`].
pub fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    FileKind::of(meta).name()
}

/// The effective user id of this process (the owner of the files it creates).
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The real user and group ids of this process (who started it: what
/// `exec` compares a set-user-ID or set-group-ID file's owner with).
pub fn real_ids() -> (u32, u32) {
    // SAFETY: getuid and getgid have no preconditions and cannot fail.
    unsafe { (libc::getuid(), libc::getgid()) }
}

/// Whether this process's effective user or group id differs from its real
/// one (it runs set-user-ID or set-group-ID itself: every `exec` it makes is
/// then in secure mode).
pub fn ids_differ() -> bool {
    // SAFETY: these four calls have no preconditions and cannot fail.
    unsafe { libc::geteuid() != libc::getuid() || libc::getegid() != libc::getgid() }
}

/// A file being created: unnamed until [`NewFile::link_at`] succeeds.
#[derive(Debug)]
pub struct NewFile {
    file: File,
    /// The temporary name, when the file system has no `O_TMPFILE`.
    temp: Option<PathBuf>,
}

/// The directory `path` would be created in.
fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

impl NewFile {
    /// Creates an unnamed regular file, open for reading and writing, in the
    /// directory `path` names, with permission bits `mode` minus the umask.
    /// One `open` call (two more without `O_TMPFILE`).
    pub fn in_dir_of(path: &Path, mode: u32) -> SysResult<NewFile> {
        let dir = dir_of(path);
        match open_raw(dir, libc::O_TMPFILE | libc::O_RDWR, mode, "open(O_TMPFILE)") {
            Ok(file) => return Ok(NewFile { file, temp: None }),
            // The file system (EOPNOTSUPP) or the kernel (EISDIR, EINVAL) has no O_TMPFILE.
            Err(e)
                if matches!(
                    e.errno(),
                    Some(crate::sys::Errno::OPNOTSUPP)
                        | Some(crate::sys::Errno::ISDIR)
                        | Some(crate::sys::Errno::INVAL)
                ) => {}
            Err(e) => return Err(e),
        }
        NewFile::under_temporary_name(path, mode)
    }

    /// A new file under a temporary name beside `path`, to be put in place
    /// with [`NewFile::replace_at`] (or [`NewFile::link_at`]); the name is
    /// removed when the file is dropped first. Two `open` calls at most.
    pub fn beside(path: &Path, mode: u32) -> SysResult<NewFile> {
        NewFile::under_temporary_name(path, mode)
    }

    /// The fallback of [`NewFile::in_dir_of`]: a new file under a temporary
    /// name beside `path` (`.NAME.PID.N.tmp`, `O_CREAT | O_EXCL | O_NOFOLLOW`),
    /// removed when the file is linked or dropped.
    fn under_temporary_name(path: &Path, mode: u32) -> SysResult<NewFile> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let name = path
            .file_name()
            .map_or_else(|| "new".into(), |n| n.to_string_lossy().into_owned());
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_RDWR;
        let mut attempts = 0;
        loop {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let temp = dir_of(path).join(format!(".{name}.{}.{n}.tmp", std::process::id()));
            match open_raw(&temp, flags, mode, "open(O_CREAT|O_EXCL)") {
                Ok(file) => {
                    return Ok(NewFile {
                        file,
                        temp: Some(temp),
                    })
                }
                // Someone else holds that name: take the next one, a few times.
                Err(e) if e.errno() == Some(crate::sys::Errno::EXIST) && attempts < 100 => {
                    attempts += 1
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The file, to fill in before it gets its name.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Gives the file the name `path` and returns it. Fails with `EEXIST`
    /// if anything has that name (never replaces it, never follows a link);
    /// the unnamed file is then dropped and nothing is left. One `linkat`
    /// (and an `unlink` of the temporary name without `O_TMPFILE`).
    pub fn link_at(mut self, path: &Path) -> SysResult<File> {
        let new = c_path(path, "linkat")?;
        match self.temp.take() {
            Some(temp) => {
                let old = c_path(&temp, "linkat")?;
                // SAFETY: both are valid NUL-terminated paths that outlive the call.
                let rc = unsafe {
                    libc::linkat(
                        libc::AT_FDCWD,
                        old.as_ptr(),
                        libc::AT_FDCWD,
                        new.as_ptr(),
                        0,
                    )
                };
                let result = if rc == 0 {
                    Ok(())
                } else {
                    Err(SysError::last("linkat"))
                };
                // SAFETY: old is a valid path; the temporary name is ours to remove.
                unsafe { libc::unlink(old.as_ptr()) };
                result?;
            }
            None => {
                let by_fd = c_path(
                    Path::new(&format!("/proc/self/fd/{}", self.file.as_raw_fd())),
                    "linkat",
                )?;
                // SAFETY: valid NUL-terminated paths that outlive the call; the /proc link
                // names this process's own descriptor.
                let rc = unsafe {
                    libc::linkat(
                        libc::AT_FDCWD,
                        by_fd.as_ptr(),
                        libc::AT_FDCWD,
                        new.as_ptr(),
                        libc::AT_SYMLINK_FOLLOW,
                    )
                };
                if rc != 0 {
                    let err = SysError::last("linkat(/proc/self/fd)");
                    if err.errno() != Some(crate::sys::Errno::NOENT) {
                        return Err(err);
                    }
                    // No /proc: AT_EMPTY_PATH (needs CAP_DAC_READ_SEARCH).
                    let empty = c"";
                    // SAFETY: the fd is open; empty and new are valid NUL-terminated strings.
                    let rc = unsafe {
                        libc::linkat(
                            self.file.as_raw_fd(),
                            empty.as_ptr(),
                            libc::AT_FDCWD,
                            new.as_ptr(),
                            libc::AT_EMPTY_PATH,
                        )
                    };
                    if rc != 0 {
                        return Err(SysError::last("linkat(AT_EMPTY_PATH)"));
                    }
                }
            }
        }
        // The clone shares the open file description (and its locks) with ours.
        self.file.try_clone().map_err(|source| SysError {
            call: "dup",
            source,
        })
    }
}

impl NewFile {
    /// Renames the file (made by [`NewFile::beside`]) to `path`, replacing
    /// atomically whatever has that name (a symbolic link there is replaced
    /// itself, never followed): a reader sees the old file or the new one,
    /// whole. The caller decides beforehand that what is there may go. One
    /// `rename` (an `unlink` of the temporary name if it fails). `EINVAL` for
    /// an unnamed file from [`NewFile::in_dir_of`].
    pub fn replace_at(mut self, path: &Path) -> SysResult<File> {
        let Some(temp) = self.temp.take() else {
            return Err(SysError {
                call: "rename",
                source: std::io::Error::from_raw_os_error(libc::EINVAL),
            });
        };
        if let Err(source) = std::fs::rename(&temp, path) {
            let _ = std::fs::remove_file(&temp);
            return Err(SysError {
                call: "rename",
                source,
            });
        }
        self.file.try_clone().map_err(|source| SysError {
            call: "dup",
            source,
        })
    }
}

/// Replaces (or creates) `path` with a file holding `bytes`, permission bits
/// `mode` minus the umask: written whole under a temporary name beside it
/// ([`NewFile::beside`]), flushed to disk (`fsync`), then renamed over `path`
/// ([`NewFile::replace_at`]), so a reader sees the old file or the new one,
/// whole, and a failure leaves no temporary name behind. Cost: two `open`s at
/// most, the write, an `fsync` and a `rename`.
pub fn replace_file(path: &Path, bytes: &[u8], mode: u32) -> SysResult<File> {
    use std::io::Write;
    let new = NewFile::beside(path, mode)?;
    let written = (|| {
        let mut file = new.file();
        file.write_all(bytes)?;
        file.sync_all()
    })();
    if let Err(source) = written {
        return Err(SysError {
            call: "write",
            source,
        });
    }
    new.replace_at(path)
}

impl Drop for NewFile {
    fn drop(&mut self) {
        if let Some(temp) = &self.temp {
            if let Ok(c) = c_path(temp, "unlink") {
                // SAFETY: c is a valid path; the temporary name is ours.
                unsafe { libc::unlink(c.as_ptr()) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_file_under_a_temporary_name_is_linked_or_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let new = NewFile::under_temporary_name(&path, 0o600).unwrap();
        new.file().write_all(b"x").unwrap();
        drop(new);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "removed");
        let new = NewFile::under_temporary_name(&path, 0o600).unwrap();
        new.file().write_all(b"whole").unwrap();
        drop(new.link_at(&path).unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), b"whole");
        let new = NewFile::under_temporary_name(&path, 0o600).unwrap();
        assert_eq!(
            new.link_at(&path).unwrap_err().errno(),
            Some(crate::sys::Errno::EXIST)
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "only f");
    }

    #[test]
    fn a_file_beside_replaces_a_name_whole_and_never_follows_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"old").unwrap();
        let new = NewFile::beside(&path, 0o600).unwrap();
        new.file().write_all(b"new").unwrap();
        drop(new.replace_at(&path).unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert_eq!(
            open_read_no_follow(&link).unwrap_err().errno(),
            Some(crate::sys::Errno::LOOP)
        );
        drop(
            NewFile::beside(&link, 0o600)
                .unwrap()
                .replace_at(&link)
                .unwrap(),
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(std::fs::symlink_metadata(&link).unwrap().is_file());
        let unnamed = NewFile::in_dir_of(&path, 0o600).unwrap();
        if unnamed.temp.is_none() {
            assert_eq!(
                unnamed.replace_at(&path).unwrap_err().errno(),
                Some(crate::sys::Errno::INVAL)
            );
        }
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            3,
            "f, victim, link"
        );
    }

    #[test]
    fn a_new_file_appears_complete_and_never_over_a_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let new = NewFile::in_dir_of(&path, 0o640).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "unnamed");
        new.file().write_all(b"whole").unwrap();
        let file = new.link_at(&path).unwrap();
        drop(file);
        assert_eq!(std::fs::read(&path).unwrap(), b"whole");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & !0o640, 0, "mode {mode:o}");
        // A second file for the same name fails and leaves nothing.
        let again = NewFile::in_dir_of(&path, 0o644).unwrap();
        let err = again.link_at(&path).unwrap_err();
        assert_eq!(err.errno(), Some(crate::sys::Errno::EXIST));
        // A dangling link at the name is not followed.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path().join("missing"), &link).unwrap();
        let err = NewFile::in_dir_of(&link, 0o644)
            .unwrap()
            .link_at(&link)
            .unwrap_err();
        assert_eq!(err.errno(), Some(crate::sys::Errno::EXIST));
        assert!(!dir.path().join("missing").exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
        let err = open_no_follow(&link).unwrap_err();
        assert_eq!(err.errno(), Some(crate::sys::Errno::LOOP));
        // A FIFO opens at once (no writer needed) and says what it is.
        let fifo = dir.path().join("fifo");
        let c = c_path(&fifo, "mkfifo").unwrap();
        // SAFETY: c is a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let f = open_for_reading(&fifo).unwrap();
        assert_eq!(kind_of(&f.metadata().unwrap()), "a FIFO");
        assert_eq!(
            kind_of(&open_no_follow(&fifo).unwrap().metadata().unwrap()),
            "a FIFO"
        );
    }
}
