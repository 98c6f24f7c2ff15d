//! One model of a training step, shared by every front end: an ONNX graph (saved tensors read off
//! its nodes, [`super::training`]) and a checkpoint folder (saved tensors from the architecture's
//! tape, [`super::llm`]) both describe their step as a [`StepModel`], and [`account`] turns it into
//! the bytes per GPU under a plan: weights, gradients and their lifetime, optimizer state, saved
//! activations, transient gradients, the parallel plan's buffers, and the overhead. So the same
//! model reached by two paths is counted by one set of rules; what differs is only what each input
//! carries (see docs/training-memory.md, "One step, two front ends").
//!
//! The peak is the larger of two phases:
//! - **backward**, walked in the order it runs: it starts with every saved activation held; at each
//!   step the gradients of the parameters it differentiates appear (with
//!   `zero_grad(set_to_none=True)`, PyTorch's default; with accumulation, or sharded gradients,
//!   they are held from the start), the tensors a checkpointed block saves are made again when
//!   backward reaches the block, the gradients of the activations being differentiated are
//!   transient, and the saved tensors it was the last to need are freed after it;
//! - **the optimizer step**: weights, gradients, state and, for Adam and AdamW, the foreach
//!   implementation's temporary the size of one moment.

use super::training::{Optimizer, PeakBreakdown, Shard, StateBytes, TrainConfig};

/// One step of backward, in the order backward runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackwardStep {
    /// Trained elements whose gradients this step makes (they stay until the optimizer step).
    pub grads: u64,
    /// Saved bytes made again before this step (a checkpointed block recomputed).
    pub recomputed: u64,
    /// Bytes of the activation gradients live while this step runs.
    pub transient: u64,
    /// Saved bytes freed after this step.
    pub freed: u64,
}

/// A front end's description of one training step at one micro-batch.
#[derive(Clone, Debug, Default)]
pub struct StepModel {
    /// Elements trained: the parameters, or a LoRA's adapters.
    pub trainable: u64,
    /// Bytes per trained element: the weight as held, its gradient, its optimizer state.
    pub per_param: StateBytes,
    /// Bytes of parameters held but not trained (a LoRA's frozen base); sharded like the weights.
    pub frozen_bytes: u64,
    /// Bytes of buffers (BatchNorm statistics and other state): every GPU holds them whole.
    pub buffer_bytes: u64,
    /// Bytes of the largest unit ZeRO-3/FSDP gathers at once, as gathered.
    pub gather_unit_bytes: u64,
    /// Saved activations held when backward starts.
    pub saved_bytes: u64,
    /// Backward, in the order it runs. Gradients of trained elements no step names appear at
    /// the last step, as those of a module that runs before everything the front end
    /// describes (a wrapper's vision tower) do.
    pub backward: Vec<BackwardStep>,
    /// Bytes of one micro-batch's inputs (for the host's input pipeline).
    pub input_bytes: u64,
}

/// What [`account`] finds per GPU.
#[derive(Clone, Debug, Default)]
pub struct Account {
    pub weights_bytes: u64,
    pub gradient_bytes: u64,
    pub optimizer_bytes: u64,
    pub parallel_bytes: u64,
    /// The parts at the peak (overhead included); they add up to `total_bytes`.
    pub peak: PeakBreakdown,
    pub overhead_bytes: u64,
    pub total_bytes: u64,
    pub communication_bytes: u64,
    pub host_bytes: u64,
}

/// The per-GPU bytes of `m` under `cfg`; `Err` names the part whose bytes overflow 64 bits.
pub fn account(m: &StepModel, cfg: &TrainConfig) -> Result<Account, &'static str> {
    let n = u128::from(cfg.gpus.max(1));
    let sb = m.per_param;
    let p = u128::from(m.trainable);
    let div = |a: u128| a.div_ceil(n);
    let weights = p * u128::from(sb.weight) + u128::from(m.frozen_bytes);
    let grads = p * u128::from(sb.grad);
    let optim = p * u128::from(sb.optimizer);
    let (weights, grads, optim, parallel) = match cfg.shard {
        Shard::None | Shard::TensorParallel => (weights, grads, optim, 0),
        // DDP's reducer keeps buckets as large as the gradients (gradient_as_bucket_view=False)
        Shard::Ddp => (weights, grads, optim, grads),
        Shard::Zero1 => (weights, grads, div(optim), 0),
        Shard::Zero2 => (weights, div(grads), div(optim), 0),
        // the unit being computed and the one prefetched, gathered
        Shard::Zero3 | Shard::Fsdp => (
            div(weights),
            div(grads),
            div(optim),
            2 * u128::from(m.gather_unit_bytes),
        ),
    };
    let weights = weights + u128::from(m.buffer_bytes);
    let sharded_grads = matches!(cfg.shard, Shard::Zero2 | Shard::Zero3 | Shard::Fsdp);
    let grads_persist = cfg.accumulate > 1 || sharded_grads;
    let grad_per = if sharded_grads {
        0
    } else {
        u128::from(sb.grad)
    };
    let named: u128 = m.backward.iter().map(|s| u128::from(s.grads)).sum();
    let unnamed = p.saturating_sub(named) * grad_per;
    let mut g_alloc = if grads_persist { grads } else { 0 };
    let base = weights + optim + parallel;
    let mut remaining = u128::from(m.saved_bytes);
    let mut best = (0u128, PeakBreakdown::default());
    let part = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
    // the parts at a moment of backward, and their sum
    let moment = |g: u128, saved: u128, transient: u128| {
        (
            base + g + saved + transient,
            PeakBreakdown {
                phase: "backward".into(),
                weights_bytes: part(weights),
                gradient_bytes: part(g),
                optimizer_bytes: part(optim),
                saved_activation_bytes: part(saved),
                transient_bytes: part(transient),
                parallel_bytes: part(parallel),
                overhead_bytes: 0,
            },
        )
    };
    let last = m.backward.len().saturating_sub(1);
    for (i, s) in m.backward.iter().enumerate() {
        if !grads_persist {
            g_alloc += u128::from(s.grads) * grad_per;
            // gradients of elements no step names appear with the last
            if i == last {
                g_alloc += unnamed;
            }
        }
        remaining += u128::from(s.recomputed);
        let live = base + g_alloc + remaining + u128::from(s.transient);
        if live > best.0 {
            best = moment(g_alloc, remaining, u128::from(s.transient));
        }
        remaining = remaining.saturating_sub(u128::from(s.freed));
    }
    if m.backward.is_empty() {
        // no step described: everything saved is held with every gradient
        best = moment(grads, remaining, 0);
    }
    // the optimizer step: foreach Adam makes a temporary the size of one moment
    let step_temp = match cfg.optimizer {
        Optimizer::Adam | Optimizer::Adamw => optim / 2,
        _ => 0,
    };
    let step = base + grads + step_temp;
    if step > best.0 {
        best = (
            step,
            PeakBreakdown {
                phase: "optimizer step".into(),
                weights_bytes: part(weights),
                gradient_bytes: part(grads),
                optimizer_bytes: part(optim),
                saved_activation_bytes: 0,
                transient_bytes: part(step_temp),
                parallel_bytes: part(parallel),
                overhead_bytes: 0,
            },
        );
    }
    let fit = |v: u128, what: &'static str| u64::try_from(v).map_err(|_| what);
    let allocated = fit(best.0, "the training step")?;
    let overhead = cfg.overhead.bytes(allocated);
    let mut peak = best.1;
    peak.overhead_bytes = overhead;
    let communication = match cfg.shard {
        _ if n == 1 => 0,
        // ring all-reduce of the gradients: 2(N-1)/N of their size
        Shard::None | Shard::TensorParallel | Shard::Ddp | Shard::Zero1 | Shard::Zero2 => {
            2 * p * u128::from(sb.grad) * (n - 1) / n
        }
        // parameters gathered in forward and backward, gradients reduce-scattered; a frozen
        // base (LoRA) is gathered too
        Shard::Zero3 | Shard::Fsdp => {
            (3 * p * u128::from(sb.grad) + 2 * u128::from(m.frozen_bytes)) * (n - 1) / n
        }
    };
    let host = u128::from(m.input_bytes)
        * u128::from(cfg.host.prefetch)
        * u128::from(cfg.host.workers.max(1))
        * if cfg.host.pinned { 2 } else { 1 };
    Ok(Account {
        weights_bytes: fit(weights, "the weights")?,
        gradient_bytes: fit(grads, "the gradients")?,
        optimizer_bytes: fit(optim, "the optimizer state")?,
        parallel_bytes: fit(parallel, "the gathered parameters")?,
        peak,
        overhead_bytes: overhead,
        total_bytes: allocated.checked_add(overhead).ok_or("the training step")?,
        communication_bytes: fit(communication, "the communication")?,
        host_bytes: fit(host, "the input pipeline")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::saved::Precision;

    fn model(backward: Vec<BackwardStep>) -> StepModel {
        StepModel {
            trainable: 100,
            per_param: StateBytes {
                weight: 4,
                grad: 4,
                optimizer: 8,
            },
            saved_bytes: 1000,
            backward,
            ..StepModel::default()
        }
    }

    fn cfg() -> TrainConfig {
        TrainConfig {
            precision: Precision::Fp32,
            overhead: crate::analysis::training::Overhead {
                cuda_context: 0,
                workspace: 0,
                fragmentation: 0.0,
            },
            ..TrainConfig::default()
        }
    }

    #[test]
    fn gradients_appear_as_saved_tensors_are_freed() {
        // two layers of 50 parameters; the last one's backward runs first
        let m = model(vec![
            BackwardStep {
                grads: 50,
                transient: 10,
                freed: 600,
                ..Default::default()
            },
            BackwardStep {
                grads: 50,
                transient: 10,
                freed: 400,
                ..Default::default()
            },
        ]);
        let a = account(&m, &cfg()).unwrap();
        // first step: weights 400 + Adam 800 + its 200 B of gradients + 1000 saved + 10
        assert_eq!(a.peak.phase, "backward");
        assert_eq!(a.peak.gradient_bytes, 200);
        assert_eq!(a.peak.saved_activation_bytes, 1000);
        assert_eq!(a.total_bytes, 400 + 800 + 200 + 1000 + 10);
        assert_eq!(a.gradient_bytes, 400);
    }

    #[test]
    fn accumulation_holds_every_gradient_from_the_start() {
        let m = model(vec![BackwardStep {
            grads: 100,
            freed: 1000,
            ..Default::default()
        }]);
        let c = TrainConfig {
            accumulate: 4,
            ..cfg()
        };
        let a = account(&m, &c).unwrap();
        assert_eq!(a.peak.gradient_bytes, 400);
        assert_eq!(a.total_bytes, 400 + 400 + 800 + 1000);
    }

    #[test]
    fn a_recomputed_block_is_held_while_its_backward_runs() {
        // 100 B of block inputs saved; the block's 700 B are made again in backward
        let m = StepModel {
            saved_bytes: 100,
            ..model(vec![
                BackwardStep {
                    recomputed: 700,
                    freed: 700,
                    ..Default::default()
                },
                BackwardStep {
                    freed: 100,
                    ..Default::default()
                },
            ])
        };
        let a = account(&m, &cfg()).unwrap();
        assert_eq!(a.peak.saved_activation_bytes, 800);
    }

    #[test]
    fn the_optimizer_step_can_be_the_peak() {
        let m = StepModel {
            saved_bytes: 0,
            ..model(vec![BackwardStep {
                grads: 100,
                ..Default::default()
            }])
        };
        let a = account(&m, &cfg()).unwrap();
        assert_eq!(a.peak.phase, "optimizer step");
        // weights + gradients + moments + the foreach temporary (one moment)
        assert_eq!(a.total_bytes, 400 + 400 + 800 + 400);
    }

    #[test]
    fn fsdp_shards_the_state_and_gathers_two_units() {
        let m = StepModel {
            gather_unit_bytes: 30,
            ..model(Vec::new())
        };
        let c = TrainConfig {
            gpus: 4,
            shard: Shard::Fsdp,
            ..cfg()
        };
        let a = account(&m, &c).unwrap();
        assert_eq!(
            (a.weights_bytes, a.gradient_bytes, a.optimizer_bytes),
            (100, 100, 200)
        );
        assert_eq!(a.parallel_bytes, 60);
        assert_eq!(a.communication_bytes, 3 * 400 * 3 / 4);
    }

    #[test]
    fn overflow_names_the_part() {
        let m = StepModel {
            trainable: u64::MAX,
            ..model(Vec::new())
        };
        assert!(account(&m, &cfg()).is_err());
    }
}
