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
