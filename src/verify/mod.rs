//! Stage 6, numeric verification: runs each rewritten subgraph and the original nodes it replaced on
//! the same seeded random input, in f64 with candle ([`exec`]), and, where every op is supported,
//! both whole models on the same inputs. Errors are reported as the largest absolute difference and
//! that difference relative to the largest magnitude of the original's output (a max-norm relative
//! error: `max|a - b| / max|a|`).
//!
//! The rewritten model carries what was replaced by what in its metadata ([`crate::rules::fix::Applied`]),
//! so the check needs nothing but the two files; `nnlint rewrite` runs it on the file it has just
//! written, so what is verified is what is on disk.

pub mod exec;
mod kernels;
pub mod tolerance;

use std::collections::HashMap;
use std::path::Path;

use candle_core::Tensor as CTensor;
use serde::Serialize;

use crate::analysis::memory::static_values;
use crate::analysis::{shape, Bindings};
use crate::error::{Error, Result};
use crate::ir::{DType, Graph, Model, NodeId, ValueId};
use crate::rules::fix::{Applied, RewriteKind, Safety};
use exec::Executor;
pub use tolerance::Tolerance;

/// Seeded standard normal values rounded to f32, so that a runtime computing in f32 sees exactly
/// the input the checker used.
fn random_input(shape: &[usize], seed: u64) -> Result<CTensor, String> {
    let mut data = exec::seeded_normal_values(shape, seed)?;
    data.iter_mut().for_each(|v| *v = *v as f32 as f64);
    CTensor::from_vec(data, shape, &candle_core::Device::Cpu).map_err(|e| e.to_string())
}

/// The values an integer or boolean input is drawn from: indices into every table a `Gather`
/// reads with it, through reshapes and casts (`0..rows` of the smallest: token ids, token types),
/// or `1` for an input that is only a mask or a flag (bools; `Mul`, `Sub`, `Equal`... consumers).
/// `None` when an integer input is used otherwise (a shape, a length, a loop count): random values
/// would not be meaningful.
fn index_range(g: &Graph, facts: &[crate::analysis::fact::Fact], v: ValueId) -> Option<(i64, i64)> {
    if facts[v].dtype == Some(DType::Bool) {
        return Some((1, 2));
    }
    let mut rows: Option<u64> = None;
    let mut stack = vec![(v, 0u32)];
    while let Some((v, depth)) = stack.pop() {
        if depth > 16 {
            return None;
        }
        for (n, slot) in g.consumers(v) {
            let node = &g.nodes[n];
            match (node.op_type.as_str(), slot) {
                ("Gather", 1) => {
                    let data = facts[node.input(0)?].shape.as_deref()?;
                    let axis = match node.attrs.get("axis") {
                        Some(crate::ir::Attr::Int(a)) => *a,
                        _ => 0,
                    };
                    let axis = crate::analysis::ops::axis(axis, data.len()).ok()?;
                    let r = data.get(axis)?.as_u64()?;
                    rows = Some(rows.map_or(r, |m| m.min(r)));
                }
                // only the shape is read
                ("Shape" | "Size", _) => {}
                // the same values, rearranged or retyped
                (
                    "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" | "Identity" | "Transpose"
                    | "Cast" | "Gather" | "Slice" | "Expand" | "Tile",
                    0,
                )
                | ("Concat", _) => stack.extend(node.outputs().values().map(|o| (o, depth + 1))),
                // masks: ones attend everywhere
                (
                    "Mul" | "Equal" | "Not" | "And" | "Or" | "Xor" | "Sub" | "Greater" | "Less"
                    | "Where",
                    _,
                ) => {}
                _ => return None,
            }
        }
    }
    match rows {
        Some(0) => None,
        Some(r) => Some((0, i64::try_from(r).ok()?)),
        None => Some((1, 2)),
    }
}

/// The numeric check of one rewrite.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub rule: String,
    pub kind: RewriteKind,
    pub node: String,
    pub safety: Safety,
    pub rank: Option<u64>,
    /// Shape of the random input.
    pub input_shape: Vec<usize>,
    pub max_abs_error: Option<f64>,
    pub max_rel_error: Option<f64>,
    /// GAP head: the relative error on a spatially constant input, where the rewrite is exact.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constant_input_rel_error: Option<f64>,
    /// Why the check could not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Whether the error is within [`Tolerance::Rewrite`] for the output's dtype.
    #[serde(skip)]
    pub within_tolerance: Option<bool>,
}

/// One model output compared.
#[derive(Clone, Debug, Serialize)]
pub struct OutputCheck {
    pub name: String,
    pub max_abs_error: f64,
    pub max_rel_error: f64,
    /// Whether the difference is within [`Tolerance::Rewrite`] for the output's dtype: what an
    /// exact rewrite must meet.
    #[serde(skip)]
    pub within_tolerance: bool,
}

/// The whole-model comparison.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WholeModel {
    pub checked: bool,
    /// Why it was not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Whether the reason is that the two models' inputs or outputs do not correspond (names,
    /// shapes): then they do not compute the same function, and `verify` fails.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub mismatch: bool,
    pub outputs: Vec<OutputCheck>,
}

crate::named_enum! {
    /// What `verify` concluded.
    pub enum Status {
        /// Every check ran within the rewrites' declared safety.
        Pass = "pass",
        /// An exact rewrite, or the whole model, differs beyond the tolerance, or the models' inputs
        /// and outputs do not correspond.
        Fail = "fail",
        /// Nothing could be compared (the reasons say why).
        Inconclusive = "inconclusive",
        /// The output changed beyond the tolerance, as the approximate or lossy rewrites declared:
        /// the rewritten model is a different function and needs fine-tuning.
        Changed = "changed",
    }
}

/// The verdict of a verification, with the check that decided it.
#[derive(Clone, Debug, Serialize)]
pub struct VerdictLine {
    pub status: Status,
    pub reason: String,
}

/// Everything one verification found.
#[derive(Clone, Debug, Serialize)]
pub struct Verification {
    pub original: String,
    pub rewritten: String,
    pub batch: u64,
    pub seed: u64,
    pub checks: Vec<Check>,
    pub whole_model: WholeModel,
    pub verdict: VerdictLine,
}

/// What to verify.
pub struct Request<'a> {
    pub original: &'a Model,
    pub rewritten: &'a Model,
    pub bindings: Bindings,
    pub seed: u64,
    /// Compare whole-model outputs too.
    pub whole: bool,
    /// Write the whole-model inputs and outputs as .npy files here.
    pub dump: Option<&'a Path>,
    /// Where the checks report progress (one step per rewrite, one for the whole model).
    pub progress: &'a dyn crate::util::progress::Progress,
}

impl Verification {
    /// Whether an exact rewrite is off by more than [`Tolerance::Rewrite`] allows for its output's
    /// dtype (1e-4 of the output's magnitude in f32): what `nnlint verify` fails on.
    pub fn failed(&self) -> bool {
        self.verdict.status == Status::Fail
    }

    /// The verdict: an exact rewrite beyond the tolerance, models whose inputs or outputs do not
    /// correspond, or whole-model outputs beyond it when every declared rewrite is exact (or none
    /// is recorded: two models given as equivalent), fail; whole-model outputs beyond it when some
    /// rewrite is approximate or lossy are a change, as declared; nothing compared is
    /// inconclusive.
    fn decide(checks: &[Check], whole: &WholeModel) -> VerdictLine {
        let line = |status, reason: String| VerdictLine { status, reason };
        if let Some(c) = checks
            .iter()
            .find(|c| c.safety == Safety::Exact && c.within_tolerance == Some(false))
        {
            return line(
                Status::Fail,
                format!(
                    "the exact rewrite of {} ({}) differs by {} relative, beyond the tolerance for its dtype",
                    c.node,
                    c.kind.name(),
                    c.max_rel_error.map_or("?".into(), |e| format!("{e:.1e}"))
                ),
            );
        }
        if whole.mismatch {
            return line(
                Status::Fail,
                format!(
                    "the models do not correspond: {}",
                    whole.reason.as_deref().unwrap_or("?")
                ),
            );
        }
        let all_exact = checks.iter().all(|c| c.safety == Safety::Exact);
        let worst = whole
            .outputs
            .iter()
            .map(|o| o.max_rel_error)
            .fold(0.0f64, f64::max);
        if whole.checked && !all_exact && whole.outputs.iter().any(|o| !o.within_tolerance) {
            let lossy: Vec<&Check> = checks
                .iter()
                .filter(|c| c.safety != Safety::Exact)
                .collect();
            let kinds = |s: Safety| lossy.iter().filter(|c| c.safety == s).count();
            let mut what = Vec::new();
            for s in [Safety::Approximate, Safety::Lossy] {
                match kinds(s) {
                    0 => {}
                    n => what.push(format!("{n} {}", s.name())),
                }
            }
            return line(
                Status::Changed,
                format!(
                    "changed as declared: {} rewrite{} ({}), needs fine-tuning; max relative error {worst:.1e}",
                    lossy.len(),
                    if lossy.len() == 1 { "" } else { "s" },
                    what.join(", ")
                ),
            );
        }
        if whole.checked && all_exact {
            if let Some(o) = whole.outputs.iter().find(|o| !o.within_tolerance) {
                return line(
                    Status::Fail,
                    format!(
                        "output '{}' differs by {:.1e} relative, beyond the tolerance of {}",
                        o.name,
                        o.max_rel_error,
                        if checks.is_empty() {
                            "two models given as equivalent (no rewrite records)"
                        } else {
                            "exact rewrites"
                        }
                    ),
                );
            }
        }
        let ran = checks.iter().filter(|c| c.skipped.is_none()).count();
        if ran == 0 && !whole.checked {
            return line(
                Status::Inconclusive,
                format!(
                    "nothing was compared: {}",
                    whole
                        .reason
                        .as_deref()
                        .unwrap_or("no rewrite could be checked")
                ),
            );
        }
        let mut parts = Vec::new();
        if !checks.is_empty() {
            parts.push(format!(
                "{ran} of {} rewrite{} checked within {} declared safety",
                checks.len(),
                if checks.len() == 1 { "" } else { "s" },
                if checks.len() == 1 { "its" } else { "their" }
            ));
        }
        if whole.checked {
            parts.push(format!(
                "whole model equal within tolerance (max relative error {worst:.1e}{})",
                if all_exact {
                    ""
                } else {
                    ", approximate rewrites"
                }
            ));
        } else if let Some(r) = &whole.reason {
            parts.push(format!("whole model not compared: {r}"));
        }
        line(Status::Pass, parts.join("; "))
    }
}

/// Runs the per-rewrite checks (from the rewritten model's records) and the whole-model comparison.
pub fn verify(req: &Request) -> Result<Verification> {
    let mut records = crate::rules::fix::applied(req.rewritten)
        .map_err(|e| Error::malformed(&req.rewritten.path, e))?
        .unwrap_or_default();
    // a model rewritten twice keeps the first run's records: their new values are already in this
    // original, and there is nothing of them to compare
    let ga = &req.original.graph;
    records.retain(|r| {
        r.replaced.iter().all(|v| ga.value_by_name(v).is_some())
            && !r
                .added
                .iter()
                .any(|v| *v != r.output && ga.value_by_name(v).is_some())
    });
    let mut bindings = req.bindings.clone();
    bindings.batch.get_or_insert(1);
    let inf_a = shape::infer(req.original, &bindings)?;
    let mut exec_a = Executor::new(&req.original.graph, req.original.opset());
    let mut exec_b = Executor::new(&req.rewritten.graph, req.rewritten.opset());
    let mut checks = Vec::new();
    req.progress
        .start("verifying", records.len() as u64 + u64::from(req.whole));
    for (i, r) in records.iter().enumerate() {
        req.progress.message(&r.node);
        let mut check = Check {
            rule: r.rule.clone(),
            kind: r.kind,
            node: r.node.clone(),
            safety: r.safety,
            rank: r.rank,
            input_shape: Vec::new(),
            max_abs_error: None,
            max_rel_error: None,
            constant_input_rel_error: None,
            skipped: None,
            within_tolerance: None,
        };
        let seed = req.seed.wrapping_add(i as u64 + 1);
        match check_one(
            r,
            (req.original, &inf_a.facts, &mut exec_a),
            (req.rewritten, &mut exec_b),
            seed,
            &mut check,
        ) {
            Ok(()) => {}
            Err(why) => check.skipped = Some(why),
        }
        checks.push(check);
        req.progress.advance(1);
    }
    let whole_model = if req.whole {
        req.progress.message("whole model");
        whole(req, &inf_a.facts, &mut exec_a, &mut exec_b)?
    } else {
        WholeModel {
            checked: false,
            reason: Some("not asked for".into()),
            mismatch: false,
            outputs: Vec::new(),
        }
    };
    req.progress.finish();
    let verdict = Verification::decide(&checks, &whole_model);
    Ok(Verification {
        verdict,
        original: req.original.path.display().to_string(),
        rewritten: req.rewritten.path.display().to_string(),
        batch: inf_a.batch.unwrap_or(1),
        seed: req.seed,
        checks,
        whole_model,
    })
}

/// Nodes whose first output is one of `names`, with the nodes computing the stored values they
/// read (the `Identity` twins of deduplicated weights PyTorch exports, weight `Transpose`s...), in
/// topological order.
fn nodes_by_output(g: &Graph, names: &[String], stat: &[bool]) -> Result<Vec<NodeId>, String> {
    let mut out = Vec::new();
    for name in names {
        let v = g
            .value_by_name(name)
            .ok_or_else(|| format!("value '{name}' is not in the model"))?;
        let (n, _) = g.values[v]
            .producer()
            .ok_or_else(|| format!("value '{name}' has no producer"))?;
        out.push(n);
    }
    let mut i = 0;
    while i < out.len() {
        for v in g.nodes[out[i]].inputs().values() {
            if let (true, None, Some((p, _))) = (stat[v], &g.values[v].init, g.values[v].producer())
            {
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
        i += 1;
    }
    out.sort_unstable();
    Ok(out)
}

fn value(g: &Graph, name: &str) -> Result<ValueId, String> {
    g.value_by_name(name)
        .ok_or_else(|| format!("value '{name}' is not in the model"))
}

fn check_one(
    r: &Applied,
    (a, facts_a, exec_a): (&Model, &[crate::analysis::fact::Fact], &mut Executor),
    (b, exec_b): (&Model, &mut Executor),
    seed: u64,
    check: &mut Check,
) -> Result<(), String> {
    let (ga, gb) = (&a.graph, &b.graph);
    let nodes_a = nodes_by_output(ga, &r.replaced, &static_values(ga))?;
    let nodes_b = nodes_by_output(gb, &r.added, &static_values(gb))?;
    for (g, exec, nodes) in [(ga, &*exec_a, &nodes_a), (gb, &*exec_b, &nodes_b)] {
        if let Some((n, why)) = exec.unsupported(nodes).into_iter().next() {
            return Err(format!("{}: {why}", g.label(&g.nodes[n])));
        }
    }
    let (xa, ya) = (value(ga, &r.input)?, value(ga, &r.output)?);
    let (xb, yb) = (value(gb, &r.input)?, value(gb, &r.output)?);
    let shape: Vec<usize> = facts_a[xa]
        .known_shape()
        .ok_or_else(|| format!("the shape of '{}' is not known", r.input))?
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| "the input is too large".to_string()))
        .collect::<Result<_, _>>()?;
    check.input_shape = shape.clone();
    too_large(facts_a, ga, &nodes_a)?;
    let x = random_input(&shape, seed)?;
    let d = run_pair(&x, (exec_a, &nodes_a, xa, ya), (exec_b, &nodes_b, xb, yb))?;
    check.max_abs_error = Some(d.max_abs);
    check.max_rel_error = Some(d.max_rel);
    let dtype = facts_a[ya]
        .dtype
        .filter(|t| t.is_float())
        .unwrap_or(DType::F32);
    check.within_tolerance = Some(Tolerance::Rewrite.allows_max_norm(dtype, d.max_abs, d.scale));
    if r.kind == RewriteKind::GapHead && shape.len() >= 3 {
        // one random value per sample and channel, the same over the map
        let mut per_channel = shape[..2].to_vec();
        per_channel.extend(std::iter::repeat_n(1, shape.len() - 2));
        let x = random_input(&per_channel, seed ^ 0x5eed)?
            .broadcast_as(shape.as_slice())
            .and_then(|t| t.contiguous())
            .map_err(|e| e.to_string())?;
        let d = run_pair(&x, (exec_a, &nodes_a, xa, ya), (exec_b, &nodes_b, xb, yb))?;
        check.constant_input_rel_error = Some(d.max_rel);
    }
    Ok(())
}

/// The most elements one tensor of the check may have.
const MAX_ELEMENTS: u64 = exec::MAX_ELEMENTS as u64;

/// Refuses a check whose tensors would not fit in memory (a huge batch, or a hostile shape).
fn too_large(
    facts: &[crate::analysis::fact::Fact],
    g: &Graph,
    nodes: &[NodeId],
) -> Result<(), String> {
    for &n in nodes {
        for v in g.nodes[n]
            .inputs()
            .iter()
            .chain(g.nodes[n].outputs())
            .flatten()
        {
            // an unknown shape is left to the run (whose allocations are then as large as the
            // model's own); a known one must fit
            let Some(shape) = facts[v].known_shape() else {
                continue;
            };
            if shape.len() > exec::MAX_RANK {
                return Err(format!(
                    "'{}' has {} dimensions: the checker handles at most {}",
                    g.value_name(v),
                    shape.len(),
                    exec::MAX_RANK
                ));
            }
            let size = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
            if size.is_none_or(|s| s > MAX_ELEMENTS) && g.values[v].init.is_none() {
                return Err(format!(
                    "'{}' has {} elements: too large to check in memory (at most {MAX_ELEMENTS}; try a smaller --batch)",
                    g.value_name(v),
                    size.map_or("an unknown number of".into(), |s| s.to_string())
                ));
            }
        }
    }
    Ok(())
}

type Side<'e, 'g, 'n> = (&'e mut Executor<'g>, &'n [NodeId], ValueId, ValueId);

fn run_pair(x: &CTensor, a: Side, b: Side) -> Result<Deviation, String> {
    let ya =
        a.0.eval(a.1, &HashMap::from([(a.2, x.clone())]), &[a.3])
            .map_err(|e| e.to_string())?;
    let yb =
        b.0.eval(b.1, &HashMap::from([(b.2, x.clone())]), &[b.3])
            .map_err(|e| e.to_string())?;
    errors(&ya[0], &yb[0])
}

/// How far one output is from its reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Deviation {
    /// `max|a - b|`.
    pub max_abs: f64,
    /// `max|a - b| / max|a|`, or the absolute error where the reference is all zeros.
    pub max_rel: f64,
    /// `max|a|`.
    pub scale: f64,
}

/// Max absolute difference and max-norm relative error of `b` against the reference `a`.
pub fn errors(a: &CTensor, b: &CTensor) -> Result<Deviation, String> {
    if a.dims() != b.dims() {
        return Err(format!(
            "the outputs have different shapes: {:?} and {:?}",
            a.dims(),
            b.dims()
        ));
    }
    let (scale, abs) = if a.elem_count() == 0 {
        // candle's error for an empty reduction
        let max = |t: &CTensor| -> candle_core::Result<f64> {
            t.abs()?.flatten_all()?.max(0)?.to_scalar::<f64>()
        };
        let scale = max(a).map_err(|e| e.to_string())?;
        let abs = (a - b).and_then(|d| max(&d)).map_err(|e| e.to_string())?;
        (scale, abs)
    } else {
        // one pass, no temporaries; the maximum as candle's reduction takes it (the first value,
        // replaced by any larger one: a leading NaN stays, later ones are passed over)
        fn max_of(mut it: impl Iterator<Item = f64>) -> f64 {
            let first = it.next().unwrap_or(0.0);
            it.fold(first, |m, v| if m < v { v } else { m })
        }
        kernels::with_values(a, |xa| {
            kernels::with_values(b, |xb| {
                let scale = max_of(xa.iter().map(|v| v.abs()));
                let abs = max_of(xa.iter().zip(xb).map(|(p, q)| (p - q).abs()));
                (scale, abs)
            })
        })
        .and_then(|r| r)
        .map_err(|e| e.to_string())?
    };
    let rel = if scale > 0.0 { abs / scale } else { abs };
    Ok(Deviation {
        max_abs: abs,
        max_rel: rel,
        scale,
    })
}

fn whole(
    req: &Request,
    facts_a: &[crate::analysis::fact::Fact],
    exec_a: &mut Executor,
    exec_b: &mut Executor,
) -> Result<WholeModel> {
    let (ga, gb) = (&req.original.graph, &req.rewritten.graph);
    let skip = |reason: String| WholeModel {
        checked: false,
        reason: Some(reason),
        mismatch: false,
        outputs: Vec::new(),
    };
    let mismatch = |reason: String| WholeModel {
        mismatch: true,
        ..skip(reason)
    };
    // the same inputs by name, and no input of the rewritten model left unfed
    for &v in &gb.inputs {
        let name = gb.value_name(v);
        if ga
            .value_by_name(name)
            .is_none_or(|a| !ga.inputs.contains(&a))
        {
            return Ok(mismatch(format!(
                "the rewritten model has an input '{name}' the original does not have"
            )));
        }
    }
    let all_a: Vec<NodeId> = (0..ga.nodes.len()).collect();
    let all_b: Vec<NodeId> = (0..gb.nodes.len()).collect();
    let mut missing: Vec<String> = Vec::new();
    for (g, exec, nodes) in [(ga, &*exec_a, &all_a), (gb, &*exec_b, &all_b)] {
        for (n, why) in exec.unsupported(nodes) {
            let line = format!("{}: {why}", g.label(&g.nodes[n]));
            if !missing.contains(&line) {
                missing.push(line);
            }
        }
    }
    if !missing.is_empty() {
        let more = missing.len().saturating_sub(3);
        missing.truncate(3);
        return Ok(skip(format!(
            "not every op can run in the checker: {}{}",
            missing.join("; "),
            if more > 0 {
                format!(" (and {more} more)")
            } else {
                String::new()
            }
        )));
    }
    let mut feeds_a = HashMap::new();
    let mut feeds_b = HashMap::new();
    let mut dumped_inputs = Vec::new();
    for (i, &v) in ga.inputs.iter().enumerate() {
        let name = ga.value_name(v);
        let f = &facts_a[v];
        // `--value`: the scalar the analysis was given, not a random draw
        if let Some(&val) = req.bindings.values.get(name) {
            let Some(vb) = gb.value_by_name(name) else {
                return Ok(mismatch(format!(
                    "the rewritten model has no input '{name}'"
                )));
            };
            let shape: Vec<usize> = f
                .known_shape()
                .unwrap_or_default()
                .iter()
                .map(|&d| d as usize)
                .collect();
            let x = CTensor::from_vec(
                vec![val as f64],
                shape.as_slice(),
                &candle_core::Device::Cpu,
            )
            .map_err(|e| Error::Usage(e.to_string()))?;
            feeds_a.insert(v, x.clone());
            feeds_b.insert(vb, x.clone());
            dumped_inputs.push((name.to_string(), x));
            continue;
        }
        let is_float = f
            .dtype
            .is_none_or(|d| matches!(d, DType::F32 | DType::F64 | DType::F16 | DType::BF16));
        let ints = if is_float {
            None
        } else {
            match index_range(ga, facts_a, v) {
                Some(r) => Some(r),
                None => {
                    return Ok(skip(format!(
                        "input '{name}' is {} and not an index into a table: random inputs would not be meaningful",
                        f.dtype.map_or("?".into(), |d| d.to_string())
                    )))
                }
            }
        };
        let Some(shape) = f.known_shape() else {
            return Ok(skip(format!(
                "the shape of input '{name}' is not fully known: bind it with --batch or --dim"
            )));
        };
        if let Err(why) = too_large(facts_a, ga, &all_a) {
            return Ok(skip(why));
        }
        // the input itself, which no node may read (too_large looks at the nodes' tensors)
        let numel = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        if numel.is_none_or(|n| n > MAX_ELEMENTS) {
            return Ok(skip(format!(
                "input '{name}' has {} elements: too large to check in memory (at most {MAX_ELEMENTS}; try a smaller --batch)",
                numel.map_or("an unknown number of".into(), |n| n.to_string())
            )));
        }
        let shape: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
        let Some(vb) = gb.value_by_name(name) else {
            return Ok(mismatch(format!(
                "the rewritten model has no input '{name}'"
            )));
        };
        let seed = req.seed.wrapping_add(1000 + i as u64);
        let x = match ints {
            None => random_input(&shape, seed).map_err(Error::Usage)?,
            Some((lo, hi)) => {
                let n = shape.iter().product();
                let v: Vec<f64> = crate::util::rng::integers(seed, n, lo, hi)
                    .into_iter()
                    .map(|x| x as f64)
                    .collect();
                CTensor::from_vec(v, shape.as_slice(), &candle_core::Device::Cpu)
                    .map_err(|e| Error::Usage(e.to_string()))?
            }
        };
        feeds_a.insert(v, x.clone());
        feeds_b.insert(vb, x.clone());
        dumped_inputs.push((name.to_string(), x));
    }
    let outs_a: Vec<ValueId> = ga.outputs.clone();
    let mut outs_b = Vec::new();
    for &v in &outs_a {
        match gb.value_by_name(ga.value_name(v)) {
            Some(w) => outs_b.push(w),
            None => {
                return Ok(mismatch(format!(
                    "the rewritten model has no output '{}'",
                    ga.value_name(v)
                )))
            }
        }
    }
    let ya = match exec_a.eval(&all_a, &feeds_a, &outs_a) {
        Ok(y) => y,
        Err(e) => return Ok(skip(format!("the original could not run: {e}"))),
    };
    let yb = match exec_b.eval(&all_b, &feeds_b, &outs_b) {
        Ok(y) => y,
        // the original ran on these inputs: a rewrite that cannot is no rewrite of it
        Err(e) => {
            return Ok(mismatch(format!(
                "the rewritten model could not run on the original's inputs: {e}"
            )))
        }
    };
    let mut outputs = Vec::new();
    for ((&v, a), b) in outs_a.iter().zip(&ya).zip(&yb) {
        let name = ga.value_name(v);
        let d = match errors(a, b) {
            Ok(d) => d,
            Err(e) => return Ok(mismatch(format!("output '{name}': {e}"))),
        };
        let dtype = facts_a[v].dtype.unwrap_or(DType::F32);
        outputs.push(OutputCheck {
            name: name.to_string(),
            max_abs_error: d.max_abs,
            max_rel_error: d.max_rel,
            within_tolerance: Tolerance::Rewrite.allows_max_norm(dtype, d.max_abs, d.scale),
        });
    }
    if let Some(dir) = req.dump {
        let names: Vec<String> = outs_a
            .iter()
            .map(|&v| ga.value_name(v).to_string())
            .collect();
        dump(dir, &dumped_inputs, &names, &ya, &yb)?;
    }
    Ok(WholeModel {
        checked: true,
        reason: None,
        mismatch: false,
        outputs,
    })
}

/// Writes inputs and both models' outputs as .npy files (float64) with a manifest.json.
fn dump(
    dir: &Path,
    inputs: &[(String, CTensor)],
    outputs: &[String],
    ya: &[CTensor],
    yb: &[CTensor],
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let mut manifest = serde_json::Map::new();
    let mut write_all = |key: &str, items: Vec<(&String, &CTensor)>| -> Result<()> {
        let mut list = Vec::new();
        for (i, (name, t)) in items.into_iter().enumerate() {
            let file = format!("{key}_{i}.npy");
            let path = dir.join(&file);
            let data = npy(t).map_err(|e| Error::Usage(format!("dumping '{name}': {e}")))?;
            crate::util::fs::write_atomically(&path, &data).map_err(|e| Error::io(&path, e))?;
            list.push(serde_json::json!({"name": name, "file": file, "shape": t.dims()}));
        }
        manifest.insert(
            if key == "input" {
                "inputs".into()
            } else {
                key.into()
            },
            serde_json::Value::Array(list),
        );
        Ok(())
    };
    write_all("input", inputs.iter().map(|(n, t)| (n, t)).collect())?;
    write_all("original", outputs.iter().zip(ya).collect())?;
    write_all("rewritten", outputs.iter().zip(yb).collect())?;
    let text = serde_json::to_string_pretty(&manifest).expect("manifest serialises");
    let manifest = dir.join("manifest.json");
    crate::util::fs::write_atomically(&manifest, text.as_bytes())
        .map_err(|e| Error::io(&manifest, e))
}

/// A float64 C-order .npy file (format version 1.0).
fn npy(t: &CTensor) -> candle_core::Result<Vec<u8>> {
    let values = t.flatten_all()?.to_vec1::<f64>()?;
    let shape = match t.dims() {
        [] => "()".to_string(),
        [d] => format!("({d},)"),
        ds => format!(
            "({})",
            ds.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '<f8', 'fortran_order': False, 'shape': {shape}, }}");
    // magic (6) + version (2) + length (2) + header + '\n', a multiple of 64
    let pad = (64 - (10 + header.len() + 1) % 64) % 64;
    header.push_str(&" ".repeat(pad));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + values.len() * 8);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_header_is_aligned() {
        let t = CTensor::new(&[1.0f64, 2.0, 3.0, 4.0], &candle_core::Device::Cpu)
            .unwrap()
            .reshape((2, 2))
            .unwrap();
        let b = npy(&t).unwrap();
        let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0);
        assert!(std::str::from_utf8(&b[10..10 + hlen])
            .unwrap()
            .contains("'shape': (2, 2)"));
        assert_eq!(b.len(), 10 + hlen + 32);
    }

    #[test]
    fn relative_error_is_max_norm() {
        let dev = candle_core::Device::Cpu;
        let a = CTensor::new(&[2.0f64, -4.0], &dev).unwrap();
        let b = CTensor::new(&[2.5f64, -4.0], &dev).unwrap();
        let d = errors(&a, &b).unwrap();
        assert_eq!(d.max_abs, 0.5);
        assert_eq!(d.max_rel, 0.125);
        assert_eq!(d.scale, 4.0);
    }
}
