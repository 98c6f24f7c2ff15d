#!/usr/bin/env python3
"""Ground truth for nnlint's recurrent token mixers: the bytes autograd saves inside Mamba-2, Gated DeltaNet and
LFM2's short convolution, per layer, with closed-form formulas checked against them.

For the hybrid / state-space fixtures of testdata/llm/ (written by measure.py: mamba2, granitemoehybrid, nemotron_h,
falcon_h1, lfm2, qwen3_next, qwen3_5_text) this script reloads the saved checkpoint on CPU and runs measure.py's
training forward (measure.load, measure.make_inputs, measure.SCENARIOS, peft LoRA exactly as measure.py configures
it through measure_images.apply_lora) under saved-tensor hooks. Every saved storage is deduplicated and classified
as in measure.py (parameter, buffer, input, autocast_weight_copy, activation) and attributed to the module region in
which it was first packed (forward pre/post hooks, as measure_images.RegionStack):
  - L<i>.mixer: the token mixer of decoder layer i itself (Mamba2Mixer, GraniteMoeHybridMambaLayer,
    NemotronHMamba2Mixer, FalconH1Mixer, Lfm2ShortConv, Qwen3NextGatedDeltaNet, Qwen3_5GatedDeltaNet), its in/out
    projections, conv, scan and gated norm included;
  - L<i>: the rest of decoder layer i (norms, attention, MLP / MoE, residual ops);
  - model: everything outside the decoder layers (embeddings, final norm, lm_head, loss; under gradient
    checkpointing also the layer inputs the checkpoint keeps, packed before the layer's own hooks run).
Measured at measure.TRAIN_POINTS (the fixtures' own points, whose totals must equal expected.json's
activation_bytes) and at extra points where S is not a multiple of the scan's chunk and spans several chunks; and on
a variant config per family (heads != head_dim != d_state != chunk, n_groups 2, another conv kernel; saved to a
temporary folder, never to testdata) so that no two formula symbols share a value.

The closed forms (MIXER_FORMULAS: one per mixer kind and scenario, as functions of B, S and the config) are checked
against every measured point (ratio measured / formula) and written with the measurements to
testdata/llm/<family>/mixers.json. Run after measure.py. CPU only:
    python tools/llm/measure_mixers.py [--only mamba2,lfm2] [--scenarios sdpa_fp32] [--no-variant]
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import sys
import tempfile
import time
import weakref
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure as M  # noqa: E402  (offline env, torch threads = 1, transformers imported)
import measure_images as MI  # noqa: E402  (apply_lora: peft exactly as measure.py configures it)
import torch  # noqa: E402
from transformers import AutoConfig  # noqa: E402

SEED = M.SEED
MIXER_CLASSES = {
    "Mamba2Mixer": "mamba2",
    "GraniteMoeHybridMambaLayer": "mamba2",
    "NemotronHMamba2Mixer": "mamba2",
    "FalconH1Mixer": "mamba2",
    "Lfm2ShortConv": "short_conv",
    "Qwen3NextGatedDeltaNet": "gated_deltanet",
    "Qwen3_5GatedDeltaNet": "gated_deltanet",
}
FAMILY_NAMES = ["mamba2", "granitemoehybrid", "nemotron_h", "falcon_h1", "lfm2", "qwen3_next", "qwen3_5_text"]
SCENARIO_NAMES = ["sdpa_fp32", "eager_fp32", "sdpa_autocast_bf16", "sdpa_bf16_weights", "sdpa_fp32_padded",
                  "sdpa_fp32_gc", "sdpa_fp32_gc_reentrant", "sdpa_fp32_lora_qv", "sdpa_fp32_lora_all_linear",
                  "sdpa_fp32_frozen_but_embeddings"]
# not a measure.py scenario: every parameter frozen but the input embedding, so every mixer is frozen while its
# input requires grad (the case of a mixer downstream of a LoRA adapter that has none itself)
EXTRA_SCENARIOS = {"sdpa_fp32_frozen_but_embeddings": dict(attn="sdpa", prec="fp32", freeze="except_embeddings")}
# extra (B, S) beyond measure.TRAIN_POINTS: S not a multiple of the chunk and longer than one chunk
# (Mamba-2 fixtures: chunk 16; DeltaNet: torch_chunk_gated_delta_rule's default chunk 64), and one exact multiple
EXTRA_POINTS = {
    "mamba2": [(1, 70), (2, 32)],
    "short_conv": [(1, 70)],
    "gated_deltanet": [(1, 70), (2, 128), (1, 150)],
}
# variant configs (in memory, saved to a temporary folder): every symbol of the formulas gets a distinct value
VARIANTS = {
    "mamba2": dict(num_heads=6, head_dim=16, expand=3, state_size=10, n_groups=2, conv_kernel=3, chunk_size=12),
    "granitemoehybrid": dict(mamba_n_heads=6, mamba_d_head=16, mamba_expand=3, mamba_d_state=10, mamba_n_groups=2,
                             mamba_d_conv=3, mamba_chunk_size=12),
    "nemotron_h": dict(mamba_num_heads=6, mamba_head_dim=8, ssm_state_size=10, n_groups=2, conv_kernel=3,
                       chunk_size=12),
    "falcon_h1": dict(mamba_d_ssm=48, mamba_n_heads=6, mamba_d_head=8, mamba_d_state=10, mamba_n_groups=2,
                      mamba_d_conv=3, mamba_chunk_size=12),
    "lfm2": dict(conv_L_cache=4),
    "qwen3_next": dict(linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=12,
                       linear_value_head_dim=8, linear_conv_kernel_dim=3),
    "qwen3_5_text": dict(linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=12,
                         linear_value_head_dim=8, linear_conv_kernel_dim=3),
}
VARIANT_POINTS = {"mamba2": [(2, 30)], "short_conv": [(2, 30)], "gated_deltanet": [(2, 30), (1, 70)]}


# ---------------------------------------------------------------------------------------------------
# regions
# ---------------------------------------------------------------------------------------------------
class MixerRegions:
    """Region stack over the decoder layers and their token mixers (the RegionStack of measure_images.py)."""

    def __init__(self, model, tc):
        self.stack = ["model"]
        self.handles = []
        _, layers = M.decoder_layers(model, tc)
        self.mixers = {}  # layer index -> (attribute name, class name)
        for i, layer in enumerate(layers):
            self._hook(layer, f"L{i}")
            for cn, child in layer.named_children():
                if type(child).__name__ in MIXER_CLASSES:
                    self.mixers[i] = (cn, type(child).__name__)
                    self._hook(child, f"L{i}.mixer")

    def _hook(self, mod, label):
        def enter(module, args):
            self.stack.append(label)

        def leave(module, args, output):
            self.stack.pop()
        self.handles.append(mod.register_forward_pre_hook(enter))
        self.handles.append(mod.register_forward_hook(leave))

    def close(self):
        for h in self.handles:
            h.remove()


# ---------------------------------------------------------------------------------------------------
# one measurement
# ---------------------------------------------------------------------------------------------------
def measure_point(folder, spec, cfg, sc, B, S, want_detail=True):
    """measure.measure_scenario's training forward (same load, gradient checkpointing, LoRA, inputs, autocast,
    saved-tensor classification), with every storage attributed to the region where it was first packed."""
    tc = M.text_config(cfg)
    torch.manual_seed(SEED)
    dtype = torch.bfloat16 if sc["prec"] == "bf16_weights" else torch.float32
    model = M.load(folder, spec, attn=sc["attn"], dtype=dtype)
    model.train()
    if sc.get("gc"):
        kw = {"use_reentrant": True} if sc["gc"] == "reentrant" else None
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kw)
    lora = wrapped = None
    if sc.get("lora"):
        model, targets, wrapped = MI.apply_lora(model, spec, sc["lora"])
        lora = {"target_modules": targets, "wrapped_modules": len(wrapped)}
    if sc.get("freeze") == "except_embeddings":
        for p in model.parameters():
            p.requires_grad_(False)
        model.get_input_embeddings().weight.requires_grad_(True)
    model.train()
    base = model.get_base_model() if lora else model
    rs = MixerRegions(base, tc)
    if lora:
        lora["per_mixer_layer"] = lora_context(rs.mixers, wrapped)
    param_ptrs = {p.untyped_storage().data_ptr() for p in model.parameters()}
    buf_ptrs = {b.untyped_storage().data_ptr() for b in model.buffers()}
    inputs = M.make_inputs(spec, cfg, B, S)
    if sc.get("pad"):
        mask = torch.ones(B, S, dtype=torch.long)
        mask[-1, -sc["pad"]:] = 0
        inputs["attention_mask"] = mask
    input_ptrs = {t.untyped_storage().data_ptr() for t in inputs.values()}
    autocast = sc["prec"] == "autocast_bf16"
    casts = collections.defaultdict(list)
    if autocast:
        for n, p in model.named_parameters():
            if p.is_floating_point() and p.dim() >= 1:
                casts[p.numel()].append(p.detach().to(torch.bfloat16).reshape(-1))
    tracker = M.FuncTracker()
    holders = []

    def pack(t):
        h = M._Holder(t, len(holders), (rs.stack[-1], tracker.stack[-1] if tracker.stack else "<none>"))
        holders.append(weakref.ref(h))
        return h

    last = []

    def unpack(h):
        last.append(h.idx)
        return h.t

    ac = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack), tracker, ac:
        out = model(**inputs, use_cache=False)
        loss = out.loss
    del out
    rs.close()
    savers = collections.defaultdict(set)
    if want_detail and not sc.get("gc"):  # reading a checkpointed layer's saved tensor would recompute it
        for n in M.node_walk(loss.grad_fn):
            nm = type(n).__name__
            for a in [a for a in dir(n) if a.startswith("_saved_")]:
                last.clear()
                try:
                    getattr(n, a)
                except Exception:
                    pass
                for idx in last:
                    savers[idx].add(f"{nm}.{a[len('_saved_'):]}")
        last.clear()
    storages = {}
    for ref in holders:
        h = ref()
        if h is None:
            continue
        s = h.t.untyped_storage()
        ptr, nb = s.data_ptr(), s.nbytes()
        if nb == 0:
            continue
        e = storages.get(ptr)
        if e is None:
            if ptr in param_ptrs:
                cat = "parameter"
            elif ptr in buf_ptrs:
                cat = "buffer"
            elif ptr in input_ptrs:
                cat = "input"
            else:
                cat = "activation"
                if autocast and h.t.dtype == torch.bfloat16 and nb % 2 == 0:
                    flat = torch.empty(0, dtype=torch.bfloat16).set_(s)
                    if any(torch.equal(flat, pc) for pc in casts.get(flat.numel(), [])):
                        cat = "autocast_weight_copy"
            e = storages[ptr] = {"cat": cat, "region": h.func[0], "func": h.func[1], "bytes": nb,
                                 "dtype": M.dtype_name(h.t.dtype), "shape": tuple(h.t.shape), "savers": set()}
        e["savers"] |= savers.get(h.idx, set())
    del h
    by_cat = collections.Counter()
    by_region = collections.Counter()
    wcopy = collections.Counter()
    detail = collections.defaultdict(collections.Counter)
    for e in storages.values():
        by_cat[e["cat"]] += e["bytes"]
        if e["cat"] == "activation":
            by_region[e["region"]] += e["bytes"]
            if e["region"].endswith(".mixer"):
                sv = " + ".join(sorted(e["savers"]))
                detail[e["region"]][(e["bytes"], e["dtype"], e["shape"], e["func"], sv)] += 1
        elif e["cat"] == "autocast_weight_copy":
            wcopy[e["region"]] += e["bytes"]
    assert sum(by_region.values()) == by_cat["activation"]
    L = tc.num_hidden_layers
    res = {"batch": B, "seq": S, "activation_bytes": by_cat["activation"],
           "mixer_layers": sorted(rs.mixers),
           "mixer_bytes": [by_region.get(f"L{i}.mixer", 0) for i in sorted(rs.mixers)],
           "rest_of_layer_bytes": [by_region.get(f"L{i}", 0) for i in range(L)],
           "outside_layers_bytes": by_region.get("model", 0),
           "mixer_autocast_weight_copy_bytes": [wcopy.get(f"L{i}.mixer", 0) for i in sorted(rs.mixers)]}
    if lora:
        res["lora"] = lora
    res["_detail"] = {int(r[1:].split(".")[0]): d for r, d in detail.items()}
    res["_mixer_class"] = {i: c for i, (_, c) in rs.mixers.items()}
    del loss, model, storages
    return res


def detail_rows(counter):
    rows = [[n, b, dt, list(sh), fn] + ([sv] if sv else []) for (b, dt, sh, fn, sv), n in counter.items()]
    return sorted(rows, key=lambda r: (-r[0] * r[1], r[4]))


# ---------------------------------------------------------------------------------------------------
# fixtures and variants
# ---------------------------------------------------------------------------------------------------
def variant_folder(name, spec, tmp: Path):
    """The family's config with VARIANTS[name] applied, random-init with the seed, saved to tmp/<name>."""
    vspec = dict(spec, config={**spec["config"], **VARIANTS[name]})
    cfg = M.make_config(vspec)
    torch.manual_seed(SEED)
    model = M.HEADS[spec["head"]].from_config(cfg, dtype=torch.float32)
    model.to(M.DTYPES[spec["dtype"]])
    folder = tmp / name
    model.save_pretrained(folder)
    del model
    return folder


def mixer_dims(cfg, kind):
    """The formula symbols of one mixer, read from the config the way the modeling code reads them."""
    tc = M.text_config(cfg)
    d = {"d": tc.hidden_size}
    mt = tc.model_type
    if kind == "mamba2":
        if mt == "mamba2":
            d.update(H=tc.num_heads, P=tc.head_dim, N=tc.state_size, G=tc.n_groups, K=tc.conv_kernel,
                     Q=tc.chunk_size, I=int(tc.expand * tc.hidden_size))
        elif mt == "nemotron_h":
            d.update(H=tc.mamba_num_heads, P=tc.mamba_head_dim, N=tc.ssm_state_size, G=tc.n_groups,
                     K=tc.conv_kernel, Q=tc.chunk_size, I=tc.mamba_num_heads * tc.mamba_head_dim)
        else:  # granitemoehybrid, falcon_h1
            inter = getattr(tc, "mamba_d_ssm", None) or int(tc.mamba_expand * tc.hidden_size)
            d.update(H=tc.mamba_n_heads, P=tc.mamba_d_head, N=tc.mamba_d_state, G=tc.mamba_n_groups,
                     K=tc.mamba_d_conv, Q=tc.mamba_chunk_size, I=inter)
        if mt == "falcon_h1":
            d.update(falcon=True, norm_before_gate=bool(tc.mamba_norm_before_gate), rms_norm=bool(tc.mamba_rms_norm))
        d["CD"] = d["I"] + 2 * d["G"] * d["N"]
        d["W"] = d["I"] + d["CD"] + d["H"]
    elif kind == "short_conv":
        d.update(K=tc.conv_L_cache)
    else:
        d.update(Hk=tc.linear_num_key_heads, Hv=tc.linear_num_value_heads, Dk=tc.linear_key_head_dim,
                 Dv=tc.linear_value_head_dim, K=tc.linear_conv_kernel_dim, Q=64,
                 split_in_proj=mt.startswith("qwen3_5"))
    return d


def lora_context(mixers, wrapped):
    """Per mixer layer: which of its linears peft wrapped, and whether anything trainable lies upstream of it
    (an adapter in an earlier layer, or in this layer before the mixer: none of these families has one)."""
    out = {}
    for i, (attr, _) in mixers.items():
        mine = sorted(w.split(f".{i}.{attr}.", 1)[1] for w in wrapped if f"layers.{i}.{attr}." in w)
        upstream = any(int(w.split("layers.", 1)[1].split(".")[0]) < i for w in wrapped if "layers." in w)
        out[i] = {"wrapped": mine, "input_requires_grad": upstream}
    return out


# ---------------------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------------------
def scenario_key(sc):
    """Which formula a measure.py scenario takes."""
    if sc.get("gc"):
        return "gc"
    if sc.get("lora"):
        return "lora"
    if sc.get("freeze"):
        return "frozen"
    return {"fp32": "fp32", "autocast_bf16": "autocast_bf16", "bf16_weights": "bf16_weights"}[sc["prec"]]


def check(kind, dims, sc, run):
    """Formula per mixer layer next to the measurement; ratio = measured / formula (1.0 when both are 0)."""
    out = []
    for j, i in enumerate(run["mixer_layers"]):
        ctx = run.get("lora", {}).get("per_mixer_layer", {}).get(i) if sc.get("lora") else None
        f = mixer_formula(kind, dims, scenario_key(sc), run["batch"], run["seq"], ctx)
        m = run["mixer_bytes"][j]
        out.append({"layer": i, "measured": m, "formula": f,
                    "ratio": 1.0 if m == f == 0 else (round(m / f, 6) if f else None)})
    return out


def run_family(name, tmp, scenarios, variant=True, log=print):
    t0 = time.time()
    spec = M.FAMILIES[name]
    folder = M.DEFAULT_OUT / name
    cfg = AutoConfig.from_pretrained(folder, local_files_only=True)
    expected = json.loads((folder / "expected.json").read_text())
    exp_sc = expected.get("training", {}).get("scenarios", {})
    try:
        M.load(folder, spec, attn="sdpa", dtype=torch.float32)
        sdpa = True
    except ValueError:
        sdpa = False
    sets = [("fixture", folder, cfg)]
    if variant:
        vf = variant_folder(name, spec, tmp)
        sets.append(("variant", vf, AutoConfig.from_pretrained(vf, local_files_only=True)))
    res = {"family": name, "generated_by": "tools/llm/measure_mixers.py", "versions": M.VERSIONS, "device": "cpu",
           "seed": SEED, "method": METHOD, "scenarios": {}}
    kind = None
    for sn in scenarios:
        sc = dict(M.SCENARIOS.get(sn) or EXTRA_SCENARIOS[sn])
        if not sdpa and sc["attn"] == "sdpa":
            sn, sc["attn"] = sn.replace("sdpa_", "eager_"), "eager"
        if sn in res["scenarios"]:
            continue
        entry = res["scenarios"][sn] = {"config": sc, "formula_key": scenario_key(sc), "runs": []}
        for which, fol, c in sets:
            if kind is None:
                probe = measure_point(fol, spec, c, dict(M.SCENARIOS["eager_fp32"]), 1, 8, want_detail=False)
                kind = MIXER_CLASSES[next(iter(probe["_mixer_class"].values()))]
                res["mixer_class"] = sorted(set(probe["_mixer_class"].values()))
                res["mixer_kind"] = kind
            pts = (M.TRAIN_POINTS + EXTRA_POINTS[kind]) if which == "fixture" else VARIANT_POINTS[kind]
            dims = mixer_dims(c, kind)
            res.setdefault("dims", {})[which] = dims
            for k, (B, S) in enumerate(pts):
                try:
                    r = measure_point(fol, spec, c, sc, B, S, want_detail=(which == "fixture" and k == 0))
                except Exception as exc:  # peft refuses out_proj/conv1d of Mamba models: record, go on
                    entry["runs"].append({"config": which, "batch": B, "seq": S,
                                          "error": f"{type(exc).__name__}: {exc}"[:300]})
                    continue
                det, _ = r.pop("_detail"), r.pop("_mixer_class")
                r = {"config": which, **r}
                if which == "fixture" and (B, S) in M.TRAIN_POINTS:
                    runs = exp_sc.get(sn, {}).get("runs", [])
                    e = next((x for x in runs if x.get("batch") == B and x.get("seq") == S and "saved" in x), None)
                    if e:
                        r["expected_json_activation_bytes"] = e["saved"]["activation_bytes"]
                r["check"] = check(kind, dims, sc, r)
                if which == "fixture" and k == 0:
                    seen = set()
                    entry["breakdown_point"] = {"batch": B, "seq": S}
                    entry["breakdown_columns"] = ["count", "bytes_each", "dtype", "shape",
                                                  "torch function that first packed it",
                                                  "autograd savers (not under checkpointing)"]
                    entry["breakdown"] = {}
                    for i, j in zip(r["mixer_layers"], r["mixer_bytes"]):
                        if j not in seen and i in det:
                            seen.add(j)
                            entry["breakdown"][f"layer {i}"] = detail_rows(det[i])
                entry["runs"].append(r)
        log(f"  {name} {sn}: " + " ".join(
            f"{r['config'][0]}({r['batch']},{r['seq']})=" + ("ERR" if "error" in r else
                                                              ",".join(str(x) for x in r["mixer_bytes"]))
            for r in entry["runs"]), flush=True)
    res["elapsed_s"] = round(time.time() - t0, 1)
    return res


METHOD = "see the module docstring"


def mixer_formula(kind, dims, key, B, S, ctx):
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated families")
    ap.add_argument("--scenarios", help="comma-separated scenarios (measure.py names)")
    ap.add_argument("--no-variant", action="store_true")
    ap.add_argument("--dump", type=Path, help="also write the results here (one JSON per family)")
    args = ap.parse_args()
    names = args.only.split(",") if args.only else FAMILY_NAMES
    scen = args.scenarios.split(",") if args.scenarios else SCENARIO_NAMES
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            res = run_family(name, Path(tmp), scen, variant=not args.no_variant)
            M.write_json((args.dump or M.DEFAULT_OUT / name) / ("mixers.json" if not args.dump else f"{name}.json"),
                         res)


if __name__ == "__main__":
    main()
