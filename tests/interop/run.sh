#!/usr/bin/env bash
# Python interop tests: `nnlint rewrite` / `nnlint verify` against onnx and onnxruntime, and the
# Hugging Face cache layout against huggingface_hub: bash tests/interop/run.sh [FILTER...]
#
# Uses $NNLINT_INTEROP_PY if set (a python that already has requirements.txt installed), otherwise
# creates/reuses the venv target/interop-venv and installs requirements.txt there when it changed.
# Uses $NNLINT if set, otherwise builds the dev binary (cargo build --locked --bin nnlint).
# FILTER: substrings of case names (vgg_like, "--rank full", fixture). Exit status 1 on any failure.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"

if [[ -n "${NNLINT_INTEROP_PY:-}" ]]; then
    py="$NNLINT_INTEROP_PY"
else
    venv="$target/interop-venv"
    if [[ ! -x "$venv/bin/python" ]]; then
        echo "interop: creating $venv"
        python3 -m venv "$venv"
    fi
    py="$venv/bin/python"
    stamp="$venv/requirements.sha256"
    want="$("$py" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$here/requirements.txt")"
    if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
        echo "interop: installing tests/interop/requirements.txt"
        "$py" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt"
        echo "$want" > "$stamp"
    fi
fi

if [[ -z "${NNLINT:-}" ]]; then
    cargo build --locked --bin nnlint
    NNLINT="$target/debug/nnlint"
fi
[[ -x "$NNLINT" ]] || { echo "interop: $NNLINT is not an executable" >&2; exit 2; }
export NNLINT

# the Hugging Face cache layout nnlint reads, as tests/hub_cache.rs builds it, scanned by
# huggingface_hub.scan_cache_dir (tests/interop/scan_cache.py); required here, skipped elsewhere
echo "interop: huggingface_hub.scan_cache_dir on the cache layout of tests/hub_cache.rs"
NNLINT_INTEROP_PY="$py" NNLINT_INTEROP_REQUIRED=1 \
    cargo test --locked --test hub_cache -- --exact the_cache_layout_is_the_one_huggingface_hub_scans

exec "$py" "$here/test_rewrite.py" "$@"
