//! The one planner of `nnlint fit`, for every front end: the catalogue of training plans
//! ([`candidates`]), the search for the largest micro-batch each fits and the accumulation that
//! reaches the effective batch ([`plan`]), and the ranking. A front end ([`Front`]: an ONNX graph,
//! a checkpoint folder or GGUF file) only answers "what does one step of this plan hold at this
//! micro-batch", through the shared step accounting ([`super::step`]); so the same model reached
//! by two paths gets the same plans, with the same names and fields.

use super::fit::{Gpu, PlanResult};
use super::saved::Precision;
use super::training::{Checkpoint, Optimizer, Shard, TrainConfig, Training};

/// Adapters a plan trains instead of the full model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Adapter {
    /// LoRA of `rank` on q and v, or on every linear layer.
    Lora { rank: u64, all_linear: bool },
    /// QLoRA: LoRA of `rank` on every linear layer of a 4-bit NF4 base.
    Qlora { rank: u64 },
}

/// One plan of the catalogue.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub name: String,
    /// What the plan trades for its memory.
    pub cost: String,
    pub cfg: TrainConfig,
    pub adapter: Option<Adapter>,
}

/// What the catalogue is drawn for.
#[derive(Clone, Copy, Debug)]
pub struct Catalogue {
    pub gpu: Gpu,
    pub gpus: u32,
    /// The command line's settings (device, overhead, input pipeline); precision,
    /// checkpointing, sharding and accumulation are the plans'.
    pub base: TrainConfig,
    /// `--optimizer`: every plan then uses it (and the 8-bit plan, which differs by its
    /// optimizer only, is dropped).
    pub optimizer: Option<Optimizer>,
    /// The adapters' rank, for a front end that knows the linear layers' names (checkpoints);
    /// `None` leaves the LoRA plans out.
    pub lora_rank: Option<u64>,
    /// What checkpointing means for the front end: every block (Hugging Face's
    /// `gradient_checkpointing_enable`) where blocks are known, √n segments of a graph's layers.
    pub checkpoint: Checkpoint,
}

/// The plans, in one order for every front end.
pub fn candidates(c: &Catalogue) -> Vec<Candidate> {
    let opt = |o: Optimizer| c.optimizer.unwrap_or(o);
    let amp = if c.gpu.bf16 {
        Precision::AmpBf16
    } else {
        Precision::AmpFp16
    };
    let base = TrainConfig {
        gpus: 1,
        shard: Shard::None,
        accumulate: 1,
        checkpoint: Checkpoint::None,
        optimizer: opt(Optimizer::Adamw),
        ..c.base
    };
    let ckpt = c.checkpoint;
    let with = |precision: Precision, checkpoint: Checkpoint| TrainConfig {
        precision,
        checkpoint,
        ..base
    };
    let mut out = Vec::new();
    let mut push = |name: String, cost: &str, cfg: TrainConfig, adapter: Option<Adapter>| {
        out.push(Candidate {
            name,
            cost: cost.to_string(),
            cfg,
            adapter,
        })
    };
    let recompute = "one forward recomputed in backward (~33% more compute)";
    push(
        "full, fp32".into(),
        "fp32 weights, gradients and optimizer state: 16 B per parameter with Adam",
        with(Precision::Fp32, Checkpoint::None),
        None,
    );
    push(
        format!("full, {amp}"),
        "fp32 master weights and Adam state, half-precision compute",
        with(amp, Checkpoint::None),
        None,
    );
    push(
        format!("full, {amp} + checkpointing"),
        recompute,
        with(amp, ckpt),
        None,
    );
    if c.gpu.bf16 {
        push(
            "full, bf16".into(),
            "pure bf16 weights and optimizer state (no fp32 master copy)",
            with(Precision::Bf16, Checkpoint::None),
            None,
        );
        push(
            "full, bf16 + checkpointing".into(),
            recompute,
            with(Precision::Bf16, ckpt),
            None,
        );
        if c.optimizer.is_none() {
            push(
                "full, bf16 + checkpointing + 8-bit AdamW".into(),
                "bitsandbytes 8-bit optimizer state, and the recomputation",
                TrainConfig {
                    optimizer: Optimizer::Adamw8bit,
                    ..with(Precision::Bf16, ckpt)
                },
                None,
            );
        }
    }
    if let Some(rank) = c.lora_rank {
        // an fp16 base on a card without bf16 holds the same bytes as a bf16 one
        let half = Precision::Bf16;
        let base_name = if c.gpu.bf16 { "bf16" } else { "fp16" };
        push(
            format!("LoRA r={rank} q,v, {base_name} base"),
            "adapters only: a frozen base (quality below full fine-tuning on some tasks)",
            with(half, Checkpoint::None),
            Some(Adapter::Lora {
                rank,
                all_linear: false,
            }),
        );
        push(
            format!("LoRA r={rank} all-linear + checkpointing"),
            "adapters on every linear layer, and the recomputation",
            with(half, ckpt),
            Some(Adapter::Lora {
                rank,
                all_linear: true,
            }),
        );
        push(
            format!(
                "QLoRA r={rank} + checkpointing + {}",
                match opt(Optimizer::PagedAdamw8bit) {
                    Optimizer::PagedAdamw8bit => "paged 8-bit AdamW".to_string(),
                    o => o.name().to_string(),
                }
            ),
            "a 4-bit NF4 base: dequantization slows each step; small quality loss",
            TrainConfig {
                optimizer: opt(Optimizer::PagedAdamw8bit),
                ..with(half, ckpt)
            },
            Some(Adapter::Qlora { rank }),
        );
    }
    if c.gpus > 1 {
        let n = c.gpus;
        for (shard, what, cost) in [
            (
                Shard::Ddp,
                "DDP",
                "a replica per GPU; gradients all-reduced every step",
            ),
            (
                Shard::Zero2,
                "ZeRO-2",
                "gradients and optimizer state sharded; gradients reduce-scattered",
            ),
            (
                Shard::Fsdp,
                "FSDP",
                "weights, gradients and state sharded: all-gathers every step",
            ),
        ] {
            push(
                format!("full, {amp} + {what} x {n}"),
                cost,
                TrainConfig {
                    gpus: n,
                    shard,
                    ..with(amp, Checkpoint::None)
                },
                None,
            );
        }
        push(
            format!("full, {amp} + FSDP + checkpointing x {n}"),
            "all-gathers every step, and the recomputation",
            TrainConfig {
                gpus: n,
                shard: Shard::Fsdp,
                ..with(amp, ckpt)
            },
            None,
        );
        // adapters over a base too large for one GPU: FSDP shards the frozen base (and, with
        // QLoRA, its 4-bit storage: FSDP-QLoRA); the adapters' optimizer state is small
        if let Some(rank) = c.lora_rank {
            push(
                format!("LoRA r={rank} all-linear + FSDP + checkpointing x {n}"),
                "the frozen base sharded and gathered every step, and the recomputation",
                TrainConfig {
                    gpus: n,
                    shard: Shard::Fsdp,
                    ..with(Precision::Bf16, ckpt)
                },
                Some(Adapter::Lora {
                    rank,
                    all_linear: true,
                }),
            );
            push(
                format!("QLoRA r={rank} + FSDP + checkpointing x {n}"),
                "a 4-bit base sharded and gathered every step (dequantized per layer), and the recomputation",
                TrainConfig {
                    gpus: n,
                    shard: Shard::Fsdp,
                    ..with(Precision::Bf16, ckpt)
                },
                Some(Adapter::Qlora { rank }),
            );
        }
    }
    out
}

/// A front end: one training step of a plan at a micro-batch.
pub trait Front {
    /// The step of `c` under `cfg` (the plan's, with its accumulation) at micro-batch `batch`;
    /// `None` where it cannot be formed (sizes past 64 bits, a plan the model refuses).
    fn step(&self, c: &Candidate, cfg: &TrainConfig, batch: u64) -> Option<Training>;

    /// The longest sequence plan `c` fits at batch 1 in `budget` bytes, for front ends with a
    /// sequence length.
    fn max_seq(&self, _c: &Candidate, _budget: u64) -> Option<u64> {
        None
    }
}

/// The search's cap on the micro-batch.
pub const MAX_BATCH: u64 = 1 << 20;

/// Largest batch in `1..=MAX_BATCH` for which `fits` holds, by doubling then bisection (memory
/// grows with the batch); 0 when batch 1 does not fit.
pub fn largest_batch<E>(fits: impl Fn(u64) -> Result<bool, E>) -> Result<u64, E> {
    if !fits(1)? {
        return Ok(0);
    }
    let (mut lo, mut hi) = (1u64, 2u64);
    while hi <= MAX_BATCH && fits(hi)? {
        lo = hi;
        hi *= 2;
    }
    bisect(lo, hi.min(MAX_BATCH + 1), fits)
}

/// The last batch that fits between `lo` (fits) and `hi` (does not, or is past the cap).
fn bisect<E>(mut lo: u64, mut hi: u64, fits: impl Fn(u64) -> Result<bool, E>) -> Result<u64, E> {
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

/// [`largest_batch`] for a step whose bytes are known (`None`: it does not fit at all, an overflow
/// or an unknown size), searched from predictions: the line through the last two steps measured
/// (batches 1 and 2 first) gives the batch where it meets `budget`, which is measured next (a few
/// times: the secant method), and the search gallops from the last one to the boundary (`fits(b)`
/// and not `fits(b + 1)`), then bisects what is left. Where memory grows with the batch, as
/// [`largest_batch`] assumes, the answer is the same. On a graph of 100,000 nodes each step is a
/// whole shape inference and training estimate, and the ~40 steps of doubling and bisection per
/// plan were most of `fit` and `report`; on a line this takes 4 to 6.
pub fn largest_batch_within<E>(
    bytes: impl Fn(u64) -> Result<Option<u64>, E>,
    budget: u64,
) -> Result<u64, E> {
    let fits = |b: u64| Ok(bytes(b)?.is_some_and(|x| x <= budget));
    let Some(one) = bytes(1)?.filter(|&x| x <= budget) else {
        return Ok(0);
    };
    let Some(two) = bytes(2)?.filter(|&x| x <= budget) else {
        return Ok(1);
    };
    // `lo` fits, `hi` does not (MAX_BATCH + 1: nothing tried fails)
    let (mut lo, mut hi) = (2u64, MAX_BATCH + 1);
    // secant steps: the line through the last two points measured, to where it meets the budget
    let (mut a, mut b) = ((1u64, one), (2u64, two));
    let mut last_fit = true;
    for _ in 0..SECANT_STEPS {
        if hi - lo <= 1 {
            break;
        }
        let slope = (b.1 as f64 - a.1 as f64) / (b.0 as f64 - a.0 as f64);
        let guess = if slope > 0.0 {
            b.0 as f64 + (budget as f64 - b.1 as f64) / slope
        } else {
            MAX_BATCH as f64
        };
        let guess = (guess.floor().max(0.0) as u64).clamp(lo + 1, hi - 1);
        match bytes(guess)? {
            Some(x) => {
                last_fit = x <= budget;
                if last_fit {
                    lo = guess;
                } else {
                    hi = guess;
                }
                (a, b) = (b, (guess, x));
            }
            None => {
                last_fit = false;
                hi = guess;
                break;
            }
        }
    }
    // gallop from the side of the last guess, then bisect what is left
    let mut step = 1;
    if last_fit {
        while hi - lo > 1 {
            let t = lo.saturating_add(step).min(hi - 1);
            if fits(t)? {
                lo = t;
                step *= 2;
            } else {
                hi = t;
                break;
            }
        }
    } else {
        while hi - lo > 1 {
            let t = hi.saturating_sub(step).max(lo + 1);
            if fits(t)? {
                lo = t;
                break;
            }
            hi = t;
            step *= 2;
        }
    }
    Ok(bisect(lo, hi, fits)?.min(MAX_BATCH))
}

/// How many times [`largest_batch_within`] corrects its line before it searches step by step.
const SECANT_STEPS: usize = 4;

/// Micro-batch and accumulation steps that reach `per_gpu` samples per GPU exactly with
/// micro-batches of at most `max`: the fewest steps that divide `per_gpu` (a prime batch larger
/// than `max` runs as micro-batches of 1). `None` when `max` is 0.
///
/// The search looks at no more than 2^20 step counts from the fewest up and 2^20 micro-batches
/// from the largest down (a hostile batch of 10^15 would otherwise scan for minutes); when neither
/// finds a divisor, micro-batches of 1 always do.
pub fn accumulation(per_gpu: u64, max: u64) -> Option<(u64, u64)> {
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

/// What the planner found, and what its estimates could not count (each once).
pub struct Planned {
    pub plans: Vec<PlanResult>,
    pub unknown: Vec<String>,
    /// Whether the effective batch does not divide over the GPUs.
    pub uneven: bool,
}

/// Every candidate on `gpu_bytes`: the largest micro-batch (without accumulation), then the
/// micro-batch and accumulation steps that reach `effective_batch`, searched with the
/// accumulation's own memory (gradients persist across micro-batches), and the step there.
/// Ranked: plans that fit first, then by recompute, communication, accumulation steps, and the
/// largest micro-batch.
pub fn plan(
    front: &dyn Front,
    cands: Vec<Candidate>,
    gpu_bytes: u64,
    effective_batch: u64,
) -> Planned {
    let mut results = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    let mut uneven = false;
    let bytes = |c: &Candidate, cfg: &TrainConfig, b: u64| {
        Ok::<Option<u64>, ()>(front.step(c, cfg, b).map(|t| t.total_bytes))
    };
    for c in cands {
        let cfg = c.cfg;
        let gpus = u64::from(cfg.gpus.max(1));
        let per_gpu = effective_batch.max(1).div_ceil(gpus);
        uneven |= per_gpu * gpus != effective_batch.max(1);
        let single = TrainConfig {
            accumulate: 1,
            ..cfg
        };
        let max = largest_batch_within(|b| bytes(&c, &single, b), gpu_bytes).unwrap_or(0);
        let at = if per_gpu <= max {
            Some((per_gpu, 1))
        } else {
            let acc = TrainConfig {
                accumulate: 2,
                ..cfg
            };
            accumulation(
                per_gpu,
                largest_batch_within(|b| bytes(&c, &acc, b), gpu_bytes).unwrap_or(0),
            )
        };
        let (micro, steps) = at.unwrap_or((1, 1));
        let run = TrainConfig {
            accumulate: u32::try_from(steps).unwrap_or(u32::MAX),
            ..cfg
        };
        let est = front.step(&c, &run, micro);
        let fits = at.is_some();
        if let Some(t) = &est {
            for u in &t.unknown {
                if !unknown.contains(u) {
                    unknown.push(u.clone());
                }
            }
        }
        results.push(PlanResult {
            name: c.name.clone(),
            cost: c.cost.clone(),
            precision: cfg.precision,
            optimizer: cfg.optimizer,
            checkpoint: cfg.checkpoint.to_string(),
            shard: cfg.shard,
            gpus: cfg.gpus.max(1),
            max_micro_batch: max,
            fits,
            peak_bytes: est.as_ref().map(|t| t.total_bytes),
            lower_bound: est.as_ref().is_some_and(|t| t.lower_bound),
            micro_batch: micro,
            accumulate: if fits { steps } else { 0 },
            effective_batch: if fits { micro * steps * gpus } else { 0 },
            recompute_fraction: est.as_ref().map_or(0.0, |t| t.recompute_fraction),
            communication_bytes: est.as_ref().map_or(0, |t| t.communication_bytes),
            trainable_params: est.as_ref().map(|t| t.trainable_params),
            max_seq_at_batch_1: front.max_seq(&c, gpu_bytes),
            rank: 0,
        });
    }
    rank(&mut results);
    Planned {
        plans: results,
        unknown,
        uneven,
    }
}

/// Ranks plans: those that fit first, cheapest first (recompute, then communication, then
/// accumulation, then the larger micro-batch); serving rows keep their place before training's.
pub fn rank(results: &mut [PlanResult]) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(largest_batch(|b| Ok::<_, ()>(b <= 37)).unwrap(), 37);
        assert_eq!(largest_batch(|b| Ok::<_, ()>(b <= 1)).unwrap(), 1);
        assert_eq!(largest_batch(|_| Ok::<_, ()>(false)).unwrap(), 0);
        assert_eq!(largest_batch(|_| Ok::<_, ()>(true)).unwrap(), MAX_BATCH);
    }

    #[test]
    fn the_predicted_search_finds_what_bisection_finds() {
        // lines, lines with a step, a curve, sizes that stop fitting (None), flat lines
        let shapes: [&dyn Fn(u64) -> Option<u64>; 6] = [
            &|b| Some(1000 + 37 * b),
            &|b| Some(1000 + 37 * b + if b > 50 { 5000 } else { 0 }),
            &|b| Some(10 + b * b),
            &|b| (b < 300).then_some(100 + b),
            &|_| Some(500),
            &|b| Some(1000 + (37 * b).div_ceil(64) * 64),
        ];
        for (i, f) in shapes.iter().enumerate() {
            for budget in [0, 500, 1037, 1074, 1075, 3000, 7000, 123_456, u64::MAX / 2] {
                let want = largest_batch(|b| Ok::<_, ()>(f(b).is_some_and(|x| x <= budget)));
                let calls = std::cell::Cell::new(0);
                let got = largest_batch_within(
                    |b| {
                        calls.set(calls.get() + 1);
                        Ok::<_, ()>(f(b))
                    },
                    budget,
                );
                assert_eq!(got, want, "shape {i}, budget {budget}");
                if i == 0 {
                    // on a line: batches 1 and 2, the guess and its neighbours
                    assert!(calls.get() <= 6, "{} steps at budget {budget}", calls.get());
                }
            }
        }
    }

    #[test]
    fn every_front_end_draws_the_same_full_plans() {
        let gpu = crate::analysis::fit::parse_gpu("A100-80GB").unwrap();
        let cat = |lora_rank, checkpoint| Catalogue {
            gpu,
            gpus: 2,
            base: TrainConfig::default(),
            optimizer: None,
            lora_rank,
            checkpoint,
        };
        let graph: Vec<String> = candidates(&cat(None, Checkpoint::Sqrt))
            .into_iter()
            .map(|c| c.name)
            .collect();
        let ckpt: Vec<String> = candidates(&cat(Some(16), Checkpoint::Every(1)))
            .into_iter()
            .filter(|c| c.adapter.is_none())
            .map(|c| c.name)
            .collect();
        assert_eq!(graph, ckpt);
        assert!(graph.contains(&"full, amp-bf16 + checkpointing".to_string()));
    }
}
