//! A private, per-user place on disk for the preload library that the
//! `pagewise` binary carries inside itself, so `run --huge-text` needs no
//! second file to be installed.
//!
//! The loader needs a path, so the library is written out on first use: to
//! `$XDG_CACHE_HOME/pagewise`, else `~/.cache/pagewise`, else
//! `$TMPDIR/pagewise-UID` (by default `/tmp/pagewise-UID`), the first of these
//! that is safe, under a name that holds a hash of its content. Safe means:
//! a real directory (not a link) owned by this user that no one else can
//! write to (for the one in the shared temporary directory: that no one else
//! can enter), whose parent no one else can write to without the sticky bit,
//! on a file system that allows mapping code (`noexec` is refused, since the
//! loader could not map the library and would run the program without it).
//! The file is written whole under a temporary name (exclusively, never
//! through a link) and renamed into place, so no one ever loads half a
//! library; an existing file is used only when it is this user's regular
//! file, not writable by group or others, with exactly the expected bytes.

use crate::sys::create;
use crate::sys::file;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// One place the library may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheDir {
    /// The directory.
    pub path: PathBuf,
    /// In a shared temporary directory: then it must be private (mode 0700).
    pub shared_parent: bool,
}

/// Where the library may go, best first: `XDG_CACHE_HOME` and `HOME` (when
/// set to absolute paths), then `TMP/pagewise-UID`.
pub fn candidates(
    xdg_cache_home: Option<&OsStr>,
    home: Option<&OsStr>,
    tmp: &Path,
    uid: u32,
) -> Vec<CacheDir> {
    fn absolute(v: Option<&OsStr>) -> Option<&Path> {
        v.map(Path::new).filter(|p| p.is_absolute())
    }
    let mut out = Vec::new();
    if let Some(xdg) = absolute(xdg_cache_home) {
        out.push(xdg.join("pagewise"));
    }
    if let Some(home) = absolute(home) {
        out.push(home.join(".cache").join("pagewise"));
    }
    let mut dirs: Vec<CacheDir> = out
        .into_iter()
        .map(|path| CacheDir {
            path,
            shared_parent: false,
        })
        .collect();
    dirs.dedup();
    dirs.push(CacheDir {
        path: tmp.join(format!("pagewise-{uid}")),
        shared_parent: true,
    });
    dirs
}

/// [`candidates`] from this process's environment and user.
pub fn candidates_from_env() -> Vec<CacheDir> {
    candidates(
        std::env::var_os("XDG_CACHE_HOME").as_deref(),
        std::env::var_os("HOME").as_deref(),
        &std::env::temp_dir(),
        create::effective_uid(),
    )
}

/// A library put in place by [`install`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// Its path.
    pub path: PathBuf,
    /// Written now (`false`: the file was already there with these bytes).
    pub written: bool,
    /// Why earlier places were passed over.
    pub passed_over: Vec<String>,
    /// Other versions of the library removed from the same directory when
    /// this one was written: those no run had used for [`UNUSED_FOR`].
    pub removed: Vec<PathBuf>,
}

/// How long another version of the library (`<stem>-<other hash>.so`, left by
/// an older or newer pagewise) may go unused before writing a new version
/// removes it. Each use refreshes a file's modification time.
pub const UNUSED_FOR: std::time::Duration = std::time::Duration::from_secs(14 * 24 * 3600);

/// No place was safe.
#[derive(Debug, thiserror::Error)]
#[error("nowhere safe to put the preload library: {}", .0.join("; "))]
pub struct NoSafePlace(pub Vec<String>);

/// Puts `bytes` at `DIR/name` in the first of `dirs` that is safe (see the
/// module doc), or finds them already there. Cost: a few `stat`s; a read and
/// compare of the existing file; a write of `bytes` when it is not right.
pub fn install(bytes: &[u8], name: &str, dirs: &[CacheDir]) -> Result<Installed, NoSafePlace> {
    let mut passed_over = Vec::new();
    for dir in dirs {
        let placed = prepare(dir).and_then(|()| {
            let path = dir.path.join(name);
            place(&path, bytes)
                .map(|written| (path, written))
                .map_err(|e| format!("{}: {e}", dir.path.join(name).display()))
        });
        match placed {
            Ok((path, written)) => {
                let removed = match written {
                    true => remove_unused_versions(&dir.path, name, std::time::SystemTime::now()),
                    false => Vec::new(),
                };
                return Ok(Installed {
                    path,
                    written,
                    passed_over,
                    removed,
                });
            }
            Err(why) => passed_over.push(why),
        }
    }
    Err(NoSafePlace(passed_over))
}

/// Makes `dir` if needed and checks it is safe to keep code in.
fn prepare(dir: &CacheDir) -> Result<(), String> {
    let path = &dir.path;
    let say = |why: &dyn std::fmt::Display| format!("{}: {why}", path.display());
    let uid = create::effective_uid();
    if let Some(parent) = path.parent().filter(|_| !dir.shared_parent) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|e| say(&e))?;
        let meta = std::fs::metadata(parent).map_err(|e| say(&e))?;
        let mode = meta.permissions().mode();
        if (meta.uid() != uid && meta.uid() != 0) || (mode & 0o022 != 0 && mode & 0o1000 == 0) {
            return Err(say(&format!(
                "{} may be changed by another user",
                parent.display()
            )));
        }
    }
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(say(&e)),
    }
    let meta = std::fs::symlink_metadata(path).map_err(|e| say(&e))?;
    let others = if dir.shared_parent { 0o077 } else { 0o022 };
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return Err(say(&"not a directory (a link is never followed)"));
    }
    if meta.uid() != uid {
        return Err(say(&format!("belongs to user {}, not {uid}", meta.uid())));
    }
    if meta.permissions().mode() & others != 0 {
        return Err(say(&format!(
            "mode {:o} lets others in",
            meta.permissions().mode() & 0o777
        )));
    }
    match file::is_noexec_mount(path) {
        Ok(false) => Ok(()),
        Ok(true) => Err(say(
            &"on a noexec mount: the loader could not map the library",
        )),
        Err(e) => Err(say(&e)),
    }
}

/// Whether `path` is this user's regular file, not writable by others, holding `bytes`.
fn holds(path: &Path, bytes: &[u8]) -> bool {
    let Ok(mut f) = create::open_read_no_follow(path) else {
        return false;
    };
    let Ok(meta) = f.metadata() else {
        return false;
    };
    if !meta.is_file()
        || meta.uid() != create::effective_uid()
        || meta.permissions().mode() & 0o022 != 0
        || meta.len() != bytes.len() as u64
    {
        return false;
    }
    let mut content = Vec::with_capacity(bytes.len());
    f.read_to_end(&mut content).is_ok() && content == bytes
}

/// Removes from `dir` the other versions of the library `name`
/// (`<stem>-*.so` for a `name` of `<stem>-<hash>.so`) that are this user's
/// regular files unused (not modified, see [`place`]) for [`UNUSED_FOR`]
/// before `now`, and returns them. Best effort: one directory read, an
/// `lstat` per entry.
fn remove_unused_versions(dir: &Path, name: &str, now: std::time::SystemTime) -> Vec<PathBuf> {
    let Some((stem, _)) = name.rsplit_once('-') else {
        return Vec::new();
    };
    let family = format!("{stem}-");
    let mut removed = Vec::new();
    for other in file::names_in(dir) {
        if other == name || !other.starts_with(&family) || !other.ends_with(".so") {
            continue;
        }
        let path = dir.join(&other);
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let unused = meta
            .modified()
            .ok()
            .and_then(|m| now.duration_since(m).ok())
            .is_some_and(|age| age >= UNUSED_FOR);
        if meta.is_file()
            && meta.uid() == create::effective_uid()
            && unused
            && std::fs::remove_file(&path).is_ok()
        {
            removed.push(path);
        }
    }
    removed
}

/// Makes `path` hold `bytes`; `Ok(true)` when it had to be written. A file
/// that already holds them has its modification time refreshed: the mark of
/// a version in use ([`remove_unused_versions`]).
fn place(path: &Path, bytes: &[u8]) -> std::io::Result<bool> {
    if holds(path, bytes) {
        if let Ok(f) = create::open_read_no_follow(path) {
            let _ = f.set_modified(std::time::SystemTime::now());
        }
        return Ok(false);
    }
    create::replace_file(path, bytes, 0o644).map_err(|e| e.source)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn private(path: PathBuf) -> CacheDir {
        CacheDir {
            path,
            shared_parent: false,
        }
    }

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
        assert!(c[2].shared_parent);
        let c = candidates(Some(OsStr::new("relative")), None, Path::new("/tmp"), 0);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn writes_once_then_reuses_and_repairs() {
        let root = tempfile::tempdir().unwrap();
        let dirs = [private(root.path().join("cache/pagewise"))];
        let first = install(b"library v1", "lib.so", &dirs).unwrap();
        assert!(first.written);
        assert_eq!(std::fs::read(&first.path).unwrap(), b"library v1");
        let meta = std::fs::metadata(&dirs[0].path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        assert!(!install(b"library v1", "lib.so", &dirs).unwrap().written);
        // Wrong bytes, or writable by others: written again.
        std::fs::write(&first.path, b"library v0").unwrap();
        assert!(install(b"library v1", "lib.so", &dirs).unwrap().written);
        std::fs::set_permissions(&first.path, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(install(b"library v1", "lib.so", &dirs).unwrap().written);
        assert_eq!(
            std::fs::metadata(&first.path).unwrap().permissions().mode() & 0o022,
            0
        );
        // Another user's file (root can make one) is never used.
        if create::effective_uid() == 0 {
            std::os::unix::fs::chown(&first.path, Some(65534), Some(65534)).unwrap();
            assert!(install(b"library v1", "lib.so", &dirs).unwrap().written);
            let meta = std::fs::metadata(&first.path).unwrap();
            assert_eq!(meta.uid(), 0);
        }
        // No temporary file is left.
        assert_eq!(file::names_in(&dirs[0].path), ["lib.so"]);
    }

    #[test]
    fn writing_a_version_removes_only_others_unused_for_two_weeks() {
        let root = tempfile::tempdir().unwrap();
        let dirs = [private(root.path().join("cache/pagewise"))];
        let dir = &dirs[0].path;
        let old = install(b"old", "libx-1111.so", &dirs).unwrap().path;
        let recent = install(b"recent", "libx-2222.so", &dirs).unwrap().path;
        let unrelated = dir.join("other-3333.so");
        std::fs::write(&unrelated, b"x").unwrap();
        let weeks_ago = std::time::SystemTime::now() - UNUSED_FOR * 2;
        for p in [&old, &unrelated] {
            let f = std::fs::File::open(p).unwrap();
            f.set_modified(weeks_ago).unwrap();
        }
        // Used again: its time is refreshed, so it is not unused any more.
        let again = install(b"old", "libx-1111.so", &dirs).unwrap();
        assert!(!again.written && again.removed.is_empty());
        std::fs::File::open(&old)
            .unwrap()
            .set_modified(weeks_ago)
            .unwrap();
        let new = install(b"new", "libx-4444.so", &dirs).unwrap();
        assert_eq!(new.removed, std::slice::from_ref(&old));
        assert!(!old.exists() && recent.exists() && unrelated.exists());
        // Nothing is removed when nothing was written.
        assert!(install(b"new", "libx-4444.so", &dirs)
            .unwrap()
            .removed
            .is_empty());
    }

    #[test]
    fn a_planted_link_is_replaced_not_followed() {
        let root = tempfile::tempdir().unwrap();
        let dirs = [private(root.path().join("pagewise"))];
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dirs[0].path)
            .unwrap();
        let victim = root.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, dirs[0].path.join("lib.so")).unwrap();
        let got = install(b"library", "lib.so", &dirs).unwrap();
        assert!(got.written);
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(!std::fs::symlink_metadata(&got.path)
            .unwrap()
            .file_type()
            .is_symlink());
    }

    #[test]
    fn unsafe_directories_are_passed_over_with_a_reason() {
        let root = tempfile::tempdir().unwrap();
        // A link where the directory should be.
        let elsewhere = root.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let linked = root.path().join("linked");
        std::os::unix::fs::symlink(&elsewhere, &linked).unwrap();
        // A directory others can write to.
        let open = root.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        // In a shared temporary directory, a directory others can enter.
        let shared = root.path().join("pagewise-shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
        let good = private(root.path().join("good"));
        let dirs = [
            private(linked),
            private(open),
            CacheDir {
                path: shared,
                shared_parent: true,
            },
            good.clone(),
        ];
        let got = install(b"library", "lib.so", &dirs).unwrap();
        assert_eq!(got.path, good.path.join("lib.so"));
        assert_eq!(got.passed_over.len(), 3, "{:?}", got.passed_over);
        assert!(got.passed_over[0].contains("link"), "{:?}", got.passed_over);
        assert!(got.passed_over[1].contains("lets others in"));
        assert!(got.passed_over[2].contains("lets others in"));
        assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none());
        let err = install(b"library", "lib.so", &dirs[..3]).unwrap_err();
        assert_eq!(err.0.len(), 3);
    }
}
