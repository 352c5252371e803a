//! The exported `pw_*` functions and the only `unsafe` code of this crate.
//!
//! Every function runs its body through [`call`], which catches any panic
//! (a bug) and turns it into `-EIO` with a message, so no unwind crosses into
//! C. Every raw pointer from C goes through one of the small helpers below
//! (`input`, `put`, `c_path`, `options`; `pw_copy` and `pw_fill` check
//! inline, to keep their hot path short), which refuse NULL and
//! misaligned pointers and lengths over `isize::MAX`; what they cannot check
//! (that the memory is really there, for as long as the call) is the C
//! caller's side of the contract, written in the header. Handles are never
//! dereferenced: they are numbers checked against the handle table
//! (`handles`).

use crate::convert::{self, OpenMode};
use crate::error::{self, Failure, Outcome};
use crate::handles::{self, Held, Kind, Object, WriterSlot};
use crate::types::*;
use pagewise::buffer::Buffer;
use pagewise::queue::{Position, Reader, Wait, Writer};
use pagewise::region::Region;
use std::ffi::{CStr, OsStr};
use std::os::raw::{c_char, c_int, c_void};
use std::os::unix::ffi::OsStrExt;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Runs one entry point: catches panics, keeps the message of a failure
/// for `pw_last_error`, returns the code.
fn call(body: impl FnOnce() -> Outcome) -> c_int {
    match std::panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(outcome) => error::finish(outcome),
        Err(payload) => error::finish(Err(error::panicked(payload))),
    }
}

/// `len` bytes at `ptr`, to read during this call.
fn input<'a>(ptr: *const c_void, len: usize, what: &str) -> Result<&'a [u8], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Failure::null(what));
    }
    if len > isize::MAX as usize {
        return Err(Failure::invalid(format!(
            "{len} bytes is more than any object"
        )));
    }
    // SAFETY: NULL and lengths over isize::MAX were refused above; the C
    // caller promises `len` readable bytes at `ptr` that nothing writes
    // during the call (the header's contract), and the slice dies with it.
    Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
}

/// Whether `[a, a + a_len)` and `[b, b + b_len)` share a byte (two
/// subtractions and compares: it is on `pw_copy`'s hot path).
#[inline(always)]
fn overlap(a: usize, a_len: usize, b: usize, b_len: usize) -> bool {
    (a.wrapping_sub(b) < b_len && a_len != 0) || (b.wrapping_sub(a) < a_len && b_len != 0)
}

/// Checks that an out-pointer can be written (before any work is done, so a
/// bad one never loses a result).
fn writable<T>(out: *mut T, what: &str) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::null(what));
    }
    if !out.is_aligned() {
        return Err(Failure::invalid(format!(
            "{what} is not aligned for its type"
        )));
    }
    Ok(())
}

/// Stores `value` through the out-pointer `out` (checked by `writable`).
fn put<T>(out: *mut T, value: T, what: &str) -> Result<(), Failure> {
    writable(out, what)?;
    // SAFETY: `out` is non-NULL and aligned (checked above); the C caller
    // promises it points at a `T` it owns for the call.
    unsafe { out.write(value) };
    Ok(())
}

/// Stores `value` through `out` unless `out` is NULL (an optional result).
fn put_optional<T>(out: *mut T, value: T, what: &str) -> Result<(), Failure> {
    if out.is_null() {
        return Ok(());
    }
    put(out, value, what)
}

/// The struct at `ptr`, or `None` for NULL (the defaults).
fn options<'a, T>(ptr: *const T, what: &str) -> Result<Option<&'a T>, Failure> {
    if ptr.is_null() {
        return Ok(None);
    }
    if !ptr.is_aligned() {
        return Err(Failure::invalid(format!(
            "{what} is not aligned for its type"
        )));
    }
    // SAFETY: non-NULL and aligned (checked above); the C caller promises a
    // whole initialised struct of this header's layout, alive for the call.
    Ok(Some(unsafe { &*ptr }))
}

/// The NUL-terminated path at `ptr`.
fn c_path<'a>(ptr: *const c_char) -> Result<&'a Path, Failure> {
    if ptr.is_null() {
        return Err(Failure::null("path"));
    }
    // SAFETY: non-NULL (checked above); the C caller promises a
    // NUL-terminated string alive for the call, and it is only read.
    let bytes = unsafe { CStr::from_ptr(ptr) }.to_bytes();
    if bytes.is_empty() {
        return Err(Failure::new(libc::ENOENT, "the path is empty"));
    }
    Ok(Path::new(OsStr::from_bytes(bytes)))
}

/// The value of a handle (never dereferenced).
fn handle_of<T>(handle: *mut T) -> usize {
    handle.addr()
}

/// Closes a handle of `kind` (NULL: nothing to do); the object is dropped
/// here, outside the handle table's locks.
fn close<T>(handle: *mut T, kind: Kind) -> c_int {
    call(|| {
        if !handle.is_null() {
            drop(handles::remove(handle_of(handle), kind)?);
        }
        Ok(PW_OK)
    })
}

/// Stores a new handle for `object` through `out` (checked before the
/// object was made, so this cannot fail on the pointer).
fn put_handle<T>(out: *mut *mut T, object: Object) -> Outcome {
    let handle = handles::insert(object)?;
    put(
        out,
        std::ptr::without_provenance_mut(handle),
        "the handle out-pointer",
    )?;
    Ok(PW_OK)
}

// SAFETY: the writer behind `WriterSlot::writer` is owned by the slot alone
// (made from a Box in `WriterSlot::new`), and `Writer` is `Send`; the
// reservation borrows only that writer. Moving the pair to another thread
// moves sole ownership of both.
unsafe impl Send for WriterSlot {}

impl WriterSlot {
    fn new(writer: Writer) -> WriterSlot {
        WriterSlot {
            pending: None,
            writer: NonNull::from(Box::leak(Box::new(writer))),
        }
    }

    /// The writer, when no reservation is open.
    fn writer(&mut self) -> Result<&mut Writer, Failure> {
        if self.pending.is_some() {
            return Err(Failure::new(
                libc::EINPROGRESS,
                "a reservation is open on this writer: pw_queue_commit or pw_queue_cancel it first",
            ));
        }
        // SAFETY: the pointer came from Box::leak in `new` and is freed only
        // in Drop; no reservation is open (checked above), so no other
        // reference to the writer exists, and `&mut self` keeps it unique.
        Ok(unsafe { self.writer.as_mut() })
    }

    /// Opens a reservation of `len` bytes; returns where to write them.
    fn reserve(&mut self, len: usize) -> Result<*mut u8, Failure> {
        self.writer()?;
        // SAFETY: as in `writer` (no reservation open). The `'static` borrow
        // really lives until `pending` is taken (commit, cancel, or Drop,
        // which drops it before freeing the writer), and the writer is not
        // used through `self.writer` while it is held (`writer()` refuses).
        let writer: &'static mut Writer = unsafe { &mut *self.writer.as_ptr() };
        let mut reservation = writer.reserve(len)?;
        let bytes = reservation.payload().as_mut_ptr();
        self.pending = Some(reservation);
        Ok(bytes)
    }
}

impl Drop for WriterSlot {
    fn drop(&mut self) {
        // An open reservation goes first (it zeroes its bytes, appending nothing).
        self.pending = None;
        // SAFETY: the pointer came from Box::leak in `new`, is freed only
        // here, and the reservation that borrowed it was dropped above.
        drop(unsafe { Box::from_raw(self.writer.as_ptr()) });
    }
}

fn writer_slot(held: &mut Held) -> &mut WriterSlot {
    match held.object() {
        Object::Writer(w) => w,
        _ => unreachable!("handles::hold checked the kind"),
    }
}

fn reader(held: &mut Held) -> &mut Reader {
    match held.object() {
        Object::Reader(r) => r,
        _ => unreachable!("handles::hold checked the kind"),
    }
}

fn buffer(held: &mut Held) -> &mut Buffer {
    match held.object() {
        Object::Buffer(b) => b,
        _ => unreachable!("handles::hold checked the kind"),
    }
}

// ---- version and errors ------------------------------------------------

const VERSION: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(v) => v,
        Err(_) => panic!("the package version has a NUL byte"),
    };

/// The library's version, `"MAJOR.MINOR.PATCH"` (static; compare with
/// `PW_VERSION_*` to catch a header and library that differ).
#[no_mangle]
pub extern "C" fn pw_version() -> *const c_char {
    VERSION.as_ptr()
}

/// The one-line message of the calling thread's last failed `pw_*` call
/// (`""` if none failed yet). Valid until this thread's next failing call.
/// Never NULL.
#[no_mangle]
pub extern "C" fn pw_last_error() -> *const c_char {
    error::last_error()
}

// ---- queue: writer -------------------------------------------------------

/// Opens the queue at `path` for writing (creating it unless
/// `PW_QUEUE_NO_CREATE`), takes the one-writer lock and recovers after a
/// crashed writer. `options` may be NULL (every default). On success stores
/// the writer in `*writer`. `-EBUSY`: another writer holds the queue;
/// `-EISDIR`: `path` is a directory; `-EINVAL`: it is another file that is
/// not regular (a FIFO, a device, a socket); `-EPERM`: a symbolic link or
/// another user's file.
#[no_mangle]
pub extern "C" fn pw_queue_writer_open(
    path: *const c_char,
    options: *const pw_queue_options,
    writer: *mut *mut pw_queue_writer,
) -> c_int {
    call(|| {
        let path = c_path(path)?;
        let (options, mode) = convert::queue_options(self::options(options, "options")?)?;
        writable(writer, "writer")?;
        let w = match mode {
            OpenMode::OpenOrCreate => Writer::open_or_create(path, options)?,
            OpenMode::CreateNew => Writer::create(path, options)?,
            OpenMode::OpenExisting => {
                if !path.exists() {
                    return Err(Failure::new(
                        libc::ENOENT,
                        format!("{}: no such queue (PW_QUEUE_NO_CREATE)", path.display()),
                    ));
                }
                Writer::open(path, options)?
            }
        };
        put_handle(writer, Object::Writer(WriterSlot::new(w)))
    })
}

/// Appends one record of `len` bytes from `data` (NULL allowed when `len`
/// is 0); visible to readers on return. Stores its position in `*position`
/// unless `position` is NULL. `-EMSGSIZE`: larger than the queue's largest
/// record; `-ENOSPC`: the file system is full (nothing appended).
#[no_mangle]
pub extern "C" fn pw_queue_append(
    writer: *mut pw_queue_writer,
    data: *const c_void,
    len: usize,
    position: *mut u64,
) -> c_int {
    call(|| {
        let mut held = handles::hold(handle_of(writer), Kind::Writer, false)?;
        let payload = input(data, len, "data")?;
        let at = writer_slot(&mut held).writer()?.append(payload)?;
        put_optional(position, at.as_u64(), "position")?;
        Ok(PW_OK)
    })
}

/// Reserves room for one record of `len` bytes and stores in `*buf` where
/// to write them (zero-copy). The record is published by `pw_queue_commit`,
/// or dropped by `pw_queue_cancel` or `pw_queue_writer_close`. Until then
/// other writer calls fail with `-EINPROGRESS`; `*buf` is valid until then.
#[no_mangle]
pub extern "C" fn pw_queue_reserve(
    writer: *mut pw_queue_writer,
    len: usize,
    buf: *mut *mut c_void,
) -> c_int {
    call(|| {
        let mut held = handles::hold(handle_of(writer), Kind::Writer, false)?;
        writable(buf, "buf")?;
        let bytes = writer_slot(&mut held).reserve(len)?;
        put(buf, bytes.cast::<c_void>(), "buf")?;
        Ok(PW_OK)
    })
}

/// Publishes the record opened by `pw_queue_reserve`; stores its position
/// in `*position` unless NULL. `-EINVAL` when no reservation is open.
#[no_mangle]
pub extern "C" fn pw_queue_commit(writer: *mut pw_queue_writer, position: *mut u64) -> c_int {
    call(|| {
        let mut held = handles::hold(handle_of(writer), Kind::Writer, false)?;
        if !position.is_null() {
            writable(position, "position")?;
        }
        let reservation = writer_slot(&mut held).pending.take().ok_or_else(|| {
            Failure::invalid("no reservation is open on this writer: call pw_queue_reserve first")
        })?;
        let at: Position = reservation.commit();
        put_optional(position, at.as_u64(), "position")?;
        Ok(PW_OK)
    })
}

/// Drops the reservation opened by `pw_queue_reserve` (its bytes are
/// zeroed; nothing is appended). `0` also when none is open.
#[no_mangle]
pub extern "C" fn pw_queue_cancel(writer: *mut pw_queue_writer) -> c_int {
    call(|| {
        let mut held = handles::hold(handle_of(writer), Kind::Writer, false)?;
        writer_slot(&mut held).pending = None;
        Ok(PW_OK)
    })
}

/// Makes every record appended so far durable (`msync`; cheap on tmpfs).
#[no_mangle]
pub extern "C" fn pw_queue_flush(writer: *mut pw_queue_writer) -> c_int {
    call(|| {
        let mut held = handles::hold(handle_of(writer), Kind::Writer, false)?;
        writer_slot(&mut held).writer()?.flush()?;
        Ok(PW_OK)
    })
}

/// Stores the largest payload one record can carry in `*max`.
#[no_mangle]
pub extern "C" fn pw_queue_max_payload(writer: *mut pw_queue_writer, max: *mut usize) -> c_int {
    call(|| {
        let mut held = handles::hold(handle_of(writer), Kind::Writer, false)?;
        writable(max, "max")?;
        let largest = writer_slot(&mut held).writer()?.max_payload();
        put(max, largest, "max")?;
        Ok(PW_OK)
    })
}

/// Prepares, now and on the calling thread, the next `bytes` of the file
/// after the writer's position: allocates them and, with pre-touch (the
/// default; not with `PW_QUEUE_NO_PRETOUCH`), maps them in, so appends into
/// them allocate nothing and take no page fault. What the pre-toucher has
/// already prepared is not done again. Costs about 2.5 µs per 4 KiB page on
/// tmpfs (1 MiB: about 0.65 ms); the file grows by that much at once and the
/// pages count in the process's resident memory. Call it before a
/// latency-critical phase whose volume is known; appends never need it.
/// Nothing caps `bytes`: a huge value fills the file system (tmpfs: memory).
/// `-ENOSPC`: the file system is full; `-EINPROGRESS`: a reservation is open.
#[no_mangle]
pub extern "C" fn pw_queue_prepare(writer: *mut pw_queue_writer, bytes: u64) -> c_int {
    call(|| {
        let mut held = handles::hold(handle_of(writer), Kind::Writer, false)?;
        writer_slot(&mut held).writer()?.wait_pretouched(bytes)?;
        Ok(PW_OK)
    })
}

/// Closes the writer (an open reservation is dropped) and releases the
/// queue's lock. NULL is a no-op returning 0; a closed handle is `-EBADF`.
/// Does not flush: call `pw_queue_flush` first for durability on disk.
#[no_mangle]
pub extern "C" fn pw_queue_writer_close(writer: *mut pw_queue_writer) -> c_int {
    close(writer, Kind::Writer)
}

// ---- queue: reader -------------------------------------------------------

/// Opens the queue at `path` for reading, from its oldest record. Readers
/// never change the file; any number may read at once, in any process.
/// `-ENOENT`: no such file; `-EISDIR`: `path` is a directory; `-EINVAL`:
/// it is another file that is not regular (a FIFO, a device, a socket).
#[no_mangle]
pub extern "C" fn pw_queue_reader_open(
    path: *const c_char,
    reader: *mut *mut pw_queue_reader,
) -> c_int {
    call(|| {
        let path = c_path(path)?;
        writable(reader, "reader")?;
        let r = Reader::open(path)?;
        put_handle(reader, Object::Reader(Box::new(r)))
    })
}

/// Shared by `pw_queue_next` and `pw_queue_next_wait`: the out-pointers are
/// checked before a record is consumed.
fn next_record(
    handle: *mut pw_queue_reader,
    wait: Option<Option<Duration>>,
    data: *mut *const c_void,
    len: *mut usize,
    position: *mut u64,
) -> Outcome {
    let mut held = handles::hold(handle_of(handle), Kind::Reader, false)?;
    writable(data, "data")?;
    writable(len, "len")?;
    if !position.is_null() {
        writable(position, "position")?;
    }
    let r = reader(&mut held);
    let record = match wait {
        None => r.next()?,
        Some(timeout) => r.next_wait(Wait::Block { spins: 100 }, timeout)?,
    };
    let Some(record) = record else {
        return Ok(PW_EMPTY);
    };
    put(data, record.payload.as_ptr().cast::<c_void>(), "data")?;
    put(len, record.payload.len(), "len")?;
    put_optional(position, record.position.as_u64(), "position")?;
    Ok(PW_OK)
}

/// The next record: returns `0` and stores its bytes in `*data` and `*len`
/// (and its position in `*position` unless NULL), or returns `PW_EMPTY`
/// when there is none yet. Never blocks. The bytes are a copy owned by the
/// reader, valid until the next call on this reader.
#[no_mangle]
pub extern "C" fn pw_queue_next(
    reader: *mut pw_queue_reader,
    data: *mut *const c_void,
    len: *mut usize,
    position: *mut u64,
) -> c_int {
    call(|| next_record(reader, None, data, len, position))
}

/// Like `pw_queue_next`, but waits up to `timeout_ns` nanoseconds for a
/// record (negative: forever): spins briefly, then sleeps on a futex until
/// the writer commits. `PW_EMPTY` on timeout.
#[no_mangle]
pub extern "C" fn pw_queue_next_wait(
    reader: *mut pw_queue_reader,
    timeout_ns: i64,
    data: *mut *const c_void,
    len: *mut usize,
    position: *mut u64,
) -> c_int {
    let timeout = u64::try_from(timeout_ns).ok().map(Duration::from_nanos);
    call(|| next_record(reader, Some(timeout), data, len, position))
}

/// Moves the reader to `position`: a position an append or read returned,
/// `PW_SEEK_START` (the oldest record still there) or `PW_SEEK_END` (past
/// the newest). `-EINVAL` for a position that is not a record's start;
/// after a failed seek the reader may have moved (seek again to a known
/// position).
#[no_mangle]
pub extern "C" fn pw_queue_seek(reader: *mut pw_queue_reader, position: u64) -> c_int {
    call(|| {
        let mut held = handles::hold(handle_of(reader), Kind::Reader, false)?;
        let r = self::reader(&mut held);
        match position {
            PW_SEEK_START => r.seek_to_start()?,
            PW_SEEK_END => r.seek_end()?,
            p => r.seek(Position(p))?,
        }
        Ok(PW_OK)
    })
}

/// Maps in, now, the next `bytes` of the queue from the reader's position
/// that the file already holds (a read populate, across chunks: chunks ahead
/// are mapped now and kept until the reader gets there), so reading them
/// takes no page fault. Stores the position up to which pages are mapped in
/// (never past the file's size) in `*reached` unless `reached` is NULL.
/// Costs about 0.25 µs per 4 KiB page on tmpfs plus one `mmap` per chunk
/// ahead; the pages count in the process's resident memory until the reader
/// leaves their chunk. A reader can only prepare what the writer has
/// allocated: call it after the writer's `pw_queue_prepare`.
#[no_mangle]
pub extern "C" fn pw_queue_reader_prepare(
    reader: *mut pw_queue_reader,
    bytes: u64,
    reached: *mut u64,
) -> c_int {
    call(|| {
        let mut held = handles::hold(handle_of(reader), Kind::Reader, false)?;
        if !reached.is_null() {
            writable(reached, "reached")?;
        }
        let end = self::reader(&mut held).prepare(bytes)?;
        put_optional(reached, end.as_u64(), "reached")?;
        Ok(PW_OK)
    })
}

/// Closes the reader. NULL is a no-op returning 0.
#[no_mangle]
pub extern "C" fn pw_queue_reader_close(reader: *mut pw_queue_reader) -> c_int {
    close(reader, Kind::Reader)
}

// ---- region --------------------------------------------------------------

/// Maps `size` bytes with the best page size allowed and populates them as
/// `options` says (NULL: auto pages, lazy). `pw_region_backing` says what
/// was granted. `-ENOMEM` with a message saying how to reserve pages when a
/// strict page size cannot be had.
#[no_mangle]
pub extern "C" fn pw_region_new(
    size: usize,
    options: *const pw_region_options,
    region: *mut *mut pw_region,
) -> c_int {
    call(|| {
        let builder = convert::region_builder(size, self::options(options, "options")?)?;
        writable(region, "region")?;
        let built = builder.build()?;
        put_handle(region, Object::Region(Arc::new(built)))
    })
}

/// Stores the region's first byte in `*ptr` (aligned to its page size).
/// Valid until `pw_region_free`.
#[no_mangle]
pub extern "C" fn pw_region_ptr(region: *mut pw_region, ptr: *mut *mut c_void) -> c_int {
    call(|| {
        writable(ptr, "ptr")?;
        let r = handles::region(handle_of(region))?;
        put(ptr, std::ptr::with_exposed_provenance_mut(r.addr()), "ptr")?;
        Ok(PW_OK)
    })
}

/// Stores the region's usable length (the size asked for) in `*len`.
#[no_mangle]
pub extern "C" fn pw_region_len(region: *mut pw_region, len: *mut usize) -> c_int {
    call(|| {
        writable(len, "len")?;
        let r = handles::region(handle_of(region))?;
        put(len, r.len(), "len")?;
        Ok(PW_OK)
    })
}

/// Fills `*backing` with what the region asked for and what the kernel
/// granted now (one `PAGEMAP_SCAN` ioctl or one smaps read), including the
/// page size taken and why larger ones were skipped.
#[no_mangle]
pub extern "C" fn pw_region_backing(region: *mut pw_region, backing: *mut pw_backing) -> c_int {
    call(|| {
        writable(backing, "backing")?;
        let r = handles::region(handle_of(region))?;
        put(backing, convert::backing(&r.backing()), "backing")?;
        Ok(PW_OK)
    })
}

/// Blocks until the first `n` bytes are populated (background regions wait
/// for or help the workers; lazy ones populate now; eager ones return).
#[no_mangle]
pub extern "C" fn pw_region_wait_populated(region: *mut pw_region, n: usize) -> c_int {
    call(|| {
        let r: Arc<Region> = handles::region(handle_of(region))?;
        r.wait_populated(n)?;
        Ok(PW_OK)
    })
}

/// Unmaps the region (after joining its workers). NULL is a no-op
/// returning 0. A call running on the region in another thread keeps the
/// mapping until it returns.
#[no_mangle]
pub extern "C" fn pw_region_free(region: *mut pw_region) -> c_int {
    close(region, Kind::Region)
}

// ---- buffer --------------------------------------------------------------

/// A buffer that can grow to `max` bytes without moving (address space is
/// reserved, nothing committed). `options` may be NULL.
#[no_mangle]
pub extern "C" fn pw_buffer_new(
    max: usize,
    options: *const pw_buffer_options,
    buffer: *mut *mut pw_buffer,
) -> c_int {
    call(|| {
        let opts = convert::buffer_options(max, self::options(options, "options")?)?;
        writable(buffer, "buffer")?;
        let b = Buffer::with_options(opts)?;
        put_handle(buffer, Object::Buffer(Box::new(b)))
    })
}

/// Sets the length to `len`; new bytes are set to `byte` (as `memset`,
/// converted to `unsigned char`). Shrinking keeps the pages. Growing past
/// the reserved maximum moves the pages once (no copy): pointers from
/// `pw_buffer_ptr` are then stale.
#[no_mangle]
pub extern "C" fn pw_buffer_resize(buffer: *mut pw_buffer, len: usize, byte: c_int) -> c_int {
    call(|| {
        let mut held = handles::hold(handle_of(buffer), Kind::Buffer, false)?;
        self::buffer(&mut held).resize(len, byte as u8)?;
        Ok(PW_OK)
    })
}

/// Appends `len` bytes from `data` (which must not point into this
/// buffer's reserved range: `-EINVAL`).
#[no_mangle]
pub extern "C" fn pw_buffer_append(
    buffer: *mut pw_buffer,
    data: *const c_void,
    len: usize,
) -> c_int {
    call(|| {
        let mut held = handles::hold(handle_of(buffer), Kind::Buffer, false)?;
        let b = self::buffer(&mut held);
        let reserved = b.report().reserved;
        if overlap(data.addr(), len, b.as_slice().as_ptr().addr(), reserved) {
            return Err(Failure::invalid(
                "pw_buffer_append: data lies inside the buffer itself",
            ));
        }
        let bytes = input(data, len, "data")?;
        b.extend_from_slice(bytes)?;
        Ok(PW_OK)
    })
}

/// Stores the buffer's first byte in `*ptr`: valid until the buffer grows
/// past its reserved maximum, or is freed.
#[no_mangle]
pub extern "C" fn pw_buffer_ptr(buffer: *mut pw_buffer, ptr: *mut *mut c_void) -> c_int {
    call(|| {
        let mut held = handles::hold(handle_of(buffer), Kind::Buffer, false)?;
        writable(ptr, "ptr")?;
        let first = self::buffer(&mut held).as_mut_slice().as_mut_ptr();
        put(ptr, first.cast::<c_void>(), "ptr")?;
        Ok(PW_OK)
    })
}

/// Stores the buffer's length in `*len`.
#[no_mangle]
pub extern "C" fn pw_buffer_len(buffer: *mut pw_buffer, len: *mut usize) -> c_int {
    call(|| {
        let mut held = handles::hold(handle_of(buffer), Kind::Buffer, false)?;
        writable(len, "len")?;
        let n = self::buffer(&mut held).len();
        put(len, n, "len")?;
        Ok(PW_OK)
    })
}

/// Unmaps the buffer. NULL is a no-op returning 0.
#[no_mangle]
pub extern "C" fn pw_buffer_free(buffer: *mut pw_buffer) -> c_int {
    close(buffer, Kind::Buffer)
}

// ---- copy ----------------------------------------------------------------

/// Copies `n` bytes from `src` to `dst` with the plan `pagewise::copy::copy`
/// uses (the same kernels and thresholds; non-temporal stores for large
/// sizes). The ranges must not overlap (`-EINVAL`, nothing copied); NULL
/// with `n > 0` is `-EFAULT`. Any thread.
#[no_mangle]
pub extern "C" fn pw_copy(dst: *mut c_void, src: *const c_void, n: usize) -> c_int {
    // The hot path is a few compares before the copy: every refusal, with
    // its message, is out of line.
    if dst.is_null()
        || src.is_null()
        || n > isize::MAX as usize
        || overlap(dst.addr(), n, src.addr(), n)
    {
        return copy_refused(dst, src, n);
    }
    // Every path ends in a call whose result is returned, so the whole
    // function needs no stack frame and its copy ends in a jump to the
    // kernel, which returns the 0 (measured: pw_copy at 4 KiB ran at 0.93 of
    // `copy` with a frame and the call, in `bench memcpy --c-library`).
    if !PLAN_READY.load(Ordering::Acquire) {
        return copy_first(dst, src, n);
    }
    copy_accepted(dst, src, n)
}

/// The copy of `pw_copy` once its arguments passed the checks.
#[inline(always)]
fn copy_accepted(dst: *mut c_void, src: *const c_void, n: usize) -> c_int {
    // SAFETY: both pointers are non-NULL, `n` is at most isize::MAX and the
    // ranges do not overlap (the caller checked, so the shared and the
    // exclusive slice never alias); the C caller promises `n` readable
    // bytes at `src` and `n` writable bytes at `dst` for the call, as with
    // memcpy.
    let (to, from) = unsafe {
        (
            std::slice::from_raw_parts_mut(dst.cast::<u8>(), n),
            std::slice::from_raw_parts(src.cast::<u8>(), n),
        )
    };
    // Both slices are `n` long: the status is 0.
    pagewise::copy::copy_status(to, from)
}

/// The first `pw_copy` of the process: detects the plan, then copies.
#[cold]
#[inline(never)]
fn copy_first(dst: *mut c_void, src: *const c_void, n: usize) -> c_int {
    match detect_plan() {
        PW_OK => copy_accepted(dst, src, n),
        code => code,
    }
}

/// Whether the process's copy plan has been detected (by a call of `pw_copy`
/// or `pw_fill` under `call`), so that copies and fills may skip the
/// unwinding guard.
static PLAN_READY: AtomicBool = AtomicBool::new(false);

/// `PW_OK` once the process's copy plan is detected; the first call detects
/// it, under the panic guard, and returns its error code if that failed.
///
/// The only code of a copy or fill that can panic is the first call's
/// detection of the plan (it reads the cache): that runs once under `call`,
/// and every later call goes straight to the kernel, without the unwinding
/// landing pad (measured: 9% of a 4 KiB copy through the C entry; `pw_fill`
/// at 256 B ran at 0.59 of `fill` with the guard on every call, in
/// `pagewise bench memset --c-library`).
#[inline(always)]
fn plan_ready() -> c_int {
    if PLAN_READY.load(Ordering::Acquire) {
        PW_OK
    } else {
        detect_plan()
    }
}

/// The first call's part of [`plan_ready`], out of line.
#[cold]
#[inline(never)]
fn detect_plan() -> c_int {
    let code = call(|| {
        pagewise::copy::global_copier();
        Ok(PW_OK)
    });
    if code == PW_OK {
        PLAN_READY.store(true, Ordering::Release);
    }
    code
}

/// Why `pw_copy` refused its arguments (or `PW_OK` for an empty copy with
/// NULL pointers, which copies nothing).
#[cold]
#[inline(never)]
fn copy_refused(dst: *mut c_void, src: *const c_void, n: usize) -> c_int {
    call(|| {
        if n == 0 {
            return Ok(PW_OK);
        }
        if dst.is_null() {
            return Err(Failure::null("dst"));
        }
        if src.is_null() {
            return Err(Failure::null("src"));
        }
        if n > isize::MAX as usize {
            return Err(Failure::invalid(format!(
                "{n} bytes is more than any object"
            )));
        }
        Err(Failure::invalid(
            "pw_copy: the ranges overlap (use memmove)",
        ))
    })
}

/// Sets `n` bytes at `dst` to `byte` (converted to `unsigned char`) with
/// the plan of `pagewise::copy::fill`. Any thread.
#[no_mangle]
pub extern "C" fn pw_fill(dst: *mut c_void, byte: c_int, n: usize) -> c_int {
    // Out of line, as in pw_copy: NULL with n == 0 is an empty fill.
    if dst.is_null() || n > isize::MAX as usize {
        return fill_refused(dst, n);
    }
    let code = plan_ready();
    if code != PW_OK {
        return code;
    }
    // SAFETY: `dst` is non-NULL and `n` at most isize::MAX (checked above);
    // the C caller promises `n` writable bytes at `dst` that nothing else
    // touches during the call, as with memset.
    let to = unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), n) };
    pagewise::copy::fill(to, byte as u8);
    PW_OK
}

/// Why `pw_fill` refused its arguments (or `PW_OK` for an empty fill at
/// NULL).
#[cold]
#[inline(never)]
fn fill_refused(dst: *mut c_void, n: usize) -> c_int {
    call(|| match n {
        0 => Ok(PW_OK),
        _ if dst.is_null() => Err(Failure::null("dst")),
        _ => Err(Failure::invalid(format!(
            "{n} bytes is more than any object"
        ))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_is_exact() {
        assert!(!overlap(0, 10, 10, 10));
        assert!(overlap(0, 11, 10, 10));
        assert!(!overlap(0, 0, 0, 10));
        assert!(overlap(usize::MAX - 1, 10, usize::MAX - 2, 2));
        assert!(overlap(5, 1, 0, 10) && overlap(0, 10, 9, 1) && !overlap(10, 1, 0, 10));
        assert!(!overlap(0, 10, 0, 0) && overlap(3, 2, 3, 2));
    }

    #[test]
    fn the_version_matches_the_header_constants() {
        let v = VERSION.to_str().unwrap();
        assert_eq!(
            v,
            format!("{PW_VERSION_MAJOR}.{PW_VERSION_MINOR}.{PW_VERSION_PATCH}")
        );
    }
}
