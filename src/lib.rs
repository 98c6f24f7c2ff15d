//! nnlint reads exported neural-network models (ONNX graphs, safetensors weights) and tells where
//! the memory goes: per-layer parameters, activations and MACs, and the inference peak.
//!
//! The modules follow the pipeline: [`load`] (bytes to IR) → [`ir`] → [`analysis`] (shapes, costs,
//! memory) → [`report`].

pub mod analysis;
pub mod cli;
pub mod error;
pub mod ir;
pub mod load;
pub mod report;

use std::io::Write;
use std::process::ExitCode;

use analysis::{Bindings, MemReport};
use cli::{Cli, Command, DimArgs, FitArgs, MemArgs};
pub use error::{Error, Result};
use load::Loaded;

impl From<&DimArgs> for Bindings {
    fn from(d: &DimArgs) -> Self {
        Bindings {
            batch: d.batch,
            dims: d.dims.iter().cloned().collect(),
        }
    }
}

/// Loads and analyses a model file for `nnlint mem` (with a training plan for `--train`).
pub fn mem_report(
    path: &std::path::Path,
    bindings: &Bindings,
    train: Option<&analysis::training::TrainConfig>,
) -> Result<MemReport> {
    match load::load(path)? {
        Loaded::Onnx(model) => analysis::analyze(&model, bindings, train),
        Loaded::Weights(w) => {
            if bindings.batch.is_some() || !bindings.dims.is_empty() {
                let mut r = analysis::weights::analyze(&w);
                r.notes
                    .push("--batch and --dim have no effect on a weights-only file".into());
                Ok(r)
            } else {
                Ok(analysis::weights::analyze(&w))
            }
        }
    }
}

fn mem(args: &MemArgs) -> Result<String> {
    let train = if args.train {
        Some(args.plan.config().map_err(Error::Usage)?)
    } else {
        None
    };
    let report = mem_report(&args.model, &Bindings::from(&args.dims), train.as_ref())?;
    let opts = report::ViewOptions {
        sort: args.sort,
        top: args.top,
        all: args.all,
    };
    Ok(report::render_mem(&report, args.format, opts))
}

fn fit(args: &FitArgs) -> Result<String> {
    let model = match load::load(&args.model)? {
        Loaded::Onnx(m) => m,
        Loaded::Weights(_) => {
            return Err(Error::Usage(format!(
                "{}: fit needs a graph (activations); a weights file has none",
                args.model.display()
            )))
        }
    };
    let req = analysis::fit::FitRequest {
        gpu: args.gpu,
        gpus: args.plan.gpus,
        effective_batch: args.effective_batch.max(1),
        base: args.plan.config().map_err(Error::Usage)?,
        dims: args.dims.iter().cloned().collect(),
        inference: args.inference,
    };
    let r = analysis::fit::fit(&model, &req)?;
    Ok(report::render_fit(&r, args.format))
}

/// Writes to stdout; a closed pipe (`nnlint mem m.onnx | head`) is a normal end.
fn emit(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Runs a parsed command line. Exit codes: 0 success, 1 findings (lint), 2 tool error.
pub fn run(cli: Cli) -> ExitCode {
    let result = match &cli.command {
        Command::Mem(args) => mem(args),
        Command::Fit(args) => fit(args),
    };
    match result {
        Ok(text) => match emit(&text) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("nnlint: error: writing output: {e}");
                ExitCode::from(2)
            }
        },
        Err(e) => {
            eprintln!("nnlint: error: {e}");
            ExitCode::from(2)
        }
    }
}
