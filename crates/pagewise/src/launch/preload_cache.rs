//! A private, per-user place on disk for the preload library that the
//! `pagewise` binary carries inside itself, so `run --huge-text` needs no
//! second file to be installed.
//!
//! The loader needs a path, so the library is written out on first use, to
//! the per-user cache directory every pagewise cache uses, chosen by the
//! same rule ([`user_cache::choose`]: `$XDG_CACHE_HOME/pagewise`, else
//! `~/.cache/pagewise`, else `$TMPDIR/pagewise-UID`, the first that is safe),
//! here also refusing a file system that does not allow mapping code
//! (`noexec`: the loader could not map the library and would run the
//! program without it), under a name that holds a hash of its content.
//! The file is written whole under a temporary name (exclusively, never
//! through a link) and renamed into place, so no one ever loads half a
//! library; an existing file is used only when it is this user's regular
//! file, not writable by group or others, with exactly the expected bytes.

use crate::host::user_cache::{self, CacheDir, Purpose, UserCacheError};
use crate::sys::create;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

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

/// Puts `bytes` at `DIR/name` in the first of `dirs` that is safe for code
/// ([`user_cache::choose`] with [`Purpose::Code`]) and where the file can be
/// written, or finds them already there. Cost: a few `stat`s; a read and
/// compare of the existing file; a write of `bytes` when it is not right.
pub fn install(bytes: &[u8], name: &str, dirs: &[CacheDir]) -> Result<Installed, NoSafePlace> {
    let mut passed_over = Vec::new();
    let mut rest = dirs;
    loop {
        let chosen = match user_cache::choose(rest, Purpose::Code) {
            Ok(chosen) => chosen,
            Err(UserCacheError::NoUsableDirectory(why)) => {
                passed_over.extend(why);
                return Err(NoSafePlace(passed_over));
            }
            Err(e) => {
                passed_over.push(e.to_string());
                return Err(NoSafePlace(passed_over));
            }
        };
        passed_over.extend(chosen.passed_over);
        let path = chosen.path.join(name);
        match place(&path, bytes) {
            Ok(written) => {
                let removed = match written {
                    true => {
                        remove_unused_versions(&chosen.path, name, std::time::SystemTime::now())
                    }
                    false => Vec::new(),
                };
                return Ok(Installed {
                    path,
                    written,
                    passed_over,
                    removed,
                });
            }
            Err(e) => passed_over.push(format!("{}: {e}", path.display())),
        }
        // The places after the one that could not take the file.
        let next = rest
            .iter()
            .position(|d| d.path == chosen.path)
            .map_or(rest.len(), |i| i + 1);
        rest = &rest[next..];
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
/// before `now`, and returns them. Best effort ([`user_cache::prune`]): one
/// directory read, an `lstat` per entry.
fn remove_unused_versions(dir: &Path, name: &str, now: std::time::SystemTime) -> Vec<PathBuf> {
    let Some((stem, _)) = name.rsplit_once('-') else {
        return Vec::new();
    };
    let family = format!("{stem}-");
    let version = |other: &str| other.starts_with(&family) && other.ends_with(".so");
    let unused = |f: &user_cache::CacheFile| {
        now.duration_since(f.modified)
            .is_ok_and(|age| age >= UNUSED_FOR)
    };
    user_cache::prune(dir, version, name, usize::MAX, unused)
}

/// Makes `path` hold `bytes`; `Ok(true)` when it had to be written. A file
/// that already holds them has its modification time refreshed: the mark of
/// a version in use ([`remove_unused_versions`]).
fn place(path: &Path, bytes: &[u8]) -> std::io::Result<bool> {
    if holds(path, bytes) {
        user_cache::mark_used(path);
        return Ok(false);
    }
    create::replace_file(path, bytes, 0o644).map_err(|e| e.source)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::file;
    use std::os::unix::fs::DirBuilderExt;

    fn private(path: PathBuf) -> CacheDir {
        CacheDir::private(path)
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

    /// Places are chosen as every cache chooses them (an unsafe one is
    /// passed over, see `user_cache`), and a safe place where the file
    /// cannot be written is passed over too, with why.
    #[test]
    fn a_place_that_cannot_take_the_file_is_passed_over() {
        let root = tempfile::tempdir().unwrap();
        let open = root.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let blocked = root.path().join("blocked");
        // A directory where the library's file should go.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(blocked.join("lib.so"))
            .unwrap();
        let good = private(root.path().join("good"));
        let dirs = [private(open), private(blocked), good.clone()];
        let got = install(b"library", "lib.so", &dirs).unwrap();
        assert_eq!(got.path, good.path.join("lib.so"));
        assert_eq!(got.passed_over.len(), 2, "{:?}", got.passed_over);
        assert!(got.passed_over[0].contains("writable by group or others"));
        assert!(
            got.passed_over[1].contains("blocked/lib.so"),
            "{:?}",
            got.passed_over
        );
        let err = install(b"library", "lib.so", &dirs[..2]).unwrap_err();
        assert_eq!(err.0.len(), 2, "{:?}", err.0);
    }
}
