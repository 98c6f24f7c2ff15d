//! Which training (or serving) plans make a model fit a GPU, and at what batch size.
//!
//! For each plan (precision, checkpointing, sharding), the largest micro-batch whose estimated peak
//! fits the card is found by binary search (memory grows with the batch); accumulation then keeps
//! the effective batch the user asked for. Plans are ranked by what they cost: recomputation first,
//! then communication, then the number of accumulation steps.

use super::saved::Precision;
use super::shape::{self, Bindings};
use super::training::{self, Checkpoint, Shard, TrainConfig};
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
    // a card named without its memory size (`A100`, `h100`): say which ones there are
    let variants: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !k.is_empty() && key(n).starts_with(&k))
        .collect();
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

/// One candidate plan and what it achieves.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PlanResult {
    pub name: String,
    pub precision: Precision,
    pub checkpoint: String,
    pub shard: Shard,
    pub gpus: u32,
    /// Largest micro-batch that fits (0: not even one sample).
    pub max_micro_batch: u64,
    /// Whether it fits, as far as the estimate counts: with `lower_bound`, what it could not count
    /// may not fit.
    pub fits: bool,
    /// Estimated peak per GPU at the chosen micro-batch (or at batch 1 when nothing fits).
    pub peak_bytes: u64,
    /// Whether `peak_bytes` is a lower bound (ops or sizes nnlint could not account for).
    pub lower_bound: bool,
    /// Micro-batch, accumulation steps and effective batch reaching the requested effective batch.
    pub micro_batch: u64,
    pub accumulate: u64,
    pub effective_batch: u64,
    /// Extra compute of recomputation, as a share of a step.
    pub recompute_fraction: f64,
    pub communication_bytes: u64,
    pub rank: usize,
}

/// What `nnlint fit` found.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FitReport {
    pub model: String,
    pub gpu: Gpu,
    pub mode: &'static str,
    pub effective_batch: u64,
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
    pub dims: std::collections::BTreeMap<String, i64>,
    /// `--input` shapes; their first axis is the batch being searched.
    pub inputs: std::collections::BTreeMap<String, Vec<u64>>,
    pub inference: bool,
}

const MAX_BATCH: u64 = 1 << 20;

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
fn train_peak(model: &Model, req: &FitRequest, cfg: &TrainConfig, batch: u64) -> Result<u64> {
    let b = req.at(batch);
    let inf = shape::infer(model, &b)?;
    // a batch whose sizes leave 64-bit arithmetic fits no GPU
    if !inf.overflow.is_empty() {
        return Ok(u64::MAX);
    }
    Ok(training::checked_estimate(&model.graph, &inf, cfg).map_or(u64::MAX, |t| t.total_bytes))
}

fn serve_peak(model: &Model, req: &FitRequest, half: bool, batch: u64) -> Result<u64> {
    let b = req.at(batch);
    let r = super::analyze(model, &b, None)?;
    serving_bytes(&r.totals, &req.base.overhead, half).ok_or_else(|| {
        Error::Usage(format!(
            "{}: the inference peak needs every dimension bound ({}): pass --dim NAME=V",
            model.path.display(),
            r.unbound.join(", ")
        ))
    })
}

/// Whether the serving estimate at a batch leaves something out.
fn serve_lower_bound(model: &Model, req: &FitRequest, batch: u64) -> Result<bool> {
    let r = super::analyze(model, &req.at(batch), None)?;
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
    largest_batch(|b| Ok(train_peak(model, req, cfg, b)? <= budget))
}

/// The largest batch whose serving peak fits in `budget` bytes (0: none).
pub fn max_serve_batch(model: &Model, req: &FitRequest, budget: u64) -> Result<u64> {
    largest_batch(|b| Ok(serve_peak(model, req, false, b)? <= budget))
}

/// Largest batch in `1..=MAX_BATCH` whose peak fits, by binary search; 0 when batch 1 does not fit.
fn largest_batch(fits: impl Fn(u64) -> Result<bool>) -> Result<u64> {
    if !fits(1)? {
        return Ok(0);
    }
    let (mut lo, mut hi) = (1u64, 2u64);
    while hi <= MAX_BATCH && fits(hi)? {
        lo = hi;
        hi *= 2;
    }
    let mut hi = hi.min(MAX_BATCH + 1);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

struct Plan {
    name: String,
    cfg: TrainConfig,
}

fn plans(req: &FitRequest) -> Vec<Plan> {
    let amp = if req.gpu.bf16 {
        Precision::AmpBf16
    } else {
        Precision::AmpFp16
    };
    let base = TrainConfig {
        gpus: 1,
        shard: Shard::None,
        accumulate: 1,
        ..req.base
    };
    let mut out = vec![
        Plan {
            name: "baseline (fp32)".into(),
            cfg: TrainConfig {
                precision: Precision::Fp32,
                checkpoint: Checkpoint::None,
                ..base
            },
        },
        Plan {
            name: "AMP".into(),
            cfg: TrainConfig {
                precision: amp,
                checkpoint: Checkpoint::None,
                ..base
            },
        },
        Plan {
            name: "AMP + checkpointing".into(),
            cfg: TrainConfig {
                precision: amp,
                checkpoint: Checkpoint::Sqrt,
                ..base
            },
        },
    ];
    if req.gpus > 1 {
        for (shard, name) in [
            (Shard::Ddp, "AMP + DDP"),
            (Shard::Zero2, "AMP + ZeRO-2"),
            (Shard::Fsdp, "AMP + FSDP"),
        ] {
            out.push(Plan {
                name: format!("{name} x{}", req.gpus),
                cfg: TrainConfig {
                    precision: amp,
                    checkpoint: Checkpoint::None,
                    gpus: req.gpus,
                    shard,
                    ..base
                },
            });
        }
        out.push(Plan {
            name: format!("AMP + FSDP + checkpointing x{}", req.gpus),
            cfg: TrainConfig {
                precision: amp,
                checkpoint: Checkpoint::Sqrt,
                gpus: req.gpus,
                shard: Shard::Fsdp,
                ..base
            },
        });
    }
    out
}

/// Micro-batch and accumulation steps that reach `per_gpu` samples per GPU exactly with
/// micro-batches of at most `max`: the fewest steps that divide `per_gpu` (a prime batch larger
/// than `max` runs as micro-batches of 1). `None` when `max` is 0.
///
/// The search looks at no more than 2^20 step counts from the fewest up and 2^20 micro-batches
/// from the largest down (a hostile batch of 10^15 would otherwise scan for minutes); when neither
/// finds a divisor, micro-batches of 1 always do.
fn accumulation(per_gpu: u64, max: u64) -> Option<(u64, u64)> {
    const WINDOW: u64 = 1 << 20;
    if max == 0 {
        return None;
    }
    let per_gpu = per_gpu.max(1);
    let first = per_gpu.div_ceil(max);
    let by_steps =
        (first..=per_gpu.min(first.saturating_add(WINDOW))).find(|s| per_gpu.is_multiple_of(*s));
    let by_micro = (max.saturating_sub(WINDOW).max(1)..=max.min(per_gpu))
        .rev()
        .find(|m| per_gpu.is_multiple_of(*m))
        .map(|m| per_gpu / m);
    let steps = match (by_steps, by_micro) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => a.or(b).unwrap_or(per_gpu),
    };
    Some((per_gpu / steps, steps))
}

/// What a training plan does at the requested effective batch: the micro-batch, the accumulation
/// steps and the estimate there, searched with the accumulation's own memory (gradients persist
/// across micro-batches, so an accumulating step needs more than a single one).
struct Schedule {
    /// The largest micro-batch that fits without accumulation (0: not even one sample).
    max: u64,
    /// `(micro, steps)`, or `None` when the plan cannot reach the batch on this GPU.
    at: Option<(u64, u64)>,
}

fn schedule(model: &Model, req: &FitRequest, cfg: &TrainConfig, per_gpu: u64) -> Result<Schedule> {
    let single = TrainConfig {
        accumulate: 1,
        ..*cfg
    };
    let max = largest_batch(|b| Ok(train_peak(model, req, &single, b)? <= req.gpu.bytes))?;
    if per_gpu <= max {
        return Ok(Schedule {
            max,
            at: Some((per_gpu, 1)),
        });
    }
    let accumulating = TrainConfig {
        accumulate: 2,
        ..*cfg
    };
    let max_acc =
        largest_batch(|b| Ok(train_peak(model, req, &accumulating, b)? <= req.gpu.bytes))?;
    Ok(Schedule {
        max,
        at: accumulation(per_gpu, max_acc),
    })
}

/// Finds, for every plan, the largest batch that fits the GPU.
pub fn fit(model: &Model, req: &FitRequest) -> Result<FitReport> {
    let probe = req.at(1);
    let at_one = shape::infer(model, &probe)?;
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
            let max = largest_batch(|b| Ok(serve_peak(model, req, half, b)? <= req.gpu.bytes))?;
            let at = max.max(1).min(req.effective_batch.max(1));
            let peak = serve_peak(model, req, half, at)?;
            let lower = serve_lower_bound(model, req, at)?;
            results.push(PlanResult {
                name: name.into(),
                precision: if half {
                    Precision::Bf16
                } else {
                    Precision::Fp32
                },
                checkpoint: "none".into(),
                shard: Shard::None,
                gpus: 1,
                max_micro_batch: max,
                fits: max >= 1,
                peak_bytes: peak,
                lower_bound: lower,
                micro_batch: at,
                accumulate: 1,
                effective_batch: at,
                recompute_fraction: 0.0,
                communication_bytes: 0,
                rank: 0,
            });
        }
    } else {
        let mut uneven = false;
        for plan in plans(req) {
            let cfg = plan.cfg;
            let gpus = u64::from(cfg.gpus.max(1));
            let per_gpu = req.effective_batch.max(1).div_ceil(gpus);
            uneven |= per_gpu * gpus != req.effective_batch;
            let sched = schedule(model, req, &cfg, per_gpu)?;
            let (micro, steps) = sched.at.unwrap_or((1, 1));
            let est = training::estimate(
                &model.graph,
                &shape::infer(model, &req.at(micro))?,
                &TrainConfig {
                    accumulate: u32::try_from(steps).unwrap_or(u32::MAX),
                    ..cfg
                },
            );
            let fits = sched.at.is_some();
            for u in &est.unknown {
                if !unknown.contains(u) {
                    unknown.push(u.clone());
                }
            }
            results.push(PlanResult {
                name: plan.name,
                precision: cfg.precision,
                checkpoint: cfg.checkpoint.to_string(),
                shard: cfg.shard,
                gpus: cfg.gpus,
                max_micro_batch: sched.max,
                fits,
                peak_bytes: est.total_bytes,
                lower_bound: est.lower_bound,
                micro_batch: micro,
                accumulate: if fits { steps } else { 0 },
                effective_batch: if fits { micro * steps * gpus } else { 0 },
                recompute_fraction: est.recompute_fraction,
                communication_bytes: est.communication_bytes,
                rank: 0,
            });
        }
        if uneven {
            notes.push(format!(
                "the effective batch {} is not a multiple of {} GPUs: the multi-GPU plans step with {} samples",
                req.effective_batch,
                req.gpus,
                req.effective_batch.div_ceil(u64::from(req.gpus.max(1))) * u64::from(req.gpus.max(1))
            ));
        }
    }
    // rank: plans that fit, cheapest first (recompute, then communication, then accumulation)
    let mut order: Vec<usize> = (0..results.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&results[a], &results[b]);
        y.fits
            .cmp(&x.fits)
            .then(x.recompute_fraction.total_cmp(&y.recompute_fraction))
            .then(x.communication_bytes.cmp(&y.communication_bytes))
            .then(x.accumulate.cmp(&y.accumulate))
            .then(y.max_micro_batch.cmp(&x.max_micro_batch))
    });
    for (rank, &i) in order.iter().enumerate() {
        results[i].rank = rank + 1;
    }
    results.sort_by_key(|r| r.rank);
    let suggestions = if results.iter().any(|r| r.fits) {
        Vec::new()
    } else {
        suggest(model, req)?
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
            "{} has no bfloat16: AMP plans use float16 with a gradient scaler",
            req.gpu.name
        ));
    }
    Ok(FitReport {
        model: model.path.display().to_string(),
        gpu: req.gpu,
        mode: if req.inference {
            "inference"
        } else {
            "training"
        },
        effective_batch: req.effective_batch,
        plans: results,
        suggestions,
        notes,
    })
}

/// When nothing fits: a bigger card, more GPUs, or the layers to make lighter.
fn suggest(model: &Model, req: &FitRequest) -> Result<Vec<String>> {
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
        serve_peak(model, req, true, 1)?
    } else {
        train_peak(model, req, &amp_ckpt, 1)?
    };
    match GPUS
        .iter()
        .filter(|g| g.bytes >= need)
        .min_by_key(|g| g.bytes)
    {
        Some(g) => out.push(format!(
            "a bigger card: {} ({}) fits batch 1 with {}",
            g.name,
            crate::util::units::bytes(g.bytes),
            if req.inference {
                "half-precision weights"
            } else {
                "AMP and checkpointing"
            }
        )),
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
            if train_peak(model, req, &cfg, 1)? <= req.gpu.bytes {
                out.push(format!(
                    "more GPUs: FSDP with AMP and checkpointing over {n} x {} fits batch 1",
                    req.gpu.name
                ));
                break;
            }
        }
    }
    let b = req.at(1);
    let r = super::analyze(model, &b, None)?;
    let mut layers: Vec<&super::Layer> = r.layers.iter().collect();
    layers.sort_by_key(|l| std::cmp::Reverse(l.params));
    for l in layers
        .iter()
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
        let e = parse_gpu("H100").unwrap_err();
        assert!(e.contains("did you mean 'H100-80GB'"), "{e}");
        let e = parse_gpu("a100").unwrap_err();
        assert!(e.contains("'A100-40GB' or 'A100-80GB'"), "{e}");
        let e = parse_gpu("RTX4900").unwrap_err();
        assert!(e.contains("did you mean 'RTX-4090'"), "{e}");
        let e = parse_gpu("0GiB").unwrap_err();
        assert!(e.contains("more than 0 bytes"), "{e}");
        let e = parse_gpu("16").unwrap_err();
        assert!(e.contains("no unit") && e.contains("16GiB"), "{e}");
    }

    #[test]
    fn accumulation_reaches_the_effective_batch() {
        // exactly: 256 = 64 x 4 (not 86 x 3 = 258)
        assert_eq!(accumulation(256, 100), Some((64, 4)));
        assert_eq!(accumulation(256, 1000), Some((256, 1)));
        assert_eq!(accumulation(64, 40), Some((32, 2)));
        // a prime batch above the largest micro-batch runs one sample at a time
        assert_eq!(accumulation(7, 3), Some((1, 7)));
        assert_eq!(accumulation(7, 0), None);
        // a prime batch of 2^61 - 1 (found by fuzzing: the search used to scan every step count)
        let p = (1u64 << 61) - 1;
        assert_eq!(accumulation(p, 1 << 30), Some((1, p)));
        assert_eq!(
            accumulation(p - 1, 1 << 40).map(|(m, s)| m * s),
            Some(p - 1)
        );
    }

    #[test]
    fn binary_search_finds_the_largest_fitting_batch() {
        assert_eq!(largest_batch(|b| Ok(b <= 37)).unwrap(), 37);
        assert_eq!(largest_batch(|b| Ok(b <= 1)).unwrap(), 1);
        assert_eq!(largest_batch(|_| Ok(false)).unwrap(), 0);
        assert_eq!(largest_batch(|_| Ok(true)).unwrap(), MAX_BATCH);
    }
}
