#!/usr/bin/env python3
"""An independent multiply-accumulate (MAC) reference for the corpus truth files.

Computed here, in Python, from textbook formulas applied to the shapes
onnxruntime measured (``values`` of truth/<name>.json, the bound graph inputs)
and the initializer shapes stored in the model, plus the ONNX node attributes.
It is deliberately written without reference to nnlint's own implementation:
it is a second opinion on nnlint's ``macs``.

The convention (the one nnlint documents in README.md, "MACs"): only the
multiply-accumulates of matrix products and convolutions are counted:

  Conv, ConvTranspose, Gemm, MatMul, Einsum, LSTM, GRU, RNN (default domain),
  their quantized forms ConvInteger, QLinearConv, MatMulInteger, QLinearMatMul
  (default domain), and onnxruntime's contrib ops QGemm, FusedMatMul,
  MatMulNBits, Attention, QAttention, MultiHeadAttention, GroupQueryAttention,
  DynamicQuantizeLSTM, QLinearConv (com.microsoft).

Every other op counts 0: element-wise ops, normalisations, pooling, softmax,
bias additions, activations, rotary embeddings, and also the matrix products
hidden in ops outside the list (ai.onnx.ml.LinearClassifier, com.microsoft
FusedConv / FusedGemm / MatMulIntegerToFloat / DynamicQuantizeMatMul, ...).
FLOPs would be 2 x MACs; they are not stored.

Formulas (numel = product of a shape's dims; shapes are the measured ones):

* Conv / ConvInteger / QLinearConv (ONNX operators.md "Conv": X (N, C, D1..Dn),
  W (M, C/group, k1..kn), Y (N, M, ...)): every output element is a dot
  product over C/group input channels and the kernel window:
      MACs = numel(Y) * (C/group) * prod(k) = numel(Y) * prod(W.shape[1:])
  (padding taps are counted as if they were real: the dense textbook figure).
  The weight is input 1 (Conv, ConvInteger) or 3 (QLinearConv: x, x_scale,
  x_zero_point, w, ...). The bias add is not a MAC.
* ConvTranspose (operators.md "ConvTranspose": W (C, M/group, k1..kn)): every
  input element is scattered to (M/group) * prod(k) outputs:
      MACs = numel(X) * prod(W.shape[1:])
  (taps that land in the cropped padding are counted: the dense figure).
* MatMul / MatMulInteger / QLinearMatMul (numpy matmul semantics, with
  broadcasting): every output element is a dot product of length K, K the last
  dim of A (its only dim when A is 1-D):
      MACs = numel(Y) * K
  A is input 0, B input 1 (MatMulInteger) or 3 (QLinearMatMul: a, a_scale,
  a_zero_point, b, ...).
* FusedMatMul (ContribOperators.md: numpy matmul with transA / transB on the
  last two dims, transBatchA / transBatchB moving dim 0 next to the matrix
  dims): MACs = numel(Y) * K, K = A.shape[-1] (transA=0), A.shape[-2]
  (transA=1, transBatchA=0) or A.shape[0] (transA=1, transBatchA=1). alpha is a
  scale, not counted.
* Gemm (operators.md "Gemm": Y = alpha*A'*B' + beta*C, A' (M, K), B' (K, N)):
      MACs = M * N * K = numel(Y) * K, K = A.shape[1] (transA=0) or A.shape[0]
  alpha, beta and C are not MACs. QGemm (ContribOperators.md: A input 0, B
  input 3, same transA / transB): the same.
* MatMulNBits (ContribOperators.md: Y = A x dequant(B)^T with the logical
  weight (N, K) given by the attributes N and K):
      MACs = numel(Y) * K (attribute K); dequantisation is not counted.
* LSTM / GRU / RNN (operators.md: X (seq_length, batch, input_size), or
  (batch, seq_length, input_size) when layout=1; W (dirs, G*hidden, input),
  R (dirs, G*hidden, hidden)): per time step, per direction and per batch row,
  the G gate pre-activations are X_t*W^T (G*hidden*input) and H_{t-1}*R^T
  (G*hidden*hidden):
      MACs = dirs * seq_length * batch * G * hidden * (input + hidden)
  with G = 4 (LSTM), 3 (GRU), 1 (RNN). Peepholes (P), gate element-wise
  products, biases and activations are element-wise: not counted. The padded
  seq_length is used even when sequence_lens shortens some rows (a dense
  kernel's figure). dirs = 2 for direction="bidirectional", else 1; hidden =
  attribute hidden_size, else R.shape[-1]; input = X.shape[-1].
  DynamicQuantizeLSTM (ContribOperators.md: X (seq_length, batch, input), W
  (dirs, input, 4*hidden), R (dirs, hidden, 4*hidden)): the LSTM formula,
  hidden = attribute hidden_size.
* Einsum (operators.md "Einsum"): for a two-operand contraction every
  combination of the distinct indices is one multiply-accumulate:
      MACs = prod(size of every distinct index of the equation)
  ("..." broadcast dims count as indices). One operand (a transpose, trace or
  sum) has no products: 0. Three or more operands: the cost depends on the
  contraction order the runtime picks, so it is not computed (null).
* Attention (ContribOperators.md com.microsoft.Attention: input (B, S, Din),
  weights (Din, Dq + Dk + Dv), qkv_hidden_sizes = (Dq, Dk, Dv), else each
  weights.shape[1] / 3; past (2, B, heads, P, head_size); present
  (2, B, heads, T, head_size), T = P + S):
      QKV projection   B*S*Din*(Dq + Dk + Dv)
      Q K^T            B*heads*S*T*(Dq/heads) = B*S*T*Dq
      softmax(QK^T) V  B*heads*S*T*(Dv/heads) = B*S*T*Dv
  T is the present output's dim 3 when it is measured, else P + S (P = 0
  without past). With past_present_share_buffer=1 past and present have the
  maximum length and the real one is the value of the past_sequence_length
  input: not derivable from shapes, so null. The mask (mask_index in any of
  its forms: (B), (2B), (3B+2), (B, T), (B, S, T), (B, 1, M, M)),
  attention_bias and unidirectional=1 only change which scores are kept: the
  dense S x T products are counted regardless.
  QAttention (ContribOperators.md: input 0, weight (Din, 3*hidden) input 1,
  past input 8): the same, Dq = Dk = Dv = weight.shape[1] / 3.
* MultiHeadAttention (ContribOperators.md: query, key, value come already
  projected; "Bias from input projection is included" is an add): only
      Q K^T + softmax(QK^T) V = B*S*T*(Dq + Dv)
  query (B, S, Dq), or packed QKV (B, S, heads, 3, head_size) with no key /
  value; key (B, L, Dk), packed KV (B, L, heads, 2, head_size), or BNSH
  (B, heads, L, head_size); value (B, L, Dv) or BNSH (B, heads, L, head_v);
  T = present_key.shape[2] when measured, else past_key's P + L. With the
  past_sequence_length input (buffer sharing) T is a value: null.
* GroupQueryAttention (ContribOperators.md: query (B, S, heads*head_size) or
  packed (B, S, (heads + 2*kv_heads)*head_size); each query head attends to its
  key/value head): Q K^T + A V = 2 * B*heads*S*T*head_size, T =
  present_key.shape[2] (= P + S) when the present buffer is not the past buffer
  grown in place; with buffer sharing (past and present of the same length) T
  is the value of total_sequence_length: taken when it is an initializer,
  else null. Causal / local-window masking: dense count, as for Attention.

Nodes whose outputs the truth marks "const" (all inputs are initializers) are
counted too: onnxruntime with ORT_DISABLE_ALL runs them on every call; the
truth's macs_by_node marks them "const": true.

Control flow. onnxruntime exposes main-graph values only, so the shapes inside
If / Loop / Scan bodies are not measured. When a body (at any depth) holds a
MAC op, the model is executed once more with onnx's reference evaluator
(onnx.reference.ReferenceEvaluator, independent of onnxruntime and of nnlint)
on the same seeded feeds; the MAC nodes of every subgraph are instrumented and
record the shapes of each execution: the If branch that really runs with these
feeds, each Loop iteration and Scan step. Those shapes are trusted only if
every main-graph value the evaluator computes has the shape onnxruntime
measured (and, in a full truth run, every main-graph If condition has the
value onnxruntime computed); otherwise, or if the evaluator cannot run the
model, "macs" is null with "macs_skipped" saying why. Subgraphs without MAC
ops contribute 0 and are not executed. The If counted is the branch that runs
on the truth's feeds, not the larger one.
"""

import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# (domain, op_type) of every op that carries MACs; "" is the default domain
MAC_OPS = {
    ("", "Conv"), ("", "ConvTranspose"), ("", "Gemm"), ("", "MatMul"), ("", "Einsum"),
    ("", "LSTM"), ("", "GRU"), ("", "RNN"),
    ("", "ConvInteger"), ("", "QLinearConv"), ("", "MatMulInteger"), ("", "QLinearMatMul"),
    ("com.microsoft", "QGemm"), ("com.microsoft", "FusedMatMul"), ("com.microsoft", "MatMulNBits"),
    ("com.microsoft", "Attention"), ("com.microsoft", "QAttention"),
    ("com.microsoft", "MultiHeadAttention"), ("com.microsoft", "GroupQueryAttention"),
    ("com.microsoft", "DynamicQuantizeLSTM"), ("com.microsoft", "QLinearConv"),
}

SOURCE = ("tools/corpus/macs.py: textbook formulas on onnxruntime's measured shapes, initializer shapes and "
          "node attributes (see its docstring); subgraph shapes from onnx.reference.ReferenceEvaluator on the "
          "same feeds")


class Unknown(Exception):
    """A node's MACs cannot be derived from the shapes at hand."""


def dom(n):
    return "" if n.domain in ("", "ai.onnx") else n.domain


def is_mac(n):
    return (dom(n), n.op_type) in MAC_OPS


def numel(shape):
    return math.prod(shape)


def attrs(n):
    import onnx
    return {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}


def need(shapes, i, what, n):
    s = shapes[i] if i < len(shapes) else None
    if s is None:
        raise Unknown(f"{n.op_type} {n.name!r}: shape of {what} (input {i}) unknown")
    return list(s)


def need_out(shapes, i, what, n):
    s = shapes[i] if i < len(shapes) else None
    if s is None:
        raise Unknown(f"{n.op_type} {n.name!r}: shape of {what} (output {i}) unknown")
    return list(s)


def opt(shapes, i):
    return list(shapes[i]) if i < len(shapes) and shapes[i] is not None else None


def conv(n, ins, outs, w_at):
    w = need(ins, w_at, "W", n)
    y = need_out(outs, 0, "Y", n)
    return numel(y) * numel(w[1:])


def conv_transpose(n, ins, outs):
    x = need(ins, 0, "X", n)
    w = need(ins, 1, "W", n)
    return numel(x) * numel(w[1:])


def matmul(n, ins, outs):
    a = need(ins, 0, "A", n)
    y = need_out(outs, 0, "Y", n)
    k = a[-1]
    return numel(y) * k


def fused_matmul(n, ins, outs):
    at = attrs(n)
    a = need(ins, 0, "A", n)
    y = need_out(outs, 0, "Y", n)
    if not at.get("transA", 0):
        k = a[-1]
    elif at.get("transBatchA", 0):
        k = a[0]
    else:
        k = a[-2]
    return numel(y) * k


def gemm(n, ins, outs):
    at = attrs(n)
    a = need(ins, 0, "A", n)
    y = need_out(outs, 0, "Y", n)
    if len(a) != 2:
        raise Unknown(f"Gemm {n.name!r}: A is not 2-D: {a}")
    k = a[0] if at.get("transA", 0) else a[1]
    return numel(y) * k


def matmul_nbits(n, ins, outs):
    at = attrs(n)
    y = need_out(outs, 0, "Y", n)
    return numel(y) * int(at["K"])


def recurrent(n, ins, outs, gates, layout_attr=True):
    at = attrs(n)
    x = need(ins, 0, "X", n)
    if len(x) != 3:
        raise Unknown(f"{n.op_type} {n.name!r}: X is not 3-D: {x}")
    if layout_attr and at.get("layout", 0) == 1:
        batch, seq = x[0], x[1]
    else:
        seq, batch = x[0], x[1]
    dirs = 2 if at.get("direction", b"forward") in (b"bidirectional", "bidirectional") else 1
    if "hidden_size" in at:
        hidden = int(at["hidden_size"])
    else:
        hidden = need(ins, 2, "R", n)[-1]
    return dirs * seq * batch * gates * hidden * (x[2] + hidden)


def einsum(n, ins, outs):
    eq = attrs(n)["equation"]
    eq = eq.decode() if isinstance(eq, bytes) else eq
    lhs = eq.replace(" ", "").split("->")[0]
    terms = lhs.split(",")
    if len(terms) == 1:
        return 0
    if len(terms) > 2:
        raise Unknown(f"Einsum {n.name!r}: {len(terms)} operands, the contraction order is the runtime's")
    sizes = {}
    ell = None  # broadcast shape of the "..." dims
    for i, t in enumerate(terms):
        s = need(ins, i, f"operand {i}", n)
        if "..." in t:
            pre, post = t.split("...")
            k = len(s) - len(pre) - len(post)
            e = s[len(pre):len(pre) + k]
            if ell is None:
                ell = e
            else:
                r = max(len(ell), len(e))
                a = [1] * (r - len(ell)) + ell
                b = [1] * (r - len(e)) + e
                ell = [max(p, q) for p, q in zip(a, b)]
            letters = list(pre) + list(post)
            dims = s[:len(pre)] + s[len(pre) + k:]
        else:
            letters, dims = list(t), s
        if len(letters) != len(dims):
            raise Unknown(f"Einsum {n.name!r}: operand {i} {s} does not match {t!r}")
        for c, d in zip(letters, dims):
            sizes[c] = max(sizes.get(c, 1), d)  # a 1 broadcasts
    return numel(sizes.values()) * numel(ell or [])


def attention(n, ins, outs, quantized):
    at = attrs(n)
    x = need(ins, 0, "input", n)
    w = need(ins, 1, "weights", n)
    if len(x) != 3:
        raise Unknown(f"{n.op_type} {n.name!r}: input is not 3-D: {x}")
    b, s, din = x
    if not quantized and at.get("qkv_hidden_sizes"):
        dq, dk, dv = [int(v) for v in at["qkv_hidden_sizes"]]
    else:
        dq = dk = dv = w[1] // 3
    past = opt(ins, 8 if quantized else 4)
    present = opt(outs, 1)
    if at.get("past_present_share_buffer", 0):
        raise Unknown(f"{n.op_type} {n.name!r}: past_present_share_buffer=1: the past length is a value")
    if present is not None:
        t = present[3]
    else:
        t = (past[3] if past is not None else 0) + s
    return b * s * din * (dq + dk + dv) + b * s * t * dq + b * s * t * dv


def multi_head_attention(n, ins, outs):
    q = need(ins, 0, "query", n)
    key, value = opt(ins, 1), opt(ins, 2)
    if len(ins) > 8 and ins[8] is not None:
        raise Unknown(f"MultiHeadAttention {n.name!r}: past_sequence_length given (buffer sharing): T is a value")
    if len(q) == 5:  # packed QKV (B, S, heads, 3, head_size)
        b, s = q[0], q[1]
        dq = dv = q[2] * q[4]
        length = s
    else:
        b, s, dq = q
        if key is None:
            raise Unknown(f"MultiHeadAttention {n.name!r}: no key")
        if len(key) == 5:  # packed KV (B, L, heads, 2, head_size)
            length, dv = key[1], key[2] * key[4]
        else:
            if len(key) == 4:  # BNSH (B, heads, L, head_size)
                length = key[2]
            else:
                length = key[1]
            if value is None:
                raise Unknown(f"MultiHeadAttention {n.name!r}: no value")
            dv = value[1] * value[3] if len(value) == 4 else value[2]
    present_key = opt(outs, 1)
    past_key = opt(ins, 6)
    if present_key is not None:
        t = present_key[2]
    else:
        t = (past_key[2] if past_key is not None else 0) + length
    return b * s * t * (dq + dv)


def group_query_attention(n, ins, outs, const_values):
    at = attrs(n)
    heads, kv_heads = int(at["num_heads"]), int(at["kv_num_heads"])
    q = need(ins, 0, "query", n)
    b, s, d = q
    key = opt(ins, 1)
    head = d // (heads + 2 * kv_heads) if key is None else d // heads
    past_key, present_key = opt(ins, 3), opt(outs, 1)
    if past_key is not None and present_key is not None and past_key[2] == present_key[2] and past_key[2] != s:
        tsl = n.input[6] if len(n.input) > 6 else ""
        if tsl in const_values:
            t = int(np.asarray(const_values[tsl]).reshape(-1)[0])
        else:
            raise Unknown(f"GroupQueryAttention {n.name!r}: shared KV buffer: T is the value of "
                          "total_sequence_length")
    elif present_key is not None:
        t = present_key[2]
    else:
        t = (past_key[2] if past_key is not None else 0) + s
    return 2 * b * heads * s * t * head


def node_macs(n, ins, outs, const_values=None):
    """MACs of one node from its input and output shapes (lists, None where unknown / absent)."""
    d, op = dom(n), n.op_type
    if (d, op) not in MAC_OPS:
        return 0
    if op in ("Conv", "ConvInteger"):
        return conv(n, ins, outs, 1)
    if op == "QLinearConv":
        return conv(n, ins, outs, 3)
    if op == "ConvTranspose":
        return conv_transpose(n, ins, outs)
    if op in ("MatMul", "MatMulInteger", "QLinearMatMul"):
        return matmul(n, ins, outs)  # A is input 0 in all three
    if op == "FusedMatMul":
        return fused_matmul(n, ins, outs)
    if op in ("Gemm", "QGemm"):
        return gemm(n, ins, outs)
    if op == "MatMulNBits":
        return matmul_nbits(n, ins, outs)
    if op in ("LSTM", "DynamicQuantizeLSTM"):
        return recurrent(n, ins, outs, 4, layout_attr=(op == "LSTM"))
    if op == "GRU":
        return recurrent(n, ins, outs, 3)
    if op == "RNN":
        return recurrent(n, ins, outs, 1)
    if op == "Einsum":
        return einsum(n, ins, outs)
    if op in ("Attention", "QAttention"):
        return attention(n, ins, outs, quantized=(op == "QAttention"))
    if op == "MultiHeadAttention":
        return multi_head_attention(n, ins, outs)
    if op == "GroupQueryAttention":
        return group_query_attention(n, ins, outs, const_values or {})
    raise AssertionError(op)


def subgraphs_of(n):
    for a in n.attribute:
        subs = [a.g] if a.type == a.GRAPH else list(a.graphs) if a.type == a.GRAPHS else []
        for i, g in enumerate(subs):
            yield a, i, g


def sub_evaluator(rt, a, i):
    """The onnx.reference evaluator of subgraph `i` of attribute `a` of the runtime node `rt`, or
    None when it holds none."""
    sub = getattr(rt, a.name, None)
    subs = sub if isinstance(sub, list) else [sub]
    sub = subs[i] if i < len(subs) else None
    return sub if sub is not None and hasattr(sub, "rt_nodes_") else None


def sub_path(prefix, n, a, i):
    """The subgraph naming of fetch.walk_subgraphs / the truth's skipped list."""
    return f"{prefix}{n.name or n.op_type}:{a.name}" + (f"[{i}]" if a.type == a.GRAPHS else "")


def mac_subgraphs(graph, prefix=""):
    """{path: [MAC nodes directly in it]} for every subgraph below `graph` (all depths)."""
    out = {}
    for n in graph.node:
        for a, i, g in subgraphs_of(n):
            p = sub_path(prefix, n, a, i)
            out[p] = [m for m in g.node if is_mac(m)]
            out.update(mac_subgraphs(g, p + " > "))
    return out


def key_of(n):
    return n.name or (n.output[0] if n.output else n.op_type)


def run_reference(model, feeds, truth_values, ort_values=None):
    """Execute `model` with onnx's reference evaluator and record every subgraph MAC node's executions.

    Returns {path: {node key: (node, [(in_shapes, out_shapes), ...])}}; raises Unknown when the
    evaluator fails or disagrees with onnxruntime on a main-graph shape (or If condition).
    """
    import warnings

    from onnx.reference import ReferenceEvaluator

    try:
        ev = ReferenceEvaluator(model)
    except Exception as e:  # noqa: BLE001
        raise Unknown(f"onnx.reference cannot load the model: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    records = {}

    def shape(v):
        return list(np.shape(v)) if v is not None else None

    def wrap(rt, path, proto):
        orig = rt.run
        slot = records.setdefault(path, {}).setdefault(key_of(proto), (proto, []))

        def run(*args, **kwargs):
            res = orig(*args, **kwargs)
            slot[1].append(([shape(a) for a in args], [shape(r) for r in res]))
            return res
        rt.run = run

    def instrument(evaluator, prefix):
        for rt in evaluator.rt_nodes_:
            proto = rt.onnx_node
            if prefix and is_mac(proto):
                wrap(rt, prefix[:-3], proto)
            for a, i, _ in subgraphs_of(proto):
                sub = sub_evaluator(rt, a, i)
                if sub is None:
                    raise Unknown(f"onnx.reference holds no evaluator for {sub_path(prefix, proto, a, i)}")
                instrument(sub, sub_path(prefix, proto, a, i) + " > ")

    instrument(ev, "")
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            results = ev.run(None, feeds, intermediate=True)
    except Unknown:
        raise
    except Exception as e:  # noqa: BLE001
        raise Unknown(f"onnx.reference cannot run the model: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    # the evaluator's main graph must agree with onnxruntime's measurements
    for name, t in truth_values.items():
        if "shape" not in t or name not in results:
            continue
        if list(np.shape(results[name])) != t["shape"]:
            raise Unknown(f"onnx.reference and onnxruntime disagree on {name!r}: "
                          f"{list(np.shape(results[name]))} vs {t['shape']}")
    if ort_values is not None:
        for n in model.graph.node:
            if n.op_type == "If" and dom(n) == "" and n.input[0] in ort_values:
                a = np.asarray(results[n.input[0]]).reshape(-1)
                b = np.asarray(ort_values[n.input[0]]).reshape(-1)
                if a.shape != b.shape or bool(a[0]) != bool(b[0]):
                    raise Unknown(f"If {n.name!r}: onnx.reference takes another branch than onnxruntime")
    return records


def const_inputs(model):
    """Initializer values by name (for the rare formula that needs a value: GQA's total_sequence_length)."""
    from onnx import numpy_helper
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if numel(t.dims) <= 16}


def compute(model, doc, feeds, ort_values=None):
    """The MAC fields for a truth document `doc` (with `values` and `inputs`) of `model`.

    Returns a dict: macs, macs_by_op, macs_by_node, plus macs_subgraphs (per subgraph path, when
    the model has subgraphs with MAC ops) and macs_skipped (a reason, with macs null) or macs_source.
    """
    from fetch import op_key

    g = model.graph
    values = doc.get("values", {})
    shapes = {t.name: list(t.dims) for t in g.initializer}
    for name, v in values.items():
        if "shape" in v:
            shapes[name] = v["shape"]
    for name, v in doc.get("inputs", {}).items():
        shapes[name] = v["shape"]
    consts = const_inputs(model)

    by_node, by_op, unknown = {}, {}, []
    total = 0

    def add(key, n, m, extra=None):
        nonlocal total
        d = {"op": op_key(n), "macs": m}
        if extra:
            d.update(extra)
        by_node[key] = d
        by_op[op_key(n)] = by_op.get(op_key(n), 0) + m
        total += m

    for n in g.node:
        if not is_mac(n):
            continue
        ins = [shapes.get(x) if x else None for x in n.input]
        outs = [shapes.get(o) if o else None for o in n.output]
        try:
            m = node_macs(n, ins, outs, consts)
        except Unknown as e:
            unknown.append(str(e))
            continue
        extra = {"const": True} if any(values.get(o, {}).get("const") for o in n.output if o) else None
        add(key_of(n), n, m, extra)

    subs = mac_subgraphs(g)
    per_sub = {}
    if any(subs.values()):
        if "error" in doc:
            unknown.append("onnxruntime could not run the model: no main-graph shapes to check against")
        else:
            try:
                rec = run_reference(model, feeds, values, ort_values)
            except Unknown as e:
                unknown.append(str(e))
                rec = None
            if rec is not None:
                for p, nodes in subs.items():
                    if not nodes:
                        continue
                    s = 0
                    for n in nodes:
                        runs = rec.get(p, {}).get(key_of(n), (n, []))[1]
                        m = 0
                        try:
                            for ins, outs in runs:
                                m += node_macs(n, ins, outs, consts)
                        except Unknown as e:
                            unknown.append(f"{p}: {e}")
                            continue
                        add(key_of(n), n, m, {"subgraph": p, "runs": len(runs)})
                        s += m
                    per_sub[p] = s
    out = {}
    if unknown:
        out["macs"] = None
        out["macs_skipped"] = "; ".join(unknown)
    else:
        out["macs"] = total
    out["macs_by_op"] = dict(sorted(by_op.items()))
    out["macs_by_node"] = by_node
    if per_sub:
        out["macs_subgraphs"] = per_sub
    out["macs_source"] = SOURCE
    return out


MAC_KEYS = ("macs", "macs_skipped", "macs_by_op", "macs_by_node", "macs_subgraphs", "macs_source")
