//! Which training (or serving) plans make a model fit a GPU, and at what batch size.
//!
//! For each plan (precision, checkpointing, sharding), the largest micro-batch whose estimated peak
//! fits the card is found by binary search (memory grows with the batch); accumulation then keeps
//! the effective batch the user asked for. Plans are ranked by what they cost: recomputation first,
//! then communication, then the number of accumulation steps.

use super::plan::{self, largest_batch_within};
use super::saved::Precision;
use super::shape::{self, Bindings};
use super::training::{self, Checkpoint, Optimizer, Shard, TrainConfig};
use crate::error::{Error, Result};
use crate::ir::Model;

/// A GPU model and its memory as `nvidia-smi` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Gpu {
    pub name: &'static str,
    pub bytes: u64,
    /// Whether it computes in bfloat16 (Ampere and later).
    pub bf16: bool,
}

impl Gpu {
    /// `RTX-4090 (24 GiB)`, or for a size given on the command line the exact bytes beside the
    /// binary units (`--gpu 24GB` is 24,000,000,000 B, 22.4 GiB).
    pub fn describe(&self) -> String {
        use crate::util::units::bytes;
        if self.name == "custom" {
            let digits = self.bytes.to_string();
            let mut grouped = String::new();
            for (i, c) in digits.chars().enumerate() {
                if i > 0 && (digits.len() - i).is_multiple_of(3) {
                    grouped.push(',');
                }
                grouped.push(c);
            }
            format!("a {} card ({grouped} B)", bytes(self.bytes))
        } else {
            format!("{} ({})", self.name, bytes(self.bytes))
        }
    }
}

const MIB: u64 = 1 << 20;

/// Known cards: memory is `nvidia-smi --query-gpu=memory.total`, in MiB.
pub const GPUS: &[Gpu] = &[
    Gpu {
        name: "T4",
        bytes: 15_360 * MIB,
        bf16: false,
    },
    Gpu {
        name: "V100-16GB",
        bytes: 16_160 * MIB,
        bf16: false,
    },
    Gpu {
        name: "V100-32GB",
        bytes: 32_510 * MIB,
        bf16: false,
    },
    Gpu {
        name: "A10",
        bytes: 23_028 * MIB,
        bf16: true,
    },
    Gpu {
        name: "L4",
        bytes: 23_034 * MIB,
        bf16: true,
    },
    Gpu {
        name: "RTX-3090",
        bytes: 24_268 * MIB,
        bf16: true,
    },
    Gpu {
        name: "RTX-4090",
        bytes: 24_564 * MIB,
        bf16: true,
    },
    Gpu {
        name: "A100-40GB",
        bytes: 40_536 * MIB,
        bf16: true,
    },
    Gpu {
        name: "L40S",
        bytes: 46_068 * MIB,
        bf16: true,
    },
    Gpu {
        name: "A100-80GB",
        bytes: 81_920 * MIB,
        bf16: true,
    },
    Gpu {
        name: "H100-80GB",
        bytes: 81_559 * MIB,
        bf16: true,
    },
    Gpu {
        name: "H200",
        bytes: 143_771 * MIB,
        bf16: true,
    },
];

/// Resolves `--gpu`: a card name (case and punctuation ignored) or a size such as `16GiB`.
pub fn parse_gpu(s: &str) -> std::result::Result<Gpu, String> {
    let key = |x: &str| x.to_ascii_lowercase().replace(['-', '_', ' '], "");
    let k = key(s);
    if let Some(g) = GPUS
        .iter()
        .find(|g| key(g.name) == k || key(g.name).replace("gb", "") == k)
    {
        return Ok(*g);
    }
    let names: Vec<&str> = GPUS.iter().map(|g| g.name).collect();
    // a card named without its memory size: the one variant there is (`H100`), else say which
    // ones there are (`A100`)
    let variants: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !k.is_empty() && key(n).starts_with(&k))
        .collect();
    if let [one] = variants.as_slice() {
        if let Some(g) = GPUS.iter().find(|g| g.name == *one) {
            return Ok(*g);
        }
    }
    if !variants.is_empty() {
        return Err(format!(
            "'{s}' names no single GPU: did you mean {}?",
            variants
                .iter()
                .map(|v| format!("'{v}'"))
                .collect::<Vec<_>>()
                .join(" or ")
        ));
    }
    let looks_like_size = s
        .trim()
        .starts_with(|c: char| c.is_ascii_digit() || c == '.');
    if looks_like_size {
        return match crate::util::units::parse_size(s) {
            Ok(0) => Err(format!("'{s}': a GPU needs more than 0 bytes of memory")),
            Ok(bytes) => Ok(Gpu {
                name: "custom",
                bytes,
                bf16: true,
            }),
            Err(e) => Err(e),
        };
    }
    Err(crate::util::suggest::suggest(
        &format!(
            "'{s}' is neither a size (16GiB) nor a known GPU ({})",
            names.join(", ")
        ),
        s,
        &names,
    ))
}

/// One plan and what it achieves: the same fields for every front end (docs/fit.schema.json).
#[derive(Clone, Debug, serde::Serialize)]
pub struct PlanResult {
    pub name: String,
    /// What the plan trades for its memory.
    pub cost: String,
    pub precision: Precision,
    pub optimizer: Optimizer,
    pub checkpoint: String,
    pub shard: Shard,
    pub gpus: u32,
    /// Largest micro-batch that fits (0: not even one sample).
    pub max_micro_batch: u64,
    /// Whether it fits, as far as the estimate counts: with `lower_bound`, what it could not count
    /// may not fit.
    pub fits: bool,
    /// Estimated peak per GPU at the chosen micro-batch (or at batch 1 when nothing fits);
    /// `None` when it cannot be formed.
    pub peak_bytes: Option<u64>,
    /// Whether `peak_bytes` is a lower bound (ops or sizes nnlint could not account for).
    pub lower_bound: bool,
    /// Micro-batch, accumulation steps and effective batch reaching the requested effective batch.
    pub micro_batch: u64,
    pub accumulate: u64,
    pub effective_batch: u64,
    /// Extra compute of recomputation, as a share of a step.
    pub recompute_fraction: f64,
    pub communication_bytes: u64,
    /// Parameters the plan trains (`None` for serving).
    pub trainable_params: Option<u64>,
    /// The longest sequence that fits at batch 1, for models with a sequence length (`None`
    /// for a graph, whose sequence is bound with `--dim`).
    pub max_seq_at_batch_1: Option<u64>,
    pub rank: usize,
}

/// What `nnlint fit` found, for either kind of model.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FitReport {
    pub model: String,
    pub gpu: Gpu,
    pub gpus: u32,
    pub mode: &'static str,
    pub effective_batch: u64,
    /// Tokens per sequence the batches are for (language models).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// The model's parameters (language models).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub params: Option<u64>,
    pub plans: Vec<PlanResult>,
    pub suggestions: Vec<String>,
    pub notes: Vec<String>,
}

/// The fit request.
#[derive(Clone, Debug)]
pub struct FitRequest {
    pub gpu: Gpu,
    pub gpus: u32,
    pub effective_batch: u64,
    pub base: TrainConfig,
    /// `--optimizer`, when given: every plan uses it.
    pub optimizer: Option<Optimizer>,
    pub dims: std::collections::BTreeMap<String, i64>,
    /// `--input` shapes; their first axis is the batch being searched.
    pub inputs: std::collections::BTreeMap<String, Vec<u64>>,
    pub inference: bool,
}

impl FitRequest {
    /// The bindings at a micro-batch: `--input` shapes get it on their first axis.
    fn at(&self, batch: u64) -> Bindings {
        Bindings {
            batch: Some(batch),
            dims: self.dims.clone(),
            inputs: self
                .inputs
                .iter()
                .map(|(k, v)| {
                    let mut v = v.clone();
                    if let Some(first) = v.first_mut() {
                        *first = batch;
                    }
                    (k.clone(), v)
                })
                .collect(),
            values: std::collections::BTreeMap::new(),
        }
    }
}

/// Estimated peak per GPU of a plan at a micro-batch.
fn train_peak(
    model: &Model,
    prepared: &shape::Prepared,
    req: &FitRequest,
    cfg: &TrainConfig,
    batch: u64,
) -> Result<u64> {
    let b = req.at(batch);
    let inf = shape::infer_prepared(model, &b, prepared)?;
    // a batch whose sizes leave 64-bit arithmetic fits no GPU
    if !inf.overflow.is_empty() {
        return Ok(u64::MAX);
    }
    Ok(training::checked_estimate(&model.graph, &inf, cfg).map_or(u64::MAX, |t| t.total_bytes))
}

fn serve_peak(
    model: &Model,
    prepared: &shape::Prepared,
    req: &FitRequest,
    half: bool,
    batch: u64,
) -> Result<u64> {
    let b = req.at(batch);
    let inf = shape::infer_prepared(model, &b, prepared)?;
    let r = super::checked_report(model, &inf, None)?;
    serving_bytes(&r.totals, &req.base.overhead, half).ok_or_else(|| {
        Error::Usage(format!(
            "{}: the inference peak needs every dimension bound ({}): pass --dim NAME=V",
            model.path.display(),
            r.unbound.join(", ")
        ))
    })
}

/// Whether the serving estimate at a batch leaves something out.
fn serve_lower_bound(
    model: &Model,
    prepared: &shape::Prepared,
    req: &FitRequest,
    batch: u64,
) -> Result<bool> {
    let inf = shape::infer_prepared(model, &req.at(batch), prepared)?;
    let r = super::checked_report(model, &inf, None)?;
    Ok(r.totals.lower.activations() || r.totals.lower.params())
}

/// Memory to serve a model: its stored tensors and inference peak (halved with half-precision
/// weights), plus the overhead. `None` when the peak is unknown.
pub fn serving_bytes(t: &super::Totals, overhead: &training::Overhead, half: bool) -> Option<u64> {
    let weights = t
        .param_bytes
        .checked_add(t.buffer_bytes)?
        .checked_add(t.constant_bytes)?;
    let acts = t.inference_peak_bytes?;
    let allocated = if half {
        (weights / 2).checked_add(acts / 2)?
    } else {
        weights.checked_add(acts)?
    };
    allocated.checked_add(overhead.bytes(allocated))
}

/// The largest micro-batch whose training peak under `cfg` fits in `budget` bytes (0: none).
pub fn max_train_batch(
    model: &Model,
    req: &FitRequest,
    cfg: &TrainConfig,
    budget: u64,
) -> Result<u64> {
    let prepared = shape::Prepared::new(model);
    largest_batch_within(
        |b| train_peak(model, &prepared, req, cfg, b).map(Some),
        budget,
    )
}

/// The largest batch whose serving peak fits in `budget` bytes (0: none).
pub fn max_serve_batch(model: &Model, req: &FitRequest, budget: u64) -> Result<u64> {
    let prepared = shape::Prepared::new(model);
    largest_batch_within(
        |b| serve_peak(model, &prepared, req, false, b).map(Some),
        budget,
    )
}

/// A graph as the planner's front end: the step is [`training::estimate`] on a shape inference
/// at the micro-batch.
struct GraphFront<'a> {
    model: &'a Model,
    prepared: &'a shape::Prepared,
    req: &'a FitRequest,
}

impl plan::Front for GraphFront<'_> {
    fn step(
        &self,
        _c: &plan::Candidate,
        cfg: &TrainConfig,
        batch: u64,
    ) -> Option<training::Training> {
        let inf = shape::infer_prepared(self.model, &self.req.at(batch), self.prepared).ok()?;
        // a batch whose sizes leave 64-bit arithmetic fits no GPU
        if !inf.overflow.is_empty() {
            return None;
        }
        training::checked_estimate(&self.model.graph, &inf, cfg).ok()
    }
}

/// Finds, for every plan, the largest batch that fits the GPU.
pub fn fit(model: &Model, req: &FitRequest) -> Result<FitReport> {
    let probe = req.at(1);
    let prepared = &shape::Prepared::new(model);
    let at_one = shape::infer_prepared(model, &probe, prepared)?;
    at_one.require_bound(model, "fit")?;
    // settings that overflow at batch 1 overflow everywhere: say so rather than "nothing fits"
    super::checked_report(model, &at_one, None)?;
    training::check_range(&model.graph, &at_one, &req.base)
        .map_err(|m| crate::Error::graph(&model.path, m))?;
    let mut notes = Vec::new();
    let mut results = Vec::new();
    // what the estimates could not count (their `unknown`), once each
    let mut unknown: Vec<String> = Vec::new();
    if req.inference {
        for (name, half) in [("serve fp32", false), ("serve fp16/bf16 weights", true)] {
            let max = largest_batch_within(
                |b| serve_peak(model, prepared, req, half, b).map(Some),
                req.gpu.bytes,
            )?;
            let at = max.max(1).min(req.effective_batch.max(1));
            let peak = serve_peak(model, prepared, req, half, at)?;
            let lower = serve_lower_bound(model, prepared, req, at)?;
            results.push(PlanResult {
                name: name.into(),
                cost: "inference only".into(),
                precision: if half {
                    Precision::Bf16
                } else {
                    Precision::Fp32
                },
                optimizer: req.base.optimizer,
                checkpoint: "none".into(),
                shard: Shard::None,
                gpus: 1,
                max_micro_batch: max,
                fits: max >= 1,
                peak_bytes: Some(peak),
                lower_bound: lower,
                micro_batch: at,
                accumulate: 1,
                effective_batch: at,
                recompute_fraction: 0.0,
                communication_bytes: 0,
                trainable_params: None,
                max_seq_at_batch_1: None,
                rank: 0,
            });
        }
        plan::rank(&mut results);
    } else {
        let cands = plan::candidates(&plan::Catalogue {
            gpu: req.gpu,
            gpus: req.gpus,
            base: req.base,
            optimizer: req.optimizer,
            lora_rank: None,
            checkpoint: Checkpoint::Sqrt,
        });
        let planned = plan::plan(
            &GraphFront {
                model,
                prepared,
                req,
            },
            cands,
            req.gpu.bytes,
            req.effective_batch,
        );
        results = planned.plans;
        unknown = planned.unknown;
        if planned.uneven {
            notes.push(format!(
                "the effective batch {} is not a multiple of {} GPUs: the multi-GPU plans step with {} samples",
                req.effective_batch,
                req.gpus,
                req.effective_batch.div_ceil(u64::from(req.gpus.max(1))) * u64::from(req.gpus.max(1))
            ));
        }
        notes.push("checkpointing is √n segments of the graph's layers (a checkpoint folder checkpoints every block, as Hugging Face does); LoRA plans need a checkpoint folder, whose linear layers have names".into());
    }
    let suggestions = if results.iter().any(|r| r.fits) {
        Vec::new()
    } else {
        suggest(model, prepared, req)?
    };
    if results.iter().any(|r| r.lower_bound) {
        notes.push(if unknown.is_empty() {
            "the peaks are lower bounds and the batches upper bounds (nnlint could not account for some layers: see `nnlint mem`): a plan that fits here may not".to_string()
        } else {
            format!(
                "the peaks are lower bounds and the batches upper bounds: a plan that fits here may not. Not counted: {}",
                unknown.join("; ")
            )
        });
    }
    if !req.gpu.bf16 && !req.inference {
        notes.push(format!(
            "{} has no bfloat16: AMP plans use float16 with a gradient scaler, and the pure-bf16 plans are left out",
            req.gpu.name
        ));
    }
    Ok(FitReport {
        model: model.path.display().to_string(),
        gpu: req.gpu,
        gpus: req.gpus.max(1),
        mode: if req.inference {
            "inference"
        } else {
            "training"
        },
        effective_batch: req.effective_batch,
        seq: None,
        params: None,
        plans: results,
        suggestions,
        notes,
    })
}

/// When nothing fits: a bigger card, more GPUs, or the layers to make lighter.
fn suggest(model: &Model, prepared: &shape::Prepared, req: &FitRequest) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let amp_ckpt = TrainConfig {
        precision: Precision::AmpBf16,
        checkpoint: Checkpoint::Sqrt,
        gpus: 1,
        shard: Shard::None,
        accumulate: 1,
        ..req.base
    };
    let need = if req.inference {
        serve_peak(model, prepared, req, true, 1)?
    } else {
        train_peak(model, prepared, req, &amp_ckpt, 1)?
    };
    match GPUS
        .iter()
        .filter(|g| g.bytes >= need)
        .min_by_key(|g| g.bytes)
    {
        Some(g) => {
            // the batch it fits there, as `fit --gpu` on that card finds it
            let batch = if req.inference {
                largest_batch_within(
                    |b| serve_peak(model, prepared, req, true, b).map(Some),
                    g.bytes,
                )?
            } else {
                largest_batch_within(
                    |b| train_peak(model, prepared, req, &amp_ckpt, b).map(Some),
                    g.bytes,
                )?
            };
            out.push(format!(
                "a bigger card: {} ({}) fits a batch of {} with {}",
                g.name,
                crate::util::units::bytes(g.bytes),
                crate::util::units::count(batch),
                if req.inference {
                    "half-precision weights"
                } else {
                    "AMP and checkpointing"
                }
            ))
        }
        None => out.push(format!(
            "no single card listed holds batch 1 ({} needed)",
            crate::util::units::bytes(need)
        )),
    }
    if !req.inference {
        for n in [2u32, 4, 8, 16, 32, 64] {
            let cfg = TrainConfig {
                gpus: n,
                shard: Shard::Fsdp,
                ..amp_ckpt
            };
            if train_peak(model, prepared, req, &cfg, 1)? <= req.gpu.bytes {
                out.push(format!(
                    "more GPUs: FSDP with AMP and checkpointing over {n} x {} fits batch 1",
                    if req.gpu.name == "custom" {
                        format!("{} cards", crate::util::units::bytes(req.gpu.bytes))
                    } else {
                        req.gpu.name.to_string()
                    }
                ));
                break;
            }
        }
    }
    let b = req.at(1);
    let r = super::analyze(model, &b, None)?;
    let mut layers: Vec<usize> = (0..r.layers.len()).collect();
    layers.sort_by_key(|&i| std::cmp::Reverse(r.layers.get(i).params));
    for l in layers
        .iter()
        .map(|&i| r.layers.get(i))
        .take(2)
        .filter(|l| r.totals.params > 0 && l.params * 10 >= r.totals.params)
    {
        out.push(format!(
            "a lighter layer: {} ({}) holds {:.0}% of the parameters (see `nnlint lint`)",
            l.name,
            l.op,
            100.0 * l.params as f64 / r.totals.params as f64
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_names_and_sizes() {
        assert_eq!(parse_gpu("T4").unwrap().name, "T4");
        assert_eq!(parse_gpu("a100-80gb").unwrap().name, "A100-80GB");
        assert_eq!(parse_gpu("rtx4090").unwrap().name, "RTX-4090");
        assert_eq!(parse_gpu("16GiB").unwrap().bytes, 16 << 30);
        assert!(parse_gpu("B9000").is_err());
        // one variant: that card (the output names it with its memory)
        assert_eq!(parse_gpu("H100").unwrap().name, "H100-80GB");
        assert_eq!(parse_gpu("v100-32").unwrap().name, "V100-32GB");
        let e = parse_gpu("a100").unwrap_err();
        assert!(e.contains("'A100-40GB' or 'A100-80GB'"), "{e}");
        let e = parse_gpu("RTX4900").unwrap_err();
        assert!(e.contains("did you mean 'RTX-4090'"), "{e}");
        let e = parse_gpu("0GiB").unwrap_err();
        assert!(e.contains("more than 0 bytes"), "{e}");
        let e = parse_gpu("16").unwrap_err();
        assert!(e.contains("no unit") && e.contains("16GiB"), "{e}");
    }
}
