//! Linear quantization: `QuantizeLinear` (`y = saturate(round(x / scale) + zero_point)`, rounding
//! half to even), `DequantizeLinear` (`y = (x - zero_point) · scale`) and `DynamicQuantizeLinear`
//! (uint8, scale and zero point from the input's range, which always includes 0), as the ONNX spec
//! defines them. Scales and zero points are per tensor (one value), per axis (1-D along `axis`) or
//! blocked (opset 21: the input's shape with `axis` divided into blocks of `block_size`). The
//! integer types are the 2-, 4-, 8- and 16-bit ones (and int32 for `DequantizeLinear`'s input);
//! float 8 is not computed.

use super::{attrs, tensor, values, At, Cx, OpResult};
use crate::ir::DType;
use crate::verify::exec::ExecError;

/// The range of an integer type a quantized value may take.
fn int_range(dtype: DType) -> Option<(f64, f64)> {
    Some(match dtype {
        DType::U8 => (0.0, 255.0),
        DType::I8 => (-128.0, 127.0),
        DType::U16 => (0.0, 65535.0),
        DType::I16 => (-32768.0, 32767.0),
        DType::U4 => (0.0, 15.0),
        DType::I4 => (-8.0, 7.0),
        DType::U2 => (0.0, 3.0),
        DType::I2 => (-2.0, 1.0),
        DType::I32 => (f64::from(i32::MIN), f64::from(i32::MAX)),
        _ => return None,
    })
}

/// Rounds half to even (`nearbyint` in the default rounding mode), as the spec's `round`.
fn round_half_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r - x.signum()
    } else {
        r
    }
}

/// For every element of an input of shape `dims`, the index of its scale (and zero point) in a
/// parameter of shape `param`.
fn param_index(
    cx: &Cx,
    dims: &[usize],
    param: &[usize],
    axis: i64,
    block_size: i64,
) -> Result<Vec<usize>, ExecError> {
    let n: usize = dims.iter().product();
    if param.iter().product::<usize>() == 1 && param.len() <= 1 {
        return Ok(vec![0; n]);
    }
    let a = cx.axis(axis, dims.len())?;
    let inner: usize = dims[a + 1..].iter().product();
    let len = dims[a];
    if block_size <= 0 {
        if param != [len] {
            return Err(cx.fail(format!(
                "a per-axis scale along axis {a} of shape {dims:?} must have shape [{len}], found {param:?}"
            )));
        }
        return Ok((0..n).map(|i| (i / inner) % len).collect());
    }
    let block = usize::try_from(block_size).map_err(|_| cx.fail("block_size overflows"))?;
    let blocks = len.div_ceil(block);
    let mut want = dims.to_vec();
    want[a] = blocks;
    if param != want.as_slice() {
        return Err(cx.fail(format!(
            "a blocked scale (block_size {block}) of an input of shape {dims:?} must have shape {want:?}, found {param:?}"
        )));
    }
    Ok((0..n)
        .map(|i| {
            let outer = i / (len * inner);
            let along = (i / inner) % len;
            (outer * blocks + along / block) * inner + i % inner
        })
        .collect())
}

/// The scale and zero point of input `x` (slots 1 and 2), one per element of x.
struct Params {
    scale: Vec<f64>,
    zero: Vec<f64>,
}

fn params(cx: &Cx, axis: i64, block_size: i64) -> Result<Params, ExecError> {
    let x = cx.input(0)?;
    let s = cx.input(1)?;
    let index = param_index(cx, x.dims(), s.dims(), axis, block_size)?;
    let sv = values(s).at(cx)?;
    let zv = match cx.opt(2) {
        None => vec![0.0; sv.len()],
        // one value each ([] and [1] alike) is per tensor
        Some(z) if z.dims() == s.dims() || (z.elem_count() == 1 && sv.len() == 1) => {
            values(z).at(cx)?
        }
        Some(z) => {
            return Err(cx.fail(format!(
                "the zero point's shape {:?} is not the scale's {:?}",
                z.dims(),
                s.dims()
            )))
        }
    };
    Ok(Params {
        scale: index.iter().map(|&i| sv[i]).collect(),
        zero: index.iter().map(|&i| zv[i]).collect(),
    })
}

pub(crate) fn quantize_linear(cx: &Cx) -> OpResult {
    let q = attrs!(cx, QuantizeLinear);
    let dtype = q
        .output_dtype
        .or(cx.dtypes.get(2).copied().flatten())
        .unwrap_or(DType::U8);
    let Some((lo, hi)) = int_range(dtype).filter(|_| dtype != DType::I32) else {
        return Err(cx.unsupported(format!("quantizing to {dtype} is not supported")));
    };
    let p = params(cx, q.axis, q.block_size)?;
    let x = cx.input(0)?;
    let y: Vec<f64> = values(x)
        .at(cx)?
        .into_iter()
        .zip(p.scale.iter().zip(&p.zero))
        .map(|(v, (&s, &z))| (round_half_even(v / s) + z).clamp(lo, hi))
        .collect();
    Ok(vec![tensor(y, x.dims()).at(cx)?])
}

pub(crate) fn dequantize_linear(cx: &Cx) -> OpResult {
    let d = attrs!(cx, DequantizeLinear);
    if let Some(t) = cx.dtypes.first().copied().flatten() {
        if int_range(t).is_none() {
            return Err(cx.unsupported(format!("dequantizing {t} is not supported")));
        }
    }
    let p = params(cx, d.axis, d.block_size)?;
    let x = cx.input(0)?;
    let y: Vec<f64> = values(x)
        .at(cx)?
        .into_iter()
        .zip(p.scale.iter().zip(&p.zero))
        .map(|(v, (&s, &z))| (v - z) * s)
        .collect();
    Ok(vec![tensor(y, x.dims()).at(cx)?])
}

pub(crate) fn dynamic_quantize_linear(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    let v = values(x).at(cx)?;
    if v.iter().any(|x| !x.is_finite()) {
        return Err(cx.fail("the input holds a NaN or an infinity: its range is undefined"));
    }
    let lo = v.iter().copied().fold(0.0f64, f64::min);
    let hi = v.iter().copied().fold(0.0f64, f64::max);
    let scale = (hi - lo) / 255.0;
    // an all-zero input: every value quantizes to the zero point 0
    let (zero, y) = if scale == 0.0 {
        (0.0, vec![0.0; v.len()])
    } else {
        let zero = round_half_even(-lo / scale).clamp(0.0, 255.0);
        let y = v
            .iter()
            .map(|&x| (round_half_even(x / scale) + zero).clamp(0.0, 255.0))
            .collect();
        (zero, y)
    };
    Ok(vec![
        tensor(y, x.dims()).at(cx)?,
        tensor(vec![scale], &[]).at(cx)?,
        tensor(vec![zero], &[]).at(cx)?,
    ])
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_close, flat, G};
    use super::round_half_even;
    use crate::ir::{Attr, DType, Tensor, TensorData, TypedData};

    #[test]
    fn rounding_is_half_to_even() {
        let got: Vec<f64> = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, 2.6, -2.6, 3.0]
            .iter()
            .map(|&x| round_half_even(x))
            .collect();
        assert_eq!(got, [0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 2.0, 3.0, -3.0, 3.0]);
    }

    fn init_typed(g: &mut G, name: &str, dtype: DType, dims: &[u64], data: TypedData) {
        let id = g.b.value(name);
        g.b.value_mut(id).init = Some(Box::new(Tensor {
            name: name.into(),
            dtype,
            dims: dims.into(),
            data: TensorData::Typed(data),
        }));
    }

    #[test]
    fn quantize_per_tensor_to_uint8_and_int8() {
        // x / 0.5 = 2.5, -1, 254, 1.5, -300: rounded 2, -1, 254, 2, -300
        let x = vec![1.25, -0.5, 127.0, 0.75, -150.0];
        // uint8, zero point 10: 12, 9, 264 → 255, 12, -290 → 0
        let mut g = G::new();
        g.input("x", &[5], x.clone()).init("s", &[], vec![0.5]);
        init_typed(&mut g, "z", DType::U8, &[], TypedData::I32(vec![10]));
        g.node("QuantizeLinear", &["x", "s", "z"], &["y"], vec![]);
        assert_close(&flat(&g.run1("y")), &[12.0, 9.0, 255.0, 12.0, 0.0]);
        // int8, zero point -3: -1, -4, 251 → 127, -1, -303 → -128
        // (a scale of shape [1] with a scalar zero point is per tensor too)
        let mut g = G::new();
        g.input("x", &[5], x.clone()).init("s", &[1], vec![0.5]);
        init_typed(&mut g, "z", DType::I8, &[], TypedData::I32(vec![-3]));
        g.node("QuantizeLinear", &["x", "s", "z"], &["y"], vec![]);
        assert_close(&flat(&g.run1("y")), &[-1.0, -4.0, 127.0, -1.0, -128.0]);
        // no zero point: uint8, zero 0: 2, 0 (−1 saturates), 254, 2, 0
        let mut g = G::new();
        g.input("x", &[5], x).init("s", &[], vec![0.5]);
        g.node("QuantizeLinear", &["x", "s"], &["y"], vec![]);
        assert_close(&flat(&g.run1("y")), &[2.0, 0.0, 254.0, 2.0, 0.0]);
    }

    #[test]
    fn quantize_and_dequantize_per_axis() {
        // x [2, 3], scales along axis 1: 1, 2, 4; zero points 0, 1, -1 (int8)
        let x = vec![3.0, 3.0, 3.0, -6.0, 5.0, 10.0];
        let mut g = G::new();
        g.input("x", &[2, 3], x)
            .init("s", &[3], vec![1.0, 2.0, 4.0]);
        init_typed(&mut g, "z", DType::I8, &[3], TypedData::I32(vec![0, 1, -1]));
        g.node("QuantizeLinear", &["x", "s", "z"], &["q"], vec![])
            .node("DequantizeLinear", &["q", "s", "z"], &["y"], vec![]);
        let out = g.run(&["q", "y"]).unwrap();
        // 3/1 = 3; 3/2 = 1.5 → 2, +1 = 3; 3/4 = 0.75 → 1, −1 = 0
        // −6; 5/2 = 2.5 → 2, +1 = 3; 10/4 = 2.5 → 2, −1 = 1
        assert_close(&flat(&out[0]), &[3.0, 3.0, 0.0, -6.0, 3.0, 1.0]);
        // (q − z)·s: 3, 4, 4, −6, 4, 8
        assert_close(&flat(&out[1]), &[3.0, 4.0, 4.0, -6.0, 4.0, 8.0]);
    }

    #[test]
    fn dequantize_blocked_and_axis0() {
        // q [2, 4] uint8, blocks of 2 along axis 1: scales [2, 2]
        let mut g = G::new();
        init_typed(
            &mut g,
            "q",
            DType::U8,
            &[2, 4],
            TypedData::I32(vec![1, 2, 3, 4, 5, 6, 7, 8]),
        );
        g.init("s", &[2, 2], vec![1.0, 10.0, 0.5, 2.0]).node(
            "DequantizeLinear",
            &["q", "s"],
            &["y"],
            vec![("axis", Attr::Int(1)), ("block_size", Attr::Int(2))],
        );
        g.opset = 21;
        assert_close(
            &flat(&g.run1("y")),
            &[1.0, 2.0, 30.0, 40.0, 2.5, 3.0, 14.0, 16.0],
        );
        // per-axis along axis 0 with a zero point
        let mut g = G::new();
        init_typed(
            &mut g,
            "q",
            DType::I8,
            &[2, 2],
            TypedData::I32(vec![-1, 1, 5, 7]),
        );
        init_typed(&mut g, "z", DType::I8, &[2], TypedData::I32(vec![1, 5]));
        g.init("s", &[2], vec![0.25, 3.0]).node(
            "DequantizeLinear",
            &["q", "s", "z"],
            &["y"],
            vec![("axis", Attr::Int(0))],
        );
        assert_close(&flat(&g.run1("y")), &[-0.5, 0.0, 0.0, 6.0]);
    }

    #[test]
    fn a_scale_of_the_wrong_shape_fails_in_words() {
        let mut g = G::new();
        g.input("x", &[2, 3], vec![0.0; 6])
            .init("s", &[2], vec![1.0, 1.0])
            .node("QuantizeLinear", &["x", "s"], &["y"], vec![]);
        let err = g.run(&["y"]).unwrap_err().to_string();
        assert!(err.contains("must have shape [3], found [2]"), "{err}");
    }

    #[test]
    fn dynamic_quantize_by_hand() {
        // range [-1, 4] (0 included): scale 5/255, zero point round(255/5) = 51;
        // 4 → 255 - 51 + 51 = 255, -1 → -51 + 51 = 0, 1 → round(51) + 51 = 102, 0 → 51
        let mut g = G::new();
        g.input("x", &[4], vec![4.0, -1.0, 1.0, 0.0]).node(
            "DynamicQuantizeLinear",
            &["x"],
            &["y", "s", "z"],
            vec![],
        );
        let out = g.run(&["y", "s", "z"]).unwrap();
        assert_close(&flat(&out[0]), &[255.0, 0.0, 102.0, 51.0]);
        assert_close(&flat(&out[1]), &[5.0 / 255.0]);
        assert_close(&flat(&out[2]), &[51.0]);
        // positive only: the range is [0, 2.55], scale 0.01, zero point 0
        let mut g = G::new();
        g.input("x", &[3], vec![2.55, 1.0, 0.5]).node(
            "DynamicQuantizeLinear",
            &["x"],
            &["y", "s", "z"],
            vec![],
        );
        let out = g.run(&["y", "s", "z"]).unwrap();
        assert_close(&flat(&out[1]), &[0.01]);
        assert_close(&flat(&out[2]), &[0.0]);
        assert_close(&flat(&out[0]), &[255.0, 100.0, 50.0]);
    }
}
