//! Builds the preload library (`crates/pagewise-preload`) so that the
//! `pagewise` binary carries it inside itself (`include_bytes!`) and
//! `pagewise run --huge-text` works after a plain `cargo install` or `cargo
//! run`, with no second build step.
//!
//! Cargo builds no cdylib for a binary's dependencies, so this runs a second
//! `cargo build -p pagewise-preload` of the same workspace, in the same
//! profile family (`release` for release builds, else `dev`), stripped and
//! without debug info, in its own target folder beside this build's (a cargo
//! must never wait on the target folder of the cargo that runs it). The
//! inherited settings that would send it elsewhere or through another driver
//! (the target folder, `RUSTC_WRAPPER` and clippy's driver, this build's
//! encoded flags) are cleared, so it works under `cargo clippy`, `cargo
//! test` and `cargo install` alike; the jobserver is kept, so both share the
//! same CPUs. `PAGEWISE_EMBED_PRELOAD=0` builds without it (then `run
//! --huge-text` needs `PAGEWISE_PRELOAD` or the library beside the binary).

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Environment a nested cargo must not inherit from the cargo running us.
const CLEARED: &[&str] = &[
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "CARGO_BUILD_RUSTC_WRAPPER",
    "CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET_DIR",
    "CARGO_BUILD_BUILD_DIR",
    "CARGO_BUILD_TARGET",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_PRIMARY_PACKAGE",
    "CLIPPY_ARGS",
    "CLIPPY_CONF_DIR",
    "__CARGO_FIX_PLZ",
];

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("cargo did not set {name}"))
}

fn main() {
    let manifest_dir = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env("OUT_DIR"));
    let embedded = out_dir.join("libpagewise_preload.so");
    let workspace = manifest_dir.join("..").join("..");
    let preload_crate = workspace.join("crates").join("pagewise-preload");
    println!("cargo:rerun-if-env-changed=PAGEWISE_EMBED_PRELOAD");
    println!("cargo:rerun-if-changed=build.rs");

    let skip = if std::env::var("PAGEWISE_EMBED_PRELOAD").as_deref() == Ok("0") {
        Some("PAGEWISE_EMBED_PRELOAD=0")
    } else if !preload_crate.join("Cargo.toml").is_file() {
        Some("crates/pagewise-preload is not beside this crate")
    } else {
        None
    };
    if let Some(why) = skip {
        println!("cargo:warning=pagewise is built without its preload library ({why}): `run --huge-text` will need PAGEWISE_PRELOAD or libpagewise_preload.so beside the binary");
        std::fs::write(&embedded, b"").expect("write OUT_DIR");
        println!("cargo:rustc-env=PAGEWISE_PRELOAD_HASH=none");
        return;
    }
    for input in [
        "Cargo.toml",
        "Cargo.lock",
        "crates/pagewise/Cargo.toml",
        "crates/pagewise/src",
        "crates/pagewise-preload/Cargo.toml",
        "crates/pagewise-preload/src",
    ] {
        println!("cargo:rerun-if-changed={}", workspace.join(input).display());
    }

    let (profile, profile_dir) = match env("PROFILE").as_str() {
        "release" => ("release", "release"),
        _ => ("dev", "debug"),
    };
    let target = env("TARGET");
    let target_dir = nested_target_dir(&out_dir);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .arg("build")
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"))
        .args(["-p", "pagewise-preload", "--profile", profile, "--target"])
        .arg(&target)
        .arg("--target-dir")
        .arg(&target_dir)
        .args(["--config", &format!("profile.{profile}.debug=0")])
        .args(["--config", &format!("profile.{profile}.strip=true")]);
    for name in CLEARED {
        command.env_remove(name);
    }
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run cargo to build the preload library: {e}"));
    if !output.status.success() {
        panic!(
            "building the preload library failed ({}); set PAGEWISE_EMBED_PRELOAD=0 to build pagewise without it:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let built = target_dir
        .join(&target)
        .join(profile_dir)
        .join("libpagewise_preload.so");
    let bytes =
        std::fs::read(&built).unwrap_or_else(|e| panic!("cannot read {}: {e}", built.display()));
    std::fs::write(&embedded, &bytes).expect("write OUT_DIR");
    // Names the cached copy, so versions never share a file; the content is
    // compared byte for byte before a cached copy is used.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut hasher);
    println!(
        "cargo:rustc-env=PAGEWISE_PRELOAD_HASH={:016x}",
        hasher.finish()
    );
}

/// `<target>/<profile>/pagewise-preload-build`, from
/// `OUT_DIR = <target>/<profile>/build/pagewise-cli-HASH/out`: one per
/// profile, shared by `cargo build`, `test` and `clippy`, so the library is
/// built once and then only checked. Else a folder in `OUT_DIR`.
fn nested_target_dir(out_dir: &Path) -> PathBuf {
    let looks_usual = out_dir.file_name().is_some_and(|n| n == "out")
        && out_dir
            .parent()
            .and_then(Path::parent)
            .and_then(Path::file_name)
            .is_some_and(|n| n == "build");
    match out_dir.ancestors().nth(3) {
        Some(profile_dir) if looks_usual => profile_dir.join("pagewise-preload-build"),
        _ => out_dir.join("pagewise-preload-build"),
    }
}
