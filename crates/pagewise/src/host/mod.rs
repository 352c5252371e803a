//! What the machine and a process are, read safely from `/proc` and `/sys`:
//! the layer just above [`crate::sys`] that the capabilities (`region`,
//! `text`, `copy`), `observe` and `probe` all read from.
//!
//! - [`kernel_files`]: [`SysRoot`], reading kernel files under a root that
//!   tests replace with a fixture tree, noting what could not be read.
//! - [`proc_maps`]: `/proc/PID/maps`, the mappings of a process.
//! - [`smaps`]: `/proc/PID/smaps`, resident bytes of each mapping by page size.
//! - [`proc_stat`]: `/proc/PID/stat`, fault counts and CPU times.
//! - [`proc_tasks`]: `/proc/PID/task`, the threads of a process.
//! - [`self_access`]: whether this process holds `CAP_SYS_PTRACE` and runs in
//!   the initial user namespace (why the kernel refused it another process).
//! - [`hugetlb`]: hugetlb pools and the pages a new mapping could take.
//! - [`thp`]: transparent huge page modes.
//! - [`cpu`]: CPU model, cache sizes, NUMA nodes.
//! - [`glibc_info`]: the tunables glibc's loader reports.
//! - [`tracefs`]: where tracefs is, tracepoint ids and record layouts (read
//!   through a private mount when tracefs is not mounted).
//! - [`costs`]: what a page fault and a page rewrite cost here, measured.
//! - [`kallsyms`]: the kernel's page-fault entry, from `/proc/kallsyms`.
//! - [`user_files`]: files a user names (profiles, binaries, reports),
//!   opened without blocking on a FIFO; inputs only when regular files.
//! - [`user_cache`]: the per-user cache directory and its files, kept private.
//!
//! Nothing here changes a setting. Parsers are pure functions tested against
//! fixture text; readers cost one small file read each unless they say otherwise.

pub mod costs;
pub mod cpu;
pub mod glibc_info;
pub mod hugetlb;
pub mod kallsyms;
pub mod kernel_files;
pub mod proc_maps;
pub mod proc_stat;
pub mod proc_tasks;
pub mod self_access;
pub mod smaps;
pub mod thp;
pub mod tracefs;
pub mod user_cache;
pub mod user_files;

pub use kernel_files::{NotRead, SysRoot};
