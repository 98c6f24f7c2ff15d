//! `nnlint fit` for language models: serving, then the planner's training plans
//! ([`crate::analysis::plan`], the same as an ONNX graph's, with the LoRA plans a checkpoint's
//! named linear layers allow), on one card at a sequence length, with the longest sequence each
//! fits at batch 1.

use super::forward::{Lora, Targets};
use super::{inference, training_step, LlmModel, LlmOptions};
use crate::analysis::fit::{FitReport, Gpu, PlanResult};
use crate::analysis::plan::{self, Adapter, Candidate};
use crate::analysis::saved::{Device, Precision};
use crate::analysis::training::{Checkpoint, Optimizer, Shard, TrainConfig, Training};
use crate::error::Result;

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
/// GPUs, and the optimizer when one is given: every plan then uses it), the serving options, the
/// LoRA rank and the effective batch.
#[derive(Clone, Debug)]
pub struct FitOptions {
    pub base: TrainConfig,
    pub optimizer: Option<Optimizer>,
    /// `seq`, `attn`, `kv_dtype`, `all_logits`; the batch is searched.
    pub llm: LlmOptions,
    pub lora_rank: u64,
    pub effective_batch: u64,
    /// Serving only (`--inference`): no training plans, no training notes.
    pub inference: bool,
}

/// A checkpoint as the planner's front end.
struct Front<'a> {
    m: &'a LlmModel,
    f: &'a FitOptions,
}

impl Front<'_> {
    fn options(&self, c: &Candidate, batch: u64, seq: u64) -> LlmOptions {
        let (lora, qlora) = match c.adapter {
            None => (None, false),
            Some(Adapter::Lora { rank, all_linear }) => (
                Some(Lora {
                    rank,
                    targets: if all_linear {
                        Targets::AllLinear
                    } else {
                        Targets::Named(vec!["q_proj".into(), "v_proj".into()])
                    },
                }),
                false,
            ),
            Some(Adapter::Qlora { rank }) => (
                Some(Lora {
                    rank,
                    targets: Targets::AllLinear,
                }),
                true,
            ),
        };
        LlmOptions {
            batch,
            seq,
            lora,
            qlora,
            ..self.f.llm.clone()
        }
    }

    fn train(&self, c: &Candidate, cfg: &TrainConfig, batch: u64, seq: u64) -> Option<Training> {
        let o = self.options(c, batch, seq);
        training_step(&self.m.arch, self.m.params, self.m.block_linear, cfg, &o)
            .ok()
            .map(|(t, _)| t)
    }
}

impl plan::Front for Front<'_> {
    fn step(&self, c: &Candidate, cfg: &TrainConfig, batch: u64) -> Option<Training> {
        self.train(c, cfg, batch, self.f.llm.seq)
    }

    fn max_seq(&self, c: &Candidate, budget: u64) -> Option<u64> {
        let cfg = TrainConfig {
            accumulate: 1,
            ..c.cfg
        };
        Some(largest(self.f.llm.seq.max(1), |s| {
            self.train(c, &cfg, 1, s)
                .is_some_and(|t| t.total_bytes <= budget)
        }))
    }
}

/// Why vLLM would not split this model over `n` GPUs by tensor parallelism (its attention and
/// KV heads must divide evenly: `n` divides the query heads, and the KV heads or `n` divides the
/// other), or `None` when it would.
fn tensor_parallel_refused(a: &super::arch::Arch, n: u64) -> Option<String> {
    let (h, kv) = (a.heads, a.kv_heads);
    if h > 0 && !h.is_multiple_of(n) {
        return Some(format!(
            "its {h} attention heads do not split over {n} GPUs"
        ));
    }
    if kv > 0 && !kv.is_multiple_of(n) && !n.is_multiple_of(kv) {
        return Some(format!(
            "its {kv} KV heads neither split over nor divide {n} GPUs"
        ));
    }
    None
}

/// One GPU's bytes when `n` GPUs serve the model by tensor parallelism, from the whole model's
/// inference `i`: the weights split but the norms (replicated on every GPU), the cache by what
/// each GPU keeps of it (attention: its share of the KV heads, one replicated head when there
/// are fewer than GPUs; MLA's latent whole, as vLLM keeps it on every GPU; recurrent and
/// convolution states split by heads), the prefill workspace, logits and image encoder whole (an
/// upper bound: their hidden-size parts are replicated), and the overhead of that sum.
fn tensor_parallel_bytes(
    m: &LlmModel,
    i: &super::LlmInference,
    n: u64,
    overhead: &crate::analysis::training::Overhead,
) -> Option<u64> {
    use super::layers::CacheKind;
    let a = &m.arch;
    let norms = (2 * a.layers + 1)
        .checked_mul(a.hidden)?
        .checked_mul(m.elem)?;
    let norms = norms.min(i.weights_bytes);
    let weights = (i.weights_bytes - norms).div_ceil(n).checked_add(norms)?;
    let kv = a.kv_heads.max(1);
    let share = kv.div_ceil(n).max(1);
    let mut cache = 0u64;
    for g in &i.cache {
        let b = match g.kind {
            CacheKind::Latent => g.bytes,
            CacheKind::Attention | CacheKind::Sliding | CacheKind::Chunked | CacheKind::Hybrid => {
                u64::try_from(u128::from(g.bytes) * u128::from(share) / u128::from(kv)).ok()?
            }
            _ => g.bytes.div_ceil(n),
        };
        cache = cache.checked_add(b)?;
    }
    let encoder = i.images.as_ref().map_or(0, |x| x.encoder_workspace_bytes);
    let allocated = weights.checked_add(cache)?.checked_add(
        i.activation_workspace_bytes
            .max(i.logits_bytes)
            .max(encoder),
    )?;
    allocated.checked_add(overhead.bytes(allocated))
}

/// Runs `fit` for a loaded checkpoint.
pub fn fit(m: &LlmModel, gpu: Gpu, f: &FitOptions) -> Result<FitReport> {
    let cap = gpu.bytes;
    let (seq, gpus) = (f.llm.seq, f.base.gpus.max(1));
    let serve_opts = |b: u64, s: u64| LlmOptions {
        batch: b,
        seq: s,
        lora: None,
        qlora: false,
        ..f.llm.clone()
    };
    // the whole model served at batch b x seq s (one GPU's, or what tensor parallelism splits)
    let serving = |b: u64, s: u64| {
        inference(
            &m.arch,
            m.param_bytes,
            m.active_linear,
            m.elem,
            &serve_opts(b, s),
            &f.base.overhead,
        )
        .ok()
    };
    let serve = |b: u64, s: u64| serving(b, s).map(|i| i.total_bytes);
    let mut notes = Vec::new();
    let max_seq = seq.max(1);
    // a sequence past the positions the model has cannot run (learned positions) or was not
    // trained for (rotary): the search stops there
    let serve_seq = if m.arch.max_positions > 0 {
        m.arch.max_positions
    } else {
        max_seq
    };
    let serve_max =
        plan::largest_batch(|b| Ok::<_, ()>(serve(b, seq).is_some_and(|t| t <= cap))).unwrap_or(0);
    let serve_at = serve_max.max(1).min(f.effective_batch.max(1));
    let mut plans = vec![PlanResult {
        name: if f.llm.cache_layout == super::layers::CacheLayout::Hf {
            "serve (weights as stored, KV cache in their dtype)".into()
        } else {
            format!(
                "serve (weights as stored, KV cache as {} allocates it)",
                f.llm.cache_layout
            )
        },
        cost: "inference only".into(),
        precision: if m.elem >= 4 {
            Precision::Fp32
        } else {
            Precision::Bf16
        },
        optimizer: f.base.optimizer,
        checkpoint: "none".into(),
        shard: Shard::None,
        gpus: 1,
        max_micro_batch: serve_max,
        fits: serve_max > 0,
        peak_bytes: serve(serve_at, seq),
        lower_bound: false,
        micro_batch: serve_at,
        accumulate: 1,
        effective_batch: serve_at,
        recompute_fraction: 0.0,
        communication_bytes: 0,
        trainable_params: None,
        max_seq_at_batch_1: Some(largest(serve_seq, |s| {
            serve(1, s).is_some_and(|t| t <= cap)
        })),
        // last when it does not fit (set below)
        rank: 1,
    }];
    // the same served by tensor parallelism over the GPUs
    if gpus > 1 {
        let n = u64::from(gpus);
        let tp = |b: u64, s: u64| {
            serving(b, s).and_then(|i| tensor_parallel_bytes(m, &i, n, &f.base.overhead))
        };
        match tensor_parallel_refused(&m.arch, n) {
            Some(why) => notes.push(format!(
                "no tensor-parallel serving row: vLLM refuses --tensor-parallel-size {n} for this model ({why})"
            )),
            None => {
                let max = plan::largest_batch(|b| Ok::<_, ()>(tp(b, seq).is_some_and(|t| t <= cap)))
                    .unwrap_or(0);
                let at = max.max(1).min(f.effective_batch.max(1));
                // two all-reduces of the hidden states per layer (ring: 2(n-1)/n of their size)
                // in one prefill of the batch
                let comm = u128::from(m.arch.layers)
                    * 2
                    * u128::from(at)
                    * u128::from(seq)
                    * u128::from(m.arch.hidden)
                    * u128::from(m.elem)
                    * 2
                    * u128::from(n - 1)
                    / u128::from(n);
                plans.push(PlanResult {
                    name: format!("serve, tensor parallel x {gpus}"),
                    cost: format!(
                        "weights and heads split over {gpus} GPUs (vLLM --tensor-parallel-size {gpus}): all-reduces in every layer"
                    ),
                    shard: Shard::TensorParallel,
                    gpus,
                    max_micro_batch: max,
                    fits: max > 0,
                    peak_bytes: tp(at, seq),
                    micro_batch: at,
                    effective_batch: at,
                    communication_bytes: u64::try_from(comm).unwrap_or(u64::MAX),
                    max_seq_at_batch_1: Some(largest(serve_seq, |s| {
                        tp(1, s).is_some_and(|t| t <= cap)
                    })),
                    ..plans[0].clone()
                });
                notes.push(format!(
                    "serve, tensor parallel x {gpus}: per GPU, 1/{gpus} of the weights (norms replicated), of the KV heads (one replicated head each when there are fewer KV heads than GPUs; MLA's latent cache whole on every GPU, as vLLM keeps it) and of recurrent states; the prefill workspace, logits and image encoder counted whole (an upper bound); communication is the all-reduces of one prefill of the batch"
                ));
            }
        }
    }
    let cands = if f.inference {
        Vec::new()
    } else {
        plan::candidates(&plan::Catalogue {
            gpu,
            gpus,
            base: f.base,
            optimizer: f.optimizer,
            lora_rank: Some(f.lora_rank),
            checkpoint: Checkpoint::Every(1),
        })
    };
    let planned = plan::plan(&Front { m, f }, cands, cap, f.effective_batch);
    for u in &planned.unknown {
        let n = format!("the training peaks are lower bounds and their batches upper bounds: {u}");
        if !notes.contains(&n) {
            notes.push(n);
        }
    }
    if planned.uneven {
        notes.push(format!(
            "the effective batch {} is not a multiple of {gpus} GPUs: the multi-GPU plans step with {} sequences",
            f.effective_batch,
            f.effective_batch.div_ceil(u64::from(gpus)) * u64::from(gpus)
        ));
    }
    // the serving rows rank first where they fit (inference only), one GPU before several; the
    // training plans after them; serving rows that do not fit last
    let offset = plans.iter().filter(|p| p.fits).count();
    let total = planned.plans.len() + plans.len();
    let (mut fitting, mut last) = (1, offset + planned.plans.len() + 1);
    for p in plans.iter_mut() {
        if p.fits {
            p.rank = fitting;
            fitting += 1;
        } else {
            p.rank = last;
            last += 1;
        }
    }
    debug_assert!(last <= total + 1);
    plans.extend(planned.plans.into_iter().map(|mut p| {
        p.rank += offset;
        p
    }));
    // the layout's assumptions, said at batch 1 x seq (the batch search varies the batch)
    if let Some(n) = serving(1, seq).and_then(|i| i.cache_assumptions) {
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
    if !f.inference {
        notes.insert(
            1,
            format!(
                "training peaks are one step's: weights, gradients as backward makes them, optimizer state, saved activations (PyTorch's CPU kernels, measured{}), the loss and the gradients being computed",
                if f.base.device == Device::Cuda {
                    "; on CUDA autocast also keeps fp32 copies around norms and softmax"
                } else {
                    ""
                }
            ),
        );
    }
    if let Some(o) = f.optimizer {
        notes.push(format!("every training plan uses --optimizer {}", o.name()));
    }
    if !gpu.bf16 && !f.inference {
        notes.push(format!(
            "{} has no bfloat16: AMP plans use float16 with a gradient scaler, the pure-bf16 plans are left out, and the LoRA plans' base is fp16",
            gpu.name
        ));
    }
    notes.push(
        "serving is transformers' generate: the batch is prefilled at once (the largest layer's workspace grows with it) and the logits kept are the last position's; vLLM's chunked prefill bounds the workspace by its token budget".into(),
    );
    notes.push(format!(
        "max seq at batch 1 is searched up to {} for serving ({}){}",
        serve_seq,
        if m.arch.max_positions > 0 {
            "the context, max_position_embeddings"
        } else {
            "--seq: the config gives no context length"
        },
        if f.inference {
            String::new()
        } else {
            format!(" and up to --seq {max_seq} for training")
        }
    ));
    Ok(FitReport {
        model: m.name.clone(),
        gpu,
        gpus,
        mode: if f.inference { "inference" } else { "training" },
        effective_batch: f.effective_batch,
        seq: Some(seq),
        params: Some(m.params),
        plans,
        suggestions: Vec::new(),
        notes,
    })
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
