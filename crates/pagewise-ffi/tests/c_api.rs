//! The C API from C: one program per capability (tests/c/*.c), built
//! against the installed library with strict warnings and run.

mod common;

use common::{build_c, run_ok, scratch};
use pagewise_testkit::{skip, Need};

/// Builds `tests/c/NAME.c` and runs it with `args` (`{dir}` is replaced by
/// a scratch directory); it must print `ok`.
fn c_program(name: &str, args: &[&str]) {
    let dir = scratch();
    let program = match build_c(dir.path(), name, &[]) {
        Ok(p) => p,
        Err(why) => skip!(Need::Compiler, "{why}"),
    };
    let d = dir.path().to_str().unwrap();
    let args: Vec<String> = args.iter().map(|a| a.replace("{dir}", d)).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_ok(&program, &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.ends_with("ok\n"), "{name} did not finish: {stdout}");
    print!("{stdout}");
}

#[test]
fn queue_from_c() {
    c_program("queue", &["{dir}"]);
}

#[test]
fn bad_handles_null_pointers_and_oversize_records_are_error_codes() {
    c_program("errors", &["{dir}"]);
}

#[test]
fn region_from_c() {
    c_program("region", &[]);
}

#[test]
fn buffer_from_c() {
    c_program("buffer", &[]);
}

#[test]
fn copy_and_fill_from_c_match_memcpy_and_memset() {
    c_program("copy", &[]);
}

#[test]
fn handles_are_safe_across_threads_as_documented() {
    c_program("threads", &["{dir}"]);
}

#[test]
fn the_cxx_wrapper_is_raii_and_throws_the_errno() {
    let dir = scratch();
    let program = match common::build_cxx(
        &common::c_source("wrapper.cpp"),
        &dir.path().join("wrapper"),
    ) {
        Ok(p) => p,
        Err(why) => skip!(Need::Compiler, "{why}"),
    };
    let out = run_ok(&program, &[dir.path().to_str().unwrap()]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
}

/// The pw_copy benchmark harness (bench/copy_bench.c) builds with strict
/// warnings and runs its quick mode; the measurement itself is for a quiet
/// machine (docs/c.md).
#[test]
fn the_copy_benchmark_harness_runs() {
    let dir = scratch();
    let mut flags = vec!["-O2", "-Wall", "-Wextra", "-Werror"];
    let inst = common::installed();
    common::note_pkg_config();
    flags.extend(inst.flags.iter().map(String::as_str));
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/copy_bench.c");
    let program =
        match pagewise_testkit::compile_c_file(&src, &dir.path().join("copy_bench"), &flags) {
            Ok(p) => p,
            Err(why) => skip!(Need::Compiler, "{why}"),
        };
    let out = run_ok(&program, &["--quick"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("4 KiB L1 aligned       ratio pw_copy/memcpy"),
        "{text}"
    );
    assert!(text.contains("16 MiB cold aligned    ratio"), "{text}");
}
