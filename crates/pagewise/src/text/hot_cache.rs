//! The hot pages of a profile, resolved once and kept in the per-user cache
//! ([`crate::host::user_cache`]), so `pagewise run --huge-text=hot:PROFILE`
//! pays for reading the profile and the symbol tables once, not on every
//! launch (a `perf.data` file costs a `perf script` run, about 0.6 s for a
//! rustc profile; a profile of symbols or addresses about 50 ms).
//!
//! An entry is reused only while the profile and every object file the
//! resolution read are the same files (path, device, inode, size and
//! modification time all equal) and the same libraries are asked for;
//! anything else resolves the profile again and replaces the entry.

use super::huge::HotPages;
use crate::host::user_cache::{self, FileStamp, UserCacheError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// JSON schema of a cache entry.
pub const SCHEMA: &str = "pagewise.hot-pages/2";

/// Largest entry read (a few KiB per object: one address per hot 4 KiB page).
const MAX_ENTRY_BYTES: u64 = 16 << 20;

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    schema: String,
    profile: FileStamp,
    libs: Vec<String>,
    objects: Vec<FileStamp>,
    /// Per object file name, the hot 4 KiB pages (link-time addresses).
    hot: Vec<(String, Vec<u64>)>,
}

/// Where the hot pages came from, to say in the run's report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HotSource {
    /// Reused from this cache file.
    Cached(PathBuf),
    /// Resolved now and saved to this cache file.
    Saved(PathBuf),
    /// Resolved now; not saved, for this reason.
    NotSaved(String),
}

/// The hot pages of `profile` for a run that may move `libs` (see
/// [`super::hot_pages_from_profile`]), from the cache in `dir` when an entry
/// there still holds, else resolved and saved there. Cost with a valid
/// entry: a `stat` per file it names and one read of the entry.
pub fn hot_pages(
    profile: &Path,
    libs: &[String],
    dir: Result<PathBuf, UserCacheError>,
) -> Result<(Vec<HotPages>, HotSource), String> {
    let profile_path = std::fs::canonicalize(profile)
        .map_err(|e| format!("{}: {e}", profile.display()))?
        .to_string_lossy()
        .into_owned();
    let key = format!("{profile_path}\0{}", libs.join("\0"));
    let name = user_cache::file_name(PREFIX, &key);
    let dir = match dir {
        Ok(dir) => dir,
        Err(e) => {
            let hot = super::hot_pages_from_profile(profile, libs)?;
            return Ok((hot, HotSource::NotSaved(e.to_string())));
        }
    };
    if let Ok(Some((text, path))) = user_cache::read(&dir, &name, MAX_ENTRY_BYTES) {
        if let Some(hot) = still_valid(&text, &profile_path, libs) {
            user_cache::mark_used(&path);
            return Ok((hot, HotSource::Cached(path)));
        }
    }
    // Stamped before reading, so a profile rewritten meanwhile is resolved again next time.
    let profile_stamp = FileStamp::of(&profile_path);
    let (hot, objects) = super::resolve_hot_pages(profile, libs)?;
    let entry = Entry {
        schema: SCHEMA.to_owned(),
        profile: profile_stamp,
        libs: libs.to_vec(),
        objects,
        hot: hot
            .iter()
            .map(|h| (h.object.clone(), h.addresses.clone()))
            .collect(),
    };
    let source = match serde_json::to_vec(&entry) {
        Ok(bytes) => match user_cache::write(&dir, &name, &bytes) {
            Ok(path) => {
                remove_stale_entries(&dir, &name, MAX_ENTRIES);
                HotSource::Saved(path)
            }
            Err(e) => HotSource::NotSaved(e.to_string()),
        },
        Err(e) => HotSource::NotSaved(e.to_string()),
    };
    Ok((hot, source))
}

/// The most entries kept (one per profile and set of libraries); beyond it,
/// saving a new one removes the least recently used.
const MAX_ENTRIES: usize = 64;

/// The file name prefix of an entry: `hot-pages-<16 hex digits>.json`.
const PREFIX: &str = "hot-pages";

/// Removes from `dir` the entries other than `keep` (the one just written)
/// that can never be used again: another schema's, or those whose profile is
/// gone or has changed since (path, device, inode, size, modification time);
/// then, beyond `max_entries`, the least recently used (a reused entry is
/// marked used). Only files named as this cache names them are looked at; one
/// that does not parse is left to the bound. Best effort
/// ([`user_cache::prune`]): one directory read, and per entry an `lstat`, a
/// read of the entry (a few KiB per object it names) and a `stat` of its
/// profile.
fn remove_stale_entries(dir: &Path, keep: &str, max_entries: usize) -> Vec<PathBuf> {
    let gone = |f: &user_cache::CacheFile| {
        let Ok(Some((text, _))) = user_cache::read(dir, &f.name, MAX_ENTRY_BYTES) else {
            return false;
        };
        #[derive(Deserialize)]
        struct Head {
            schema: String,
            profile: FileStamp,
        }
        serde_json::from_str::<Head>(&text)
            .is_ok_and(|head| head.schema != SCHEMA || !head.profile.still_holds())
    };
    user_cache::prune(
        dir,
        |name| user_cache::is_file_name(PREFIX, name),
        keep,
        max_entries,
        gone,
    )
}

/// The entry's hot pages when it is for this profile and these libraries and
/// every file it names is unchanged.
fn still_valid(text: &str, profile_path: &str, libs: &[String]) -> Option<Vec<HotPages>> {
    let entry: Entry = serde_json::from_str(text).ok()?;
    let fresh = entry.schema == SCHEMA
        && entry.profile.path() == profile_path
        && entry.libs == libs
        && entry.profile.still_holds()
        && entry.objects.iter().all(FileStamp::still_holds);
    fresh.then(|| {
        entry
            .hot
            .into_iter()
            .map(|(object, addresses)| HotPages { object, addresses })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile_of(dir: &Path, object: &Path, addr: u64) -> PathBuf {
        let path = dir.join("p.profile");
        let text = format!(
            "# pagewise-profile 1\nobject 0 {}\nstack 1 0:{addr:x}\n",
            object.display()
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn an_entry_is_reused_until_the_profile_or_an_object_changes() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        // An object without symbols: its sampled addresses are the hot pages.
        let object = dir.path().join("prog");
        std::fs::write(&object, "not an ELF file").unwrap();
        let profile = profile_of(dir.path(), &object, 0x7000);
        let first = hot_pages(&profile, &[], Ok(cache.clone())).unwrap();
        assert!(matches!(first.1, HotSource::Saved(_)), "{:?}", first.1);
        assert_eq!(first.0[0].addresses, [0x7000]);
        let second = hot_pages(&profile, &[], Ok(cache.clone())).unwrap();
        assert!(matches!(second.1, HotSource::Cached(_)), "{:?}", second.1);
        assert_eq!(second.0, first.0);
        // Other libraries asked for: another entry.
        let libs = hot_pages(&profile, &["libz".to_owned()], Ok(cache.clone())).unwrap();
        assert!(matches!(libs.1, HotSource::Saved(_)), "{:?}", libs.1);
        // A changed object (another size): resolved again.
        std::fs::write(&object, "not an ELF file, longer").unwrap();
        let third = hot_pages(&profile, &[], Ok(cache.clone())).unwrap();
        assert!(matches!(third.1, HotSource::Saved(_)), "{:?}", third.1);
        // A rewritten profile: resolved again, with its new content.
        std::fs::remove_file(&profile).unwrap();
        let profile = profile_of(dir.path(), &object, 0x9000);
        let fourth = hot_pages(&profile, &[], Ok(cache.clone())).unwrap();
        assert!(matches!(fourth.1, HotSource::Saved(_)), "{:?}", fourth.1);
        assert_eq!(fourth.0[0].addresses, [0x9000]);
    }

    #[test]
    fn saving_an_entry_prunes_entries_of_profiles_gone_or_changed_and_bounds_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let object = dir.path().join("prog");
        std::fs::write(&object, "not an ELF file").unwrap();
        let profile_at = |name: &str, addr: u64| {
            let sub = dir.path().join(name);
            std::fs::create_dir_all(&sub).unwrap();
            profile_of(&sub, &object, addr)
        };
        let (gone, changed, kept) = (
            profile_at("a", 0x1000),
            profile_at("b", 0x2000),
            profile_at("c", 0x3000),
        );
        let saved = |profile: &Path| match hot_pages(profile, &[], Ok(cache.clone())).unwrap().1 {
            HotSource::Saved(path) => path,
            other => panic!("{other:?}"),
        };
        let (gone_entry, changed_entry, kept_entry) = (saved(&gone), saved(&changed), saved(&kept));
        std::fs::remove_file(&gone).unwrap();
        std::fs::write(&changed, "# pagewise-profile 1\n").unwrap();
        // Not ours by name, or not a regular file: never touched.
        let unrelated = cache.join("hot-pages-x.json");
        std::fs::write(&unrelated, "{}").unwrap();
        std::os::unix::fs::symlink(&kept_entry, cache.join("hot-pages-0123456789abcdef.json"))
            .unwrap();
        let fresh = profile_at("d", 0x4000);
        let fresh_entry = saved(&fresh);
        assert!(!gone_entry.exists() && !changed_entry.exists());
        assert!(kept_entry.exists() && fresh_entry.exists() && unrelated.exists());
        assert!(cache
            .join("hot-pages-0123456789abcdef.json")
            .symlink_metadata()
            .is_ok());
        // The bound: beyond it the least recently used goes, and a reused
        // entry counts as used.
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for path in [&kept_entry, &fresh_entry] {
            std::fs::File::options()
                .write(true)
                .open(path)
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
        assert!(matches!(
            hot_pages(&kept, &[], Ok(cache.clone())).unwrap().1,
            HotSource::Cached(_)
        ));
        let newest = profile_at("e", 0x5000);
        let newest_entry = saved(&newest);
        assert_eq!(
            remove_stale_entries(&cache, &user_cache::file_name(PREFIX, "none"), 3),
            vec![fresh_entry.clone()]
        );
        assert!(kept_entry.exists() && newest_entry.exists() && !fresh_entry.exists());
    }

    #[test]
    fn no_cache_directory_still_resolves_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let object = dir.path().join("prog");
        std::fs::write(&object, "x").unwrap();
        let profile = profile_of(dir.path(), &object, 0x1000);
        let (hot, source) = hot_pages(
            &profile,
            &[],
            Err(UserCacheError::NoUsableDirectory(vec!["/x: denied".into()])),
        )
        .unwrap();
        assert_eq!(hot[0].addresses, [0x1000]);
        let HotSource::NotSaved(why) = source else {
            panic!("{source:?}")
        };
        assert!(
            why.contains("no usable cache directory: /x: denied"),
            "{why}"
        );
    }

    #[test]
    fn a_damaged_or_foreign_entry_is_resolved_again() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let object = dir.path().join("prog");
        std::fs::write(&object, "x").unwrap();
        let profile = profile_of(dir.path(), &object, 0x2000);
        let (_, source) = hot_pages(&profile, &[], Ok(cache.clone())).unwrap();
        let HotSource::Saved(path) = source else {
            panic!("{source:?}")
        };
        std::fs::write(&path, "{\"schema\": \"pagewise.hot-pages/1\"").unwrap();
        let (hot, source) = hot_pages(&profile, &[], Ok(cache.clone())).unwrap();
        assert!(matches!(source, HotSource::Saved(_)), "{source:?}");
        assert_eq!(hot[0].addresses, [0x2000]);
    }
}
