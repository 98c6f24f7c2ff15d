//! `nnlint mem`: per-layer parameters, activations and MACs, the inference peak, and with
//! `--train` the memory of a training step.

use super::super::cli::MemArgs;
use super::super::model::locate;
use super::super::settings::{Inputs, Settings};
use super::super::Outcome;
use crate::error::Result;
use crate::{analysis, report};

pub fn run(args: &MemArgs) -> Result<Outcome> {
    args.llm.layout.check()?;
    let s = Settings::resolve(Inputs {
        batch: args.dims.batch,
        dims: &args.dims.dims,
        inputs: &args.dims.inputs,
        values: &args.dims.values,
        plan: Some(&args.plan),
        ..Inputs::default()
    })?;
    let lora = args.llm.lora.is_some() || args.llm.qlora;
    if !args.train && !lora {
        let given = args.plan.training_options();
        if !given.is_empty() {
            return Err(crate::error::Error::Usage(format!(
                "{} only change{} the training estimate: add --train",
                given.join(", "),
                if given.len() == 1 { "s" } else { "" }
            )));
        }
    }
    if args.llm.lora_targets.is_some() && !lora {
        return Err(crate::error::Error::Usage(
            "--lora-targets chooses the modules of --lora or --qlora: add one of them".into(),
        ));
    }
    let train = (args.train || lora).then_some(&s.train);
    let model = locate(&args.model, &args.hub)?;
    let chosen = model.chosen()?;
    let llm = args.llm.options();
    let loaded = model.load()?;
    let mut report =
        analysis::analyze_loaded_with(&args.model, &loaded, &s.bindings, train, Some(&llm))?;
    model.rename(&mut report.model);
    // the process ends after the output: freeing a graph (~3 allocations per node) or a
    // checkpoint's tensor list (150,000 allocations for 75,000 tensors) one piece at a time would
    // only delay it. The table's buffers would not take the graph's pages either: its text is one
    // allocation of its own, and the rest reuses little of the graph's small objects (`mem` of a
    // graph of 100,000 nodes: 7 ms faster, peak RSS the same, which is reached before)
    std::mem::forget(loaded);
    if matches!(
        report.format,
        analysis::Format::Checkpoint | analysis::Format::Gguf
    ) && (!args.dims.dims.is_empty()
        || !args.dims.inputs.is_empty()
        || !args.dims.values.is_empty())
    {
        return Err(crate::error::Error::Usage(
            "--dim, --input and --value bind ONNX graph inputs; for a language model give --batch and --seq"
                .into(),
        ));
    }
    if matches!(
        report.format,
        analysis::Format::Checkpoint | analysis::Format::Gguf
    ) {
        for (flag, given) in [
            ("--workers", args.plan.workers != 4),
            ("--prefetch", args.plan.prefetch != 2),
            ("--no-pin", args.plan.no_pin),
        ] {
            if given {
                return Err(crate::error::Error::Usage(format!(
                    "{flag} sizes the input pipeline of an ONNX graph's training; a language model's step has none modelled"
                )));
            }
        }
    }
    if matches!(
        report.format,
        analysis::Format::Onnx | analysis::Format::Safetensors
    ) {
        if let Some(e) = args.llm.refused_for_graphs() {
            return Err(e);
        }
    }
    let view = report::ViewOptions {
        sort: args.sort,
        top: args.top,
        all: args.all,
        width: super::super::terminal::width(),
    };
    let format = args.format;
    let warnings = report.warnings.clone();
    let source = model.snapshot().cloned();
    // written as it is rendered; the process ends after the output, so the report (a 100k-node
    // graph's rows) is left to the exit, not freed one row at a time
    let outcome = Outcome::streamed(move |out| {
        let report = std::mem::ManuallyDrop::new(report);
        report::write_mem(&report, format, view, source.as_ref(), out)
    });
    // the table shows its warnings; the other formats keep them in the data (JSON) or not at all
    let outcome = if format == report::MemFormat::Table {
        outcome
    } else {
        outcome.warn(&args.model, &warnings)
    };
    Ok(outcome.chosen(chosen))
}
