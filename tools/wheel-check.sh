#!/usr/bin/env bash
# Builds the nnlint wheel (maturin, `bin` bindings), installs it into a fresh virtual environment
# and runs the installed `nnlint` on a bundled model: what `pip install nnlint` gives a user.
#   bash tools/wheel-check.sh            (needs python3 with venv, and PyPI for maturin on first run)
# maturin goes to target/maturin-venv; the wheel to target/wheels; the fresh venv is temporary.
# The release build takes several minutes on two cores (docs/benchmarks.md has the measurement).
set -euo pipefail
cd "$(dirname "$0")/.."
tools_venv="target/maturin-venv"
if [ ! -x "$tools_venv/bin/maturin" ]; then
    python3 -m venv "$tools_venv"
    "$tools_venv/bin/pip" install --quiet --disable-pip-version-check "maturin>=1.5,<2"
fi
rm -rf target/wheels
start=$(date +%s)
"$tools_venv/bin/maturin" build --release --locked --out target/wheels --quiet
echo "wheel-check: built $(ls target/wheels) in $(( $(date +%s) - start )) s"
fresh="$(mktemp -d)"
trap 'rm -rf "$fresh"' EXIT
python3 -m venv "$fresh/venv"
"$fresh/venv/bin/pip" install --quiet --disable-pip-version-check --no-index target/wheels/*.whl
# from the venv's PATH, as a user would run it
PATH="$fresh/venv/bin:$PATH"
installed="$(command -v nnlint)"
case "$installed" in
    "$fresh"/*) ;;
    *) echo "wheel-check: nnlint on PATH is $installed, not the wheel's" >&2; exit 1 ;;
esac
nnlint --version
out="$(nnlint mem testdata/models/torch/minicnn.onnx --batch 32)"
echo "$out" | grep -q "inference peak     4 MiB" || {
    echo "wheel-check: unexpected output from the installed nnlint:" >&2
    echo "$out" >&2
    exit 1
}
echo "wheel-check: the installed nnlint runs ($installed)"
