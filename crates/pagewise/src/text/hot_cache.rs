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
    let name = user_cache::file_name("hot-pages", &key);
    let dir = match dir {
        Ok(dir) => dir,
        Err(e) => {
            let hot = super::hot_pages_from_profile(profile, libs)?;
            return Ok((hot, HotSource::NotSaved(e.to_string())));
        }
    };
    if let Ok(Some((text, path))) = user_cache::read(&dir, &name, MAX_ENTRY_BYTES) {
        if let Some(hot) = still_valid(&text, &profile_path, libs) {
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
            Ok(path) => HotSource::Saved(path),
            Err(e) => HotSource::NotSaved(e.to_string()),
        },
        Err(e) => HotSource::NotSaved(e.to_string()),
    };
    Ok((hot, source))
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
