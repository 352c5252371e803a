//! The C-visible types and constants: opaque handle types, option and report
//! structs (`#[repr(C)]`, zero-initialised means "the defaults"), and the
//! return codes. cbindgen turns this file and `abi.rs` into
//! `include/pagewise.h`; nothing here is `unsafe`.
//!
//! Every struct ends in `reserved` words that must be zero: a later version
//! can give them a meaning without changing the struct's size, so programs
//! built against this header keep working (see docs/c.md, "ABI").

#![allow(non_camel_case_types)]

use std::os::raw::c_char;

/// Success.
pub const PW_OK: i32 = 0;
/// `pw_queue_next` / `pw_queue_next_wait`: no record yet (not an error;
/// `pw_last_error` is left as it was).
pub const PW_EMPTY: i32 = 1;

/// The major version of this header (compare with `pw_version()` at run time).
pub const PW_VERSION_MAJOR: u32 = 0;
/// The minor version of this header.
pub const PW_VERSION_MINOR: u32 = 2;
/// The patch version of this header.
pub const PW_VERSION_PATCH: u32 = 0;

/// `pw_queue_seek`: the oldest record still in the queue.
pub const PW_SEEK_START: u64 = 0;
/// `pw_queue_seek`: just past the newest committed record.
pub const PW_SEEK_END: u64 = u64::MAX;

/// `pw_queue_options.flags`: every record of a *new* queue carries a CRC-32
/// that readers check.
pub const PW_QUEUE_RECORD_CRC: u32 = 1;
/// `pw_queue_options.flags`: no background pre-toucher (the writer takes a
/// page fault on every new page).
pub const PW_QUEUE_NO_PRETOUCH: u32 = 2;
/// `pw_queue_options.flags`: create the queue; fail with `-EEXIST` if the
/// name is taken.
pub const PW_QUEUE_CREATE_NEW: u32 = 4;
/// `pw_queue_options.flags`: open an existing queue only; fail with
/// `-ENOENT` if there is none.
pub const PW_QUEUE_NO_CREATE: u32 = 8;
/// `pw_queue_options.flags`: when recovery finds a record whose CRC fails
/// with intact records after it, or a record running past the end of the
/// file with whole records inside it (damage, not a torn write or a file
/// cut short), drop it and all after it instead of failing with `-EBADMSG`.
pub const PW_QUEUE_DISCARD_DAMAGED: u32 = 16;
/// `pw_queue_options.flags`: pack the records of a *new* queue to multiples
/// of 8 bytes instead of padding those of up to 56 payload bytes to end on a
/// multiple of 16, 32 or 64, which puts each record of a run of one size on
/// one cache line (smaller files, a cache-line transfer more per small
/// record).
pub const PW_QUEUE_PACKED_RECORDS: u32 = 32;
/// `pw_queue_options.flags`: after each commit, push the record's cache
/// lines to the shared last-level cache (`cldemote`), so that a reader
/// waiting on another core reads them from there: for a writer whose
/// records are spaced out and awaited (request and reply), not one that
/// appends as fast as it can (see `Options::hand_off` in the Rust API).
pub const PW_QUEUE_HAND_OFF: u32 = 64;

/// Page policy: the ladder hugetlb 1 GiB, hugetlb 2 MiB, THP, 4 KiB.
pub const PW_PAGES_AUTO: u32 = 0;
/// Page size: 4 KiB pages (as a policy: exactly that, THP off).
pub const PW_PAGES_4K: u32 = 1;
/// Page size: transparent huge pages (2 MiB).
pub const PW_PAGES_THP: u32 = 2;
/// Page size: 2 MiB hugetlb pages.
pub const PW_PAGES_HUGETLB_2M: u32 = 3;
/// Page size: 1 GiB hugetlb pages.
pub const PW_PAGES_HUGETLB_1G: u32 = 4;

/// Region population: on first touch.
pub const PW_POPULATE_LAZY: u32 = 0;
/// Region population: before `pw_region_new` returns.
pub const PW_POPULATE_EAGER: u32 = 1;
/// Region population: by background threads, from the start, in order.
pub const PW_POPULATE_BACKGROUND: u32 = 2;

/// `pw_region_options.flags`: `mlock` the region after populating it.
pub const PW_REGION_LOCK: u32 = 1;
/// `pw_region_options.flags`: `MADV_DONTFORK` (children do not inherit it).
pub const PW_REGION_DONT_FORK: u32 = 2;
/// `pw_region_options.flags`: bind to `pw_region_options.numa_node`.
pub const PW_REGION_NUMA_NODE: u32 = 4;

/// `pw_buffer_options.flags`: transparent huge pages (2 MiB steps).
pub const PW_BUFFER_HUGE_PAGES: u32 = 1;
/// Buffer growth: pages fault in on first write.
pub const PW_PRETOUCH_NONE: u32 = 0;
/// Buffer growth: populated before the growing call returns.
pub const PW_PRETOUCH_EAGER: u32 = 1;
/// Buffer growth: populated by a background thread.
pub const PW_PRETOUCH_BACKGROUND: u32 = 2;

/// A queue's single writer. One thread at a time (any thread); a call made
/// while another thread is inside a call on the same writer fails with
/// `-EBUSY`.
pub struct pw_queue_writer {
    _opaque: [u8; 0],
}

/// A queue reader. One thread at a time (any thread), `-EBUSY` otherwise.
/// A record's bytes stay valid until the next call on the same reader.
pub struct pw_queue_reader {
    _opaque: [u8; 0],
}

/// A populated memory region. Any number of threads may call on it at once;
/// the bytes are the program's to synchronise.
pub struct pw_region {
    _opaque: [u8; 0],
}

/// A growable buffer that keeps its pages. One thread at a time, `-EBUSY`
/// otherwise.
pub struct pw_buffer {
    _opaque: [u8; 0],
}

/// How to open a queue for writing. Zero-initialise it (`= {0}`): every zero
/// field means the default.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct pw_queue_options {
    /// Bytes per chunk of a new queue: a power of two from 64 KiB to 1 GiB;
    /// 0: 64 MiB. An existing queue keeps its own.
    pub chunk_size: u64,
    /// Bytes the pre-toucher keeps ready ahead of the writer; 0: 4 MiB.
    pub pretouch_window: u64,
    /// `PW_QUEUE_*` flags.
    pub flags: u32,
    /// Permission bits of a new queue file; 0: `0644` (minus the umask).
    pub mode: u32,
    /// Must be zero.
    pub reserved: [u64; 4],
}

/// How to build a region. Zero-initialise it: every zero field means the
/// default (auto pages, lazy population).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct pw_region_options {
    /// `PW_PAGES_*`: `PW_PAGES_AUTO` for the ladder, another value for
    /// exactly that page size or an error.
    pub pages: u32,
    /// `PW_POPULATE_*`.
    pub populate: u32,
    /// Worker threads for `PW_POPULATE_BACKGROUND`; 0: 1.
    pub threads: u32,
    /// `PW_REGION_*` flags.
    pub flags: u32,
    /// The NUMA node, with `PW_REGION_NUMA_NODE`.
    pub numa_node: u32,
    /// Must be zero.
    pub reserved0: u32,
    /// Must be zero.
    pub reserved: [u64; 4],
}

/// What a region asked for and what the kernel granted, filled by
/// `pw_region_backing`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct pw_backing {
    /// Bytes asked for (the usable length).
    pub requested_bytes: u64,
    /// Bytes mapped (rounded up to the page size).
    pub mapped_bytes: u64,
    /// The ladder step taken: `PW_PAGES_4K`, `_THP`, `_HUGETLB_2M`, `_HUGETLB_1G`.
    pub page_size: u32,
    /// 1 when the `granted_*` fields were read from the kernel now; 0 when
    /// the kernel could not be asked (`why` says why).
    pub verified: u32,
    /// The page size of that step in bytes.
    pub page_bytes: u64,
    /// Resident bytes on 1 GiB hugetlb pages.
    pub granted_hugetlb_1g_bytes: u64,
    /// Resident bytes on 2 MiB hugetlb pages.
    pub granted_hugetlb_2m_bytes: u64,
    /// Resident bytes on transparent huge pages.
    pub granted_thp_bytes: u64,
    /// Resident bytes on 4 KiB pages.
    pub granted_base_bytes: u64,
    /// Bytes from the start known to be populated.
    pub populated_frontier: u64,
    /// One line: the step taken, how it was populated, and every step
    /// skipped with the reason. Owned by the library; valid until the
    /// calling thread's next `pw_region_backing`.
    pub why: *const c_char,
    /// Zero.
    pub reserved: [u64; 4],
}

/// How to build a buffer. Zero-initialise it: 4 KiB pages, no pre-touch.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct pw_buffer_options {
    /// `PW_BUFFER_*` flags.
    pub flags: u32,
    /// `PW_PRETOUCH_*`.
    pub pretouch: u32,
    /// Must be zero.
    pub reserved: [u64; 4],
}
