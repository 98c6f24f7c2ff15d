//! Control flow: `If` (the branch the condition picks), `Loop` (trip count `M` and/or condition,
//! loop-carried values, scan outputs stacked on a new first axis) and `Scan` (opset 9 on: state
//! values, scan inputs sliced along `scan_input_axes`, read backwards where
//! `scan_input_directions` says 1, scan outputs stacked along `scan_output_axes`, backwards where
//! `scan_output_directions` says 1; every list defaults to zeros), as the ONNX spec defines them.
//!
//! A subgraph runs in its own executor (its ops parsed once per node evaluation, its initializers
//! cached across iterations) with the values it captures of the graphs around it read from the
//! node's scope. Every run (a branch, an iteration) counts against
//! [`crate::verify::exec::MAX_SUBGRAPH_RUNS`] for the whole evaluation, nested runs included.

use candle_core::Tensor as CTensor;

use super::{attrs, check_size, tensor, to_ints, values, At, Cx, OpResult};
use crate::ir::{DType, Graph};
use crate::verify::exec::{ExecError, Executor};

type Typed = (CTensor, Option<DType>);

/// The graph held by attribute `attr`.
fn subgraph<'a>(cx: &Cx<'a>, attr: &str) -> Result<&'a Graph, ExecError> {
    cx.node
        .attrs
        .subgraphs()
        .find(|(name, _)| *name == attr)
        .map(|(_, g)| g)
        .ok_or_else(|| cx.fail(format!("attribute '{attr}' (a graph) is missing")))
}

/// One run of a subgraph, counted against the evaluation's budget. An error about the subgraph
/// as a whole (no inner node to name) names this node.
fn run_once(cx: &Cx, exec: &mut Executor, inputs: Vec<Typed>) -> Result<Vec<Typed>, ExecError> {
    cx.scope.spend_run().map_err(|e| cx.fail(e))?;
    exec.run_graph(inputs, cx.scope).map_err(|e| match e {
        ExecError::Failed { node, message } if node.is_empty() => cx.fail(message),
        other => other,
    })
}

/// The node's outputs, with the element types the subgraph gave them.
fn finish(cx: &Cx, outs: Vec<Typed>) -> OpResult {
    let (tensors, dtypes): (Vec<CTensor>, Vec<Option<DType>>) = outs.into_iter().unzip();
    *cx.out_dtypes.borrow_mut() = Some(dtypes);
    Ok(tensors)
}

/// A condition: one value, true when not zero.
fn truth(cx: &Cx, t: &CTensor, what: &str) -> Result<bool, ExecError> {
    match values(t).at(cx)?.as_slice() {
        [x] => Ok(*x != 0.0),
        _ => Err(cx.fail(format!(
            "{what} must hold one value, found shape {:?}",
            t.dims()
        ))),
    }
}

fn scalar(x: f64) -> candle_core::Result<CTensor> {
    tensor(vec![x], &[])
}

/// The per-iteration values of a scan output stacked along `axis` of the result.
fn stack(cx: &Cx, k: usize, parts: &[CTensor], axis: usize) -> Result<CTensor, ExecError> {
    let Some(first) = parts.first() else {
        return Err(cx.unsupported(format!(
            "scan output {k}: no iteration ran, so its shape is unknown"
        )));
    };
    if let Some(p) = parts.iter().find(|p| p.dims() != first.dims()) {
        return Err(cx.fail(format!(
            "scan output {k} changes shape between iterations ({:?}, then {:?})",
            first.dims(),
            p.dims()
        )));
    }
    let mut dims = first.dims().to_vec();
    dims.insert(axis.min(dims.len()), parts.len());
    check_size(cx, &dims)?;
    CTensor::stack(parts, axis).at(cx)
}

pub(crate) fn if_(cx: &Cx) -> OpResult {
    let cond = truth(cx, cx.input(0)?, "the condition")?;
    let branch = subgraph(cx, if cond { "then_branch" } else { "else_branch" })?;
    let mut exec = Executor::new(branch, cx.opset);
    let outs = run_once(cx, &mut exec, Vec::new())?;
    finish(cx, outs)
}

pub(crate) fn loop_(cx: &Cx) -> OpResult {
    let body = subgraph(cx, "body")?;
    let trips = match cx.opt(0) {
        None => None,
        Some(t) => match to_ints(t)
            .map_err(|e| cx.fail(format!("M: {e}")))?
            .as_slice()
        {
            [m] => Some(*m),
            _ => return Err(cx.fail(format!("M must hold one value, found shape {:?}", t.dims()))),
        },
    };
    let mut cond = match cx.opt(1) {
        None => true,
        Some(t) => truth(cx, t, "the condition")?,
    };
    let n_carried = cx.inputs.len().saturating_sub(2);
    let mut state: Vec<Typed> = (0..n_carried)
        .map(|j| {
            let t = cx.input(2 + j)?.clone();
            Ok((t, cx.dtypes.get(2 + j).copied().flatten()))
        })
        .collect::<Result<_, ExecError>>()?;
    let n_scan = body
        .outputs
        .len()
        .checked_sub(1 + n_carried)
        .ok_or_else(|| {
            cx.fail(format!(
            "the body has {} outputs, fewer than the condition and {n_carried} loop-carried values",
            body.outputs.len()
        ))
        })?;
    let mut scans: Vec<Vec<CTensor>> = vec![Vec::new(); n_scan];
    let mut scan_dtypes: Vec<Option<DType>> = vec![None; n_scan];
    let mut exec = Executor::new(body, cx.opset);
    let mut i: i64 = 0;
    while cond && trips.is_none_or(|m| i < m) {
        let mut ins = vec![
            (scalar(i as f64).at(cx)?, Some(DType::I64)),
            (scalar(1.0).at(cx)?, Some(DType::Bool)),
        ];
        ins.extend(state.iter().cloned());
        let mut outs = run_once(cx, &mut exec, ins)?.into_iter();
        let (c, _) = outs
            .next()
            .ok_or_else(|| cx.fail("the body gives no condition"))?;
        cond = truth(cx, &c, "the body's condition")?;
        for (slot, (t, d)) in state.iter_mut().zip(outs.by_ref()) {
            slot.1 = d.or(slot.1);
            slot.0 = t;
        }
        for (j, (t, d)) in outs.enumerate() {
            scans[j].push(t);
            scan_dtypes[j] = d;
        }
        i = i
            .checked_add(1)
            .ok_or_else(|| cx.fail("the iteration count overflows"))?;
    }
    let mut outs = state;
    for (k, (parts, d)) in scans.iter().zip(scan_dtypes).enumerate() {
        outs.push((stack(cx, k, parts, 0)?, d));
    }
    finish(cx, outs)
}

/// A per-input (or per-output) list attribute of `Scan`: zeros when absent, else one entry each.
fn per_slot(cx: &Cx, list: &[i64], n: usize, what: &str) -> Result<Vec<i64>, ExecError> {
    match list.len() {
        0 => Ok(vec![0; n]),
        len if len == n => Ok(list.to_vec()),
        len => Err(cx.fail(format!("'{what}' has {len} entries, expected {n}"))),
    }
}

pub(crate) fn scan(cx: &Cx) -> OpResult {
    let sc = attrs!(cx, Scan);
    if cx.opset < 9 {
        return Err(
            cx.unsupported("Scan before opset 9 (a batch axis and sequence_lens) is not supported")
        );
    }
    let body = subgraph(cx, "body")?;
    let n_scan = usize::try_from(sc.num_scan_inputs)
        .map_err(|_| cx.fail(format!("num_scan_inputs is {}", sc.num_scan_inputs)))?;
    let n_state = cx.inputs.len().checked_sub(n_scan).ok_or_else(|| {
        cx.fail(format!(
            "{} inputs, fewer than num_scan_inputs ({n_scan})",
            cx.inputs.len()
        ))
    })?;
    let n_out = body.outputs.len().checked_sub(n_state).ok_or_else(|| {
        cx.fail(format!(
            "the body has {} outputs, fewer than the {n_state} state values",
            body.outputs.len()
        ))
    })?;
    let in_axes = per_slot(cx, &sc.scan_input_axes, n_scan, "scan_input_axes")?;
    let in_dirs = per_slot(
        cx,
        &sc.scan_input_directions,
        n_scan,
        "scan_input_directions",
    )?;
    let out_axes = per_slot(cx, &sc.scan_output_axes, n_out, "scan_output_axes")?;
    let out_dirs = per_slot(
        cx,
        &sc.scan_output_directions,
        n_out,
        "scan_output_directions",
    )?;
    let mut state: Vec<Typed> = (0..n_state)
        .map(|j| Ok((cx.input(j)?.clone(), cx.dtypes.get(j).copied().flatten())))
        .collect::<Result<_, ExecError>>()?;
    // each scan input, its axis and its length
    let mut inputs = Vec::with_capacity(n_scan);
    let mut len: Option<usize> = None;
    for j in 0..n_scan {
        let t = cx.input(n_state + j)?;
        let axis = cx.axis(in_axes[j], t.rank())?;
        let n = t.dims()[axis];
        match len {
            Some(l) if l != n => {
                return Err(cx.fail(format!(
                    "scan input {j} has {n} elements along axis {axis}, scan input 0 has {l}"
                )))
            }
            _ => len = Some(n),
        }
        let backwards = match in_dirs[j] {
            0 => false,
            1 => true,
            d => return Err(cx.fail(format!("scan input {j}: direction {d} is not 0 or 1"))),
        };
        inputs.push((
            t,
            axis,
            backwards,
            cx.dtypes.get(n_state + j).copied().flatten(),
        ));
    }
    let len = len.unwrap_or(0);
    let mut scans: Vec<Vec<CTensor>> = vec![Vec::new(); n_out];
    let mut scan_dtypes: Vec<Option<DType>> = vec![None; n_out];
    let mut exec = Executor::new(body, cx.opset);
    for step in 0..len {
        let mut ins = state.clone();
        for &(t, axis, backwards, d) in &inputs {
            let at = if backwards { len - 1 - step } else { step };
            let elem = t.narrow(axis, at, 1).at(cx)?.squeeze(axis).at(cx)?;
            ins.push((elem, d));
        }
        let mut outs = run_once(cx, &mut exec, ins)?.into_iter();
        for (slot, (t, d)) in state.iter_mut().zip(outs.by_ref()) {
            slot.1 = d.or(slot.1);
            slot.0 = t;
        }
        for (k, (t, d)) in outs.enumerate() {
            scans[k].push(t);
            scan_dtypes[k] = d;
        }
    }
    let mut outs = state;
    for (k, (mut parts, d)) in scans.into_iter().zip(scan_dtypes).enumerate() {
        match out_dirs[k] {
            0 => {}
            1 => parts.reverse(),
            d => return Err(cx.fail(format!("scan output {k}: direction {d} is not 0 or 1"))),
        }
        let rank = parts.first().map_or(0, |p| p.rank()) + 1;
        let axis = cx.axis(out_axes[k], rank)?;
        outs.push((stack(cx, k, &parts, axis)?, d));
    }
    finish(cx, outs)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_close, flat, ints, G};
    use crate::ir::Attr;
    use crate::verify::exec::{Scope, MAX_SUBGRAPH_RUNS};

    /// `If(c)` over x = [1, -2, 3]: then 2·x (a constant of the branch), else -x.
    fn if_graph(cond: f64) -> G {
        let mut then = G::sub();
        then.init("two", &[1], vec![2.0])
            .node("Mul", &["x", "two"], &["z"], vec![])
            .output("z");
        let mut other = G::sub();
        other.node("Neg", &["x"], &["z"], vec![]).output("z");
        let mut g = G::new();
        g.input("x", &[3], vec![1.0, -2.0, 3.0])
            .input("c", &[], vec![cond])
            .node(
                "If",
                &["c"],
                &["y"],
                vec![
                    ("then_branch", then.graph()),
                    ("else_branch", other.graph()),
                ],
            );
        g
    }

    #[test]
    fn if_runs_the_branch_the_condition_picks() {
        assert_close(&flat(&if_graph(1.0).run1("y")), &[2.0, -4.0, 6.0]);
        assert_close(&flat(&if_graph(0.0).run1("y")), &[-1.0, 2.0, -3.0]);
    }

    #[test]
    fn an_unsupported_op_inside_a_branch_is_found_statically() {
        let mut then = G::sub();
        then.node("NoSuchOp", &["x"], &["z"], vec![]).output("z");
        let mut other = G::sub();
        other.node("Neg", &["x"], &["z"], vec![]).output("z");
        let mut g = G::new();
        g.input("x", &[1], vec![1.0])
            .input("c", &[], vec![0.0])
            .node(
                "If",
                &["c"],
                &["y"],
                vec![
                    ("then_branch", then.graph()),
                    ("else_branch", other.graph()),
                ],
            );
        let graph = g.b.finish().unwrap();
        let found = crate::verify::exec::Executor::new(&graph, 17).unsupported(&[0]);
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].1,
            "in 'then_branch', node 'nosuchop_z' (NoSuchOp): the interpreter has no implementation of this op"
        );
    }

    #[test]
    fn if_without_its_branch_fails_in_words() {
        let mut g = G::new();
        g.input("c", &[], vec![1.0])
            .node("If", &["c"], &["y"], vec![]);
        let err = g.run(&["y"]).unwrap_err().to_string();
        assert!(err.contains("'then_branch'"), "{err}");
    }

    /// A Loop body `(i, cond, s) -> (cond', s + i + 1, s + i + 1)`, where cond' is the condition
    /// that came in, or `s + i + 1 < 10` with `until_ten`.
    fn sum_body(until_ten: bool) -> Attr {
        let mut b = G::sub();
        b.formal("i")
            .formal("cond_in")
            .formal("s")
            .init_i64("one", vec![1])
            .node("Add", &["i", "one"], &["i1"], vec![])
            .node("Add", &["s", "i1"], &["s_out"], vec![])
            .node("Identity", &["s_out"], &["scan"], vec![]);
        if until_ten {
            b.init("ten", &[1], vec![10.0])
                .node("Less", &["s_out", "ten"], &["cond_out"], vec![]);
        } else {
            b.node("Identity", &["cond_in"], &["cond_out"], vec![]);
        }
        b.output("cond_out").output("s_out").output("scan");
        b.graph()
    }

    #[test]
    fn loop_sums_one_to_five_and_stacks_the_partial_sums() {
        let mut g = G::new();
        g.input("s0", &[], vec![0.0])
            .input("c", &[], vec![1.0])
            .init_i64("m", vec![5])
            .node(
                "Loop",
                &["m", "c", "s0"],
                &["s", "partial"],
                vec![("body", sum_body(false))],
            );
        let out = g.run(&["s", "partial"]).unwrap();
        assert_close(&flat(&out[0]), &[15.0]);
        assert_eq!(out[1].dims(), [5, 1]);
        assert_close(&flat(&out[1]), &[1.0, 3.0, 6.0, 10.0, 15.0]);
    }

    #[test]
    fn loop_stops_when_the_body_says_so() {
        // no trip count: 1, 3, 6, 10 and 10 < 10 is false
        let mut g = G::new();
        g.input("s0", &[], vec![0.0])
            .input("c", &[], vec![1.0])
            .node(
                "Loop",
                &["", "c", "s0"],
                &["s", "partial"],
                vec![("body", sum_body(true))],
            );
        let out = g.run(&["s", "partial"]).unwrap();
        assert_close(&flat(&out[0]), &[10.0]);
        assert_close(&flat(&out[1]), &[1.0, 3.0, 6.0, 10.0]);
    }

    #[test]
    fn a_loop_that_does_not_start_keeps_its_initial_values() {
        let mut b = G::sub();
        b.formal("i")
            .formal("cond_in")
            .formal("s")
            .node("Neg", &["s"], &["s_out"], vec![])
            .node("Identity", &["cond_in"], &["cond_out"], vec![])
            .output("cond_out")
            .output("s_out");
        let body = b.graph();
        // a false condition
        let mut g = G::new();
        g.input("s0", &[2], vec![7.0, -1.0])
            .input("c", &[], vec![0.0])
            .node(
                "Loop",
                &["", "c", "s0"],
                &["s"],
                vec![("body", body.clone())],
            );
        assert_close(&flat(&g.run1("s")), &[7.0, -1.0]);
        // a zero trip count; three trips negate three times
        for (m, want) in [(0, [7.0, -1.0]), (3, [-7.0, 1.0])] {
            let mut g = G::new();
            g.input("s0", &[2], vec![7.0, -1.0])
                .init_i64("m", vec![m])
                .node(
                    "Loop",
                    &["m", "", "s0"],
                    &["s"],
                    vec![("body", body.clone())],
                );
            assert_close(&flat(&g.run1("s")), &want);
        }
    }

    #[test]
    fn a_loop_body_captures_values_of_every_enclosing_graph() {
        // the body holds an If whose branch reads x (main graph) and s (the body's input):
        // three trips from 0 give 3·x
        let mut then = G::sub();
        then.node("Add", &["s", "x"], &["u"], vec![]).output("u");
        let mut other = G::sub();
        other.node("Identity", &["s"], &["u"], vec![]).output("u");
        let mut b = G::sub();
        b.formal("i")
            .formal("cond_in")
            .formal("s")
            .node(
                "If",
                &["cond_in"],
                &["s_out"],
                vec![
                    ("then_branch", then.graph()),
                    ("else_branch", other.graph()),
                ],
            )
            .node("Identity", &["cond_in"], &["cond_out"], vec![])
            .output("cond_out")
            .output("s_out");
        let mut g = G::new();
        g.input("x", &[2], vec![0.5, -2.0])
            .input("s0", &[2], vec![0.0, 0.0])
            .init_i64("m", vec![3])
            .node("Loop", &["m", "", "s0"], &["s"], vec![("body", b.graph())]);
        assert_close(&flat(&g.run1("s")), &[1.5, -6.0]);
    }

    #[test]
    fn subgraph_runs_are_bounded() {
        let scope = Scope::default();
        scope.runs.set(MAX_SUBGRAPH_RUNS - 1);
        assert!(scope.spend_run().is_ok());
        let err = scope.spend_run().unwrap_err();
        assert!(err.contains("subgraph runs"), "{err}");
        // a loop with neither a trip count nor a condition that ever turns false
        let mut b = G::sub();
        b.formal("i")
            .formal("cond_in")
            .formal("s")
            .node("Identity", &["cond_in"], &["cond_out"], vec![])
            .node("Identity", &["s"], &["s_out"], vec![])
            .output("cond_out")
            .output("s_out");
        let mut g = G::new();
        g.input("s0", &[], vec![1.0]).node(
            "Loop",
            &["", "", "s0"],
            &["s"],
            vec![("body", b.graph())],
        );
        let err = g.run(&["s"]).unwrap_err().to_string();
        assert!(err.contains("more than 65536 subgraph runs"), "{err}");
    }

    /// A Scan body `(s, x) -> (s + x, s + x)`.
    fn cumsum_body() -> Attr {
        let mut b = G::sub();
        b.formal("s")
            .formal("x")
            .node("Add", &["s", "x"], &["s_out"], vec![])
            .node("Identity", &["s_out"], &["y"], vec![])
            .output("s_out")
            .output("y");
        b.graph()
    }

    fn scan(x: (&[usize], Vec<f64>), attrs: Vec<(&str, Attr)>) -> Vec<Vec<f64>> {
        let mut all = vec![("body", cumsum_body()), ("num_scan_inputs", Attr::Int(1))];
        all.extend(attrs);
        let mut g = G::new();
        g.input("s0", &[2], vec![0.0, 0.0])
            .input("x", x.0, x.1)
            .node("Scan", &["s0", "x"], &["s", "y"], all);
        let out = g.run(&["s", "y"]).unwrap();
        out.iter().map(flat).collect()
    }

    #[test]
    fn scan_computes_a_cumulative_sum() {
        let rows = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        let out = scan((&[4, 2], rows.clone()), vec![]);
        assert_close(&out[0], &[16.0, 20.0]);
        assert_close(&out[1], &[1.0, 2.0, 4.0, 6.0, 9.0, 12.0, 16.0, 20.0]);
        // read backwards and stacked backwards: the suffix sums, in row order
        let out = scan(
            (&[4, 2], rows),
            vec![
                ("scan_input_directions", ints(&[1])),
                ("scan_output_directions", ints(&[1])),
            ],
        );
        assert_close(&out[0], &[16.0, 20.0]);
        assert_close(&out[1], &[16.0, 20.0, 15.0, 18.0, 12.0, 14.0, 7.0, 8.0]);
        // the sequence along axis 1 of [2, 4], stacked along axis -1
        let cols = vec![1.0, 3.0, 5.0, 7.0, 2.0, 4.0, 6.0, 8.0];
        let out = scan(
            (&[2, 4], cols),
            vec![
                ("scan_input_axes", ints(&[1])),
                ("scan_output_axes", ints(&[-1])),
            ],
        );
        assert_close(&out[0], &[16.0, 20.0]);
        assert_close(&out[1], &[1.0, 4.0, 9.0, 16.0, 2.0, 6.0, 12.0, 20.0]);
    }

    #[test]
    fn scan_attributes_are_checked() {
        let mut g = G::new();
        g.input("s0", &[2], vec![0.0, 0.0])
            .input("x", &[4, 2], vec![0.0; 8])
            .node(
                "Scan",
                &["s0", "x"],
                &["s", "y"],
                vec![
                    ("body", cumsum_body()),
                    ("num_scan_inputs", Attr::Int(1)),
                    ("scan_input_axes", ints(&[0, 1])),
                ],
            );
        let err = g.run(&["s", "y"]).unwrap_err().to_string();
        assert!(
            err.contains("'scan_input_axes' has 2 entries, expected 1"),
            "{err}"
        );
    }
}
