//! The objects loaded in this process (`dl_iterate_phdr`).

use std::ffi::CStr;

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
}
