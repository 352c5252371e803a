//! Which preload library `pagewise run --huge-text` hands the loader: the one
//! `PAGEWISE_PRELOAD` names, else the one this binary carries (written once to
//! a private per-user cache, see `pagewise::launch::preload_cache`), else
//! `libpagewise_preload.so` beside the binary (a developer's build).

use anyhow::Context;
use pagewise::host::user_cache;
use pagewise::launch::huge_text::PreloadUsed;
use pagewise::launch::preload_cache;
use std::path::{Path, PathBuf};

/// The library built by `build.rs` (empty when built without it).
const EMBEDDED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libpagewise_preload.so"));

/// The file name of the cached copy: the content hash keeps versions apart.
fn cached_name() -> String {
    format!("libpagewise_preload-{}.so", env!("PAGEWISE_PRELOAD_HASH"))
}

/// The library to preload and where it came from, plus notes on places
/// passed over on the way (printed with `--report`).
pub fn choose() -> anyhow::Result<(PreloadUsed, Vec<String>)> {
    let used = |path: &Path, source: &str| PreloadUsed {
        path: path.display().to_string(),
        source: source.to_owned(),
    };
    if let Some(path) = std::env::var_os("PAGEWISE_PRELOAD") {
        let path = PathBuf::from(path);
        anyhow::ensure!(
            path.is_file(),
            "PAGEWISE_PRELOAD={} is not a file",
            path.display()
        );
        return Ok((used(&path, "PAGEWISE_PRELOAD"), Vec::new()));
    }
    let mut notes = Vec::new();
    if EMBEDDED.is_empty() {
        notes.push("this pagewise was built without its preload library".to_owned());
    } else {
        match preload_cache::install(EMBEDDED, &cached_name(), &user_cache::candidates_from_env()) {
            Ok(installed) => {
                let source = if installed.written {
                    "embedded (written to the cache now)"
                } else {
                    "embedded (cached)"
                };
                let mut notes: Vec<String> = installed
                    .passed_over
                    .into_iter()
                    .map(|why| format!("passed over {why}"))
                    .collect();
                notes.extend(installed.removed.iter().map(|p| {
                    format!(
                        "removed {}: another version of the library, unused for two weeks",
                        p.display()
                    )
                }));
                return Ok((used(&installed.path, source), notes));
            }
            Err(e) => notes.push(e.to_string()),
        }
    }
    let exe = std::env::current_exe().context("cannot find the pagewise binary")?;
    let beside = exe
        .parent()
        .unwrap_or(Path::new("."))
        .join("libpagewise_preload.so");
    anyhow::ensure!(
        beside.is_file(),
        "no preload library: {}; and {} is missing (build it with `cargo build --release --workspace`, or point PAGEWISE_PRELOAD at it)",
        notes.join("; "),
        beside.display()
    );
    Ok((used(&beside, "beside the pagewise binary"), notes))
}
