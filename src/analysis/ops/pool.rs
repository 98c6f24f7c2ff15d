//! Pooling: windowed (`MaxPool`, `AveragePool`, `LpPool`) and global. Not counted in MACs.

use super::conv::Window;
use super::{invalid, InferResult, OpCx};
use crate::analysis::fact::Fact;
use crate::ir::{DType, Dim};

pub fn pool(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.shape(0)?;
    if x.len() < 3 {
        return invalid(format!("input has rank {}, expected at least 3", x.len()));
    }
    let kernel = match cx.attr_ints("kernel_shape")? {
        Some(k) if k.len() == x.len() - 2 => k.to_vec(),
        Some(k) => {
            return invalid(format!(
                "attribute 'kernel_shape' has {} values for {} spatial axes",
                k.len(),
                x.len() - 2
            ))
        }
        None => return invalid("attribute 'kernel_shape' is required"),
    };
    let win = Window::from_attrs(cx, kernel)?;
    let mut out = vec![x[0].clone(), x[1].clone()];
    for (i, d) in x[2..].iter().enumerate() {
        out.push(win.out_dim(i, d)?);
    }
    let mut facts = vec![Fact::new(cx.dtype(0), out.clone())];
    if cx.node.op_type == "MaxPool" {
        facts.push(Fact::new(Some(DType::I64), out));
    }
    Ok(facts)
}

pub fn global_pool(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.shape(0)?;
    if x.len() < 2 {
        return invalid(format!("input has rank {}, expected at least 2", x.len()));
    }
    let mut out = x[..2].to_vec();
    out.extend(std::iter::repeat_n(Dim::known(1), x.len() - 2));
    Ok(vec![Fact::new(cx.dtype(0), out)])
}
