//! The JSON report: a documented contract (docs/mem.schema.json). Field names and meanings are
//! stable; new fields may be added. Byte and MAC counts are integers when known; when they depend on
//! unbound symbolic dimensions the number is `null` and a `*_expr` field gives the expression.

use std::collections::BTreeMap;

use std::io::Write;

use serde::Serialize;

use super::MemView;
use crate::analysis::{Format, UnknownOp};
use crate::ir::Dim;

/// Version of the JSON layout; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 2;

/// Where a Hub ID's model was read from: the repo, the revision asked for, the commit it names,
/// the cache and the snapshot folder, and for a fetch what it cost.
#[derive(Serialize)]
pub(crate) struct Source<'a> {
    hub_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<&'a str>,
    revision: &'a str,
    commit: &'a str,
    cache_dir: String,
    snapshot: String,
    /// `huggingface-cache`, `nnlint-cache` or `hub`.
    origin: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    endpoint: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    requests: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fetched_bytes: Option<u64>,
}

use crate::load::hub::Origin;

impl<'a> Source<'a> {
    pub(crate) fn of(s: &'a crate::load::hub::Snapshot) -> Self {
        Source {
            hub_id: s.id.repo(),
            file: s.id.file.as_deref(),
            revision: &s.revision,
            commit: &s.commit,
            cache_dir: s.cache.dir.display().to_string(),
            snapshot: s.dir.display().to_string(),
            origin: match s.origin {
                Origin::HfCache => "huggingface-cache",
                Origin::Stored => "nnlint-cache",
                Origin::Fetched { .. } => "hub",
            },
            endpoint: match &s.origin {
                Origin::Fetched { endpoint, .. } => Some(endpoint),
                _ => None,
            },
            requests: match s.origin {
                Origin::Fetched { requests, .. } => Some(requests),
                _ => None,
            },
            fetched_bytes: match s.origin {
                Origin::Fetched { bytes, .. } => Some(bytes),
                _ => None,
            },
        }
    }
}

#[derive(Serialize)]
struct Report<'a> {
    schema_version: u32,
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<Source<'a>>,
    format: Format,
    batch: Option<u64>,
    dims: &'a BTreeMap<String, i64>,
    layers: Layers<'a>,
    totals: TotalsJson,
    peak: Option<PeakJson<'a>>,
    unknown_ops: &'a [UnknownOp],
    unbound_dims: &'a [String],
    unaccounted_layers: &'a [String],
    notes: &'a [String],
    warnings: &'a [String],
    /// Every `If` the totals go through: the branch counted and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    branches: Vec<BranchJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    training: Option<TrainingJson<'a>>,
    /// Language-model checkpoints: `inference.kv_cache_bytes` and the rest of the serving memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    inference: Option<&'a crate::analysis::llm::LlmInference>,
    #[serde(skip_serializing_if = "Option::is_none")]
    llm: Option<&'a crate::analysis::llm::LlmInfo>,
}

/// `"training"`: the contract names the first six fields; the rest explain them.
#[derive(Serialize)]
struct TrainingJson<'a> {
    weights_bytes: u64,
    gradient_bytes: u64,
    optimizer_bytes: u64,
    saved_activation_bytes: u64,
    overhead_bytes: u64,
    total_bytes: u64,
    saved_activation_bytes_full: u64,
    autocast_weight_copy_bytes: u64,
    saved_buffer_bytes: u64,
    parallel_bytes: u64,
    peak: &'a crate::analysis::training::PeakBreakdown,
    micro_batch: Option<u64>,
    effective_batch: Option<u64>,
    recompute_macs: u64,
    recompute_fraction: f64,
    communication_bytes: u64,
    host_bytes: u64,
    config: &'a crate::analysis::training::TrainConfig,
    /// Whether `total_bytes` (and `saved_activation_bytes`) are lower bounds.
    lower_bound: bool,
    /// What could not be counted, when they are.
    unknown: &'a [String],
    notes: &'a [String],
    /// Parameters that train (LoRA / QLoRA: the adapters; otherwise all).
    #[serde(skip_serializing_if = "Option::is_none")]
    trainable_params: Option<u64>,
}

#[derive(Serialize)]
struct LayerJson<'a> {
    name: &'a str,
    op: &'a str,
    output_shapes: Vec<Option<Vec<DimJson>>>,
    params: u64,
    param_bytes: u64,
    buffers: u64,
    buffer_bytes: u64,
    activation_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    activation_bytes_expr: Option<String>,
    macs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    macs_expr: Option<String>,
    share: f64,
    folded: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    saved_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gradient_bytes: Option<u64>,
    depth: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    branch: Option<&'a str>,
}

/// One `If`: the branch the totals count, and why.
#[derive(Serialize)]
struct BranchJson<'a> {
    node: &'a str,
    counted: &'a str,
    decided: bool,
    reason: &'static str,
    inputs: &'a [String],
    why: &'a str,
    costs: Vec<BranchCostJson<'a>>,
}

/// One branch's MACs and activations for one run of its `If`.
#[derive(Serialize)]
struct BranchCostJson<'a> {
    branch: &'a str,
    macs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    macs_expr: Option<String>,
    activation_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    activation_bytes_expr: Option<String>,
}

/// Which totals are lower bounds.
#[derive(Serialize)]
struct LowerBoundJson {
    params: bool,
    activation_bytes: bool,
    inference_peak_bytes: bool,
    macs: bool,
}

/// What the totals leave out.
#[derive(Serialize)]
struct UnaccountedJson {
    layers_without_size: usize,
    layers_without_macs: usize,
    tensors_without_size: usize,
    undecided_branches: usize,
    #[serde(skip_serializing_if = "is_zero")]
    unknown_trip_counts: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

#[derive(Serialize)]
struct TotalsJson {
    params: u64,
    param_bytes: u64,
    buffers: u64,
    buffer_bytes: u64,
    constants: u64,
    constant_bytes: u64,
    activation_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    activation_bytes_expr: Option<String>,
    inference_peak_bytes: Option<u64>,
    macs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    macs_expr: Option<String>,
    flops: Option<u64>,
    lower_bound: LowerBoundJson,
    unaccounted: UnaccountedJson,
}

#[derive(Serialize)]
struct PeakJson<'a> {
    node: Option<&'a str>,
    live: Vec<LiveJson<'a>>,
}

#[derive(Serialize)]
struct LiveJson<'a> {
    name: &'a str,
    bytes: u64,
}

/// A dimension: a number, or a string for a symbolic one.
#[derive(Serialize)]
#[serde(untagged)]
enum DimJson {
    Known(i64),
    Symbolic(String),
}

fn dim_json(d: &Dim) -> DimJson {
    match d.as_i64() {
        Some(v) => DimJson::Known(v),
        None => DimJson::Symbolic(d.to_string()),
    }
}

/// `(number, expression)`: the number when known, the expression when symbolic.
fn quantity(d: Option<&Dim>) -> (Option<u64>, Option<String>) {
    match d {
        None => (None, None),
        Some(d) => match d.as_u64() {
            Some(v) => (Some(v), None),
            None => (None, Some(d.to_string())),
        },
    }
}

/// The layer rows, each made into its JSON object as it is written.
struct Layers<'a>(&'a MemView<'a>);

impl Serialize for Layers<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.0.rows.len()))?;
        for (l, share) in self.0.each() {
            seq.serialize_element(&layer_json(l, share))?;
        }
        seq.end()
    }
}

fn layer_json(l: crate::analysis::LayerRef<'_>, share: f64) -> LayerJson<'_> {
    let (activation_bytes, activation_bytes_expr) = quantity(l.activation_bytes);
    let (macs, macs_expr) = quantity(l.macs);
    LayerJson {
        name: l.name,
        op: l.op,
        output_shapes: l
            .output_shapes
            .iter()
            .map(|s| s.as_ref().map(|s| s.iter().map(dim_json).collect()))
            .collect(),
        params: l.params,
        param_bytes: l.param_bytes,
        buffers: l.buffers,
        buffer_bytes: l.buffer_bytes,
        activation_bytes,
        activation_bytes_expr,
        macs,
        macs_expr,
        share: (share * 1e6).round() / 1e6,
        folded: l.folded,
        saved_bytes: l.saved_bytes,
        gradient_bytes: l.gradient_bytes,
        depth: l.depth,
        branch: l.branch,
    }
}

pub fn render(view: &MemView) -> String {
    crate::util::written(|out| write(view, out))
}

/// [`render`], written to `out` as it is serialised (the layers one by one).
pub fn write(view: &MemView, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let r = view.report;
    let layers = Layers(view);
    let t = &r.totals;
    let (activation_bytes, activation_bytes_expr) = quantity(t.activation_bytes.as_ref());
    let (macs, macs_expr) = quantity(t.macs.as_ref());
    let report = Report {
        schema_version: SCHEMA_VERSION,
        model: &r.model,
        source: view.source.map(Source::of),
        format: r.format,
        batch: r.batch,
        dims: &r.dims,
        layers,
        totals: TotalsJson {
            params: t.params,
            param_bytes: t.param_bytes,
            buffers: t.buffers,
            buffer_bytes: t.buffer_bytes,
            constants: t.constants,
            constant_bytes: t.constant_bytes,
            activation_bytes,
            activation_bytes_expr,
            inference_peak_bytes: t.inference_peak_bytes,
            macs,
            macs_expr,
            flops: macs.and_then(|m| m.checked_mul(2)),
            lower_bound: LowerBoundJson {
                params: t.lower.params(),
                activation_bytes: t.lower.activations(),
                inference_peak_bytes: t.lower.activations(),
                macs: t.lower.macs(),
            },
            unaccounted: UnaccountedJson {
                layers_without_size: t.lower.layers_without_size,
                layers_without_macs: t.lower.layers_without_macs,
                tensors_without_size: t.lower.tensors_without_size,
                undecided_branches: t.lower.undecided_branches,
                unknown_trip_counts: t.lower.unknown_trip_counts,
            },
        },
        peak: r.peak.as_ref().map(|p| PeakJson {
            node: p.node.as_deref(),
            live: p
                .live
                .iter()
                .map(|(name, bytes)| LiveJson {
                    name,
                    bytes: *bytes,
                })
                .collect(),
        }),
        unknown_ops: &r.unknown_ops,
        unbound_dims: &r.unbound,
        unaccounted_layers: &r.unaccounted,
        notes: &r.notes,
        warnings: &r.warnings,
        branches: r
            .branches
            .iter()
            .map(|b| BranchJson {
                node: &b.node,
                counted: &b.counted,
                decided: b.decided,
                reason: b.reason.name(),
                inputs: &b.inputs,
                why: &b.why,
                costs: b
                    .costs
                    .iter()
                    .map(|(branch, m, a)| {
                        let (macs, macs_expr) = quantity(m.as_ref());
                        let (activation_bytes, activation_bytes_expr) = quantity(a.as_ref());
                        BranchCostJson {
                            branch,
                            macs,
                            macs_expr,
                            activation_bytes,
                            activation_bytes_expr,
                        }
                    })
                    .collect(),
            })
            .collect(),
        training: r.training.as_ref().map(|t| TrainingJson {
            weights_bytes: t.weights_bytes,
            gradient_bytes: t.gradient_bytes,
            optimizer_bytes: t.optimizer_bytes,
            saved_activation_bytes: t.saved_activation_bytes,
            overhead_bytes: t.overhead_bytes,
            total_bytes: t.total_bytes,
            saved_activation_bytes_full: t.saved_activation_bytes_full,
            autocast_weight_copy_bytes: t.autocast_weight_copy_bytes,
            saved_buffer_bytes: t.saved_buffer_bytes,
            parallel_bytes: t.parallel_bytes,
            peak: &t.peak,
            micro_batch: t.micro_batch,
            effective_batch: t.effective_batch,
            recompute_macs: t.recompute_macs,
            recompute_fraction: (t.recompute_fraction * 1e6).round() / 1e6,
            communication_bytes: t.communication_bytes,
            host_bytes: t.host_bytes,
            config: &t.config,
            lower_bound: t.lower_bound,
            unknown: &t.unknown,
            notes: &t.notes,
            trainable_params: r.llm.as_ref().and_then(|l| l.trainable_params),
        }),
        inference: r.llm.as_ref().and_then(|l| l.inference.as_ref()),
        llm: r.llm.as_ref(),
    };
    let mut out = std::io::BufWriter::with_capacity(1 << 16, out);
    serde_json::to_writer_pretty(&mut out, &report)?;
    out.write_all(b"\n")?;
    out.flush()
}
