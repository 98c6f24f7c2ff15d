#!/usr/bin/env python3
"""Interop test of `nnlint rewrite` and `nnlint verify` against onnx and onnxruntime.

Run through tests/interop/run.sh (which provides the python packages and the binary), or directly:
    NNLINT=target/debug/nnlint python3 tests/interop/test_rewrite.py [NAME-FILTER...]

For each fixture in testdata/models/rewrite/ and each variant (default rank; --rank full) it rewrites
the model in a temporary directory, then checks the output with the onnx checker, compares its
header and graph interface with the input's, cross-checks the JSON report against counts taken
from the ONNX files, and runs both models in onnxruntime on the inputs `nnlint verify --dump` used,
against nnlint's own (candle, f64) outputs.  One line per check; exit status 1 when any fails.
No nnlint code is trusted for the reference values: onnx and onnxruntime are.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper, shape_inference

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "testdata", "models", "rewrite")
CONFIG = os.path.join(FIXTURES, "nnlint.toml")
BATCH = 2
# candle computes in f64, onnxruntime in f32: max |a - b| <= TOL * max(1, max |ref|)
TOL = 1e-4
NNLINT_METADATA_KEY = "nnlint.rewrites"

RULE_KIND = {"NL101": "depthwise-separable", "NL102": "gap-head", "NL103": "low-rank"}
SAFETY = {"exact", "approximate", "lossy"}

# What `nnlint lint --config nnlint.toml` must report on each fixture at batch 1 (the fixtures
# are built so that these fire; if they do not, the rewrite tests below have nothing to rewrite).
EXPECTED_LINT = {
    "vgg_like.onnx": {("NL101", "/features/features.2/Conv"), ("NL101", "/features/features.5/Conv"),
                      ("NL102", "/classifier/classifier.0/Gemm"),
                      ("NL103", "/classifier/classifier.0/Gemm")},
    "resnet_like.onnx": {("NL101", "/layer1/layer1.0/conv1/Conv"), ("NL101", "/layer1/layer1.0/conv2/Conv"),
                         ("NL101", "/layer2/layer2.0/conv1/Conv"), ("NL101", "/layer2/layer2.0/conv2/Conv")},
}
EXPECTED_LINT["resnet_like_ext.onnx"] = EXPECTED_LINT["resnet_like.onnx"]
FIXTURE_NAMES = ["vgg_like.onnx", "resnet_like.onnx", "resnet_like_ext.onnx"]
EXTERNAL = {"resnet_like_ext.onnx"}


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

def nnlint(*args, ok=(0,)):
    """Runs the binary; returns (returncode, stdout).  Fails unless the code is in `ok`."""
    exe = os.environ.get("NNLINT")
    if not exe:
        raise AssertionError("NNLINT is not set (path to the nnlint binary)")
    cmd = [exe, *map(str, args)]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if p.returncode not in ok:
        raise AssertionError(f"`{' '.join(cmd)}` exited {p.returncode}, expected {ok}\n"
                             f"stderr: {p.stderr.strip()[-2000:]}\nstdout: {p.stdout.strip()[-2000:]}")
    return p.returncode, p.stdout


def parse_json(text, what):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise AssertionError(f"{what}: stdout is not JSON ({e}): {text[:500]!r}")


def need(obj, key, types, where):
    """obj[key] exists and has one of `types` (None in types allows null)."""
    assert isinstance(obj, dict), f"{where}: expected an object, got {type(obj).__name__}"
    assert key in obj, f"{where}: missing field '{key}' (has {sorted(obj)})"
    v = obj[key]
    allowed = tuple(type(None) if t is None else t for t in types)
    # bool is an int in Python; a count must not be a bool
    bad_bool = isinstance(v, bool) and bool not in allowed
    assert isinstance(v, allowed) and not bad_bool, \
        f"{where}.{key}: expected {'|'.join('null' if t is None else t.__name__ for t in types)}, got {v!r}"
    return v


def before_after(obj, key, where):
    d = need(obj, key, [dict], where)
    for k in ("before", "after"):
        need(d, k, [int], f"{where}.{key}")
    return d["before"], d["after"]


def session(path):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def run_ort(path, feeds):
    s = session(path)
    names = [o.name for o in s.get_outputs()]
    return dict(zip(names, s.run(names, feeds)))


def close(got, ref, what):
    """max |got - ref| <= TOL * max(1, max |ref|); returns the error and the limit."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape, f"{what}: shape {list(got.shape)} vs {list(ref.shape)}"
    assert np.all(np.isfinite(got)) and np.all(np.isfinite(ref)), f"{what}: non-finite values"
    err = float(np.max(np.abs(got - ref))) if got.size else 0.0
    limit = TOL * max(1.0, float(np.max(np.abs(ref))) if ref.size else 0.0)
    assert err <= limit, f"{what}: max abs diff {err:.3g} > {limit:.3g}"
    return err, limit


def value_type(vi):
    """(elem_type, [dim_value | dim_param | None]) of a ValueInfoProto."""
    t = vi.type.tensor_type
    dims = None
    if t.HasField("shape"):
        dims = [d.dim_value if d.HasField("dim_value") else d.dim_param if d.HasField("dim_param") else None
                for d in t.shape.dim]
    return t.elem_type, dims


def used_names(graph):
    """Every value name a node of `graph` (or of its subgraphs) reads."""
    out = set()
    for n in graph.node:
        out.update(i for i in n.input if i)
        for a in n.attribute:
            for g in list(a.graphs) + ([a.g] if a.HasField("g") else []):
                out |= used_names(g)
    return out


def params_of(model, nodes=None):
    """Trainable parameters as README.md defines them, counted here with the onnx package:
    elements of float initializers with more than one element, minus BatchNorm running
    statistics (inputs 3 and 4); only those read by `nodes` (names) when given."""
    inits = {i.name: i for i in model.graph.initializer}
    buffers, read = set(), set()
    for n in model.graph.node:
        if n.op_type == "BatchNormalization":
            buffers.update(n.input[3:5])
        if nodes is None or n.name in nodes:
            read.update(n.input)
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
              onnx.TensorProto.DOUBLE}
    total = 0
    for name in read & set(inits) - buffers:
        t = inits[name]
        size = int(np.prod(t.dims)) if t.dims else 1
        if t.data_type in floats and size > 1:
            total += size
    return total


# --------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------

def check_fixture(name):
    """The fixture itself: the onnx checker (full, by path), one onnxruntime run, and nnlint lint
    finds what the rewrite tests rely on."""
    path = os.path.join(FIXTURES, name)
    onnx.checker.check_model(path, full_check=True)
    m = onnx.load(path)
    rng = np.random.default_rng(0)
    out = run_ort(path, {"input": rng.standard_normal((BATCH, 3, 16, 16)).astype(np.float32)})
    assert list(out) == ["logits"] and out["logits"].shape == (BATCH, 10), {k: v.shape for k, v in out.items()}
    if name in EXTERNAL:
        graph_only = onnx.load(path, load_external_data=False)
        ext = [t.name for t in graph_only.graph.initializer
               if t.data_location == onnx.TensorProto.EXTERNAL]
        assert ext, "no initializer is stored externally"
    _, text = nnlint("lint", path, "--config", CONFIG, "--format", "json", "--fail-on", "never")
    report = parse_json(text, "lint")
    got = {(f["code"], f["node"]) for f in report["files"][0]["findings"] if f["code"] in RULE_KIND}
    missing = EXPECTED_LINT[name] - got
    assert not missing, f"lint does not report {sorted(missing)} (reports {sorted(got)})"
    return (f"{len(m.graph.node)} nodes, {params_of(m)} params; lint: "
            + ", ".join(f"{c} {n}" for c, n in sorted(got)))


class Case:
    """One fixture rewritten with one set of options; the checks share its state."""

    def __init__(self, fixture, variant, tmp):
        self.fixture, self.variant = fixture, variant
        self.src = os.path.join(FIXTURES, fixture)
        self.dir = os.path.join(tmp, f"{fixture[:-5]}-{variant}")
        os.makedirs(self.dir)
        self.out = os.path.join(self.dir, "out.onnx")
        self.report = None

    @property
    def full(self):
        return self.variant == "full"

    def config(self):
        """--rank full must give exact rewrites only; large-fc-head (gap-head) has no rank and is
        approximate, so the full-rank run ignores it through the config file."""
        if not self.full:
            return CONFIG
        path = os.path.join(self.dir, "nnlint.toml")
        with open(CONFIG) as f, open(path, "w") as g:
            g.write('ignore = ["large-fc-head"]\n' + f.read())
        return path

    # a
    def rewrite(self):
        args = ["rewrite", self.src, "-o", self.out, "--config", self.config(), "--format", "json",
                "--batch", BATCH]
        # the default variant applies the proposed ranks and the GAP head, which change the output:
        # asked for with --lossy (without it, `rewrite` applies exact rewrites only)
        args += ["--rank", "full"] if self.full else ["--lossy"]
        _, text = nnlint(*args)
        self.report = parse_json(text, "rewrite")
        assert os.path.isfile(self.out), f"{self.out} was not written"
        rw = self.report.get("rewrites")
        assert isinstance(rw, list) and rw, f"nothing was rewritten: {json.dumps(self.report)[:1000]}"
        return f"{len(rw)} rewrites: " + ", ".join(
            f"{r.get('rule')} {r.get('kind')} rank {r.get('rank')} {r.get('safety')}" for r in rw)

    # e (fields)
    def json_contract(self):
        r, w = self.report, "rewrite"
        need(r, "model", [str], w)
        output = need(r, "output", [str], w)
        assert os.path.samefile(os.path.join(ROOT, output), self.out), f"output {output!r} is not {self.out}"
        ext = need(r, "external_data", [str, None], w)
        if self.fixture in EXTERNAL:
            assert ext is not None, "external_data is null for an external-data fixture"
            assert os.path.isfile(os.path.join(self.dir, os.path.basename(ext))), \
                f"external_data {ext!r} is not next to {self.out}"
        else:
            assert ext is None, f"external_data is {ext!r} for a model without external data"
        need(r, "skipped", [list], w)
        for i, s in enumerate(r["skipped"]):
            need(s, "node", [str], f"skipped[{i}]")
            need(s, "reason", [str], f"skipped[{i}]")
        for i, x in enumerate(need(r, "rewrites", [list], w)):
            at = f"rewrites[{i}]"
            rule = need(x, "rule", [str], at)
            kind = need(x, "kind", [str], at)
            assert RULE_KIND.get(rule) == kind, f"{at}: rule {rule} with kind {kind!r}"
            need(x, "node", [str], at)
            new = need(x, "new_nodes", [list], at)
            assert new and all(isinstance(n, str) for n in new), f"{at}.new_nodes: {new!r}"
            rank = need(x, "rank", [int, None], at)
            if kind in ("depthwise-separable", "low-rank"):
                assert isinstance(rank, int) and rank >= 1, f"{at}: rank {rank!r} for {kind}"
            safety = need(x, "safety", [str], at)
            assert safety in SAFETY, f"{at}.safety: {safety!r}"
            before_after(x, "params", at)
            need(x, "bytes", [dict], at)
            need(x, "macs", [dict], at)
            v = need(x, "verify", [dict, None], at)
            if v is not None:
                need(v, "max_abs_error", [float, int], f"{at}.verify")
                need(v, "max_rel_error", [float, int], f"{at}.verify")
        t = need(r, "totals", [dict], w)
        before_after(t, "params", "totals")
        for k in ("bytes", "macs", "inference_peak", "training_peak"):
            need(t, k, [dict], "totals")
        need(r, "whole_model", [dict, None], w)
        return "fields present"

    # e (numbers)
    def params(self):
        orig, new = onnx.load(self.src), onnx.load(self.out)
        b, a = before_after(self.report["totals"], "params", "totals")
        assert (b, a) == (params_of(orig), params_of(new)), \
            f"totals.params {b} -> {a}; counted in the ONNX files: {params_of(orig)} -> {params_of(new)}"
        lines = []
        for x in self.report["rewrites"]:
            pb, pa = x["params"]["before"], x["params"]["after"]
            cb, ca = params_of(orig, {x["node"]}), params_of(new, set(x["new_nodes"]))
            assert (pb, pa) == (cb, ca), \
                f"{x['node']}: params {pb} -> {pa}; counted in the ONNX files: {cb} -> {ca}"
            if not self.full:
                assert pa < pb, f"{x['node']}: params {pb} -> {pa} is not a saving"
            lines.append(f"{pb}->{pa}")
        if not self.full:
            assert a < b, f"totals.params {b} -> {a} is not a saving"
        return f"{b} -> {a} ({', '.join(lines)})"

    # b
    def checker(self):
        onnx.checker.check_model(self.out, full_check=True)
        return "onnx.checker full_check on the path"

    # c
    def preserved(self):
        orig, new = onnx.load(self.src), onnx.load(self.out)
        for f in ("ir_version", "producer_name", "producer_version", "domain", "model_version",
                  "doc_string"):
            assert getattr(new, f) == getattr(orig, f), \
                f"{f}: {getattr(new, f)!r}, the input has {getattr(orig, f)!r}"
        ops = lambda m: sorted((o.domain, o.version) for o in m.opset_import)
        assert ops(new) == ops(orig), f"opset_import {ops(new)} vs {ops(orig)}"
        meta_o = {p.key: p.value for p in orig.metadata_props}
        meta_n = {p.key: p.value for p in new.metadata_props}
        assert len(meta_n) == len(new.metadata_props), "duplicate metadata_props keys"
        extra = meta_n.pop(NNLINT_METADATA_KEY, None)
        assert meta_n == meta_o, f"metadata_props {meta_n} vs {meta_o}"
        assert new.graph.name == orig.graph.name, f"graph name {new.graph.name!r} vs {orig.graph.name!r}"
        for kind in ("input", "output"):
            o = [(v.name, value_type(v)) for v in getattr(orig.graph, kind)]
            n = [(v.name, value_type(v)) for v in getattr(new.graph, kind)]
            assert n == o, f"graph {kind}s {n} vs {o}"
        names = [n.name for n in new.graph.node]
        assert all(names), "a node has no name"
        dup = sorted({x for x in names if names.count(x) > 1})
        assert not dup, f"duplicate node names {dup}"
        inits = [i.name for i in new.graph.initializer]
        dup = sorted({x for x in inits if inits.count(x) > 1})
        assert not dup, f"duplicate initializer names {dup}"
        unused = sorted(set(inits) - used_names(new.graph) - {o.name for o in new.graph.output})
        assert not unused, f"unused initializers {unused}"
        produced = [o for n in new.graph.node for o in n.output if o]
        dup = sorted({x for x in produced if produced.count(x) > 1})
        assert not dup, f"values produced twice {dup}"
        kept = self.value_info(orig, new)
        for x in self.report["rewrites"]:
            assert x["node"] in {n.name for n in orig.graph.node}, f"rewritten node {x['node']!r} is not in the input"
            missing = set(x["new_nodes"]) - set(names)
            assert not missing, f"new_nodes {sorted(missing)} of {x['node']} are not in the output"
        return f"header, interface, unique names, no unused initializer, value_info kept: {kept}" + (
            f"; {NNLINT_METADATA_KEY} = {extra[:80]!r}" if extra is not None else "")

    @staticmethod
    def value_info(orig, new):
        """A value_info of the input must be kept when its value is still in the output with
        the same inferred type; when a rewrite changed the value's shape it must be dropped or
        updated (a stale one also fails the checker)."""
        produced = {o for n in new.graph.node for o in n.output}
        stripped = onnx.ModelProto()
        stripped.CopyFrom(new)
        del stripped.graph.value_info[:]
        inferred = {v.name: value_type(v) for v in shape_inference.infer_shapes(stripped).graph.value_info}
        have = {v.name: value_type(v) for v in new.graph.value_info}
        kept = []
        for v in orig.graph.value_info:
            if v.name not in produced:
                continue
            t = value_type(v)
            if inferred.get(v.name) == t:
                assert have.get(v.name) == t, f"value_info {v.name} {t} was dropped or changed: {have.get(v.name)}"
                kept.append(v.name)
            else:
                assert v.name not in have or have[v.name] == inferred.get(v.name), \
                    f"value_info {v.name} is stale: {have[v.name]}, inferred {inferred.get(v.name)}"
        return kept

    def external(self):
        """The output's tensors are external exactly when the input's are, in files next to it."""
        new = onnx.load(self.out, load_external_data=False)
        locs = set()
        for t in new.graph.initializer:
            if t.data_location == onnx.TensorProto.EXTERNAL:
                loc = {e.key: e.value for e in t.external_data}.get("location", "")
                assert loc and not os.path.isabs(loc) and os.path.dirname(os.path.normpath(loc)) == "", \
                    f"{t.name}: external location {loc!r} is not a file next to the model"
                assert os.path.isfile(os.path.join(self.dir, loc)), f"{t.name}: {loc} does not exist"
                locs.add(loc)
        if self.fixture in EXTERNAL:
            assert locs, "the output of an external-data model stores no tensor externally"
            ext = self.report.get("external_data")
            assert ext is None or os.path.basename(ext) in locs, f"external_data {ext!r} vs locations {sorted(locs)}"
            return f"external data in {sorted(locs)}; out.onnx {os.path.getsize(self.out)} bytes"
        assert not locs, f"external data {sorted(locs)} for a model without"
        return f"embedded; out.onnx {os.path.getsize(self.out)} bytes"

    # d
    def verify(self):
        dump = os.path.join(self.dir, "dump")
        # 0 pass, 3 changed as the approximate and lossy rewrites declared (1 is a failed check)
        rc, text = nnlint("verify", self.src, self.out, "--batch", BATCH, "--dump", dump,
                          "--format", "json", ok=(0, 3))
        v = parse_json(text, "verify")
        assert {0: "pass", 3: "changed"}[rc] == v["verdict"]["status"], v["verdict"]
        if self.full:
            assert rc == 0, f"exact rewrites: {v['verdict']}"
        with open(os.path.join(dump, "manifest.json")) as f:
            man = json.load(f)
        for k in ("inputs", "original", "rewritten"):
            need(man, k, [list], "manifest")

        def load(entry, where):
            need(entry, "name", [str], where)
            need(entry, "file", [str], where)
            a = np.load(os.path.join(dump, entry["file"]), allow_pickle=False)
            assert a.dtype == np.float64, f"{where} {entry['file']}: dtype {a.dtype}, expected float64"
            return a

        feeds, f32_exact = {}, True
        for i, e in enumerate(man["inputs"]):
            a = load(e, f"inputs[{i}]")
            shape = need(e, "shape", [list], f"inputs[{i}]")
            assert list(a.shape) == shape, f"inputs[{i}]: .npy shape {list(a.shape)}, manifest {shape}"
            assert a.shape[0] == BATCH, f"inputs[{i}]: batch {a.shape[0]}"
            feeds[e["name"]] = a.astype(np.float32)
            f32_exact &= bool(np.array_equal(feeds[e["name"]].astype(np.float64), a))
        graph_inputs = [i.name for i in onnx.load(self.src, load_external_data=False).graph.input]
        assert sorted(feeds) == sorted(graph_inputs), f"dumped inputs {sorted(feeds)} vs {graph_inputs}"

        ort_o, ort_n = run_ort(self.src, feeds), run_ort(self.out, feeds)
        res = []
        for side, ours in (("original", ort_o), ("rewritten", ort_n)):
            names = []
            for i, e in enumerate(man[side]):
                ref = load(e, f"{side}[{i}]")
                assert e["name"] in ours, f"{side}[{i}]: no graph output {e['name']!r}"
                err, _ = close(ours[e["name"]], ref, f"onnxruntime({side}) vs nnlint({side}) {e['name']}")
                names.append(e["name"])
                res.append(f"{side} {err:.2g}")
            assert sorted(names) == sorted(ours), f"{side}: dumped outputs {names}, model has {sorted(ours)}"
        dev = {k: float(np.max(np.abs(ort_n[k].astype(np.float64) - ort_o[k]))) for k in ort_o}
        if self.full:
            for k in ort_o:
                close(ort_n[k], ort_o[k], f"onnxruntime: rewritten vs original {k} at --rank full")
        return (f"rc {rc}; ORT vs candle max abs diff: {', '.join(res)}; rewritten vs original "
                + ", ".join(f"{k} {v:.3g}" for k, v in dev.items())
                + ("" if f32_exact else "; note: dumped inputs are not f32-representable"))

    def full_rank_exact(self):
        """--rank full: every rewrite must declare itself exact and measure as exact."""
        for x in self.report["rewrites"]:
            assert x["safety"] == "exact", f"{x['node']}: {x['kind']} at --rank full is {x['safety']!r}"
            v = x.get("verify")
            if v is not None:
                assert v["max_rel_error"] <= TOL, f"{x['node']}: verify {v}"
        return "all rewrites exact"

    def relint(self):
        """No ping-pong: linting the output finds nothing on a node the rewrite created."""
        _, text = nnlint("lint", self.out, "--config", self.config(), "--format", "json",
                         "--fail-on", "never", "--batch", BATCH)
        created = {n for x in self.report["rewrites"] for n in x["new_nodes"]}
        hits = sorted((f["code"], f["node"]) for f in parse_json(text, "lint")["files"][0]["findings"]
                      if f.get("node") in created and f["code"] in RULE_KIND)
        assert not hits, f"lint fires on rewritten nodes: {hits}"
        return "no architecture finding on new nodes"

    def checks(self):
        """(name, function, the checks it needs)."""
        c = [("rewrite", self.rewrite, []), ("json", self.json_contract, ["rewrite"]),
             ("checker", self.checker, ["rewrite"]), ("preserved", self.preserved, ["rewrite", "json"]),
             ("external-data", self.external, ["rewrite"]), ("params", self.params, ["rewrite", "json"]),
             ("verify", self.verify, ["rewrite"])]
        if self.full:
            c.append(("exact", self.full_rank_exact, ["rewrite", "json"]))
        else:  # full-rank factors save nothing by design; oversized-linear may well fire on them
            c.append(("relint", self.relint, ["rewrite", "json"]))
        return c


# --------------------------------------------------------------------------
# runner
# --------------------------------------------------------------------------

def main(argv):
    filters = argv[1:]  # substrings of case names ("vgg_like", "--rank full", "fixture")
    selected = lambda name: not filters or any(f in name for f in filters)
    results = []

    def report(name, fn, blocked=None):
        t0 = time.perf_counter()
        if blocked:
            status, detail = "SKIP", f"needs: {blocked}"
        else:
            try:
                status, detail = "PASS", fn() or ""
            except Exception as e:  # noqa: BLE001 -- every failure is reported, then the next check runs
                status = "FAIL"
                detail = f"{type(e).__name__}: {e}" if str(e) else traceback.format_exc()
        ms = (time.perf_counter() - t0) * 1000
        first, *rest = str(detail).splitlines() or [""]
        print(f"{status:4}  {name:48} {first} ({ms:.0f} ms)", flush=True)
        for line in rest:
            print(f"      {line}")
        results.append(status)
        return status

    print(f"nnlint {os.environ.get('NNLINT')}; onnx {onnx.__version__}, onnxruntime {ort.__version__}, "
          f"numpy {np.__version__}")
    for f in FIXTURE_NAMES:
        if selected(f"fixture {f[:-5]}"):
            report(f"fixture {f[:-5]}", lambda f=f: check_fixture(f))
    with tempfile.TemporaryDirectory(prefix="nnlint-interop-") as tmp:
        for f in FIXTURE_NAMES:
            for variant in ("default", "full"):
                if not selected(f"{f[:-5]} --rank {variant}"):
                    continue
                case, failed = Case(f, variant, tmp), set()
                for check, fn, deps in case.checks():
                    blocked = ", ".join(d for d in deps if d in failed)
                    if report(f"{f[:-5]} --rank {variant}: {check}", fn, blocked) != "PASS":
                        failed.add(check)
    failed = results.count("FAIL")
    print(f"\n{results.count('PASS')} passed, {failed} failed, {results.count('SKIP')} skipped")
    return 1 if failed or not results else 0

if __name__ == "__main__":
    sys.exit(main(sys.argv))
