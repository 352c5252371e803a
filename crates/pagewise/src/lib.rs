//! pagewise: make Linux programs fast on the memory path — page faults, TLB
//! misses and byte copying.
//!
//! The crate is organised by capability:
//!
//! - [`host`]: safe readers of what the machine and a process are (`/proc`
//!   maps and smaps, hugetlb pools, THP modes, CPU caches, tracefs), the layer
//!   the capabilities, `observe` and `probe` read from.
//! - [`probe`]: what this machine offers (page sizes, pools, THP modes, kernel
//!   features, perf access, CPU, glibc) and what to change; behind `pagewise doctor`.
//! - [`region`]: huge-page regions populated before the hot path touches
//!   them, with a verified report of what the kernel granted.
//! - [`queue`]: a persistent single-writer, many-reader queue in a shared
//!   file mapping whose appends never fault.
//! - [`file_window`]: the queue writer's pre-toucher for any file written
//!   front to back through a shared mapping.
//! - [`buffer`]: a growable buffer over reserved address space that keeps
//!   its pages across `clear`, so reuse never faults.
//! - [`launch`]: what `pagewise run` needs to start unmodified programs
//!   (linkage checks, glibc tunables for `--keep-heap`).
//! - [`observe`]: explain a program's memory-path cost from one run (faults by
//!   kind and site, mmap churn, page sizes, hot text, findings); behind `pagewise stat`.
//! - [`text`]: hot text on huge pages (the move behind `pagewise run
//!   --huge-text`) and perf map files.
//! - [`copy`]: `copy` and `fill` with runtime CPU dispatch and non-temporal
//!   stores for large sizes; behind `pagewise bench memcpy` and `bench memset`.
//! - [`sys`]: the only layer with raw system calls and `unsafe`; everything
//!   else is safe Rust built on it.
//!
//! Errors carry the failing system call and errno, and say what to do.
//!
//! The `pagewise bench` experiments that measure these claims live in their
//! own crate, `pagewise-bench`, so that nothing here links their statistics.

#![deny(missing_docs)]
// `unsafe` lives only in `sys`; the compiler enforces it for every other module.
#![deny(unsafe_code)]

pub mod buffer;
pub mod copy;
pub mod file_window;
pub mod host;
pub mod launch;
pub mod observe;
pub mod os;
pub mod probe;
pub mod queue;
pub mod region;
#[allow(unsafe_code)]
pub(crate) mod sys;
pub mod text;
pub mod units;
