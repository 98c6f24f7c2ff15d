//! `nnlint fit`: which plans make a model fit a GPU, ranked.

use super::super::cli::FitArgs;
use super::super::model::{locate, Model};
use super::super::settings::{Inputs, Settings};
use super::super::Outcome;
use crate::error::{Error, Result};
use crate::load;
use crate::{analysis, report};

/// The effective batch `fit` keeps when `--effective-batch` is not given (samples or sequences
/// per optimizer step), for every kind of model.
pub(crate) const DEFAULT_EFFECTIVE_BATCH: u64 = 256;

pub fn run(args: &FitArgs) -> Result<Outcome> {
    args.layout.check()?;
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
    let located = locate(&args.model, &args.hub)?;
    let chosen = located.chosen()?;
    let loaded = located.load()?;
    if matches!(loaded, load::Loaded::Checkpoint(_) | load::Loaded::Gguf(_)) {
        return fit_llm(args, &located, loaded, &s.train).map(|o| o.chosen(chosen));
    }
    for (flag, given) in [
        ("--seq", args.seq.is_some()),
        ("--lora", args.lora.is_some()),
        (
            "--cache-layout",
            args.layout.cache_layout != analysis::llm::layers::CacheLayout::Hf,
        ),
        ("--block-size", args.layout.block_size.is_some()),
        ("--images", args.image.images.is_some()),
        ("--image-size", args.image.image_size.is_some()),
    ] {
        if given {
            return Err(Error::Usage(format!(
                "{flag} applies to language-model checkpoints (a Hugging Face folder or a .gguf file){}",
                if flag == "--seq" {
                    "; an ONNX graph's sequence is bound with --dim NAME=N"
                } else {
                    ""
                }
            )));
        }
    }
    let model = load::into_graph(&args.model, loaded, "fit")?;
    let req = analysis::fit::FitRequest {
        gpu: args.gpu,
        gpus: s.train.gpus,
        effective_batch: args.effective_batch.unwrap_or(DEFAULT_EFFECTIVE_BATCH),
        base: s.train,
        optimizer: args.plan.optimizer,
        dims: s.bindings.dims,
        inputs: s.bindings.inputs,
        inference: args.inference,
    };
    let r = analysis::fit::fit(&model, &req)?;
    Ok(Outcome::clean(report::render_fit(
        &r,
        "graph",
        args.format,
        super::super::terminal::width(),
        located.snapshot(),
    ))
    .warn(&args.model, &model.warnings)
    .chosen(chosen))
}

/// `fit` for a language-model checkpoint: serving and fine-tuning plans at `--seq`.
fn fit_llm(
    args: &FitArgs,
    located: &Model,
    loaded: load::Loaded,
    train: &analysis::training::TrainConfig,
) -> Result<Outcome> {
    for (flag, given) in [
        ("--dim", !args.dims.is_empty()),
        ("--input", !args.inputs.is_empty()),
        // the input pipeline's host memory is modelled for ONNX graphs only
        ("--workers", args.plan.workers != 4),
        ("--prefetch", args.plan.prefetch != 2),
        ("--no-pin", args.plan.no_pin),
    ] {
        if given {
            return Err(Error::Usage(format!(
                "{flag} applies to ONNX graphs; for a language model give --seq (and --lora for the adapter rank)"
            )));
        }
    }
    let o = analysis::llm::LlmOptions {
        seq: args.seq.unwrap_or(0),
        cache_layout: args.layout.cache_layout,
        block_size: args.layout.block_size(),
        images: args.image.images.unwrap_or(0),
        image_size: args.image.image_size,
        ..Default::default()
    };
    let r = match &loaded {
        load::Loaded::Checkpoint(c) => analysis::llm::analyze_checkpoint(c, &o, None)?,
        load::Loaded::Gguf(g) => analysis::llm::analyze_gguf(g, &o, None)?,
        _ => unreachable!("fit_llm is called for checkpoints only"),
    };
    let mut f = llm_plans(
        &args.model,
        &r,
        args.gpu,
        analysis::llm::fit::FitOptions {
            base: *train,
            optimizer: args.plan.optimizer,
            llm: o,
            lora_rank: args.lora.unwrap_or(16),
            effective_batch: args.effective_batch.unwrap_or(DEFAULT_EFFECTIVE_BATCH),
            inference: args.inference,
        },
    )?;
    located.rename(&mut f.model);
    let warnings = r.warnings.clone();
    Ok(Outcome::clean(report::render_fit(
        &f,
        "language_model",
        args.format,
        super::super::terminal::width(),
        located.snapshot(),
    ))
    .warn(&args.model, &warnings))
}

/// The serving and fine-tuning plans of a language model `r` (its analysis at `opts.llm`, whose
/// sequence it keeps) on `gpu`: what `fit` prints, and what `report` draws.
pub(crate) fn llm_plans(
    path: &std::path::Path,
    r: &analysis::MemReport,
    gpu: analysis::fit::Gpu,
    mut opts: analysis::llm::fit::FitOptions,
) -> Result<analysis::fit::FitReport> {
    let Some(m) = r.llm.as_ref().and_then(|l| l.model.as_ref()) else {
        // the analysis's note names the type and the ones nnlint models
        let why = r
            .notes
            .iter()
            .find(|n| n.starts_with("model_type") || n.contains("GGUF"))
            .cloned()
            .unwrap_or_else(|| "its model_type is not one nnlint models".into());
        return Err(Error::refused(
            path,
            format!("fit needs the architecture, and {why}"),
        ));
    };
    opts.llm.seq = r.dims.get("seq").map_or(1, |&s| s as u64);
    analysis::llm::fit::fit(m, gpu, &opts).map_err(|e| e.in_file(path))
}
