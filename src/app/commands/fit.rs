//! `nnlint fit`: which plans make a model fit a GPU, ranked.

use super::super::cli::FitArgs;
use super::super::settings::{Inputs, Settings};
use super::super::Outcome;
use crate::error::{Error, Result};
use crate::load::{self, Loaded};
use crate::{analysis, report};

pub fn run(args: &FitArgs) -> Result<Outcome> {
    let s = Settings::resolve(Inputs {
        dims: &args.dims,
        inputs: &args.inputs,
        plan: Some(&args.plan),
        ..Inputs::default()
    })?;
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
        gpus: s.train.gpus,
        effective_batch: args.effective_batch.max(1),
        base: s.train,
        dims: s.bindings.dims,
        inputs: s.bindings.inputs,
        inference: args.inference,
    };
    let r = analysis::fit::fit(&model, &req)?;
    Ok(Outcome::clean(report::render_fit(&r, args.format)))
}
