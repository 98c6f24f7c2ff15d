//! `nnlint mem`: per-layer parameters, activations and MACs, the inference peak, and with
//! `--train` the memory of a training step.

use super::super::cli::MemArgs;
use super::super::settings::{Inputs, Settings};
use super::super::Outcome;
use crate::error::Result;
use crate::{analysis, report};

pub fn run(args: &MemArgs) -> Result<Outcome> {
    let s = Settings::resolve(Inputs {
        batch: args.dims.batch,
        dims: &args.dims.dims,
        inputs: &args.dims.inputs,
        plan: Some(&args.plan),
        ..Inputs::default()
    })?;
    if !args.train {
        let given = args.plan.training_options();
        if !given.is_empty() {
            return Err(crate::error::Error::Usage(format!(
                "{} only change{} the training estimate: add --train",
                given.join(", "),
                if given.len() == 1 { "s" } else { "" }
            )));
        }
    }
    let train = args.train.then_some(&s.train);
    let report = analysis::analyze_path(&args.model, &s.bindings, train)?;
    let view = report::ViewOptions {
        sort: args.sort,
        top: args.top,
        all: args.all,
        width: super::super::terminal::width(),
    };
    Ok(Outcome::clean(report::render_mem(
        &report,
        args.format,
        view,
    )))
}
