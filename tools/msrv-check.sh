#!/usr/bin/env bash
# The minimum Rust nnlint states (`rust-version` in Cargo.toml) must be at least what every locked
# dependency states for the platforms the wheel is built for: a lock file that moves a dependency
# past it (zip 9.8.2 needs 1.89) fails here, in CI, instead of on a user's older toolchain. With
# the true minimum in `rust-version`, clippy's `incompatible_msrv` lint (on in .ci/run's
# `-D warnings`) flags std APIs newer than it in nnlint's own code.
set -euo pipefail
cd "$(dirname "$0")/.."
declared="$(sed -n 's/^rust-version *= *"\(.*\)"/\1/p' Cargo.toml)"
need="$(
    for t in x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu aarch64-apple-darwin x86_64-apple-darwin x86_64-pc-windows-msvc; do
        cargo metadata --locked --format-version 1 --filter-platform "$t"
    done | python3 -c '
import json, sys
best, who = (0, 0), "none"
for line in sys.stdin:
    m = json.loads(line)
    used = {n["id"] for n in m["resolve"]["nodes"]}
    for p in m["packages"]:
        v = p.get("rust_version")
        if v and p["id"] in used and p["name"] != "nnlint":
            t = tuple(int(x) for x in v.split(".")[:2])
            if t > best:
                best, who = t, p["name"] + " " + p["version"]
print("%d.%d %s" % (best + (who,)))
'
)"
need_v="${need%% *}"
older() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" = "$1" ] && [ "$1" != "$2" ]; }
if older "$declared" "$need_v"; then
    echo "msrv: Cargo.toml says rust-version $declared, but the lock needs $need_v (${need#* })" >&2
    exit 1
fi
echo "msrv: rust-version $declared; the locked dependencies need $need_v at most (${need#* })"
