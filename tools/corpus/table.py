#!/usr/bin/env python3
"""Print the corpus as a markdown table (manifest.json + truth/*.json): python tools/corpus/table.py"""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))

COMMON = {"ai.onnx"}


def main():
    with open(os.path.join(HERE, "manifest.json")) as fh:
        man = json.load(fh)
    print("| model | source | producer | opsets | nodes (sub) | notable ops | bound inputs | activations |")
    print("|---|---|---|---|---|---|---|---|")
    for e in man["models"]:
        s = e["source"]
        src = s["package"] if s["kind"] == "wheel" else "recipe" + (f" ({', '.join(s['from'])})" if "from" in s else "")
        prod = f"{e['producer_name'] or '(none)'} {e['producer_version']}".strip()
        opsets = " ".join(f"{'' if d == 'ai.onnx' else d + ':'}{v}" for d, v in e["opset_import"].items())
        ops = dict(e["op_types"])
        for k, v in e.get("subgraph_op_types", {}).items():
            ops[k] = ops.get(k, 0) + v
        notable = [k.split(".", 2)[-1] if k.startswith("ai.onnx.") and k.count(".") == 2 else k for k in ops
                   if k.rsplit(".", 1)[0] not in COMMON or k.rsplit(".", 1)[1] in
                   ("If", "Loop", "Scan", "LSTM", "GRU", "RNN", "ConvInteger", "MatMulInteger", "QLinearConv",
                    "QLinearMatMul", "DynamicQuantizeLinear", "QuantizeLinear", "DequantizeLinear", "LRN",
                    "ConvTranspose", "Resize", "Einsum", "Range", "GatherND", "TopK")]
        nsub = sum(e.get("subgraph_op_types", {}).values())
        ins = ", ".join(f"{i['name']}{i['shape']}" for i in e["inputs"])
        tp = os.path.join(HERE, "truth", e["name"] + ".json")
        act = "-"
        if os.path.exists(tp):
            with open(tp) as fh:
                t = json.load(fh)
            act = t.get("error", f"{t.get('activation_bytes', 0) / 2**20:.2f} MiB")
        print(f"| {e['name']} | {src} | {prod} | {opsets} | {e['nodes']}" + (f" ({nsub})" if nsub else "") +
              f" | {', '.join(notable) or '-'} | {ins} | {act} |")


if __name__ == "__main__":
    main()
