//! What the C tests share: the library installed once per test binary by
//! the real installer, and C/C++ compilation against it with the flags
//! `pkg-config` gives.

#![allow(dead_code)]

use pagewise_testkit::{compile_c_file, Need};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The build directory (`target/debug`): the test binary is in its `deps/`.
pub fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

/// Where `libpagewise.so` and `libpagewise.a` of the code under test are:
/// built once per test binary ([`pagewise_testkit::ffi_library_dir`]).
pub fn library_dir() -> &'static Path {
    pagewise_testkit::ffi_library_dir()
}

/// The workspace root.
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A C test source in `tests/c/`.
pub fn c_source(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(name)
}

/// The library as installed under a prefix, and how to build against it.
pub struct Installed {
    pub prefix: PathBuf,
    pub libdir: PathBuf,
    /// Compiler and linker flags for the shared library, from `pkg-config`
    /// (or the same by hand when it is missing), plus an rpath.
    pub flags: Vec<String>,
    /// Why pkg-config was not used, if it was not.
    pub no_pkg_config: Option<String>,
}

/// Runs `pagewise-ffi-install` into `target/debug/pagewise-ffi-tests/NAME`
/// (NAME: this test binary), once per test binary.
pub fn installed() -> &'static Installed {
    static INSTALLED: OnceLock<Installed> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let stem = exe.file_name().unwrap().to_string_lossy().into_owned();
        let stem = stem.split('-').next().unwrap_or("test").to_owned();
        let prefix = build_dir().join("pagewise-ffi-tests").join(stem);
        let _ = std::fs::remove_dir_all(&prefix);
        let out = Command::new(env!("CARGO_BIN_EXE_pagewise-ffi-install"))
            .arg("--prefix")
            .arg(&prefix)
            .arg("--from")
            .arg(library_dir())
            .env_remove("DESTDIR")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "install failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let libdir = prefix.join("lib");
        let pc = Command::new("pkg-config")
            .args(["--cflags", "--libs", "pagewise"])
            .env("PKG_CONFIG_PATH", libdir.join("pkgconfig"))
            .output();
        let (mut flags, no_pkg_config) = match pc {
            Ok(o) if o.status.success() => (
                String::from_utf8(o.stdout)
                    .unwrap()
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect::<Vec<_>>(),
                None,
            ),
            Ok(o) => panic!(
                "pkg-config rejects the installed pagewise.pc: {}",
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => (
                vec![
                    format!("-I{}", prefix.join("include").display()),
                    format!("-L{}", libdir.display()),
                    "-lpagewise".to_owned(),
                ],
                Some(format!("pkg-config cannot run: {e}")),
            ),
        };
        flags.push(format!("-Wl,-rpath,{}", libdir.display()));
        Installed {
            prefix,
            libdir,
            flags,
            no_pkg_config,
        }
    })
}

/// Reports a missing pkg-config as a partial skip (the flags were made by hand).
pub fn note_pkg_config() {
    if let Some(why) = &installed().no_pkg_config {
        pagewise_testkit::skip_part!(
            "pkg-config",
            Need::Tool,
            "{why}; built with the same flags by hand"
        );
    }
}

/// Compiles `tests/c/NAME.c` against the installed library into `dir`.
/// `Err(reason)`: no C compiler here (skip).
pub fn build_c(dir: &Path, name: &str, extra: &[&str]) -> Result<PathBuf, String> {
    let inst = installed();
    note_pkg_config();
    let mut flags: Vec<&str> = vec!["-std=c11", "-Wall", "-Wextra", "-Werror", "-pthread"];
    flags.extend(inst.flags.iter().map(String::as_str));
    flags.extend_from_slice(extra);
    compile_c_file(&c_source(&format!("{name}.c")), &dir.join(name), &flags)
}

/// Compiles the C++ file `src` with g++ -std=c++17 and strict warnings
/// against the installed library; a rejected file fails the test,
/// `Err(reason)` means there is no g++ (skip).
pub fn build_cxx(src: &Path, out: &Path) -> Result<PathBuf, String> {
    let inst = installed();
    note_pkg_config();
    let mut flags = vec!["-std=c++17", "-Wall", "-Wextra", "-Werror", "-pedantic"];
    flags.extend(inst.flags.iter().map(String::as_str));
    pagewise_testkit::compile_with("g++", src, out, &flags)
}

/// Runs a built test program; panics with its output unless it exits 0.
pub fn run_ok(program: &Path, args: &[&str]) -> Output {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{} {:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        program.display(),
        args,
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A scratch directory for one test, on tmpfs when there is one (queues).
pub fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::Builder::new()
            .prefix("pagewise-ffi-")
            .tempdir_in(shm)
            .unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

/// Record `i` of the cross-process tests (the C side has the same
/// generator, `record()` in tests/c/records.h): printable, 8 to 64 bytes.
pub fn record(i: u64) -> Vec<u8> {
    let mut r = format!("{i}:").into_bytes();
    let len = 8 + (i % 57) as usize;
    let mut k = 0u64;
    while r.len() < len {
        r.push(b'a' + ((i + k) % 26) as u8);
        k += 1;
    }
    r
}
