//! Hot text on huge pages, and the tools around it.
//!
//! - [`huge`]: move the 2 MiB-aligned part of a process's executable text
//!   (and named libraries) onto huge pages, safely, and report what happened.
//! - [`perfmap`]: read and write `/tmp/perf-PID.map` symbol files, so
//!   profilers can still name code that now lives in anonymous memory.
//! - [`profile`]: sampled call stacks (pagewise's format or `perf script`);
//!   `pagewise::observe::profile_sampler` samples a program into one.
//! - [`pprof`]: pprof profiles (continuous profilers' export) read into a [`profile::Profile`].
//! - [`function_table`]: the functions of an ELF file, and its segment layout.
//! - [`hot_cache`]: the hot pages of a profile, resolved once and cached.
//! - [`order`]: C3 function ordering, order files, and page footprints.

pub mod function_table;
pub mod hot_cache;
pub mod huge;
pub mod order;
pub mod perfmap;
pub mod pprof;
pub mod profile;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The hot 2 MiB pages of each object in a profile (for `--huge-text=hot:PROFILE`):
/// the link-time addresses of the sampled instruction pointers and of the
/// first and last byte of the functions they fall in, per object file name.
/// Symbolic frames (`perf script`) are resolved through the object's symbol
/// table.
///
/// Only the objects a run with `libs` (`--huge-text-lib`) could move are
/// resolved: executables (a file name without `.so`, since a profile may hold
/// the programs a run starts as well as the one it names) and the libraries
/// [`huge::is_chosen`] picks; the rest of the profile is left out.
///
/// Cost: reading the profile, then one pass over each sampled object's symbol
/// and string tables ([`function_table::visit_functions`]) that keeps only the
/// functions the profile names or hits: no table of all functions is built, so
/// a 150 MB library with 250,000 functions costs its tables' read (about 25 MB
/// from the page cache) and a binary search per function, not a name index.
pub fn hot_pages_from_profile(path: &Path, libs: &[String]) -> Result<Vec<huge::HotPages>, String> {
    resolve_hot_pages(path, libs).map(|(hot, _)| hot)
}

/// [`hot_pages_from_profile`], and the object files it looked at, each
/// stamped before it was read (what [`hot_cache`] checks before it reuses the
/// result).
fn resolve_hot_pages(
    path: &Path,
    libs: &[String],
) -> Result<(Vec<huge::HotPages>, Vec<crate::host::user_cache::FileStamp>), String> {
    let profile = profile::Profile::read(path).map_err(|e| e.to_string())?;
    let mut wanted: BTreeMap<&str, SampledCode<'_>> = BTreeMap::new();
    for (_, stack) in &profile.stacks {
        for location in stack {
            match location {
                profile::Location::Address { object, vaddr } => {
                    wanted.entry(object).or_default().addresses.push(*vaddr)
                }
                profile::Location::Symbol {
                    object,
                    name,
                    offset,
                } => wanted
                    .entry(object)
                    .or_default()
                    .symbols
                    .entry(name)
                    .or_default()
                    .push(*offset),
                profile::Location::Unknown(_) => {}
            }
        }
    }
    let mut by_name: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let sampled_objects = wanted.len();
    let mut read = Vec::new();
    for (object, sampled) in wanted {
        let name = object.rsplit('/').next().unwrap_or(object);
        if !huge::is_chosen(name, !name.contains(".so"), libs) {
            continue;
        }
        // Stamped before it is read: a file rebuilt meanwhile is resolved again.
        read.push(crate::host::user_cache::FileStamp::of(object));
        let addresses = sampled.hot_addresses(Path::new(object));
        if !addresses.is_empty() {
            by_name
                .entry(name.to_owned())
                .or_default()
                .extend(addresses);
        }
    }
    if by_name.is_empty() {
        return Err(match sampled_objects {
            0 => format!("{}: no sample resolves to a known object", path.display()),
            n => format!(
                "{}: none of the {n} objects sampled is one this run may move \
                 (an executable, or a library named with --huge-text-lib)",
                path.display()
            ),
        });
    }
    let hot = by_name
        .into_iter()
        .map(|(object, addresses)| huge::HotPages { object, addresses })
        .collect();
    Ok((hot, read))
}

/// What a profile sampled in one object: link-time addresses, and symbol
/// names with offsets into them.
#[derive(Default)]
struct SampledCode<'p> {
    addresses: Vec<u64>,
    symbols: HashMap<&'p str, Vec<u64>>,
}

impl SampledCode<'_> {
    /// The addresses whose pages are hot: every sampled address; for each
    /// function holding one, and each function named, its first and last
    /// byte (and the named offsets). Without readable symbols, only the
    /// sampled addresses (names cannot be placed).
    fn hot_addresses(mut self, object: &Path) -> Vec<u64> {
        self.addresses.sort_unstable();
        self.addresses.dedup();
        let mut hot = self.addresses.clone();
        let _ = function_table::visit_functions(object, |vaddr, size, name| {
            let last = vaddr.saturating_add(size - 1);
            let first_at_or_after = self.addresses.partition_point(|a| *a < vaddr);
            let holds_a_sample = self
                .addresses
                .get(first_at_or_after)
                .is_some_and(|a| *a <= last);
            let named = self.symbols.get(name);
            if holds_a_sample || named.is_some() {
                hot.extend([vaddr, last]);
            }
            if let Some(offsets) = named {
                hot.extend(offsets.iter().filter_map(|o| vaddr.checked_add(*o)));
            }
        });
        hot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two functions of this test binary, by link-time address and size.
    fn two_functions(exe: &Path) -> Vec<function_table::Function> {
        let table = function_table::FunctionTable::read(exe).unwrap();
        table
            .functions()
            .iter()
            .filter(|f| f.size >= 16 && !f.name.contains(['\n', ' ']))
            .take(2)
            .cloned()
            .collect()
    }

    #[test]
    fn hot_pages_hold_sampled_functions_whole_and_skip_libraries_not_named() {
        let exe = std::env::current_exe().unwrap();
        let exe_name = exe.file_name().unwrap().to_str().unwrap().to_owned();
        let f = two_functions(&exe);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.profile");
        let profile = format!(
            "# pagewise-profile 1\nobject 0 {exe}\nobject 1 /nowhere/libother.so.1\nobject 2 /nowhere/prog\n\
             stack 3 0:{a:x} 0:{name}+4\nstack 1 1:1000\nstack 1 2:7000\n",
            exe = exe.display(),
            a = f[0].vaddr + 3,
            name = f[1].name,
        );
        std::fs::write(&path, profile).unwrap();

        let hot = hot_pages_from_profile(&path, &[]).unwrap();
        let names: Vec<&str> = hot.iter().map(|h| h.object.as_str()).collect();
        assert_eq!(names, [exe_name.as_str(), "prog"], "libother is not named");
        let own = &hot[0].addresses;
        let last = |f: &function_table::Function| f.vaddr + f.size - 1;
        for want in [f[0].vaddr, f[0].vaddr + 3, last(&f[0])] {
            assert!(
                own.contains(&want),
                "{want:x} (sampled function) in {own:x?}"
            );
        }
        for want in [f[1].vaddr, f[1].vaddr + 4, last(&f[1])] {
            assert!(own.contains(&want), "{want:x} (named function) in {own:x?}");
        }
        // No readable symbols: the sampled address alone.
        assert_eq!(hot[1].addresses, [0x7000]);

        let with_lib = hot_pages_from_profile(&path, &["libother".to_owned()]).unwrap();
        assert!(with_lib.iter().any(|h| h.object == "libother.so.1"));
    }

    #[test]
    fn a_profile_of_nothing_movable_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.profile");
        std::fs::write(
            &path,
            "# pagewise-profile 1\nobject 0 /nowhere/libc.so.6\nstack 1 0:1000\n",
        )
        .unwrap();
        let err = hot_pages_from_profile(&path, &[]).unwrap_err();
        assert!(err.contains("none of the 1 objects sampled"), "{err}");
        assert!(err.contains("--huge-text-lib"), "{err}");
    }
}
