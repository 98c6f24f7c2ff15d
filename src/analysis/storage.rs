//! What each stored tensor is: a trainable parameter, a buffer (non-trainable state such as
//! BatchNorm running statistics), or a constant (shape vectors, scalars, index tables).
//!
//! The rule, which reproduces PyTorch's `sum(p.numel() for p in model.parameters())` on exports with
//! BatchNorm preserved: a floating-point initializer with more than one element is a parameter,
//! unless it feeds a BatchNorm's mean or variance (a buffer) or only feeds inputs that are never
//! weights (a reshape target, resize scales, clip bounds...). Everything else is a constant.

use super::ops::{def_of, SlotRole};
use crate::ir::{DType, Graph, Tensor, ValueId, Values};

/// The role of a stored tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Param,
    Buffer,
    Constant,
}

/// The role the registry gives input `slot` of a node (unknown ops: data).
fn slot_role(graph: &Graph, node: usize, slot: usize) -> SlotRole {
    def_of(&graph.nodes[node]).map_or(SlotRole::Data, |d| d.slots.role(slot))
}

/// Classifies the stored tensor (initializer or `Constant` output) of value `id`, of the given
/// element type and count, from how the graph uses it. A quantized weight (int8, int4, packed
/// uint8, read by a quantized op's weight slot or a `DequantizeLinear`) is a parameter whatever
/// its type; its scales and zero points are buffers.
pub fn classify(graph: &Graph, id: ValueId, dtype: DType, numel: u64) -> Role {
    let uses = graph.consumers(id);
    // what the readers' slots say, in one pass (a list of roles per stored tensor was an
    // allocation per call, two per initializer on every `mem`)
    let (mut buffer, mut quant_weight, mut all_quant_params, mut all_config) =
        (false, false, true, true);
    for (n, slot) in uses {
        let role = match slot_role(graph, n, slot) {
            // a quantized embedding table: gathered, then dequantized
            SlotRole::Table if feeds_dequantize(graph, n) => SlotRole::QuantWeight,
            SlotRole::Table | SlotRole::Affine => SlotRole::Data,
            role => role,
        };
        buffer |= role == SlotRole::Buffer;
        quant_weight |= role == SlotRole::QuantWeight;
        all_quant_params &= role == SlotRole::QuantParam;
        all_config &= role == SlotRole::Config;
    }
    if buffer {
        return Role::Buffer;
    }
    if numel >= 1 && quant_weight && !dtype.is_float() {
        return Role::Param;
    }
    if !uses.is_empty() && all_quant_params {
        return Role::Buffer;
    }
    if !dtype.is_float() || numel <= 1 {
        return Role::Constant;
    }
    if !uses.is_empty() && all_config {
        return Role::Constant;
    }
    // values a Scatter writes into a mask, and masks or folded biases added to attention scores
    let scattered = !uses.is_empty()
        && uses
            .iter()
            .all(|(n, slot)| slot_role(graph, n, slot) == SlotRole::Updates);
    if scattered
        || graph
            .stored(id)
            .is_some_and(|t| attention_bias(graph, id, t))
    {
        return Role::Constant;
    }
    Role::Param
}

fn is(graph: &Graph, n: usize, name: &str) -> bool {
    def_of(&graph.nodes[n]).is_some_and(|d| d.name == name && d.domain.is_empty())
}

/// Whether node `n`'s first output is read by a `DequantizeLinear` as its data.
fn feeds_dequantize(graph: &Graph, n: usize) -> bool {
    graph.nodes[n].output(0).is_some_and(|v| {
        graph
            .consumers(v)
            .iter()
            .any(|(c, slot)| slot == 0 && is(graph, c, "DequantizeLinear"))
    })
}

/// The logical element count of a stored tensor: a uint8 tensor that a `MatMulNBits` or
/// `GatherBlockQuantized` reads as `bits`-bit values holds `8 / bits` weights per byte.
pub fn logical_numel(graph: &Graph, id: ValueId, dtype: DType, numel: u64) -> u64 {
    if dtype != DType::U8 {
        return numel;
    }
    for (n, slot) in graph.consumers(id) {
        let op = super::ops::parse(&graph.nodes[n], 0);
        let bits = match (&op, slot) {
            (super::ops::Op::MatMulNBits(nb), 1) => nb.bits,
            (super::ops::Op::GatherBlockQuantized(g), 0) => g.bits,
            _ => continue,
        };
        if (1..8).contains(&bits) && 8 % bits == 0 {
            return numel.saturating_mul((8 / bits) as u64);
        }
    }
    numel
}

/// Whether node `n`'s input `slot` is a per-layer parameter slot a shared tensor can stand in:
/// a norm's scale or bias, a convolution's or Gemm's bias, or the bias an `Add` puts on a
/// matrix product.
fn parameter_slot(graph: &Graph, n: usize, slot: usize) -> bool {
    if slot_role(graph, n, slot) == SlotRole::Affine {
        return true;
    }
    let node = &graph.nodes[n];
    match node.op_type.as_str() {
        "Add" => node
            .input(1 - slot.min(1))
            .and_then(|v| graph.values[v].producer())
            .is_some_and(|(p, _)| {
                matches!(
                    graph.nodes[p].op_type.as_str(),
                    "MatMul" | "Gemm" | "Conv" | "Einsum"
                )
            }),
        _ => false,
    }
}

/// The nodes that read the stored parameter `id` as their own per-layer parameter, when one
/// stored tensor stands for several of PyTorch's parameters; `None` when it stands for one.
/// Exporters store byte-identical initializers once: the dynamo exporter's optimizer lets every
/// layer read the one tensor, the TorchScript exporter gives each layer an `Identity` of it. The
/// freshly initialised LayerNorm weights (all ones) and biases (all zeros) of every layer so
/// become one tensor, while `model.parameters()` counts each layer's. A 1-D tensor with a single
/// value throughout, read by several nodes (directly or through an `Identity` each) in a
/// per-layer parameter slot, counts once per reader. So does one whose values the file does not
/// hold (its external data missing): byte-identical storage is by far the likelier cause, since
/// the graph reads it per layer. (A model that really shares such tensors across layers, as
/// ALBERT does, is then over-counted; [`notes`] says so.)
pub fn shared_readers(graph: &Graph, id: ValueId, t: &Tensor) -> Option<Vec<usize>> {
    let uses = graph.consumers(id);
    if uses.len() < 2 || t.dims.len() != 1 || !t.dtype.is_float() {
        return None;
    }
    let mut readers = Vec::new();
    for (n, slot) in uses {
        if graph.nodes[n].op_type == "Identity" {
            // the TorchScript exporter's copy: one parameter, read where its output is
            let out = graph.nodes[n].output(0)?;
            let reads = graph.consumers(out);
            if reads.is_empty() || !reads.iter().all(|(r, s)| parameter_slot(graph, r, s)) {
                return None;
            }
            readers.push(reads.iter().map(|(r, _)| r).min()?);
        } else if parameter_slot(graph, n, slot) {
            readers.push(n);
        } else {
            return None;
        }
    }
    let uniform = match t.read_values(1 << 22) {
        Some(Values::Float(v)) => v.windows(2).all(|w| w[0] == w[1]),
        Some(_) => false,
        None => values_missing(t),
    };
    uniform.then_some(readers)
}

/// Whether the file does not hold `t`'s values (its external data file is missing or short), so
/// that what they are cannot be checked.
fn values_missing(t: &Tensor) -> bool {
    use crate::ir::TensorData;
    match &t.data {
        TensorData::Unavailable(_) => true,
        TensorData::External(_) => t.numel().is_some_and(|n| n <= 1 << 22),
        _ => false,
    }
}

/// How many of PyTorch's parameters the stored parameter `id` stands for ([`shared_readers`]).
pub fn copies(graph: &Graph, id: ValueId, t: &Tensor) -> u64 {
    shared_readers(graph, id, t).map_or(1, |r| r.len() as u64)
}

/// Parameters and buffers the model has but the file does not store, which the exporter's node
/// metadata records: per node, (parameters, buffers, bytes per element). An inference-mode
/// BatchNorm fused into a convolution had a weight and a bias (parameters) and running mean and
/// variance (buffers) per output channel; the convolution's stored bias, when it has one, is the
/// BatchNorm's (PyTorch's convolutions before a BatchNorm have none). A zero bias the optimizer
/// removed had one parameter per output.
pub fn implied(graph: &Graph) -> Vec<(usize, u64, u64, u64)> {
    let marked = |names: &[String]| -> Vec<usize> {
        // most files mark nothing: no name of each node's output to look up
        if names.is_empty() {
            return Vec::new();
        }
        let set: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
        graph
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| {
                n.output(0)
                    .is_some_and(|o| set.contains(graph.value_name(o)))
            })
            .map(|(i, _)| i)
            .collect()
    };
    let mut out = Vec::new();
    for (fused, names) in [
        (true, &graph.fused_eval_norms),
        (false, &graph.removed_biases),
    ] {
        for n in marked(names) {
            let Some((width, elem)) = output_width(graph, n) else {
                continue;
            };
            if fused {
                // the fused bias is stored (and counted) when the BatchNorm's shift was not zero:
                // then only the BatchNorm's weight is missing
                let stored_bias = graph.nodes[n].input(2).is_some();
                let params = if stored_bias { width } else { 2 * width };
                out.push((n, params, 2 * width, elem));
            } else {
                out.push((n, width, 0, elem));
            }
        }
    }
    out
}

/// The output features of a `Conv` (its weight's first axis) or `Gemm` (B's columns, or rows
/// with `transB`), and the weight's bytes per element.
fn output_width(graph: &Graph, n: usize) -> Option<(u64, u64)> {
    let node = &graph.nodes[n];
    let w = graph.stored(node.input(1)?)?;
    let elem = w.dtype.bytes_for(1).unwrap_or(4);
    let width = match node.op_type.as_str() {
        "Conv" | "ConvTranspose" => {
            let group = node.attrs.int_or("group", 1).unwrap_or(1).max(1) as u64;
            if node.op_type == "Conv" {
                *w.dims.first()?
            } else {
                w.dims.get(1)?.checked_mul(group)?
            }
        }
        "Gemm" => {
            let trans_b = node.attrs.int_or("transB", 0).unwrap_or(0) == 1;
            if trans_b {
                *w.dims.first()?
            } else {
                *w.dims.get(1)?
            }
        }
        _ => return None,
    };
    Some((width, elem))
}

/// What the parameter count of `graph` could not decide from the file, for the report's notes.
pub fn notes(graph: &Graph) -> Vec<String> {
    let mut out = Vec::new();
    let (mut shared, mut extra, mut unread) = (0usize, 0u64, 0usize);
    for (id, t) in graph.initializers() {
        let numel = t.numel().unwrap_or(0);
        // the count first: it turns most tensors away at once (fewer than two readers, not a
        // vector of floats), the role reads every reader
        let k = copies(graph, id, t);
        if k > 1 && classify(graph, id, t.dtype, numel) == Role::Param {
            shared += 1;
            extra = extra.saturating_add(numel.saturating_mul(k - 1));
            unread += usize::from(values_missing(t));
        }
    }
    if shared > 0 {
        out.push(format!(
            "{shared} initializer{} of one constant value (fresh LayerNorm weights, zero biases) {} read by several layers: the exporter stored identical tensors once, and each layer's is counted as PyTorch counts it ({extra} parameters more); a model that shares them across layers (ALBERT) has {extra} fewer{}",
            if shared == 1 { "" } else { "s" },
            if shared == 1 { "is" } else { "are" },
            if unread > 0 {
                format!(
                    " ({unread} of them taken to be one value because the file does not hold their data, and they are read in per-layer parameter slots)"
                )
            } else {
                String::new()
            }
        ));
    }
    let implied = implied(graph);
    if !implied.is_empty() {
        let (fused, removed) = (graph.fused_eval_norms.len(), graph.removed_biases.len());
        let params: u64 = implied.iter().map(|i| i.1).sum();
        let mut what = Vec::new();
        if fused > 0 {
            what.push(format!(
                "{fused} BatchNorm{} fused into convolutions (weight and bias; their running statistics are buffers)",
                if fused == 1 { "" } else { "s" }
            ));
        }
        if removed > 0 {
            what.push(format!(
                "{removed} zero bias{} removed",
                if removed == 1 { "" } else { "es" }
            ));
        }
        out.push(format!(
            "the exporter's node metadata records {}: their {params} parameters are counted, though the file does not store them",
            what.join(" and ")
        ));
    }
    // parameters the exporter computed (its generated names), read as more than a weight
    let generated: Vec<&str> = graph
        .initializers()
        .filter(|(id, t)| {
            let numel = t.numel().unwrap_or(0);
            generated_name(&t.name)
                && classify(graph, *id, t.dtype, numel) == Role::Param
                && graph.consumers(*id).iter().any(|(n, slot)| {
                    !(slot == 1
                        && matches!(
                            graph.nodes[n].op_type.as_str(),
                            "MatMul" | "Gemm" | "Conv" | "ConvTranspose"
                        ))
                })
        })
        .map(|(_, t)| &*t.name)
        .collect();
    if let Some(first) = generated.first() {
        out.push(format!(
            "{} tensor{} counted as parameters {} a name the exporter generated (first: '{first}'): computed from parameters when it folded constants, {} may stand for part of one (a position table sliced to the exported sequence) or for none",
            generated.len(),
            if generated.len() == 1 { "" } else { "s" },
            if generated.len() == 1 { "has" } else { "have" },
            if generated.len() == 1 { "it" } else { "each" },
        ));
    }
    let folded = graph
        .initializers()
        .filter(|(id, t)| {
            let numel = t.numel().unwrap_or(0);
            t.dtype.is_float() && numel > 1 && attention_bias(graph, *id, t)
        })
        .count();
    if folded > 0 {
        out.push(format!(
            "{folded} constant{} added to attention scores (masks, relative-position biases the exporter folded) {} not counted as parameters: a bias gathered from a parameter table (Swin's relative_position_bias_table, T5's relative_attention_bias) has its table's parameters, which an inference export does not keep",
            if folded == 1 { "" } else { "s" },
            if folded == 1 { "is" } else { "are" },
        ));
    }
    out
}

/// Whether an initializer's name is one an exporter made up for a folded constant: the
/// TorchScript exporter's `onnx::Op_N`, the dynamo exporter's FX node names (`embedding_1`,
/// `val_162`). Parameters keep their module paths (`encoder.layer.0.attention.self.query.weight`).
fn generated_name(name: &str) -> bool {
    if name.starts_with("onnx::") {
        return true;
    }
    !name.contains('.')
        && name.rsplit_once('_').is_some_and(|(head, n)| {
            !head.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
        })
}

/// Whether the stored tensor `id` is a constant added to attention scores: rank 3 or more, read
/// only by `Add`s whose other operand is a matrix product (the scores, possibly scaled) and whose
/// result reaches a `Softmax` through reshapes, adds and casts. Eval-mode exports fold causal and
/// shifted-window masks and gathered relative-position biases into such constants.
fn attention_bias(graph: &Graph, id: ValueId, t: &Tensor) -> bool {
    if t.dims.len() < 3 {
        return false;
    }
    let uses = graph.consumers(id);
    !uses.is_empty()
        && uses.iter().all(|(n, slot)| {
            let node = &graph.nodes[n];
            node.op_type == "Add"
                && node
                    .input(1 - slot.min(1))
                    .is_some_and(|v| from_scores(graph, v, 4))
                && node.output(0).is_some_and(|v| reaches_softmax(graph, v, 4))
        })
}

/// Whether `v` comes from a `MatMul` through at most `depth` scalings, reshapes, adds or casts.
fn from_scores(graph: &Graph, v: ValueId, depth: usize) -> bool {
    let Some((p, _)) = graph.values[v].producer() else {
        return false;
    };
    let node = &graph.nodes[p];
    match node.op_type.as_str() {
        "MatMul" | "Einsum" => true,
        "Mul" | "Div" | "Add" | "Reshape" | "Cast" | "Where" | "Unsqueeze" | "Squeeze"
            if depth > 0 =>
        {
            node.input(0)
                .is_some_and(|x| from_scores(graph, x, depth - 1))
        }
        _ => false,
    }
}

/// Whether `v` is read by a `Softmax` through at most `depth` reshapes, adds, casts or masks.
fn reaches_softmax(graph: &Graph, v: ValueId, depth: usize) -> bool {
    graph.consumers(v).iter().any(|(n, _)| {
        let node = &graph.nodes[n];
        match node.op_type.as_str() {
            "Softmax" => true,
            "Reshape" | "Add" | "Cast" | "Where" | "Unsqueeze" | "Squeeze" | "View"
                if depth > 0 =>
            {
                node.output(0)
                    .is_some_and(|o| reaches_softmax(graph, o, depth - 1))
            }
            _ => false,
        }
    })
}

/// The node a stored tensor is charged to in the per-layer table: its first reader, or, for a
/// weight a `DequantizeLinear` turns back into floats, the layer that reads the dequantized value.
pub fn charged_node(graph: &Graph, id: ValueId) -> Option<usize> {
    let first = graph.consumers(id).iter().map(|(n, _)| n).min()?;
    let node = &graph.nodes[first];
    let is_dq = is(graph, first, "DequantizeLinear");
    if is_dq {
        if let Some(out) = node.output(0) {
            if let Some(reader) = graph.consumers(out).iter().map(|(n, _)| n).min() {
                return Some(reader);
            }
        }
    }
    Some(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Attrs, GraphBuilder, Tensor, TensorData};

    fn tensor(name: &str, dtype: DType, dims: Vec<u64>) -> Tensor {
        Tensor {
            name: name.into(),
            dtype,
            dims: dims.into(),
            data: TensorData::Empty,
        }
    }

    #[test]
    fn batchnorm_statistics_are_buffers_and_shapes_are_constants() {
        let mut b = GraphBuilder::new("g", false);
        let x = b.value("x");
        b.add_input(x);
        for (name, dtype, dims) in [
            ("scale", DType::F32, vec![8]),
            ("bias", DType::F32, vec![8]),
            ("mean", DType::F32, vec![8]),
            ("var", DType::F32, vec![8]),
            ("shape", DType::I64, vec![2]),
            ("eps", DType::F32, vec![]),
        ] {
            let id = b.value(name);
            b.value_mut(id).init = Some(Box::new(tensor(name, dtype, dims)));
        }
        b.add_node(
            "bn",
            "BatchNormalization",
            String::new(),
            &["x", "scale", "bias", "mean", "var"],
            &["y"],
            Attrs::default(),
        );
        b.add_node(
            "r",
            "Reshape",
            String::new(),
            &["y", "shape"],
            &["z"],
            Attrs::default(),
        );
        b.add_node(
            "a",
            "Add",
            String::new(),
            &["z", "eps"],
            &["w"],
            Attrs::default(),
        );
        let g = b.finish().unwrap();
        let role = |name: &str| {
            let id = g.value_by_name(name).unwrap();
            let t = g.values[id].init.as_deref().unwrap();
            classify(&g, id, t.dtype, t.numel().unwrap())
        };
        assert_eq!(role("scale"), Role::Param);
        assert_eq!(role("bias"), Role::Param);
        assert_eq!(role("mean"), Role::Buffer);
        assert_eq!(role("var"), Role::Buffer);
        assert_eq!(role("shape"), Role::Constant);
        assert_eq!(role("eps"), Role::Constant);
    }
}
