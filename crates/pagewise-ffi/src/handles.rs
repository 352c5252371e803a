//! The handle table: what a C handle stands for, checked on every call.
//!
//! A handle is not a pointer to the object. It is a number, cast to the
//! opaque pointer type C sees, made of a slot index, the kind of object and
//! the slot's generation:
//!
//! ```text
//! bits 63..32  generation of the slot when the handle was made (never 0)
//! bits 31..28  kind: 1 writer, 2 reader, 3 region, 4 buffer
//! bits 27..0   slot index + 1 (so no handle is NULL)
//! ```
//!
//! A lookup reads the slot the index names (slots live in segments that are
//! never freed or moved) and checks kind and generation under the slot's
//! lock. So a NULL, closed, foreign or made-up handle, or one of another
//! kind, is `-EBADF`, never a read of freed or random memory; and a call on a
//! handle that another thread is using (writer, reader, buffer) is `-EBUSY`,
//! never a data race. Closing bumps the generation, so a stale copy of a
//! handle stays invalid after its slot is reused (until the generation wraps,
//! after 2^32 reuses of that slot).
//!
//! Cost per call: one atomic load of the segment, one of the generation, and
//! an uncontended lock and unlock of the slot's mutex (two atomic
//! instructions), a few nanoseconds.

use crate::error::Failure;
use pagewise::buffer::Buffer;
use pagewise::queue::{Reader, Reservation, Writer};
use pagewise::region::Region;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, TryLockError};

/// What kind of object a handle names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `pw_queue_writer`.
    Writer = 1,
    /// `pw_queue_reader`.
    Reader = 2,
    /// `pw_region`.
    Region = 3,
    /// `pw_buffer`.
    Buffer = 4,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Writer => "pw_queue_writer",
            Kind::Reader => "pw_queue_reader",
            Kind::Region => "pw_region",
            Kind::Buffer => "pw_buffer",
        }
    }
}

/// A queue writer and the reservation it may have open between
/// `pw_queue_reserve` and `pw_queue_commit`. The reservation borrows the
/// writer, so the pair is built in `abi` (the borrow outlives one call).
pub struct WriterSlot {
    /// The open reservation, if any; it borrows `*writer`.
    pub(crate) pending: Option<Reservation<'static>>,
    /// The writer, owned through a raw pointer so the reservation's borrow
    /// of it stays valid while this struct moves.
    pub(crate) writer: std::ptr::NonNull<Writer>,
}

/// The objects handles stand for.
pub enum Object {
    /// A queue writer (with its open reservation).
    Writer(WriterSlot),
    /// A queue reader.
    Reader(Box<Reader>),
    /// A region: shared, so calls from several threads run at once and a
    /// free while one runs leaves the mapping until that call returns.
    Region(Arc<Region>),
    /// A buffer.
    Buffer(Box<Buffer>),
}

impl Object {
    fn kind(&self) -> Kind {
        match self {
            Object::Writer(_) => Kind::Writer,
            Object::Reader(_) => Kind::Reader,
            Object::Region(_) => Kind::Region,
            Object::Buffer(_) => Kind::Buffer,
        }
    }
}

struct Slot {
    /// Changes only while `object` is locked; read outside the lock only to
    /// tell a stale handle (`-EBADF`) from a busy one (`-EBUSY`).
    generation: AtomicU32,
    object: Mutex<Option<Object>>,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            generation: AtomicU32::new(1),
            object: Mutex::new(None),
        }
    }
}

const FIRST_SEGMENT: usize = 64;
const SEGMENTS: usize = 23;
const INDEX_BITS: u32 = 28;
const MAX_INDEX: usize = (1 << INDEX_BITS) - 2;

/// Segment `k` holds `64 << k` slots; together they cover every index.
static TABLE: [OnceLock<Box<[Slot]>>; SEGMENTS] = [const { OnceLock::new() }; SEGMENTS];

struct FreeList {
    /// Indices never used yet start here.
    next_unused: usize,
    /// Indices of closed handles, reused first.
    free: Vec<usize>,
}

static FREE: Mutex<FreeList> = Mutex::new(FreeList {
    next_unused: 0,
    free: Vec::new(),
});

/// The segment and offset of a slot index.
fn locate(index: usize) -> (usize, usize) {
    let group = index / FIRST_SEGMENT + 1;
    let segment = (usize::BITS - 1 - group.leading_zeros()) as usize;
    let base = FIRST_SEGMENT * ((1 << segment) - 1);
    (segment, index - base)
}

fn slot(index: usize) -> Option<&'static Slot> {
    if index > MAX_INDEX {
        return None;
    }
    let (segment, offset) = locate(index);
    TABLE.get(segment)?.get()?.get(offset)
}

fn slot_or_create(index: usize) -> &'static Slot {
    let (segment, offset) = locate(index);
    let slots = TABLE[segment].get_or_init(|| {
        (0..FIRST_SEGMENT << segment)
            .map(|_| Slot::new())
            .collect::<Vec<_>>()
            .into_boxed_slice()
    });
    &slots[offset]
}

fn encode(generation: u32, kind: Kind, index: usize) -> usize {
    ((generation as usize) << 32) | ((kind as usize) << INDEX_BITS) | (index + 1)
}

/// Index, kind number and generation of a handle value (no check).
fn decode(handle: usize) -> (usize, usize, u32) {
    let low = handle & ((1 << INDEX_BITS) - 1);
    let kind = (handle >> INDEX_BITS) & 0xf;
    let generation = (handle >> 32) as u32;
    (low.wrapping_sub(1), kind, generation)
}

/// Stores `object` in a free slot and returns its handle value (never 0).
pub fn insert(object: Object) -> Result<usize, Failure> {
    let kind = object.kind();
    let index = {
        let mut free = FREE.lock().unwrap_or_else(PoisonError::into_inner);
        match free.free.pop() {
            Some(i) => i,
            None if free.next_unused <= MAX_INDEX => {
                free.next_unused += 1;
                free.next_unused - 1
            }
            None => {
                return Err(Failure::new(
                    libc::EMFILE,
                    format!(
                        "too many open pagewise handles ({}): close some",
                        MAX_INDEX + 1
                    ),
                ))
            }
        }
    };
    let slot = slot_or_create(index);
    let mut guard = slot.object.lock().unwrap_or_else(PoisonError::into_inner);
    *guard = Some(object);
    let generation = slot.generation.load(Ordering::Relaxed);
    Ok(encode(generation, kind, index))
}

/// The slot and generation a handle of `kind` names, before locking.
fn find(handle: usize, kind: Kind) -> Result<(&'static Slot, u32), Failure> {
    if handle == 0 {
        return Err(Failure::new(
            libc::EBADF,
            format!("{} handle is NULL", kind.name()),
        ));
    }
    let bad = || {
        Failure::new(
            libc::EBADF,
            format!(
                "{:#x} is not an open {} handle (closed already, or not a handle)",
                handle,
                kind.name()
            ),
        )
    };
    let (index, kind_bits, generation) = decode(handle);
    if kind_bits != kind as usize || generation == 0 {
        return Err(bad());
    }
    let slot = slot(index).ok_or_else(bad)?;
    if slot.generation.load(Ordering::Acquire) != generation {
        return Err(bad());
    }
    Ok((slot, generation))
}

/// Exclusive use of the object behind a handle, for one call.
pub struct Held {
    guard: MutexGuard<'static, Option<Object>>,
}

impl Held {
    /// The object (present: checked when the guard was taken).
    pub fn object(&mut self) -> &mut Object {
        self.guard
            .as_mut()
            .expect("Held is only made for a slot with an object")
    }
}

/// Locks the object behind `handle` for this call: `-EBADF` for a handle
/// that is not an open one of `kind`, `-EBUSY` when another thread is in a
/// call on it (or, with `wait`, waits for that call to end).
pub fn hold(handle: usize, kind: Kind, wait: bool) -> Result<Held, Failure> {
    let (slot, generation) = find(handle, kind)?;
    let guard = if wait {
        slot.object.lock().unwrap_or_else(PoisonError::into_inner)
    } else {
        match slot.object.try_lock() {
            Ok(g) => g,
            // A panic inside an earlier call was caught and reported then;
            // the object is still memory-safe to use.
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                return Err(if slot.generation.load(Ordering::Acquire) == generation {
                    Failure::new(
                        libc::EBUSY,
                        format!(
                            "this {} is in use by another thread: use a handle from one thread at a time",
                            kind.name()
                        ),
                    )
                } else {
                    find(handle, kind)
                        .err()
                        .unwrap_or_else(|| Failure::new(libc::EBADF, "stale handle"))
                })
            }
        }
    };
    // The generation changes only under this lock: checked again, it is final.
    if slot.generation.load(Ordering::Relaxed) != generation
        || guard.as_ref().map(Object::kind) != Some(kind)
    {
        drop(guard);
        return Err(find(handle, kind)
            .err()
            .unwrap_or_else(|| Failure::new(libc::EBADF, format!("{handle:#x} was closed"))));
    }
    Ok(Held { guard })
}

/// Removes the object behind `handle` (it is dropped by the caller, outside
/// the slot's lock) and frees the slot; the handle is invalid from now on.
pub fn remove(handle: usize, kind: Kind) -> Result<Object, Failure> {
    let (index, _, _) = decode(handle);
    let mut held = hold(handle, kind, false)?;
    let object = held.guard.take().expect("hold checked the object");
    let slot = slot(index).expect("hold found the slot");
    let next = match slot.generation.load(Ordering::Relaxed).wrapping_add(1) {
        0 => 1,
        g => g,
    };
    slot.generation.store(next, Ordering::Release);
    drop(held);
    FREE.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .free
        .push(index);
    Ok(object)
}

/// The region behind `handle`, shared with any other call on it.
pub fn region(handle: usize) -> Result<Arc<Region>, Failure> {
    let mut held = hold(handle, Kind::Region, true)?;
    match held.object() {
        Object::Region(r) => Ok(Arc::clone(r)),
        _ => Err(Failure::new(libc::EBADF, "not a pw_region handle")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer() -> Object {
        Object::Buffer(Box::new(Buffer::new(1 << 20).unwrap()))
    }

    #[test]
    fn segments_cover_every_index_once() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(63), (0, 63));
        assert_eq!(locate(64), (1, 0));
        assert_eq!(locate(191), (1, 127));
        assert_eq!(locate(192), (2, 0));
        let (segment, offset) = locate(MAX_INDEX);
        assert!(segment < SEGMENTS, "{segment}");
        assert!(offset < FIRST_SEGMENT << segment);
    }

    #[test]
    fn handles_round_trip_and_are_never_null() {
        for (g, k, i) in [(1, Kind::Writer, 0), (u32::MAX, Kind::Buffer, MAX_INDEX)] {
            let h = encode(g, k, i);
            assert_ne!(h, 0);
            assert_eq!(decode(h), (i, k as usize, g));
        }
    }

    #[test]
    fn closed_foreign_and_wrong_kind_handles_are_ebadf() {
        let h = insert(buffer()).unwrap();
        assert!(hold(h, Kind::Buffer, false).is_ok());
        assert_eq!(
            hold(h, Kind::Reader, false).err().unwrap().code,
            -libc::EBADF
        );
        for made_up in [0, 1, usize::MAX, 0xdead_beef, h ^ (1 << 40)] {
            assert_eq!(
                hold(made_up, Kind::Buffer, false).err().unwrap().code,
                -libc::EBADF
            );
        }
        remove(h, Kind::Buffer).unwrap();
        assert_eq!(
            hold(h, Kind::Buffer, false).err().unwrap().code,
            -libc::EBADF
        );
        assert_eq!(remove(h, Kind::Buffer).err().unwrap().code, -libc::EBADF);
        // The slot is reused with a new generation: the old handle stays invalid.
        let again = insert(buffer()).unwrap();
        assert_ne!(again, h);
        assert_eq!(
            hold(h, Kind::Buffer, false).err().unwrap().code,
            -libc::EBADF
        );
        remove(again, Kind::Buffer).unwrap();
    }

    #[test]
    fn a_handle_in_use_is_busy_for_other_threads() {
        let h = insert(buffer()).unwrap();
        let held = hold(h, Kind::Buffer, false).unwrap();
        let other = std::thread::spawn(move || hold(h, Kind::Buffer, false).err().map(|f| f.code))
            .join()
            .unwrap();
        assert_eq!(other, Some(-libc::EBUSY));
        drop(held);
        remove(h, Kind::Buffer).unwrap();
    }
}
