//! The per-user cache directory and its files, read and written so another
//! user can neither plant nor change what pagewise trusts there.
//!
//! **Where.** Every pagewise cache (the copy plans, [`crate::copy::cache`];
//! the hot pages of profiles, [`crate::text::hot_cache`]; the functions of
//! moved objects for perf maps, [`crate::text::huge`]; the preload library,
//! [`crate::launch::preload_cache`]) picks its directory with [`choose`],
//! the first of these that is safe: `$XDG_CACHE_HOME/pagewise`,
//! `$HOME/.cache/pagewise` (each only when the variable is an absolute path)
//! and `$TMPDIR/pagewise-UID` (by default `/tmp/pagewise-UID`). Safe means: a
//! real directory (a symbolic link is never followed) owned by this user that
//! no one else can write to, or, for the one in the shared temporary
//! directory, that no one else can even enter (mode 0700); whose parent no
//! one else can write to without the sticky bit. A missing one is created
//! with mode 0700 (its parents too, except the shared temporary directory).
//! Each place passed over is said, with why.
//!
//! **Files.** A file must be a regular file owned by this user, not writable
//! by group or others, and is opened with `O_NOFOLLOW` (a symbolic link is
//! refused); it is written under a temporary name (created with
//! `O_EXCL | O_NOFOLLOW`, mode 0600) and renamed into place, so readers
//! never see half a file.
//!
//! **Pruning.** A cache whose keys change (new builds, new versions) removes
//! its own kind's old files when it writes a new one ([`prune`]): only this
//! user's regular files with its names (a link is never followed), those
//! that can never be used again and, beyond a bound, the least recently used
//! ([`mark_used`] refreshes a file's modification time when it is used).

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Why the cache could not be used.
#[derive(Debug, thiserror::Error)]
pub enum UserCacheError {
    /// No candidate directory is safe (or, to read, none exists).
    #[error("no usable cache directory: {}", .0.join("; "))]
    NoUsableDirectory(
        /// Why each candidate was passed over (empty: to read, none exists).
        Vec<String>,
    ),
    /// The directory or file is not safe to trust.
    #[error("cache {path}: {why}; not used (remove it, or fix its owner and mode)")]
    Untrusted {
        /// The path.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// To read: the directory is missing, and a write could not create it.
    #[error("cache {path}: missing, and this user could not create it ({why})")]
    NotCreatable {
        /// The path.
        path: PathBuf,
        /// What stands in the way.
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

/// One place the cache directory may be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheDir {
    /// The directory.
    pub path: PathBuf,
    /// In a shared temporary directory: then it must be private (mode 0700),
    /// and its parent is neither created nor checked (`/tmp` is sticky).
    pub shared_parent: bool,
}

impl CacheDir {
    /// A place in a directory of this user's (not a shared one).
    pub fn private(path: PathBuf) -> CacheDir {
        CacheDir {
            path,
            shared_parent: false,
        }
    }
}

/// Where the cache directory may be, best first: `XDG_CACHE_HOME` and `HOME`
/// (when set to absolute paths), then `TMP/pagewise-UID`. Pure.
pub fn candidates(
    xdg_cache_home: Option<&OsStr>,
    home: Option<&OsStr>,
    tmp: &Path,
    uid: u32,
) -> Vec<CacheDir> {
    fn absolute(v: Option<&OsStr>) -> Option<&Path> {
        v.map(Path::new).filter(|p| p.is_absolute())
    }
    let mut dirs: Vec<CacheDir> = [
        absolute(xdg_cache_home).map(|x| x.join("pagewise")),
        absolute(home).map(|h| h.join(".cache").join("pagewise")),
    ]
    .into_iter()
    .flatten()
    .map(CacheDir::private)
    .collect();
    dirs.dedup();
    dirs.push(CacheDir {
        path: tmp.join(format!("pagewise-{uid}")),
        shared_parent: true,
    });
    dirs
}

/// [`candidates`] from this process's environment and user: reads three
/// variables and the effective user id.
pub fn candidates_from_env() -> Vec<CacheDir> {
    candidates(
        std::env::var_os("XDG_CACHE_HOME").as_deref(),
        std::env::var_os("HOME").as_deref(),
        &std::env::temp_dir(),
        crate::sys::libc_info::effective_uid(),
    )
}

/// What the directory is chosen for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Reading: the directory a write would choose, found without creating
    /// anything (it may not exist yet: then it holds nothing).
    Read,
    /// Writing data: a missing directory is created.
    Write,
    /// Writing code the loader maps: as [`Purpose::Write`], and a directory
    /// on a `noexec` mount is passed over.
    Code,
}

/// The directory [`choose`] picked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    /// The directory, ready for [`Purpose`] (to read: it may not exist).
    pub path: PathBuf,
    /// Why each place before it was passed over, one line each.
    pub passed_over: Vec<String>,
}

/// The one rule by which every pagewise cache picks its directory: the first
/// of `dirs` that is safe (see the module doc) for `purpose`, created if it
/// is missing and `purpose` writes; to read, the one a write would pick.
/// Costs a `mkdir` (when writing) and a few `stat`s per candidate tried.
pub fn choose(dirs: &[CacheDir], purpose: Purpose) -> Result<Chosen, UserCacheError> {
    let mut passed_over = Vec::new();
    for dir in dirs {
        match ready(dir, purpose) {
            Ok(()) => {
                return Ok(Chosen {
                    path: dir.path.clone(),
                    passed_over,
                })
            }
            Err(e) => passed_over.push(e.to_string()),
        }
    }
    Err(UserCacheError::NoUsableDirectory(passed_over))
}

/// [`choose`] among [`candidates_from_env`].
pub fn directory(purpose: Purpose) -> Result<Chosen, UserCacheError> {
    choose(&candidates_from_env(), purpose)
}

/// Makes `dir` ready for `purpose` and checks that it is safe; to read, a
/// missing `dir` is ready when it could be created.
fn ready(dir: &CacheDir, purpose: Purpose) -> Result<(), UserCacheError> {
    let path = &dir.path;
    let parent = path.parent().filter(|_| !dir.shared_parent);
    if purpose == Purpose::Read {
        if !exists(path)? {
            return creatable(path, parent);
        }
    } else {
        if let Some(parent) = parent {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(io_error(parent, "create directory"))?;
        }
        match std::fs::DirBuilder::new().mode(0o700).create(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_error(path, "create directory")(e)),
        }
    }
    let meta = std::fs::symlink_metadata(path).map_err(io_error(path, "stat"))?;
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return Err(untrusted(
            path,
            "not a directory (a link is never followed)",
        ));
    }
    check_owner(path, &meta, if dir.shared_parent { 0o077 } else { 0o022 })?;
    if let Some(parent) = parent {
        check_parent(path, parent)?;
    }
    if purpose == Purpose::Code {
        match crate::sys::file::is_noexec_mount(path) {
            Ok(false) => {}
            Ok(true) => {
                return Err(untrusted(
                    path,
                    "on a noexec mount: the loader could not map a library from it",
                ))
            }
            Err(e) => return Err(untrusted(path, e.to_string())),
        }
    }
    Ok(())
}

/// Whether anything is at `path` (a link counts); a path through a file or
/// a missing directory is not there.
fn exists(path: &Path) -> Result<bool, UserCacheError> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(io_error(path, "stat")(e)),
    }
}

/// Whether a write would create the missing `path` and then trust it: its
/// nearest existing ancestor is a directory this user may create entries in,
/// and its `parent`, when that exists and is checked, passes
/// [`check_parent`]. A `stat` per missing ancestor and one `faccessat`.
fn creatable(path: &Path, parent: Option<&Path>) -> Result<(), UserCacheError> {
    if let Some(parent) = parent.filter(|p| p.exists()) {
        check_parent(path, parent)?;
    }
    let mut ancestor = path.parent();
    while let Some(dir) = ancestor {
        if !exists(dir)? {
            ancestor = dir.parent();
            continue;
        }
        let may = dir.is_dir()
            && crate::sys::file::may_create_in(dir)
                .map_err(|e| io_error(path, "create directory")(e.source))?;
        if !may {
            return Err(UserCacheError::NotCreatable {
                path: path.to_owned(),
                why: format!("{} is not a directory it may write", dir.display()),
            });
        }
        return Ok(());
    }
    Err(UserCacheError::NotCreatable {
        path: path.to_owned(),
        why: "no ancestor exists".into(),
    })
}

/// Checks that no other user can change `parent`, the directory holding
/// `path`: it is this user's or root's, and not writable by group or others
/// unless it has the sticky bit. One `stat`.
fn check_parent(path: &Path, parent: &Path) -> Result<(), UserCacheError> {
    let meta = std::fs::metadata(parent).map_err(io_error(parent, "stat"))?;
    let (uid, mode) = (crate::sys::libc_info::effective_uid(), meta.mode());
    if (meta.uid() != uid && meta.uid() != 0) || (mode & 0o022 != 0 && mode & 0o1000 == 0) {
        return Err(untrusted(
            path,
            format!(
                "its parent {} may be changed by another user",
                parent.display()
            ),
        ));
    }
    Ok(())
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

/// Whether `name` is a name [`file_name`] gives for `prefix`:
/// `<prefix>-<16 hex digits>.json`.
pub fn is_file_name(prefix: &str, name: &str) -> bool {
    name.strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('-'))
        .and_then(|rest| rest.strip_suffix(".json"))
        .is_some_and(is_hash)
}

/// Whether `text` is a hash as [`file_name`] writes it: 16 hex digits.
pub fn is_hash(text: &str) -> bool {
    text.len() == 16 && text.bytes().all(|b| b.is_ascii_hexdigit())
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

/// Checks that `meta` belongs to this user and that none of the `others`
/// mode bits (0o022: group and others may not write; 0o077: nor enter) is set.
fn check_owner(path: &Path, meta: &std::fs::Metadata, others: u32) -> Result<(), UserCacheError> {
    let uid = crate::sys::libc_info::effective_uid();
    if meta.uid() != uid {
        return Err(untrusted(
            path,
            format!("owned by user {}, not by this user ({uid})", meta.uid()),
        ));
    }
    if meta.mode() & others != 0 {
        let what = match others {
            0o022 => "writable by group or others",
            _ => "open to group or others",
        };
        return Err(untrusted(
            path,
            format!("{what} (mode {:o})", meta.mode() & 0o777),
        ));
    }
    Ok(())
}

/// Makes `dir`, a directory [`choose`] picked or one of this user's, ready
/// to hold cache files by the same rules: created with mode 0700 if missing;
/// refused if it is not a directory, is another user's, group or others can
/// write it, or another user can change its parent. Costs a `mkdir` and two
/// `stat`s.
pub fn prepare(dir: &Path) -> Result<(), UserCacheError> {
    ready(&CacheDir::private(dir.to_owned()), Purpose::Write)
}

/// What `how` reads of the cache file `name` in `dir` (at most `max_bytes`
/// of it), once the file is known to be this user's regular file, not
/// writable by group or others, and its path; `Ok(None)` when the directory
/// or the file does not exist. Costs a `stat` of the directory, an `open`,
/// an `fstat` and what `how` reads.
fn read_with(
    dir: &Path,
    name: &str,
    max_bytes: u64,
    how: impl FnOnce(std::io::Take<std::fs::File>) -> std::io::Result<String>,
) -> Result<Option<(String, PathBuf)>, UserCacheError> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if !meta.is_dir() => return Err(untrusted(dir, "not a directory")),
        Ok(meta) => check_owner(dir, &meta, 0o022)?,
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
    check_owner(&path, &meta, 0o022)?;
    let text = how(file.take(max_bytes)).map_err(io_error(&path, "read"))?;
    Ok(Some((text, path)))
}

/// The text of the cache file `name` in `dir` (at most `max_bytes` of it) and
/// its path; `Ok(None)` when the directory or the file does not exist.
/// Costs a `stat` of the directory, an `open`, an `fstat` and one read.
pub fn read(
    dir: &Path,
    name: &str,
    max_bytes: u64,
) -> Result<Option<(String, PathBuf)>, UserCacheError> {
    read_with(dir, name, max_bytes, |mut file| {
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        Ok(text)
    })
}

/// As [`read`], but only the first line, without its newline (at most
/// `max_bytes` of it): for a file whose first line says what it is (its
/// key). Reads little past that line (one buffer).
pub fn read_first_line(
    dir: &Path,
    name: &str,
    max_bytes: u64,
) -> Result<Option<(String, PathBuf)>, UserCacheError> {
    use std::io::BufRead;
    read_with(dir, name, max_bytes, |file| {
        let mut line = Vec::new();
        std::io::BufReader::new(file).read_until(b'\n', &mut line)?;
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        String::from_utf8(line).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    })
}

/// One of this user's files in a cache directory, as [`files`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheFile {
    /// Its name in the directory.
    pub name: String,
    /// Its path.
    pub path: PathBuf,
    /// When it was last written or marked used ([`mark_used`]).
    pub modified: std::time::SystemTime,
}

/// The files of `dir` whose names `ours` accepts and that are this user's
/// regular files (by `lstat`: a link is left out, never followed, and so is
/// anything else that is not a regular file, or is another user's), in name
/// order; none when `dir` cannot be read. One directory read and an `lstat`
/// per accepted name; no file is opened.
pub fn files(dir: &Path, ours: impl Fn(&str) -> bool) -> Vec<CacheFile> {
    let uid = crate::sys::libc_info::effective_uid();
    crate::sys::file::names_in(dir)
        .into_iter()
        .filter(|name| ours(name))
        .filter_map(|name| {
            let path = dir.join(&name);
            let meta = std::fs::symlink_metadata(&path).ok()?;
            if !meta.is_file() || meta.uid() != uid {
                return None;
            }
            let modified = meta.modified().ok()?;
            Some(CacheFile {
                name,
                path,
                modified,
            })
        })
        .collect()
}

/// Removes from `dir` the files of one kind, those [`files`] lists for
/// `ours` other than `keep` (the entry just written, or in use), that can
/// never be used again (`stale` says so), then, beyond `max_files` of the
/// kind (counting `keep`), the least recently used (oldest [`CacheFile::modified`]).
/// Returns what it removed. Best effort: a file that cannot be removed
/// stays, and nothing fails. One directory read, an `lstat` per file of the
/// kind, what `stale` costs, and an `unlink` per file removed.
pub fn prune(
    dir: &Path,
    ours: impl Fn(&str) -> bool,
    keep: &str,
    max_files: usize,
    mut stale: impl FnMut(&CacheFile) -> bool,
) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let mut kept = Vec::new();
    for file in files(dir, |name| name != keep && ours(name)) {
        if stale(&file) && std::fs::remove_file(&file.path).is_ok() {
            removed.push(file.path);
        } else {
            kept.push(file);
        }
    }
    // Newest first; the same time in name order, so the choice is stable.
    kept.sort_by(|a, b| b.modified.cmp(&a.modified).then(a.name.cmp(&b.name)));
    for file in kept.into_iter().skip(max_files.saturating_sub(1)) {
        if std::fs::remove_file(&file.path).is_ok() {
            removed.push(file.path);
        }
    }
    removed
}

/// Marks the cache file at `path` as used now: sets its modification time,
/// which [`prune`] goes by, never through a link. Best effort: an `open`
/// and a `futimens`.
pub fn mark_used(path: &Path) {
    if let Ok(f) = crate::sys::create::open_read_no_follow(path) {
        let _ = f.set_modified(std::time::SystemTime::now());
    }
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
    fn candidates_prefer_the_users_cache() {
        let c = candidates(
            Some(OsStr::new("/x/cache")),
            Some(OsStr::new("/home/u")),
            Path::new("/tmp"),
            1000,
        );
        let paths: Vec<&Path> = c.iter().map(|d| d.path.as_path()).collect();
        assert_eq!(
            paths,
            [
                Path::new("/x/cache/pagewise"),
                Path::new("/home/u/.cache/pagewise"),
                Path::new("/tmp/pagewise-1000")
            ]
        );
        assert!(c[2].shared_parent && !c[0].shared_parent && !c[1].shared_parent);
        let c = candidates(Some(OsStr::new("relative")), None, Path::new("/tmp"), 0);
        assert_eq!(c.len(), 1);
    }

    /// A home that cannot hold a cache (as for the nobody user, whose home
    /// is /nonexistent) falls back to the private directory in the shared
    /// temporary one, created 0700; reading finds it there afterwards.
    #[test]
    fn an_unusable_home_falls_back_to_a_private_temporary_directory() {
        let root = tempfile::tempdir().unwrap();
        let not_a_dir = root.path().join("home-is-a-file");
        std::fs::write(&not_a_dir, "").unwrap();
        let tmp = root.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let uid = crate::sys::libc_info::effective_uid();
        let dirs = candidates(None, Some(not_a_dir.as_os_str()), &tmp, uid);
        let private = tmp.join(format!("pagewise-{uid}"));
        // Reading looks where a write would go, and creates nothing.
        let read = choose(&dirs, Purpose::Read).unwrap();
        assert_eq!(read.path, private);
        assert!(!private.exists());
        let chosen = choose(&dirs, Purpose::Write).unwrap();
        assert_eq!(chosen.path, private);
        assert_eq!(chosen.passed_over.len(), 1, "{:?}", chosen.passed_over);
        assert!(chosen.passed_over[0].contains("create directory failed"));
        assert_eq!(read.passed_over.len(), 1, "{:?}", read.passed_over);
        assert!(
            read.passed_over[0].contains("could not create it"),
            "{read:?}"
        );
        assert_eq!(std::fs::metadata(&private).unwrap().mode() & 0o777, 0o700);
        assert_eq!(choose(&dirs, Purpose::Read).unwrap().path, private);
        // A usable place that does not exist yet is the one read (and empty),
        // not a later one that does.
        let xdg = root.path().join("xdg");
        let dirs = candidates(Some(xdg.as_os_str()), None, &tmp, uid);
        assert_eq!(
            choose(&dirs, Purpose::Read).unwrap().path,
            xdg.join("pagewise")
        );
        assert!(!xdg.exists());
    }

    /// Links, directories others can write to (or, in the shared temporary
    /// directory, enter) and directories whose parent others can change are
    /// passed over, with why, for reading as for writing.
    #[test]
    fn unsafe_directories_are_passed_over_with_a_reason() {
        let root = tempfile::tempdir().unwrap();
        let elsewhere = root.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let linked = root.path().join("linked");
        std::os::unix::fs::symlink(&elsewhere, &linked).unwrap();
        let open = root.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let shared = root.path().join("pagewise-shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
        let loose_parent = root.path().join("loose");
        std::fs::create_dir(&loose_parent).unwrap();
        std::fs::set_permissions(&loose_parent, std::fs::Permissions::from_mode(0o777)).unwrap();
        let under_loose = loose_parent.join("pagewise");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&under_loose)
            .unwrap();
        let good = root.path().join("good");
        std::fs::create_dir(&good).unwrap();
        let dirs = [
            CacheDir::private(linked),
            CacheDir::private(open),
            CacheDir {
                path: shared,
                shared_parent: true,
            },
            CacheDir::private(under_loose),
            CacheDir::private(good.clone()),
        ];
        for purpose in [Purpose::Read, Purpose::Write] {
            let chosen = choose(&dirs, purpose).unwrap();
            assert_eq!(chosen.path, good);
            let why = &chosen.passed_over;
            assert_eq!(why.len(), 4, "{why:?}");
            assert!(why[0].contains("a link is never followed"), "{why:?}");
            assert!(why[1].contains("writable by group or others"), "{why:?}");
            assert!(why[2].contains("open to group or others"), "{why:?}");
            assert!(why[3].contains("may be changed by another user"), "{why:?}");
        }
        assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none());
        let Err(UserCacheError::NoUsableDirectory(why)) = choose(&dirs[..4], Purpose::Write) else {
            panic!("an unsafe directory was chosen");
        };
        assert_eq!(why.len(), 4);
    }

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
