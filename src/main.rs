use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match nnlint::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    nnlint::run(cli)
}
