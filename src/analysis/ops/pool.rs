//! Pooling: windowed (`MaxPool`, `AveragePool`, `LpPool`) and global. Not counted in MACs.

use super::conv::WindowAttrs;
use super::{attrs, invalid, AttrReader, FromAttrs, InferResult, Op, OpCx};
use crate::analysis::fact::Fact;
use crate::ir::{Attrs, DType, Dim};

/// A windowed pool's attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Pool {
    pub window: WindowAttrs,
    /// `AveragePool`: padding cells count in the divisor.
    pub count_include_pad: bool,
    /// `MaxPool`: the indices output is column-major over the spatial axes.
    pub storage_order: bool,
}

impl FromAttrs for Pool {
    fn from_attrs(a: &Attrs, opset: i64) -> Result<Self, String> {
        let window = WindowAttrs::from_attrs(a, opset)?;
        if window.kernel_shape.is_none() {
            return Err("attribute 'kernel_shape' is required".into());
        }
        let r = AttrReader(a);
        Ok(Pool {
            window,
            count_include_pad: r.flag("count_include_pad", false)?,
            storage_order: r.flag("storage_order", false)?,
        })
    }
}

impl Pool {
    /// The window over `spatial` axes.
    pub fn window(&self, spatial: usize) -> Result<super::conv::Window, String> {
        let k = self.window.kernel_shape.clone().unwrap_or_default();
        if k.len() != spatial {
            return Err(format!(
                "attribute 'kernel_shape' has {} values for {spatial} spatial axes",
                k.len()
            ));
        }
        self.window.window(k)
    }
}

/// The pool attributes of an op, if it is a windowed pool.
pub fn pool_of(op: &Op) -> Option<&Pool> {
    match op {
        Op::MaxPool(p) | Op::AveragePool(p) | Op::LpPool(p) => Some(p),
        _ => None,
    }
}

pub fn pool(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let p = attrs!(cx, MaxPool | AveragePool | LpPool);
    let x = cx.shape(0)?;
    if x.len() < 3 {
        return invalid(format!("input has rank {}, expected at least 3", x.len()));
    }
    let win = p.window(x.len() - 2)?;
    let mut out = vec![x[0].clone(), x[1].clone()];
    for (i, d) in x[2..].iter().enumerate() {
        out.push(win.out_dim(i, d)?);
    }
    let mut facts = vec![Fact::new(cx.dtype(0), out.clone())];
    if matches!(cx.op, Op::MaxPool(_)) {
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
