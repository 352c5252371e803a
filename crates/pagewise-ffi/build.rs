//! Gives `libpagewise.so` its soname: `libpagewise.so.0.MINOR` while the
//! version is 0.x (where a minor release may break the ABI),
//! `libpagewise.so.MAJOR` from 1.0. Which symbols are exported needs nothing
//! here: rustc links a cdylib with a version script that exports exactly the
//! crate's `#[no_mangle] extern "C"` functions (`pw_*`) and hides the rest,
//! and a test checks `nm -D` of the result.

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_default();
    let minor = std::env::var("CARGO_PKG_VERSION_MINOR").unwrap_or_default();
    let abi = if major == "0" {
        format!("0.{minor}")
    } else {
        major
    };
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpagewise.so.{abi}");
    println!("cargo:rustc-env=PAGEWISE_SONAME=libpagewise.so.{abi}");
}
