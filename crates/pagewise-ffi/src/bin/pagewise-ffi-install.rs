//! `pagewise-ffi-install`: puts the C library, its headers and a
//! `pagewise.pc` under a prefix, like `make install`.
//!
//! ```sh
//! cargo build --release -p pagewise-ffi      # or --workspace
//! target/release/pagewise-ffi-install --prefix /usr/local
//! ```
//!
//! It installs the `libpagewise.so` and `libpagewise.a` that sit next to
//! it (the same build made them; `--from DIR` names another directory) and
//! the headers it was compiled with, so library and header always match:
//!
//! ```text
//! LIBDIR/libpagewise.so.X.Y.Z        the library
//! LIBDIR/libpagewise.so.SONAME       -> libpagewise.so.X.Y.Z (what programs load)
//! LIBDIR/libpagewise.so              -> the soname link (what `-lpagewise` finds)
//! LIBDIR/libpagewise.a
//! LIBDIR/pkgconfig/pagewise.pc
//! INCLUDEDIR/pagewise.h, pagewise.hpp
//! ```
//!
//! Files are written beside their final name and renamed into place, so a
//! running program that has the old library mapped is not disturbed.
//! `DESTDIR`, as with `make install`, is prepended to every path written
//! (for packaging) but not to the paths in `pagewise.pc`.

#![deny(unsafe_code)]

use clap::Parser;
use std::path::{Path, PathBuf};

const HEADER: &str = include_str!("../../../../include/pagewise.h");
const CXX_HEADER: &str = include_str!("../../../../include/pagewise.hpp");
const VERSION: &str = env!("CARGO_PKG_VERSION");
const SONAME: &str = env!("PAGEWISE_SONAME");
/// What a program that links `libpagewise.a` must link too: the system
/// libraries Rust's standard library uses (`rustc --print
/// native-static-libs`; the static-link test checks the list).
const NATIVE_STATIC_LIBS: &str = "-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc";

/// Install libpagewise (C ABI of pagewise), its headers and pagewise.pc.
#[derive(Debug, Parser)]
#[command(name = "pagewise-ffi-install", version)]
struct Args {
    /// Installation prefix (written into pagewise.pc).
    #[arg(long)]
    prefix: PathBuf,
    /// Library directory [default: PREFIX/lib].
    #[arg(long)]
    libdir: Option<PathBuf>,
    /// Header directory [default: PREFIX/include].
    #[arg(long)]
    includedir: Option<PathBuf>,
    /// Where libpagewise.so and libpagewise.a are [default: this program's directory].
    #[arg(long)]
    from: Option<PathBuf>,
    /// Print what would be installed, change nothing.
    #[arg(long)]
    dry_run: bool,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("pagewise-ffi-install: {e}");
        std::process::exit(1);
    }
}

/// Makes `path` absolute against the current directory.
fn absolute(path: &Path) -> Result<PathBuf, String> {
    std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The text of `pagewise.pc` for these directories.
fn pkg_config(prefix: &Path, libdir: &Path, includedir: &Path) -> String {
    let under_prefix = |dir: &Path| match dir.strip_prefix(prefix) {
        Ok(rest) if rest.as_os_str().is_empty() => "${prefix}".to_owned(),
        Ok(rest) => format!("${{prefix}}/{}", rest.display()),
        Err(_) => dir.display().to_string(),
    };
    format!(
        "prefix={prefix}\n\
         libdir={libdir}\n\
         includedir={includedir}\n\
         \n\
         Name: pagewise\n\
         Description: C ABI of pagewise: mapped queue, huge-page regions, buffers, copy\n\
         Version: {VERSION}\n\
         Libs: -L${{libdir}} -lpagewise\n\
         Libs.private: {NATIVE_STATIC_LIBS}\n\
         Cflags: -I${{includedir}}\n",
        prefix = prefix.display(),
        libdir = under_prefix(libdir),
        includedir = under_prefix(includedir),
    )
}

/// One thing to put in place.
enum Item {
    /// A file with these contents and permission bits.
    File(Vec<u8>, u32),
    /// A symbolic link to this (relative) target.
    Link(String),
}

fn run(args: &Args) -> Result<(), String> {
    let prefix = absolute(&args.prefix)?;
    let libdir = absolute(args.libdir.as_deref().unwrap_or(&prefix.join("lib")))?;
    let includedir = absolute(
        args.includedir
            .as_deref()
            .unwrap_or(&prefix.join("include")),
    )?;
    let from = match &args.from {
        Some(dir) => dir.clone(),
        None => std::env::current_exe()
            .map_err(|e| format!("cannot find this program's directory: {e}; pass --from DIR"))?
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default(),
    };
    let read = |name: &str| {
        let path = from.join(name);
        std::fs::read(&path).map_err(|e| {
            format!(
                "{}: {e}; build the library first (`cargo build --release -p pagewise-ffi`) or pass --from DIR",
                path.display()
            )
        })
    };
    let real = format!("libpagewise.so.{VERSION}");
    let items = vec![
        (
            libdir.join(&real),
            Item::File(read("libpagewise.so")?, 0o755),
        ),
        (libdir.join(SONAME), Item::Link(real)),
        (libdir.join("libpagewise.so"), Item::Link(SONAME.to_owned())),
        (
            libdir.join("libpagewise.a"),
            Item::File(read("libpagewise.a")?, 0o644),
        ),
        (
            libdir.join("pkgconfig/pagewise.pc"),
            Item::File(
                pkg_config(&prefix, &libdir, &includedir).into_bytes(),
                0o644,
            ),
        ),
        (
            includedir.join("pagewise.h"),
            Item::File(HEADER.into(), 0o644),
        ),
        (
            includedir.join("pagewise.hpp"),
            Item::File(CXX_HEADER.into(), 0o644),
        ),
    ];
    let destdir = std::env::var_os("DESTDIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from);
    for (path, item) in items {
        let target = match &destdir {
            Some(d) => d.join(path.strip_prefix("/").unwrap_or(&path)),
            None => path,
        };
        let what = match &item {
            Item::File(bytes, _) => format!("{} bytes", bytes.len()),
            Item::Link(to) => format!("-> {to}"),
        };
        println!(
            "{} {} ({what})",
            if args.dry_run {
                "would install"
            } else {
                "installed"
            },
            target.display()
        );
        if !args.dry_run {
            put(&target, &item)?;
        }
    }
    if !args.dry_run {
        println!(
            "use it with: PKG_CONFIG_PATH={} pkg-config --cflags --libs pagewise",
            libdir.join("pkgconfig").display()
        );
        println!(
            "and, unless {} is a directory the dynamic loader searches (then run ldconfig), \
             link programs with -Wl,-rpath,{} (or run them with LD_LIBRARY_PATH={}) so that \
             they find libpagewise.so",
            libdir.display(),
            libdir.display(),
            libdir.display()
        );
    }
    Ok(())
}

/// Writes `item` at `target` through a temporary name in the same directory.
fn put(target: &Path, item: &Item) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let dir = target.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let name = target.file_name().unwrap_or_default().to_string_lossy();
    let temp = dir.join(format!(".{name}.install-{}", std::process::id()));
    let _ = std::fs::remove_file(&temp);
    let written = match item {
        Item::File(bytes, mode) => std::fs::write(&temp, bytes)
            .and_then(|()| std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(*mode))),
        Item::Link(to) => std::os::unix::fs::symlink(to, &temp),
    };
    written
        .and_then(|()| std::fs::rename(&temp, target))
        .map_err(|e| {
            let _ = std::fs::remove_file(&temp);
            format!("install {}: {e}", target.display())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pc_paths_are_relative_to_the_prefix_when_inside_it() {
        let pc = pkg_config(
            Path::new("/opt/pw"),
            Path::new("/opt/pw/lib64"),
            Path::new("/usr/include/x"),
        );
        assert!(
            pc.starts_with("prefix=/opt/pw\nlibdir=${prefix}/lib64\nincludedir=/usr/include/x\n"),
            "{pc}"
        );
        assert!(pc.contains(&format!("Version: {VERSION}\n")));
        assert!(pc.contains("Libs: -L${libdir} -lpagewise\n"));
    }
}
