//! Ops that make tensors: `Constant`, `ConstantOfShape`, `Range`, `Shape` and `Size`.

use super::{attrs, one, tensor, At, Cx, OpResult};
use crate::analysis::ops::source::ConstantForm;
use crate::ir::Attr;
use crate::verify::exec::{to_candle, MAX_ELEMENTS};

/// The value is data, read from the node (the typed op says which attribute holds it).
pub fn constant(cx: &Cx) -> OpResult {
    let c = attrs!(cx, Constant);
    let attrs = &cx.node.attrs;
    let name = match &c.form {
        ConstantForm::Tensor => {
            let t = attrs
                .tensor_opt("value")
                .at(cx)?
                .ok_or_else(|| cx.fail("attribute 'value' is missing"))?;
            return one(to_candle(t).at(cx)?);
        }
        ConstantForm::Scalars(name) => name.as_str(),
        ConstantForm::Sparse => {
            return Err(cx.unsupported("a constant given as 'sparse_value' is not supported"))
        }
    };
    let (data, shape): (Vec<f64>, Vec<usize>) = match attrs.get(name) {
        Some(Attr::Float(v)) => (vec![f64::from(*v)], vec![]),
        Some(Attr::Floats(v)) => (v.iter().map(|&x| f64::from(x)).collect(), vec![v.len()]),
        Some(Attr::Int(v)) => (vec![*v as f64], vec![]),
        Some(Attr::Ints(v)) => (v.iter().map(|&x| x as f64).collect(), vec![v.len()]),
        _ => return Err(cx.unsupported(format!("a constant given as '{name}' is not supported"))),
    };
    one(tensor(data, &shape).at(cx)?)
}

/// A tensor of the shape in input 0 filled with the one-element `value` (a tensor attribute,
/// data like a `Constant`'s; 0.0 by default).
pub fn constant_of_shape(cx: &Cx) -> OpResult {
    let spec = cx
        .input_ints(0)?
        .ok_or_else(|| cx.fail("input 0 (shape) is missing"))?;
    let shape = spec
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| cx.fail(format!("shape {spec:?} has a negative entry")))?;
    let n = super::checked_product(&shape)
        .filter(|&n| n <= MAX_ELEMENTS)
        .ok_or_else(|| cx.fail(format!("shape {spec:?} is too large")))?;
    let fill = match cx.node.attrs.tensor_opt("value").at(cx)? {
        None => 0.0,
        Some(t) => {
            let v = super::values(&to_candle(t).at(cx)?).at(cx)?;
            match v.as_slice() {
                [x] => *x,
                _ => return Err(cx.fail("attribute 'value' must hold one element")),
            }
        }
    };
    one(tensor(vec![fill; n], &shape).at(cx)?)
}

/// `max(ceil((limit - start) / delta), 0)` values `start + i * delta`.
pub fn range(cx: &Cx) -> OpResult {
    let scalar = |i: usize, what: &str| {
        cx.input_scalar(i)?
            .ok_or_else(|| cx.fail(format!("input {i} ({what}) is missing")))
    };
    let (start, limit, delta) = (
        scalar(0, "start")?,
        scalar(1, "limit")?,
        scalar(2, "delta")?,
    );
    if delta == 0.0 {
        return Err(cx.fail("delta is 0"));
    }
    let n = ((limit - start) / delta).ceil().max(0.0);
    // NaN bounds give 0 here (`max` prefers the number)
    if n > MAX_ELEMENTS as f64 {
        return Err(cx.fail(format!("a range of {n} elements is too large")));
    }
    let n = n as usize;
    one(tensor((0..n).map(|i| start + i as f64 * delta).collect(), &[n]).at(cx)?)
}

/// The input's dims from `start` to `end` (opset 15), each clamped into `[0, rank]` after a
/// negative one is counted from the end.
pub fn shape(cx: &Cx) -> OpResult {
    let s = attrs!(cx, Shape);
    let x = cx.input(0)?;
    let r = x.rank() as i64;
    let clamp = |v: i64| (if v < 0 { v.saturating_add(r) } else { v }).clamp(0, r) as usize;
    let start = clamp(s.start);
    let end = clamp(s.end.unwrap_or(r)).max(start);
    let dims: Vec<f64> = x.dims()[start..end].iter().map(|&d| d as f64).collect();
    let n = dims.len();
    one(tensor(dims, &[n]).at(cx)?)
}

/// The element count, an int64 scalar.
pub fn size(cx: &Cx) -> OpResult {
    let n = cx.input(0)?.elem_count();
    one(tensor(vec![n as f64], &[]).at(cx)?)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_close, flat, ints, ramp, G};
    use crate::ir::{Attr, DType, Tensor, TensorData, TypedData};

    #[test]
    fn shape_and_gather() {
        let mut g = G::new();
        g.input("x", &[2, 3, 4], ramp(24))
            .init_i64("i", vec![-1, 0])
            .node("Shape", &["x"], &["s"], vec![])
            .node("Gather", &["s", "i"], &["g"], vec![])
            .node(
                "Gather",
                &["x", "i"],
                &["rows"],
                vec![("axis", Attr::Int(1))],
            );
        let out = g.run(&["s", "g", "rows"]).unwrap();
        assert_close(&flat(&out[0]), &[2.0, 3.0, 4.0]);
        assert_close(&flat(&out[1]), &[4.0, 2.0]);
        assert_eq!(out[2].dims(), [2, 2, 4]);
        // rows 2 then 0 of each batch
        assert_close(
            &flat(&out[2])[..8],
            &[8.0, 9.0, 10.0, 11.0, 0.0, 1.0, 2.0, 3.0],
        );
    }

    #[test]
    fn constants_of_every_form() {
        let t = Tensor {
            name: "t".into(),
            dtype: DType::I64,
            dims: vec![2].into(),
            data: TensorData::Typed(TypedData::I64(vec![3, -4])),
        };
        let mut g = G::new();
        g.node(
            "Constant",
            &[] as &[&str],
            &["a"],
            vec![("value", Attr::Tensor(Box::new(t)))],
        )
        .node(
            "Constant",
            &[] as &[&str],
            &["b"],
            vec![("value_float", Attr::Float(1.5))],
        )
        .node(
            "Constant",
            &[] as &[&str],
            &["c"],
            vec![("value_floats", Attr::Floats(vec![1.0, 2.0]))],
        )
        .node(
            "Constant",
            &[] as &[&str],
            &["d"],
            vec![("value_ints", ints(&[5]))],
        );
        let out = g.run(&["a", "b", "c", "d"]).unwrap();
        assert_close(&flat(&out[0]), &[3.0, -4.0]);
        assert_eq!(out[1].rank(), 0);
        assert_close(&flat(&out[1]), &[1.5]);
        assert_close(&flat(&out[2]), &[1.0, 2.0]);
        assert_close(&flat(&out[3]), &[5.0]);
    }

    #[test]
    fn constant_of_shape_and_range() {
        let v = Tensor {
            name: "v".into(),
            dtype: DType::I64,
            dims: vec![1].into(),
            data: TensorData::Typed(TypedData::I64(vec![7])),
        };
        let mut g = G::new();
        g.init_i64("s", vec![2, 1])
            .init("a", &[], vec![2.0])
            .init("b", &[], vec![-1.0])
            .init("d", &[], vec![-0.75])
            .node("ConstantOfShape", &["s"], &["z"], vec![])
            .node(
                "ConstantOfShape",
                &["s"],
                &["w"],
                vec![("value", Attr::Tensor(Box::new(v)))],
            )
            .node("Range", &["a", "b", "d"], &["r"], vec![]);
        let out = g.run(&["z", "w", "r"]).unwrap();
        assert_eq!(out[0].dims(), [2, 1]);
        assert_close(&flat(&out[0]), &[0.0, 0.0]);
        assert_close(&flat(&out[1]), &[7.0, 7.0]);
        // ceil((-1 - 2) / -0.75) = 4 values
        assert_close(&flat(&out[2]), &[2.0, 1.25, 0.5, -0.25]);
    }

    #[test]
    fn shape_slices_its_dims() {
        let mut g = G::new();
        g.input("x", &[2, 3, 4], ramp(24))
            .node(
                "Shape",
                &["x"],
                &["a"],
                vec![("start", Attr::Int(1)), ("end", Attr::Int(-1))],
            )
            .node("Shape", &["x"], &["b"], vec![("start", Attr::Int(-2))])
            .node("Shape", &["x"], &["c"], vec![("start", Attr::Int(5))]);
        let out = g.run(&["a", "b", "c"]).unwrap();
        assert_close(&flat(&out[0]), &[3.0]);
        assert_close(&flat(&out[1]), &[3.0, 4.0]);
        assert_eq!(out[2].dims(), [0]);
    }
}
