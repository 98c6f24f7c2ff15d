//! Whether an ONNX graph was exported for inference. `torch.onnx.export` exports in eval mode by
//! default: BatchNorm is folded into the convolution before it (or kept with
//! `training_mode=0`) and Dropout is removed. Training the network keeps what those layers save,
//! so a training estimate read off such a graph is a lower bound; [`inference_export`] says why.

use super::fact::Fact;
use crate::ir::{Graph, Node, NodeId};
use crate::util::units::bytes;

/// Activations a folded BatchNorm's convolution feeds directly.
const ACTIVATIONS: &[&str] = &[
    "Relu",
    "Clip",
    "LeakyRelu",
    "PRelu",
    "HardSwish",
    "HardSigmoid",
    "Sigmoid",
    "Elu",
    "Selu",
    "Celu",
    "Mish",
    "Softplus",
    "Tanh",
    "Gelu",
];

fn onnx_domain(n: &Node) -> bool {
    n.domain.is_empty() || n.domain == "ai.onnx"
}

/// A boolean input's constant value, when the graph fixes it.
fn constant_bool(facts: &[Fact], n: &Node, slot: usize) -> Option<bool> {
    let v = n.input(slot)?;
    let x = facts
        .get(v)?
        .value
        .as_deref()?
        .as_f64s()?
        .first()
        .copied()?;
    Some(x != 0.0)
}

/// Whether the node is a BatchNormalization in training mode (opset 14's `training_mode=1`, or
/// the running-statistics outputs older training exports have).
fn training_bn(n: &Node) -> bool {
    n.attrs.int_or("training_mode", 0).unwrap_or(0) == 1 || n.outputs().values().count() > 1
}

/// Whether `n`'s output reaches only an activation: `Conv → Relu` (or SiLU's `Sigmoid` and `Mul`
/// on the same value).
fn into_activation(g: &Graph, n: &Node) -> bool {
    let Some(y) = n.output(0) else {
        return false;
    };
    let consumers = g.consumers(y);
    let op = |c: (NodeId, usize)| g.nodes[c.0].op_type.as_str();
    match consumers.len() {
        1 => consumers
            .get(0)
            .is_some_and(|c| ACTIVATIONS.contains(&op(c))),
        2 => {
            let mut ops: Vec<&str> = consumers.iter().map(op).collect();
            ops.sort_unstable();
            ops == ["Mul", "Sigmoid"]
        }
        _ => false,
    }
}

/// What an inference export means for a training estimate of it.
#[derive(Debug, Default, PartialEq)]
pub struct ExportMode {
    /// Why the estimate is a lower bound: BatchNorms folded into the convolutions.
    pub unknown: Option<String>,
    /// Inference-mode layers still in the graph, counted as training runs them.
    pub note: Option<String>,
}

const EXACT: &str = "for the exact answer export with model.train() (TorchScript exporter: torch.onnx.export(..., training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False))";

/// Whether `g` is an inference export, and what that does to its training estimate. A
/// BatchNormalization or Dropout still in the graph is counted as training runs it, whatever its
/// mode; what an eval export removes (a BatchNorm folded into its convolution, a Dropout dropped)
/// cannot be counted: the estimate is then a lower bound, or (when nothing shows a removal) the
/// note says what may be missing.
pub fn inference_export(g: &Graph, facts: &[Fact]) -> ExportMode {
    let (mut train, mut eval_bn, mut eval_dropout) = (0usize, 0usize, 0usize);
    // convolutions with a bias straight into an activation: a folded BatchNorm's signature
    let mut signature = 0usize;
    let fused: std::collections::HashSet<&str> =
        g.fused_eval_norms.iter().map(String::as_str).collect();
    // the convolutions that may hold a folded BatchNorm, and their outputs' bytes (what each
    // BatchNorm would keep for backward)
    let (mut folded, mut folded_bytes) = (0usize, 0u64);
    for n in g.nodes.iter().filter(|n| onnx_domain(n)) {
        let out_name = n.output(0).map(|y| g.value_name(y));
        let marked = out_name.is_some_and(|o| fused.contains(o));
        match n.op_type.as_str() {
            "BatchNormalization" if training_bn(n) => train += 1,
            "BatchNormalization" => eval_bn += 1,
            "Dropout" => match constant_bool(facts, n, 2) {
                Some(true) => train += 1,
                // no training_mode input: inference (the ratio alone changes nothing)
                _ => eval_dropout += 1,
            },
            _ => {}
        }
        let conv = matches!(n.op_type.as_str(), "Conv" | "ConvTranspose");
        if conv && n.input(2).is_some() && into_activation(g, n) {
            signature += 1;
        }
        if marked || (conv && n.input(2).is_some()) {
            folded += 1;
            let out = n.output(0).and_then(|y| facts.get(y)?.bytes()?.as_u64());
            folded_bytes = folded_bytes.saturating_add(out.unwrap_or(0));
        }
    }
    if signature == 0 && fused.is_empty() {
        folded = 0;
    }
    let mut out = ExportMode::default();
    if train > 0 {
        return out;
    }
    let attention = g
        .nodes
        .iter()
        .any(|n| onnx_domain(n) && n.op_type == "Softmax");
    if folded > 0 {
        let why = if fused.is_empty() {
            format!(
                "{signature} convolution{} with a bias straight into an activation and no training-mode BatchNorm or Dropout in the graph, the signature of BatchNorms folded into the convolutions",
                plural(signature)
            )
        } else {
            format!(
                "the exporter's metadata says {} inference-mode BatchNorm{} were fused into the convolutions",
                fused.len(),
                plural(fused.len())
            )
        };
        out.unknown = Some(format!(
            "an inference export: {why} (training keeps each BatchNorm's input as well: about {} more over {folded} convolution{} at this batch) and Dropouts removed; {EXACT}",
            bytes(folded_bytes),
            plural(folded)
        ));
    } else if eval_bn + eval_dropout > 0 {
        let mut what = Vec::new();
        if eval_bn > 0 {
            what.push(format!(
                "{eval_bn} BatchNormalization node{} in inference mode",
                plural(eval_bn)
            ));
        }
        if eval_dropout > 0 {
            what.push(format!(
                "{eval_dropout} Dropout node{} without training_mode",
                plural(eval_dropout)
            ));
        }
        out.note = Some(format!(
            "an inference export ({}): counted as training runs them; a Dropout the export removed cannot be seen; {EXACT}",
            what.join(", ")
        ));
    } else if attention && eval_dropout == 0 {
        // an eval-mode export and a model without dropout look the same
        out.note = Some(format!(
            "no Dropout in the graph: an eval-mode export removes it, so if the model trains with dropout (BERT and GPT-2 do, 0.1) what it keeps for backward is not counted; {EXACT}"
        ));
    }
    out
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
