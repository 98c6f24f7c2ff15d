//! nnlint reads exported neural-network models (ONNX graphs, safetensors weights) and tells where
//! the memory goes: per-layer parameters, activations and MACs, and the inference peak.
//!
//! The modules follow the pipeline: [`load`] (bytes to IR) → [`ir`] → [`analysis`] (shapes, costs,
//! memory) → [`report`].

pub mod analysis;
pub mod cli;
pub mod config;
pub mod error;
pub mod ir;
pub mod load;
pub mod report;
pub mod rules;

use std::io::Write;
use std::process::ExitCode;

use analysis::{Bindings, MemReport};
use cli::{Cli, Command, DimArgs, FitArgs, LintArgs, MemArgs, RulesArgs, RulesFormat};
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

/// The configuration a lint run uses: `--config`, else `nnlint.toml` found from the working
/// directory up, else defaults.
fn lint_config(args: &LintArgs) -> Result<config::Config> {
    if args.no_config {
        return Ok(config::Config::default());
    }
    let path = match &args.config {
        Some(p) => Some(p.clone()),
        None => std::env::current_dir()
            .ok()
            .and_then(|d| config::discover(&d)),
    };
    match path {
        Some(p) => config::load(&p),
        None => Ok(config::Config::default()),
    }
}

/// A baseline: fingerprints of accepted findings.
#[derive(serde::Serialize, serde::Deserialize)]
struct Baseline {
    version: u32,
    fingerprints: std::collections::BTreeSet<String>,
}

fn read_baseline(path: &std::path::Path) -> Result<Baseline> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text)
        .map_err(|e| Error::malformed(path, format!("not an nnlint baseline: {e}")))
}

/// Lints every model (in parallel) into one run, and the exit code it deserves.
fn lint(args: &LintArgs) -> Result<(String, u8)> {
    let cfg = lint_config(args)?;
    for s in args.select.iter().chain(&args.ignore) {
        config::check_selector(s).map_err(|e| Error::Usage(format!("--select/--ignore: {e}")))?;
    }
    let mut dims = cfg.dims.clone();
    dims.extend(args.dims.iter().cloned());
    let mut train = analysis::training::TrainConfig::default();
    if let Some(p) = args.precision.or(cfg.precision) {
        train.precision = p;
    }
    if let Some(o) = cfg.optimizer {
        train.optimizer = o;
    }
    let settings = rules::Settings {
        bindings: Bindings {
            batch: args.batch.or(cfg.batch),
            dims,
        },
        train,
        budget: args.budget.or(cfg.budget),
    };
    let baseline = args.baseline.as_deref().map(read_baseline).transpose()?;
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(args.models.len())
        .max(1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    // per file: the result, its unmatched ignores, and rules it had to skip
    type Slot = (report::lint::FileResult, Vec<String>, Vec<String>);
    let mut slots: Vec<Option<Slot>> = (0..args.models.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(path) = args.models.get(i) else {
                            break;
                        };
                        let model = path.display().to_string();
                        let result = load::onnx::load(path).and_then(|m| {
                            rules::lint(&m, &settings, &cfg, &args.select, &args.ignore)
                        });
                        let entry = match result {
                            Ok(outcome) => {
                                let mut findings = outcome.findings;
                                let before = findings.len();
                                if let Some(b) = &baseline {
                                    findings.retain(|f| {
                                        !b.fingerprints.contains(&rules::fingerprint(&model, f))
                                    });
                                }
                                let baselined = before - findings.len();
                                (
                                    report::lint::FileResult {
                                        model,
                                        findings,
                                        error: None,
                                        baselined,
                                    },
                                    outcome.unused_ignores,
                                    outcome.warnings,
                                )
                            }
                            Err(e) => (
                                report::lint::FileResult {
                                    model,
                                    findings: Vec::new(),
                                    error: Some(e.to_string()),
                                    baselined: 0,
                                },
                                Vec::new(),
                                Vec::new(),
                            ),
                        };
                        done.push((i, entry));
                    }
                    done
                })
            })
            .collect();
        for h in handles {
            for (i, entry) in h.join().expect("lint workers do not panic") {
                slots[i] = Some(entry);
            }
        }
    });
    let mut files = Vec::new();
    let mut warnings = Vec::new();
    let mut unused: Option<std::collections::BTreeSet<String>> = None;
    for (file, ignores, rule_warnings) in slots.into_iter().flatten() {
        warnings.extend(rule_warnings);
        if file.error.is_none() {
            let set: std::collections::BTreeSet<String> = ignores.into_iter().collect();
            unused = Some(match unused {
                None => set,
                Some(u) => u.intersection(&set).cloned().collect(),
            });
        }
        files.push(file);
    }
    for g in unused.unwrap_or_default() {
        warnings.push(format!(
            "{}: ignore-nodes pattern '{g}' matches no finding",
            cfg.path
                .as_ref()
                .map_or("nnlint.toml".into(), |p| p.display().to_string())
        ));
    }
    let run = report::lint::LintRun { files, warnings };
    if let Some(path) = &args.write_baseline {
        let b = Baseline {
            version: 1,
            fingerprints: run
                .files
                .iter()
                .flat_map(|f| f.findings.iter().map(|x| rules::fingerprint(&f.model, x)))
                .collect(),
        };
        let mut text = serde_json::to_string_pretty(&b).expect("baseline serialises");
        text.push('\n');
        write_atomically(path, text.as_bytes())?;
        return Ok((
            format!(
                "wrote {} findings to {}\n",
                b.fingerprints.len(),
                path.display()
            ),
            0,
        ));
    }
    let text = match args.format {
        report::lint::LintFormat::Human => report::lint::human(&run, report::lint::use_colour()),
        report::lint::LintFormat::Json => report::lint::json(&run),
        report::lint::LintFormat::Sarif => report::sarif::render(&run),
        report::lint::LintFormat::Github => report::lint::github(&run),
        report::lint::LintFormat::Markdown => report::lint::markdown(&run),
    };
    let fail_on = args
        .fail_on
        .or(cfg.fail_on)
        .unwrap_or(config::FailOn::Error);
    let code = if run.files.iter().any(|f| f.error.is_some()) {
        2
    } else if run
        .files
        .iter()
        .flat_map(|f| &f.findings)
        .any(|f| fail_on.fails(f.severity))
    {
        1
    } else {
        0
    };
    Ok((text, code))
}

/// Writes a file through a temporary sibling and a rename, so readers never see half a file.
pub fn write_atomically(path: &std::path::Path, data: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let tmp = dir.join(format!(
        ".{}.nnlint-{}.tmp",
        path.file_name()
            .map_or("out".into(), |n| n.to_string_lossy().into_owned()),
        std::process::id()
    ));
    std::fs::write(&tmp, data).map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(path, e)
    })
}

fn rules_list(args: &RulesArgs) -> String {
    let metas = rules::all_meta();
    match args.format {
        RulesFormat::Json => {
            let mut s = serde_json::to_string_pretty(metas).expect("rule metadata serialises");
            s.push('\n');
            s
        }
        RulesFormat::Markdown => rules::catalog(),
        RulesFormat::Table => {
            let mut out = String::new();
            let w = metas.iter().map(|m| m.name.len()).max().unwrap_or(4);
            let c = metas.iter().map(|m| m.category.len()).max().unwrap_or(8);
            for m in metas {
                out.push_str(&format!(
                    "{}  {:<w$}  {:<c$}  {:<7}  {}\n",
                    m.code,
                    m.name,
                    m.category,
                    m.severity.as_str(),
                    m.summary
                ));
            }
            out
        }
    }
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
        Command::Mem(args) => mem(args).map(|t| (t, 0)),
        Command::Fit(args) => fit(args).map(|t| (t, 0)),
        Command::Lint(args) => lint(args),
        Command::Rules(args) => Ok((rules_list(args), 0)),
        Command::Explain { rule } => match rules::find(rule) {
            Some(r) => Ok((rules::explain(r.meta()), 0)),
            None => {
                let names: Vec<&str> = rules::all_meta().iter().map(|m| m.name.as_str()).collect();
                Err(Error::Usage(rules::suggest(
                    &format!("no rule '{rule}'"),
                    rule,
                    &names,
                )))
            }
        },
    };
    match result {
        Ok((text, code)) => match emit(&text) {
            Ok(()) => ExitCode::from(code),
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
