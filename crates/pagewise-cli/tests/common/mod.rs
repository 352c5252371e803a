//! Helpers shared by the CLI tests.

use std::path::PathBuf;
use std::sync::OnceLock;

/// The preload library for `pagewise run --huge-text`: next to the test's
/// pagewise binary when `cargo build --workspace` made it, else built once
/// here into a separate target folder (cargo test does not build cdylibs).
#[allow(dead_code)] // each test binary uses the helpers it needs
pub fn preload_library() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let bin = assert_cmd::cargo::cargo_bin("pagewise");
        let beside = bin.parent().unwrap().join("libpagewise_preload.so");
        if beside.is_file() {
            return beside;
        }
        let target = bin
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("preload-for-tests");
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "-q", "-p", "pagewise-preload", "--target-dir"])
            .arg(&target)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo");
        assert!(status.success(), "building pagewise-preload failed");
        target.join("debug").join("libpagewise_preload.so")
    })
    .clone()
}
