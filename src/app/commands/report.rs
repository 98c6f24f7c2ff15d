//! `nnlint report`: one self-contained HTML page from the analyses the other commands run (the
//! memory report with the training estimate, the lint findings, the fit plans and, with
//! `--rewritten`, a rewrite's before and after). Nothing is computed here that `mem`, `lint` and
//! `fit` do not compute; a part that cannot be computed for this model says why on the page.

use std::path::{Path, PathBuf};

use super::super::cli::ReportArgs;
use super::super::model::{locate, Model};
use super::super::settings::{Inputs, Settings};
use super::super::Outcome;
use crate::analysis::fit::{parse_gpu, FitRequest};
use crate::error::{Error, Result};
use crate::load::{self, Loaded};
use crate::report::html::{self, Comparison, Page};
use crate::report::lint::{FileResult, LintRun};
use crate::util::units::bytes;
use crate::{analysis, rules};

/// The card the fit plans are for when `--gpu` is not given.
const DEFAULT_GPU: &str = "A100-80GB";

const NO_GRAPH: &str =
    "a weights file has no graph (layers, activations): pass the model exported to ONNX";

pub fn run(args: &ReportArgs) -> Result<Outcome> {
    args.llm.layout.check()?;
    let located = locate(&args.model, &args.hub)?;
    let (model_path, chosen) = match &located {
        Model::Path(p) => {
            let r = load::resolve(p)?;
            (r.path, r.chosen)
        }
        Model::Hub(s) => (s.path.clone(), None),
    };
    // what warnings name: the path read, or the ID
    let label = match &located {
        Model::Path(_) => model_path.clone(),
        Model::Hub(s) => PathBuf::from(s.display()),
    };
    let out = output_path(args, located.snapshot())?;
    for input in std::iter::once(&model_path).chain(&args.rewritten) {
        if let Some(o) = &out {
            if same_file(o, input) {
                return Err(Error::Usage(format!(
                    "--output {} is an input: the report never replaces a model",
                    o.display()
                )));
            }
        }
    }
    let s = Settings::resolve(Inputs {
        config: Some(&args.config),
        batch: args.dims.batch,
        dims: &args.dims.dims,
        inputs: &args.dims.inputs,
        values: &args.dims.values,
        plan: Some(&args.plan),
        budget: args.budget,
        ..Inputs::default()
    })?;
    let loaded = match &located {
        Model::Path(_) => load::load(&model_path)?,
        Model::Hub(_) => located.load()?,
    };
    let (mut mem, training_missing) = match &loaded {
        Loaded::Onnx(_) => {
            match analysis::analyze_loaded(&model_path, &loaded, &s.bindings, Some(&s.train)) {
                Ok(r) => (r, None),
                // the estimate needs every dimension bound: the rest of the page does not
                Err(e) => (
                    analysis::analyze_loaded(&model_path, &loaded, &s.bindings, None)?,
                    Some(e.to_string()),
                ),
            }
        }
        Loaded::Weights(_) => (
            analysis::analyze_loaded(&model_path, &loaded, &s.bindings, None)?,
            Some(NO_GRAPH.to_string()),
        ),
        Loaded::Checkpoint(_) | Loaded::Gguf(_) => {
            // `mem`'s language-model options (--seq, --kv-dtype, --attn, --lora, --qlora)
            let llm = args.llm.options();
            let with = |train| {
                analysis::analyze_loaded_with(&model_path, &loaded, &s.bindings, train, Some(&llm))
            };
            match with(Some(&s.train)) {
                Ok(r) => (r, None),
                Err(e) => (with(None)?, Some(e.to_string())),
            }
        }
    };
    located.rename(&mut mem.model);
    if matches!(loaded, Loaded::Onnx(_) | Loaded::Weights(_)) {
        if let Some(e) = args.llm.refused_for_graphs() {
            return Err(e);
        }
    }
    let gpu = match args.gpu {
        Some(g) => g,
        None => parse_gpu(DEFAULT_GPU).map_err(Error::Usage)?,
    };
    let graph_fit;
    let llm_fit;
    let (lint, fit) = match &loaded {
        Loaded::Onnx(model) => {
            graph_fit = fit(model, args, &s, gpu);
            (
                lint(model, &s).map_err(|e| e.to_string()),
                graph_fit.as_ref().map_err(|e| e.to_string()),
            )
        }
        Loaded::Weights(_) => (Err(NO_GRAPH.to_string()), Err(NO_GRAPH.to_string())),
        Loaded::Checkpoint(_) | Loaded::Gguf(_) => {
            // the plans `nnlint fit MODEL --gpu CARD --seq N` ranks, at the page's sequence
            llm_fit = super::fit::llm_plans(
                &model_path,
                &mem,
                gpu,
                analysis::llm::fit::FitOptions {
                    base: s.train,
                    optimizer: args.plan.optimizer,
                    llm: args.llm.options(),
                    lora_rank: args.llm.lora.unwrap_or(16),
                    effective_batch: args.effective_batch,
                    inference: false,
                },
            )
            .map(|mut f| {
                located.rename(&mut f.model);
                f
            });
            (
                Err("the rules read ONNX graphs; a checkpoint has no graph to lint".to_string()),
                llm_fit.as_ref().map_err(|e| e.to_string()),
            )
        }
    };
    let comparison = match &args.rewritten {
        Some(p) => {
            let rewritten = load::load_graph(p, "report --rewritten")?;
            let train = mem.training.is_some().then_some(&s.train);
            Some(Comparison {
                after: analysis::analyze(&rewritten, &s.bindings, train)?,
                applied: rules::fix::applied(&rewritten)
                    .map_err(|e| Error::graph(p, e))?
                    .unwrap_or_default(),
            })
        }
        None => None,
    };
    let page = html::render(&Page {
        mem: &mem,
        training_missing,
        fit: Some(fit),
        lint: Some(lint.as_ref().map_err(String::clone)),
        rewrite: comparison.as_ref(),
    });
    match out {
        None => Ok(Outcome::clean(page)
            .warn(&label, &mem.warnings)
            .chosen(chosen)),
        Some(path) => {
            crate::util::fs::write_atomically(&path, page.as_bytes())
                .map_err(|e| Error::io(&path, e))?;
            let mut outcome = Outcome::clean(String::new());
            outcome.stderr.push(format!(
                "wrote {} ({}): open it in a browser",
                path.display(),
                bytes(page.len() as u64)
            ));
            Ok(outcome.warn(&label, &mem.warnings).chosen(chosen))
        }
    }
}

/// The lint run of `nnlint lint MODEL` with the same settings, as one file's result.
fn lint(model: &crate::ir::Model, s: &Settings) -> Result<LintRun> {
    let settings = rules::Settings {
        bindings: s.bindings.clone(),
        train: s.train,
        budget: s.budget,
    };
    let o = rules::lint(model, &settings, &s.selection)?;
    let mut warnings = o.warnings;
    warnings.extend(
        o.unused_ignores
            .iter()
            .map(|g| format!("ignore-nodes pattern '{g}' matches no finding")),
    );
    Ok(LintRun {
        files: vec![FileResult {
            model: model.path.display().to_string(),
            findings: o.findings,
            error: None,
            baselined: 0,
        }],
        warnings,
    })
}

/// The plans `nnlint fit MODEL --gpu CARD` ranks.
fn fit(
    model: &crate::ir::Model,
    args: &ReportArgs,
    s: &Settings,
    gpu: analysis::fit::Gpu,
) -> Result<analysis::fit::FitReport> {
    analysis::fit::fit(
        model,
        &FitRequest {
            gpu,
            gpus: s.train.gpus,
            effective_batch: args.effective_batch,
            base: s.train,
            optimizer: args.plan.optimizer,
            dims: s.bindings.dims.clone(),
            inputs: s.bindings.inputs.clone(),
            inference: false,
        },
    )
}

/// `-o`, `None` for standard output, or `MODEL-report.html` beside the input (for a Hub ID, in
/// the working directory: `name-report.html`, or the GGUF file's name).
fn output_path(
    args: &ReportArgs,
    snapshot: Option<&crate::load::hub::Snapshot>,
) -> Result<Option<PathBuf>> {
    match &args.output {
        Some(p) if p == Path::new("-") => return Ok(None),
        Some(p) => return Ok(Some(p.clone())),
        None => {}
    }
    if let Some(s) = snapshot {
        let stem = match &s.id.file {
            Some(_) => s
                .path
                .file_stem()
                .map_or(s.id.name.clone(), |n| n.to_string_lossy().into_owned()),
            None => s.id.name.clone(),
        };
        return Ok(Some(PathBuf::from(format!("{stem}-report.html"))));
    }
    if args.model == Path::new("-") {
        return Err(Error::Usage(
            "report: the model comes from standard input, so give the page a name with -o FILE (or -o - for standard output)".into(),
        ));
    }
    let name = args
        .model
        .file_name()
        .map_or("model".into(), |n| n.to_string_lossy().into_owned());
    let stem = [".safetensors.index.json", ".safetensors", ".onnx"]
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .unwrap_or(&name)
        .to_string();
    Ok(Some(
        args.model.with_file_name(format!("{stem}-report.html")),
    ))
}

/// Whether two paths name the same existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
