#!/usr/bin/env python3
"""Every rewrite nnlint proposes on the corpus, checked end to end by tools nnlint did not write.

For each corpus model (manifest.json, inputs bound to the truth's shapes):

1. ``nnlint rewrite MODEL --input NAME=SHAPE... -f json`` with the default proposals (every
   finding that has a rewrite, at the rules' ranks), nnlint's own whole-model check on;
2. the written model must pass ``onnx.checker.check_model(full_check=True)`` (strict shape
   inference included) and run in onnxruntime (CPU, ORT_DISABLE_ALL) on the truth's feeds, with
   every output finite and of the original's shape;
3. the exact rewrites (``--rank full --rule depthwise-separable,low-rank``: full-rank
   factorisations, which compute the same function) must reproduce the original's outputs in
   onnxruntime: max |a - b| / max(|a|, 1e-6) per output below EXACT_TOL (float32 rounding of the
   re-associated sums), or below NOISE_FACTOR times the model's own float32 noise floor: the same
   measure between onnxruntime's runs of the *original* at ORT_DISABLE_ALL and ORT_ENABLE_ALL,
   which compute one function in two orders. Outputs that are all near zero (a sigmoid map on
   random input: ppocrv5_det's largest output is 6e-6) make the relative measure large for both.

Writes target/corpus/rewrites.md (docs/real-world.md quotes it) and target/corpus/rewrites.json,
and exits 1 when any check fails.

usage: python tools/corpus/rewrite_check.py [--only NAME,...] [--nnlint target/release/nnlint]
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MANIFEST = os.path.join(HERE, "manifest.json")
TRUTH = os.path.join(HERE, "truth")
OUT = os.path.join(ROOT, "target", "corpus", "rewritten")

sys.path.insert(0, HERE)
from truth import first_line, make_feeds, new_session  # noqa: E402

# float32 re-association of a full-rank factorisation: relative to the output's magnitude
EXACT_TOL = 1e-3
# a rewrite may differ from the original by a few times what onnxruntime's own reordering does
NOISE_FACTOR = 4.0


def nnlint(exe, model, bindings, out, extra):
    cmd = [exe, "rewrite", model, "-o", out, "-f", "json", *bindings, *extra]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        return None, f"nnlint exit {p.returncode}: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ''}"
    return json.loads(p.stdout), None


def run_ort(path, feeds, optimized=False):
    sess = new_session(onnx.load(path), 2)
    if optimized:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 3
        so.intra_op_num_threads = 2
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def finite(a):
    a = np.asarray(a)
    return not np.issubdtype(a.dtype, np.floating) or bool(np.isfinite(a).all())


def rel_err(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(a))), 1e-6)) if a.size else 0.0


def check_model(entry, exe, reference):
    name = entry["name"]
    model = os.path.join(ROOT, entry["file"])
    bindings = []
    for i in entry["inputs"]:
        bindings += ["--input", f"{i['name']}=" + "x".join(str(d) for d in i["shape"])]
    feeds = make_feeds(entry["inputs"], 0)
    row = {"model": name}

    out = os.path.join(OUT, f"{name}.onnx")
    rep, err = nnlint(exe, model, bindings, out, [])
    if err:
        row["error"] = err
        return row
    row["rewrites"] = len(rep["rewrites"])
    kinds = {}
    for r in rep["rewrites"]:
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
    row["kinds"] = kinds
    row["skipped"] = [f"{s['node']}: {s['reason']}" for s in rep["skipped"]]
    wm = rep.get("whole_model") or {}
    row["nnlint_check"] = "yes" if wm.get("checked") else (wm.get("reason") or "no")
    if not rep["rewrites"]:
        return row
    try:
        onnx.checker.check_model(out, full_check=True)
        row["onnx_checker"] = "pass"
    except Exception as e:  # noqa: BLE001
        row["onnx_checker"] = "FAIL: " + first_line(e)
    try:
        got = run_ort(out, feeds)
        bad = [k for k, v in got.items() if k not in reference or np.shape(v) != np.shape(reference[k])
               or not finite(v)]
        row["onnxruntime"] = "runs" if not bad else "FAIL: outputs " + ", ".join(bad)
    except Exception as e:  # noqa: BLE001
        row["onnxruntime"] = "FAIL: " + first_line(e)

    out_full = os.path.join(OUT, f"{name}.full.onnx")
    rep, err = nnlint(exe, model, bindings, out_full, ["--rank", "full", "--rule", "depthwise-separable,low-rank"])
    if err:
        row["exact"] = "FAIL: " + err
    elif rep["rewrites"]:
        try:
            got = run_ort(out_full, feeds)
            row["exact_rewrites"] = len(rep["rewrites"])
            row["exact_rel_err"] = max(rel_err(reference[k], got[k]) for k in reference)
            again = run_ort(model, feeds, optimized=True)
            row["noise_rel_err"] = max(rel_err(reference[k], again[k]) for k in reference)
        except Exception as e:  # noqa: BLE001
            row["exact"] = "FAIL: " + first_line(e)
    return row


def failed(row):
    if "error" in row:
        return True
    if str(row.get("onnx_checker", "pass")).startswith("FAIL") or str(row.get("onnxruntime", "")).startswith("FAIL"):
        return True
    tol = max(EXACT_TOL, NOISE_FACTOR * row.get("noise_rel_err", 0.0))
    if str(row.get("exact", "")).startswith("FAIL") or row.get("exact_rel_err", 0.0) > tol:
        return True
    return False


def table(rows):
    lines = ["| model | rewrites | kinds | skipped | nnlint whole-model check | onnx.checker | onnxruntime "
             "| exact rewrites (full rank) | max rel. error vs original | onnxruntime's own noise |",
             "|---|---:|---|---:|---|---|---|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | **{r['error']}** | | | | | | | | |")
            continue
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(r.get("kinds", {}).items()))
        err = r.get("exact_rel_err")
        noise = r.get("noise_rel_err")
        lines.append(
            f"| {r['model']} | {r['rewrites']} | {kinds} | {len(r['skipped'])} | "
            f"{r['nnlint_check'] if r['rewrites'] else ''} | {r.get('onnx_checker', '')} | "
            f"{r.get('onnxruntime', '')} | {r.get('exact_rewrites', r.get('exact', ''))} | "
            f"{'' if err is None else f'{err:.1e}'} | {'' if noise is None else f'{noise:.1e}'} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--nnlint", default=os.path.join(ROOT, "target", "release", "nnlint"))
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    manifest = json.load(open(MANIFEST))
    os.makedirs(OUT, exist_ok=True)
    rows = []
    for entry in manifest["models"]:
        if only and entry["name"] not in only:
            continue
        if not os.path.exists(os.path.join(ROOT, entry["file"])):
            continue
        truth = json.load(open(os.path.join(TRUTH, f"{entry['name']}.json")))
        if "error" in truth:
            continue
        reference = run_ort(os.path.join(ROOT, entry["file"]), make_feeds(entry["inputs"], 0))
        row = check_model(entry, args.nnlint, reference)
        rows.append(row)
        mark = "FAIL" if failed(row) else "ok"
        print(f"{mark:4} {entry['name']}: {row.get('rewrites', row.get('error'))} rewrites", flush=True)
    with open(os.path.join(ROOT, "target", "corpus", "rewrites.json"), "w") as f:
        json.dump(rows, f, indent=1)
    with open(os.path.join(ROOT, "target", "corpus", "rewrites.md"), "w") as f:
        f.write(table(rows))
    bad = [r["model"] for r in rows if failed(r)]
    print(f"{len(rows)} models, {sum(r.get('rewrites', 0) for r in rows)} rewrites, {len(bad)} failing"
          + (": " + ", ".join(bad) if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
