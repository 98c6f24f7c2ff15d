#!/usr/bin/env bash
# Regenerate nnlint's test fixtures: bash testdata/generate.sh [--no-torch] [--rules-only] [--rewrite-only] [--branches-only]
#
# Uses $NNLINT_PY if set (a python that already has requirements.txt
# installed; set NNLINT_PIP_INSTALL=1 to install into it anyway), otherwise
# creates/reuses the venv testdata/.venv and installs requirements.txt there.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [[ -n "${NNLINT_PY:-}" ]]; then
    py="$NNLINT_PY"
    if [[ "${NNLINT_PIP_INSTALL:-0}" == 1 ]]; then
        "$py" -m pip install -r "$here/requirements.txt"
    fi
else
    venv="$here/.venv"
    if [[ ! -x "$venv/bin/python" ]]; then
        python3 -m venv "$venv"
    fi
    py="$venv/bin/python"
    "$py" -m pip install --upgrade pip
    "$py" -m pip install -r "$here/requirements.txt"
fi

exec "$py" "$here/generate.py" "$@"
