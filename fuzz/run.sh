#!/usr/bin/env bash
# Runs every fuzz target for $FUZZ_SECONDS (default 60) each, seeded from testdata/, and exits
# non-zero when one of them crashes (a panic, an abort, an allocation over the RSS limit, a hang).
# Without a nightly toolchain or cargo-fuzz it says so and exits 0, so CI may always call it.
#
#   fuzz/run.sh                      # every target, 60 s each
#   FUZZ_SECONDS=300 fuzz/run.sh graph_struct lint_all
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
seconds="${FUZZ_SECONDS:-60}"

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz/run.sh: no nightly toolchain (rustup toolchain install nightly): skipping the fuzz run"
    exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz/run.sh: cargo-fuzz is not installed (cargo install cargo-fuzz --locked): skipping the fuzz run"
    exit 0
fi

cd "$root" || exit 1
if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo +nightly fuzz list)
fi

# Seeds: the models under testdata/, by kind (small ones only: libFuzzer mutates every byte).
max_len=262144
seeds="$here/target/seeds"
rm -rf "$seeds"
mkdir -p "$seeds/onnx" "$seeds/safetensors" "$seeds/none" "$seeds/llm"
find "$root/testdata" -path "$root/testdata/.venv" -prune -o -type f -name '*.onnx' -size -256k -print0 |
    while IFS= read -r -d '' f; do cp "$f" "$seeds/onnx/$(echo "$f" | cksum | cut -d' ' -f1).onnx"; done
find "$root/testdata" -path "$root/testdata/.venv" -prune -o -type f -name '*.safetensors' -size -256k -print0 |
    while IFS= read -r -d '' f; do cp "$f" "$seeds/safetensors/$(echo "$f" | cksum | cut -d' ' -f1).st"; done

# llm_headers: a first byte picks the kind (even: GGUF, odd: config.json)
for f in "$root"/testdata/llm/gguf/*.gguf "$root"/testdata/llm/gguf/twins/*.gguf; do
    { printf '\x00'; cat "$f"; } > "$seeds/llm/$(basename "$f").seed"
done
for f in "$root"/testdata/llm/*/config.json "$root"/testdata/llm/quantized/*/config.json; do
    { printf '\x01'; cat "$f"; } > "$seeds/llm/$(echo "$f" | cksum | cut -d' ' -f1).seed"
done

cargo +nightly fuzz build ${FUZZ_BUILD_ARGS:-} || exit 1

failed=()
for t in "${targets[@]}"; do
    case "$t" in
        onnx_mem) seed=("$seeds/onnx" "$seeds/safetensors") ;;
        lint_all) seed=("$seeds/onnx") ;;
        safetensors_header) seed=("$seeds/safetensors") ;;
        llm_headers) seed=("$seeds/llm") ;;
        *) seed=() ;; # graph_struct: the inputs are `arbitrary` bytes, not model files
    esac
    mkdir -p "$here/corpus/$t"
    echo "=== $t: ${seconds}s"
    # shellcheck disable=SC2086
    if ! cargo +nightly fuzz run ${FUZZ_BUILD_ARGS:-} "$t" "$here/corpus/$t" "${seed[@]}" -- \
        -max_total_time="$seconds" -max_len="$max_len" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1; then
        failed+=("$t")
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz/run.sh: crashes in: ${failed[*]} (reproducers under fuzz/artifacts/<target>/)"
    exit 1
fi
echo "fuzz/run.sh: no crash in ${targets[*]} (${seconds}s each)"
