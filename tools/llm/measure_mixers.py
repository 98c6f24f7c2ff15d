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
Measured at measure.TRAIN_POINTS (the fixtures' own points: the totals equal expected.json's activation_bytes) and
at extra points: S not a multiple of the scan's chunk and spanning several chunks, exact multiples, one-chunk
sequences (S <= chunk) with B = 1 and B > 1; and on variant configs per family (VARIANTS: heads, head_dim, d_state,
chunk, groups, conv kernel all distinct; Mamba-2 also with one group, DeltaNet also with key heads = value heads),
random-init and saved to a temporary folder, never to testdata. Scenarios: measure.py's (sdpa_* as eager_* where
the model has no SDPA) and sdpa_fp32_frozen_but_embeddings (every parameter frozen but the input embedding: a frozen
mixer whose input requires grad, the case of a mixer downstream of a LoRA adapter); the same three (LoRA q/v,
all-linear, frozen but embeddings) on a bf16 base (sdpa_bf16_*) and under bf16 autocast (sdpa_autocast_*).

--expected adds EXPECTED_SCENARIOS (LoRA on a bf16 base and under bf16 autocast) to testdata/llm/<family>/expected.json
as measure.py would record them (measure.measure_scenario at measure.TRAIN_POINTS), leaving the rest of the file as is:
    python tools/llm/measure_mixers.py --expected [--only qwen3_next] [--scenarios sdpa_bf16_lora_qv]

The closed forms, per mixer kind and scenario as functions of B, S and the config, exist twice: mixer_terms (the
list of tensors, with shapes and dtypes) and FORMULA_EXPR (the sums in symbols); both are evaluated at every
measured point and for every mixer layer (ratio = measured / formula, 1.0 everywhere) and written with the
measurements to testdata/llm/<family>/mixers.json. Run after measure.py (~1 min on 1 core). CPU only:
    python tools/llm/measure_mixers.py [--only mamba2,lfm2] [--scenarios sdpa_fp32] [--no-variant] [--dump DIR]
MEASURE_MIXERS_DEBUG=1 also keeps every point's per-tensor rows (derivation aid).
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
DEBUG = bool(__import__("os").environ.get("MEASURE_MIXERS_DEBUG"))  # every point's per-tensor rows (derivation aid)
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
                  "sdpa_fp32_frozen_but_embeddings", "sdpa_bf16_lora_qv", "sdpa_bf16_lora_all_linear",
                  "sdpa_bf16_frozen_but_embeddings", "sdpa_autocast_lora_qv", "sdpa_autocast_lora_all_linear",
                  "sdpa_autocast_frozen_but_embeddings"]
# not a measure.py scenario: every parameter frozen but the input embedding, so every mixer is frozen while its
# input requires grad (the case of a mixer downstream of a LoRA adapter that has none itself)
EXTRA_SCENARIOS = {"sdpa_fp32_frozen_but_embeddings": dict(attn="sdpa", prec="fp32", freeze="except_embeddings"),
                   # LoRA on a bf16 base (model loaded in bf16; peft keeps the adapters fp32)
                   "sdpa_bf16_lora_qv": dict(attn="sdpa", prec="bf16_weights", lora="qv"),
                   "sdpa_bf16_lora_all_linear": dict(attn="sdpa", prec="bf16_weights", lora="all-linear"),
                   "sdpa_bf16_frozen_but_embeddings": dict(attn="sdpa", prec="bf16_weights",
                                                           freeze="except_embeddings"),
                   # LoRA on an fp32 base under bf16 autocast
                   "sdpa_autocast_lora_qv": dict(attn="sdpa", prec="autocast_bf16", lora="qv"),
                   "sdpa_autocast_lora_all_linear": dict(attn="sdpa", prec="autocast_bf16", lora="all-linear"),
                   "sdpa_autocast_frozen_but_embeddings": dict(attn="sdpa", prec="autocast_bf16",
                                                               freeze="except_embeddings"),
                   # DeltaNet: an adapter on one in-projection only (Qwen3-Next's in_proj_qkvz, Qwen3.5's
                   # in_proj_qkv), the first mixer's input without a gradient. Measured on request (--scenarios),
                   # not by default: no closed form yet (the gates and z then need no gradient, so the scan keeps
                   # less), nnlint reports that mixer's count as a lower bound
                   "sdpa_fp32_lora_in_proj_part": dict(attn="sdpa", prec="fp32", lora="qv",
                                                       lora_targets=["in_proj_qkvz", "in_proj_qkv"]),
                   "sdpa_bf16_lora_in_proj_part": dict(attn="sdpa", prec="bf16_weights", lora="qv",
                                                       lora_targets=["in_proj_qkvz", "in_proj_qkv"])}
# extra (B, S) beyond measure.TRAIN_POINTS (Mamba-2 fixtures: chunk 16; DeltaNet: torch_chunk_gated_delta_rule's
# default chunk 64): S not a multiple of the chunk and longer than one chunk, exact multiples, one chunk only
EXTRA_POINTS = {
    "mamba2": [(1, 70), (2, 32), (2, 10), (1, 16), (1, 9)],
    "short_conv": [(1, 70)],
    "gated_deltanet": [(1, 70), (2, 128), (1, 150), (1, 64), (1, 24)],
}
# variant configs (in memory, saved to a temporary folder): every symbol of the formulas gets a distinct value;
# DeltaNet also with as many key heads as value heads (no repeat_interleave of q and k)
VARIANTS = {
    "mamba2": {"variant": dict(num_heads=6, head_dim=16, expand=3, state_size=10, n_groups=2, conv_kernel=3,
                               chunk_size=12),
               "variant_one_group": dict(num_heads=6, head_dim=16, expand=3, state_size=10, n_groups=1,
                                         conv_kernel=3, chunk_size=12)},
    "granitemoehybrid": {"variant": dict(mamba_n_heads=6, mamba_d_head=16, mamba_expand=3, mamba_d_state=10,
                                         mamba_n_groups=2, mamba_d_conv=3, mamba_chunk_size=12)},
    "nemotron_h": {"variant": dict(mamba_num_heads=6, mamba_head_dim=8, ssm_state_size=10, n_groups=2,
                                   conv_kernel=3, chunk_size=12)},
    "falcon_h1": {"variant": dict(mamba_d_ssm=48, mamba_n_heads=6, mamba_d_head=8, mamba_d_state=10,
                                  mamba_n_groups=2, mamba_d_conv=3, mamba_chunk_size=12)},
    "lfm2": {"variant": dict(conv_L_cache=4)},
}
for _n in ("qwen3_next", "qwen3_5_text"):
    VARIANTS[_n] = {"variant": dict(linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=12,
                                    linear_value_head_dim=8, linear_conv_kernel_dim=3),
                    "variant_equal_heads": dict(linear_num_key_heads=4, linear_num_value_heads=4,
                                                linear_key_head_dim=12, linear_value_head_dim=8)}
# variants: several chunks; one chunk (S <= Q) with B = 2 and B = 1, padded and not
VARIANT_POINTS = {"mamba2": [(2, 30), (2, 10), (1, 10), (1, 12), (2, 12)], "short_conv": [(2, 30)],
                  "gated_deltanet": [(2, 30), (1, 70), (1, 128)]}


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
        model, targets, wrapped = MI.apply_lora(model, dict(spec, lora_qv_targets=sc["lora_targets"])
                                                if sc.get("lora_targets") else spec, sc["lora"])
        lora = {"target_modules": targets, "wrapped_modules": len(wrapped)}
        if sc["prec"] == "autocast_bf16":
            # peft zero-initialises lora_B: its bf16 autocast copy would equal, value for value, any zero activation
            # of its size (DeltaNet's zero initial state cast to bf16) and take it for a weight copy below. The
            # values change no saved tensor's size: make them non-zero so the classification is unambiguous
            with torch.no_grad():
                for n, p in model.named_parameters():
                    if "lora_B" in n:
                        p.uniform_(0.5, 1.0)
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
def variant_folder(name, spec, tmp: Path, label):
    """The family's config with VARIANTS[name][label] applied, random-init with the seed, saved to tmp/<name>."""
    vspec = dict(spec, config={**spec["config"], **VARIANTS[name][label]})
    cfg = M.make_config(vspec)
    torch.manual_seed(SEED)
    model = M.HEADS[spec["head"]].from_config(cfg, dtype=torch.float32)
    model.to(M.DTYPES[spec["dtype"]])
    folder = tmp / f"{name}-{label}"
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
    # LoRA / frozen on a bf16 base or under bf16 autocast
    half = {"bf16_weights": "bf16_", "autocast_bf16": "autocast_"}.get(sc["prec"], "")
    if sc.get("lora"):
        return half + "lora"
    if sc.get("freeze"):
        return half + "frozen"
    return {"fp32": "fp32", "autocast_bf16": "autocast_bf16", "bf16_weights": "bf16_weights"}[sc["prec"]]


def check(kind, dims, sc, run):
    """Formula per mixer layer next to the measurement; ratio = measured / formula (1.0 when both are 0)."""
    out = []
    for j, i in enumerate(run["mixer_layers"]):
        pm = run.get("lora", {}).get("per_mixer_layer", {})
        ctx = (pm.get(i) or pm.get(str(i))) if sc.get("lora") else None  # str: read back from JSON
        key = scenario_key(sc)
        f = mixer_formula(kind, dims, key, run["batch"], run["seq"], ctx)
        m = run["mixer_bytes"][j]
        sym = symbolic_formula(kind, dims, key, run["batch"], run["seq"], ctx)
        out.append({"layer": i, "measured": m, "formula": f,
                    "ratio": 1.0 if m == f == 0 else (round(m / f, 6) if f else None),
                    **({} if sym == f else {"symbolic_formula_differs": sym})})
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
        for label in VARIANTS[name]:
            vf = variant_folder(name, spec, tmp, label)
            sets.append((label, vf, AutoConfig.from_pretrained(vf, local_files_only=True)))
    res = {"family": name, "generated_by": "tools/llm/measure_mixers.py", "versions": M.VERSIONS, "device": "cpu",
           "seed": SEED, "method": METHOD, "scenarios": {}}
    kind = None
    for sn in scenarios:
        sc = dict(M.SCENARIOS.get(sn) or EXTRA_SCENARIOS[sn])
        if not sdpa and sc["attn"] == "sdpa":
            sn, sc["attn"] = sn.replace("sdpa_", "eager_"), "eager"
        if sn in res["scenarios"]:
            continue
        if kind and FORMULA_EXPR[kind].get(symbolic_key(scenario_key(sc))) == "None":
            continue  # not measured for this mixer kind (LFM2's short convolution under LoRA in half precision)
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
                    r = measure_point(fol, spec, c, sc, B, S, want_detail=(which == "fixture" and k == 0) or DEBUG)
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
                if DEBUG:
                    r["_breakdown"] = {str(i): detail_rows(det[i]) for i in det}
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
            "".join(w[0] for w in r["config"].split("_")) + f"({r['batch']},{r['seq']})=" + ("ERR" if "error" in r else
                                                              ",".join(str(x) for x in r["mixer_bytes"]))
            for r in entry["runs"]), flush=True)
    res["symbols"] = {k: v for k, v in SYMBOLS.items() if k in ("B, S", "d", kind)}
    res["formula_symbolic"] = {"python_expressions": FORMULA_EXPR[kind], "notes": FORMULA_NOTES[kind]}
    summary = {}
    for sn, entry in res["scenarios"].items():
        ratios = [c["ratio"] for r in entry["runs"] if "check" in r for c in r["check"]]
        errors = sorted({r["error"] for r in entry["runs"] if "error" in r})
        summary[sn] = ({"points": sum(1 for r in entry["runs"] if "check" in r), "mixer_layers_checked": len(ratios),
                        "symbolic_equals_terms": all("symbolic_formula_differs" not in c for r in entry["runs"]
                                                     if "check" in r for c in r["check"]),
                        "min_ratio": min(ratios, key=lambda x: -1 if x is None else x),
                        "max_ratio": max(ratios, key=lambda x: math.inf if x is None else x)}
                       if ratios else {}) | ({"error": errors[0]} if errors else {})
        first = next((r for r in entry["runs"] if r["config"] == "fixture" and "check" in r), None)
        if first:
            j = next((k for k, m in enumerate(first["mixer_bytes"]) if m), 0)
            i = first["mixer_layers"][j]
            pm = first.get("lora", {}).get("per_mixer_layer", {})
            key = entry["formula_key"]
            regime, base = split_key(key)
            terms = [] if key == "gc" else mixer_terms(kind, res["dims"]["fixture"], regime,
                                                       formula_context(base, pm.get(i)), first["batch"], first["seq"])
            entry["formula_terms"] = {"point": {"batch": first["batch"], "seq": first["seq"], "layer": i},
                                      "columns": ["what", "shape", "dtype", "bytes"], "terms": [list(t) for t in terms],
                                      "total": sum(t[3] for t in terms)}
        for r in entry["runs"]:
            r.pop("_breakdown", None) if not DEBUG else None
    for r in (r for e in res["scenarios"].values() for r in e["runs"]):
        for k in [k for k in r.get("lora", {}).get("per_mixer_layer", {})]:
            r["lora"]["per_mixer_layer"][str(k)] = r["lora"]["per_mixer_layer"].pop(k)
    res["ratio_summary"] = summary
    res["elapsed_s"] = round(time.time() - t0, 1)
    return res


# ---------------------------------------------------------------------------------------------------
# closed forms: one mixer layer's saved activation bytes (the L<i>.mixer region)
# ---------------------------------------------------------------------------------------------------
LORA_R = MI.LORA_R


def _ceil_to(S, Q):
    return -(-S // Q) * Q


def mixer_terms(kind, dims, regime, ctx, B, S):
    """The tensors one mixer layer keeps for backward: [(what, shape, dtype, bytes)].

    regime: "fp32" (fp32 weights), "bf16_weights" (model loaded in bf16), "autocast_bf16" (fp32 weights under
    torch.autocast cpu bf16). ctx: trainable (the mixer's own parameters require grad: full training), lora (names
    of the mixer's linears peft wrapped, base weights frozen), input_grad (the mixer's input requires grad)."""
    return {"mamba2": mamba2_terms, "gated_deltanet": deltanet_terms, "short_conv": shortconv_terms}[kind](
        dims, regime, ctx, B, S)


def _t(out, what, shape, dtype, cond=True, sign=1):
    if cond:
        n = math.prod(shape)
        out.append((what, "[" + ",".join(str(x) for x in shape) + "]", dtype,
                    sign * n * {"f32": 4, "bf16": 2, "bool": 1}[dtype]))


def mamba2_terms(dm, regime, ctx, B, S):
    d, I, H, P, G, N, K, Q, CD, W = (dm[k] for k in ("d", "I", "H", "P", "G", "N", "K", "Q", "CD", "W"))
    T = _ceil_to(S, Q)
    C = T // Q
    r = LORA_R
    falcon = dm.get("falcon", False)
    if falcon and not (dm["rms_norm"] and dm["norm_before_gate"]):
        raise NotImplementedError("FalconH1Mixer without its gated RMSNorm or with norm_before_gate=False: not measured")
    lin = "f32" if regime == "fp32" else "bf16"  # linear/conv outputs
    mm = "bf16" if regime == "autocast_bf16" else "f32"  # the scan's einsum (bmm) operands and outputs
    tr, lora = ctx["trainable"], set(ctx["lora"])
    # LoRA on a bf16 base: the frozen base linear keeps nothing; peft's fp32 adapter keeps an fp32 copy of its input
    half = regime == "bf16_weights" and not tr
    la = "bf16" if regime == "autocast_bf16" else "f32"  # lora_A's output (its fp32 weight under autocast: bf16)
    out = []
    body = ctx["input_grad"] or "in_proj" in lora
    if not body:  # nothing upstream requires grad: only an adapter on out_proj would keep something
        _t(out, "out_proj input (gated-norm output" + (", fp32 copy for lora_A)" if half else ")"), (B, S, I),
           "f32" if half else lin, "out_proj" in lora)
        _t(out, "out_proj lora_A output (saved by lora_B)", (B, S, r), la, "out_proj" in lora)
        return out
    _t(out, "in_proj input x" + (" (x * ssm_in_multiplier)" if falcon else " (the mixer's input)")
       + (", bf16 autocast copy" if regime == "autocast_bf16" else ""), (B, S, d), lin,
       tr or ("in_proj" in lora and not half))
    _t(out, "in_proj input x, fp32 copy for lora_A (bf16 base)", (B, S, d), "f32", half and "in_proj" in lora)
    _t(out, "in_proj lora_A output (saved by lora_B)", (B, S, r), la, "in_proj" in lora)
    zx = "in_proj output zxbcdt" + (" * mup_vector" if falcon else "")
    if regime == "fp32":
        _t(out, zx + " (conv1d input view + gate view for silu)", (B, S, W), "f32")
    elif regime == "bf16_weights":
        _t(out, zx + " (conv1d input view)", (B, S, W), "bf16")
        _t(out, "gate.to(float32) (silu input in the gated norm)", (B, S, I), "f32")
    elif falcon:  # autocast: bf16 in_proj output * fp32 mup_vector -> fp32
        _t(out, zx + " fp32 (gate view for silu)", (B, S, W), "f32")
        _t(out, "conv1d input, autocast bf16 copy of xBC", (B, CD, S), "bf16")
    else:
        _t(out, "conv1d input, autocast bf16 copy of xBC (after .to(weight fp32))", (B, CD, S), "bf16")
        _t(out, "gate.to(float32) (silu input in the gated norm)", (B, S, I), "f32")
    _t(out, "conv1d output, padded by K-1 (silu input)", (B, CD, S + K - 1), lin)
    if regime == "fp32":
        _t(out, "silu(conv) output xBC (x view saved by x*dt)", (B, S, CD), "f32")
    elif regime == "autocast_bf16" and falcon:
        _t(out, "silu(conv) output cast back to fp32 (.to(input dtype)); x view saved by x*dt", (B, S, CD), "f32")
    else:
        _t(out, "x.float() copy (saved by x*dt)", (B, S, H, P), "f32")
    if regime == "fp32" or (regime == "autocast_bf16" and falcon):
        _t(out, "dt + dt_bias (softplus input)", (B, S, H), "f32")
        _t(out, "softplus(dt) (clamp input)", (B, S, H), "f32")
        _t(out, "clamp(softplus(dt)) (saved by x*dt[...,None] and A*dt)", (B, S, H), "f32")
    else:
        _t(out, "dt + dt_bias (softplus input)", (B, S, H), "bf16")
        _t(out, "softplus(dt) (clamp input)", (B, S, H), "bf16")
        _t(out, "dt[...,None].float() (saved by x*dt)", (B, S, H), "f32")
        _t(out, "dt.float() (saved by A*dt; not when A_log is frozen)", (B, S, H), "f32", tr)
    _t(out, "A = -exp(A_log) (saved by A*dt)", (H,), "f32")
    _t(out, "exp(A_log) result", (H,), "f32", tr)
    _t(out, "pad(x) (saved by D*pad(x), D_residual)", (B, T, H, P), "f32", tr)
    _t(out, "L = exp(segment_sum(A)) [B,H,C,Q,Q]", (B, H, T, Q), "f32")
    _t(out, "G = einsum(C,B) [B,C,Q,Q,H] (saved by G*L)", (B, T, Q, H), mm)
    _t(out, "decay_states = exp(A_cumsum[-1] - A_cumsum)", (B, H, T), "f32")
    _t(out, "state_decay_out = exp(A_cumsum)", (B, H, T), "f32")
    _t(out, "B chunks, padded, repeated to H heads (saved by B*decay_states)", (B, T, H, N), "f32")
    _t(out, "C_times_states [B,C,Q,H,P] (saved by *state_decay_out)", (B, T, H, P), mm)
    _t(out, "decay_chunk = exp(segment_sum(pad(A_cumsum[...,-1])))", (B, H, C + 1, C + 1), "f32")
    _t(out, "decay_chunk, autocast bf16 copy (einsum operand)", (B, H, C + 1, C + 1), "bf16",
       regime == "autocast_bf16")
    _t(out, "einsum operands (bmm): C and B of G = C.B^T", (2, B, T, H, N), mm)
    _t(out, "einsum operands: M [B*C*H,Q,Q] and x [B*C*H,Q,P] of Y_diag", (B, H, T, Q), mm)
    _t(out, "einsum operands: x of Y_diag", (B, T, H, P), mm)
    _t(out, "einsum operands: B_decay and x of states", (B, T, H, N), mm)
    _t(out, "einsum operands: x of states", (B, T, H, P), mm)
    _t(out, "einsum operands: states (with the zero initial state) of new_states", (B, H, C + 1, P, N), mm)
    _t(out, "einsum operands: C and states of C_times_states", (B, T, H, N), mm)
    if C > 1:
        _t(out, "einsum operands: states of C_times_states", (B, C, H, P, N), mm)
    else:  # one chunk: new_states[:, :-1] folds into bmm batches as a view, keeping all of new_states
        _t(out, "one chunk: einsum operand states of C_times_states = view of new_states [B,C+1,H,P,N]",
           (B, C + 1, H, P, N), mm)
        if mm == "f32":  # fp32 operands are viewed, not cast: fewer distinct storages
            _t(out, "one chunk: x chunks viewed by both Y_diag and states einsums (one storage, not two)",
               (B, T, H, P), "f32", sign=-1)
            _t(out, "one chunk, B == 1: C chunks shared by G and C_times_states; B chunks viewed by G are the "
               "saved B chunks", (2, B, T, H, N), "f32", B == 1, sign=-1)
    _t(out, "scan output y (Y_diag + Y_off + D_residual) [B,T,H,P], viewed [:, :S]", (B, T, I), "f32")
    if falcon:  # FalconH1RMSNormGated, norm_before_gate=True
        _t(out, "rsqrt(var + eps)", (B, S, G), "f32")
        _t(out, "normalized y (saved by weight*y)", (B, S, I), "f32", tr)
        _t(out, "weight * normalized (saved by *silu(gate))", (B, S, I), "f32")
        _t(out, "silu(gate)", (B, S, I), "f32")
    else:  # MambaRMSNormGated: gate first
        _t(out, "silu(gate)", (B, S, I), "f32")
        _t(out, "y * silu(gate) (pow/mul input)", (B, S, I), "f32")
        _t(out, "rsqrt(var + eps)", (B, S, G), "f32")
        _t(out, "normalized (saved by weight*...)", (B, S, I), "f32", tr)
    _t(out, "out_proj input (gated-norm output" + (", cast to the weights' dtype)" if regime != "fp32" else ")"),
       (B, S, I), lin, tr or ("out_proj" in lora and not half))
    _t(out, "out_proj input, fp32 copy for lora_A (bf16 base)", (B, S, I), "f32", half and "out_proj" in lora)
    _t(out, "out_proj lora_A output (saved by lora_B)", (B, S, r), la, "out_proj" in lora)
    _t(out, "segment_sum masks ~tril (masked_fill, x2)", (2, Q, Q), "bool")
    _t(out, "segment_sum masks over chunks (x2)", (2, C + 1, C + 1), "bool")
    return out


def deltanet_terms(dm, regime, ctx, B, S):
    d, Hk, Hv, Dk, Dv, K, Q = (dm[k] for k in ("d", "Hk", "Hv", "Dk", "Dv", "K", "Q"))
    split = dm["split_in_proj"]
    CD = 2 * Hk * Dk + Hv * Dv
    T = _ceil_to(S, Q)
    C = T // Q
    r = LORA_R
    lin = "f32" if regime == "fp32" else "bf16"
    ac = regime == "autocast_bf16"
    tr, lora = ctx["trainable"], set(ctx["lora"])
    ins = ["in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"] if split else ["in_proj_qkvz", "in_proj_ba"]
    # LoRA on a bf16 base: the frozen base linears keep nothing; each fp32 adapter keeps its own fp32 input copy
    half = regime == "bf16_weights" and not tr
    la = "bf16" if ac else "f32"  # lora_A's output (its fp32 weight under autocast: bf16)
    out = []
    body = ctx["input_grad"] or set(ins) <= lora
    if not body:
        _t(out, "out_proj input (gated-norm output" + (", fp32 copy for lora_A)" if half else ")"),
           (B, S, Hv * Dv), "f32" if half else lin, "out_proj" in lora)
        _t(out, "out_proj lora_A output", (B, S, r), la, "out_proj" in lora)
        return out
    keep_x = [n for n in ins if tr or n in lora]
    if ac:  # autocast casts x once per linear
        for n in keep_x:
            _t(out, f"{n} input x, bf16 autocast copy", (B, S, d), "bf16")
    elif half:
        for n in keep_x:
            _t(out, f"{n} input x, fp32 copy for lora_A (bf16 base)", (B, S, d), "f32")
    else:
        _t(out, "in-projections' input x (the mixer's input, one storage for all of them)", (B, S, d), lin,
           bool(keep_x))
    for n in ins:
        _t(out, f"{n} lora_A output", (B, S, r), la, n in lora)
    _t(out, "conv1d input: cat(q,k,v)" + (", autocast bf16 copy" if ac else ""), (B, CD, S), lin)
    _t(out, "conv1d output, padded by K-1 (silu input)", (B, CD, S + K - 1), lin)
    _t(out, "beta = sigmoid(b) result", (B, S, Hv), lin)
    _t(out, "a + dt_bias (softplus input)", (B, S, Hv), "f32")
    _t(out, "softplus(a + dt_bias) (saved by -exp(A_log)*...)", (B, S, Hv), "f32", tr)
    _t(out, "-exp(A_log) (saved by *softplus)", (Hv,), "f32")
    _t(out, "exp(A_log) result", (Hv,), "f32", tr)
    if regime == "fp32" and Hk == Hv:  # no repeat_interleave, .to(float32) is a no-op: views of the silu output
        _t(out, "silu(conv) output (q, k l2norm inputs are transposed views of it)", (B, CD, S), "f32")
    else:
        _t(out, "q, k fp32 [B,Hv,S,Dk] (repeat_interleave / .to(float32) copies; l2norm inputs)", (2, B, Hv, S, Dk),
           "f32")
    _t(out, "l2norm rsqrt for q, k", (2, B, Hv, S), "f32")
    _t(out, "pad(q * scale) (saved by q@k^T and q*exp(cum_decay))", (B, Hv, T, Dk), "f32")
    _t(out, "pad(k) (saved by k*beta and k^T of the bmm)", (B, Hv, T, Dk), "f32")
    _t(out, "pad(v) (saved by v*beta)", (B, Hv, T, Dv), "f32")
    _t(out, "pad(beta)", (B, Hv, T), "f32")
    _t(out, "k_beta (saved by k_beta@k^T and k_beta*exp(cum_decay))", (B, Hv, T, Dk), "f32")
    _t(out, "strictly upper mask (masked_fill)", (Q, Q), "bool")
    _t(out, "pairwise_decay = exp(masked cum_decay_i - cum_decay_j) [B,Hv,C,Q,Q]", (B, Hv, T, Q), "f32")
    _t(out, "k_beta @ k^T (saved by *pairwise_decay)", (B, Hv, T, Q), "bf16" if ac else "f32")
    _t(out, "ut_system (solve_triangular A)", (B, Hv, T, Q), "f32")
    _t(out, "q @ k^T (saved by *pairwise_decay)", (B, Hv, T, Q), "bf16" if ac else "f32")
    _t(out, "intra_chunk_attn (bmm self, per chunk slice" + (", autocast bf16 copies)" if ac else ")"),
       (B, Hv, T, Q), "bf16" if ac else "f32")
    _t(out, "exp(cum_decay) for k_beta, exp(cum_decay) for q, exp(cum_decay[-1] - cum_decay) for k", (3, B, Hv, T),
       "f32")
    _t(out, "chunk_decay = exp(cum_decay[..., -1])", (B, Hv, C), "f32")
    _t(out, "new_values = solve_triangular(ut, v_beta) result", (B, Hv, T, Dv), "f32")
    _t(out, "k_cumdecay = solve_triangular(ut, decayed k_beta) result", (B, Hv, T, Dk), "f32")
    # fp32 weights: q, k, v stay [B,S,H,D]-strided (.to(float32) copies nothing); pad() makes them contiguous only
    # when it pads (S % 64 != 0). Strided, the bmm of k_beta@k^T and q@k^T folds (B, Hv, C) into one batch dim by
    # copying its operands unless B == C == 1, and the loop's q / k chunk slices are copied unless B == 1.
    strided = regime == "fp32" and T == S
    _t(out, "S % 64 == 0, not B == C == 1: bmm operand copies of k_beta, q and 2x k^T", (4, B, Hv, T, Dk), "f32",
       strided and not (B == 1 and C == 1))
    if ac:
        _t(out, "bmm operand copies: k_beta, q and 2x k^T of k_beta@k^T, q@k^T", (4, B, Hv, T, Dk), "bf16")
        _t(out, "per chunk: 2 copies of the recurrent state (k_cumdecay@S, q@S)", (2 * C, B, Hv, Dk, Dv), "bf16")
        _t(out, "v_new copies: C for intra@v_new, C-1 for the live state updates k^T@v_new", (2 * C - 1, B, Hv, Q, Dv),
           "bf16")
        _t(out, "chunks 1..C-1: k_cumdecay and q slice copies (the state requires grad)", (2 * (C - 1), B, Hv, Q, Dk),
           "bf16")
        _t(out, "chunks 0..C-2: k slice copies of the live state updates", (C - 1, B, Hv, Q, Dk), "bf16")
        _t(out, "states S_0 (zeros) .. S_{C-2} fp32 (saved by S*chunk_decay of the live updates)",
           (C - 1, B, Hv, Dk, Dv), "f32")
    else:
        _t(out, "v_new per chunk", (B, Hv, T, Dv), "f32")
        _t(out, "recurrent states S_0 (zeros) .. S_{C-1}", (C, B, Hv, Dk, Dv), "f32")
        _t(out, "C > 1: q * exp(cum_decay) and k * exp(...) (read against the state)", (2, B, Hv, T, Dk), "f32",
           C > 1 and (not strided or B == 1))
        _t(out, "C > 1, S % 64 == 0, B > 1: q and k chunk-slice copies of the live chunks 1..C-1 / 0..C-2",
           (2 * (C - 1), B, Hv, Q, Dk), "f32", C > 1 and strided and B > 1)
    if regime == "fp32":
        _t(out, "core_attn_out [B,S,Hv,Dv] contiguous (gated-norm pow/mul input)", (B, S, Hv, Dv), "f32")
    else:
        _t(out, "core_attn_out.to(float32) (gated-norm pow/mul input)", (B, S, Hv, Dv), "f32")
    _t(out, "rsqrt(var + eps) per head", (B, S, Hv), "f32")
    _t(out, "normalized.to(input dtype) (saved by weight*...)", (B, S, Hv, Dv), lin, tr)
    if regime != "fp32":
        _t(out, "z.to(float32) (silu input)", (B, S, Hv, Dv), "f32")
    elif split:
        _t(out, "z = in_proj_z output (silu input)", (B, S, Hv, Dv), "f32")
    elif Hk == Hv:  # z.reshape(-1, Dv) stays a view of the fused projection
        _t(out, "in_proj_qkvz output (z view is the silu input)", (B, S, 2 * Hk * Dk + 2 * Hv * Dv), "f32")
    else:
        _t(out, "z.reshape(-1, Dv) copy (silu input)", (B, S, Hv, Dv), "f32")
    _t(out, "weight * normalized (saved by *silu(z))", (B, S, Hv, Dv), "f32" if regime != "bf16_weights" else "bf16")
    _t(out, "silu(z)", (B, S, Hv, Dv), "f32")
    _t(out, "out_proj input (gated-norm output)", (B, S, Hv * Dv), lin, tr or ("out_proj" in lora and not half))
    _t(out, "out_proj input, fp32 copy for lora_A (bf16 base)", (B, S, Hv * Dv), "f32", half and "out_proj" in lora)
    _t(out, "out_proj lora_A output", (B, S, r), la, "out_proj" in lora)
    return out


def shortconv_terms(dm, regime, ctx, B, S):
    d, K = dm["d"], dm["K"]
    r = LORA_R
    e = "f32" if regime == "fp32" else "bf16"
    tr, lora = ctx["trainable"], set(ctx["lora"])
    out = []
    body = ctx["input_grad"] or "in_proj" in lora
    if not body:
        _t(out, "out_proj input", (B, S, d), e, "out_proj" in lora)
        _t(out, "out_proj lora_A output", (B, S, r), "f32", "out_proj" in lora)
        return out
    _t(out, "in_proj input x" + (", bf16 autocast copy" if regime == "autocast_bf16" else ""), (B, S, d), e,
       tr or "in_proj" in lora)
    _t(out, "in_proj lora_A output", (B, S, r), "f32", "in_proj" in lora)
    _t(out, "in_proj output BCx (B, x saved by B*x; C by C*conv)", (B, S, 3 * d), e)
    _t(out, "B*x (conv1d input" + (", autocast bf16 copy)" if regime == "autocast_bf16" else ")"), (B, d, S), e)
    _t(out, "conv1d output, padded by K-1 (saved by C*conv)", (B, d, S + K - 1), e)
    _t(out, "out_proj input (C*conv, transposed contiguous)", (B, S, d), e, tr or "out_proj" in lora)
    _t(out, "out_proj lora_A output", (B, S, r), "f32", "out_proj" in lora)
    return out


def formula_context(key, ctx):
    if key == "lora":
        return {"trainable": False, "lora": ctx["wrapped"], "input_grad": ctx["input_requires_grad"]}
    if key == "frozen":
        return {"trainable": False, "lora": [], "input_grad": True}
    return {"trainable": True, "lora": [], "input_grad": True}


def mixer_formula(kind, dims, key, B, S, ctx):
    """Saved activation bytes of one mixer layer for a measure.py scenario key (fp32 covers sdpa/eager fp32 and the
    padded scenario; gc is 0: a checkpointed layer keeps only its input, packed outside the mixer)."""
    if key == "gc":
        return 0
    regime, base = split_key(key)
    return sum(t[3] for t in mixer_terms(kind, dims, regime, formula_context(base, ctx), B, S))


def split_key(key):
    """(regime, context key) of a formula key: bf16_lora / bf16_frozen are LoRA / frozen on a bf16 base."""
    if key in ("bf16_lora", "bf16_frozen"):
        return "bf16_weights", key[len("bf16_"):]
    if key in ("autocast_lora", "autocast_frozen"):
        return "autocast_bf16", key[len("autocast_"):]
    if key in ("autocast_bf16", "bf16_weights"):
        return key, key
    return "fp32", key


METHOD = {
    "saved": "measure.py's training forward (model.train(), use_cache=False, labels = input_ids, loss from the model; "
             "measure.load / make_inputs / SCENARIOS; LoRA r 8, alpha 16, dropout 0 through measure_images.apply_lora, "
             "the same LoraConfig as measure.measure_scenario) under torch.autograd.graph.saved_tensors_hooks; every "
             "packed tensor's untyped storage counted once at nbytes() and classified as measure.py does (parameter, "
             "buffer, input, autocast_weight_copy, activation). activation_bytes equals expected.json's at the "
             "fixture's training points (expected_json_activation_bytes next to it). No backward is run.",
    "regions": "each activation storage is attributed to the module region in which it was FIRST packed (forward "
               "pre/post hooks on every decoder layer and on its token mixer): mixer_bytes[j] = storages first "
               "packed inside the token mixer of layer mixer_layers[j] (its in/out projections, LoRA adapters, conv, "
               "scan and gated norm included; the mixer's input, the block norm's output, is first packed by in_proj "
               "so it is counted here); rest_of_layer_bytes[i] = the rest of decoder layer i; outside_layers_bytes = "
               "embeddings, final norm, lm_head, loss and, under gradient checkpointing, the layer inputs the "
               "checkpoint keeps (packed before the layer's own hooks run). mixer_autocast_weight_copy_bytes: bf16 "
               "weight copies made by autocast inside the mixer (not activations).",
    "formulas": "check[].formula = mixer_formula(mixer_kind, dims[config], formula_key, B, S, lora context) for "
                "each mixer layer; ratio = measured / formula. formula_terms lists, at the first fixture point, the "
                "tensors behind the formula (what, shape, dtype, bytes; a negative entry is a storage the "
                "generic terms count twice). formula_symbolic gives the closed form in symbols.",
    "points": "the fixture's measure.TRAIN_POINTS (2,24), (3,40), extra fixture points where S is not a multiple of "
              "the chunk and spans several chunks, exact multiples, and one-chunk sequences (S <= chunk), B = 1 and "
              "B > 1; plus the variant configs (VARIANTS: every formula symbol distinct, DeltaNet also with key "
              "heads = value heads, Mamba-2 also with one group), random-init from the family config with those "
              "fields changed, saved to a temporary folder (never to testdata).",
    "scenarios": "measure.py's (sdpa_* run as eager_* where the model has no SDPA: mamba2) and "
                 "sdpa_fp32_frozen_but_embeddings (not in measure.py: every parameter frozen but the input "
                 "embedding, so every mixer is frozen while its input requires grad: the case of a mixer downstream "
                 "of a LoRA adapter that has none itself); sdpa_bf16_* and sdpa_autocast_*: LoRA q/v, all-linear "
                 "and frozen-but-embeddings on a bf16 base (peft's adapters fp32) and on an fp32 base under bf16 "
                 "autocast (lora_B made non-zero there: a zero lora_B's bf16 copy would equal any zero activation "
                 "of its size and be classified as a weight copy). LoRA runs record, per mixer layer, the mixer's "
                 "wrapped linears and whether an adapter lies upstream (input_requires_grad).",
}


SYMBOLS = {
    "B, S": "batch, sequence length",
    "d": "hidden_size",
    "mamba2": "I inner width (expand*d; Nemotron-H mamba_num_heads*mamba_head_dim; Falcon-H1 mamba_d_ssm), H heads, "
              "P head_dim (H*P = I), G n_groups, N d_state, K conv kernel, Q chunk_size, CD = I + 2GN (conv "
              "channels), W = I + CD + H (in_proj width), T = ceil(S/Q)*Q (the scan pads S to a multiple of Q), "
              "C = T/Q chunks, r LoRA rank, [x] = 1 if x else 0",
    "gated_deltanet": "Hk / Hv linear_num_key_heads / linear_num_value_heads, Dk / Dv their head dims, K "
                      "linear_conv_kernel_dim, CD = 2*Hk*Dk + Hv*Dv, V = Hv*Dv, Q = 64 (torch_chunk_gated_delta_rule's "
                      "default chunk: the models do not pass one), T = ceil(S/64)*64, C = T/64, r LoRA rank",
    "short_conv": "K = conv_L_cache, r LoRA rank",
}

# The closed forms in symbols, as Python expressions of the SYMBOLS (iv(x) = 1 if x else 0), evaluated against
# mixer_terms at every measured point (symbolic_check): the per-tensor terms and these sums are the same numbers.
_M_SCAN = ("3*B*T*I + 3*B*H*T*Q + 2*B*H*T + 5*B*T*H*N + 2*B*T*H*P + B*H*(C+1)**2 + B*H*(C+1)*P*N + B*C*H*P*N")
_M_ONE_CHUNK = "iv(C == 1)*(4*B*H*P*N - 4*B*T*H*P - iv(B == 1)*8*B*T*H*N)"
_M_FP32 = (f"4*(B*S*d + B*S*W + B*CD*(S+K-1) + B*S*CD + 3*B*S*H + 2*H + {_M_SCAN} + 4*B*S*I + B*S*G) "
           f"+ 2*Q**2 + 2*(C+1)**2 + {_M_ONE_CHUNK}")
_D_STRIDED = ("iv(C > 1 and (S % Q != 0 or B == 1))*2*B*Hv*T*Dk + iv(S % Q == 0 and not (B == 1 and C == 1))*4*B*Hv*T*Dk"
              " + iv(S % Q == 0 and C > 1 and B > 1)*2*(C-1)*B*Hv*Q*Dk")
_D_QK = "(B*CD*S if Hk == Hv else 2*B*Hv*S*Dk)"
_D_Z = "(B*S*(2*Hk*Dk + 2*V) if (fused and Hk == Hv) else B*S*V)"
_D_FP32 = (f"4*(B*S*d + B*CD*S + B*CD*(S+K-1) + 3*B*S*Hv + 2*Hv + {_D_QK} + 2*B*Hv*S + 4*B*Hv*T*Dk + 3*B*Hv*T*Dv "
           f"+ B*Hv*T + 5*B*Hv*T*Q + 3*B*Hv*T + B*Hv*C + C*B*Hv*Dk*Dv + {_D_STRIDED} + 4*B*S*V + {_D_Z} + B*S*Hv "
           f"+ B*S*V) + Q**2")
_M_BF16 = (f"2*B*S*d + 2*B*S*W + 4*B*S*I + 2*B*CD*(S+K-1) + 4*B*S*I + 12*B*S*H + 8*H + "
           f"4*({_M_SCAN} + 3*B*S*I + B*S*G) + 2*B*S*I + 2*Q**2 + 2*(C+1)**2 + {_M_ONE_CHUNK}")
_D_BF16 = ("2*B*S*d + 2*B*CD*S + 2*B*CD*(S+K-1) + 2*B*S*Hv + 8*B*S*Hv + 8*Hv + 8*B*Hv*S*Dk + 8*B*Hv*S "
           "+ 4*(4*B*Hv*T*Dk + 3*B*Hv*T*Dv + B*Hv*T + 5*B*Hv*T*Q + 3*B*Hv*T + B*Hv*C + C*B*Hv*Dk*Dv "
           "+ iv(C > 1)*2*B*Hv*T*Dk) + 4*B*S*V + 4*B*S*Hv + 2*B*S*V + 4*B*S*V + 2*B*S*V + 4*B*S*V "
           "+ 2*B*S*V + Q**2")
_M_AC = ("2*B*S*d + 2*B*CD*S + 8*B*S*I + 2*B*CD*(S+K-1) + 12*B*S*H + 8*H + 4*B*T*I + 4*B*H*T*Q "
         "+ 2*B*H*T*Q + 8*B*H*T + 4*B*T*H*N + 2*B*T*I + 6*B*H*(C+1)**2 + 2*(4*B*T*H*N + 2*B*T*H*P "
         "+ B*H*T*Q + B*H*(C+1)*P*N + B*C*H*P*N) + 4*B*T*I + 4*(3*B*S*I + B*S*G) + 2*B*S*I "
         "+ 2*Q**2 + 2*(C+1)**2 + iv(C == 1)*2*B*H*P*N + iv(falcon)*(4*B*S*W + 4*B*S*CD - 8*B*S*I)")
_D_AC = ("2*B*S*d*n_in + 2*B*CD*S + 2*B*CD*(S+K-1) + 2*B*S*Hv + 8*B*S*Hv + 8*Hv + 8*B*Hv*S*Dk "
         "+ 8*B*Hv*S + 4*(3*B*Hv*T*Dk + B*Hv*T*Dv + B*Hv*T) + 8*B*Hv*T*Q + 6*B*Hv*T*Q "
         "+ 4*(3*B*Hv*T + B*Hv*C) + 4*(B*Hv*T*Dv + B*Hv*T*Dk) + 8*B*Hv*T*Dk + 4*C*B*Hv*Dk*Dv "
         "+ 2*(2*C-1)*B*Hv*Q*Dv + 6*(C-1)*B*Hv*Q*Dk + 4*(C-1)*B*Hv*Dk*Dv + 4*B*S*V + 4*B*S*Hv "
         "+ 2*B*S*V + 12*B*S*V + 2*B*S*V + Q**2")
FORMULA_EXPR = {
    "mamba2": {
        "fp32": _M_FP32,
        "bf16_weights": _M_BF16,
        "autocast_bf16": _M_AC,
        "lora_or_frozen": (f"iv(input_grad or in_wrapped)*({_M_FP32} - iv(not in_wrapped)*4*B*S*d - 4*H - 4*B*T*I "
                           f"- 4*B*S*I - iv(not out_wrapped)*4*B*S*I + 4*B*S*r*wrapped) "
                           f"+ iv(not (input_grad or in_wrapped))*iv(out_wrapped)*(4*B*S*I + 4*B*S*r)"),
        "lora_or_frozen_bf16": (f"iv(input_grad or in_wrapped)*({_M_BF16} - 2*B*S*d - 2*B*S*I - 4*H - 4*B*T*I "
                                f"- 4*B*S*I - 4*B*S*H + iv(in_wrapped)*4*B*S*d + iv(out_wrapped)*4*B*S*I "
                                f"+ 4*B*S*r*wrapped) "
                                f"+ iv(not (input_grad or in_wrapped))*iv(out_wrapped)*(4*B*S*I + 4*B*S*r)"),
        # LoRA under bf16 autocast: the autocast kernel less the projections' bf16 input copies, exp(A_log), pad(x),
        # the normalized input and (not Falcon-H1, whose dt stays fp32) dt.float() of A*dt; plus each adapter's bf16
        # input copy and bf16 lora_A output
        "lora_or_frozen_autocast": (f"iv(input_grad or in_wrapped)*({_M_AC} - 2*B*S*d - 2*B*S*I - 4*H - 4*B*T*I "
                                    f"- 4*B*S*I - iv(not falcon)*4*B*S*H + iv(in_wrapped)*2*B*S*d "
                                    f"+ iv(out_wrapped)*2*B*S*I + 2*B*S*r*wrapped) "
                                    f"+ iv(not (input_grad or in_wrapped))*iv(out_wrapped)*(2*B*S*I + 2*B*S*r)"),
        "gc": "0",
    },
    "gated_deltanet": {
        "fp32": _D_FP32,
        "bf16_weights": _D_BF16,
        "autocast_bf16": _D_AC,
        "lora_or_frozen": (f"iv(input_grad or in_wrapped)*({_D_FP32} - iv(not in_wrapped)*4*B*S*d - 4*Hv - 4*B*S*Hv "
                           f"- 4*B*S*V - iv(not out_wrapped)*4*B*S*V + 4*B*S*r*wrapped) "
                           f"+ iv(not (input_grad or in_wrapped))*iv(out_wrapped)*(4*B*S*V + 4*B*S*r)"),
        "lora_or_frozen_bf16": (f"iv(input_grad or in_wrapped)*({_D_BF16} - 2*B*S*d - 2*B*S*V - 4*Hv - 4*B*S*Hv "
                                f"- 2*B*S*V + (wrapped - iv(out_wrapped))*4*B*S*d + iv(out_wrapped)*4*B*S*V "
                                f"+ 4*B*S*r*wrapped) "
                                f"+ iv(not (input_grad or in_wrapped))*iv(out_wrapped)*(4*B*S*V + 4*B*S*r)"),
        "lora_or_frozen_autocast": (f"iv(input_grad or in_wrapped)*({_D_AC} - 2*B*S*d*n_in - 2*B*S*V - 4*Hv "
                                    f"- 4*B*S*Hv - 2*B*S*V + (wrapped - iv(out_wrapped))*2*B*S*d "
                                    f"+ iv(out_wrapped)*2*B*S*V + 2*B*S*r*wrapped) "
                                    f"+ iv(not (input_grad or in_wrapped))*iv(out_wrapped)*(2*B*S*V + 2*B*S*r)"),
        "gc": "0",
    },
    "short_conv": {
        "fp32": "4*B*d*(7*S + K - 1)",
        "bf16_weights": "2*B*d*(7*S + K - 1)",
        "autocast_bf16": "2*B*d*(7*S + K - 1)",
        "lora_or_frozen_bf16": "None",  # not measured
        "lora_or_frozen_autocast": "None",  # not measured
        "lora_or_frozen": ("iv(input_grad or in_wrapped)*(4*B*d*(5*S + K - 1) + iv(in_wrapped)*4*B*S*d "
                           "+ iv(out_wrapped)*4*B*S*d + 4*B*S*r*wrapped) "
                           "+ iv(not (input_grad or in_wrapped))*iv(out_wrapped)*(4*B*S*d + 4*B*S*r)"),
        "gc": "0",
    },
}
FORMULA_NOTES = {
    "mamba2": "Mamba2Mixer, GraniteMoeHybridMambaLayer, NemotronHMamba2Mixer and FalconH1Mixer (mamba_rms_norm, "
              "norm_before_gate: its defaults) share these totals; Falcon-H1 differs only under autocast (falcon = 1): "
              "zxbcdt * mup_vector (fp32 buffer) is saved fp32 and the conv output is cast back to fp32. The "
              "mixer's input x (the block norm's output; Falcon: x * ssm_in_multiplier) is counted here "
              "(4*B*S*d in fp32). lora_or_frozen: fp32 weights with the mixer's own parameters frozen; "
              "in_wrapped / out_wrapped = peft wrapped in_proj / out_proj, wrapped = how many of the mixer's "
              "linears it wrapped, input_grad = something trainable lies upstream (measure.py's lora_qv of "
              "mamba2 wraps in_proj; granite's all-linear wraps in_proj and out_proj; peft refuses all-linear "
              "for model types mamba2, nemotron_h, falcon_h1). lora_or_frozen_bf16 / _autocast: the same on a bf16 "
              "base / under bf16 autocast: exp(A_log), pad(x), the normalized input and (but Falcon-H1 under "
              "autocast) dt.float() of A*dt are not kept; the frozen base linears keep nothing, each adapter an fp32 "
              "(bf16 base) / bf16 (autocast) copy of its input and its lora_A output.",
    "gated_deltanet": "Qwen3NextGatedDeltaNet (fused = 1: in_proj_qkvz + in_proj_ba, n_in = 2) and "
                      "Qwen3_5GatedDeltaNet (fused = 0: in_proj_qkv, _z, _b, _a, n_in = 4), torch_chunk_gated_delta_rule "
                      "with chunk 64. in_wrapped = every in-projection wrapped (all-linear). The fp32 chunk scan keeps "
                      "q, k, v strided when S % 64 == 0 (no padding copy), which changes its copies (the [..] "
                      "indicator terms). Two exp results of the last chunk's state update (k decay [B,Hv,T], "
                      "chunk_decay [B,Hv,C]) are dead when C = 1 but stay alive under saved_tensors_hooks (a result "
                      "saved by its own node keeps its node through the hook's reference); measure.py counts them, "
                      "so the formula does. lora_or_frozen_bf16 / _autocast: on a bf16 base / under bf16 autocast "
                      "exp(A_log), the softplus output and the normalized input are not kept; the frozen base "
                      "linears keep nothing, each adapter an fp32 (bf16 base) / bf16 (autocast) copy of its input "
                      "and its lora_A output. An adapter on some in-projections only, the input without a gradient "
                      "(scenario *_lora_in_proj_part, on request): no closed form yet.",
    "short_conv": "Lfm2ShortConv (conv_bias False): in_proj [3d] -> B*x -> depthwise conv(K) -> C*conv -> out_proj.",
}


def symbol_values(kind, dims, B, S, key, ctx):
    v = dict(dims, B=B, S=S, r=LORA_R, iv=lambda x: 1 if x else 0)
    if kind == "mamba2":
        v.update(T=_ceil_to(S, dims["Q"]), falcon=dims.get("falcon", False))
        ins = ["in_proj"]
    elif kind == "gated_deltanet":
        v.update(T=_ceil_to(S, dims["Q"]), V=dims["Hv"] * dims["Dv"], CD=2 * dims["Hk"] * dims["Dk"]
                 + dims["Hv"] * dims["Dv"], fused=not dims["split_in_proj"], n_in=2 if not dims["split_in_proj"] else 4)
        ins = ["in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"] if dims["split_in_proj"] else \
            ["in_proj_qkvz", "in_proj_ba"]
    else:
        ins = ["in_proj"]
    if "T" in v:
        v["C"] = v["T"] // dims["Q"]
    fc = formula_context(split_key(key)[1], ctx)
    v.update(input_grad=fc["input_grad"], in_wrapped=set(ins) <= set(fc["lora"]), out_wrapped="out_proj" in fc["lora"],
             wrapped=len(fc["lora"]))
    return v


def symbolic_formula(kind, dims, key, B, S, ctx):
    return eval(FORMULA_EXPR[kind][symbolic_key(key)], {},  # noqa: S307 (our own text)
                symbol_values(kind, dims, B, S, key, ctx))


def symbolic_key(key):
    """The FORMULA_EXPR entry of a formula key."""
    return {"lora": "lora_or_frozen", "frozen": "lora_or_frozen", "bf16_lora": "lora_or_frozen_bf16",
            "bf16_frozen": "lora_or_frozen_bf16", "autocast_lora": "lora_or_frozen_autocast",
            "autocast_frozen": "lora_or_frozen_autocast"}.get(key, key)


# whole-model scenarios this script adds to testdata/llm/<family>/expected.json (--expected): measure.py's
# measure_scenario at measure.TRAIN_POINTS, as measure.py would record them were they in its SCENARIOS
EXPECTED_SCENARIOS = ["sdpa_bf16_lora_qv", "sdpa_bf16_lora_all_linear", "sdpa_autocast_lora_qv",
                      "sdpa_autocast_lora_all_linear"]


@contextlib.contextmanager
def nonzero_lora_b(on):
    """measure.measure_scenario with peft's lora_B made non-zero (as measure_point does under autocast): a zero
    lora_B's bf16 autocast copy equals any zero activation of its size (DeltaNet's zero initial state cast to bf16),
    which measure.py's value-based classification would then take for a weight copy."""
    import peft
    orig = peft.get_peft_model

    def patched(model, *a, **k):
        model = orig(model, *a, **k)
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.uniform_(0.5, 1.0)
        return model
    if on:
        peft.get_peft_model = patched
    try:
        yield
    finally:
        peft.get_peft_model = orig


def add_to_expected(name, scenarios, log=print):
    """Measures `scenarios` (EXTRA_SCENARIOS names) with measure.measure_scenario at measure.TRAIN_POINTS and
    writes them into the family's expected.json (training.scenarios and summary_activation_bytes); the rest of
    the file is left as measure.py wrote it."""
    spec = M.FAMILIES[name]
    folder = M.DEFAULT_OUT / name
    cfg = AutoConfig.from_pretrained(folder, local_files_only=True)
    path = folder / "expected.json"
    exp = json.loads(path.read_text())
    tr = exp["training"]
    sdpa = exp.get("sdpa_supported", True)
    spec = dict(spec, default_attn="sdpa" if sdpa else "eager")
    for sn in scenarios:
        sc = dict(EXTRA_SCENARIOS[sn])
        if not sdpa and sc["attn"] == "sdpa":
            sn, sc["attn"] = sn.replace("sdpa_", "eager_"), "eager"
        runs = []
        for B, S in M.TRAIN_POINTS:
            try:
                with nonzero_lora_b(sc["prec"] == "autocast_bf16"):
                    r = M.measure_scenario(folder, spec, cfg, sn, sc, B, S)
            except Exception as exc:  # peft refuses out_proj / conv1d of Mamba models: record, as measure.py does
                r = {"batch": B, "seq": S, "error": f"{type(exc).__name__}: {exc}"}
            runs.append(r)
        tr["scenarios"][sn] = {"config": sc, "runs": runs, "measured_by": "tools/llm/measure_mixers.py --expected"}
        tr.setdefault("summary_activation_bytes", {})[sn] = [r["saved"]["activation_bytes"] if "saved" in r else None
                                                             for r in runs]
        log(f"  {name} {sn}: {tr['summary_activation_bytes'][sn]}", flush=True)
    M.write_json(path, exp)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated families")
    ap.add_argument("--expected", action="store_true",
                    help="only add EXPECTED_SCENARIOS (LoRA on a bf16 base) to the families' expected.json")
    ap.add_argument("--scenarios", help="comma-separated scenarios (measure.py names)")
    ap.add_argument("--no-variant", action="store_true")
    ap.add_argument("--dump", type=Path, help="also write the results here (one JSON per family)")
    args = ap.parse_args()
    names = args.only.split(",") if args.only else FAMILY_NAMES
    scen = args.scenarios.split(",") if args.scenarios else SCENARIO_NAMES
    if args.expected:
        for name in names:
            add_to_expected(name, args.scenarios.split(",") if args.scenarios else EXPECTED_SCENARIOS)
        return
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            res = run_family(name, Path(tmp), scen, variant=not args.no_variant)
            M.write_json((args.dump or M.DEFAULT_OUT / name) / ("mixers.json" if not args.dump else f"{name}.json"),
                         res)


if __name__ == "__main__":
    main()
