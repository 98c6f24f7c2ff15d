#!/usr/bin/env python3
"""onnxruntime ground truth for every corpus model: tools/corpus/truth/<name>.json.

For each model of manifest.json (fetch.py writes it), this:

1. draws the input feeds described in the manifest (numpy default_rng(seed),
   inputs in graph order; float_range -> uniform, int_range -> integers,
   fill -> constant);
2. makes a copy of the model with every main-graph node output added as a
   graph output (no type given: onnxruntime infers it), creates an
   InferenceSession with graph optimisations disabled (ORT_DISABLE_ALL) on the
   CPU provider and runs it;
3. records, for every node output in graph order: the node's op, the value's
   dtype, shape and bytes, and whether it is computed solely from
   initializers / Constant nodes ("const": such values are folded by a runtime
   at load time and are not activations);
4. sums the bytes of the non-const values: ``activation_bytes``; of those,
   ``shape_bytes`` are the values marked "shape_only" (they read the inputs only
   through Shape/Size: shape arithmetic), and ``const_bytes`` sums the const
   ones.

Values that cannot be exposed are listed under ``skipped`` with the reason:
everything inside If/Loop/Scan bodies (onnxruntime only exposes main-graph
values), and any output onnxruntime refuses or fails on (found by bisection).

5. adds the MAC reference (macs.py: textbook formulas on the measured shapes,
   the initializer shapes and the node attributes): ``macs``, ``macs_by_op``,
   ``macs_by_node`` (and ``macs_subgraphs`` / ``macs_skipped``).

usage: python tools/corpus/truth.py [--only NAME,...] [--seed 0]
       python tools/corpus/truth.py --macs-only [--only NAME,...]
           recomputes only the MAC fields of the existing truth files, from the
           model and the shapes already recorded (onnxruntime is not run)
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MANIFEST = os.path.join(HERE, "manifest.json")
TRUTH = os.path.join(HERE, "truth")

sys.path.insert(0, HERE)
from fetch import op_key, sha256_file, walk_subgraphs  # noqa: E402
import macs  # noqa: E402

# ops whose output is not a function of their inputs: never "const"
NONDETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                    "Bernoulli"}


def make_feeds(inputs, seed):
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in inputs:
        dt = np.dtype(i["dtype"])
        shape = tuple(i["shape"])
        fd = i["feed"]
        if "fill" in fd:
            a = np.full(shape, fd["fill"], dtype=dt)
        elif "float_range" in fd:
            lo, hi = fd["float_range"]
            a = rng.uniform(lo, hi, shape).astype(dt)
        elif "int_range" in fd:
            lo, hi = fd["int_range"]
            a = rng.integers(lo, hi, shape).astype(dt)
        elif "bool" in fd:
            a = rng.random(shape) < fd["bool"]
        else:
            raise ValueError(f"{i['name']}: no feed rule in {fd}")
        feeds[i["name"]] = a
    return feeds


def outer_refs(graph):
    """Names a subgraph reads from enclosing scopes."""
    local = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    refs = set()
    for n in graph.node:
        for x in n.input:
            if x and x not in local:
                refs.add(x)
        for a in n.attribute:
            subs = [a.g] if a.type == a.GRAPH else list(a.graphs) if a.type == a.GRAPHS else []
            for g in subs:
                refs |= {r for r in outer_refs(g) if r not in local}
        local |= {o for o in n.output if o}
    return refs


def node_inputs(n):
    """A node's inputs, plus the names its subgraphs read from the enclosing scope."""
    ins = [x for x in n.input if x]
    for a in n.attribute:
        subs = [a.g] if a.type == a.GRAPH else list(a.graphs) if a.type == a.GRAPHS else []
        for g in subs:
            ins += sorted(outer_refs(g))
    return ins


SHAPE_OPS = {"Shape", "Size"}  # read only the shape of their input


def classify(graph, ir_version):
    """Split main-graph values into const / shape-only; the rest depend on input data.

    const: computed solely from initializers and Constant nodes (a runtime folds
    them at load time; not activations).  From IR 4 on, an initializer that is
    also listed as a graph input is only a default that a caller may override,
    so not a constant (onnxruntime does not fold it either); before IR 4 every
    initializer had to be listed as an input, and they are constants.

    shape: not const, but reading the graph inputs only through Shape / Size
    (shape arithmetic: constant once the input shapes are fixed).
    """
    const = {t.name for t in graph.initializer}
    if ir_version >= 4:
        const -= {i.name for i in graph.input}
    data = {i.name for i in graph.input} - const
    shape = set()
    propagate(graph.node, const, shape, data)
    return const, shape


def propagate(nodes, const, shape, data, on_node=None):
    """Extends the const / shape-only / data sets (in place) over `nodes`, in order: a node whose
    inputs are all const is const; Shape and Size make shape-only values; anything reading data
    (or a name none of the sets holds: an enclosing scope's data) is data. `on_node(n)` is called
    after each node is classified (branch_truth.py records each subgraph's scope there)."""
    for n in nodes:
        ins = node_inputs(n)
        outs = {o for o in n.output if o}
        if n.op_type in NONDETERMINISTIC and n.domain in ("", "ai.onnx"):
            data |= outs
        elif all(x in const for x in ins):
            const |= outs
        elif n.op_type in SHAPE_OPS and n.domain in ("", "ai.onnx"):
            shape |= outs
        elif any(x in data for x in ins):
            data |= outs
        elif all(x in const or x in shape for x in ins):
            shape |= outs
        else:
            data |= outs
        if on_node:
            on_node(n)


def type_name(v):
    if isinstance(v, np.ndarray):
        return v.dtype.name
    if isinstance(v, list):
        return "seq(" + (type_name(v[0]) if v else "?") + ")"
    if isinstance(v, dict):
        if not v:
            return "map(?,?)"
        k, x = next(iter(v.items()))
        return f"map({np.asarray(k).dtype.name},{type_name(np.asarray(x))})"
    return type(v).__name__


def describe(v):
    """dtype, shape (or sequence length / map size) and bytes of a runtime value."""
    if isinstance(v, np.ndarray):
        nbytes = int(v.nbytes) if v.dtype != object else sum(len(str(s).encode()) for s in v.flat)
        return {"dtype": v.dtype.name, "shape": [int(d) for d in v.shape], "bytes": nbytes}
    if isinstance(v, list):
        elems = [describe(x if not np.isscalar(x) else np.asarray(x)) for x in v]
        d = {"dtype": type_name(v), "len": len(v)}
        if all("shape" in e for e in elems):
            d["shapes"] = [e["shape"] for e in elems]
        d["bytes"] = sum(e["bytes"] or 0 for e in elems) if all(e.get("bytes") is not None for e in elems) else None
        return d
    if isinstance(v, dict):
        return {"dtype": type_name(v), "len": len(v), "bytes": None}
    a = np.asarray(v)
    return describe(a)


def new_session(model, threads):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def with_outputs(model, names):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for n in names:
        if n not in have:
            vi = m.graph.output.add()
            vi.name = n  # no type: onnxruntime takes the node's inferred type
            have.add(n)
    return m


def first_line(e):
    s = str(e).strip().splitlines()
    return (s[0] if s else type(e).__name__)[:400]


def run_exposed(model, feeds, names, threads, skipped):
    """Run with `names` exposed; names whose exposure fails are bisected out into `skipped`."""
    def attempt(ns):
        try:
            sess = new_session(with_outputs(model, ns), threads)
            outs = [o.name for o in sess.get_outputs()]
            return dict(zip(outs, sess.run(outs, feeds))), None
        except Exception as e:  # noqa: BLE001
            return None, e

    got, err = attempt(names)
    if got is not None:
        return got
    # find the culprits: split until single names fail on their own
    results = {}
    stack = [list(names)]
    while stack:
        ns = stack.pop()
        r, e = attempt(ns)
        if r is not None:
            results.update(r)
        elif len(ns) == 1:
            skipped.append({"names": ns, "reason": "onnxruntime refused it as a graph output: " + first_line(e)})
        else:
            half = len(ns) // 2
            stack += [ns[:half], ns[half:]]
    return results


def truth_for(entry, seed, threads):
    import onnxruntime as ort
    path = os.path.join(ROOT, entry["file"])
    doc = {"model": entry["name"], "file": entry["file"], "sha256": entry["sha256"],
           "source": f"onnxruntime {ort.__version__} CPUExecutionProvider, ORT_DISABLE_ALL",
           "seed": seed,
           "feed_rule": "numpy.random.default_rng(seed), inputs in graph order: float_range -> uniform(lo, hi), "
                        "int_range -> integers(lo, hi), fill -> constant",
           "dims": entry.get("dims", {}),
           "inputs": {i["name"]: {"dtype": i["dtype"], "shape": i["shape"], "declared": i["declared"],
                                  "feed": i["feed"]} for i in entry["inputs"]}}
    if sha256_file(path) != entry["sha256"]:
        raise RuntimeError(f"{path} does not match the manifest's sha256 (rerun fetch.py)")
    model = onnx.load(path)
    g = model.graph
    feeds = make_feeds(entry["inputs"], seed)
    doc["input_bytes"] = int(sum(a.nbytes for a in feeds.values()))

    # the model as shipped must run first
    try:
        sess = new_session(model, threads)
        outs = [o.name for o in sess.get_outputs()]
        sess.run(outs, feeds)
    except Exception as e:  # noqa: BLE001
        doc["error"] = "onnxruntime cannot run the model as shipped: " + first_line(e)
        return doc

    const, shape_only = classify(g, model.ir_version)
    order = []  # (name, node) for every main-graph node output, graph order
    seen = set(feeds)
    for n in g.node:
        for o in n.output:
            if o and o not in seen:
                order.append((o, n))
                seen.add(o)
    skipped = []
    for p, sg, depth in walk_subgraphs(g):
        names = [o for n in sg.node for o in n.output if o]
        if names:
            skipped.append({"subgraph": p, "names": names,
                            "reason": "inside a control-flow subgraph: onnxruntime exposes main-graph values only"})
    got = run_exposed(model, feeds, [o for o, _ in order], threads, skipped)

    values, act, sbytes, cbytes, missing = {}, 0, 0, 0, []
    for o, n in order:
        if o not in got:
            if not any(o in s["names"] for s in skipped):
                missing.append(o)
            continue
        d = {"op": op_key(n)}
        d.update(describe(got[o]))
        if o in const:
            d["const"] = True
            cbytes += d["bytes"] or 0
        else:
            act += d["bytes"] or 0
            if o in shape_only:
                d["shape_only"] = True
                sbytes += d["bytes"] or 0
        values[o] = d
    if missing:
        skipped.append({"names": missing, "reason": "onnxruntime returned no value for it"})
    doc["graph_outputs"] = [o.name for o in g.output]
    doc["node_outputs"] = len(order)
    doc["activation_bytes"] = act
    doc["shape_bytes"] = sbytes
    doc["const_bytes"] = cbytes
    doc["values"] = values
    if skipped:
        doc["skipped"] = skipped
    doc.update(macs.compute(model, doc, feeds, ort_values=got))
    return doc


def feeds_of(doc):
    """The feeds a truth document was measured with (its inputs in order, its seed)."""
    return make_feeds([dict(v, name=k) for k, v in doc["inputs"].items()], doc["seed"])


def macs_only(entry):
    """Recompute the MAC fields of an existing truth file (model + recorded shapes; no onnxruntime)."""
    path = os.path.join(ROOT, entry["file"])
    tpath = os.path.join(TRUTH, entry["name"] + ".json")
    with open(tpath) as fh:
        doc = json.load(fh)
    if sha256_file(path) != doc["sha256"]:
        raise RuntimeError(f"{path} is not the file {tpath} was measured on (rerun truth.py)")
    for k in macs.MAC_KEYS:
        doc.pop(k, None)
    doc.update(macs.compute(onnx.load(path), doc, feeds_of(doc)))
    return doc


def dumps(doc):
    """Top-level keys one per line; each value (and each skipped group) on its own line."""
    lines = []
    for k, v in doc.items():
        if k == "values":
            body = ",\n".join(f"    {json.dumps(n)}: {json.dumps(d, separators=(',', ':'))}" for n, d in v.items())
            lines.append(f'  "values": {{\n{body}\n  }}' if v else '  "values": {}')
        elif k == "inputs" and v:
            body = ",\n".join(f"    {json.dumps(n)}: {json.dumps(d, separators=(',', ':'))}" for n, d in v.items())
            lines.append(f'  "inputs": {{\n{body}\n  }}')
        elif k in ("macs_by_node", "macs_subgraphs") and v:
            body = ",\n".join(f"    {json.dumps(n)}: {json.dumps(d, separators=(',', ':'))}" for n, d in v.items())
            lines.append(f'  {json.dumps(k)}: {{\n{body}\n  }}')
        elif k == "skipped" and v:
            body = ",\n".join(f"    {json.dumps(d, separators=(',', ':'))}" for d in v)
            lines.append(f'  "skipped": [\n{body}\n  ]')
        else:
            lines.append(f"  {json.dumps(k)}: {json.dumps(v)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1))
    ap.add_argument("--macs-only", action="store_true",
                    help="recompute only the MAC fields of the existing truth files (no onnxruntime run)")
    args, _ = ap.parse_known_args()  # run.sh passes fetch.py's flags (--force, --strict) here too
    only = set(args.only.split(",")) if args.only else None
    with open(MANIFEST) as fh:
        manifest = json.load(fh)
    os.makedirs(TRUTH, exist_ok=True)
    failed = {}
    t0 = time.time()
    for e in manifest["models"]:
        if only and e["name"] not in only:
            continue
        t = time.time()
        if args.macs_only:
            try:
                doc = macs_only(e)
            except Exception as ex:  # noqa: BLE001
                failed[e["name"]] = first_line(ex)
                print(f"{e['name']}: FAILED {failed[e['name']]}", flush=True)
                continue
            with open(os.path.join(TRUTH, e["name"] + ".json"), "w") as fh:
                fh.write(dumps(doc))
            print(f"{e['name']}: macs {doc['macs']}" + (f" ({doc['macs_skipped']})" if doc["macs"] is None else "")
                  + f", {time.time() - t:.1f}s", flush=True)
            continue
        try:
            doc = truth_for(e, args.seed, args.threads)
        except Exception as ex:  # noqa: BLE001
            failed[e["name"]] = first_line(ex)
            print(f"{e['name']}: FAILED {failed[e['name']]}", flush=True)
            continue
        with open(os.path.join(TRUTH, e["name"] + ".json"), "w") as fh:
            fh.write(dumps(doc))
        if "error" in doc:
            failed[e["name"]] = doc["error"]
            print(f"{e['name']}: {doc['error']}", flush=True)
            continue
        nskip = sum(len(s["names"]) for s in doc.get("skipped", []))
        print(f"{e['name']}: {len(doc['values'])} values, {nskip} skipped, activations "
              f"{doc['activation_bytes'] / 2**20:.2f} MiB, {time.time() - t:.1f}s", flush=True)
    print(f"truth: {time.time() - t0:.0f}s" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
