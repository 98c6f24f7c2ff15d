//! Training memory of one step, per GPU: weights, gradients, optimizer state, activations saved
//! for backward, transient gradients, and a fixed overhead, under a precision, optimizer,
//! checkpointing, accumulation and sharding plan.
//!
//! Accounting (bytes per parameter P, Adam):
//! - fp32: weights 4, gradients 4, Adam's two moments 8: 16 B/param.
//! - `torch.autocast` (amp-fp16 / amp-bf16): the model stays fp32, so weights 4 + gradients 4 +
//!   moments 8 = 16 B/param of model state, plus autocast's half copy of every conv/linear weight
//!   (2 B/weight), which autograd saves and is counted with the saved activations. The "20 B/param"
//!   often quoted is DeepSpeed's fp16 recipe: half weights 2 + half gradients 2 + fp32 master 4 +
//!   fp32 gradient copy 4 + moments 8; with sharding nnlint uses DeepSpeed's layout (below).
//! - pure bf16: weights 2, gradients 2, moments 4 (in the parameter dtype): 8 B/param.
//! - Sharding over N GPUs (ZeRO paper, Rajbhandari et al. 2020; K = optimizer bytes incl. the fp32
//!   master copy under mixed precision, 12 for Adam): ZeRO-1 `2P + 2P + KP/N`, ZeRO-2
//!   `2P + (2 + K)P/N`, ZeRO-3 `(4 + K)P/N` plus the gathered parameters of the largest layer; FSDP
//!   (full shard) like ZeRO-3 with PyTorch's gradient dtype; DDP keeps a full replica plus gradient
//!   buckets of the gradients' size.
//!
//! The peak is found on a timeline: at the start of backward every saved activation is held; as
//! backward walks the graph in reverse, each layer's saved tensors are freed after its backward and
//! its parameter gradients appear (unless accumulation keeps them from the previous micro-step); the
//! gradients of the activations being differentiated are transient. The optimizer step holds weights,
//! gradients, moments and the foreach temporaries. The total is the larger of the two, plus the
//! overhead.

use super::fact::Fact;
use super::saved::{self, Device, Precision, Saved};
use super::shape::Inference;
use super::storage::{self, Role};
use crate::ir::{Dim, Graph, NodeId, ValueId};

crate::named_enum! {
    /// Optimizers and the state they keep per parameter.
    pub enum Optimizer {
        /// Plain SGD: no state.
        Sgd = "sgd",
        /// SGD with momentum: one buffer.
        Momentum = "momentum",
        /// Adam: two moments.
        Adam = "adam",
        /// AdamW: two moments (decoupled weight decay needs no extra state).
        Adamw = "adamw",
        /// bitsandbytes' 8-bit AdamW: two moments of 1 byte each.
        Adamw8bit = "adamw-8bit",
        /// bitsandbytes' paged 8-bit AdamW: as adamw-8bit, in memory that can page out to the host.
        PagedAdamw8bit = "paged-adamw-8bit",
    }
}

impl Optimizer {
    /// Number of state tensors per parameter.
    pub fn states(self) -> u64 {
        match self {
            Optimizer::Sgd => 0,
            Optimizer::Momentum => 1,
            Optimizer::Adam
            | Optimizer::Adamw
            | Optimizer::Adamw8bit
            | Optimizer::PagedAdamw8bit => 2,
        }
    }

    /// Whether each state takes one byte (bitsandbytes' block-wise 8-bit optimizers).
    pub fn is_8bit(self) -> bool {
        matches!(self, Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit)
    }

    /// Bytes of state per parameter whose state would otherwise take `elem` bytes each.
    pub fn state_bytes(self, elem: u64) -> u64 {
        self.states() * if self.is_8bit() { 1 } else { elem }
    }
}

crate::named_enum! {
    /// Data-parallel and sharding strategies.
    pub enum Shard {
        /// One GPU, or plain data parallel without gradient buckets.
        None = "none",
        /// DistributedDataParallel: a full replica plus gradient buckets.
        Ddp = "ddp",
        /// ZeRO stage 1: optimizer state sharded.
        Zero1 = "zero1",
        /// ZeRO stage 2: optimizer state and gradients sharded.
        Zero2 = "zero2",
        /// ZeRO stage 3: optimizer state, gradients and parameters sharded.
        Zero3 = "zero3",
        /// PyTorch FSDP, full shard.
        Fsdp = "fsdp",
        /// Tensor parallel serving (vLLM's `--tensor-parallel-size`): weights and heads split
        /// over the GPUs; `fit`'s serving rows only, never a training plan.
        TensorParallel = "tensor-parallel",
    }
}

/// Gradient checkpointing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Checkpoint {
    None,
    /// A segment boundary every k layers (layers with parameters).
    Every(u32),
    /// sqrt(n) segments of sqrt(n) layers (Chen et al. 2016).
    Sqrt,
}

impl std::str::FromStr for Checkpoint {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Checkpoint::None),
            "sqrt" => Ok(Checkpoint::Sqrt),
            _ => {
                let k = s
                    .strip_prefix("every:")
                    .or_else(|| s.strip_prefix("every="))
                    .unwrap_or(s);
                match k.parse::<u32>() {
                    Ok(k) if k >= 1 => Ok(Checkpoint::Every(k)),
                    _ => Err(format!(
                        "expected none, sqrt or every:K (K >= 1), got '{s}'"
                    )),
                }
            }
        }
    }
}

impl std::fmt::Display for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Checkpoint::None => f.write_str("none"),
            Checkpoint::Sqrt => f.write_str("sqrt"),
            Checkpoint::Every(k) => write!(f, "every:{k}"),
        }
    }
}

/// Fixed costs outside the model, with defaults documented in docs/training-memory.md.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Overhead {
    /// CUDA context and kernels loaded by the framework.
    pub cuda_context: u64,
    /// cuDNN / cuBLAS workspace.
    pub workspace: u64,
    /// Caching-allocator slack and fragmentation, as a fraction of the allocated peak.
    pub fragmentation: f64,
}

impl Overhead {
    /// The overhead on top of `allocated` bytes: context, workspace and allocator slack.
    pub fn bytes(&self, allocated: u64) -> u64 {
        // saturating: the settings bound the constants (1 PiB) and the fraction (10)
        self.cuda_context
            .saturating_add(self.workspace)
            .saturating_add((allocated as f64 * self.fragmentation) as u64)
    }
}

impl Default for Overhead {
    fn default() -> Self {
        Overhead {
            cuda_context: 512 << 20,
            workspace: 256 << 20,
            fragmentation: 0.05,
        }
    }
}

/// Input-pipeline settings for host memory.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct HostPipeline {
    pub workers: u32,
    pub prefetch: u32,
    pub pinned: bool,
}

impl Default for HostPipeline {
    fn default() -> Self {
        HostPipeline {
            workers: 4,
            prefetch: 2,
            pinned: true,
        }
    }
}

/// Everything that defines a training plan.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct TrainConfig {
    pub optimizer: Optimizer,
    pub precision: Precision,
    pub checkpoint: Checkpoint,
    /// Micro-batches per optimizer step.
    pub accumulate: u32,
    pub gpus: u32,
    pub shard: Shard,
    pub device: Device,
    pub overhead: Overhead,
    pub host: HostPipeline,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            optimizer: Optimizer::Adam,
            precision: Precision::Fp32,
            checkpoint: Checkpoint::None,
            accumulate: 1,
            gpus: 1,
            shard: Shard::None,
            device: Device::Cuda,
            overhead: Overhead::default(),
            host: HostPipeline::default(),
        }
    }
}

/// The training-memory estimate of one step, per GPU.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Training {
    pub config: TrainConfig,
    /// Parameters the step trains (the model's, or a LoRA's adapters).
    pub trainable_params: u64,
    pub micro_batch: Option<u64>,
    pub effective_batch: Option<u64>,
    /// Parameters and buffers as held on each GPU.
    pub weights_bytes: u64,
    /// All parameter gradients held on each GPU (full size, or the shard).
    pub gradient_bytes: u64,
    pub optimizer_bytes: u64,
    /// Activations saved for backward (with checkpointing: what is held at most).
    pub saved_activation_bytes: u64,
    /// Activations saved for backward without checkpointing.
    pub saved_activation_bytes_full: u64,
    /// Autocast half copies of conv/linear weights (part of the saved activations).
    pub autocast_weight_copy_bytes: u64,
    /// BatchNorm running statistics autograd references (part of the saved activations, and of the
    /// weights: counted once in the total).
    pub saved_buffer_bytes: u64,
    /// Extra buffers of the data-parallel strategy (DDP buckets, gathered parameters).
    pub parallel_bytes: u64,
    /// CUDA context, workspace and allocator slack.
    pub overhead_bytes: u64,
    /// The estimated peak per GPU.
    pub total_bytes: u64,
    /// What is live at the peak.
    pub peak: PeakBreakdown,
    /// Extra forward MACs that checkpointing recomputes, and their share of a step's compute.
    pub recompute_macs: u64,
    pub recompute_fraction: f64,
    /// Bytes each GPU sends per optimizer step.
    pub communication_bytes: u64,
    /// Host memory of the input pipeline.
    pub host_bytes: u64,
    /// Per node: saved bytes and parameter-gradient bytes.
    #[serde(skip)]
    pub per_node: Vec<(u64, u64)>,
    /// Whether the total is a lower bound: something it would include could not be counted.
    pub lower_bound: bool,
    /// What could not be counted (empty when the estimate is exact).
    pub unknown: Vec<String>,
    pub notes: Vec<String>,
}

/// The parts of the total at the peak moment.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct PeakBreakdown {
    /// `backward` or `optimizer step`.
    pub phase: String,
    pub weights_bytes: u64,
    pub gradient_bytes: u64,
    pub optimizer_bytes: u64,
    pub saved_activation_bytes: u64,
    pub transient_bytes: u64,
    pub parallel_bytes: u64,
    pub overhead_bytes: u64,
}

/// Bytes per parameter of its weight, gradient and optimizer state under a plan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateBytes {
    pub weight: u64,
    pub grad: u64,
    pub optimizer: u64,
}

pub fn state_bytes(c: &TrainConfig) -> StateBytes {
    let sharded_mixed =
        c.precision.is_autocast() && matches!(c.shard, Shard::Zero1 | Shard::Zero2 | Shard::Zero3);
    match c.precision {
        Precision::Bf16 => StateBytes {
            weight: 2,
            grad: 2,
            optimizer: c.optimizer.state_bytes(2),
        },
        // DeepSpeed's mixed precision: half weights and gradients, fp32 master copy with the state
        _ if sharded_mixed => StateBytes {
            weight: 2,
            grad: 2,
            optimizer: 4 + c.optimizer.state_bytes(4),
        },
        _ => StateBytes {
            weight: 4,
            grad: 4,
            optimizer: c.optimizer.state_bytes(4),
        },
    }
}

/// Bytes of model state (weights, gradients, optimizer) per parameter under a plan, unsharded.
pub fn bytes_per_param(c: &TrainConfig) -> u64 {
    let s = state_bytes(c);
    s.weight + s.grad + s.optimizer
}

/// Layers for checkpoint segments: nodes that read a trainable parameter, in order.
fn param_layers(graph: &Graph) -> Vec<NodeId> {
    let mut out: Vec<NodeId> = graph
        .stored_tensors()
        .filter(|(id, t)| {
            storage::classify(graph, *id, t.dtype, t.numel().unwrap_or(0)) == Role::Param
        })
        .filter_map(|(id, _)| storage::charged_node(graph, id))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Saved bytes with checkpoint segments, and the MACs recomputed.
fn checkpointed(
    graph: &Graph,
    saved: &Saved,
    macs: &[u64],
    ckpt: Checkpoint,
    facts: &[Fact],
    notes: &mut Vec<String>,
) -> (u64, u64) {
    let layers = param_layers(graph);
    let starts: Vec<NodeId> = match ckpt {
        Checkpoint::None => return (saved.total, 0),
        Checkpoint::Every(k) => layers.iter().step_by(k as usize).copied().collect(),
        // sqrt(n) segments holding about the same saved bytes each (Chen et al.'s greedy split):
        // equal layer counts would leave the large early activations in one segment
        Checkpoint::Sqrt => {
            let k = (layers.len() as f64).sqrt().ceil().max(1.0) as u64;
            let mut before = vec![0u64; graph.nodes.len() + 1];
            for &(_, bytes, node) in &saved.storages {
                before[node + 1] += bytes;
            }
            for i in 1..before.len() {
                before[i] += before[i - 1];
            }
            let mut starts = vec![layers.first().copied().unwrap_or(0)];
            let mut next = 1;
            for &l in &layers {
                if next < k && before[l] * k >= saved.total * next {
                    if l != starts[starts.len() - 1] {
                        starts.push(l);
                    }
                    next += 1;
                }
            }
            starts
        }
    };
    let seg_len = layers.len().div_ceil(starts.len().max(1));
    if starts.len() <= 1 {
        notes.push("checkpointing: the model has too few layers to split into segments".into());
        return (saved.total, 0);
    }
    let n = graph.nodes.len();
    let mut bounds: Vec<(NodeId, NodeId)> = Vec::new();
    let mut first = 0;
    for &s in starts.iter().skip(1) {
        bounds.push((first, s));
        first = s;
    }
    bounds.push((first, n));
    let segment_of = |node: NodeId| segment_of(&bounds, node);
    // saved bytes per segment
    let mut seg_saved = vec![0u64; bounds.len()];
    for &(_, bytes, node) in &saved.storages {
        seg_saved[segment_of(node)] += bytes;
    }
    let boundary = boundary_bytes(graph, facts, &bounds);
    let last = *seg_saved.last().unwrap_or(&0);
    let worst = seg_saved[..seg_saved.len() - 1]
        .iter()
        .copied()
        .max()
        .unwrap_or(0);
    let recompute: u64 = (0..bounds[bounds.len() - 1].0).map(|i| macs[i]).sum();
    notes.push(format!(
        "checkpointing: {} segments (about {} layers each); {} boundary bytes kept, one segment recomputed at a time",
        bounds.len(),
        seg_len,
        boundary
    ));
    (boundary + last.max(worst), recompute)
}

/// The segment holding `node`; the bounds are contiguous and ordered, from node 0 to the last (a
/// bisection).
fn segment_of(bounds: &[(NodeId, NodeId)], node: NodeId) -> usize {
    let i = bounds.partition_point(|&(_, end)| end <= node);
    if i < bounds.len() && node >= bounds[i].0 {
        i
    } else {
        0
    }
}

/// Bytes of the boundary tensors that checkpointing keeps: each value produced in one segment and
/// read in a later one, counted once. The segments are contiguous, so this is what checking each
/// later segment's start finds, in one pass rather than one pass per segment (n^1.5 in the number
/// of nodes, at each of `fit`'s planner steps).
fn boundary_bytes(graph: &Graph, facts: &[Fact], bounds: &[(NodeId, NodeId)]) -> u64 {
    let mut boundary = 0u64;
    for (v, val) in graph.values.iter().enumerate() {
        let Some((p, _)) = val.producer() else {
            continue;
        };
        let made_in = segment_of(bounds, p);
        if graph
            .consumers(v)
            .iter()
            .any(|(c, _)| segment_of(bounds, c) > made_in)
        {
            boundary += facts[v].bytes().and_then(|d| d.as_u64()).unwrap_or(0);
        }
    }
    boundary
}

/// The last node (in topological order) that reads `v`, looking through ops that only re-lay
/// it out, up to `depth` of them.
fn last_reader(graph: &Graph, v: ValueId, depth: u32) -> Option<NodeId> {
    let mut last = None;
    for (n, _) in graph.consumers(v) {
        let node = &graph.nodes[n];
        let through = depth > 0
            && matches!(
                node.op_type.as_str(),
                "Transpose" | "Identity" | "Cast" | "Reshape" | "DequantizeLinear"
            );
        let here = match node.output(0) {
            Some(o) if through => last_reader(graph, o, depth - 1).or(Some(n)),
            _ => Some(n),
        };
        last = last.max(here);
    }
    last
}

/// The loss a graph that ends before it leaves to its user: `None` when an output is a rank-0
/// scalar (a training export with its loss) or no output is a float tensor. Otherwise the bytes of
/// its outputs' elements, over which nnlint assumes the usual loss, a cross-entropy computed in
/// fp32 as transformers' and torchvision's recipes do: it keeps an fp32 log-softmax of the
/// outputs, and backward starts with the gradients of that and of the outputs (fp32). So the
/// first step of backward holds 12 B per output element beyond the graph's own tensors, which
/// is what a checkpoint folder's head and loss hold (docs/training-memory.md).
fn implied_loss(graph: &Graph, facts: &[Fact]) -> Option<(u64, String)> {
    let float_outputs: Vec<(ValueId, u64)> = graph
        .outputs
        .iter()
        .filter(|&&v| facts[v].dtype.is_some_and(|d| d.is_float()))
        .filter_map(|&v| Some((v, facts[v].numel()?.as_u64()?)))
        .collect();
    // a rank-0 float output is a loss (a training export); an output of one element at batch 1
    // ([N, 1] regression) is not
    let scalar = graph.outputs.iter().any(|&v| {
        facts[v].dtype.is_some_and(|d| d.is_float())
            && facts[v].shape.as_ref().is_some_and(|s| s.is_empty())
    });
    if float_outputs.is_empty() || scalar {
        return None;
    }
    let numel = float_outputs
        .iter()
        .fold(0u64, |s, &(_, n)| s.saturating_add(n));
    let bytes = numel.saturating_mul(12);
    let names: Vec<String> = float_outputs
        .iter()
        .map(|&(v, _)| format!("'{}'", graph.value_name(v)))
        .collect();
    Some((
        bytes,
        format!(
            "the graph ends before its loss: a cross-entropy in fp32 over {} is assumed, which holds {} at the start of backward (its log-softmax and the two gradients: 12 B per output element); a loss that keeps less makes the peak smaller",
            names.join(", "),
            crate::util::units::bytes(bytes)
        ),
    ))
}

/// Per value, whether it depends on a graph input (a value made from parameters alone, such
/// as a transposed or cast weight, has the parameter's gradient, counted with the gradients).
fn input_dependent(graph: &Graph) -> Vec<bool> {
    let mut dep = vec![false; graph.values.len()];
    for &v in &graph.inputs {
        // an input with an initializer (older exporters list weights as inputs) is a weight
        dep[v] = graph.stored(v).is_none();
    }
    // nodes are in topological order
    for node in &graph.nodes {
        if node.inputs().values().any(|v| dep[v]) {
            for o in node.outputs().values() {
                dep[o] = true;
            }
        }
    }
    dep
}

/// Bytes of the values a node reads and writes that are activations (the gradients of which are
/// transient in its backward).
fn node_activation_bytes(graph: &Graph, facts: &[Fact], dep: &[bool], n: NodeId, elem: u64) -> u64 {
    let node = &graph.nodes[n];
    let numel = |v: ValueId| facts[v].numel().and_then(|d| d.as_u64()).unwrap_or(0);
    let float = |v: ValueId| facts[v].dtype.is_some_and(|d| d.is_float()) && dep[v];
    let elems: u64 = node
        .outputs()
        .iter()
        .chain(node.inputs())
        .flatten()
        .filter(|&v| float(v))
        .map(numel)
        .sum();
    elems * elem
}

/// Estimates one training step from a shape inference at the micro-batch.
/// Whether the estimate's plain `u64` arithmetic stays in range: every byte count it forms is at
/// most a small multiple of the model's activations, its stored tensors, or the input pipeline's
/// product (input bytes x prefetch x workers x pinned copies), and the step's batch product.
/// Bounds them in u128 with a generous factor and says which is too large.
pub fn check_range(graph: &Graph, inf: &Inference, cfg: &TrainConfig) -> Result<(), String> {
    let saved = saved::saved_tensors(graph, &inf.facts, &inf.ops, cfg.precision, cfg.device);
    check_range_with(graph, inf, cfg, &saved)
}

/// [`check_range`], then [`estimate`], walking the saved tensors once.
pub fn checked_estimate(
    graph: &Graph,
    inf: &Inference,
    cfg: &TrainConfig,
) -> Result<Training, String> {
    let saved = saved::saved_tensors(graph, &inf.facts, &inf.ops, cfg.precision, cfg.device);
    check_range_with(graph, inf, cfg, &saved)?;
    Ok(estimate_with(graph, inf, cfg, saved))
}

fn check_range_with(
    graph: &Graph,
    inf: &Inference,
    cfg: &TrainConfig,
    saved: &Saved,
) -> Result<(), String> {
    // each term of the peak at most LIMIT: their sum and the overhead (up to 10× the peak, plus
    // 2 PiB) stay below u64::MAX
    const LIMIT: u128 = (u64::MAX / 256) as u128;
    // from the element count, in u128: a byte size past 64 bits is what this guard is for
    let bytes = |v: usize| -> u128 {
        let f = &inf.facts[v];
        let numel = f.numel().and_then(|d| d.as_u64()).map_or(0, u128::from);
        let bits = f.dtype.and_then(|d| d.bits()).unwrap_or(64);
        numel * u128::from(bits.div_ceil(8))
    };
    let activations: u128 = (0..graph.values.len()).map(bytes).sum();
    // logical elements (a packed 4-bit tensor holds two per byte), whatever their byte size: the
    // estimate charges each parameter its weight, gradient and optimizer state (at most 32 bytes)
    let stored: u128 = graph
        .stored_tensors()
        .map(|(_, t)| u128::from(t.numel().unwrap_or(0)) * 2 * 32)
        .sum();
    let inputs: u128 = graph.inputs.iter().map(|&v| bytes(v)).sum();
    let host = inputs * u128::from(cfg.host.prefetch) * u128::from(cfg.host.workers.max(1)) * 2;
    let step = u128::from(inf.batch.unwrap_or(1))
        * u128::from(cfg.accumulate.max(1))
        * u128::from(cfg.gpus.max(1));
    // what backward keeps can exceed the activations: a zero-size input with 2^63 channels
    // leaves BatchNorm's per-channel statistics that large (the sum saturates at u64::MAX)
    if u128::from(saved.total) > LIMIT {
        let (n, bytes) = (0..graph.nodes.len())
            .map(|n| (n, saved.per_node.get(n).copied().unwrap_or(0)))
            .max_by_key(|&(_, b)| b)
            .unwrap_or((0, saved.total));
        let at = graph.nodes.get(n).map_or_else(String::new, |node| {
            let size = if bytes == u64::MAX {
                "2^64 bytes or more".to_string()
            } else {
                format!("{bytes} bytes")
            };
            format!(" (the largest: {}, {size})", graph.label(node))
        });
        return Err(format!(
            "the training estimate is out of range: the tensors saved for backward overflow 64-bit arithmetic{at}; use smaller values"
        ));
    }
    for (what, v) in [
        ("the activations", activations * 8),
        (
            "the stored tensors with their gradients and optimizer state",
            stored * 8,
        ),
        (
            "the input pipeline's host memory (--workers x --prefetch)",
            host,
        ),
        (
            "the effective batch (--batch x --accumulate x --gpus)",
            step,
        ),
    ] {
        if v > LIMIT {
            return Err(format!(
                "the training estimate is out of range: {what} overflow 64-bit arithmetic; use smaller values"
            ));
        }
    }
    Ok(())
}

/// The training step's memory; callers first check [`check_range`] on hostile settings.
pub fn estimate(graph: &Graph, inf: &Inference, cfg: &TrainConfig) -> Training {
    let saved = saved::saved_tensors(graph, &inf.facts, &inf.ops, cfg.precision, cfg.device);
    estimate_with(graph, inf, cfg, saved)
}

fn estimate_with(graph: &Graph, inf: &Inference, cfg: &TrainConfig, saved: Saved) -> Training {
    let (facts, batch) = (&inf.facts[..], inf.batch);
    let mut notes = Vec::new();
    // what the estimate could not count: it is then a lower bound
    let mut unknown = Vec::new();
    let mode = super::export_mode::inference_export(graph, facts);
    unknown.extend(mode.unknown);
    notes.extend(mode.note);
    let loss = implied_loss(graph, facts);
    notes.extend(loss.as_ref().map(|l| l.1.clone()));
    if !saved.unmodelled.is_empty() {
        let mut ops: Vec<&str> = saved
            .unmodelled
            .iter()
            .map(|&n| graph.nodes[n].op_type.as_str())
            .collect();
        ops.sort_unstable();
        ops.dedup();
        unknown.push(format!(
            "{} node{} of unknown ops ({}): what they save for backward",
            saved.unmodelled.len(),
            if saved.unmodelled.len() == 1 { "" } else { "s" },
            ops.join(", ")
        ));
    }
    let macs: Vec<u64> = inf
        .macs
        .iter()
        .map(|m| m.as_ref().and_then(Dim::as_u64).unwrap_or(0))
        .collect();
    let n_gpus = cfg.gpus.max(1) as u64;

    // parameters per node, and buffers
    let mut node_params = vec![0u64; graph.nodes.len()];
    let (mut params, mut buffers) = (0u64, 0u64);
    let mut largest_layer = 0u64;
    // the tensors `mem` counts, counted the same way: logical element counts (packed 4-bit
    // weights included), charged to the layer that reads them (through a DequantizeLinear)
    let mut unsized_tensors = 0usize;
    // (node charged with a parameter, node whose backward makes its gradient, elements)
    let mut grad_moves: Vec<(NodeId, NodeId, u64)> = Vec::new();
    for (n, p, b, _) in storage::implied(graph) {
        params = params.saturating_add(p);
        buffers = buffers.saturating_add(b);
        node_params[n] = node_params[n].saturating_add(p);
    }
    for (id, t) in graph.stored_tensors() {
        let Some(numel) = t.numel() else {
            unsized_tensors += 1;
            continue;
        };
        let numel = storage::logical_numel(graph, id, t.dtype, numel);
        match storage::classify(graph, id, t.dtype, numel) {
            Role::Param => {
                // a shared tensor stands for each reader's own parameter
                let shared = storage::shared_readers(graph, id, t);
                let owner = match shared {
                    Some(_) => None,
                    None => storage::charged_node(graph, id),
                };
                let readers = shared.unwrap_or_else(|| owner.into_iter().collect());
                params = params.saturating_add(numel.saturating_mul(readers.len().max(1) as u64));
                for n in readers {
                    node_params[n] = node_params[n].saturating_add(numel);
                }
                // its gradient is made by its last reader in forward (a tied embedding's, by
                // the output projection reading it again), whose backward runs first
                if let Some((o, last)) =
                    owner.and_then(|o| Some((o, last_reader(graph, id, 4).filter(|&l| l > o)?)))
                {
                    grad_moves.push((o, last, numel));
                }
            }
            Role::Buffer => buffers = buffers.saturating_add(numel),
            Role::Constant => {}
        }
    }
    if unsized_tensors > 0 {
        unknown.push(format!(
            "{unsized_tensors} stored tensor{} of unknown size",
            if unsized_tensors == 1 { "" } else { "s" }
        ));
    }
    if !saved.size_unknown.is_empty() {
        unknown.push(format!(
            "{} node{} saving tensors of unknown size (first: {})",
            saved.size_unknown.len(),
            if saved.size_unknown.len() == 1 {
                ""
            } else {
                "s"
            },
            graph.label(&graph.nodes[saved.size_unknown[0]])
        ));
    }
    for &p in &node_params {
        largest_layer = largest_layer.max(p);
    }

    let sb = state_bytes(cfg);
    if cfg.shard != Shard::None && cfg.gpus.max(1) == 1 {
        notes.push("sharding over one GPU shards nothing (--gpus)".to_string());
    }

    let (saved_bytes, recompute) =
        checkpointed(graph, &saved, &macs, cfg.checkpoint, facts, &mut notes);
    let fwd_macs: u64 = macs.iter().sum();
    let recompute_fraction = if fwd_macs > 0 {
        recompute as f64 / (3 * fwd_macs) as f64
    } else {
        0.0
    };

    // backward, node by node in reverse: each node's parameter gradients appear where PyTorch
    // makes them (a parameter read by several nodes, as a tied embedding is, at the last reader
    // in forward: the first to run backward)
    let act_elem = if cfg.precision == Precision::Fp32 {
        4
    } else {
        2
    };
    let scale = if saved.total > 0 {
        saved_bytes as f64 / saved.total as f64
    } else {
        1.0
    };
    let mut grad_at = node_params.clone();
    // the earlier reader's contribution arrives when the gradient exists: the new gradient and
    // their sum, each the parameter's size (as the checkpoint's tape counts it)
    let mut accumulate = vec![0u64; graph.nodes.len()];
    for (owner, last, numel) in grad_moves {
        let numel = numel.min(grad_at[owner]);
        grad_at[owner] -= numel;
        grad_at[last] = grad_at[last].saturating_add(numel);
        accumulate[owner] = accumulate[owner].saturating_add(numel.saturating_mul(2 * sb.grad));
    }
    let dep = input_dependent(graph);
    // the loss the graph leaves out runs backward first
    let loss_step = loss.map(|(bytes, _)| super::step::BackwardStep {
        transient: bytes,
        ..Default::default()
    });
    let backward =
        loss_step
            .into_iter()
            .chain((0..graph.nodes.len()).rev().map(|n| {
                super::step::BackwardStep {
                    grads: grad_at[n],
                    recomputed: 0,
                    transient: node_activation_bytes(graph, facts, &dep, n, act_elem)
                        .saturating_add(accumulate[n]),
                    freed: (saved.per_node[n] as f64 * scale) as u64,
                }
            }))
            .collect();
    let input_bytes: u64 = graph
        .inputs
        .iter()
        .map(|&v| facts[v].bytes().and_then(|d| d.as_u64()).unwrap_or(0))
        .sum();
    let step = super::step::StepModel {
        trainable: params,
        per_param: sb,
        frozen_bytes: 0,
        buffer_bytes: buffers * 4,
        // the largest layer's parameters, gathered in the compute dtype
        gather_unit_bytes: largest_layer
            * if cfg.precision == Precision::Fp32 {
                4
            } else {
                2
            },
        saved_bytes,
        backward,
        input_bytes,
    };
    // `check_range` bounds every part first
    let acc = super::step::account(&step, cfg).unwrap_or_default();

    let per_node = (0..graph.nodes.len())
        .map(|n| (saved.per_node[n], node_params[n] * sb.grad))
        .collect();
    let effective_batch = batch.map(|b| b * cfg.accumulate.max(1) as u64 * n_gpus);
    Training {
        config: *cfg,
        trainable_params: params,
        micro_batch: batch,
        effective_batch,
        weights_bytes: acc.weights_bytes,
        gradient_bytes: acc.gradient_bytes,
        optimizer_bytes: acc.optimizer_bytes,
        saved_activation_bytes: saved_bytes,
        saved_activation_bytes_full: saved.total,
        autocast_weight_copy_bytes: saved.weight_copy_bytes,
        saved_buffer_bytes: saved.buffer_bytes,
        parallel_bytes: acc.parallel_bytes,
        overhead_bytes: acc.overhead_bytes,
        total_bytes: acc.total_bytes,
        peak: acc.peak,
        recompute_macs: recompute,
        recompute_fraction,
        communication_bytes: acc.communication_bytes,
        host_bytes: acc.host_bytes,
        per_node,
        lower_bound: !unknown.is_empty(),
        unknown,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Attrs, Dim, GraphBuilder};

    /// The definition, one pass per segment: a value produced before a segment's start and read
    /// at or after it, counted once.
    fn boundary_by_segments(graph: &Graph, facts: &[Fact], bounds: &[(NodeId, NodeId)]) -> u64 {
        let mut boundary = 0u64;
        let mut counted = std::collections::HashSet::new();
        for (seg, &(start, _)) in bounds.iter().enumerate().skip(1) {
            for (v, val) in graph.values.iter().enumerate() {
                let Some((p, _)) = val.producer() else {
                    continue;
                };
                if p >= start || counted.contains(&v) {
                    continue;
                }
                if graph
                    .consumers(v)
                    .iter()
                    .any(|(c, _)| c >= start && segment_of(bounds, c) >= seg)
                {
                    counted.insert(v);
                    boundary += facts[v].bytes().and_then(|d| d.as_u64()).unwrap_or(0);
                }
            }
        }
        boundary
    }

    #[test]
    fn boundaries_in_one_pass_equal_a_pass_per_segment() {
        // a chain of 60 nodes, each also reading an output 1 to 17 nodes back (skips across
        // segments of every length), each value of its own size
        let mut b = GraphBuilder::new("g", false);
        let x = b.value("x");
        b.add_input(x);
        for i in 0..60usize {
            let prev = if i == 0 {
                "x".to_string()
            } else {
                format!("v{}", i - 1)
            };
            let back = i.saturating_sub(1 + (i * 7) % 17);
            let skip = if back == 0 {
                "x".to_string()
            } else {
                format!("v{}", back - 1)
            };
            b.add_node(
                &format!("n{i}"),
                "Add",
                String::new(),
                &[prev, skip],
                &[format!("v{i}")],
                Attrs::default(),
            );
        }
        let out = b.value("v59");
        b.add_output(out);
        let g = b.finish().unwrap();
        let facts: Vec<Fact> = (0..g.values.len())
            .map(|v| Fact {
                dtype: Some(crate::ir::DType::F32),
                shape: Some(vec![Dim::known(1 + v as i64)].into()),
                value: None,
            })
            .collect();
        let n = g.nodes.len();
        for starts in [
            vec![0, 30],
            vec![0, 5, 20, 21, 40],
            vec![0, 1, 2, 59],
            (0..n).step_by(7).collect(),
        ] {
            let mut bounds = Vec::new();
            for w in starts.windows(2) {
                bounds.push((w[0], w[1]));
            }
            bounds.push((*starts.last().unwrap(), n));
            let want = boundary_by_segments(&g, &facts, &bounds);
            assert!(want > 0, "{starts:?}");
            assert_eq!(boundary_bytes(&g, &facts, &bounds), want, "{starts:?}");
        }
        for node in 0..n {
            let bounds = [(0, 10), (10, 11), (11, 40), (40, n)];
            let want = bounds
                .iter()
                .position(|&(a, e)| node >= a && node < e)
                .unwrap();
            assert_eq!(segment_of(&bounds, node), want);
        }
    }
}
