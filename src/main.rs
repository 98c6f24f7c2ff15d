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
/// time and s10k ~18% less wall time (docs/benchmarks.md, issue 23), for up to 2.3 MiB more peak
/// RSS.
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
    use std::ffi::{c_char, c_uint, c_void, CStr, CString};
    use std::ptr::{null, null_mut};
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

    /// Installs the hooks; on any failure the arena keeps jemalloc's own (nothing changes but time).
    /// Not when jemalloc was told what to do with huge pages (`_RJEM_MALLOC_CONF=thp:never` or
    /// `thp:always`): its `opt.thp` is then not `default`.
    pub fn install() {
        let _ = try_install();
    }

    fn try_install() -> Option<()> {
        let thp = read::<*const c_char>(c"opt.thp", null())?;
        // SAFETY: jemalloc's static NUL-terminated option text (checked not null)
        if thp.is_null() || unsafe { CStr::from_ptr(thp) } != c"default" {
            return None;
        }
        // the calling thread's arena (the main thread's: the first one, 0)
        let arena = read::<c_uint>(c"thread.arena", 0)?;
        let hooks = CString::new(format!("arena.{arena}.extent_hooks")).ok()?;
        let old = read::<*mut extent_hooks_t>(&hooks, null_mut())?;
        // SAFETY: jemalloc's pointer to its hooks, valid for the life of the process
        let default = unsafe { old.as_ref() }?;
        DEFAULT.store(old, Ordering::Release);
        // jemalloc reads the hooks through this pointer for as long as the arena lives
        let mut new: *mut extent_hooks_t = Box::leak(Box::new(extent_hooks_t {
            alloc: Some(alloc),
            ..*default
        }));
        // SAFETY: writes a pointer to hooks that live as long as the process
        let rc = unsafe {
            mallctl(
                hooks.as_ptr(),
                null_mut(),
                null_mut(),
                (&raw mut new).cast(),
                std::mem::size_of::<*mut extent_hooks_t>(),
            )
        };
        (rc == 0).then_some(())
    }

    /// Gives every arena's dirty pages back to the system now (`arena.<all>.purge`), for the
    /// library's [`nnlint::util::pages::give_back_freed`]: jemalloc keeps freed pages ten seconds
    /// by default, and a run of `mem` is over before.
    pub fn purge() {
        // MALLCTL_ARENAS_ALL
        // SAFETY: a command without arguments
        unsafe {
            mallctl(
                c"arena.4096.purge".as_ptr(),
                null_mut(),
                null_mut(),
                null_mut(),
                0,
            )
        };
    }

    /// jemalloc's value `name`, of type `T` (`empty` until it is read).
    fn read<T: Copy>(name: &CStr, empty: T) -> Option<T> {
        let mut value = empty;
        let mut len = std::mem::size_of::<T>();
        // SAFETY: jemalloc writes at most `len` bytes, `value`'s size, when `name` has that size
        let rc = unsafe {
            mallctl(
                name.as_ptr(),
                (&raw mut value).cast(),
                &mut len,
                null_mut(),
                0,
            )
        };
        (rc == 0 && len == std::mem::size_of::<T>()).then_some(value)
    }
}

fn main() -> ExitCode {
    #[cfg(target_os = "linux")]
    {
        huge_heap::install();
        nnlint::util::pages::set_give_back_freed(huge_heap::purge);
    }
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
