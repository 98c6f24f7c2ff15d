//! What each stored tensor is: a trainable parameter, a buffer (non-trainable state such as
//! BatchNorm running statistics), or a constant (shape vectors, scalars, index tables).
//!
//! The rule, which reproduces PyTorch's `sum(p.numel() for p in model.parameters())` on exports with
//! BatchNorm preserved: a floating-point initializer with more than one element is a parameter,
//! unless it feeds a BatchNorm's mean or variance (a buffer) or only feeds inputs that are never
//! weights (a reshape target, resize scales, clip bounds...). Everything else is a constant.

use crate::ir::{DType, Graph, ValueId};

/// The role of a stored tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Param,
    Buffer,
    Constant,
}

/// Input slots that hold configuration, never weights.
pub fn is_config_slot(op: &str, slot: usize) -> bool {
    match op {
        "Reshape" | "Expand" | "Tile" | "Squeeze" | "Unsqueeze" | "Split" | "TopK" | "CastLike" => {
            slot >= 1
        }
        "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1"
        | "ReduceL2" | "ReduceLogSum" | "ReduceLogSumExp" | "ReduceSumSquare" => slot >= 1,
        "Slice" | "Pad" | "Resize" | "Upsample" | "Clip" | "Dropout" | "OneHot" | "Trilu"
        | "CumSum" => slot >= 1,
        "ConstantOfShape" | "Range" | "Shape" | "Size" => true,
        "Gather" | "GatherElements" | "GatherND" | "ScatterND" | "ScatterElements" => slot == 1,
        "Where" => slot == 0,
        "QuantizeLinear" | "DequantizeLinear" => slot >= 1,
        _ => false,
    }
}

/// BatchNormalization's running statistics (inputs 3 and 4).
fn is_buffer_slot(op: &str, slot: usize) -> bool {
    op == "BatchNormalization" && (slot == 3 || slot == 4)
}

/// Classifies the stored tensor (initializer or `Constant` output) of value `id`, of the given
/// element type and count, from how the graph uses it.
pub fn classify(graph: &Graph, id: ValueId, dtype: DType, numel: u64) -> Role {
    let uses = &graph.values[id].consumers;
    if uses
        .iter()
        .any(|&(n, slot)| is_buffer_slot(&graph.nodes[n].op_type, slot))
    {
        return Role::Buffer;
    }
    if !dtype.is_float() || numel <= 1 {
        return Role::Constant;
    }
    if !uses.is_empty()
        && uses
            .iter()
            .all(|&(n, slot)| is_config_slot(&graph.nodes[n].op_type, slot))
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
