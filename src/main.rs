use std::process::ExitCode;

use clap::Parser;

/// jemalloc on Unix (Windows keeps the system allocator), for the binary only: the library leaves
/// the choice to its embedders. A graph of 100,000 nodes makes ~4M small allocations: glibc's malloc
/// spent 15% of `mem`'s instructions on them and adds a 16-byte header to each; with jemalloc `mem`
/// of the 100,016-node benchmark graph takes 12% less time and 7% less memory
/// (docs/benchmarks.md).
#[cfg(unix)]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Transparent huge pages for the main thread's heap (its jemalloc arena), on Linux where the kernel
/// grants them on advice (`madvise`, the common setting; `never` ignores it, `always` needs none).
/// A graph's many small allocations then fault 2 MiB at a time: `mem` of the 100,016-node
/// benchmark graph took 19,600 page faults and now takes ~3,800 (the 10k-node one 2,670 → ~970),
/// and on the 2-core machine, where a fresh page costs ~0.7 ms per MiB, s100k takes ~8% less CPU
/// time and s10k ~18% less wall time (docs/benchmarks.md, issue 23), for up to 2 MiB more peak RSS.
///
/// That arena only, not jemalloc's `thp:always`, which advises every arena: advising the huge
/// arena (allocations of 8 MiB and more, the checker's tensors) and rayon's threads' arenas too cost
/// `rewrite` of VGG-16 about a second of system time on the 2-core machine (1.3 GB of fresh pages;
/// huge pages came from the blocks the VM's balloon had handed back to the host) and `lint` 6 MiB of
/// peak RSS.
///
/// The arena's extent hooks become jemalloc's own with one change: a mapping it makes for the arena
/// is advised (`madvise(MADV_HUGEPAGE)`) before it is used. Every other hook is jemalloc's.
#[cfg(target_os = "linux")]
mod huge_heap {
    use std::ffi::{c_uint, c_void};
    use std::ptr::null_mut;
    use std::sync::atomic::{AtomicPtr, Ordering};
    use tikv_jemalloc_sys::{extent_hooks_t, mallctl};

    /// jemalloc's default hooks, which every mapping is made by.
    static DEFAULT: AtomicPtr<extent_hooks_t> = AtomicPtr::new(null_mut());

    unsafe extern "C" fn alloc(
        _hooks: *mut extent_hooks_t,
        new_addr: *mut c_void,
        size: usize,
        alignment: usize,
        zero: *mut bool,
        commit: *mut bool,
        arena: c_uint,
    ) -> *mut c_void {
        let default = DEFAULT.load(Ordering::Acquire);
        // SAFETY: stored before these hooks were installed: jemalloc's static default hooks
        let Some(make) = (unsafe { default.as_ref() }).and_then(|h| h.alloc) else {
            return null_mut();
        };
        // SAFETY: the default hook, called with the arguments jemalloc gave this one
        let p = unsafe { make(default, new_addr, size, alignment, zero, commit, arena) };
        if !p.is_null() {
            // SAFETY: advice on the `size` bytes jemalloc just mapped; it changes no contents
            unsafe { libc::madvise(p, size, libc::MADV_HUGEPAGE) };
        }
        p
    }

    /// Installs the hooks; on any failure arena 0 keeps jemalloc's own (nothing changes but time).
    /// Not when jemalloc was told what to do with huge pages (`_RJEM_MALLOC_CONF=thp:never` or
    /// `thp:always`): its `opt.thp` is then not `default`.
    pub fn install() {
        let mut thp: *const std::ffi::c_char = std::ptr::null();
        let mut len = std::mem::size_of::<*const std::ffi::c_char>();
        // SAFETY: reads a pointer to jemalloc's static option text into `thp`
        let read = unsafe {
            mallctl(
                c"opt.thp".as_ptr(),
                (&raw mut thp).cast(),
                &mut len,
                null_mut(),
                0,
            )
        };
        // SAFETY: a NUL-terminated static string when the read succeeded
        if read != 0 || thp.is_null() || unsafe { std::ffi::CStr::from_ptr(thp) } != c"default" {
            return;
        }
        // the calling thread's arena (the main thread's: the first one, 0)
        let mut arena: c_uint = 0;
        len = std::mem::size_of::<c_uint>();
        // SAFETY: reads an unsigned index into `arena`, whose size `len` gives
        let read = unsafe {
            mallctl(
                c"thread.arena".as_ptr(),
                (&raw mut arena).cast(),
                &mut len,
                null_mut(),
                0,
            )
        };
        if read != 0 {
            return;
        }
        let Ok(hooks) = std::ffi::CString::new(format!("arena.{arena}.extent_hooks")) else {
            return;
        };
        let mut old: *mut extent_hooks_t = null_mut();
        len = std::mem::size_of::<*mut extent_hooks_t>();
        // SAFETY: reads a pointer-sized value into `old`, whose size `len` gives
        let read = unsafe {
            mallctl(
                hooks.as_ptr(),
                (&raw mut old).cast(),
                &mut len,
                null_mut(),
                0,
            )
        };
        if read != 0 {
            return;
        }
        // SAFETY: jemalloc gave a pointer to its hooks, valid for the life of the process
        let Some(default) = (unsafe { old.as_ref() }) else {
            return;
        };
        DEFAULT.store(old, Ordering::Release);
        // jemalloc reads the hooks through this pointer for as long as the arena lives
        let mut new: *mut extent_hooks_t = Box::leak(Box::new(extent_hooks_t {
            alloc: Some(alloc),
            ..*default
        }));
        // SAFETY: writes a pointer to hooks that live as long as the process
        unsafe {
            mallctl(
                hooks.as_ptr(),
                null_mut(),
                null_mut(),
                (&raw mut new).cast(),
                std::mem::size_of::<*mut extent_hooks_t>(),
            );
        }
    }
}

fn main() -> ExitCode {
    #[cfg(target_os = "linux")]
    huge_heap::install();
    let cli = match nnlint::app::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // help and --version go to stdout with status 0; usage errors to stderr with 2
            let status = if e.use_stderr() {
                nnlint::ExitStatus::Error
            } else {
                nnlint::ExitStatus::Success
            };
            let _ = e.print();
            return status.into();
        }
    };
    nnlint::run(cli).into()
}
