//! `nnlint fit`: which plans make a model fit a GPU, ranked.

use super::super::cli::FitArgs;
use super::super::settings::{Inputs, Settings};
use super::super::Outcome;
use crate::error::{Error, Result};
use crate::load;
use crate::{analysis, report};

pub fn run(args: &FitArgs) -> Result<Outcome> {
    let s = Settings::resolve(Inputs {
        dims: &args.dims,
        inputs: &args.inputs,
        plan: Some(&args.plan),
        ..Inputs::default()
    })?;
    let given = args.plan.plan_options();
    if !given.is_empty() {
        return Err(Error::Usage(format!(
            "fit chooses the precision, checkpointing, accumulation and sharding itself (it ranks every plan); {} cannot be set: drop {}, or estimate one plan with `nnlint mem MODEL --train {}`",
            given.join(", "),
            if given.len() == 1 { "it" } else { "them" },
            given.join(" ")
        )));
    }
    let model = load::load_graph(&args.model, "fit")?;
    let req = analysis::fit::FitRequest {
        gpu: args.gpu,
        gpus: s.train.gpus,
        effective_batch: args.effective_batch,
        base: s.train,
        dims: s.bindings.dims,
        inputs: s.bindings.inputs,
        inference: args.inference,
    };
    let r = analysis::fit::fit(&model, &req)?;
    Ok(Outcome::clean(report::render_fit(
        &r,
        args.format,
        super::super::terminal::width(),
    )))
}
