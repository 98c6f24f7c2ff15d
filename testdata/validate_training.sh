#!/usr/bin/env bash
# Validates `nnlint mem --train` against PyTorch on torchvision models and full-size GPT-2
# (not part of CI).
# Uses $NNLINT_PY if set, else the fixtures' venv (testdata/.venv), created with its pinned packages.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
if [ -n "${NNLINT_PY:-}" ]; then
  py="$NNLINT_PY"
else
  if [ ! -x "$here/.venv/bin/python" ]; then
    python3 -m venv "$here/.venv"
    "$here/.venv/bin/pip" install -q -r "$here/requirements.txt"
  fi
  py="$here/.venv/bin/python"
fi
(cd "$root" && cargo build --release --quiet)
"$py" "$here/validate_training.py" "$@"
# full-size GPT-2 (124M, dynamo export in train mode, eager and sdpa, with and without dropout):
# PyTorch's bytes and nnlint's must equal testdata/expected/training/*.json
if [ $# -eq 0 ]; then
  for f in "$here"/expected/training/gpt2_124m*.json; do
    "$py" "$root/tools/training/gpt2_saved.py" --check "$f"
  done
fi
