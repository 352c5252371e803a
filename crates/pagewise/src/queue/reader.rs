//! Readers: each maps the queue read-only and reads at its own pace.

use super::error::QueueError;
use super::layout::{
    self, decode_mark, Geometry, Mark, HEADER_LEN, MARK_LEN, OFF_FIRST_CHUNK, OFF_TAIL_CHUNK,
    OFF_WAKE,
};
use super::notify::WakeWord;
use super::Position;
use crate::copy::Routine;
use crate::sys::file::{Inotify, IN_IGNORED, IN_MODIFY};
use crate::sys::file_map::{FileAdvice, ReadMap, DROP_STEP};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where a new reader starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Start {
    /// The oldest record still in the queue.
    #[default]
    Beginning,
    /// Just past the newest committed record: only records appended from now on.
    End,
    /// A position returned by an earlier append or read.
    At(Position),
}

/// The most bytes a record holds after its payload: a CRC (4) and
/// padding (at most 7, or 63 in a line-fitting record), rounded up.
pub(crate) const AFTER_PAYLOAD_MAX: usize = 72;

/// How [`Reader::next_wait`] waits when no record is there yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Poll in a tight loop (`spin_loop` hint): lowest latency, one busy core.
    Spin,
    /// Poll `spins` times, then poll with `sched_yield` between polls.
    SpinThenYield {
        /// Polls before yielding.
        spins: u32,
    },
    /// Poll `spins` times, then sleep on a futex in the queue header until the
    /// writer commits. Needs only read permission on the file. Right after a
    /// record, until the writer has seen a reader asleep, sleeps are naps of
    /// at most 100 µs (docs/queue.md, "Waking readers").
    Block {
        /// Polls before sleeping.
        spins: u32,
    },
}

/// How a reader notices that another process truncated the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TruncationCheck {
    /// A helper thread sleeps on inotify and checks the size whenever the file
    /// changes through a system call; the reader checks a flag on every call.
    Inotify,
    /// No inotify (disabled, or the per-user instance limit was reached): the
    /// reader checks the size with `fstat` on every call (about 0.3 µs more
    /// per call).
    EveryCall,
}

/// Options for [`Reader::open_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReaderOptions {
    /// Where to start (default: the beginning).
    pub start: Start,
    /// Check record CRCs when the queue has them (default on).
    pub verify_crc: bool,
    /// Watch for truncation with inotify (default on); off, or when inotify
    /// is unavailable, the size is checked with `fstat` on every call.
    pub watch_truncation: bool,
    /// Copy payloads out with pagewise's fault-guarded copy (`rep movsb`,
    /// default on): a truncation of the file by another process during the
    /// copy becomes [`QueueError::Truncated`] instead of a SIGBUS that kills
    /// the process (this installs a SIGBUS handler, once; see
    /// `sys::sigbus`). Off: payloads are copied by `copy`, which is not
    /// guarded. Marks and header words are read guarded either way.
    pub guard_copies: bool,
    /// The routine that copies payloads out when `guard_copies` is off
    /// (default [`Routine::Pagewise`]).
    pub copy: Routine,
}

impl Default for ReaderOptions {
    fn default() -> Self {
        ReaderOptions {
            start: Start::Beginning,
            verify_crc: true,
            watch_truncation: true,
            guard_copies: true,
            copy: Routine::default(),
        }
    }
}

/// One record, borrowed from the reader until its next call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'r> {
    /// Where the record is (pass it to `seek` or `Start::At` to read it again).
    pub position: Position,
    /// The payload, copied out of the shared mapping.
    pub payload: &'r [u8],
}

const NO_TRUNCATION: u64 = u64::MAX;

/// How long the truncation watcher rests after each wake-up: it notices a
/// truncation within about this long, and wakes at most ~100 times a second.
const WATCH_PAUSE: Duration = Duration::from_millis(10);

#[derive(Debug)]
struct WatchShared {
    /// The size the reader relies on.
    needed: AtomicU64,
    /// The size seen when smaller than `needed`, else NO_TRUNCATION.
    truncated: AtomicU64,
    stop: AtomicBool,
}

#[derive(Debug)]
struct Watcher {
    shared: Arc<WatchShared>,
    inotify: Arc<Inotify>,
    wd: i32,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    fn start(file: &File, path: &Path, needed: u64) -> Result<Watcher, String> {
        let inotify = Arc::new(Inotify::new().map_err(|e| e.to_string())?);
        // Watch the open file itself, whatever its name is now.
        let by_fd = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        let wd = inotify
            .add_watch(&by_fd, IN_MODIFY)
            .or_else(|_| inotify.add_watch(path, IN_MODIFY))
            .map_err(|e| e.to_string())?;
        let shared = Arc::new(WatchShared {
            needed: AtomicU64::new(needed),
            truncated: AtomicU64::new(NO_TRUNCATION),
            stop: AtomicBool::new(false),
        });
        let file = file.try_clone().map_err(|e| e.to_string())?;
        let (s, i) = (Arc::clone(&shared), Arc::clone(&inotify));
        let thread = std::thread::Builder::new()
            .name("pagewise-queue-watch".into())
            .spawn(move || loop {
                let Ok(events) = i.read_events() else { return };
                if s.stop.load(Ordering::Relaxed) || events.iter().any(|e| e.mask & IN_IGNORED != 0)
                {
                    return;
                }
                // `needed` first: it is a size the reader saw earlier, so a
                // size read after it is at least as large unless the file
                // shrank. Read the other way round, a reader that saw the
                // file grow in between made this look like a truncation.
                let needed = s.needed.load(Ordering::Acquire);
                if let Ok(meta) = file.metadata() {
                    if meta.len() < needed {
                        s.truncated.store(meta.len(), Ordering::Release);
                    }
                }
                // The writer's own growth is an IN_MODIFY too (each
                // `fallocate`): woken for every one, this thread took the CPU
                // from a spinning reader every few microseconds when the
                // writer grows the file a page at a time. Events that arrive
                // meanwhile are merged into one, and a read of a truncated
                // range is caught by the SIGBUS guard in the meantime. Parked,
                // not asleep, so that dropping the reader wakes it at once.
                std::thread::park_timeout(WATCH_PAUSE);
                if s.stop.load(Ordering::Relaxed) {
                    return;
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(Watcher {
            shared,
            inotify,
            wd,
            thread: Some(thread),
        })
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        // Removing the watch queues IN_IGNORED, which wakes the thread.
        let _ = self.inotify.remove_watch(self.wd);
        if let Some(t) = self.thread.take() {
            // Ends a rest between events at once (an unpark before the park is kept).
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// A reader of a queue. See the [module docs](super).
#[derive(Debug)]
pub struct Reader {
    path: PathBuf,
    file: File,
    geometry: Geometry,
    header: ReadMap,
    map: ReadMap,
    chunk: u64,
    chunk_base: u64,
    chunk_end: u64,
    pos: u64,
    /// The file size last seen; reads stay below it.
    known_size: u64,
    buf: Vec<u8>,
    verify_crc: bool,
    watcher: Option<Watcher>,
    watch_problem: Option<String>,
    /// How far into the current chunk (an offset from its base) pages are
    /// mapped in, by idle-time read populate or [`Reader::prepare`].
    populated_to: u64,
    /// Chunks ahead of the reader that [`Reader::prepare`] mapped and read
    /// in, with how far each is read in; `enter` takes them from here.
    ahead: BTreeMap<u64, (ReadMap, u64)>,
    /// The previous chunk's mapping and how much of it is already dropped:
    /// taken down a piece at a time while the reader waits (64 KiB per poll
    /// once idle, else paced by what it reads: see [`PACE_RECORDS`]), since a
    /// 64 MiB `munmap` of mapped pages costs about a millisecond.
    retired: Option<(ReadMap, usize)>,
    /// Records read, and the position, since the last paced step of the
    /// retired mapping's take-down (see [`PACE_RECORDS`]).
    read_since_step: u32,
    step_from: u64,
    /// The last first-chunk word seen and the chunk it names (checked once).
    first_seen: (u64, u64),
    /// The routine payloads are copied out with; `None`: the guarded copy.
    copy: Option<CopyRoutine>,
}

/// A copy routine ([`Routine::prepare`]).
type CopyRoutine = fn(&mut [u8], &[u8]);

/// The located next record: offset in the chunk and payload length.
type Located = Option<(usize, usize)>;

/// Polls of the mark alone between full looks for a record while spinning
/// (see `Reader::spin_on_mark`): about a microsecond.
const MARK_SPINS: u32 = 64;

/// Polls without a record after which a reader waiting with `Wait::Spin`
/// counts as idle (about 30 µs of waiting) and takes the previous chunk's
/// mapping down 64 KiB per poll (1–2 µs each, which a record arriving
/// meanwhile waits out). With `SpinThenYield` and `Block` the reader counts
/// as idle once it starts to yield or to sleep.
const IDLE_POLLS: u32 = 32;

/// A reader that is not idle takes the previous chunk's mapping down one
/// piece per this many records read. Each piece delays the record that
/// arrives during it (in a ping-pong, one round trip), so pieces must come
/// less often than one record in 1 000 to stay out of the p99.9 (a piece
/// per 64 KiB read came every ~480 records of 128 B and set the round-trip
/// p99.9 in `bench queue --rtt`, row `queue+prepared`; one per 2 048 still
/// put it over twice the floor's in one run of three), and each piece takes
/// as many bytes as were read since the last one (1.1 MiB, 20–40 µs, for
/// 128-byte records), so that the old chunk is gone when the new one is.
const PACE_RECORDS: u32 = 8192;

/// ... or per this many bytes read, whichever comes first, and never more
/// in one piece (about 40 µs): records of 256 B and more reach it before
/// `PACE_RECORDS`, and a piece of 8192 large records' worth would take a
/// millisecond.
const PACE_BYTES: u64 = 2 << 20;

impl Reader {
    /// Opens a queue for reading from the beginning. See [`Reader::open_with`].
    pub fn open(path: impl AsRef<Path>) -> Result<Reader, QueueError> {
        Reader::open_with(path, ReaderOptions::default())
    }

    /// Opens a queue for reading: opens the file read-only, validates the
    /// header, maps the header and one chunk read-only, and positions the
    /// reader. A reader can never change the queue. Costs a few system calls,
    /// a thread for the truncation watch, and for `Start::End` or
    /// `Start::At` a walk over at most one chunk.
    pub fn open_with(path: impl AsRef<Path>, options: ReaderOptions) -> Result<Reader, QueueError> {
        let path = path.as_ref();
        let file = layout::open_for_reading(path)?;
        let (geometry, state, size) = layout::read_header(path, &file)?;
        let header = ReadMap::map(&file, 0, HEADER_LEN as usize)
            .map_err(|e| QueueError::sys(path, "map the header", e))?;
        let first = state.first_chunk;
        let chunks = layout::chunks_in(&geometry, size);
        if first > chunks {
            return Err(QueueError::BadHeader {
                path: path.to_owned(),
                reason: format!(
                    "first chunk {first} is past the end of the file ({chunks} chunks)"
                ),
            });
        }
        let (watcher, watch_problem) = if options.watch_truncation {
            match Watcher::start(&file, path, size) {
                Ok(w) => (Some(w), None),
                Err(e) => (None, Some(e)),
            }
        } else {
            (None, Some("disabled by the options".to_owned()))
        };
        let map = map_chunk(path, &file, &geometry, first)?;
        let chunk_base = chunk_base(path, &geometry, first)?;
        let mut reader = Reader {
            path: path.to_owned(),
            file,
            geometry,
            header,
            map,
            chunk: first,
            chunk_base,
            chunk_end: chunk_base + geometry.chunk_size,
            pos: chunk_base + layout::CHUNK_HEADER_LEN,
            known_size: size,
            buf: Vec::new(),
            verify_crc: options.verify_crc,
            watcher,
            watch_problem,
            populated_to: 0,
            ahead: BTreeMap::new(),
            retired: None,
            read_since_step: 0,
            step_from: 0,
            first_seen: (layout::first_chunk_word(geometry.version, first), first),
            copy: (!options.guard_copies).then(|| options.copy.prepare()),
        };
        match options.start {
            Start::Beginning => {}
            Start::End => reader.seek_end()?,
            Start::At(p) => reader.seek(p)?,
        }
        Ok(reader)
    }

    pub(crate) fn file_for_inspect(&self) -> &File {
        &self.file
    }

    /// The queue file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The queue's fixed parameters.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// The position of the next record this reader will return.
    pub fn position(&self) -> Position {
        Position(self.pos)
    }

    /// How this reader notices truncation, and why not with inotify if not.
    pub fn truncation_check(&self) -> (TruncationCheck, Option<&str>) {
        match &self.watcher {
            Some(_) => (TruncationCheck::Inotify, None),
            None => (TruncationCheck::EveryCall, self.watch_problem.as_deref()),
        }
    }

    /// Whether the truncation watch has seen the file shrink (it reports
    /// through the next call of `next`); lets a caller poll for it.
    pub fn truncation_noticed(&self) -> bool {
        self.watcher
            .as_ref()
            .is_some_and(|w| w.shared.truncated.load(Ordering::Acquire) != NO_TRUNCATION)
    }

    /// The next committed record, or `None` if there is none yet. Never
    /// blocks. Hot path: one flag load, one acquire load of the mark, a copy of
    /// the payload, and one load of the retention word; no system call except
    /// when entering a new chunk or going past the file size last seen.
    // Not `Iterator::next`: the record borrows the reader's buffer (a lending iterator).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Record<'_>>, QueueError> {
        match self.locate()? {
            Some((off, len)) => self.consume(off, len),
            None => Ok(None),
        }
    }

    /// Like [`Reader::next`], and copies into `after` the bytes that follow
    /// the payload to the record's end (its CRC and padding: up to 67 bytes
    /// for a line-fitting record, 11 for a packed one; inside the record, so
    /// inside its chunk and the file); with the record, how many it copied
    /// (0 when they could not be read). For `inspect`, which looks for a
    /// mark inside the record's bytes. Costs `next` and one guarded copy of
    /// those bytes from the map.
    pub(crate) fn next_and_after(
        &mut self,
        after: &mut [u8; AFTER_PAYLOAD_MAX],
    ) -> Result<Option<(Record<'_>, usize)>, QueueError> {
        let Some((off, len)) = self.locate()? else {
            return Ok(None);
        };
        let size = self.geometry.record_size(self.pos, len as u64) as usize;
        let n = (size - MARK_LEN as usize - len).min(AFTER_PAYLOAD_MAX);
        let end = off + MARK_LEN as usize + len;
        let copied = if n > 0 && self.map.copy_out(end, &mut after[..n]) {
            n
        } else {
            0
        };
        Ok(self.consume(off, len)?.map(|r| (r, copied)))
    }

    /// Whether a record is ready to be read now (the next `next` returns it).
    /// Never blocks; skips padding and enters new chunks on the way.
    pub fn poll(&mut self) -> Result<bool, QueueError> {
        Ok(self.locate()?.is_some())
    }

    /// The next record, waiting for it with `wait` up to `timeout` (`None`:
    /// forever). Returns `Ok(None)` on timeout.
    pub fn next_wait(
        &mut self,
        wait: Wait,
        timeout: Option<Duration>,
    ) -> Result<Option<Record<'_>>, QueueError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut polls: u32 = 0;
        loop {
            if let Some((off, len)) = self.locate()? {
                return self.consume(off, len);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            // Idle: waited long with `Spin`, or about to yield or sleep.
            let idle = match wait {
                Wait::Spin => polls >= IDLE_POLLS,
                Wait::SpinThenYield { spins } | Wait::Block { spins } => polls >= spins,
            };
            self.idle_work(idle);
            // The mark a spin saw, taken by the short way below.
            let seen = match wait {
                Wait::Spin => self.spin_on_mark(MARK_SPINS),
                Wait::SpinThenYield { spins } | Wait::Block { spins } if polls < spins => {
                    self.spin_on_mark(1)
                }
                Wait::SpinThenYield { .. } => {
                    std::thread::yield_now();
                    None
                }
                Wait::Block { .. } => {
                    self.block(deadline)?;
                    None
                }
            };
            if let Some((at, len)) = seen.and_then(|raw| self.take_spun(raw)) {
                return Ok(Some(Record {
                    position: Position(at),
                    payload: &self.buf[..len],
                }));
            }
            polls = polls.saturating_add(1);
        }
    }

    /// Spins on the next record's mark alone, up to `polls` times (a
    /// `pause` and a load each: [`MARK_SPINS`] for `Wait::Spin`, 1 in the
    /// spinning phase of the other waits), until it is no longer 0 (or the
    /// load fails): the full look for a
    /// record (truncation, retention, file size, then the mark) takes
    /// several loads and two guarded calls, and a record committed meanwhile
    /// waits for the look to end. Returns the mark it saw, if any, for
    /// [`Reader::take_spun`]; the caller looks again in full when that
    /// declines, so what the full look checks is checked at least once per
    /// `MARK_SPINS` polls.
    fn spin_on_mark(&self, polls: u32) -> Option<u64> {
        if self.pos + MARK_LEN > self.known_size || self.pos >= self.chunk_end {
            std::hint::spin_loop();
            return None;
        }
        let off = (self.pos - self.chunk_base) as usize;
        for _ in 0..polls {
            std::hint::spin_loop();
            match self.map.load_u64(off, Ordering::Acquire) {
                Some(0) => {}
                Some(raw) => return Some(raw),
                None => return None,
            }
        }
        None
    }

    /// Takes the record whose mark [`Reader::spin_on_mark`] saw (`raw`, at
    /// the reader's position) with as few steps as possible between the
    /// mark's arrival and the caller's next store: in a ping-pong every
    /// instruction here delays the reply, since a store becomes visible only
    /// after all before it have run. The same checks as the full look, on
    /// what is already known: the truncation watch's flag, the mark, the
    /// record inside its chunk and the size last seen, then the copy and
    /// the first-chunk word unchanged since the last look (which found this
    /// chunk still in the queue). `None`, with nothing changed, whenever
    /// anything is out of the ordinary (no watch, a pad, CRCs to verify, a
    /// changed word): the full look then decides. Returns the record's
    /// position and length; the payload is in the buffer.
    #[inline(always)]
    fn take_spun(&mut self, raw: u64) -> Option<(u64, usize)> {
        let watched = self
            .watcher
            .as_ref()
            .is_some_and(|w| w.shared.truncated.load(Ordering::Acquire) == NO_TRUNCATION);
        if !watched || (self.geometry.record_crc() && self.verify_crc) {
            return None;
        }
        let Ok(Mark::Data(len)) = decode_mark(raw, self.pos) else {
            return None;
        };
        let len = len as usize;
        let end = self.pos + self.geometry.record_size(self.pos, len as u64);
        if end > self.chunk_end || end > self.known_size {
            return None;
        }
        if !self.copy_payload((self.pos - self.chunk_base) as usize, len) {
            return None;
        }
        // As in `consume`: the first-chunk word is read after the bytes.
        fence(Ordering::Acquire);
        if self.header.load_u64(OFF_FIRST_CHUNK, Ordering::Acquire) != Some(self.first_seen.0) {
            return None;
        }
        Some((self.advance(len), len))
    }

    /// Copies the `len` payload bytes of the record whose mark is at map
    /// offset `off` into the buffer (grown if need be); `false` if the map
    /// could not be read there.
    #[inline(always)]
    fn copy_payload(&mut self, off: usize, len: usize) -> bool {
        if self.buf.len() < len {
            self.buf.resize(len, 0);
        }
        let data = off + MARK_LEN as usize;
        match self.copy {
            Some(routine) => self.map.copy_out_with(data, &mut self.buf[..len], routine),
            None => self.map.copy_out(data, &mut self.buf[..len]),
        }
    }

    /// Moves past the record of `len` payload bytes at the reader's
    /// position; returns that position.
    #[inline(always)]
    fn advance(&mut self, len: usize) -> u64 {
        let at = self.pos;
        self.pos += self.geometry.record_size(at, len as u64);
        self.read_since_step = self.read_since_step.saturating_add(1);
        at
    }

    /// Moves the reader to `position`, which must be the start of a committed
    /// record still in the queue, or the end of the committed records. Costs
    /// a walk from the start of the position's chunk.
    pub fn seek(&mut self, position: Position) -> Result<(), QueueError> {
        let p = position.0;
        let g = self.geometry;
        let path = self.path.clone();
        let invalid = |reason: &str| QueueError::InvalidPosition {
            path: path.clone(),
            position,
            reason: reason.to_owned(),
        };
        if p < HEADER_LEN
            || !p.is_multiple_of(8)
            || (p - HEADER_LEN) % g.chunk_size < layout::CHUNK_HEADER_LEN
        {
            return Err(invalid("not a record position of this queue"));
        }
        self.refresh_size()?;
        if p.saturating_add(MARK_LEN) > self.known_size {
            return Err(invalid("past the end of the file"));
        }
        let c = g.chunk_of(p);
        self.check_first(c, p)?;
        self.enter(c)?;
        while self.pos < p {
            match self.locate()? {
                Some((_, len)) => self.pos += g.record_size(self.pos, len as u64),
                None => return Err(invalid("past the last committed record")),
            }
        }
        if self.pos != p {
            return Err(invalid("not the start of a record"));
        }
        Ok(())
    }

    /// Moves the reader to the oldest record still in the queue.
    pub fn seek_to_start(&mut self) -> Result<(), QueueError> {
        let first = self.first_chunk()?;
        self.enter(first)
    }

    /// Moves the reader past the newest committed record.
    pub fn seek_end(&mut self) -> Result<(), QueueError> {
        self.refresh_size()?;
        let first = self.first_chunk()?;
        let tail = self.header_word(OFF_TAIL_CHUNK)?;
        let chunks = layout::chunks_in(&self.geometry, self.known_size);
        let c = tail.clamp(first, chunks.saturating_sub(1).max(first));
        self.enter(c)?;
        while let Some((_, len)) = self.locate()? {
            self.pos += self.geometry.record_size(self.pos, len as u64);
        }
        Ok(())
    }

    /// Finds the next data record, skipping padding and entering new chunks;
    /// `None` when the next mark is not committed yet.
    #[inline]
    fn locate(&mut self) -> Result<Located, QueueError> {
        self.check_truncation()?;
        loop {
            if self.pos == self.chunk_end {
                self.enter(self.chunk + 1)?;
            }
            if self.pos + MARK_LEN > self.known_size && !self.refresh_size()? {
                return Ok(None);
            }
            let off = (self.pos - self.chunk_base) as usize;
            let Some(raw) = self.map.load_u64(off, Ordering::Acquire) else {
                return Err(self.unreadable(self.pos));
            };
            match decode_mark(raw, self.pos) {
                Ok(Mark::Data(len)) => {
                    let end = self.pos + self.geometry.record_size(self.pos, u64::from(len));
                    if end > self.chunk_end {
                        return Err(QueueError::corrupt(
                            &self.path,
                            self.pos,
                            layout::past_its_chunk(len),
                        ));
                    }
                    if end > self.known_size {
                        self.refresh_size()?;
                    }
                    if end > self.known_size {
                        return Err(QueueError::corrupt(
                            &self.path,
                            self.pos,
                            layout::past_the_file(len, self.known_size),
                        ));
                    }
                    return Ok(Some((off, len as usize)));
                }
                Ok(Mark::Empty) => {
                    self.check_first(self.chunk, self.pos)?;
                    return Ok(None);
                }
                Ok(Mark::Pad(rest)) => {
                    if u64::from(rest) != self.chunk_end - self.pos - MARK_LEN {
                        return Err(QueueError::corrupt(
                            &self.path,
                            self.pos,
                            "padding that does not reach the end of the chunk",
                        ));
                    }
                    self.pos = self.chunk_end;
                }
                Err(reason) => return Err(QueueError::corrupt(&self.path, self.pos, reason)),
            }
        }
    }

    /// Copies out the record `locate` found.
    #[inline]
    fn consume(&mut self, off: usize, len: usize) -> Result<Option<Record<'_>>, QueueError> {
        if !self.copy_payload(off, len) {
            return Err(self.unreadable(self.pos));
        }
        if self.geometry.record_crc() && self.verify_crc {
            let data = off + MARK_LEN as usize;
            let mut stored = [0u8; 4];
            let raw = self.map.load_u64(off, Ordering::Relaxed);
            let (Some(raw), true) = (raw, self.map.copy_out(data + len, &mut stored)) else {
                return Err(self.unreadable(self.pos));
            };
            let stored = u32::from_le_bytes(stored);
            let computed = layout::record_crc(raw, &self.buf[..len]);
            if stored != computed {
                return Err(QueueError::CrcMismatch {
                    path: self.path.clone(),
                    position: Position(self.pos),
                    stored,
                    computed,
                });
            }
        }
        // Retention publishes the new first chunk before punching: if the bytes we copied
        // were punched out, this load sees it (seqlock-style check).
        fence(Ordering::Acquire);
        self.check_first(self.chunk, self.pos)?;
        let at = self.advance(len);
        Ok(Some(Record {
            position: Position(at),
            payload: &self.buf[..len],
        }))
    }

    #[inline]
    fn check_truncation(&mut self) -> Result<(), QueueError> {
        match &self.watcher {
            Some(w) => {
                let t = w.shared.truncated.load(Ordering::Acquire);
                if t != NO_TRUNCATION {
                    return Err(self.truncated(t));
                }
            }
            None => {
                self.refresh_size()?;
            }
        }
        Ok(())
    }

    /// The first chunk still in the queue: one guarded load, and a check of
    /// the word's check bits when it changed since the last call.
    #[inline]
    fn first_chunk(&mut self) -> Result<u64, QueueError> {
        let raw = self.header_word(OFF_FIRST_CHUNK)?;
        let (seen, chunk) = self.first_seen;
        if raw == seen {
            return Ok(chunk);
        }
        let chunk = layout::decode_first_chunk(self.geometry.version, raw).map_err(|reason| {
            QueueError::BadHeader {
                path: self.path.clone(),
                reason,
            }
        })?;
        self.first_seen = (raw, chunk);
        Ok(chunk)
    }

    /// The 8-byte header word at `offset` (one guarded load).
    #[inline]
    fn header_word(&self, offset: usize) -> Result<u64, QueueError> {
        self.header
            .load_u64(offset, Ordering::Acquire)
            .ok_or_else(|| self.unreadable(0))
    }

    /// The error for a read of the mapping that returned nothing (see
    /// [`QueueError::unreadable`]).
    #[cold]
    fn unreadable(&self, pos: u64) -> QueueError {
        QueueError::unreadable(&self.path, &self.file, pos, self.known_size)
    }

    fn truncated(&self, size: u64) -> QueueError {
        QueueError::Truncated {
            path: self.path.clone(),
            size,
            needed: self.known_size,
        }
    }

    /// Re-reads the file size; `true` if the next mark now lies inside it.
    #[cold]
    fn refresh_size(&mut self) -> Result<bool, QueueError> {
        let size = self
            .file
            .metadata()
            .map_err(QueueError::io(&self.path, "stat the queue"))?
            .len();
        if size < self.known_size {
            return Err(self.truncated(size));
        }
        self.known_size = size;
        if let Some(w) = &self.watcher {
            w.shared.needed.store(size, Ordering::Release);
        }
        Ok(self.pos + MARK_LEN <= size)
    }

    /// Fails with `FellBehind` if retention dropped chunk `c`.
    #[inline]
    fn check_first(&mut self, c: u64, pos: u64) -> Result<(), QueueError> {
        let first = self.first_chunk()?;
        if c < first {
            let first_available = self.geometry.first_record(first).unwrap_or(u64::MAX);
            return Err(QueueError::FellBehind {
                path: self.path.clone(),
                position: Position(pos),
                first_available: Position(first_available),
                behind_by: first_available.saturating_sub(pos),
            });
        }
        Ok(())
    }

    /// Maps chunk `c` and moves to its first record.
    fn enter(&mut self, c: u64) -> Result<(), QueueError> {
        self.check_first(c, self.pos)?;
        if c != self.chunk {
            // Before any state changes: a truncation leaves the reader where it was.
            self.refresh_size()?;
            // Chunks mapped ahead that the reader will not reach any more.
            while let Some(e) = self.ahead.first_entry() {
                if *e.key() >= c {
                    break;
                }
                e.remove();
            }
            let (new, populated_to) = self.chunk_map(c)?;
            // One retired mapping at a time: a reader that was never idle since
            // the last chunk pays for the older one's unmap here.
            self.retired = Some((std::mem::replace(&mut self.map, new), 0));
            self.chunk = c;
            self.chunk_base = chunk_base(&self.path, &self.geometry, c)?;
            self.chunk_end = self.chunk_base + self.geometry.chunk_size;
            self.populated_to = populated_to;
        }
        self.pos = self.chunk_base + layout::CHUNK_HEADER_LEN;
        self.read_since_step = 0;
        self.step_from = self.pos;
        Ok(())
    }

    /// Maps in, now, the next `bytes` of the queue from the reader's
    /// position that the file already holds, so that reading them later
    /// takes no page fault and entering the chunks among them no `mmap`:
    /// chunks ahead are mapped now and kept until the reader gets there.
    /// Costs a read populate (`MADV_POPULATE_READ`, about 0.25 µs per 4 KiB
    /// page on tmpfs) and one `mmap` per chunk ahead; the pages count in this
    /// process's resident memory until the reader leaves their chunk. Use it
    /// before a latency-critical phase, after the writer prepared the same
    /// bytes ([`Writer::wait_pretouched`](super::Writer::wait_pretouched)).
    /// Returns the position up to which pages are mapped in: at most the
    /// file's size, and the reader's own position when that is already
    /// past it. A reader that retention left behind gets `FellBehind`, as
    /// from `next`. Needs Linux 5.14 (`MADV_POPULATE_READ`). Each chunk
    /// ahead is one mapping until the reader gets there: preparing many
    /// small chunks at once can reach `vm.max_map_count`; the chunks mapped
    /// before a failure stay prepared.
    pub fn prepare(&mut self, bytes: u64) -> Result<Position, QueueError> {
        self.refresh_size()?;
        // A reader behind retention would fill punched chunks in again.
        self.check_first(self.chunk, self.pos)?;
        let end = self.pos.saturating_add(bytes).min(self.known_size);
        let page = 4096;
        let mut c = self.chunk;
        while let Some(base) = self.geometry.chunk_base(c).filter(|b| *b < end) {
            let to = end.min(base.saturating_add(self.geometry.chunk_size)) - base;
            // From the reader's position (or the chunk's start) whatever was
            // mapped in before: a writer's recovery punching the file since
            // (its open discards what lies after the last record) unmapped
            // those pages, and mapping in pages still mapped costs little.
            if c == self.chunk {
                let from = (self.pos - base) & !(page - 1);
                if to > from {
                    let done = self.map.advise(
                        from as usize,
                        (to - from) as usize,
                        FileAdvice::PopulateRead,
                    );
                    self.populated(c, done)?;
                    self.populated_to = self.populated_to.max(to);
                }
            } else {
                let (map, done) = self.chunk_map(c)?;
                let result = map.advise(0, to as usize, FileAdvice::PopulateRead);
                self.populated(c, result)?;
                self.ahead.insert(c, (map, to.max(done)));
            }
            c += 1;
        }
        Ok(Position(end.max(self.pos)))
    }

    /// Chunk `c`'s mapping and how far it is read in: the one `prepare`
    /// made if there is one (taken out of `ahead`), else a new one (an
    /// `mmap`, nothing read in).
    fn chunk_map(&mut self, c: u64) -> Result<(ReadMap, u64), QueueError> {
        match self.ahead.remove(&c) {
            Some(prepared) => Ok(prepared),
            None => Ok((map_chunk(&self.path, &self.file, &self.geometry, c)?, 0)),
        }
    }

    /// The outcome of a read populate of chunk `c`: a file that shrank
    /// meanwhile is `Truncated`, as for a read.
    fn populated(&mut self, c: u64, result: crate::sys::SysResult<()>) -> Result<(), QueueError> {
        match result {
            Ok(()) => Ok(()),
            Err(e) => {
                self.refresh_size()?;
                Err(QueueError::sys(&self.path, format!("read in chunk {c}"), e))
            }
        }
    }

    /// While waiting for a record, map in the next pages of the chunk (read
    /// populate, up to 256 KiB ahead and never past the file size), so
    /// reading them later takes no page fault; else take the previous
    /// chunk's mapping down a piece: 64 KiB per call once the reader has
    /// waited a while (`idle`), and otherwise one piece per
    /// [`PACE_RECORDS`] records or [`PACE_BYTES`] read, as many bytes as
    /// were read since the last piece (at most `PACE_BYTES`), so that the
    /// old chunk is gone by the time the new one is read.
    fn idle_work(&mut self, idle: bool) {
        const AHEAD: u64 = 256 << 10;
        let page = 4096;
        let from = (self.pos - self.chunk_base) & !(page - 1);
        if self.populated_to <= from + AHEAD / 2 {
            let limit = (self
                .known_size
                .min(self.chunk_end)
                .saturating_sub(self.chunk_base))
            .min(from + AHEAD);
            // Only what is not mapped in yet: a writer whose file grows a
            // little at a time (idle-time pre-touch) leaves less than
            // AHEAD / 2 ahead, and asking again for the same pages cost two
            // `madvise` calls per record in a ping-pong (`bench queue --rtt`).
            let start = from.max(self.populated_to & !(page - 1));
            if limit > start {
                let _ = self.map.advise(
                    start as usize,
                    (limit - start) as usize,
                    FileAdvice::PopulateRead,
                );
                self.populated_to = limit;
                return;
            }
        }
        if self.retired.is_none() {
            return;
        }
        if idle {
            self.drop_retired_piece(DROP_STEP);
        } else if self.read_since_step >= PACE_RECORDS || self.pos - self.step_from >= PACE_BYTES {
            let read = (self.pos - self.step_from).min(PACE_BYTES) as usize;
            self.drop_retired_piece(read.next_multiple_of(page as usize).max(DROP_STEP));
            self.read_since_step = 0;
            self.step_from = self.pos;
        }
    }

    /// Drops the page-table entries of the next `bytes` of the retired
    /// chunk (one `madvise`: 1–2 µs for 64 KiB, about 60 ns more per page),
    /// and unmaps it once none are left.
    fn drop_retired_piece(&mut self, bytes: usize) {
        let Some((map, done)) = &mut self.retired else {
            return;
        };
        match map.drop_mappings_step(*done, bytes) {
            Some(next) => *done = next,
            None => self.retired = None,
        }
    }

    /// Sleeps on the header's futex word until the writer commits, a slice
    /// passes, or the deadline (see `notify` for how long it may sleep).
    fn block(&mut self, deadline: Option<Instant>) -> Result<(), QueueError> {
        let word = WakeWord::decode(self.header_word(OFF_WAKE)?);
        if self.locate()?.is_some() {
            return Ok(());
        }
        let mut slice = word.sleep_limit();
        if let Some(d) = deadline {
            slice = slice.min(d.saturating_duration_since(Instant::now()));
        }
        match self.header.futex_wait(OFF_WAKE, word.seq, Some(slice)) {
            Ok(_) => Ok(()),
            // EFAULT: the header page is gone (the file was truncated).
            Err(e) if self.file.metadata().is_ok_and(|m| m.len() < HEADER_LEN) => {
                drop(e);
                Err(self.unreadable(0))
            }
            Err(e) => Err(QueueError::sys(&self.path, "wait for the writer", e)),
        }
    }
}

fn chunk_base(path: &Path, g: &Geometry, c: u64) -> Result<u64, QueueError> {
    g.chunk_base(c)
        .filter(|b| b.checked_add(g.chunk_size).is_some())
        .ok_or_else(|| {
            QueueError::corrupt(
                path,
                u64::MAX,
                format!("chunk {c} lies past any file offset"),
            )
        })
}

fn map_chunk(path: &Path, file: &File, g: &Geometry, c: u64) -> Result<ReadMap, QueueError> {
    let base = chunk_base(path, g, c)?;
    ReadMap::map(file, base, g.chunk_size as usize)
        .map_err(|e| QueueError::sys(path, format!("map chunk {c}"), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue of `chunk`-byte chunks filled with `record` up to `past`
    /// bytes into chunk 1, and a reader that has just entered chunk 1 (so
    /// chunk 0's mapping is retired). The directory must outlive both.
    fn reader_in_chunk_1(dir: &tempfile::TempDir, chunk: u64, record: &[u8], past: u64) -> Reader {
        use crate::queue::{Options, Writer};
        let path = dir.path().join("q");
        let mut w = Writer::create(
            &path,
            Options {
                chunk_size: chunk,
                pretouch: None,
                ..Options::default()
            },
        )
        .unwrap();
        while w.position().0 < HEADER_LEN + chunk + past {
            w.append(record).unwrap();
        }
        let mut r = Reader::open(&path).unwrap();
        while r.chunk == 0 {
            r.next().unwrap().unwrap();
        }
        r
    }

    /// A fresh queue (records with CRCs if `crc`) and a reader at its start
    /// with `options`. The directory must outlive both.
    fn fresh_queue(
        dir: &tempfile::TempDir,
        crc: bool,
        options: ReaderOptions,
    ) -> (crate::queue::Writer, Reader) {
        use crate::queue::{Options, Writer};
        let path = dir.path().join("q");
        let w = Writer::create(
            &path,
            Options {
                record_crc: crc,
                pretouch: None,
                ..Options::default()
            },
        )
        .unwrap();
        (w, Reader::open_with(&path, options).unwrap())
    }

    /// The spinning reader's short way to a record gives what the full look
    /// gives: the record's position, its payload, and the next position,
    /// for packed and line-fitting sizes alike.
    #[test]
    fn a_spun_mark_gives_the_record_that_next_would() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, mut r) = fresh_queue(&dir, false, ReaderOptions::default());
        for (i, len) in [1usize, 24, 32, 56, 57, 100, 300, 8]
            .into_iter()
            .enumerate()
        {
            let payload = vec![i as u8 + 1; len];
            let at = w.append(&payload).unwrap();
            let raw = r.spin_on_mark(1).expect("the mark is there");
            assert_eq!(r.take_spun(raw), Some((at.0, len)), "record {i}");
            assert_eq!(&r.buf[..len], &payload[..], "record {i}");
            assert_eq!(r.position(), w.position(), "record {i}");
        }
        assert_eq!(r.spin_on_mark(1), None, "no record after the last");
    }

    /// Whatever the short way does not check for itself, it leaves to the
    /// full look, without moving the reader: CRCs to verify, no truncation
    /// watch, a first-chunk word other than the one last seen, a pad, a
    /// mark of another position.
    #[test]
    fn a_spun_mark_is_left_to_the_full_look_when_anything_is_unusual() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, mut r) = fresh_queue(&dir, true, ReaderOptions::default());
        w.append(b"abc").unwrap();
        let start = r.position();
        let raw = r.spin_on_mark(1).unwrap();
        assert_eq!(r.take_spun(raw), None, "CRCs to verify");
        assert_eq!(r.position(), start);
        assert_eq!(r.next().unwrap().unwrap().payload, b"abc");

        let dir = tempfile::tempdir().unwrap();
        let unwatched = ReaderOptions {
            watch_truncation: false,
            ..ReaderOptions::default()
        };
        let (mut w, mut r) = fresh_queue(&dir, false, unwatched);
        w.append(b"abc").unwrap();
        let raw = r.spin_on_mark(1).unwrap();
        assert_eq!(r.take_spun(raw), None, "no truncation watch");
        assert_eq!(r.next().unwrap().unwrap().payload, b"abc");

        let dir = tempfile::tempdir().unwrap();
        let (mut w, mut r) = fresh_queue(&dir, false, ReaderOptions::default());
        w.append(b"abc").unwrap();
        let start = r.position();
        let raw = r.spin_on_mark(1).unwrap();
        let seen = r.first_seen;
        r.first_seen.0 ^= 1;
        assert_eq!(r.take_spun(raw), None, "first-chunk word changed");
        assert_eq!(r.position(), start);
        r.first_seen = seen;
        let pos = start.0;
        let pad = layout::pad_mark(pos, 64);
        assert_eq!(r.take_spun(pad), None, "a pad");
        let elsewhere = layout::data_mark(pos + 8, 3);
        assert_eq!(r.take_spun(elsewhere), None, "another position's mark");
        assert_eq!(r.position(), start);
        assert_eq!(r.take_spun(raw), Some((pos, 3)));
    }

    /// A reader that is not idle takes the previous chunk's mapping down
    /// one piece per `PACE_RECORDS` records read, as many bytes as it read
    /// since the last piece (each piece is a system call a record arriving
    /// meanwhile waits out); an idle one, 64 KiB per call until it is gone.
    #[test]
    fn the_old_chunk_goes_at_the_pace_of_reading_or_when_idle() {
        let dir = tempfile::tempdir().unwrap();
        let chunk = 4u64 << 20;
        let mut r = reader_in_chunk_1(&dir, chunk, &[1u8; 100], 2 << 20);
        assert!(
            r.retired.is_some(),
            "entering chunk 1 retired chunk 0's map"
        );
        for _ in 0..1000 {
            r.idle_work(false);
        }
        assert_eq!(
            r.retired.as_ref().map(|m| m.1),
            Some(0),
            "a piece before the pace"
        );
        for _ in 1..PACE_RECORDS {
            r.next().unwrap().unwrap();
        }
        let read = (r.pos - r.step_from) as usize;
        // The first call maps in the pages ahead; the next one takes the piece.
        r.idle_work(false);
        r.idle_work(false);
        let done = r.retired.as_ref().map(|m| m.1);
        assert_eq!(done, Some(read.next_multiple_of(4096)), "one paced piece");
        r.idle_work(false);
        assert_eq!(r.retired.as_ref().map(|m| m.1), done, "one piece per pace");
        for _ in 0..(chunk as usize / DROP_STEP) {
            r.idle_work(true);
        }
        assert!(
            r.retired.is_none(),
            "still mapped after idle calls for the whole chunk"
        );
    }

    /// Large records reach `PACE_BYTES` long before `PACE_RECORDS`: the
    /// piece comes then and is at most `PACE_BYTES`; and a reader that
    /// blocks counts as idle, so waiting with `Block` takes the rest down.
    #[test]
    fn large_records_pace_by_bytes_and_a_blocking_reader_is_idle() {
        let dir = tempfile::tempdir().unwrap();
        let chunk = 8u64 << 20;
        let mut r = reader_in_chunk_1(&dir, chunk, &[2u8; 4000], 3 << 20);
        while r.pos - r.step_from < PACE_BYTES + (256 << 10) {
            r.next().unwrap().unwrap();
        }
        assert!(r.read_since_step < PACE_RECORDS);
        for _ in 0..3 {
            r.idle_work(false);
        }
        assert_eq!(
            r.retired.as_ref().map(|m| m.1),
            Some(PACE_BYTES as usize),
            "one capped piece"
        );
        while r.next().unwrap().is_some() {}
        for _ in 0..(chunk as usize / DROP_STEP) {
            if r.retired.is_none() {
                break;
            }
            let got = r.next_wait(Wait::Block { spins: 0 }, Some(Duration::from_micros(200)));
            assert!(got.unwrap().is_none());
        }
        assert!(
            r.retired.is_none(),
            "a blocking reader left the old chunk mapped"
        );
    }

    /// The watcher rests between wake-ups; dropping it (with its reader)
    /// must end the rest at once, not wait it out.
    #[test]
    fn dropping_a_resting_watcher_does_not_wait_out_its_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q");
        let mut fastest = Duration::MAX;
        for round in 0..5u64 {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(&path)
                .unwrap();
            let watcher = Watcher::start(&file, &path, 0).unwrap();
            // A write is an IN_MODIFY: the thread wakes, checks, then rests.
            std::io::Write::write_all(&mut &file, &[round as u8; 64]).unwrap();
            std::thread::sleep(Duration::from_millis(2));
            let began = std::time::Instant::now();
            drop(watcher);
            fastest = fastest.min(began.elapsed());
        }
        // Waiting out the rest would make every drop take most of
        // WATCH_PAUSE (10 ms); the fastest of five is immune to a busy moment.
        assert!(
            fastest < Duration::from_millis(4),
            "the fastest of 5 drops took {fastest:?}"
        );
    }
}
