//! Files a user names (profiles, binaries, order files, reports): opened
//! so that nothing blocks on a FIFO and nothing reads forever.
//!
//! A plain `open` of a FIFO waits until another process opens its other end,
//! and a read of `/dev/zero` never ends, so a path that names one would hang
//! the command (or the program before `main`, in the preload). Here an input
//! is opened with `O_NONBLOCK`, which returns at once whatever the path is,
//! and its type is checked on the open descriptor (`fstat`, no window in which
//! the path can be swapped) before a byte is read: only a regular file is
//! read. An output is opened with `O_NONBLOCK` too: a FIFO that no process
//! reads fails at once (`ENXIO`) instead of blocking; one that is read, a
//! terminal or `/dev/null` is written as usual.
//!
//! Errors are `std::io::Error`s whose message says what the path is ("a
//! FIFO, not a regular file"), for callers to wrap with the path.

use crate::sys::create;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

/// Opens `path` for reading if it is a regular file (following symbolic
/// links); anything else is refused with an `InvalidInput` error naming what
/// it is, without blocking. One `open` and one `fstat`.
pub fn open_input(path: &Path) -> io::Result<File> {
    let file = create::open_for_reading(path).map_err(|e| e.source)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}, not a regular file", create::kind_of(&meta)),
        ));
    }
    Ok(file)
}

/// The bytes of the regular file `path` ([`open_input`], then one read of
/// its size).
pub fn read_input(path: &Path) -> io::Result<Vec<u8>> {
    let mut file = open_input(path)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The text of the regular file `path`; invalid UTF-8 is an `InvalidData` error.
pub fn read_input_to_string(path: &Path) -> io::Result<String> {
    String::from_utf8(read_input(path)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// Creates `path` (mode 0666 minus the umask) or truncates it, for writing,
/// without blocking: a FIFO no process reads is an error at once; a FIFO
/// that is read, a terminal or `/dev/null` is written as usual. One `open`
/// and one `fstat` (two `fcntl` more for anything but a regular file).
pub fn create_output(path: &Path) -> io::Result<File> {
    create::open_for_writing(path).map_err(|e| {
        if create::fifo_without_reader(&e) {
            io::Error::new(
                e.source.kind(),
                "a FIFO that no process is reading (start the reader first)",
            )
        } else {
            e.source
        }
    })
}

/// A file that [`create_output_noting_new`] created, known by its device and
/// inode, so that it can be removed again without removing whatever another
/// process has put under the name since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MadeFile {
    dev: u64,
    ino: u64,
}

impl MadeFile {
    /// Removes `path` if it still names this file (one `lstat` and an
    /// `unlink`); a file someone else put under the name stays. Call it while
    /// the file is still open: a closed and deleted file's inode number may
    /// be given to the next file made. Between the `lstat` and the `unlink`
    /// the name could still change: the window is two system calls, not the
    /// whole run of a program.
    pub fn remove(self, path: &Path) {
        use std::os::unix::fs::MetadataExt;
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.dev() == self.dev && m.ino() == self.ino)
        {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// As [`create_output`], and says whether this call created the file: a
/// new name is created exclusively (`O_CREAT | O_EXCL`, mode 0666 minus the
/// umask), so a file another process makes at the same moment is never taken
/// for ours; an existing name (a file the user keeps, a device) is opened as
/// [`create_output`] does and is `None`. One or two `open`s and an `fstat`.
pub fn create_output_noting_new(path: &Path) -> io::Result<(File, Option<MadeFile>)> {
    use std::os::unix::fs::MetadataExt;
    // std opens with O_CLOEXEC; a new name cannot be a FIFO, so no O_NONBLOCK.
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(file) => {
            let meta = file.metadata()?;
            let made = MadeFile {
                dev: meta.dev(),
                ino: meta.ino(),
            };
            Ok((file, Some(made)))
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok((create_output(path)?, None)),
        Err(e) => Err(e),
    }
}

/// Writes `bytes` to `path` as [`create_output`] opens it.
pub fn write_output(path: &Path, bytes: &[u8]) -> io::Result<()> {
    create_output(path)?.write_all(bytes)
}

/// For writers that open `path` themselves (a plotting library), before a
/// long run: an error if something other than a regular file is there, if
/// the file there cannot be opened for writing (it is opened, not
/// truncated), or, where nothing is there, if it could not be created
/// ([`check_creatable`]). A `stat` and an `open`, or what
/// [`check_creatable`] costs.
pub fn check_output(path: &Path) -> io::Result<()> {
    match std::fs::metadata(path) {
        Ok(meta) if !meta.file_type().is_file() => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}, not a regular file", create::kind_of(&meta)),
        )),
        // Never blocks: a FIFO put there since the `stat` fails at once.
        Ok(_) => create::open_existing_for_writing(path)
            .map(drop)
            .map_err(|e| e.source),
        Err(e) if e.kind() == io::ErrorKind::NotFound => check_creatable(path),
        Err(e) => Err(e),
    }
}

/// Whether a file could be created at `path` (where nothing is yet), without
/// creating it: its folder exists, is a folder, and this user may create
/// entries in it. The error says which is wrong ("the folder /x does not
/// exist"). A `stat` and a `faccessat`.
pub fn check_creatable(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let meta = std::fs::metadata(dir).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => io::Error::new(
            io::ErrorKind::NotFound,
            format!("the folder {} does not exist", dir.display()),
        ),
        _ => io::Error::new(e.kind(), format!("{}: {e}", dir.display())),
    })?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            format!(
                "{} is {}, not a folder",
                dir.display(),
                create::kind_of(&meta)
            ),
        ));
    }
    match crate::sys::file::may_create_in(dir) {
        Ok(true) => Ok(()),
        Ok(false) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("this user may not create files in {}", dir.display()),
        )),
        Err(e) => Err(e.source),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn fifo(dir: &Path) -> std::path::PathBuf {
        let path = dir.join("fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(status.success(), "mkfifo failed");
        path
    }

    #[test]
    fn inputs_other_than_regular_files_are_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let regular = dir.path().join("r");
        std::fs::write(&regular, "text").unwrap();
        assert_eq!(read_input_to_string(&regular).unwrap(), "text");
        let start = Instant::now();
        for (path, what) in [
            (fifo(dir.path()), "a FIFO"),
            (dir.path().to_owned(), "a directory"),
            ("/dev/zero".into(), "a character device"),
        ] {
            let err = read_input(&path).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{path:?}");
            assert_eq!(err.to_string(), format!("{what}, not a regular file"));
        }
        assert!(start.elapsed() < Duration::from_secs(5), "an open blocked");
        let missing = read_input(&dir.path().join("missing")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        std::fs::write(&regular, [0xff, 0xfe]).unwrap();
        assert_eq!(
            read_input_to_string(&regular).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }

    #[test]
    fn only_a_file_this_call_made_is_removed_and_only_while_the_name_is_its() {
        let dir = tempfile::tempdir().unwrap();
        let kept = dir.path().join("kept");
        std::fs::write(&kept, "the user's").unwrap();
        let (_, made) = create_output_noting_new(&kept).unwrap();
        assert_eq!(made, None, "an existing file is not ours");
        let new = dir.path().join("new.svg");
        // Held open, as a caller holds it: its inode cannot be reused meanwhile.
        let (_file, made) = create_output_noting_new(&new).unwrap();
        let made = made.expect("a new file is ours");
        // Another process puts its own file under the name meanwhile: it stays.
        std::fs::remove_file(&new).unwrap();
        std::fs::write(&new, "theirs").unwrap();
        made.remove(&new);
        assert_eq!(std::fs::read_to_string(&new).unwrap(), "theirs");
        let (_, made) = create_output_noting_new(&dir.path().join("again")).unwrap();
        made.unwrap().remove(&dir.path().join("again"));
        assert!(!dir.path().join("again").exists());
        let (_, made) = create_output_noting_new(Path::new("/dev/null")).unwrap();
        assert_eq!(made, None);
    }

    #[test]
    fn outputs_never_block_on_a_fifo_without_a_reader() {
        let dir = tempfile::tempdir().unwrap();
        let f = fifo(dir.path());
        let start = Instant::now();
        let err = write_output(&f, b"x").unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(5), "the open blocked");
        assert!(err.to_string().contains("no process is reading"), "{err}");
        // With a reader, the FIFO is written, and blocking again afterwards.
        let reader = std::thread::spawn({
            let f = f.clone();
            move || {
                let mut text = String::new();
                File::open(f).unwrap().read_to_string(&mut text).unwrap();
                text
            }
        });
        let mut out = loop {
            match create_output(&f) {
                Ok(out) => break out,
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        };
        let big = vec![b'y'; 1 << 20];
        out.write_all(&big).unwrap();
        drop(out);
        assert_eq!(reader.join().unwrap().len(), 1 << 20);
        write_output(Path::new("/dev/null"), b"x").unwrap();
        let regular = dir.path().join("out");
        write_output(&regular, b"abc").unwrap();
        write_output(&regular, b"d").unwrap();
        assert_eq!(std::fs::read(&regular).unwrap(), b"d");
        assert!(check_output(&regular).is_ok());
        assert!(check_output(&dir.path().join("new")).is_ok());
        assert!(check_output(&f).unwrap_err().to_string().contains("a FIFO"));
        // Where nothing is yet: its folder must be there, and be a folder.
        let missing = check_output(&dir.path().join("no/such/x.svg")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        assert_eq!(
            missing.to_string(),
            format!(
                "the folder {} does not exist",
                dir.path().join("no/such").display()
            )
        );
        let through_a_file = check_creatable(&regular.join("x")).unwrap_err();
        assert!(
            through_a_file
                .to_string()
                .contains("a regular file, not a folder"),
            "{through_a_file}"
        );
        assert!(!regular.join("x").exists() && !dir.path().join("new").exists());
    }
}
