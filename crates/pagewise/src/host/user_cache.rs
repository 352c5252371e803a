//! The per-user cache directory (`$XDG_CACHE_HOME/pagewise/` or
//! `~/.cache/pagewise/`) and its files, read and written so another user can
//! neither plant nor change what pagewise trusts there.
//!
//! The directory is created with mode 0700 and must be owned by this user and
//! writable by no one else; a file must be a regular file owned by this user,
//! not writable by group or others, and is opened with `O_NOFOLLOW` (a
//! symbolic link is refused); it is written under a temporary name (created
//! with `O_EXCL | O_NOFOLLOW`, mode 0600) and renamed into place, so readers
//! never see half a file. Users: the copy plans ([`crate::copy::cache`]) and
//! the resolved hot pages of profiles ([`crate::text::hot_cache`]).

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Why the cache could not be used.
#[derive(Debug, thiserror::Error)]
pub enum UserCacheError {
    /// Neither `XDG_CACHE_HOME` nor `HOME` gives a directory.
    #[error("no cache directory: set XDG_CACHE_HOME or HOME to an absolute path")]
    NoDirectory,
    /// The directory or file is not safe to trust.
    #[error("cache {path}: {why}; not used (remove it, or fix its owner and mode)")]
    Untrusted {
        /// The path.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// A file operation failed.
    #[error("cache {path}: {action} failed: {error}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The error (in the message, not as `source()`: said once).
        error: std::io::Error,
    },
}

/// The cache directory: `$XDG_CACHE_HOME/pagewise` when that is an absolute
/// path, else `$HOME/.cache/pagewise`. Costs nothing (reads the environment).
pub fn directory() -> Result<PathBuf, UserCacheError> {
    let abs = |v: Option<std::ffi::OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    if let Some(xdg) = abs(std::env::var_os("XDG_CACHE_HOME")) {
        return Ok(xdg.join("pagewise"));
    }
    abs(std::env::var_os("HOME"))
        .map(|h| h.join(".cache").join("pagewise"))
        .ok_or(UserCacheError::NoDirectory)
}

/// What a file was when a cache entry was made from it: path, and device,
/// inode, size and modification time (ns), `None` when it did not exist. An
/// entry holds while every file it was made from [`FileStamp::still_holds`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileStamp {
    path: String,
    identity: Option<(u64, u64, u64, i128)>,
}

impl FileStamp {
    /// The stamp of `path` now (one `stat`).
    pub fn of(path: &str) -> FileStamp {
        let identity = std::fs::metadata(path).ok().map(|m| {
            let mtime_ns = i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
            (m.dev(), m.ino(), m.size(), mtime_ns)
        });
        FileStamp {
            path: path.to_owned(),
            identity,
        }
    }

    /// The path stamped.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Whether the file is still the one stamped (one `stat`).
    pub fn still_holds(&self) -> bool {
        *self == FileStamp::of(&self.path)
    }
}

/// A cache file name for `key`: `<prefix>-<16 hex digits>.json`, the digits
/// an FNV-1a hash of `key` (so that keys sharing a directory keep their own
/// files; the file itself holds the whole key, to tell a collision apart).
pub fn file_name(prefix: &str, key: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{prefix}-{h:016x}.json")
}

fn io_error(path: &Path, action: &'static str) -> impl FnOnce(std::io::Error) -> UserCacheError {
    let path = path.to_owned();
    move |error| UserCacheError::Io {
        path,
        action,
        error,
    }
}

fn untrusted(path: &Path, why: impl Into<String>) -> UserCacheError {
    UserCacheError::Untrusted {
        path: path.to_owned(),
        why: why.into(),
    }
}

/// Checks that `meta` belongs to this user and that group and others cannot write it.
fn check_owner(path: &Path, meta: &std::fs::Metadata) -> Result<(), UserCacheError> {
    let uid = crate::sys::libc_info::effective_uid();
    if meta.uid() != uid {
        return Err(untrusted(
            path,
            format!("owned by user {}, not by this user ({uid})", meta.uid()),
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(untrusted(
            path,
            format!(
                "writable by group or others (mode {:o})",
                meta.mode() & 0o777
            ),
        ));
    }
    Ok(())
}

/// Makes `dir` ready to hold cache files: created with mode 0700 if missing
/// (its parents with the default mode); refused if it is not a directory, is
/// another user's, or group or others can write it. Costs a `mkdir` and a `stat`.
pub fn prepare(dir: &Path) -> Result<(), UserCacheError> {
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).map_err(io_error(parent, "create directory"))?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_error(dir, "create directory")(e)),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(io_error(dir, "stat"))?;
    if !meta.is_dir() {
        return Err(untrusted(dir, "not a directory"));
    }
    check_owner(dir, &meta)
}

/// The text of the cache file `name` in `dir` (at most `max_bytes` of it) and
/// its path; `Ok(None)` when the directory or the file does not exist.
/// Costs a `stat` of the directory, an `open`, an `fstat` and one read.
pub fn read(
    dir: &Path,
    name: &str,
    max_bytes: u64,
) -> Result<Option<(String, PathBuf)>, UserCacheError> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if !meta.is_dir() => return Err(untrusted(dir, "not a directory")),
        Ok(meta) => check_owner(dir, &meta)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(dir, "stat")(e)),
    }
    let path = dir.join(name);
    // Never through a link, never blocking on a FIFO planted under the name.
    let file = match crate::sys::create::open_read_no_follow(&path) {
        Ok(f) => f,
        Err(e) if e.source.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(io_error(&path, "open (a symbolic link is refused)")(
                e.source,
            ))
        }
    };
    let meta = file.metadata().map_err(io_error(&path, "fstat"))?;
    if !meta.is_file() {
        return Err(untrusted(&path, "not a regular file"));
    }
    check_owner(&path, &meta)?;
    let mut text = String::new();
    file.take(max_bytes)
        .read_to_string(&mut text)
        .map_err(io_error(&path, "read"))?;
    Ok(Some((text, path)))
}

/// Writes `bytes` as the cache file `name` in `dir` (made ready by
/// [`prepare`] first), replacing any older one atomically, and returns its
/// path. Costs a temporary file, one write, an `fsync` and a `rename`.
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, UserCacheError> {
    prepare(dir)?;
    let path = dir.join(name);
    crate::sys::create::replace_file(&path, bytes, 0o600)
        .map_err(|e| io_error(&path, e.call)(e.source))?;
    Ok(path)
}

/// Writes `bytes` as the cache file `name` in `dir` (made ready by
/// [`prepare`] first) unless one is there already, for entries whose name
/// already says everything they hold (they are never replaced). The file has
/// no name until it is complete (`O_TMPFILE`, then `linkat`), so a process
/// that dies while writing leaves nothing behind. Returns the path.
pub fn write_once(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, UserCacheError> {
    prepare(dir)?;
    let path = dir.join(name);
    let new = crate::sys::create::NewFile::in_dir_of(&path, 0o600)
        .map_err(|e| io_error(&path, "create")(e.source))?;
    new.file()
        .write_all(bytes)
        .map_err(io_error(&path, "write"))?;
    match new.link_at(&path) {
        Ok(_) => Ok(path),
        Err(e) if e.source.kind() == std::io::ErrorKind::AlreadyExists => Ok(path),
        Err(e) => Err(io_error(&path, "link")(e.source)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_written_file_reads_back_and_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("pagewise");
        assert!(
            read(&cache, "f", 100).unwrap().is_none(),
            "no directory yet"
        );
        let path = write(&cache, "f", b"hello").unwrap();
        assert_eq!(std::fs::metadata(&cache).unwrap().mode() & 0o777, 0o700);
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        assert_eq!(
            read(&cache, "f", 100).unwrap().unwrap(),
            ("hello".into(), path)
        );
        assert_eq!(
            read(&cache, "f", 2).unwrap().unwrap().0,
            "he",
            "bounded read"
        );
        assert!(read(&cache, "g", 100).unwrap().is_none());
        let names: Vec<_> = std::fs::read_dir(&cache).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left");
    }

    #[test]
    fn a_write_once_entry_is_kept_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("pagewise");
        let path = write_once(&cache, "e", b"first").unwrap();
        assert_eq!(write_once(&cache, "e", b"second").unwrap(), path);
        assert_eq!(read(&cache, "e", 100).unwrap().unwrap().0, "first");
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        let names: Vec<_> = std::fs::read_dir(&cache).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn links_loose_modes_and_foreign_directories_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("pagewise");
        let path = write(&cache, "f", b"x").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let err = read(&cache, "f", 10).unwrap_err();
        assert!(err.to_string().contains("writable by group"), "{err}");
        std::fs::remove_file(&path).unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "planted").unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        let err = read(&cache, "f", 10).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        std::fs::remove_file(&path).unwrap();
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = read(&cache, "f", 10).unwrap_err();
        assert!(matches!(err, UserCacheError::Untrusted { .. }), "{err}");
        assert!(matches!(
            write(&cache, "f", b"x").unwrap_err(),
            UserCacheError::Untrusted { .. }
        ));
    }
}
