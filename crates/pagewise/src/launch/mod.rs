//! Preparing unmodified programs for `pagewise run`: which C library a program
//! uses, and the environment that changes its behaviour.

pub mod keep_heap;
mod program;

pub use program::{inspect_program, resolve_program, LaunchError, Linkage};
