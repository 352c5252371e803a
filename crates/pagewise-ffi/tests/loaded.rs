//! The built `libpagewise.so` loaded with `dlopen` through
//! `pagewise::os::dl::Library` (what `pagewise bench memcpy --c-library`
//! does): its entry points are found and do what the header says.

mod common;

use pagewise::os::dl::{DlError, Library};

fn library() -> Library {
    Library::open(&common::library_dir().join("libpagewise.so")).expect("load libpagewise.so")
}

#[test]
fn pw_copy_through_the_dlsym_pointer_copies() {
    let lib = library();
    let copy = lib.pw_copy().unwrap();
    for n in [0usize, 1, 7, 64, 4096, 100_000] {
        let src: Vec<u8> = (0..n).map(|i| (i * 31 + 7) as u8).collect();
        let mut dst = vec![0xeeu8; n + 3];
        assert_eq!(copy.call(&mut dst[..n], &src), 0, "{n}");
        assert_eq!(&dst[..n], &src[..]);
        assert_eq!(&dst[n..], &[0xee; 3], "wrote past the end at {n}");
    }
    // Unequal lengths copy the shorter one, as the wrapper promises.
    let mut dst = [0u8; 4];
    assert_eq!(copy.call(&mut dst, &[1, 2]), 0);
    assert_eq!(dst, [1, 2, 0, 0]);
}

#[test]
fn pw_fill_through_the_dlsym_pointer_fills() {
    let lib = library();
    let fill = lib.pw_fill().unwrap();
    for n in [0usize, 1, 33, 4096, 70_000] {
        let mut dst = vec![0u8; n + 2];
        assert_eq!(fill.call(&mut dst[..n], 0xa5), 0, "{n}");
        assert!(dst[..n].iter().all(|&b| b == 0xa5));
        assert_eq!(&dst[n..], &[0, 0]);
    }
}

#[test]
fn pw_version_is_the_packages() {
    assert_eq!(library().pw_version().unwrap(), env!("CARGO_PKG_VERSION"));
}

#[test]
fn the_installer_is_not_a_library() {
    let e = Library::open(std::path::Path::new(env!(
        "CARGO_BIN_EXE_pagewise-ffi-install"
    )))
    .unwrap_err();
    assert!(matches!(e, DlError::Open { .. }), "{e:?}");
}
