#!/usr/bin/env python3
"""Run accelerate's `estimate-memory` and hf-mem on a LOCAL checkpoint folder, with no network.

Neither tool has an offline mode (checked: accelerate 1.15.0, hf-mem 0.5.6):
  * accelerate estimate-memory MODEL calls huggingface_hub.model_info(MODEL) first; offline that raises,
    and it reports the repo as gated. Everything after that only needs AutoConfig.from_pretrained, which
    takes a local folder, so this script replaces `verify_on_hub` with a stub and runs the real command.
    It builds the model from config.json on the meta device (AutoModel: the base model, no lm_head) and
    never reads the safetensors files.
  * hf-mem --model-id ID fetches https://huggingface.co/api/models/ID/tree/main and then the safetensors
    headers with HTTP Range requests (httpx2). This script gives its AsyncClient an httpx2.MockTransport
    that answers those URLs from the local folder (ranges included, so sparse shards are fine), then runs
    hf-mem's real code path.

    pip install -r tools/llm/requirements-compare.txt      # hf-mem (accelerate is in requirements.txt)
    python tools/llm/compare_offline.py accelerate target/llama-70b-sparse [--dtypes float16 ...]
    python tools/llm/compare_offline.py hf-mem target/llama-70b-sparse [--experimental --max-model-len 4096]
"""
from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def run_accelerate(folder: Path, argv):
    from accelerate.commands import estimate

    estimate.verify_on_hub = lambda repo, token=None: types.SimpleNamespace(
        library_name="transformers", config=json.loads((Path(repo) / "config.json").read_text()))
    made = {}
    create = estimate.create_empty_model

    def create_once(*a, **kw):
        made["model"] = made.get("model") or create(*a, **kw)
        return made["model"]

    estimate.create_empty_model = create_once
    parser = estimate.estimate_command_parser()
    args = parser.parse_args([str(folder), "--library_name", "transformers", *argv])
    estimate.estimate_command(args)
    model = made["model"]
    total, largest = estimate.calculate_maximum_sizes(model)
    print(json.dumps({"tool": "accelerate estimate-memory", "model_class": type(model).__name__,
                      "params": sum(p.numel() for p in model.parameters()),
                      "buffers": sum(b.numel() for b in model.buffers()),
                      "fp32_total_bytes": total, "largest_layer_bytes": largest[0],
                      "largest_layer_example": largest[1][0]}))


def run_hf_mem(folder: Path, argv):
    import importlib

    import httpx2
    from hf_mem import cli

    hr = importlib.import_module("hf_mem.run")  # the package re-exports a function named run

    model_id = "local/" + folder.name

    def handler(request: "httpx2.Request") -> "httpx2.Response":
        path = request.url.path
        if path.startswith(f"/api/models/{model_id}/tree/"):
            files = [{"type": "file", "path": p.name, "size": p.stat().st_size} for p in sorted(folder.iterdir())
                     if p.is_file()]
            return httpx2.Response(200, json=files)
        marker = f"/{model_id}/resolve/"
        if marker in path:
            rel = path.split(marker, 1)[1].split("/", 1)[1]
            f = folder / rel
            if not f.is_file():
                return httpx2.Response(404)
            size = f.stat().st_size
            rng = request.headers.get("range")
            with open(f, "rb") as fh:
                if rng and rng.startswith("bytes="):
                    a, b = rng[6:].split("-")
                    a, b = int(a), min(int(b) if b else size - 1, size - 1)
                    fh.seek(a)
                    data = fh.read(b - a + 1)
                    return httpx2.Response(206, content=data,
                                           headers={"content-range": f"bytes {a}-{b}/{size}"})
                return httpx2.Response(200, content=fh.read())
        return httpx2.Response(404)

    real = httpx2.AsyncClient

    def client(*a, **kw):
        kw.pop("http2", None)
        kw["transport"] = httpx2.MockTransport(handler)
        return real(*a, **kw)

    hr.httpx2.AsyncClient = client
    sys.argv = ["hf-mem", "--model-id", model_id, *argv]
    cli.main()


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("accelerate", "hf-mem"):
        print(__doc__)
        sys.exit(2)
    tool, folder, rest = sys.argv[1], Path(sys.argv[2]).resolve(), sys.argv[3:]
    if tool == "accelerate":
        run_accelerate(folder, rest)
    else:
        run_hf_mem(folder, rest)


if __name__ == "__main__":
    main()
