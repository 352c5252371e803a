//! The header: current with the code, clean as C11 and C++17, and in step
//! with what `libpagewise.so` exports (only `pw_*`, with the soname).

mod common;

use common::{run_ok, scratch, workspace};
use pagewise_testkit::{skip, Need};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

#[test]
fn header_is_current() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).unwrap();
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir.join("src/lib.rs"))
        .generate()
        .unwrap_or_else(|e| panic!("cbindgen: {e}"));
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).unwrap();
    let path = workspace().join("include/pagewise.h");
    if std::env::var_os("PAGEWISE_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/pagewise.h is stale: run `PAGEWISE_BLESS=1 cargo test -p pagewise-ffi --test header` and commit it"
    );
}

/// The `pw_*` functions the header declares.
fn declared() -> BTreeSet<String> {
    let header = std::fs::read_to_string(workspace().join("include/pagewise.h")).unwrap();
    header
        .lines()
        .filter(|l| !l.starts_with(' ') && !l.starts_with('#') && !l.starts_with('/'))
        .filter_map(|l| {
            let at = l.find("pw_")?;
            let rest = &l[at..];
            let end = rest.find('(')?;
            Some(rest[..end].to_owned())
        })
        .collect()
}

#[test]
fn the_library_exports_exactly_the_declared_pw_functions() {
    let lib = common::library_dir().join("libpagewise.so");
    let out = match Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
    {
        Ok(o) => o,
        Err(e) => skip!(Need::Tool, "nm (binutils) cannot run: {e}"),
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let exported: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_owned))
        .collect();
    let foreign: Vec<_> = exported.iter().filter(|s| !s.starts_with("pw_")).collect();
    assert!(foreign.is_empty(), "exported besides pw_*: {foreign:?}");
    let declared = declared();
    assert!(declared.len() >= 25, "{declared:?}");
    assert_eq!(exported, declared, "header and library disagree");
}

#[test]
fn the_library_has_its_soname() {
    let lib = common::library_dir().join("libpagewise.so");
    let out = match Command::new("readelf").arg("-d").arg(&lib).output() {
        Ok(o) => o,
        Err(e) => skip!(Need::Tool, "readelf (binutils) cannot run: {e}"),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let want = format!(
        "Library soname: [libpagewise.so.{}]",
        if env!("CARGO_PKG_VERSION_MAJOR") == "0" {
            format!("0.{}", env!("CARGO_PKG_VERSION_MINOR"))
        } else {
            env!("CARGO_PKG_VERSION_MAJOR").to_owned()
        }
    );
    assert!(text.contains(&want), "{want} not in:\n{text}");
}

#[test]
fn the_header_compiles_as_c11_with_strict_warnings() {
    let dir = scratch();
    let program = match common::build_c(dir.path(), "header_only", &["-pedantic"]) {
        Ok(p) => p,
        Err(why) => skip!(Need::Compiler, "{why}"),
    };
    let out = run_ok(&program, &[]);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ok "));
}

#[test]
fn the_header_and_the_wrapper_compile_as_cxx17_with_strict_warnings() {
    let dir = scratch();
    // The C test program, compiled as C++: the header alone.
    let as_cxx = dir.path().join("header_only.cpp");
    std::fs::copy(common::c_source("header_only.c"), &as_cxx).unwrap();
    let program = match common::build_cxx(&as_cxx, &dir.path().join("header_only")) {
        Ok(p) => p,
        Err(why) => skip!(Need::Compiler, "{why}"),
    };
    run_ok(&program, &[]);
    // The wrapper alone, included twice (guards) in a unit with no main.
    let unit = dir.path().join("wrapper_only.cpp");
    std::fs::write(
        &unit,
        "#include <pagewise.hpp>\n#include <pagewise.hpp>\nint main() { return pagewise::version().empty(); }\n",
    )
    .unwrap();
    let program = common::build_cxx(&unit, &dir.path().join("wrapper_only")).unwrap();
    run_ok(&program, &[]);
}

#[test]
fn a_program_links_the_static_library() {
    let dir = scratch();
    let inst = common::installed();
    let libs = match Command::new("pkg-config")
        .args(["--static", "--libs-only-l", "pagewise"])
        .env("PKG_CONFIG_PATH", inst.libdir.join("pkgconfig"))
        .output()
    {
        Ok(o) if o.status.success() => String::from_utf8(o.stdout).unwrap(),
        Ok(o) => panic!("{}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => skip!(Need::Tool, "pkg-config cannot run: {e}"),
    };
    let archive = inst.libdir.join("libpagewise.a");
    let include = format!("-I{}", inst.prefix.join("include").display());
    let mut flags = vec![
        "-std=c11", "-Wall", "-Wextra", "-Werror", "-pthread", &include,
    ];
    let archive = archive.to_str().unwrap().to_owned();
    flags.push(&archive);
    flags.extend(libs.split_whitespace().filter(|l| *l != "-lpagewise"));
    let src = common::c_source("queue.c");
    let program =
        match pagewise_testkit::compile_c_file(&src, &dir.path().join("queue_static"), &flags) {
            Ok(p) => p,
            Err(why) => skip!(Need::Compiler, "{why}"),
        };
    let needed = Command::new("readelf").arg("-d").arg(&program).output();
    if let Ok(o) = needed {
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            !text.contains("libpagewise"),
            "linked the shared library:\n{text}"
        );
    }
    let out = run_ok(&program, &[dir.path().to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stdout).ends_with("ok\n"));
}
