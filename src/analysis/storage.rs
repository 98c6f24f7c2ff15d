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
/// element type and count, from how the graph uses it.
pub fn classify(graph: &Graph, id: ValueId, dtype: DType, numel: u64) -> Role {
    let uses = &graph.values[id].consumers;
    if uses
        .iter()
        .any(|&(n, slot)| slot_role(graph, n, slot) == SlotRole::Buffer)
    {
        return Role::Buffer;
    }
    if !dtype.is_float() || numel <= 1 {
        return Role::Constant;
    }
    if !uses.is_empty()
        && uses
            .iter()
            .all(|&(n, slot)| slot_role(graph, n, slot) == SlotRole::Config)
    {
        return Role::Constant;
    }
    Role::Param
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
