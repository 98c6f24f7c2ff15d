//! `nnlint lint`: every model against the rule set, in parallel (rayon), into one report.

use std::collections::BTreeSet;

use rayon::prelude::*;

use super::super::cli::{HubArgs, LintArgs};
use super::super::model::{locate, Model};
use super::super::progress::progress;
use super::super::settings::{Inputs, Settings};
use super::super::{Outcome, Verdict};
use crate::error::Result;
use crate::report::lint::{self as lint_report, FileResult, LintFormat, LintRun};
use crate::rules::baseline::Baseline;
use crate::{load, report, rules};

/// One model's result, its configured node ignores that matched nothing, and rules it skipped.
struct FileOutcome {
    result: FileResult,
    unused_ignores: Vec<String>,
    warnings: Vec<String>,
}

pub fn run(args: &LintArgs) -> Result<Outcome> {
    let s = Settings::resolve(Inputs {
        config: Some(&args.config),
        batch: args.batch,
        dims: &args.dims,
        inputs: &args.inputs,
        values: &args.values,
        precision: args.precision,
        budget: args.budget,
        select: &args.select,
        ignore: &args.ignore,
        fail_on: args.fail_on,
        ..Inputs::default()
    })?;
    let baseline = args.baseline.as_deref().map(Baseline::read).transpose()?;
    let analysis = rules::Settings {
        bindings: s.bindings.clone(),
        train: s.train,
        budget: s.budget,
    };
    let bar = progress();
    if args.models.len() > 1 {
        bar.start("linting", args.models.len() as u64);
    }
    let outcomes: Vec<FileOutcome> = args
        .models
        .par_iter()
        .map(|path| {
            let model = path.display().to_string();
            let result = graph(path).and_then(|m| rules::lint(&m, &analysis, &s.selection));
            let out = match result {
                Ok(outcome) => {
                    let mut findings = outcome.findings;
                    let before = findings.len();
                    if let Some(b) = &baseline {
                        findings.retain(|f| !b.contains(&model, f));
                    }
                    FileOutcome {
                        result: FileResult {
                            baselined: before - findings.len(),
                            model,
                            findings,
                            error: None,
                        },
                        unused_ignores: outcome.unused_ignores,
                        warnings: outcome.warnings,
                    }
                }
                Err(e) => FileOutcome {
                    result: FileResult {
                        error: Some(named_once(&model, &e.to_string())),
                        model,
                        findings: Vec::new(),
                        baselined: 0,
                    },
                    unused_ignores: Vec::new(),
                    warnings: Vec::new(),
                },
            };
            bar.advance(1);
            out
        })
        .collect();
    bar.finish();

    let mut files = Vec::with_capacity(outcomes.len());
    let mut warnings: Vec<String> = Vec::new();
    // an ignore pattern is unused when no file that could be linted used it
    let mut unused: Option<BTreeSet<String>> = None;
    for o in outcomes {
        warnings.extend(o.warnings);
        if o.result.error.is_none() {
            let set: BTreeSet<String> = o.unused_ignores.into_iter().collect();
            unused = Some(match unused {
                None => set,
                Some(u) => u.intersection(&set).cloned().collect(),
            });
        }
        files.push(o.result);
    }
    let source = s
        .config
        .path
        .as_ref()
        .map_or("nnlint.toml".into(), |p| p.display().to_string());
    for g in unused.unwrap_or_default() {
        warnings.push(format!(
            "{source}: ignore-nodes pattern '{g}' matches no finding"
        ));
    }
    let run = LintRun { files, warnings };
    if let Some(path) = &args.write_baseline {
        let b = Baseline::of(
            run.files
                .iter()
                .flat_map(|f| f.findings.iter().map(move |x| (f.model.as_str(), x))),
        );
        b.write(path)?;
        return Ok(Outcome::clean(format!(
            "wrote {} findings to {}\n",
            b.fingerprints.len(),
            path.display()
        )));
    }
    let text = match args.format {
        LintFormat::Human => lint_report::human(&run, lint_report::use_colour()),
        LintFormat::Json => lint_report::json(&run),
        LintFormat::Sarif => report::sarif::render(&run),
        LintFormat::Github => lint_report::github(&run),
        LintFormat::Markdown => lint_report::markdown(&run),
    };
    let verdict = if run.files.iter().any(|f| f.error.is_some()) {
        Verdict::InputErrors
    } else if run
        .files
        .iter()
        .flat_map(|f| &f.findings)
        .any(|f| s.fail_on.fails(f.severity))
    {
        Verdict::Findings
    } else {
        Verdict::Clean
    };
    let mut outcome = Outcome::new(text, verdict);
    // tool errors go to standard error in every format (the formats carry them too)
    outcome.stderr = run
        .files
        .iter()
        .filter_map(|f| f.error.as_ref())
        .map(|e| format!("nnlint: error: {e}"))
        .collect();
    // a folder is read as its only model file: say which, as every command does
    for p in args.models.iter().filter(|p| p.is_dir()) {
        outcome = outcome.chosen(load::resolve(p).ok().and_then(|r| r.chosen));
    }
    Ok(outcome)
}

/// The graph of one MODEL argument: a path, or a Hub ID from the local Hugging Face cache (whose
/// checkpoint has no graph, which the loader says naming the ID).
fn graph(arg: &std::path::Path) -> Result<crate::ir::Model> {
    match locate(arg, &HubArgs::default())? {
        Model::Path(p) => load::load_graph(&p, "lint"),
        Model::Hub(s) => {
            let name = std::path::PathBuf::from(s.display());
            load::into_graph(&name, load::load_snapshot(&s)?, "lint")
        }
    }
}

/// An error message that names its file once: most already start with the path.
fn named_once(model: &str, message: &str) -> String {
    if message.starts_with(model) {
        message.to_string()
    } else {
        format!("{model}: {message}")
    }
}
