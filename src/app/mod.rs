//! The application layer: the command line ([`cli`]), `nnlint.toml` ([`config`]), their resolution
//! into one [`Settings`](settings::Settings) value, and one handler per command under `commands/`.
//! A handler computes and renders; it neither prints nor picks an exit code. [`run`] prints what
//! it returns and maps what happened ([`Verdict`]) to the [`ExitStatus`].

pub mod cli;
mod commands;
pub mod config;
mod exit;
mod model;
mod progress;
mod settings;
mod terminal;

use std::io::Write;

pub use exit::{Body, ExitStatus, Outcome, Verdict};

use cli::{Cli, Command};

/// Runs a parsed command line: prints its output on standard output, warnings and errors on
/// standard error, and returns the exit status.
pub fn run(cli: Cli) -> ExitStatus {
    progress::set_quiet(cli.quiet);
    match execute(&cli) {
        Ok(outcome) => {
            // --quiet keeps errors, and what explains a failing verdict
            let keep = |line: &String| {
                !cli.quiet || outcome.verdict != Verdict::Clean || line.starts_with("nnlint: error")
            };
            for line in outcome.stderr.iter().filter(|l| keep(l)) {
                eprintln!("{line}");
            }
            let verdict = outcome.verdict;
            match emit(outcome) {
                Ok(()) => ExitStatus::from(verdict),
                Err(e) => {
                    eprintln!("nnlint: error: writing output: {e}");
                    ExitStatus::Error
                }
            }
        }
        Err(e) => {
            eprintln!("nnlint: error: {e}");
            ExitStatus::Error
        }
    }
}

/// Runs a parsed command line and returns what it would print, without printing it (the fuzz
/// targets and embedders use this; [`run`] prints the result).
pub fn execute(cli: &Cli) -> crate::Result<Outcome> {
    match &cli.command {
        Command::Mem(args) => commands::mem::run(args),
        Command::Fit(args) => commands::fit::run(args),
        Command::Lint(args) => commands::lint::run(args),
        Command::Rewrite(args) => commands::rewrite::run(args),
        Command::Verify(args) => commands::verify::run(args),
        Command::Rules(args) => commands::rules::list(args),
        Command::Explain { rule } => commands::rules::explain(rule),
        Command::Report(args) => commands::report::run(args),
        Command::Completions { shell } => Ok(commands::docs::completions(*shell)),
        Command::Man => commands::docs::man(),
    }
}

/// Writes to stdout (through one 64 KiB buffer); a closed pipe (`nnlint mem m.onnx | head`) is a
/// normal end.
fn emit(outcome: Outcome) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    match outcome.write_body(&mut out).and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}
