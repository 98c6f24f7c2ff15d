#!/usr/bin/env bash
# Regenerate testdata/llm/ (tiny HF models + measured ground truth, quantized headers, GGUF files) and the
# sparse Llama-2-70B checkpoint in target/llama-70b-sparse. Idempotent: the venv target/llm-venv is created
# once and reinstalled only when requirements.txt changes; every output is rewritten from fixed seeds.
#
#   bash tools/llm/run.sh                 # everything (about 2 minutes on 2 cores, CPU only)
#   bash tools/llm/run.sh --only llama    # extra arguments go to measure.py
#   LLM_PY=/path/to/python bash tools/llm/run.sh   # use an interpreter that already has the requirements
#   LLM_COMPARE=1 bash tools/llm/run.sh   # also install requirements-compare.txt and run accelerate
#                                         # estimate-memory and hf-mem offline on the sparse 70B folder
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

if [[ -n "${LLM_PY:-}" ]]; then
    py="$LLM_PY"
else
    venv="$root/target/llm-venv"
    if [[ ! -x "$venv/bin/python" ]]; then
        python3 -m venv "$venv"
    fi
    py="$venv/bin/python"
    stamp="$venv/.requirements.sha256"
    want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
    if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
        "$py" -m pip install --upgrade pip
        "$py" -m pip install -r "$here/requirements.txt"
        echo "$want" > "$stamp"
    fi
    if [[ "${LLM_COMPARE:-0}" == 1 ]]; then
        "$py" -m pip install -r "$here/requirements-compare.txt"
    fi
fi

export PYTHONHASHSEED=0 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
"$py" "$here/measure.py" "$@"
"$py" "$here/measure_images.py"
"$py" "$here/measure_images_plans.py"
"$py" "$here/make_quantized.py"
"$py" "$here/make_gguf.py"
python3 "$here/make_sparse_checkpoint.py" "$root/target/llama-70b-sparse"
if [[ "${LLM_COMPARE:-0}" == 1 ]]; then
    "$py" "$here/make_quantized.py" --check-bnb
    "$py" "$here/compare_offline.py" accelerate "$root/target/llama-70b-sparse"
    "$py" "$here/compare_offline.py" hf-mem "$root/target/llama-70b-sparse" --experimental --max-model-len 4096 --json-output
fi
du -sh "$root/testdata/llm"
