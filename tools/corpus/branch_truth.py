#!/usr/bin/env python3
"""The activations of the If / Loop / Scan bodies that run, as a second reference beside the truth.

onnxruntime exposes main-graph values only, so truth/<name>.json's activation_bytes leaves out
what the subgraphs compute. This script runs each model with onnx's reference evaluator
(onnx.reference.ReferenceEvaluator, independent of onnxruntime and of nnlint) on the truth's
seeded feeds, records the output of every subgraph node each time it runs (the If branch taken
with these feeds, every Loop iteration), and classifies the subgraph values as the truth does the
main graph's (truth.py's classify): const (computed from initializers and Constant nodes alone,
the enclosing graphs' const values included: a runtime folds them at load) and shape (reading the
inputs only through Shape / Size) are not activations. It prints, per model:

    main     the truth's activation_bytes - shape_bytes (main graph, onnxruntime)
    branches the bytes of the non-const, non-shape subgraph values that ran (onnx.reference)
    total    main + branches: what nnlint's activation total counts
    macs     the truth's macs (macs.py: the branch that ran)

usage: python tools/corpus/branch_truth.py [--only NAME,...] [--value NAME=V ...]
(--value overrides a scalar feed, e.g. sr=8000, to measure the other branch)
"""

import argparse
import json
import os
import sys
import warnings

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from macs import sub_evaluator, subgraphs_of  # noqa: E402
from truth import classify, feeds_of, propagate  # noqa: E402


def classify_sub(graph, const, shape):
    """Const and shape-only values of a subgraph, given the enclosing graphs' (by name), and the
    scope each nested subgraph sees."""
    const = set(const) | {t.name for t in graph.initializer}
    shape = set(shape)
    data = {i.name for i in graph.input}  # a loop's counter and state
    out = {}

    def record(n):
        for _, _, g in subgraphs_of(n):
            out[id(g)] = (const, shape)

    propagate(graph.node, const, shape, data, record)
    return const, shape, out


def main_classes(model):
    return classify(model.graph, model.ir_version)


def measure(entry, overrides):
    with open(os.path.join(HERE, "truth", entry["name"] + ".json")) as fh:
        doc = json.load(fh)
    model = onnx.load(os.path.join(ROOT, entry["file"]))
    feeds = feeds_of(doc)
    for k, v in overrides.items():
        if k in feeds:
            feeds[k] = np.asarray(v, dtype=feeds[k].dtype).reshape(feeds[k].shape)
    main = doc["activation_bytes"] - doc["shape_bytes"]
    if not any(True for n in model.graph.node for _ in subgraphs_of(n)):
        return {"model": entry["name"], "main": main, "branches": 0, "total": main, "macs": doc.get("macs")}
    const, shape = main_classes(model)
    ev = ReferenceEvaluator(model)
    total = {"bytes": 0}

    def instrument(evaluator, graph, const, shape):
        _, _, scopes = classify_sub(graph, const, shape)
        for rt in evaluator.rt_nodes_:
            proto = rt.onnx_node
            for a, i, g in subgraphs_of(proto):
                sub = sub_evaluator(rt, a, i)
                if sub is None:
                    raise RuntimeError(f"no evaluator for {proto.name}:{a.name}")
                sc, ss = scopes[id(g)]
                c_sub, s_sub, _ = classify_sub(g, sc, ss)
                for srt in sub.rt_nodes_:
                    wrap(srt, c_sub, s_sub)
                instrument(sub, g, sc, ss)

    wrapped = set()

    def wrap(rt, c, s):
        if id(rt) in wrapped:
            return
        wrapped.add(id(rt))
        orig = rt.run
        outs = [o for o in rt.onnx_node.output]

        def run(*args, **kwargs):
            res = orig(*args, **kwargs)
            for name, r in zip(outs, res):
                if name and name not in c and name not in s and isinstance(r, np.ndarray):
                    total["bytes"] += r.nbytes
            return res
        rt.run = run

    instrument(ev, model.graph, const, shape)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        ev.run(None, feeds)
    return {"model": entry["name"], "main": main, "branches": total["bytes"],
            "total": main + total["bytes"], "macs": doc.get("macs"),
            "feeds": {k: v.tolist() for k, v in feeds.items() if v.size == 1}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only")
    ap.add_argument("--value", action="append", default=[])
    args = ap.parse_args()
    overrides = {k: int(v) for k, v in (s.split("=", 1) for s in args.value)}
    with open(os.path.join(HERE, "manifest.json")) as fh:
        models = json.load(fh)["models"]
    only = set(args.only.split(",")) if args.only else None
    print("| model | main (onnxruntime) | branches (onnx.reference) | total | MACs (macs.py) |")
    print("|---|---:|---:|---:|---:|")
    for e in models:
        if only and e["name"] not in only:
            continue
        if not os.path.exists(os.path.join(ROOT, e["file"])):
            continue
        r = measure(e, overrides)
        print(f"| {r['model']} | {r['main']} | {r['branches']} | {r['total']} | {r['macs']} |")


if __name__ == "__main__":
    main()
