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
//! - [`order`]: C3 function ordering, order files, and page footprints.

pub mod function_table;
pub mod huge;
pub mod order;
pub mod perfmap;
pub mod pprof;
pub mod profile;

use std::path::Path;

/// The hot 2 MiB pages of each object in a profile (for `--huge-text=hot:PROFILE`):
/// the link-time addresses of the sampled instruction pointers and of the
/// functions they fall in, per object file name. Symbolic frames (`perf
/// script`) are resolved through the object's symbol table.
pub fn hot_pages_from_profile(path: &Path) -> Result<Vec<huge::HotPages>, String> {
    let profile = profile::Profile::read(path).map_err(|e| e.to_string())?;
    let mut by_object: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    let mut tables: std::collections::HashMap<String, Option<function_table::FunctionTable>> =
        Default::default();
    for (_, stack) in &profile.stacks {
        for location in stack {
            let Some(object) = location.object() else {
                continue;
            };
            let table = tables
                .entry(object.to_owned())
                .or_insert_with(|| function_table::FunctionTable::read(Path::new(object)).ok());
            let resolved = match (table.as_ref(), location) {
                (Some(t), l) => order::resolve(l, t, Path::new(object)).map(|(i, addr)| {
                    let f = &t.functions()[i];
                    vec![addr, f.vaddr, f.vaddr.saturating_add(f.size - 1)]
                }),
                (None, profile::Location::Address { vaddr, .. }) => Some(vec![*vaddr]),
                (None, _) => None,
            };
            if let Some(addresses) = resolved {
                let name = object.rsplit('/').next().unwrap_or(object).to_owned();
                by_object.entry(name).or_default().extend(addresses);
            }
        }
    }
    if by_object.is_empty() {
        return Err(format!(
            "{}: no sample resolves to a known object",
            path.display()
        ));
    }
    Ok(by_object
        .into_iter()
        .map(|(object, addresses)| huge::HotPages { object, addresses })
        .collect())
}
