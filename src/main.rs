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

/// jemalloc's options, read at its first allocation (`_RJEM_MALLOC_CONF` still overrides them).
/// `thp:always`: every mapping of its heap advised for transparent huge pages, where the kernel
/// grants them on advice (`madvise`, the common default; `never` ignores it). A graph's many small
/// allocations then fault 2 MiB at a time: on the 2-core machine, whose page faults cost ~0.7 ms per
/// MiB, `mem` of the 100,016-node graph faulted 19,600 times and now ~1,800, 14% less wall time
/// (s10k 17%, s1k 14%, `big` 10%, VGG-16 the same), for ~1-2 MiB more peak RSS on small models
/// (docs/benchmarks.md, issue 23).
#[cfg(target_os = "linux")]
#[export_name = "_rjem_malloc_conf"]
static MALLOC_CONF: &[u8; 11] = b"thp:always\0";

fn main() -> ExitCode {
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
