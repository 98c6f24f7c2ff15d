//! `nnlint rewrite`: applies the fixes the rules' findings carry, writes the new model, and checks
//! it numerically against the original.

use std::path::{Path, PathBuf};

use super::super::cli::RewriteArgs;
use super::super::progress::progress;
use super::super::settings::{Inputs, Settings};
use super::super::terminal;
use super::super::Outcome;
use crate::analysis::Bindings;
use crate::error::{Error, Result};
use crate::report::rewrite::RewriteFormat;
use crate::util::suggest::suggest;
use crate::{analysis, ir, load, report, rewrite, rules, verify};

/// The codes of the rules whose rewrites `--rule` selects, checked: a selector that names no
/// rewrite is an error.
fn rewrite_rules(selectors: &[String]) -> Result<Vec<String>> {
    let with_rewrite: Vec<&rules::RuleMeta> = rules::all_meta()
        .iter()
        .filter(|m| m.rewrite.is_some())
        .collect();
    let picks = |s: &str, m: &rules::RuleMeta| {
        s.eq_ignore_ascii_case(&m.code)
            || s.eq_ignore_ascii_case(&m.name)
            || m.rewrite.is_some_and(|r| s.eq_ignore_ascii_case(r.name()))
    };
    for s in selectors {
        if !with_rewrite.iter().any(|m| picks(s, m)) {
            let mut names: Vec<&str> = Vec::new();
            let mut codes: Vec<&str> = Vec::new();
            for m in &with_rewrite {
                names.extend([m.code.as_str(), m.name.as_str()]);
                names.extend(m.rewrite.map(|r| r.name()));
                codes.push(m.code.as_str());
            }
            return Err(Error::Usage(suggest(
                &format!(
                    "--rule {s}: no rule with a rewrite is called that (rules with a rewrite: {})",
                    codes.join(", ")
                ),
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
fn derived_output(input: &Path) -> PathBuf {
    let stem = input
        .file_stem()
        .map_or("model".into(), |s| s.to_string_lossy().into_owned());
    input.with_file_name(format!("{stem}-rewritten.onnx"))
}

pub fn run(args: &RewriteArgs) -> Result<Outcome> {
    if args.model == Path::new("-") {
        return Err(Error::Usage(
            "rewrite needs a model file (its weights are copied from it), not standard input"
                .into(),
        ));
    }
    let codes = rewrite_rules(&args.rule)?;
    let s = Settings::resolve(Inputs {
        config: Some(&args.config),
        batch: args.dims.batch,
        dims: &args.dims.dims,
        inputs: &args.dims.inputs,
        values: &args.dims.values,
        plan: Some(&args.plan),
        select: &codes,
        ..Inputs::default()
    })?;
    let model = load::load_graph(&args.model, "rewrite")?;
    model.require_weights("rewrite")?;
    let out = args
        .output
        .clone()
        .unwrap_or_else(|| derived_output(&args.model));
    let analysis_settings = rules::Settings {
        bindings: s.bindings.clone(),
        train: s.train,
        budget: None,
    };
    let outcome = rules::lint(&model, &analysis_settings, &s.selection)?;
    // new values keep the model's symbolic dimensions in value_info
    let symbolic = analysis::shape::infer_symbolic(
        &model,
        &Bindings {
            batch: None,
            dims: s.bindings.dims.clone(),
            inputs: s.bindings.inputs.clone(),
            values: s.bindings.values.clone(),
        },
    )?;
    let options = rewrite::Options {
        rank: match (args.rank, args.energy) {
            (Some(r), _) => r,
            (None, Some(e)) => rewrite::RankChoice::Energy(e),
            (None, None) => rewrite::RankChoice::Default,
        },
        seed: args.seed,
        allow: if args.lossy {
            rewrite::Safety::Lossy
        } else if args.energy.is_some() || matches!(args.rank, Some(rewrite::RankChoice::Fixed(_)))
        {
            rewrite::Safety::Approximate
        } else {
            rewrite::Safety::Exact
        },
    };
    let bar = progress();
    let (plans, skipped) = rewrite::plan_all(
        &model,
        &symbolic.facts,
        &symbolic.ops,
        &outcome.findings,
        &args.nodes,
        &options,
        bar.as_ref(),
    );
    let nothing = || {
        let held = skipped.iter().filter(|s| s.safety.is_some()).count();
        format!(
            "nothing to rewrite ({} finding{} with a rewrite{})",
            skipped.len(),
            if skipped.len() == 1 { "" } else { "s" },
            if held == 0 {
                String::new()
            } else {
                format!(
                    "; {held} would change the output and {} not applied without --lossy",
                    if held == 1 { "is" } else { "are" }
                )
            }
        )
    };
    if plans.is_empty() && args.format == RewriteFormat::Json {
        let report = report::rewrite::NothingReport {
            model: args.model.display().to_string(),
            output: None,
            rewrites: Vec::new(),
            notes: vec![nothing()],
            skipped,
        };
        return Ok(Outcome::clean(report::rewrite::json(&report)));
    }
    if plans.is_empty() {
        let mut text = format!("{}: {}\n", args.model.display(), nothing());
        for s in &skipped {
            text.push_str(&format!("skipped {} ({}): {}\n", s.node, s.rule, s.reason));
        }
        return Ok(Outcome::clean(text));
    }
    let mut proto = load::onnx::load_proto(&args.model)?;
    rewrite::apply(&mut proto, &model, &plans)?;
    let external = args.external_data
        || model
            .graph
            .initializers()
            .any(|(_, t)| matches!(&t.data, ir::TensorData::External(e) if *e.path != *model.path));
    let written = rewrite::emit::write(proto, &args.model, &out, external, bar.as_ref())?;
    let rewritten = load::onnx::load(&out)?;
    let verification = if args.no_verify {
        None
    } else {
        Some(verify::verify(&verify::Request {
            original: &model,
            rewritten: &rewritten,
            bindings: s.bindings.clone(),
            seed: args.seed,
            whole: true,
            dump: None,
            progress: bar.as_ref(),
        })?)
    };
    let report = report::rewrite::build(
        &model,
        &rewritten,
        &plans,
        skipped,
        &s.bindings,
        &s.train,
        verification,
        written.data.as_ref().map(|d| d.display().to_string()),
    )?;
    let mut text = match args.format {
        RewriteFormat::Table => report::rewrite::table(&report, terminal::width()),
        RewriteFormat::Json => report::rewrite::json(&report),
    };
    if args.diff {
        text.push_str(&rewrite::text::diff(&model, &rewritten));
    }
    // an exact rewrite off is a failed check (exit 1); a lossy one that changed the output did
    // what was asked for with --lossy or --rank, and the verdict says so
    let failed = report
        .verdict
        .as_ref()
        .is_some_and(|v| v.status == verify::Status::Fail);
    Ok(Outcome::new(
        text,
        if failed {
            super::super::Verdict::CheckFailed
        } else {
            super::super::Verdict::Clean
        },
    ))
}
