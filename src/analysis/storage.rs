//! What each stored tensor is: a trainable parameter, a buffer (non-trainable state such as
//! BatchNorm running statistics), or a constant (shape vectors, scalars, index tables).
//!
//! The rule, which reproduces PyTorch's `sum(p.numel() for p in model.parameters())` on exports with
//! BatchNorm preserved: a floating-point initializer with more than one element is a parameter,
//! unless it feeds a BatchNorm's mean or variance (a buffer) or only feeds inputs that are never
//! weights (a reshape target, resize scales, clip bounds...). Everything else is a constant.

use super::ops::{lookup, SlotRole};
use crate::ir::{DType, Graph, ValueId};

/// The role of a stored tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Param,
    Buffer,
    Constant,
}

/// The role the registry gives input `slot` of a node (unknown ops: data).
fn slot_role(graph: &Graph, node: usize, slot: usize) -> SlotRole {
    let n = &graph.nodes[node];
    lookup(&n.domain, &n.op_type).map_or(SlotRole::Data, |d| d.slots.role(slot))
}

/// Classifies the stored tensor (initializer or `Constant` output) of value `id`, of the given
/// element type and count, from how the graph uses it. A quantized weight (int8, int4, packed
/// uint8, read by a quantized op's weight slot or a `DequantizeLinear`) is a parameter whatever
/// its type; its scales and zero points are buffers.
pub fn classify(graph: &Graph, id: ValueId, dtype: DType, numel: u64) -> Role {
    let uses = &graph.values[id].consumers;
    let roles: Vec<SlotRole> = uses
        .iter()
        .map(|&(n, slot)| {
            // a quantized embedding table: gathered, then dequantized
            if slot == 0 && is(graph, n, "Gather") && feeds_dequantize(graph, n) {
                return SlotRole::QuantWeight;
            }
            slot_role(graph, n, slot)
        })
        .collect();
    if roles.contains(&SlotRole::Buffer) {
        return Role::Buffer;
    }
    if numel >= 1 && roles.contains(&SlotRole::QuantWeight) && !dtype.is_float() {
        return Role::Param;
    }
    if !roles.is_empty() && roles.iter().all(|r| *r == SlotRole::QuantParam) {
        return Role::Buffer;
    }
    if !dtype.is_float() || numel <= 1 {
        return Role::Constant;
    }
    if !roles.is_empty() && roles.iter().all(|r| *r == SlotRole::Config) {
        return Role::Constant;
    }
    Role::Param
}

fn is(graph: &Graph, n: usize, name: &str) -> bool {
    let node = &graph.nodes[n];
    lookup(&node.domain, &node.op_type).is_some_and(|d| d.name == name && d.domain.is_empty())
}

/// Whether node `n`'s first output is read by a `DequantizeLinear` as its data.
fn feeds_dequantize(graph: &Graph, n: usize) -> bool {
    graph.nodes[n].output(0).is_some_and(|v| {
        graph.values[v]
            .consumers
            .iter()
            .any(|&(c, slot)| slot == 0 && is(graph, c, "DequantizeLinear"))
    })
}

/// The logical element count of a stored tensor: a uint8 tensor that a `MatMulNBits` or
/// `GatherBlockQuantized` reads as `bits`-bit values holds `8 / bits` weights per byte.
pub fn logical_numel(graph: &Graph, id: ValueId, dtype: DType, numel: u64) -> u64 {
    if dtype != DType::U8 {
        return numel;
    }
    for &(n, slot) in &graph.values[id].consumers {
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

/// The node a stored tensor is charged to in the per-layer table: its first reader, or, for a
/// weight a `DequantizeLinear` turns back into floats, the layer that reads the dequantized value.
pub fn charged_node(graph: &Graph, id: ValueId) -> Option<usize> {
    let first = graph.values[id].consumers.iter().map(|&(n, _)| n).min()?;
    let node = &graph.nodes[first];
    let is_dq = is(graph, first, "DequantizeLinear");
    if is_dq {
        if let Some(out) = node.output(0) {
            if let Some(reader) = graph.values[out].consumers.iter().map(|&(n, _)| n).min() {
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
            dims,
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
            b.value_mut(id).init = Some(tensor(name, dtype, dims));
        }
        b.add_node(
            "bn".into(),
            "BatchNormalization".into(),
            String::new(),
            &["x", "scale", "bias", "mean", "var"],
            &["y"],
            Attrs::default(),
        );
        b.add_node(
            "r".into(),
            "Reshape".into(),
            String::new(),
            &["y", "shape"],
            &["z"],
            Attrs::default(),
        );
        b.add_node(
            "a".into(),
            "Add".into(),
            String::new(),
            &["z", "eps"],
            &["w"],
            Attrs::default(),
        );
        let g = b.finish().unwrap();
        let role = |name: &str| {
            let id = g.value_by_name(name).unwrap();
            let t = g.values[id].init.as_ref().unwrap();
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
