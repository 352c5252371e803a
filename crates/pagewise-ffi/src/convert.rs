//! Between the C structs and the library's types: option structs in, the
//! region report out. Safe code; the pointers were checked in `abi`.

use crate::error::Failure;
use crate::types::*;
use pagewise::buffer::{BufferOptions, Pretouch};
use pagewise::queue::{Options, PreTouch};
use pagewise::region::{Backing, PagePolicy, PageSize, Populate, RegionBuilder};
use std::cell::RefCell;
use std::ffi::CString;

/// How `pw_queue_writer_open` finds or makes the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Open it, or create it if missing (the default).
    OpenOrCreate,
    /// Create it; `-EEXIST` if the name is taken.
    CreateNew,
    /// Open it; `-ENOENT` if missing.
    OpenExisting,
}

fn no_reserved(reserved: &[u64], what: &str) -> Result<(), Failure> {
    if reserved.iter().any(|&r| r != 0) {
        return Err(Failure::invalid(format!(
            "{what}.reserved must be zero (zero-initialise the struct)"
        )));
    }
    Ok(())
}

fn unknown_flags(flags: u32, known: u32, what: &str) -> Result<(), Failure> {
    if flags & !known != 0 {
        return Err(Failure::invalid(format!(
            "{what}.flags has unknown bits {:#x}",
            flags & !known
        )));
    }
    Ok(())
}

/// The queue options a C struct asks for (`None`: every default).
pub fn queue_options(c: Option<&pw_queue_options>) -> Result<(Options, OpenMode), Failure> {
    let c = c.copied().unwrap_or_default();
    no_reserved(&c.reserved, "pw_queue_options")?;
    unknown_flags(
        c.flags,
        PW_QUEUE_RECORD_CRC
            | PW_QUEUE_NO_PRETOUCH
            | PW_QUEUE_CREATE_NEW
            | PW_QUEUE_NO_CREATE
            | PW_QUEUE_DISCARD_DAMAGED
            | PW_QUEUE_PACKED_RECORDS
            | PW_QUEUE_HAND_OFF,
        "pw_queue_options",
    )?;
    let mode = match (
        c.flags & PW_QUEUE_CREATE_NEW != 0,
        c.flags & PW_QUEUE_NO_CREATE != 0,
    ) {
        (false, false) => OpenMode::OpenOrCreate,
        (true, false) => OpenMode::CreateNew,
        (false, true) => OpenMode::OpenExisting,
        (true, true) => {
            return Err(Failure::invalid(
                "PW_QUEUE_CREATE_NEW and PW_QUEUE_NO_CREATE exclude each other",
            ))
        }
    };
    let defaults = Options::default();
    let pretouch = if c.flags & PW_QUEUE_NO_PRETOUCH != 0 {
        if c.pretouch_window != 0 {
            return Err(Failure::invalid(
                "pw_queue_options.pretouch_window is set but PW_QUEUE_NO_PRETOUCH turns pre-touch off",
            ));
        }
        None
    } else {
        let base = PreTouch::default();
        let window = if c.pretouch_window == 0 {
            base.window
        } else {
            c.pretouch_window
        };
        Some(PreTouch {
            window,
            max_window: base.max_window.max(window),
            ..base
        })
    };
    if c.mode > 0o7777 {
        return Err(Failure::invalid(format!(
            "pw_queue_options.mode {:#o} is not a set of permission bits",
            c.mode
        )));
    }
    let options = Options {
        chunk_size: if c.chunk_size == 0 {
            defaults.chunk_size
        } else {
            c.chunk_size
        },
        record_crc: c.flags & PW_QUEUE_RECORD_CRC != 0,
        packed_records: c.flags & PW_QUEUE_PACKED_RECORDS != 0,
        pretouch,
        mode: if c.mode == 0 { defaults.mode } else { c.mode },
        copy: defaults.copy,
        discard_damaged: c.flags & PW_QUEUE_DISCARD_DAMAGED != 0,
        hand_off: c.flags & PW_QUEUE_HAND_OFF != 0,
    };
    Ok((options, mode))
}

fn page_size(code: u32) -> Result<PageSize, Failure> {
    Ok(match code {
        PW_PAGES_4K => PageSize::Base,
        PW_PAGES_THP => PageSize::Thp,
        PW_PAGES_HUGETLB_2M => PageSize::Hugetlb2M,
        PW_PAGES_HUGETLB_1G => PageSize::Hugetlb1G,
        other => {
            return Err(Failure::invalid(format!(
                "page size {other} is not one of PW_PAGES_*"
            )))
        }
    })
}

fn page_code(size: PageSize) -> u32 {
    match size {
        PageSize::Base => PW_PAGES_4K,
        PageSize::Thp => PW_PAGES_THP,
        PageSize::Hugetlb2M => PW_PAGES_HUGETLB_2M,
        PageSize::Hugetlb1G => PW_PAGES_HUGETLB_1G,
    }
}

/// The region builder a C struct asks for.
pub fn region_builder(
    size: usize,
    c: Option<&pw_region_options>,
) -> Result<RegionBuilder, Failure> {
    let c = c.copied().unwrap_or_default();
    no_reserved(&c.reserved, "pw_region_options")?;
    if c.reserved0 != 0 {
        return Err(Failure::invalid("pw_region_options.reserved0 must be zero"));
    }
    unknown_flags(
        c.flags,
        PW_REGION_LOCK | PW_REGION_DONT_FORK | PW_REGION_NUMA_NODE,
        "pw_region_options",
    )?;
    let pages = match c.pages {
        PW_PAGES_AUTO => PagePolicy::Auto,
        other => PagePolicy::Only(page_size(other)?),
    };
    let populate = match c.populate {
        PW_POPULATE_LAZY => Populate::Lazy,
        PW_POPULATE_EAGER => Populate::Eager,
        PW_POPULATE_BACKGROUND => Populate::Background {
            threads: c.threads.max(1) as usize,
        },
        other => {
            return Err(Failure::invalid(format!(
                "populate {other} is not one of PW_POPULATE_*"
            )))
        }
    };
    if c.populate != PW_POPULATE_BACKGROUND && c.threads != 0 {
        return Err(Failure::invalid(
            "pw_region_options.threads is only for PW_POPULATE_BACKGROUND",
        ));
    }
    let mut builder = RegionBuilder::new(size)
        .pages(pages)
        .populate(populate)
        .lock(c.flags & PW_REGION_LOCK != 0)
        .dont_fork(c.flags & PW_REGION_DONT_FORK != 0);
    if c.flags & PW_REGION_NUMA_NODE != 0 {
        builder = builder.numa_node(c.numa_node);
    } else if c.numa_node != 0 {
        return Err(Failure::invalid(
            "pw_region_options.numa_node is set without PW_REGION_NUMA_NODE",
        ));
    }
    Ok(builder)
}

thread_local! {
    static WHY: RefCell<CString> = RefCell::new(CString::default());
}

/// The one-line explanation of a backing: step taken, population, skips.
pub fn why(backing: &Backing) -> String {
    let mut line = format!(
        "{} pages, populated {}",
        backing.page_size.name(),
        backing.populate
    );
    for skip in &backing.skipped {
        line.push_str(&format!(
            "; {} skipped: {}",
            skip.page_size.name(),
            skip.reason
        ));
    }
    if let Some(e) = &backing.verify_error {
        line.push_str(&format!("; granted pages not verified: {e}"));
    }
    line
}

/// The C report of a backing; `why` points at this thread's copy of the
/// explanation, replaced by the thread's next call.
pub fn backing(b: &Backing) -> pw_backing {
    let text = CString::new(why(b).replace('\0', " ")).unwrap_or_default();
    let why = WHY
        .try_with(|slot| {
            *slot.borrow_mut() = text;
            slot.borrow().as_ptr()
        })
        .unwrap_or(c"".as_ptr());
    pw_backing {
        requested_bytes: b.requested_bytes as u64,
        mapped_bytes: b.mapped_bytes as u64,
        page_size: page_code(b.page_size),
        verified: u32::from(b.verify_error.is_none()),
        page_bytes: b.page_size.bytes() as u64,
        granted_hugetlb_1g_bytes: b.granted.hugetlb_1g_bytes,
        granted_hugetlb_2m_bytes: b.granted.hugetlb_2m_bytes,
        granted_thp_bytes: b.granted.thp_bytes,
        granted_base_bytes: b.granted.base_bytes,
        populated_frontier: b.populated_frontier as u64,
        why,
        reserved: [0; 4],
    }
}

/// The buffer options a C struct asks for.
pub fn buffer_options(max: usize, c: Option<&pw_buffer_options>) -> Result<BufferOptions, Failure> {
    let c = c.copied().unwrap_or_default();
    no_reserved(&c.reserved, "pw_buffer_options")?;
    unknown_flags(c.flags, PW_BUFFER_HUGE_PAGES, "pw_buffer_options")?;
    let pretouch = match c.pretouch {
        PW_PRETOUCH_NONE => Pretouch::None,
        PW_PRETOUCH_EAGER => Pretouch::Eager,
        PW_PRETOUCH_BACKGROUND => Pretouch::Background,
        other => {
            return Err(Failure::invalid(format!(
                "pretouch {other} is not one of PW_PRETOUCH_*"
            )))
        }
    };
    Ok(BufferOptions {
        max_capacity: max,
        huge_pages: c.flags & PW_BUFFER_HUGE_PAGES != 0,
        pretouch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_queue_options_are_the_defaults() {
        let (options, mode) = queue_options(Some(&pw_queue_options::default())).unwrap();
        assert_eq!(options, Options::default());
        assert_eq!(mode, OpenMode::OpenOrCreate);
        assert_eq!(queue_options(None).unwrap().0, Options::default());
    }

    #[test]
    fn queue_options_are_checked() {
        let bad = |c: pw_queue_options| queue_options(Some(&c)).err().unwrap().code;
        let z = pw_queue_options::default();
        assert_eq!(
            bad(pw_queue_options {
                reserved: [0, 1, 0, 0],
                ..z
            }),
            -libc::EINVAL
        );
        assert_eq!(
            bad(pw_queue_options {
                flags: 1 << 20,
                ..z
            }),
            -libc::EINVAL
        );
        assert_eq!(
            bad(pw_queue_options {
                flags: PW_QUEUE_CREATE_NEW | PW_QUEUE_NO_CREATE,
                ..z
            }),
            -libc::EINVAL
        );
        assert_eq!(bad(pw_queue_options { mode: 0o10000, ..z }), -libc::EINVAL);
        let (o, _) = queue_options(Some(&pw_queue_options {
            pretouch_window: 256 << 20,
            flags: PW_QUEUE_RECORD_CRC,
            ..z
        }))
        .unwrap();
        assert!(o.record_crc);
        assert!(!o.discard_damaged);
        let (o, _) = queue_options(Some(&pw_queue_options {
            flags: PW_QUEUE_DISCARD_DAMAGED,
            ..z
        }))
        .unwrap();
        assert!(o.discard_damaged);
        assert!(!o.packed_records);
        let (o, _) = queue_options(Some(&pw_queue_options {
            flags: PW_QUEUE_PACKED_RECORDS,
            ..z
        }))
        .unwrap();
        assert!(o.packed_records);
        assert!(!o.hand_off);
        let (o, _) = queue_options(Some(&pw_queue_options {
            flags: PW_QUEUE_HAND_OFF,
            ..z
        }))
        .unwrap();
        assert!(o.hand_off);
        assert!(!o.packed_records);
        let (o, _) = queue_options(Some(&pw_queue_options {
            pretouch_window: 256 << 20,
            flags: PW_QUEUE_RECORD_CRC,
            ..z
        }))
        .unwrap();
        let p = o.pretouch.unwrap();
        assert_eq!((p.window, p.max_window), (256 << 20, 256 << 20));
        assert!(p.check().is_ok());
    }

    #[test]
    fn region_and_buffer_options_are_checked() {
        let z = pw_region_options::default();
        assert!(region_builder(4096, Some(&z)).is_ok());
        for c in [
            pw_region_options { pages: 9, ..z },
            pw_region_options { populate: 9, ..z },
            pw_region_options { threads: 2, ..z },
            pw_region_options { numa_node: 1, ..z },
            pw_region_options { reserved0: 1, ..z },
        ] {
            assert_eq!(
                region_builder(4096, Some(&c)).err().unwrap().code,
                -libc::EINVAL
            );
        }
        let b = pw_buffer_options::default();
        assert_eq!(buffer_options(7, Some(&b)).unwrap().max_capacity, 7);
        let bad = pw_buffer_options { pretouch: 3, ..b };
        assert_eq!(
            buffer_options(7, Some(&bad)).err().unwrap().code,
            -libc::EINVAL
        );
    }
}
