//! `nnlint fit` for language models: on one card, the largest batch at a sequence length (and
//! the longest sequence at batch 1) for serving and for each fine-tuning plan, ranked.

use super::forward::{Lora, Targets};
use super::{inference, training_step, LlmModel, LlmOptions};
use crate::analysis::fit::Gpu;
use crate::analysis::saved::{Device, Precision};
use crate::analysis::training::{Checkpoint, Optimizer, Shard, TrainConfig};
use crate::error::Result;

/// One plan's answer.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LlmPlan {
    /// The plan's name (`name`, as a graph's plans have it).
    #[serde(rename = "name")]
    pub plan: String,
    /// Whether one sequence of `seq` tokens fits (`max_batch` > 0), as far as the estimate
    /// counts: with `lower_bound`, what it could not count may not fit.
    pub fits: bool,
    /// What the plan trades for its memory.
    pub cost: String,
    /// The largest batch of `seq`-token sequences that fits (0: not even one).
    pub max_batch: u64,
    /// The longest sequence that fits at batch 1 (0: none).
    pub max_seq_at_batch_1: u64,
    /// The estimated peak at batch 1 × seq.
    pub peak_bytes_at_batch_1: Option<u64>,
    pub trainable_params: Option<u64>,
    /// Whether the peak is a lower bound (and the batches upper bounds): something the step
    /// holds could not be counted (the notes say what).
    pub lower_bound: bool,
}

/// The answer for one card.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LlmFit {
    pub model: String,
    pub gpu: Gpu,
    pub gpus: u32,
    pub seq: u64,
    pub params: u64,
    /// Serving first, then the fine-tuning plans from the one that fits the largest batch.
    pub plans: Vec<LlmPlan>,
    pub notes: Vec<String>,
}

const MAX_BATCH: u64 = 1 << 16;

const EIGHT_BIT: &str = "bitsandbytes 8-bit optimizer state";

/// The largest `x` in 1..=hi with `fits(x)`, assuming it is monotone (0 when none).
fn largest(hi: u64, fits: impl Fn(u64) -> bool) -> u64 {
    if !fits(1) {
        return 0;
    }
    let (mut lo, mut hi) = (1u64, hi.max(1));
    if fits(hi) {
        return hi;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid
        } else {
            hi = mid
        }
    }
    lo
}

/// What `fit` is asked besides the card: the command line's training settings (device, overhead,
/// GPUs, and the optimizer when one is given: every plan then uses it), the serving options and
/// the LoRA rank.
#[derive(Clone, Debug)]
pub struct FitOptions {
    pub base: TrainConfig,
    pub optimizer: Option<Optimizer>,
    /// `seq`, `attn`, `kv_dtype`, `all_logits`; the batch is searched.
    pub llm: LlmOptions,
    pub lora_rank: u64,
}

/// Runs `fit` for a loaded checkpoint.
pub fn fit(m: &LlmModel, gpu: Gpu, f: &FitOptions) -> Result<LlmFit> {
    let cap = gpu.bytes;
    let (seq, gpus, lora_rank) = (f.llm.seq, f.base.gpus, f.lora_rank);
    let serve = |b: u64, s: u64| -> Option<u64> {
        let o = LlmOptions {
            batch: b,
            seq: s,
            lora: None,
            qlora: false,
            ..f.llm.clone()
        };
        inference(
            &m.arch,
            m.param_bytes,
            m.active_linear,
            m.elem,
            &o,
            &f.base.overhead,
        )
        .ok()
        .map(|i| i.total_bytes)
    };
    let base = TrainConfig {
        gpus: 1,
        shard: Shard::None,
        accumulate: 1,
        ..f.base
    };
    // a given optimizer replaces every plan's own
    let opt = |o: Optimizer| f.optimizer.unwrap_or(o);
    let opt_name = |o: Optimizer| match opt(o) {
        Optimizer::Adamw => "AdamW".to_string(),
        Optimizer::Adamw8bit => "8-bit AdamW".to_string(),
        Optimizer::PagedAdamw8bit => "paged 8-bit AdamW".to_string(),
        other => other.name().to_string(),
    };
    let lora = |targets: Targets| Lora {
        rank: lora_rank,
        targets,
    };
    struct P {
        name: String,
        cost: &'static str,
        cfg: TrainConfig,
        lora: Option<Lora>,
        qlora: bool,
    }
    let bf16 = TrainConfig {
        precision: Precision::Bf16,
        optimizer: opt(Optimizer::Adamw),
        ..base
    };
    let ckpt = Checkpoint::Every(1);
    let mut plans = vec![
        P {
            name: format!("full fine-tune, bf16, {}", opt_name(Optimizer::Adamw)),
            cost: "pure bf16 weights and optimizer state (no fp32 master copy)",
            cfg: bf16,
            lora: None,
            qlora: false,
        },
        P {
            name: "full, bf16 + checkpointing".into(),
            cost: "~33% more compute (one forward recomputed)",
            cfg: TrainConfig {
                checkpoint: ckpt,
                ..bf16
            },
            lora: None,
            qlora: false,
        },
        P {
            name: "full, amp-bf16 + checkpointing".into(),
            cost: "fp32 master weights and Adam state: 16 B per parameter",
            cfg: TrainConfig {
                precision: Precision::AmpBf16,
                checkpoint: ckpt,
                ..bf16
            },
            lora: None,
            qlora: false,
        },
        P {
            name: format!(
                "full, bf16 + checkpointing + {}",
                opt_name(Optimizer::Adamw8bit)
            ),
            cost: EIGHT_BIT,
            cfg: TrainConfig {
                checkpoint: ckpt,
                optimizer: opt(Optimizer::Adamw8bit),
                ..bf16
            },
            lora: None,
            qlora: false,
        },
        P {
            name: format!("LoRA r={lora_rank} q,v, bf16 base"),
            cost: "adapters only: a frozen base (quality below full fine-tuning on some tasks)",
            cfg: TrainConfig {
                precision: Precision::Bf16,
                optimizer: opt(Optimizer::Adamw),
                ..base
            },
            lora: Some(lora(Targets::Named(vec!["q_proj".into(), "v_proj".into()]))),
            qlora: false,
        },
        P {
            name: format!("LoRA r={lora_rank} all-linear + checkpointing"),
            cost: "adapters on every linear layer, ~33% more compute",
            cfg: TrainConfig {
                precision: Precision::Bf16,
                checkpoint: ckpt,
                optimizer: opt(Optimizer::Adamw),
                ..base
            },
            lora: Some(lora(Targets::AllLinear)),
            qlora: false,
        },
        P {
            name: format!(
                "QLoRA r={lora_rank} + checkpointing + {}",
                opt_name(Optimizer::PagedAdamw8bit)
            ),
            cost: "a 4-bit NF4 base: dequantization slows each step; small quality loss",
            cfg: TrainConfig {
                precision: Precision::Bf16,
                checkpoint: ckpt,
                optimizer: opt(Optimizer::PagedAdamw8bit),
                ..base
            },
            lora: Some(lora(Targets::AllLinear)),
            qlora: true,
        },
    ];
    if gpus > 1 {
        plans.push(P {
            name: format!("full, bf16 + checkpointing, FSDP x {gpus}"),
            cost: "weights, gradients and optimizer state sharded: all-gathers every step",
            cfg: TrainConfig {
                checkpoint: ckpt,
                gpus,
                shard: Shard::Fsdp,
                ..bf16
            },
            lora: None,
            qlora: false,
        });
    }
    if f.optimizer.is_some() {
        // the 8-bit plan differs from the checkpointed one by its optimizer only
        plans.retain(|p| p.cost != EIGHT_BIT);
    }
    let mut notes = Vec::new();
    let mut out = Vec::new();
    let max_seq = seq.max(1);
    // a sequence past the positions the model has cannot run (learned positions) or was not
    // trained for (rotary): the search stops there
    let serve_seq = if m.arch.max_positions > 0 {
        m.arch.max_positions
    } else {
        max_seq
    };
    out.push(LlmPlan {
        plan: if f.llm.cache_layout == super::layers::CacheLayout::Hf {
            "serve (weights as stored, KV cache in their dtype)".into()
        } else {
            format!(
                "serve (weights as stored, KV cache as {} allocates it)",
                f.llm.cache_layout
            )
        },
        cost: "inference only".into(),
        fits: false,
        max_batch: largest(MAX_BATCH, |b| serve(b, seq).is_some_and(|t| t <= cap)),
        max_seq_at_batch_1: largest(serve_seq, |s| serve(1, s).is_some_and(|t| t <= cap)),
        peak_bytes_at_batch_1: serve(1, seq),
        trainable_params: None,
        lower_bound: false,
    });
    let mut trained = Vec::new();
    for p in plans {
        let peak = |b: u64, s: u64| -> Option<(u64, u64, Vec<String>)> {
            let o = LlmOptions {
                batch: b,
                seq: s,
                lora: p.lora.clone(),
                qlora: p.qlora,
                ..f.llm.clone()
            };
            training_step(&m.arch, m.params, m.block_linear, &p.cfg, &o)
                .ok()
                .map(|(t, tp)| (t.total_bytes, tp, t.unknown))
        };
        let fits = |b: u64, s: u64| peak(b, s).is_some_and(|(t, _, _)| t <= cap);
        let at1 = peak(1, seq);
        let unknown = at1.as_ref().map(|x| x.2.clone()).unwrap_or_default();
        for u in &unknown {
            let n =
                format!("the training peaks are lower bounds and their batches upper bounds: {u}");
            if !notes.contains(&n) {
                notes.push(n);
            }
        }
        trained.push(LlmPlan {
            plan: p.name,
            cost: p.cost.into(),
            fits: false,
            max_batch: largest(MAX_BATCH, |b| fits(b, seq)),
            max_seq_at_batch_1: largest(max_seq, |s| fits(1, s)),
            peak_bytes_at_batch_1: at1.as_ref().map(|x| x.0),
            trainable_params: at1.as_ref().map(|x| x.1),
            lower_bound: !unknown.is_empty(),
        });
    }
    trained.sort_by(|a, b| {
        (b.max_batch, b.max_seq_at_batch_1)
            .cmp(&(a.max_batch, a.max_seq_at_batch_1))
            .then(a.peak_bytes_at_batch_1.cmp(&b.peak_bytes_at_batch_1))
    });
    out.extend(trained);
    for p in &mut out {
        p.fits = p.max_batch > 0;
    }
    // the layout's assumptions, said at batch 1 x seq (the batch search varies the batch)
    if let Some(n) = inference(
        &m.arch,
        m.param_bytes,
        m.active_linear,
        m.elem,
        &LlmOptions {
            batch: 1,
            seq,
            lora: None,
            qlora: false,
            ..f.llm.clone()
        },
        &f.base.overhead,
    )
    .ok()
    .and_then(|i| i.cache_assumptions)
    {
        notes.push(n);
    }
    let o = &f.base.overhead;
    notes.insert(
        0,
        format!(
            "peaks include the CUDA context ({}), workspace ({}) and {:.0}% allocator slack (docs/training-memory.md)",
            crate::util::units::bytes(o.cuda_context),
            crate::util::units::bytes(o.workspace),
            o.fragmentation * 100.0
        ),
    );
    notes.insert(
        1,
        format!(
            "training peaks are one step's: weights, gradients, optimizer state, saved activations (PyTorch's CPU kernels, measured{}) and the fp32 gradient of the logits",
            if f.base.device == Device::Cuda {
                "; on CUDA autocast also keeps fp32 copies around norms and softmax"
            } else {
                ""
            }
        ),
    );
    if let Some(o) = f.optimizer {
        notes.push(format!("every training plan uses --optimizer {}", o.name()));
    }
    if gpus > 1 {
        notes.push(format!(
            "the serving and single-GPU training rows are one GPU's: tensor-parallel serving across the {gpus} GPUs (weights and KV heads split) is not modelled, so serving that does not fit one GPU may still fit {gpus}"
        ));
    }
    notes.push(
        "serving is transformers' generate: the batch is prefilled at once (the largest layer's workspace grows with it) and the logits kept are the last position's; vLLM's chunked prefill bounds the workspace by its token budget".into(),
    );
    notes.push(format!(
        "max seq at batch 1 is searched up to {} for serving ({}) and up to --seq {max_seq} for training",
        serve_seq,
        if m.arch.max_positions > 0 {
            "the context, max_position_embeddings"
        } else {
            "--seq: the config gives no context length"
        }
    ));
    Ok(LlmFit {
        model: m.name.clone(),
        gpu,
        gpus,
        seq,
        params: m.params,
        plans: out,
        notes,
    })
}

/// The fit table.
/// A plan's max batch, max sequence at batch 1 and peak at batch 1 as `fit` and `report` print
/// them: bounds marked (≤, ≥), a search stopped at its cap on a lower bound unknown (`?`).
pub fn cells(p: &LlmPlan) -> [String; 3] {
    use crate::util::units::bytes;
    [
        if p.max_batch == 0 {
            "does not fit".into()
        } else if p.max_batch == MAX_BATCH && p.lower_bound {
            // the search stopped at its cap on peaks that are lower bounds: nothing is known
            "?".into()
        } else if p.max_batch == MAX_BATCH {
            format!("≥ {MAX_BATCH}")
        } else if p.lower_bound {
            format!("≤ {}", p.max_batch)
        } else {
            p.max_batch.to_string()
        },
        if p.max_seq_at_batch_1 == 0 {
            "-".into()
        } else if p.lower_bound {
            format!("≤ {}", p.max_seq_at_batch_1)
        } else {
            p.max_seq_at_batch_1.to_string()
        },
        p.peak_bytes_at_batch_1.map_or("?".into(), |b| {
            if p.lower_bound {
                format!("≥ {}", bytes(b))
            } else {
                bytes(b)
            }
        }),
    ]
}

pub fn render(f: &LlmFit) -> String {
    use crate::util::table::{Align, Table};
    let mut out = format!(
        "{} on {}{}, sequences of {} tokens, {} parameters\n\n",
        f.model,
        if f.gpus > 1 {
            format!("{} x ", f.gpus)
        } else {
            String::new()
        },
        f.gpu.describe(),
        f.seq,
        f.params
    );
    let mut t = Table::new(vec![
        ("plan", Align::Left),
        ("max batch", Align::Right),
        ("max seq at batch 1", Align::Right),
        ("peak at batch 1", Align::Right),
        ("trains", Align::Right),
        ("cost", Align::Left),
    ]);
    for p in &f.plans {
        let [batch, seq, peak] = cells(p);
        t.push(vec![
            p.plan.clone(),
            batch,
            seq,
            peak,
            p.trainable_params.map_or("-".into(), |n| n.to_string()),
            p.cost.clone(),
        ]);
    }
    out.push_str(&t.render());
    for n in &f.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn largest_finds_the_boundary() {
        assert_eq!(largest(100, |x| x <= 37), 37);
        assert_eq!(largest(100, |_| false), 0);
        assert_eq!(largest(100, |_| true), 100);
    }
}
