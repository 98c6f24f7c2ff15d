#!/usr/bin/env python3
"""Compare nnlint's MACs with the truth files' independent reference (macs.py).

For every model of manifest.json: runs `nnlint mem MODEL --format json` with every graph input
bound to the truth's shape (`--input NAME=D1xD2...`, `--input NAME=` for a scalar, and
`--value NAME=V` for a scalar fed a fixed value: what tests/corpus.rs binds), reads totals.macs, and compares it with the truth's "macs"; for a
model that differs, lists the layers whose MACs differ (depth-0 rows against macs_by_node; an
If / Loop / Scan row against the sum of the reference's subgraph nodes below it).

usage: python tools/corpus/macs_vs_nnlint.py [--nnlint target/release/nnlint] [--only NAME,...]
                                             [--json OUT.json]
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def nnlint_mem(exe, model_path, inputs):
    cmd = [exe, "mem", model_path, "--format", "json"]
    for name, v in inputs.items():
        cmd += ["--input", f"{name}=" + "x".join(str(d) for d in v["shape"])]
        if v["shape"] == [] and "fill" in v.get("feed", {}):
            cmd += ["--value", f"{name}={v['feed']['fill']}"]  # silero's sr: decides its If
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if p.returncode not in (0, 1) or not p.stdout.strip():
        return None, (p.stderr.strip().splitlines() or ["no output"])[-1], cmd
    return json.loads(p.stdout), None, cmd


def compare(exe, entry):
    with open(os.path.join(HERE, "truth", entry["name"] + ".json")) as fh:
        t = json.load(fh)
    out, err, cmd = nnlint_mem(exe, entry["file"], t["inputs"])
    row = {"model": entry["name"], "reference": t.get("macs"), "reference_skipped": t.get("macs_skipped"),
           "command": " ".join(cmd)}
    if out is None:
        row["nnlint"] = None
        row["error"] = err
        return row
    tot = out["totals"]
    row["nnlint"] = tot.get("macs")
    row["nnlint_expr"] = tot.get("macs_expr")
    row["nnlint_lower_bound"] = bool((tot.get("lower_bound") or {}).get("macs"))
    row["nnlint_unaccounted"] = tot.get("unaccounted")
    ref_nodes = t.get("macs_by_node", {})
    subs = t.get("macs_subgraphs", {})
    diffs = []
    seen = set()
    for layer in out["layers"]:
        if layer.get("depth", 0) != 0:
            continue
        name = layer["name"]
        mine = layer.get("macs")
        if name in ref_nodes and "subgraph" not in ref_nodes[name]:
            ref = ref_nodes[name]["macs"]
            seen.add(name)
        elif layer["op"] in ("If", "Loop", "Scan"):
            # the reference's subgraph nodes below this node, at any depth
            ref = sum(d["macs"] for d in ref_nodes.values()
                      if "subgraph" in d and d["subgraph"].split(" > ")[0].rsplit(":", 1)[0] == name)
            if not any(p.split(" > ")[0].rsplit(":", 1)[0] == name for p in subs):
                ref = 0
        else:
            ref = 0
        if mine != ref:
            diffs.append({"layer": name, "op": layer["op"], "output_shapes": layer.get("output_shapes"),
                          "reference": ref, "nnlint": mine, "nnlint_expr": layer.get("macs_expr"),
                          "branch": layer.get("branch")})
    for name, d in ref_nodes.items():
        if "subgraph" not in d and name not in seen and d["macs"]:
            diffs.append({"layer": name, "op": d["op"], "reference": d["macs"], "nnlint": "(no layer)"})
    row["diffs"] = diffs
    # the subgraph rows nnlint lists (depth >= 1), for the record
    row["nnlint_sub_layers"] = [{"name": l["name"], "op": l["op"], "macs": l.get("macs"), "depth": l["depth"],
                                 "branch": l.get("branch")}
                                for l in out["layers"] if l.get("depth", 0) and l.get("macs")]
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nnlint", default=os.path.join(ROOT, "target", "release", "nnlint"))
    ap.add_argument("--only")
    ap.add_argument("--json", help="write the rows (with per-layer differences) here")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    with open(os.path.join(HERE, "manifest.json")) as fh:
        manifest = json.load(fh)
    rows = [compare(args.nnlint, e) for e in manifest["models"] if not only or e["name"] in only]
    print("| model | reference MACs | nnlint MACs | |")
    print("|---|---:|---:|---|")
    ndiff = 0
    for r in rows:
        ref = r["reference"] if r["reference"] is not None else "null"
        nn = r["nnlint"] if r["nnlint"] is not None else (r.get("nnlint_expr") or r.get("error") or "null")
        if r.get("nnlint_lower_bound"):
            nn = f"≥ {nn}"
        same = r["reference"] is not None and r["reference"] == r["nnlint"] and not r.get("nnlint_lower_bound")
        ndiff += not same
        why = []
        u = r.get("nnlint_unaccounted") or {}
        if u.get("layers_without_macs"):
            why.append(f"{u['layers_without_macs']} layers without MACs")
        if u.get("undecided_branches"):
            why.append(f"{u['undecided_branches']} undecided branches")
        print(f"| {r['model']} | {ref} | {nn} | {'equal' if same else 'diff'}"
              + (f" ({', '.join(why)})" if why else "") + " |")
    print(f"\n{len(rows) - ndiff} of {len(rows)} equal")
    for r in rows:
        if r.get("diffs"):
            print(f"\n{r['model']}:")
            for d in r["diffs"]:
                print(f"  {d['layer']} ({d['op']}): reference {d['reference']}, nnlint {d['nnlint']}"
                      + (f" [{d['nnlint_expr']}]" if d.get("nnlint_expr") else ""))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
