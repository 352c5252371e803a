//! The operating-system primitives that pagewise's own benchmarks, command,
//! preload library and tests use, taken from the `sys` layer (which is
//! private): anonymous and file mappings, perf counters, clocks, process and
//! thread accounting. Each is a safe wrapper with its preconditions checked
//! in `sys`; calling any of them is a system call or two, as its own
//! documentation says.
//!
//! This is a support surface for the pagewise crates, not the product's API
//! (that is `region`, `buffer`, `copy`, `queue`, `text`, `launch`, `observe`
//! and `probe`): it may change with any release.

pub use crate::sys::{base_page_size, Errno, SysError};

/// Clocks.
pub mod clock {
    pub use crate::sys::clock::monotonic_ns;
}

/// glibc's own copy routines, for comparison.
pub mod copy {
    pub use crate::sys::copy::{glibc_memcpy, glibc_memset};
}

/// Loading a shared library (`dlopen`) to call pagewise's C entry points
/// (`pw_copy`, `pw_fill`, `pw_version`) in it.
pub mod dl {
    pub use crate::sys::dl::{CCopy, CFill, DlError, Library};
}

/// What the CPU says it is.
pub mod cpu {
    pub use crate::sys::cpu::{cpu_identity, CpuIdentity};
}

/// Files: space allocation, locks, the file system a file is on.
pub mod file {
    pub use crate::sys::file::{
        allocate, free_bytes, fs_kind, output_closed, try_lock, FsKind, LockKind,
    };
}

/// Shared file mappings.
pub mod file_map {
    pub use crate::sys::file_map::{FileAdvice, ReadMap, WriteMap};
}

/// Buffers with guard pages on both sides, for tests that must fault on any
/// byte out of bounds.
pub mod guard {
    pub use crate::sys::guard::GuardedBuffer;
}

/// Facts about the calling process's credentials.
pub mod libc_info {
    pub use crate::sys::libc_info::is_root;
}

/// Anonymous mappings and C heap blocks.
pub mod mem {
    pub use crate::sys::mem::{Advice, AnonMapping, CHeapBlock, Discard, MapOptions};
}

/// perf event counters.
pub mod perf {
    pub use crate::sys::perf::{Counter, CounterSpec, EventType};
}

/// The calling process's THP switch.
pub mod prctl {
    pub use crate::sys::prctl::set_thp_disabled;
}

/// Child processes, signals, CPU affinity and per-thread accounting.
pub mod process {
    pub use crate::sys::process::{
        pin_this_thread, restrict_this_thread, sigkill, signal_name, this_thread_usage,
        usable_cpus, wait, ExitKind, ForwardSignals,
    };
}

/// The steps of moving text onto huge pages (the preload library's).
pub mod text {
    pub use crate::sys::text::MoveStep;
}

/// CPU time of the calling thread.
pub mod time {
    pub use crate::sys::time::{thread_usage, ThreadUsage};
}
