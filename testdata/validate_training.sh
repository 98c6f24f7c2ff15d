#!/usr/bin/env bash
# Validates `nnlint mem --train` against PyTorch on torchvision models (not part of CI).
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
exec "$py" "$here/validate_training.py" "$@"
