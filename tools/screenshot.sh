#!/usr/bin/env bash
# Renders `nnlint report` of a bundled model in headless Chromium and takes a screenshot, so that a
# blank or broken page is seen before it ships:
#   bash tools/screenshot.sh [MODEL] [OUT.png]     (default: minicnn at batch 32 -> target/report.png)
# Needs the nnlint binary ($NNLINT, default target/debug/nnlint) and chromium (Debian: apt-get
# install chromium). Fails when the page is missing a section or the screenshot is (nearly) blank.
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-testdata/models/torch/minicnn.onnx}"
png="${2:-target/report.png}"
nnlint="${NNLINT:-$PWD/target/debug/nnlint}"
browser="$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)"
if [ -z "$browser" ]; then
    echo "screenshot: no chromium on PATH (apt-get install chromium)" >&2
    exit 2
fi
mkdir -p "$(dirname "$png")"
html="$(dirname "$png")/$(basename "$png" .png).html"
"$nnlint" report "$model" --batch 32 -o "$html" --quiet
for id in summary layers liveness training fit lint; do
    grep -q "id=\"$id\"" "$html" || { echo "screenshot: section '$id' missing from $html" >&2; exit 1; }
done
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
# --no-sandbox: CI containers run as root; the page is our own file and has no script
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --user-data-dir="$profile" --window-size=1280,2000 \
    --screenshot="$PWD/$png" "file://$PWD/$html" >/dev/null 2>&1
[ -s "$png" ] || { echo "screenshot: chromium wrote no $png" >&2; exit 1; }
# a blank page compresses to a few KiB at 1280x2000; the charts and tables take far more
size=$(wc -c <"$png")
if [ "$size" -lt 40000 ]; then
    echo "screenshot: $png is $size bytes: the page looks blank" >&2
    exit 1
fi
echo "screenshot: $png ($size bytes) of $html"
