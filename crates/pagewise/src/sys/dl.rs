//! The objects loaded in this process (`dl_iterate_phdr`), and loading one
//! more (`dlopen`) to call pagewise's own C entry points in it.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::marker::PhantomData;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

/// A loadable segment of an object, in the object's own (link-time) addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// `p_vaddr`.
    pub vaddr: u64,
    /// `p_memsz`.
    pub memsz: u64,
    /// `p_filesz`.
    pub filesz: u64,
    /// `p_offset`.
    pub offset: u64,
    /// `PF_X` is set.
    pub executable: bool,
    /// `PF_W` is set.
    pub writable: bool,
}

/// One object: the executable (empty name) or a shared library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedObject {
    /// Path as the dynamic loader knows it; empty for the main executable.
    pub name: String,
    /// Load bias: runtime address = bias + vaddr (0 for non-PIE executables).
    pub bias: u64,
    /// `PT_LOAD` segments.
    pub segments: Vec<Segment>,
}

unsafe extern "C" fn collect(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: the loader passes a valid dl_phdr_info for the duration of the call, and
    // `data` is the &mut Vec<LoadedObject> given to dl_iterate_phdr below.
    let (info, out) = unsafe { (&*info, &mut *(data as *mut Vec<LoadedObject>)) };
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: dlpi_name is a NUL-terminated string owned by the loader.
        unsafe { CStr::from_ptr(info.dlpi_name) }
            .to_string_lossy()
            .into_owned()
    };
    let headers: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
        &[]
    } else {
        // SAFETY: dlpi_phdr points to dlpi_phnum program headers of a loaded object.
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) }
    };
    let segments = headers
        .iter()
        .filter(|h| h.p_type == libc::PT_LOAD)
        .map(|h| Segment {
            vaddr: h.p_vaddr,
            memsz: h.p_memsz,
            filesz: h.p_filesz,
            offset: h.p_offset,
            executable: h.p_flags & libc::PF_X != 0,
            writable: h.p_flags & libc::PF_W != 0,
        })
        .collect();
    out.push(LoadedObject {
        name,
        bias: info.dlpi_addr,
        segments,
    });
    0
}

/// Every object loaded now, the main executable first. One `dl_iterate_phdr` walk.
pub fn loaded_objects() -> Vec<LoadedObject> {
    let mut out: Vec<LoadedObject> = Vec::new();
    // SAFETY: `collect` only reads the loader's data during the callback and writes to `out`,
    // which outlives the call.
    unsafe {
        libc::dl_iterate_phdr(Some(collect), (&mut out as *mut Vec<LoadedObject>).cast());
    }
    out
}

/// Why a shared library or one of its symbols could not be had; the
/// message is the dynamic loader's own (`dlerror()`).
#[derive(Debug, thiserror::Error)]
pub enum DlError {
    /// `dlopen` failed: no such file, not an ELF shared object for this
    /// machine, or a library it needs is missing.
    #[error("cannot load {}: {message} (give the path of a shared library built for this machine)", path.display())]
    Open {
        /// The path given.
        path: PathBuf,
        /// `dlerror()`, without the path it repeats.
        message: String,
    },
    /// `dlsym` found no such symbol: the library is not (or is too old to
    /// be) the one asked for.
    #[error("{} has no symbol {symbol}: {message} (is it pagewise's libpagewise.so?)", path.display())]
    Symbol {
        /// The library.
        path: PathBuf,
        /// The symbol looked up.
        symbol: &'static str,
        /// `dlerror()`, without the path it repeats.
        message: String,
    },
}

/// A shared library loaded with `dlopen(RTLD_NOW | RTLD_LOCAL)`, unloaded
/// (`dlclose`) when dropped. The entry points it hands out borrow it, so it
/// stays loaded while any of them can be called.
///
/// Loading costs what the dynamic loader costs (mapping the file, relocating
/// it, running its initialisers: about a millisecond for libpagewise.so).
/// Its symbols are kept local: they never replace this process's own.
#[derive(Debug)]
pub struct Library {
    handle: NonNull<c_void>,
    path: PathBuf,
}

/// `int pw_copy(void *dst, const void *src, size_t n)`.
type RawCopy = extern "C" fn(*mut c_void, *const c_void, usize) -> c_int;
/// `int pw_fill(void *dst, int byte, size_t n)`.
type RawFill = extern "C" fn(*mut c_void, c_int, usize) -> c_int;
/// `const char *pw_version(void)`.
type RawVersion = extern "C" fn() -> *const c_char;

impl Library {
    /// Loads the shared library at `path`. A path without a `/` is taken
    /// relative to the current directory (never searched for in the
    /// loader's library path, as `dlopen` would).
    ///
    /// **Trust:** the library is taken to be a pagewise C library
    /// (`libpagewise.so`). Loading runs its initialisers, and [`Library::pw_copy`]
    /// and [`Library::pw_fill`] call whatever it exports under those names
    /// with the header's signatures: a library that exports them with other
    /// types makes those calls undefined behaviour. That is why this exists
    /// only for `bench memcpy|memset --c-library`, on a path the user names.
    pub fn open(path: &Path) -> Result<Library, DlError> {
        let path = if path.as_os_str().as_bytes().contains(&b'/') {
            path.to_path_buf()
        } else {
            Path::new(".").join(path)
        };
        let open_error = |message: String| DlError::Open {
            message: without_path(&message, &path),
            path: path.clone(),
        };
        let c_path = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| open_error("the path has a NUL byte".into()))?;
        // SAFETY: `c_path` is a NUL-terminated string that outlives the call.
        // Loading runs the library's initialisers, as linking it would; the
        // caller chose the library.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        match NonNull::new(handle) {
            Some(handle) => Ok(Library { handle, path }),
            None => Err(open_error(last_dl_error())),
        }
    }

    /// The path it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The address of `symbol`, or why there is none. One `dlsym`.
    fn symbol(&self, symbol: &'static CStr) -> Result<NonNull<c_void>, DlError> {
        // Clear a stale error first, so that the one read below is dlsym's.
        // SAFETY: dlerror has no preconditions.
        unsafe { libc::dlerror() };
        // SAFETY: the handle is open (closed only on drop) and `symbol` is
        // NUL-terminated.
        let address = unsafe { libc::dlsym(self.handle.as_ptr(), symbol.as_ptr()) };
        NonNull::new(address).ok_or_else(|| DlError::Symbol {
            path: self.path.clone(),
            symbol: symbol.to_str().unwrap_or("?"),
            message: without_path(&last_dl_error(), &self.path),
        })
    }

    /// The library's `pw_copy`, pagewise's C copy entry point, callable
    /// while the library is loaded. One `dlsym`.
    pub fn pw_copy(&self) -> Result<CCopy<'_>, DlError> {
        let address = self.symbol(c"pw_copy")?;
        // SAFETY: a library exporting `pw_copy` is taken to be libpagewise,
        // whose header (include/pagewise.h) declares it
        // `int pw_copy(void *, const void *, size_t)`: this type. A function
        // pointer and a data pointer have the same size and representation on
        // the Linux targets pagewise builds for.
        let function = unsafe { std::mem::transmute::<*mut c_void, RawCopy>(address.as_ptr()) };
        Ok(CCopy {
            function,
            _library: PhantomData,
        })
    }

    /// The library's `pw_fill`, pagewise's C fill entry point. One `dlsym`.
    pub fn pw_fill(&self) -> Result<CFill<'_>, DlError> {
        let address = self.symbol(c"pw_fill")?;
        // SAFETY: as in `pw_copy`: libpagewise's header declares
        // `int pw_fill(void *, int, size_t)`, this type.
        let function = unsafe { std::mem::transmute::<*mut c_void, RawFill>(address.as_ptr()) };
        Ok(CFill {
            function,
            _library: PhantomData,
        })
    }

    /// What the library's `pw_version()` returns (`"MAJOR.MINOR.PATCH"`),
    /// copied out. One `dlsym` and one call.
    pub fn pw_version(&self) -> Result<String, DlError> {
        let address = self.symbol(c"pw_version")?;
        // SAFETY: libpagewise's header declares `const char *pw_version(void)`,
        // this type.
        let function = unsafe { std::mem::transmute::<*mut c_void, RawVersion>(address.as_ptr()) };
        let text = function();
        if text.is_null() {
            return Ok(String::new());
        }
        // SAFETY: pw_version returns a static NUL-terminated string (header),
        // read here while the library is loaded.
        Ok(unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned())
    }
}

// SAFETY: a Library is a dlopen handle and its path; the handle is only
// passed to dlsym and dlclose, which glibc serialises with the loader's lock,
// so it may be used from any thread and shared between threads.
unsafe impl Send for Library {}
// SAFETY: as for Send: `&Library` only allows dlsym, which is thread-safe.
unsafe impl Sync for Library {}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: the handle came from dlopen and is closed once; every entry
        // point handed out borrows `self`, so none can be called after this.
        unsafe { libc::dlclose(self.handle.as_ptr()) };
    }
}

/// A loaded library's `pw_copy`: `copy` through pagewise's C entry point.
/// A function pointer (no state): calling it is one indirect call, where a
/// C program linked against the library makes a call through its PLT.
#[derive(Debug, Clone, Copy)]
pub struct CCopy<'lib> {
    function: RawCopy,
    _library: PhantomData<&'lib Library>,
}

impl CCopy<'_> {
    /// Copies the first `min(dst.len(), src.len())` bytes of `src` into
    /// `dst` with `pw_copy`; its return code (`0`, or a negative errno-style
    /// code whose message is the library's `pw_last_error()`).
    #[inline(always)]
    pub fn call(self, dst: &mut [u8], src: &[u8]) -> i32 {
        let n = dst.len().min(src.len());
        (self.function)(dst.as_mut_ptr().cast(), src.as_ptr().cast(), n)
    }
}

/// A loaded library's `pw_fill`: `fill` through pagewise's C entry point.
/// One indirect call, like [`CCopy`].
#[derive(Debug, Clone, Copy)]
pub struct CFill<'lib> {
    function: RawFill,
    _library: PhantomData<&'lib Library>,
}

impl CFill<'_> {
    /// Sets every byte of `dst` to `byte` with `pw_fill`; its return code.
    #[inline(always)]
    pub fn call(self, dst: &mut [u8], byte: u8) -> i32 {
        (self.function)(dst.as_mut_ptr().cast(), c_int::from(byte), dst.len())
    }
}

/// The calling thread's `dlerror()` text (it is per thread in glibc).
fn last_dl_error() -> String {
    // SAFETY: dlerror has no preconditions; it returns NULL or a
    // NUL-terminated string valid until the thread's next dl* call, copied out
    // at once.
    let text = unsafe { libc::dlerror() };
    if text.is_null() {
        return "unknown dynamic loader error".into();
    }
    // SAFETY: see above.
    unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned()
}

/// `message` without the `"PATH: "` the loader starts it with.
fn without_path(message: &str, path: &Path) -> String {
    let prefix = format!("{}: ", path.display());
    message.strip_prefix(&prefix).unwrap_or(message).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_executable_and_libc() {
        let objects = loaded_objects();
        assert!(objects[0].name.is_empty(), "{:?}", objects[0].name);
        assert!(objects[0].segments.iter().any(|s| s.executable));
        assert!(objects.iter().any(|o| o.name.contains("libc.so")));
    }

    /// The path of the C library this process runs with.
    fn libc_path() -> PathBuf {
        let objects = loaded_objects();
        let libc = objects
            .iter()
            .find(|o| o.name.contains("/libc.so"))
            .expect("libc is loaded");
        PathBuf::from(&libc.name)
    }

    #[test]
    fn a_missing_file_gives_the_loaders_reason() {
        let path = Path::new("/nonexistent/libpagewise.so");
        let e = Library::open(path).unwrap_err();
        match &e {
            DlError::Open { path: p, message } => {
                assert_eq!(p, path);
                assert!(message.contains("No such file"), "{message}");
                assert!(!message.starts_with('/'), "the path twice: {message}");
            }
            other => panic!("{other:?}"),
        }
        assert!(e
            .to_string()
            .starts_with("cannot load /nonexistent/libpagewise.so: "));
    }

    #[test]
    fn a_file_that_is_not_a_library_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("libnot.so");
        std::fs::write(&path, b"not an ELF file").unwrap();
        assert!(matches!(Library::open(&path), Err(DlError::Open { .. })));
    }

    #[test]
    fn a_bare_name_is_looked_for_in_the_current_directory_only() {
        // dlopen("libc.so.6") would find the system's; the wrapper must not.
        let e = Library::open(Path::new("libc.so.6")).unwrap_err();
        assert!(
            matches!(&e, DlError::Open { path, .. } if path == Path::new("./libc.so.6")),
            "{e:?}"
        );
    }

    #[test]
    fn a_library_without_the_symbol_says_so() {
        let libc = Library::open(&libc_path()).expect("open the C library again");
        assert_eq!(libc.path(), libc_path());
        for e in [
            libc.pw_copy().map(|_| ()).unwrap_err(),
            libc.pw_fill().map(|_| ()).unwrap_err(),
            libc.pw_version().map(|_| ()).unwrap_err(),
        ] {
            match &e {
                DlError::Symbol {
                    symbol, message, ..
                } => {
                    assert!(symbol.starts_with("pw_"));
                    assert!(message.contains(symbol), "{message}");
                }
                other => panic!("{other:?}"),
            }
        }
        // The loader's state is per thread and cleared first: a found symbol
        // after a missing one is not reported as missing.
        assert!(libc.symbol(c"strlen").is_ok());
    }
}
