//! Reads of shared file mappings that survive a truncation of the file.
//!
//! A load from a mapped page that lies past the end of its file (another
//! process shrank the file) raises SIGBUS, which kills the process. The
//! three routines here — an 8-byte load, a 4-byte load and a copy — are a few
//! instructions of assembly at known addresses, and a SIGBUS handler
//! (installed once, by [`install`]) recognises a fault raised by one of them
//! the way the kernel's exception tables recognise a fault in
//! `copy_from_user`: the signal says the kernel raised it for a bad address
//! (`BUS_ADRERR`) and the saved instruction pointer lies inside the routines.
//! The handler then moves the instruction pointer to a fixup label that
//! makes the routine return "faulted", and the caller turns that into an
//! error on its own thread. Any other SIGBUS goes to the handler that was
//! installed before (Rust's own, a program's), or gets the default action:
//! the process dies as it would have without this module.
//!
//! What is not covered: bytes handed out as slices (a writer's
//! `Reservation::payload`, a routine given a mapped slice): a fault there
//! is outside the routines and kills the process as before.

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::sync::atomic::{AtomicPtr, Ordering};
    use std::sync::Once;

    // Every instruction from `pagewise_sigbus_load_u64` up to
    // `pagewise_sigbus_end` that touches memory reads the caller's mapping
    // (or, for the copy, writes the caller's own buffer, which cannot
    // raise SIGBUS). A fault leaves the stack as it was on entry, so the
    // fixup can return to the caller directly.
    std::arch::global_asm!(
        ".pushsection .text.pagewise_sigbus,\"ax\",@progbits",
        ".p2align 4",
        ".globl pagewise_sigbus_load_u64",
        ".hidden pagewise_sigbus_load_u64",
        ".type pagewise_sigbus_load_u64,@function",
        "pagewise_sigbus_load_u64:",
        "    xor edx, edx",
        "    mov rax, qword ptr [rdi]",
        "    ret",
        ".globl pagewise_sigbus_load_u32",
        ".hidden pagewise_sigbus_load_u32",
        ".type pagewise_sigbus_load_u32,@function",
        "pagewise_sigbus_load_u32:",
        "    xor edx, edx",
        "    mov eax, dword ptr [rdi]",
        "    ret",
        ".globl pagewise_sigbus_copy",
        ".hidden pagewise_sigbus_copy",
        ".type pagewise_sigbus_copy,@function",
        "pagewise_sigbus_copy:",
        "    mov rcx, rdx",
        "    xor edx, edx",
        "    xor eax, eax",
        // Long copies: `rep movsb`. Shorter ones (it costs tens of cycles to
        // start): 64 then 16 bytes at a time, and the last 16 bytes, which may
        // overlap what was copied, in one move; under 16 bytes: two
        // overlapping moves of 8 or 4 bytes, or single bytes.
        "    cmp rcx, 512",
        "    jae 7f",
        "    cmp rcx, 16",
        "    jb 4f",
        "    lea r9, [rsi + rcx - 16]",
        "    lea r10, [rdi + rcx - 16]",
        "2:  cmp rcx, 64",
        "    jb 3f",
        "    movdqu xmm0, xmmword ptr [rsi]",
        "    movdqu xmm1, xmmword ptr [rsi + 16]",
        "    movdqu xmm2, xmmword ptr [rsi + 32]",
        "    movdqu xmm3, xmmword ptr [rsi + 48]",
        "    movdqu xmmword ptr [rdi], xmm0",
        "    movdqu xmmword ptr [rdi + 16], xmm1",
        "    movdqu xmmword ptr [rdi + 32], xmm2",
        "    movdqu xmmword ptr [rdi + 48], xmm3",
        "    add rsi, 64",
        "    add rdi, 64",
        "    sub rcx, 64",
        "    jmp 2b",
        "3:  cmp rcx, 16",
        "    jb 8f",
        "    movdqu xmm0, xmmword ptr [rsi]",
        "    movdqu xmmword ptr [rdi], xmm0",
        "    add rsi, 16",
        "    add rdi, 16",
        "    sub rcx, 16",
        "    jmp 3b",
        "8:  movdqu xmm0, xmmword ptr [r9]",
        "    movdqu xmmword ptr [r10], xmm0",
        "    ret",
        "4:  cmp rcx, 8",
        "    jb 5f",
        "    mov r8, qword ptr [rsi]",
        "    mov r9, qword ptr [rsi + rcx - 8]",
        "    mov qword ptr [rdi], r8",
        "    mov qword ptr [rdi + rcx - 8], r9",
        "    ret",
        "5:  cmp rcx, 4",
        "    jb 6f",
        "    mov r8d, dword ptr [rsi]",
        "    mov r9d, dword ptr [rsi + rcx - 4]",
        "    mov dword ptr [rdi], r8d",
        "    mov dword ptr [rdi + rcx - 4], r9d",
        "    ret",
        "6:  test rcx, rcx",
        "    jz 9f",
        "    mov r8b, byte ptr [rsi]",
        "    mov byte ptr [rdi], r8b",
        "    inc rsi",
        "    inc rdi",
        "    dec rcx",
        "    jmp 6b",
        "7:  rep movsb",
        "9:  ret",
        ".globl pagewise_sigbus_end",
        ".hidden pagewise_sigbus_end",
        "pagewise_sigbus_end:",
        ".globl pagewise_sigbus_fixup",
        ".hidden pagewise_sigbus_fixup",
        ".type pagewise_sigbus_fixup,@function",
        "pagewise_sigbus_fixup:",
        "    xor eax, eax",
        "    mov edx, 1",
        "    ret",
        ".popsection",
    );

    /// What a routine returns in `rax:rdx`: the value loaded, and 1 if the
    /// read faulted (the value is then 0).
    #[repr(C)]
    pub(super) struct Guarded {
        pub(super) value: u64,
        pub(super) fault: u64,
    }

    extern "C" {
        pub(super) fn pagewise_sigbus_load_u64(src: *const u64) -> Guarded;
        pub(super) fn pagewise_sigbus_load_u32(src: *const u32) -> Guarded;
        pub(super) fn pagewise_sigbus_copy(dst: *mut u8, src: *const u8, len: usize) -> Guarded;
        fn pagewise_sigbus_end();
        fn pagewise_sigbus_fixup();
    }

    /// The handler that was installed before ours (leaked, never freed).
    static PREVIOUS: AtomicPtr<libc::sigaction> = AtomicPtr::new(std::ptr::null_mut());

    type InfoHandler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);
    type PlainHandler = extern "C" fn(libc::c_int);

    extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel passes a valid siginfo_t and ucontext_t to an SA_SIGINFO handler.
        let (code, uc) = unsafe { ((*info).si_code, &mut *ctx.cast::<libc::ucontext_t>()) };
        let rip = &mut uc.uc_mcontext.gregs[libc::REG_RIP as usize];
        let begin = pagewise_sigbus_load_u64 as *const () as usize;
        let end = pagewise_sigbus_end as *const () as usize;
        if code == libc::BUS_ADRERR && (begin..end).contains(&(*rip as usize)) {
            // One of our reads touched a page past the end of its file.
            *rip = pagewise_sigbus_fixup as *const () as usize as libc::greg_t;
            return;
        }
        chain(sig, info, ctx);
    }

    /// Passes a SIGBUS that is not ours on as if we had never installed a handler.
    fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: info is valid (see on_sigbus).
        let sent_by_a_process = unsafe { (*info).si_code } <= 0;
        let previous = PREVIOUS.load(Ordering::Acquire);
        // SAFETY: PREVIOUS is null or a leaked, never-freed sigaction written before ours was installed.
        let handler = unsafe { previous.as_ref() }.map_or(libc::SIG_DFL, |p| p.sa_sigaction);
        if handler == libc::SIG_IGN && sent_by_a_process {
            return;
        }
        if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
            // The default action: restore it; a fault then happens again when the
            // handler returns, and a signal sent by a process is raised again.
            // SAFETY: an all-zero sigaction is SIG_DFL with no flags and an empty mask;
            // sigaction and raise are async-signal-safe.
            unsafe {
                let default: libc::sigaction = std::mem::zeroed();
                libc::sigaction(libc::SIGBUS, &default, std::ptr::null_mut());
                if sent_by_a_process {
                    libc::raise(libc::SIGBUS);
                }
            }
            return;
        }
        // SAFETY: a handler other than SIG_DFL/SIG_IGN is a function of the kind its
        // SA_SIGINFO flag says; previous is non-null here.
        unsafe {
            if (*previous).sa_flags & libc::SA_SIGINFO != 0 {
                std::mem::transmute::<libc::sighandler_t, InfoHandler>(handler)(sig, info, ctx);
            } else {
                std::mem::transmute::<libc::sighandler_t, PlainHandler>(handler)(sig);
            }
        }
    }

    static INSTALL: Once = Once::new();

    pub(super) fn install() {
        INSTALL.call_once(|| {
            // SAFETY: an all-zero sigaction is a valid value to be filled in.
            let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: reads the current action into a valid sigaction.
            if unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut previous) } != 0 {
                return;
            }
            PREVIOUS.store(Box::into_raw(Box::new(previous)), Ordering::Release);
            // SAFETY: as above; on_sigbus has the SA_SIGINFO signature and only does
            // async-signal-safe things.
            unsafe {
                let mut ours: libc::sigaction = std::mem::zeroed();
                ours.sa_sigaction = on_sigbus as *const () as usize;
                ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut ours.sa_mask);
                libc::sigaction(libc::SIGBUS, &ours, std::ptr::null_mut());
            }
        });
    }
}

/// Installs the SIGBUS handler that turns faults in the routines below into
/// errors (once per process; later calls cost an atomic load). Every
/// function here installs it; call it early to keep the first call cheap.
pub fn install() {
    #[cfg(target_arch = "x86_64")]
    imp::install();
}

/// Loads the 8-byte word at `src` (one aligned load: atomic, and acquire on
/// x86-64); `None` if the page lies past the end of its file.
///
/// # Safety
/// `src` must be 8-aligned and lie inside a live mapping of this process
/// (of a file that may have shrunk since it was mapped).
#[inline]
pub unsafe fn load_u64(src: *const u64) -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    {
        install();
        // SAFETY: the routine reads 8 bytes at src, which the caller vouches for; a
        // SIGBUS there returns fault = 1.
        let r = unsafe { imp::pagewise_sigbus_load_u64(src) };
        (r.fault == 0).then_some(r.value)
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as the caller promises; unguarded on this architecture.
    Some(
        unsafe { std::sync::atomic::AtomicU64::from_ptr(src.cast_mut()) }
            .load(std::sync::atomic::Ordering::Acquire),
    )
}

/// Loads the 4-byte word at `src`, like [`load_u64`].
///
/// # Safety
/// `src` must be 4-aligned and lie inside a live mapping of this process.
#[inline]
pub unsafe fn load_u32(src: *const u32) -> Option<u32> {
    #[cfg(target_arch = "x86_64")]
    {
        install();
        // SAFETY: as load_u64, for 4 bytes.
        let r = unsafe { imp::pagewise_sigbus_load_u32(src) };
        (r.fault == 0).then_some(r.value as u32)
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as the caller promises; unguarded on this architecture.
    Some(
        unsafe { std::sync::atomic::AtomicU32::from_ptr(src.cast_mut()) }
            .load(std::sync::atomic::Ordering::Acquire),
    )
}

/// Copies `dst.len()` bytes from `src` into `dst` (SSE2 moves below 512
/// bytes, `rep movsb` from there); `false` if
/// a page of the source lies past the end of its file (then `dst` holds
/// part of the bytes).
///
/// # Safety
/// `[src, src + dst.len())` must lie inside a live mapping of this process,
/// and not overlap `dst`.
#[inline]
pub unsafe fn copy(dst: &mut [u8], src: *const u8) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        install();
        // SAFETY: the routine reads dst.len() bytes at src (the caller vouches for them)
        // and writes them to dst, which we borrow mutably.
        unsafe { imp::pagewise_sigbus_copy(dst.as_mut_ptr(), src, dst.len()) }.fault == 0
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // SAFETY: as the caller promises; unguarded on this architecture.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::file_map::ReadMap;
    use std::os::unix::process::ExitStatusExt;

    const CHILD: &str = "PAGEWISE_SIGBUS_CHILD";

    /// Three pages mapped, of a file then cut to a page and 100 bytes.
    fn truncated_mapping() -> (tempfile::TempDir, std::fs::File, ReadMap) {
        let (dir, file) = crate::sys::file_map::tests::temp_file(3 * 4096);
        std::os::unix::fs::FileExt::write_all_at(&file, &[7u8; 8], 4096).unwrap();
        let map = ReadMap::map(&file, 0, 3 * 4096).unwrap();
        file.set_len(4096 + 100).unwrap();
        (dir, file, map)
    }

    #[test]
    fn reads_past_the_end_of_a_truncated_file_fail_instead_of_killing() {
        let (_dir, _file, map) = truncated_mapping();
        use std::sync::atomic::Ordering::Acquire;
        // The page that still has bytes of the file reads normally.
        assert_eq!(map.load_u64(4096, Acquire), Some(0x0707_0707_0707_0707));
        assert_eq!(map.load_u32(4096 + 4, Acquire), Some(0x0707_0707));
        // The page past the end faults: caught, on every routine.
        assert_eq!(map.load_u64(2 * 4096, Acquire), None);
        assert_eq!(map.load_u32(2 * 4096 + 8, Acquire), None);
        let mut buf = vec![0u8; 4096];
        assert!(!map.copy_out(4096 + 2048, &mut buf));
        // Every path of the copy: long, 64-byte blocks, 16, 8, 4 and single bytes.
        for (from_end, len) in [(64, 256), (16, 64), (8, 20), (4, 12), (2, 6), (1, 3)] {
            assert!(
                !map.copy_out(2 * 4096 - from_end, &mut buf[..len]),
                "{len} bytes across the end"
            );
        }
        assert!(map.copy_out(4096, &mut buf[..8]));
        assert_eq!(&buf[..8], &[7u8; 8]);
        // Again, from other threads: the handler works on every thread.
        let map = std::sync::Arc::new(map);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let map = std::sync::Arc::clone(&map);
                std::thread::spawn(move || {
                    (0..1000).all(|_| map.load_u64(2 * 4096, Acquire).is_none())
                })
            })
            .collect();
        assert!(threads.into_iter().all(|t| t.join().unwrap()));
    }

    #[test]
    fn the_guarded_copy_copies_every_length_and_alignment() {
        let src: Vec<u8> = (0..2048u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in (0..600).chain([1023, 1024, 1500]) {
            for shift in [0, 1, 7, 13] {
                let mut dst = vec![0xEEu8; len + 32];
                // SAFETY: src has shift + len bytes; dst is a separate buffer.
                assert!(unsafe { copy(&mut dst[shift..shift + len], src[shift..].as_ptr()) });
                assert_eq!(
                    &dst[shift..shift + len],
                    &src[shift..shift + len],
                    "len {len}"
                );
                assert!(dst[..shift].iter().all(|&b| b == 0xEE), "before, len {len}");
                assert!(
                    dst[shift + len..].iter().all(|&b| b == 0xEE),
                    "after, len {len}"
                );
            }
        }
    }

    /// Runs this test binary's `test` in a child with `CHILD=mode`.
    fn child_status(test: &str, mode: &str) -> std::process::ExitStatus {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(CHILD, mode)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
    }

    /// Sets SIGBUS's disposition to `handler` (before ours is installed).
    fn set_previous(handler: libc::sighandler_t, flags: libc::c_int) {
        // SAFETY: a zeroed sigaction with a valid handler value and empty mask.
        unsafe {
            let mut a: libc::sigaction = std::mem::zeroed();
            a.sa_sigaction = handler;
            a.sa_flags = flags;
            libc::sigaction(libc::SIGBUS, &a, std::ptr::null_mut());
        }
    }

    extern "C" fn previous_handler(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(42) };
    }

    #[test]
    fn a_sigbus_that_is_not_ours_goes_where_it_went_before() {
        const NAME: &str =
            "sys::sigbus::tests::a_sigbus_that_is_not_ours_goes_where_it_went_before";
        let raise = || {
            // SAFETY: raise has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGBUS) };
        };
        match std::env::var(CHILD).as_deref() {
            Ok("fault") => {
                // The previous handler is Rust's own (stack overflows): for a fault
                // that is no stack overflow it restores the default, and the fault kills.
                install();
                let (_dir, _file, map) = truncated_mapping();
                let p = map.addr() + 2 * 4096;
                // SAFETY: inside a live mapping; an unguarded read that faults on purpose.
                let _ = unsafe { std::ptr::read_volatile(p as *const u8) };
                std::process::exit(0);
            }
            Ok("default") => {
                set_previous(libc::SIG_DFL, 0);
                install();
                raise();
                std::process::exit(0);
            }
            Ok("ignored") => {
                set_previous(libc::SIG_IGN, 0);
                install();
                raise();
                std::process::exit(3);
            }
            Ok("handler") => {
                set_previous(previous_handler as *const () as usize, libc::SA_SIGINFO);
                install();
                // Our own faults stay ours: the previous handler does not see them.
                let (_dir, _file, map) = truncated_mapping();
                assert_eq!(
                    map.load_u64(2 * 4096, std::sync::atomic::Ordering::Acquire),
                    None
                );
                raise();
                std::process::exit(0);
            }
            _ => {}
        }
        assert_eq!(child_status(NAME, "fault").signal(), Some(libc::SIGBUS));
        assert_eq!(child_status(NAME, "default").signal(), Some(libc::SIGBUS));
        assert_eq!(child_status(NAME, "ignored").code(), Some(3));
        assert_eq!(child_status(NAME, "handler").code(), Some(42));
    }
}
