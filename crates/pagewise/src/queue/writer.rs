//! The single writer: locking, recovery, appends, growth, flush, retention.

use super::error::QueueError;
use super::layout::{
    self, encode_header, read_header, Geometry, CHUNK_HEADER_LEN, CHUNK_MAGIC, CHUNK_OFF_CREATED,
    CHUNK_OFF_INDEX, HEADER_LEN, MARK_LEN, OFF_FIRST_CHUNK, OFF_FLUSHED_END, OFF_TAIL_CHUNK,
    OFF_WRITER_OPENS, OFF_WRITER_PID, OFF_WRITER_PRETOUCH, OFF_WRITER_PRETOUCH_SINCE,
    OFF_WRITER_PRETOUCH_SWITCHES, OFF_WRITER_USABLE_CPUS,
};
use super::lock::{self, WriterLock};
use super::maps::{ChunkMaps, QueuePrepare};
use super::notify::Waker;
use super::recovery::{self, Recovery};
use super::window::{self, PreTouch, PreTouchMode, PreToucher, Resolved, Window, WindowReport};
use super::Position;
use crate::copy::Routine;
use crate::sys::create::{self, NewFile};
use crate::sys::file;
use crate::sys::file_map::WriteMap;
use crate::sys::Errno;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How to create or open a queue for writing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Bytes per chunk for a new queue: a power of two from 64 KiB to 1 GiB
    /// (default 64 MiB). An existing queue keeps its own.
    pub chunk_size: u64,
    /// Give every record of a new queue a CRC-32 that readers check (default
    /// off). Worth it on disk, where a power cut can persist a mark without
    /// its payload. An existing queue keeps its own setting.
    pub record_crc: bool,
    /// Pack every record of a new queue to a multiple of 8 bytes (default
    /// off). Off, a new queue has line-fitting records
    /// ([`layout::FLAG_LINE_FITTING`]): a record of up to 56 payload bytes
    /// (52 with a CRC) is padded to end on a multiple of 16, 32 or 64
    /// bytes, so that in a run of such records each after the first lies in
    /// one cache line, which saves a reader one cache-line transfer per
    /// record (a 32-byte payload takes 64 bytes of file instead of 40).
    /// Pack when file size matters more than one small record's latency. An
    /// existing queue keeps its own.
    pub packed_records: bool,
    /// Keep a window ahead of the writer allocated and faulted in (default
    /// on, 4 MiB; by a thread or in the writer's idle time, chosen from the
    /// usable CPUs: [`PreTouchMode::Auto`]). `None`: the writer allocates as
    /// it goes and takes a page fault on every new page.
    pub pretouch: Option<PreTouch>,
    /// Permission bits of a new queue file (default `0o644`, minus the umask).
    /// Only processes that may write the file can truncate or damage it;
    /// readers need read permission only.
    pub mode: u32,
    /// The routine that copies payloads into the file in [`Writer::append`]
    /// (default [`Routine::Pagewise`]).
    pub copy: Routine,
    /// When recovery finds a record whose CRC fails with intact records
    /// after it where no crash can have torn it (on tmpfs, or before the end
    /// the last [`Writer::flush`] made durable), drop it and all after it
    /// (see [`Recovery::discarded_records`]) instead of refusing with
    /// [`QueueError::DamagedRecord`] (default off). Past the durable end of
    /// a disk file such a record is taken for a torn write and dropped
    /// either way. The same for a record that runs past the end of the file
    /// with whole records inside it ([`QueueError::DamagedLength`]); one
    /// the file was merely cut short inside is dropped either way
    /// ([`Recovery::cut_record_at`]).
    pub discard_damaged: bool,
    /// After each commit, push the record's cache lines out of this core's
    /// private caches to the shared last-level cache (`cldemote`, default
    /// off), so that a reader on another core that waits for the record
    /// reads it from there instead of snooping this core. For writers
    /// whose records are spaced out and awaited (request and reply, paced
    /// feeds): measured on a Sapphire Rapids-class guest, round trips of
    /// 128 B and 1 KiB records 30-120 ns (7-10 %) faster at the median. Not
    /// for a writer that appends as fast as it can: there it halved the
    /// records per second (128 B, 12-13 -> 6 M/s). One `cldemote` per cache
    /// line of the record, none for the line that holds the next record's
    /// mark; a no-op on CPUs without the instruction (AMD, Intel before
    /// Sapphire Rapids and Tremont), where it runs as a `nop`.
    pub hand_off: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            chunk_size: layout::DEFAULT_CHUNK,
            record_crc: false,
            packed_records: false,
            pretouch: Some(PreTouch::default()),
            mode: 0o644,
            copy: Routine::default(),
            discard_damaged: false,
            hand_off: false,
        }
    }
}

/// What a writer did, for reports.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WriterReport {
    /// Where the next record goes.
    pub position: Position,
    /// The chunk the writer is in.
    pub chunk: u64,
    /// What recovery found at open.
    pub recovery: Recovery,
    /// The pre-toucher (or inline allocation).
    pub window: WindowReport,
    /// `FUTEX_WAKE` calls made for blocked readers (at most one per
    /// kernel tick while no reader sleeps; one per append while readers
    /// sleep between records).
    pub wakes: u64,
    /// Readers those `FUTEX_WAKE` calls woke (what the kernel returned,
    /// summed): a reader asleep on the queue when a record came.
    pub woken: u64,
    /// Why the last `FUTEX_WAKE` failed, if one did.
    pub wake_error: Option<String>,
}

/// Bounds for [`Writer::retain`]; a chunk is dropped when either says so.
/// The chunk the writer is in is never dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// Keep the newest `max_bytes` of records; drop chunks that lie entirely
    /// before them.
    pub max_bytes: Option<u64>,
    /// Drop chunks whose every record is older than this: chunk `c` goes once
    /// chunk `c+1` was started at least `max_age` ago (wall clock).
    pub max_age: Option<Duration>,
}

/// What [`Writer::retain`] dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RetainReport {
    /// Chunks dropped by this call.
    pub dropped_chunks: u64,
    /// The first chunk still in the queue.
    pub first_chunk: u64,
    /// The first position still readable.
    pub first_position: Position,
    /// Whether the space was given back (hole punching); `false` on file
    /// systems without it: the chunks are dropped but stay allocated.
    pub space_freed: bool,
}

type CommitHook = Box<dyn FnMut(Position) + Send>;

/// The one writer of a queue. See the [module docs](super).
pub struct Writer {
    path: PathBuf,
    file: Arc<File>,
    geometry: Geometry,
    header: WriteMap,
    waker: Waker,
    hand_off: bool,
    /// The first chunk still in the queue (only this writer changes it).
    first_chunk: u64,
    /// The current chunk's mapping.
    map: WriteMap,
    chunk: u64,
    chunk_base: u64,
    chunk_end: u64,
    /// Where the next record goes.
    pos: u64,
    /// File bytes below this are allocated (and, with pre-touch, populated).
    ready_end: u64,
    window: Window,
    maps: Arc<ChunkMaps>,
    recovery: Recovery,
    /// The first byte not yet flushed.
    unflushed_from: u64,
    hook: Option<CommitHook>,
    copy: fn(&mut [u8], &[u8]),
    /// Pre-touch is on: `idle_work` has work to do.
    pretouch: bool,
    /// Held until the writer is dropped.
    lock: WriterLock,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("path", &self.path)
            .field("geometry", &self.geometry)
            .field("position", &self.pos)
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

/// Now, ns since the Unix epoch (0 if the clock is before it).
pub(super) fn now_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn check_options(options: &Options) -> Result<(), QueueError> {
    Geometry::check_new(options.chunk_size).map_err(QueueError::InvalidOptions)?;
    if let Some(p) = &options.pretouch {
        p.check().map_err(QueueError::InvalidOptions)?;
    }
    Ok(())
}

/// Opens an existing queue for writing: never through a symbolic link, and
/// only a regular file this user owns.
fn open_for_writing(path: &Path) -> Result<File, QueueError> {
    let refused = |reason: String| QueueError::Refused {
        path: path.to_owned(),
        reason,
    };
    let opened = create::open_no_follow(path);
    if opened.is_err() && std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
    {
        return Err(refused("a symbolic link: pagewise does not write a queue through a link (give the path of the file itself)".into()));
    }
    let (file, meta) = layout::checked_open(path, opened)?;
    let (owner, me) = (meta.uid(), create::effective_uid());
    if owner != me {
        return Err(refused(format!(
            "owned by user {owner}, not by this user ({me}), who could truncate it under the writer: run the writer as user {owner}, or copy the records into a queue of your own"
        )));
    }
    Ok(file)
}

impl Writer {
    /// Creates a new queue at `path` and opens it for writing. Fails with
    /// [`QueueError::Exists`] if anything has that name (a symbolic link
    /// included). The file appears complete, header and all, or not at all;
    /// its mode is `Options::mode` minus the umask. A create that fails (a
    /// full file system, say) leaves nothing behind: neither the queue file
    /// nor the `<path>.lock` it made (one that was there before stays). Costs a file creation, a
    /// header write and `fdatasync`, and what [`Writer::open`] costs.
    pub fn create(path: impl AsRef<Path>, options: Options) -> Result<Writer, QueueError> {
        let path = path.as_ref();
        check_options(&options)?;
        // Built unnamed and named only when whole: no other process can see a
        // file without its header, and a failure leaves nothing behind.
        if std::fs::symlink_metadata(path).is_ok() {
            // Said before the lock file is tried: a running writer of that
            // queue would otherwise make this `WriterLocked`.
            return Err(QueueError::Exists {
                path: path.to_owned(),
            });
        }
        let new = NewFile::in_dir_of(path, options.mode)
            .map_err(|e| QueueError::sys(path, "create the queue", e))?;
        let mut lock = lock::lock(path, new.file())?;
        // A create that fails leaves nothing behind, its lock file included:
        // before the name is given, the unnamed file goes when it is
        // dropped; after, dropping the lock removes the file it named.
        let named = (|| {
            let geometry = Geometry::new_queue(
                options.chunk_size,
                options.record_crc,
                !options.packed_records,
                now_unix_ns(),
            );
            // The header page is allocated like everything else: a full file system fails here.
            file::allocate(new.file(), 0, HEADER_LEN).map_err(|e| QueueError::NoSpace {
                path: path.to_owned(),
                offset: 0,
                error: e,
            })?;
            new.file()
                .write_all_at(&encode_header(&geometry), 0)
                .map_err(QueueError::io(path, "write the header"))?;
            // On a disk, the header reaches it before the name does.
            new.file()
                .sync_data()
                .map_err(QueueError::io(path, "flush the header"))?;
            new.link_at(path).map_err(|e| {
                if e.source.kind() == std::io::ErrorKind::AlreadyExists {
                    QueueError::Exists {
                        path: path.to_owned(),
                    }
                } else {
                    QueueError::sys(path, "give the new queue its name", e)
                }
            })
        })();
        let file = named?;
        let meta = file
            .metadata()
            .map_err(QueueError::io(path, "stat the new queue"))?;
        lock.made_queue(path, &meta);
        Writer::start(path, file, lock, &options)
    }

    /// Opens an existing queue for writing: takes the writer lock, finds the
    /// last committed record, discards a torn one (and anything after it),
    /// and starts the pre-toucher. Fails with [`QueueError::WriterLocked`] if
    /// another writer is alive, with [`QueueError::NotAFile`] for anything
    /// but a regular file (a directory, a FIFO, a device), with
    /// [`QueueError::Refused`] for a symbolic link or a file another user
    /// owns (its owner could truncate it under the writer), and with
    /// [`QueueError::DamagedRecord`] for a record whose CRC fails where no
    /// crash can have torn it, or [`QueueError::DamagedLength`] for a record
    /// running past the end of the file with whole records inside it (see
    /// [`Options::discard_damaged`]); a last record the file was cut short
    /// inside is dropped ([`Recovery::cut_record_at`]). An open that fails
    /// removes the `<path>.lock` it made, if it made one. Costs a
    /// walk over the records of the chunk the writer was last in (about a
    /// millisecond per 64 MiB chunk); after a failed CRC, a read of every
    /// record after it; after a record the file ends inside, a read of its
    /// bytes the file holds.
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<Writer, QueueError> {
        let path = path.as_ref();
        check_options(&options)?;
        let mut tries = 0;
        loop {
            let file = open_for_writing(path)?;
            // A file that is no queue is refused before the lock file is made:
            // refusing it must not leave `<path>.lock` behind.
            read_header(path, &file)?;
            let lock = lock::lock(path, &file)?;
            let meta = file
                .metadata()
                .map_err(QueueError::io(path, "stat the queue"))?;
            // A create that failed removes the queue it named while it holds
            // the lock: a file opened just before is then no longer the
            // queue at `path`. Open the name again (there may be none now).
            if lock::still_named(path, &meta) {
                return Writer::start(path, file, lock, &options);
            }
            tries += 1;
            if tries == 8 {
                return Err(QueueError::WriterLocked {
                    path: path.to_owned(),
                });
            }
        }
    }

    /// Opens the queue at `path`, creating it first if there is none.
    pub fn open_or_create(path: impl AsRef<Path>, options: Options) -> Result<Writer, QueueError> {
        let path = path.as_ref();
        match Writer::open(path, options.clone()) {
            Err(QueueError::Io { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => {
                match Writer::create(path, options.clone()) {
                    Err(QueueError::Exists { .. }) => Writer::open(path, options),
                    other => other,
                }
            }
            other => other,
        }
    }

    fn start(
        path: &Path,
        file: File,
        lock: WriterLock,
        options: &Options,
    ) -> Result<Writer, QueueError> {
        let (geometry, state, size) = read_header(path, &file)?;
        let file = Arc::new(file);
        let header = WriteMap::map(&file, 0, HEADER_LEN as usize, false)
            .map_err(|e| QueueError::sys(path, "map the header", e))?;
        let recovery =
            recovery::recover(path, &file, &geometry, state, size, options.discard_damaged)?;
        let end = recovery.end;
        if state.flushed_end > end.0 {
            // Records were dropped below the durable end: records written
            // there from now on are not durable until the next flush.
            header.store_u64(OFF_FLUSHED_END, end.0, Ordering::Release);
            header
                .sync(0, HEADER_LEN as usize)
                .map_err(|e| QueueError::sys(path, "flush the header", e))?;
        }

        let chunk = geometry.chunk_of(end.0);
        let populate = options.pretouch.is_some();
        let resolved = match &options.pretouch {
            Some(p) => p.resolve_auto(),
            None => Resolved {
                mode: PreToucher::Off,
                reason: "not asked for".to_owned(),
                usable_cpus: None,
                adaptive: false,
            },
        };
        let mode = resolved.mode;
        let pretouch = options.pretouch.unwrap_or(PreTouch {
            window: 1 << 20,
            max_window: 1 << 20,
            lead: Duration::ZERO,
            // Only sizes the pieces (128 KiB): without pre-touch there is no
            // thread and `idle_work` does nothing.
            mode: PreTouchMode::Thread,
        });
        let piece = pretouch
            .piece(mode != PreToucher::Idle)
            .min(geometry.chunk_size);
        let maps = Arc::new(ChunkMaps::new(
            path.to_owned(),
            Arc::clone(&file),
            geometry,
            populate,
        ));
        let prep = QueuePrepare::new(Arc::clone(&maps), populate);
        let cache_lead = if populate {
            window::machine_cache_lead()
        } else {
            0
        };
        let window = Window::start(
            HEADER_LEN,
            piece,
            end.0,
            pretouch,
            Box::new(prep),
            resolved,
            cache_lead,
        )?;
        let map = maps.take(chunk)?;
        let chunk_base = geometry.chunk_base(chunk).unwrap_or(u64::MAX);
        let waker = Waker::open(&header);
        let mut writer = Writer {
            path: path.to_owned(),
            file,
            geometry,
            header,
            waker,
            hand_off: options.hand_off,
            first_chunk: state.first_chunk,
            map,
            chunk,
            chunk_base,
            chunk_end: chunk_base + geometry.chunk_size,
            pos: end.0,
            ready_end: 0,
            window,
            maps,
            recovery,
            unflushed_from: end.0,
            hook: None,
            copy: options.copy.prepare(),
            pretouch: populate,
            lock,
        };
        // The next mark must be inside the allocated file before anyone reads it.
        writer.ready_end = match writer.window.wait_ready(end.0 + MARK_LEN) {
            Ok(f) => f,
            // A full file system: the page holding the end was kept allocated by
            // discard_after, so the writer can open and report NoSpace on append.
            Err(QueueError::NoSpace { .. }) if end.0 + MARK_LEN <= size => end
                .0
                .next_multiple_of(crate::sys::base_page_size() as u64)
                .min(size),
            Err(e) => return Err(e),
        };
        writer.enter_chunk_header()?;
        writer
            .header
            .store_u32(OFF_WRITER_PID, std::process::id(), Ordering::Relaxed);
        writer.record_pretouch();
        let opens = writer
            .header
            .load_u64(OFF_WRITER_OPENS, Ordering::Relaxed)
            .unwrap_or(0);
        writer
            .header
            .store_u64(OFF_WRITER_OPENS, opens.wrapping_add(1), Ordering::Relaxed);
        writer
            .header
            .store_u64(OFF_TAIL_CHUNK, chunk, Ordering::Release);
        // Open: from now on the queue and lock files stay when it is dropped.
        writer.lock.keep();
        Ok(writer)
    }

    /// Records the pre-toucher in the queue header for `inspect`: at open,
    /// and after every switch.
    #[cold]
    fn record_pretouch(&mut self) {
        let (code, switches, since, cpus) = self.window.header_words();
        self.header
            .store_u32(OFF_WRITER_PRETOUCH, code, Ordering::Relaxed);
        self.header
            .store_u32(OFF_WRITER_PRETOUCH_SWITCHES, switches, Ordering::Relaxed);
        self.header
            .store_u64(OFF_WRITER_PRETOUCH_SINCE, since, Ordering::Relaxed);
        self.header
            .store_u32(OFF_WRITER_USABLE_CPUS, cpus, Ordering::Relaxed);
    }

    /// Writes the current chunk's header if it is not there yet.
    fn enter_chunk_header(&mut self) -> Result<(), QueueError> {
        let mut magic = [0u8; 8];
        self.map.copy_out(0, &mut magic);
        let index = self.map.load_u64(CHUNK_OFF_INDEX, Ordering::Relaxed);
        if magic != CHUNK_MAGIC || index != Some(self.chunk) {
            self.map.write(0, &CHUNK_MAGIC);
            self.map
                .store_u64(CHUNK_OFF_INDEX, self.chunk, Ordering::Relaxed);
            self.map
                .store_u64(CHUNK_OFF_CREATED, now_unix_ns(), Ordering::Relaxed);
        }
        Ok(())
    }

    /// The queue file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The queue's fixed parameters.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Where the next record will go (if it fits in the current chunk).
    pub fn position(&self) -> Position {
        Position(self.pos)
    }

    /// The largest payload a record can carry.
    pub fn max_payload(&self) -> usize {
        self.geometry.max_payload()
    }

    /// What recovery found when this writer opened the queue.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// A snapshot of what the writer and its pre-toucher did.
    pub fn report(&self) -> WriterReport {
        WriterReport {
            position: Position(self.pos),
            chunk: self.chunk,
            recovery: self.recovery.clone(),
            window: self.window.report(),
            wakes: self.waker.wakes(),
            woken: self.waker.woken(),
            wake_error: self.waker.error().map(str::to_owned),
        }
    }

    /// Returns once the `bytes` after the writer's position are prepared
    /// (allocated and, with pre-touch, mapped in), preparing on this thread
    /// what the pre-toucher has not: about 2.5 µs per 4 KiB page on tmpfs.
    /// Not capped by the window or anything else: the file grows by `bytes`
    /// at once and the pages stay allocated, so a huge value fills the file
    /// system (tmpfs: memory) and ends in `NoSpace`. Use it before a latency-critical phase whose
    /// volume is known (see "Preparing a run up front" in docs/queue.md);
    /// appends never need it.
    pub fn wait_pretouched(&mut self, bytes: u64) -> Result<(), QueueError> {
        self.ready_end = self.window.wait_ready(self.pos.saturating_add(bytes))?;
        Ok(())
    }

    /// Does a little of the pre-toucher's work on this thread: half of one
    /// 4 KiB piece of the window (one call allocates it, about 0.7 µs on
    /// tmpfs; the next faults it in, about 1.5–2 µs) when the window is
    /// short, or takes a retired chunk's mapping down by 64 KiB (a
    /// microsecond or two). Returns whether there was work. Call it while a
    /// paced writer waits for its next record;
    /// in [`PreTouchMode::Idle`] it is what keeps appends free of
    /// page faults. Does nothing without pre-touch.
    pub fn idle_work(&mut self) -> Result<bool, QueueError> {
        if !self.pretouch {
            return Ok(false);
        }
        let (worked, switched) = self.window.idle_step()?;
        if switched {
            self.record_pretouch();
        }
        Ok(worked)
    }

    /// Appends one record and returns its position. The record is visible to
    /// readers when this returns; it is durable on disk after [`Writer::flush`].
    ///
    /// Hot path: a bounds check, a copy of the payload into the mapping, one
    /// release store of the mark, one relaxed store for the pre-toucher, one
    /// store of the wake word with a full barrier after it (a locked exchange
    /// on x86-64) and a coarse clock read (vDSO). No
    /// system call while no reader sleeps and (with pre-touch) no page
    /// fault, except when the writer crosses into a new chunk or catches up
    /// with the pre-toucher. Errors: [`QueueError::RecordTooLarge`],
    /// [`QueueError::NoSpace`] (nothing was appended; retry after freeing
    /// space).
    #[inline]
    pub fn append(&mut self, payload: &[u8]) -> Result<Position, QueueError> {
        let pos = self.reserve_space(payload.len())?;
        let off = (pos - self.chunk_base) as usize;
        let written = self
            .map
            .write_with(off + MARK_LEN as usize, payload, self.copy);
        debug_assert!(written, "reserve_space made room in this chunk");
        self.commit_at(pos, payload.len(), Some(payload));
        Ok(Position(pos))
    }

    /// Reserves room for a record of `len` bytes for zero-copy filling; the
    /// record becomes visible when [`Reservation::commit`] is called. Dropping
    /// the reservation without committing zeroes the bytes and appends
    /// nothing.
    pub fn reserve(&mut self, len: usize) -> Result<Reservation<'_>, QueueError> {
        let pos = self.reserve_space(len)?;
        Ok(Reservation {
            writer: self,
            pos,
            len,
            committed: false,
        })
    }

    /// Makes room for a payload of `len` bytes; returns the record's position.
    #[inline]
    fn reserve_space(&mut self, len: usize) -> Result<u64, QueueError> {
        if len > self.geometry.max_payload() {
            return Err(QueueError::RecordTooLarge {
                len,
                max: self.geometry.max_payload(),
            });
        }
        let end = self.pos + self.geometry.record_size(self.pos, len as u64);
        if end <= self.chunk_end && end + CHUNK_HEADER_LEN + MARK_LEN <= self.ready_end {
            return Ok(self.pos);
        }
        self.make_room(len as u64)
    }

    #[cold]
    fn make_room(&mut self, len: u64) -> Result<u64, QueueError> {
        loop {
            let end = self.pos + self.geometry.record_size(self.pos, len);
            if end > self.chunk_end {
                self.roll()?;
                continue;
            }
            // After this record the next mark must be allocated: in this chunk, or the
            // first one of the next chunk when this record fills the chunk exactly.
            let need = if end == self.chunk_end {
                end + CHUNK_HEADER_LEN + MARK_LEN
            } else {
                end + MARK_LEN
            };
            if need > self.ready_end {
                self.catch_up(need)?;
            }
            return Ok(self.pos);
        }
    }

    /// Waits until `[.., need)` is prepared, preparing it itself if need be
    /// (the writer caught up with the pre-toucher); records a switch of the
    /// pre-toucher that the catch-up caused.
    fn catch_up(&mut self, need: u64) -> Result<(), QueueError> {
        let (ready, switched) = self.window.catch_up(need)?;
        self.ready_end = ready;
        if switched {
            self.record_pretouch();
        }
        Ok(())
    }

    /// Moves to the next chunk, padding the rest of this one.
    fn roll(&mut self) -> Result<(), QueueError> {
        let next = self.chunk + 1;
        let next_base = self.geometry.chunk_base(next).ok_or_else(|| {
            QueueError::corrupt(
                &self.path,
                self.pos,
                "the queue reached the largest file offset",
            )
        })?;
        let first = next_base + CHUNK_HEADER_LEN;
        // Readers jump to `first` when they see the pad: its mark must be allocated first.
        if first + MARK_LEN > self.ready_end {
            self.catch_up(first + MARK_LEN)?;
        }
        let new_map = self.maps.take(next)?;
        let rest = self.chunk_end - self.pos;
        if rest >= MARK_LEN {
            let off = (self.pos - self.chunk_base) as usize;
            let mark = layout::pad_mark(self.pos, (rest - MARK_LEN) as u32);
            self.map.store_u64(off, mark, Ordering::Release);
        }
        let old = std::mem::replace(&mut self.map, new_map);
        self.maps.retire(self.chunk, old);
        self.chunk = next;
        self.chunk_base = next_base;
        self.chunk_end = next_base + self.geometry.chunk_size;
        self.pos = first;
        self.enter_chunk_header()?;
        self.header
            .store_u64(OFF_TAIL_CHUNK, next, Ordering::Release);
        self.window.note(self.pos);
        self.notify();
        Ok(())
    }

    /// Publishes the record at `pos` whose payload is already in place.
    #[inline]
    fn commit_at(&mut self, pos: u64, len: usize, payload: Option<&[u8]>) {
        let off = (pos - self.chunk_base) as usize;
        let mark = layout::data_mark(pos, len as u32);
        if self.geometry.record_crc() {
            let crc = match payload {
                Some(p) => layout::record_crc(mark, p),
                None => {
                    let bytes = self
                        .map
                        .slice_mut(off + MARK_LEN as usize, len)
                        .map_or(&[][..], |s| &*s);
                    layout::record_crc(mark, bytes)
                }
            };
            self.map
                .write(off + MARK_LEN as usize + len, &crc.to_le_bytes());
        }
        if let Some(hook) = self.hook.as_mut() {
            hook(Position(pos));
        }
        self.map.store_u64(off, mark, Ordering::Release);
        self.pos = pos + self.geometry.record_size(pos, len as u64);
        self.window.note(self.pos);
        self.notify();
        if self.hand_off {
            self.hand_off_lines(off);
        }
        self.prefetch_ahead();
    }

    /// With [`Options::hand_off`]: pushes the cache lines of the record at
    /// chunk offset `off` that the writer will not write again (every line
    /// before the one that holds the next mark) to the shared cache
    /// (`cldemote`), after the commit and its barrier: a reader's miss is
    /// then served there, not by a snoop of this core. Before the barrier,
    /// the barrier waited for them (1 KiB round trip about 50 ns slower).
    #[inline]
    fn hand_off_lines(&self, off: usize) {
        let lines = finished_lines(off, self.next_mark_line());
        if !lines.is_empty() {
            self.map.demote(lines.start, lines.len());
        }
    }

    /// Asks the CPU for cache lines after the one that holds the next mark,
    /// for writing, while the writer has nothing to do (in a ping-pong it
    /// waits for the reply): the next records' stores then find them owned,
    /// and a mark becomes visible only after every store before it. Which
    /// lines: [`prefetch_lines`]. One or two `prefetchw`.
    #[inline]
    fn prefetch_ahead(&self) {
        let next = (self.pos - self.chunk_base) as usize;
        for line in prefetch_lines(next).into_iter().flatten() {
            self.map.prefetch_for_write(line);
        }
    }

    /// Chunk offset of the cache line that holds the next record's mark.
    #[inline]
    fn next_mark_line(&self) -> usize {
        (self.pos - self.chunk_base) as usize & !63
    }

    /// Publishes the commit to readers that sleep (see `notify`).
    #[inline]
    fn notify(&mut self) {
        self.waker.notify(&self.header);
    }

    /// Makes every record appended so far durable (`msync(MS_SYNC)` of the
    /// current chunk's new bytes and the header; `fdatasync` if the writer
    /// crossed chunks since the last flush), then records in the header how
    /// far that reaches, so that recovery can tell a later bad CRC before it
    /// (damage) from one after it (a power cut's torn write). On tmpfs this
    /// is cheap and changes nothing (there is no disk).
    pub fn flush(&mut self) -> Result<(), QueueError> {
        if self.unflushed_from >= self.chunk_base {
            let off = (self.unflushed_from - self.chunk_base) as usize;
            let len = (self.pos - self.unflushed_from) as usize + MARK_LEN as usize;
            self.map
                .sync(off, len.min(self.map.len() - off))
                .map_err(|e| QueueError::sys(&self.path, "flush records", e))?;
        } else {
            self.file
                .sync_data()
                .map_err(QueueError::io(&self.path, "flush records (fdatasync)"))?;
        }
        // Only once the records are durable: recovery takes a bad CRC
        // before this position for damage, not for a write a power cut tore.
        self.header
            .store_u64(OFF_FLUSHED_END, self.pos, Ordering::Release);
        self.header
            .sync(0, HEADER_LEN as usize)
            .map_err(|e| QueueError::sys(&self.path, "flush the header", e))?;
        self.unflushed_from = self.pos;
        Ok(())
    }

    /// Drops whole chunks older than the bounds: readers at or past the first
    /// kept chunk are unaffected; a reader in a dropped chunk gets
    /// [`QueueError::FellBehind`] at its next call. The space goes back to the
    /// file system (hole punching; the file keeps its size and positions).
    pub fn retain(&mut self, bounds: Retention) -> Result<RetainReport, QueueError> {
        let first = self.first_chunk;
        let now = now_unix_ns();
        let mut keep_from = first;
        for c in first..self.chunk {
            let end = self.geometry.chunk_base(c + 1).unwrap_or(u64::MAX);
            let by_size = bounds
                .max_bytes
                .is_some_and(|m| end.saturating_add(m) <= self.pos);
            let by_age = match bounds.max_age {
                Some(age) => {
                    let started = self.chunk_started(c + 1)?;
                    started.saturating_add(age.as_nanos().min(u64::MAX as u128) as u64) <= now
                }
                None => false,
            };
            if !(by_size || by_age) {
                break;
            }
            keep_from = c + 1;
        }
        let mut space_freed = true;
        if keep_from > first {
            // Readers check this word after copying a record: publish it before the punch.
            let word = layout::first_chunk_word(self.geometry.version, keep_from);
            self.header
                .store_u64(OFF_FIRST_CHUNK, word, Ordering::SeqCst);
            self.first_chunk = keep_from;
            self.maps.forget_below(keep_from);
            let base = self.geometry.chunk_base(first).unwrap_or(u64::MAX);
            let len = (keep_from - first) * self.geometry.chunk_size;
            match file::punch_hole(&self.file, base, len) {
                Ok(()) => {}
                Err(e) if e.errno() == Some(Errno::OPNOTSUPP) => space_freed = false,
                Err(e) => return Err(QueueError::sys(&self.path, "punch out dropped chunks", e)),
            }
        }
        Ok(RetainReport {
            dropped_chunks: keep_from - first,
            first_chunk: keep_from,
            first_position: Position(self.geometry.first_record(keep_from).unwrap_or(u64::MAX)),
            space_freed,
        })
    }

    /// When chunk `c` was started (ns since the epoch), from its header.
    fn chunk_started(&self, c: u64) -> Result<u64, QueueError> {
        if c == self.chunk {
            return Ok(self
                .map
                .load_u64(CHUNK_OFF_CREATED, Ordering::Relaxed)
                .unwrap_or(0));
        }
        let base = self.geometry.chunk_base(c).unwrap_or(u64::MAX);
        let mut b = [0u8; 8];
        self.file
            .read_exact_at(&mut b, base + CHUNK_OFF_CREATED as u64)
            .map_err(QueueError::io(&self.path, "read a chunk header"))?;
        Ok(u64::from_le_bytes(b))
    }

    /// Test hook: `hook(position)` runs after a record's payload is written
    /// and before its mark is committed (crash tests stop the process there).
    #[doc(hidden)]
    pub fn set_commit_hook(&mut self, hook: Option<Box<dyn FnMut(Position) + Send>>) {
        self.hook = hook;
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // The hint lets readers that start at the end find it fast.
        self.header
            .store_u64(OFF_TAIL_CHUNK, self.chunk, Ordering::Release);
    }
}

/// Room for one record, filled in place. See [`Writer::reserve`].
pub struct Reservation<'w> {
    writer: &'w mut Writer,
    pos: u64,
    len: usize,
    committed: bool,
}

impl std::fmt::Debug for Reservation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("position", &self.pos)
            .field("len", &self.len)
            .finish()
    }
}

impl Reservation<'_> {
    /// Where the record will be.
    pub fn position(&self) -> Position {
        Position(self.pos)
    }

    /// The payload bytes to fill (zeroed when reserved in a fresh file).
    pub fn payload(&mut self) -> &mut [u8] {
        let off = (self.pos - self.writer.chunk_base) as usize + MARK_LEN as usize;
        self.writer.map.slice_mut(off, self.len).unwrap_or(&mut [])
    }

    /// Publishes the record to readers and returns its position.
    pub fn commit(mut self) -> Position {
        self.committed = true;
        self.writer.commit_at(self.pos, self.len, None);
        Position(self.pos)
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.committed {
            // Leave zeros behind, as if nothing had been reserved.
            let off = (self.pos - self.writer.chunk_base) as usize + MARK_LEN as usize;
            let trailer = self.writer.geometry.trailer_len() as usize;
            self.writer.map.zero(off, self.len + trailer);
        }
    }
}

/// The cache lines (as a byte range of the chunk) that a record at `off`
/// filled and that the writer will not store to again: from the record's
/// first line up to, not including, the line of the next mark at `next`.
/// Empty when the record ends in its first line. Free.
#[inline]
fn finished_lines(off: usize, next: usize) -> std::ops::Range<usize> {
    let first = off & !63;
    first..(next & !63).max(first)
}

/// The chunk offsets of the cache lines [`Writer::prefetch_ahead`] asks for
/// when the next mark is at chunk offset `next`: the second line after the
/// mark's always, the first one too only when the next record starts its
/// line. Never the mark's own line: readers spin on it, and taking it from
/// them early would only move it back and forth. Free.
///
/// Why not the first line after a mark in mid-line: there the record is
/// packed (more than 64 bytes) and the mark's line also holds the tail of
/// the record the reader is copying; asking for the line after it slowed
/// the round trip by a third. Measured on an Emerald Rapids guest
/// (2026-12-04, `bench queue --rtt --only floor,queue+prepared --trials 1`,
/// builds alternating, four runs each): 128 B p50 682-712 ns with both
/// lines (floor 421-499), 463-518 with this rule, 508-533 with the second
/// line alone, 707-713 with the first alone, 656-715 with the second and
/// third (so it is not the count of lines); 256 B 727-814 -> 720-791; 32,
/// 56, 120 B and 1 KiB (line-fitting or line-starting records, both lines
/// still asked for) unchanged. Why the first line costs there was not
/// traced. On a Sapphire Rapids-class guest both lines had taken the round
/// trip's p99 from 441 to 416 ns at 32 B and from 910 to 784 ns at 128 B;
/// four lines did no better.
#[inline]
fn prefetch_lines(next: usize) -> [Option<usize>; 2] {
    let line = next & !63;
    let first = (next & 63 == 0).then_some(line + 64);
    [first, Some(line + 128)]
}

#[cfg(test)]
mod tests {
    use super::{finished_lines, prefetch_lines};

    #[test]
    fn finished_lines_stop_before_the_next_mark() {
        // A line-fitting 32-byte payload: the whole line is done.
        assert_eq!(finished_lines(64, 128), 64..128);
        // 128 bytes packed from 8: two lines done, the third holds the next mark.
        assert_eq!(finished_lines(8, 8 + 136), 0..128);
        // A small packed record followed by a mark in the same line: none.
        assert!(finished_lines(40, 56).is_empty());
        // A record that ends on a line boundary: all of its lines.
        assert_eq!(finished_lines(4096, 4096 + 1024), 4096..5120);
    }

    #[test]
    fn prefetch_skips_the_line_after_a_mark_in_mid_line() {
        // A line-fitting record starts its line: the two lines after it.
        assert_eq!(prefetch_lines(128), [Some(192), Some(256)]);
        // A packed 128-byte payload leaves the next mark at 136: only the
        // second line after the mark's, never the mark's own line.
        assert_eq!(prefetch_lines(136), [None, Some(256)]);
        assert_eq!(prefetch_lines(4096 - 8), [None, Some(4096 + 64)]);
    }
}
