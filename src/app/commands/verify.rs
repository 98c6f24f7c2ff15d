//! `nnlint verify`: re-runs the numeric check of a rewritten model against its original.

use super::super::cli::VerifyArgs;
use super::super::progress::progress;
use super::super::settings::{Inputs, Settings};
use super::super::{Outcome, Verdict};
use crate::error::Result;
use crate::report::rewrite::{self, RewriteFormat};
use crate::{load, verify};

pub fn run(args: &VerifyArgs) -> Result<Outcome> {
    let s = Settings::resolve(Inputs {
        batch: args.dims.batch,
        dims: &args.dims.dims,
        inputs: &args.dims.inputs,
        values: &args.dims.values,
        ..Inputs::default()
    })?;
    let original = load::load_graph(&args.original, "verify")?;
    original.require_weights("verify")?;
    let rewritten = load::load_graph(&args.rewritten, "verify")?;
    rewritten.require_weights("verify")?;
    let bar = progress();
    let v = verify::verify(&verify::Request {
        original: &original,
        rewritten: &rewritten,
        bindings: s.bindings,
        seed: args.seed,
        whole: true,
        dump: args.dump.as_deref(),
        progress: bar.as_ref(),
    })?;
    let text = match args.format {
        RewriteFormat::Table => rewrite::verify_table(&v),
        RewriteFormat::Json => rewrite::json(&v),
    };
    let verdict = match v.verdict.status {
        verify::Status::Fail => Verdict::CheckFailed,
        verify::Status::Changed => Verdict::Changed,
        verify::Status::Pass | verify::Status::Inconclusive => Verdict::Clean,
    };
    let mut outcome = Outcome::new(text, verdict);
    // the table ends with the verdict; JSON on standard output gets it on standard error too
    if args.format == RewriteFormat::Json {
        outcome.stderr.push(format!(
            "nnlint verify: {}: {}",
            v.verdict.status.name(),
            v.verdict.reason
        ));
    }
    Ok(outcome)
}
