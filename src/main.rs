use std::process::ExitCode;

use clap::Parser;

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
