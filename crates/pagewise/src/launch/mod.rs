//! Preparing unmodified programs for `pagewise run`: which C library a program
//! uses, the environment that changes its behaviour, and the parent's side of
//! a huge-text run (reports, perf maps, the preload library's cache).

pub mod huge_text;
pub mod keep_heap;
pub mod preload_cache;
mod program;
pub mod thp_heap;

pub use program::{
    command_line, inspect_program, require_executable, require_glibc, require_glibc_tunables,
    require_not_secure, resolve_program, script_shell, secure_mode_of, ExecFacts, LaunchError,
    Linkage, SecureMode, SCRIPT_SHELL,
};
