//! `libpagewise`: the C ABI of pagewise, so C and C++ programs can use the
//! queue, regions, buffers and copy routines.
//!
//! This crate builds `libpagewise.so` (soname `libpagewise.so.0.MINOR` while
//! the version is 0.x) and `libpagewise.a`; `include/pagewise.h` is
//! generated from it with cbindgen and checked in (a test fails when it is
//! stale), `include/pagewise.hpp` is a header-only C++17 wrapper over it,
//! and the `pagewise-ffi-install` program puts the library, the headers and
//! a `pagewise.pc` under a prefix. docs/c.md is the user's guide.
//!
//! It is a thin layer over the library's public API: each `pw_*` function
//! checks its arguments, calls one or two public functions, and turns the
//! typed error into a negative errno and a message for `pw_last_error`.
//!
//! **Why this crate has `unsafe`.** Everywhere else in the workspace,
//! `unsafe` lives only in `pagewise`'s private `sys` layer. A C boundary cannot be written
//! without it: C hands over raw pointers and lengths that Rust must turn
//! into slices, strings and out-parameters, and exported functions need
//! `#[no_mangle]`. That code is confined to the [`abi`] module (each block
//! with a `// SAFETY:` line saying what the C caller guarantees and what was
//! checked); the rest of the crate denies `unsafe_code`. Handles are never
//! pointers that Rust dereferences: they are checked numbers (see
//! [`handles`]), so a bad or stale handle is an error, not a crash.
//!
//! Modules: [`types`] (the C-visible structs and constants), [`abi`] (the
//! exported functions), [`handles`] (the handle table), [`convert`]
//! (options in, reports out), [`error`] (codes and `pw_last_error`).

#![deny(missing_docs)]
#![deny(unsafe_code)]

#[allow(unsafe_code)]
pub mod abi;
pub mod convert;
pub mod error;
pub mod handles;
pub mod types;
