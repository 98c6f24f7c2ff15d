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
    pub plan: String,
    /// What the plan trades for its memory.
    pub cost: String,
    /// The largest batch of `seq`-token sequences that fits (0: not even one).
    pub max_batch: u64,
    /// The longest sequence that fits at batch 1 (0: none).
    pub max_seq_at_batch_1: u64,
    /// The estimated peak at batch 1 × seq.
    pub peak_bytes_at_batch_1: Option<u64>,
    pub trainable_params: Option<u64>,
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

/// Runs `fit` for a loaded checkpoint.
pub fn fit(m: &LlmModel, gpu: Gpu, gpus: u32, seq: u64, lora_rank: u64) -> Result<LlmFit> {
    let cap = gpu.bytes;
    let serve = |b: u64, s: u64| -> Option<u64> {
        let o = LlmOptions {
            batch: b,
            seq: s,
            ..LlmOptions::default()
        };
        inference(&m.arch, m.param_bytes, m.active_linear, m.elem, &o)
            .ok()
            .map(|i| i.total_bytes)
    };
    let base = TrainConfig {
        device: Device::Cuda,
        gpus: 1,
        ..TrainConfig::default()
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
        optimizer: Optimizer::Adamw,
        ..base
    };
    let ckpt = Checkpoint::Every(1);
    let mut plans = vec![
        P {
            name: "full fine-tune, bf16, AdamW".into(),
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
            name: "full, bf16 + checkpointing + 8-bit AdamW".into(),
            cost: "bitsandbytes 8-bit optimizer state",
            cfg: TrainConfig {
                checkpoint: ckpt,
                optimizer: Optimizer::Adamw8bit,
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
                ..base
            },
            lora: Some(lora(Targets::AllLinear)),
            qlora: false,
        },
        P {
            name: format!("QLoRA r={lora_rank} + checkpointing + paged 8-bit AdamW"),
            cost: "a 4-bit NF4 base: dequantization slows each step; small quality loss",
            cfg: TrainConfig {
                precision: Precision::Bf16,
                checkpoint: ckpt,
                optimizer: Optimizer::PagedAdamw8bit,
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
    let mut out = Vec::new();
    let max_seq = seq.max(1);
    out.push(LlmPlan {
        plan: "serve (weights as stored, KV cache in their dtype)".into(),
        cost: "inference only".into(),
        max_batch: largest(MAX_BATCH, |b| serve(b, seq).is_some_and(|t| t <= cap)),
        max_seq_at_batch_1: largest(max_seq.max(m.arch.max_positions), |s| {
            serve(1, s).is_some_and(|t| t <= cap)
        }),
        peak_bytes_at_batch_1: serve(1, seq),
        trainable_params: None,
    });
    let mut trained = Vec::new();
    for p in plans {
        let peak = |b: u64, s: u64| -> Option<(u64, u64)> {
            let o = LlmOptions {
                batch: b,
                seq: s,
                lora: p.lora.clone(),
                qlora: p.qlora,
                ..LlmOptions::default()
            };
            training_step(&m.arch, m.params, m.block_linear, &p.cfg, &o)
                .ok()
                .map(|(t, tp)| (t.total_bytes, tp))
        };
        let fits = |b: u64, s: u64| peak(b, s).is_some_and(|(t, _)| t <= cap);
        let at1 = peak(1, seq);
        trained.push(LlmPlan {
            plan: p.name,
            cost: p.cost.into(),
            max_batch: largest(MAX_BATCH, |b| fits(b, seq)),
            max_seq_at_batch_1: largest(max_seq, |s| fits(1, s)),
            peak_bytes_at_batch_1: at1.map(|x| x.0),
            trainable_params: at1.map(|x| x.1),
        });
    }
    trained.sort_by(|a, b| {
        (b.max_batch, b.max_seq_at_batch_1)
            .cmp(&(a.max_batch, a.max_seq_at_batch_1))
            .then(a.peak_bytes_at_batch_1.cmp(&b.peak_bytes_at_batch_1))
    });
    out.extend(trained);
    Ok(LlmFit {
        model: m.name.clone(),
        gpu,
        gpus,
        seq,
        params: m.params,
        plans: out,
        notes: vec![
            "peaks include the CUDA context, workspace and 5% allocator slack (docs/training-memory.md)".into(),
            "training peaks are one step's: weights, gradients, optimizer state, saved activations (PyTorch's CPU kernels, measured) and the fp32 gradient of the logits".into(),
        ],
    })
}

/// The fit table.
pub fn render(f: &LlmFit) -> String {
    use crate::util::table::{Align, Table};
    use crate::util::units::bytes;
    let mut out = format!(
        "{} on {}{} ({}), sequences of {} tokens, {} parameters\n\n",
        f.model,
        if f.gpus > 1 {
            format!("{} x ", f.gpus)
        } else {
            String::new()
        },
        f.gpu.name,
        bytes(f.gpu.bytes),
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
        t.push(vec![
            p.plan.clone(),
            if p.max_batch == 0 {
                "does not fit".into()
            } else if p.max_batch == MAX_BATCH {
                format!("≥ {MAX_BATCH}")
            } else {
                p.max_batch.to_string()
            },
            if p.max_seq_at_batch_1 == 0 {
                "-".into()
            } else {
                p.max_seq_at_batch_1.to_string()
            },
            p.peak_bytes_at_batch_1.map_or("?".into(), bytes),
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
