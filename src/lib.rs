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
pub mod rewrite;
pub mod rules;
pub mod verify;

use std::io::Write;
use std::process::ExitCode;

use analysis::{Bindings, MemReport};
use cli::{
    Cli, Command, DimArgs, FitArgs, LintArgs, MemArgs, RewriteArgs, RulesArgs, RulesFormat,
    VerifyArgs,
};
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
    find_config(args.config.as_deref(), args.no_config)
}

fn find_config(explicit: Option<&std::path::Path>, none: bool) -> Result<config::Config> {
    if none {
        return Ok(config::Config::default());
    }
    let path = match explicit {
        Some(p) => Some(p.to_path_buf()),
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

/// The rules whose rewrites `--rule` selects (codes), checked: a selector that names no rewrite is
/// an error.
fn rewrite_rules(selectors: &[String]) -> Result<Vec<String>> {
    let with_rewrite: Vec<&rules::RuleMeta> = rules::all_meta()
        .iter()
        .filter(|m| m.rewrite.is_some())
        .collect();
    let picks = |s: &str, m: &rules::RuleMeta| {
        s.eq_ignore_ascii_case(&m.code)
            || s.eq_ignore_ascii_case(&m.name)
            || m.rewrite
                .as_deref()
                .is_some_and(|r| s.eq_ignore_ascii_case(r))
    };
    for s in selectors {
        if !with_rewrite.iter().any(|m| picks(s, m)) {
            let mut names: Vec<&str> = Vec::new();
            for m in &with_rewrite {
                names.extend([m.code.as_str(), m.name.as_str()]);
                names.extend(m.rewrite.as_deref());
            }
            return Err(Error::Usage(rules::suggest(
                &format!("--rule {s}: no rule with a rewrite is called that (rules with a rewrite: NL101, NL102, NL103)"),
                s,
                &names,
            )));
        }
    }
    Ok(with_rewrite
        .iter()
        .filter(|m| selectors.is_empty() || selectors.iter().any(|s| picks(s, m)))
        .map(|m| m.code.clone())
        .collect())
}

/// `MODEL-rewritten.onnx` beside the input.
fn derived_output(input: &std::path::Path) -> std::path::PathBuf {
    let stem = input
        .file_stem()
        .map_or("model".into(), |s| s.to_string_lossy().into_owned());
    input.with_file_name(format!("{stem}-rewritten.onnx"))
}

/// A progress bar on standard error when it is a terminal, hidden otherwise.
fn progress(what: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {wide_msg}")
            .expect("the template is valid")
            .progress_chars("=> "),
    );
    bar.set_prefix(what.to_string());
    bar
}

fn rewrite(args: &RewriteArgs) -> Result<String> {
    if args.model == std::path::Path::new("-") {
        return Err(Error::Usage(
            "rewrite needs a model file (its weights are copied from it), not standard input"
                .into(),
        ));
    }
    let cfg = find_config(args.config.as_deref(), args.no_config)?;
    let model = load::onnx::load(&args.model)?;
    let out = args
        .output
        .clone()
        .unwrap_or_else(|| derived_output(&args.model));
    let mut dims = cfg.dims.clone();
    dims.extend(args.dims.dims.iter().cloned());
    let bindings = Bindings {
        batch: args.dims.batch.or(cfg.batch),
        dims: dims.clone(),
    };
    let train = args.plan.config().map_err(Error::Usage)?;
    let settings = rules::Settings {
        bindings: bindings.clone(),
        train,
        budget: None,
    };
    let codes = rewrite_rules(&args.rule)?;
    let outcome = rules::lint(&model, &settings, &cfg, &codes, &[])?;
    // new values keep the model's symbolic dimensions in value_info
    let symbolic = analysis::shape::infer_symbolic(
        &model,
        &Bindings {
            batch: None,
            dims: dims.clone(),
        },
    )?;
    let options = rewrite::Options {
        rank: match (args.rank, args.energy) {
            (Some(r), _) => r,
            (None, Some(e)) => rewrite::RankChoice::Energy(e),
            (None, None) => rewrite::RankChoice::Default,
        },
        seed: args.seed,
    };
    let (plans, skipped) = rewrite::plan_all(
        &model,
        &symbolic.facts,
        &outcome.findings,
        &args.nodes,
        &options,
        &progress("planning"),
    );
    if plans.is_empty() {
        let mut text = format!(
            "{}: nothing to rewrite ({} finding{} with a rewrite)\n",
            args.model.display(),
            skipped.len(),
            if skipped.len() == 1 { "" } else { "s" }
        );
        for s in &skipped {
            text.push_str(&format!("skipped {} ({}): {}\n", s.node, s.rule, s.reason));
        }
        return Ok(text);
    }
    let mut proto = load::onnx::load_proto(&args.model)?;
    rewrite::apply(&mut proto, &model, &plans)?;
    let external = args.external_data
        || model
            .graph
            .initializers()
            .any(|(_, t)| matches!(&t.data, ir::TensorData::External(e) if e.path != model.path));
    let written = rewrite::emit::write(proto, &args.model, &out, external)?;
    let rewritten = load::onnx::load(&out)?;
    let verification = if args.no_verify {
        None
    } else {
        Some(verify::verify(&verify::Request {
            original: &model,
            rewritten: &rewritten,
            bindings: bindings.clone(),
            seed: args.seed,
            whole: true,
            dump: None,
        })?)
    };
    let report = report::rewrite::build(
        &model,
        &rewritten,
        &plans,
        skipped,
        &bindings,
        &train,
        verification,
        written.data.as_ref().map(|d| d.display().to_string()),
    )?;
    let mut text = match args.format {
        report::rewrite::RewriteFormat::Table => report::rewrite::table(&report),
        report::rewrite::RewriteFormat::Json => report::rewrite::json(&report),
    };
    if args.diff {
        text.push_str(&rewrite::text::diff(&model, &rewritten));
    }
    Ok(text)
}

/// `nnlint verify`: exit code 1 when an exact rewrite is off by more than f32 round-off.
fn verify_models(args: &VerifyArgs) -> Result<(String, u8)> {
    let original = load::onnx::load(&args.original)?;
    let rewritten = load::onnx::load(&args.rewritten)?;
    let v = verify::verify(&verify::Request {
        original: &original,
        rewritten: &rewritten,
        bindings: Bindings::from(&args.dims),
        seed: args.seed,
        whole: true,
        dump: args.dump.as_deref(),
    })?;
    let failed = v.checks.iter().any(|c| {
        c.safety == rewrite::Safety::Exact
            && c.max_rel_error
                .is_some_and(|e| e >= verify::EXACT_TOLERANCE)
    });
    let text = match args.format {
        report::rewrite::RewriteFormat::Table => report::rewrite::verify_table(&v),
        report::rewrite::RewriteFormat::Json => report::rewrite::json(&v),
    };
    Ok((text, u8::from(failed)))
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
        Command::Rewrite(args) => rewrite(args).map(|t| (t, 0)),
        Command::Verify(args) => verify_models(args),
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
