#!/usr/bin/env bash
# End-to-end benchmark of `nnlint mem` (the foundation issue's performance target).
#
# Builds the release binary, generates the benchmark models (benches/mem.rs, --generate-only), then
# measures the real binary `target/release/nnlint mem MODEL`:
#   * wall time (bash $EPOCHREALTIME around the process) and peak RSS (GNU time -v),
#   * in four page-cache states: warm (the whole file cached by a sequential read, then a warm-up
#     run), warm-nnlint (only the pages nnlint itself reads are cached), cold (the model file evicted
#     before each run) and cold-all (every cache dropped, the binary's included),
#   * how much of the model file is resident after the runs (fincore), which shows whether the
#     weights were read;
# and Python `onnx.load` + `onnx.shape_inference.infer_shapes` on the same files, with the ratio;
# then instructions per node (callgrind) and `lint`, `mem --train` and `report` against `mem`.
# Finally (unless INPROCESS=0) the in-process series `cargo bench --bench mem`.
#
# Prints Markdown. Usage:
#   bash benches/run.sh                 # everything
#   MODELS="big" RUNS=20 bash benches/run.sh
# Environment:
#   RUNS       warm runs per model (default 10)    COLD_RUNS  cold runs per model (default 3)
#   PY_RUNS    Python runs per model (default 2; 0 skips Python)
#   MODELS     subset of: big s1k s10k s100k (default all)
#   NNLINT_PY  Python with the onnx package (default /work/venv/py/bin/python, then python3)
#   INPROCESS  0 to skip `cargo bench --bench mem`
#   CALLGRIND  0 to skip the instruction counts (valgrind --tool=callgrind; skipped without valgrind)
# Cold runs need root (to write /proc/sys/vm/drop_caches); without it the model file alone is
# evicted with posix_fadvise(POSIX_FADV_DONTNEED) or `dd iflag=nocache`; the script says which.
# It asserts no timing: it reports.

set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-10}
COLD_RUNS=${COLD_RUNS:-3}
PY_RUNS=${PY_RUNS:-2}
MODELS=${MODELS:-big s1k s10k s100k}
INPROCESS=${INPROCESS:-1}
TIME=/usr/bin/time
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

log() { printf '%s\n' "$*" >&2; }

# --- prerequisites ------------------------------------------------------------------------------
if ! "$TIME" -v true >/dev/null 2>&1; then
    log "error: GNU time is needed at $TIME (peak RSS). On Debian/Ubuntu: apt-get install -y time"
    exit 1
fi
HAVE_FINCORE=0
command -v fincore >/dev/null 2>&1 && HAVE_FINCORE=1

PY=""
for cand in "${NNLINT_PY:-}" /work/venv/py/bin/python python3; do
    [ -n "$cand" ] || continue
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import onnx' >/dev/null 2>&1; then
        PY=$(command -v "$cand")
        break
    fi
done
# any python3 for posix_fadvise
SYS_PY=${PY:-$(command -v python3 || true)}

# --- build and generate --------------------------------------------------------------------------
log "building (cargo build --release, cargo bench --no-run)..."
cargo build --release --quiet --bin nnlint
cargo bench --bench mem --quiet --no-run 2>/dev/null || cargo bench --bench mem --no-run
log "generating models..."
# name <TAB> path <TAB> nodes <TAB> initializers <TAB> weight bytes
cargo bench --bench mem --quiet -- --generate-only >"$TMP/models.tsv"
# measure a private copy, so that a rebuild during the run cannot swap the binary under it
NNLINT=$TMP/nnlint
cp target/release/nnlint "$NNLINT"

now_us() { local t=${EPOCHREALTIME/[.,]/}; echo "$t"; }
resident_bytes() {
    if [ "$HAVE_FINCORE" = 1 ]; then fincore --bytes --noheadings --output RES "$1" | tr -d ' '; else echo "?"; fi
}

# --- cold-cache method ---------------------------------------------------------------------------
warm_binary() { cat "$NNLINT" >/dev/null; "$NNLINT" --version >/dev/null; }
evict_file() { # $1 method, $2 file
    case $1 in
        drop_caches) sync; echo 3 >/proc/sys/vm/drop_caches ;;
        fadvise) "$SYS_PY" -c 'import os,sys
fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$2" ;;
        dd) dd if="$2" iflag=nocache count=0 status=none ;;
    esac
}
COLD_METHOD=none
probe=$(awk -F'\t' '{print $2; exit}' "$TMP/models.tsv")
for m in drop_caches fadvise dd; do
    [ "$m" = fadvise ] && [ -z "$SYS_PY" ] && continue
    cat "$probe" >/dev/null
    if (evict_file "$m" "$probe") 2>/dev/null; then
        # a few pages may stay (another process reading the file): under 1% counts as evicted
        if [ "$HAVE_FINCORE" = 0 ] ||
            [ "$(resident_bytes "$probe")" -lt $(($(stat -c %s "$probe") / 100)) ]; then
            COLD_METHOD=$m
            break
        fi
    fi
done
case $COLD_METHOD in
    drop_caches) COLD_DESC='`sync; echo 3 > /proc/sys/vm/drop_caches` before each run (then the nnlint binary is read back in: only the model is cold)' ;;
    fadvise) COLD_DESC='`posix_fadvise(POSIX_FADV_DONTNEED)` on the model file before each run (drop_caches not permitted)' ;;
    dd) COLD_DESC='`dd iflag=nocache count=0` on the model file before each run (drop_caches not permitted)' ;;
    none) COLD_DESC='no way to evict the page cache was found: cold runs skipped' ;;
esac
[ "$HAVE_FINCORE" = 1 ] || log "note: fincore (util-linux) not found: residency after cold runs not reported"

# --- measurement helpers -------------------------------------------------------------------------
# run_nnlint MODEL [direct]: one run under GNU time; sets WALL_US RSS_KB MAJFLT MINFLT FSIN
# (512-byte blocks read). With `direct`, WALL_US is from a second run, of the nnlint process alone
# (started by the shell, no wrapper: GNU time's own start and exit cost ~2 ms, as much as a
# tenth of a small model's run); only for warm caches, where the two runs see the same cache.
run_nnlint() {
    local t0 t1
    t0=$(now_us)
    if ! "$TIME" -v -o "$TMP/time.txt" "$NNLINT" mem "$1" >/dev/null 2>"$TMP/err.txt"; then
        log "error: nnlint mem $1 failed:"; cat "$TMP/err.txt" >&2; exit 1
    fi
    t1=$(now_us)
    WALL_US=$((t1 - t0))
    if [ "${2:-}" = direct ]; then
        t0=$(now_us)
        "$NNLINT" mem "$1" >/dev/null 2>"$TMP/err.txt"
        t1=$(now_us)
        WALL_US=$((t1 - t0))
    fi
    RSS_KB=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$TMP/time.txt")
    MAJFLT=$(awk -F': ' '/Major \(requiring I\/O\) page faults/ {print $2}' "$TMP/time.txt")
    MINFLT=$(awk -F': ' '/Minor \(reclaiming a frame\) page faults/ {print $2}' "$TMP/time.txt")
    FSIN=$(awk -F': ' '/File system inputs/ {print $2}' "$TMP/time.txt")
}
# stats FILE (one number per line): "min median max"
stats() { sort -n "$1" | awk '{a[NR]=$1} END {m = (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2; print a[1], m, a[NR]}'; }
us_to_ms() { awk -v v="$1" 'BEGIN {printf "%.1f", v/1000}'; }
kb_to_mib() { awk -v v="$1" 'BEGIN {printf "%.1f", v/1024}'; }

# the cost of the measurement itself: /usr/bin/time around a process that does nothing
: >"$TMP/base.txt"
for _ in 1 2 3 4 5; do
    t0=$(now_us); "$TIME" -v -o "$TMP/time.txt" true; t1=$(now_us); echo $((t1 - t0)) >>"$TMP/base.txt"
done
read -r BASE_MIN _ _ < <(stats "$TMP/base.txt")

# --- header --------------------------------------------------------------------------------------
cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
mem=$(awk '/^MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)
rev=$(git rev-parse --short HEAD 2>/dev/null || echo "?")
dirty=$(git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo " + uncommitted changes" || true)
echo "# nnlint mem benchmark"
echo
echo "- date: $(date -u +%Y-%m-%dT%H:%MZ); nnlint $rev$dirty; $(rustc --version)"
echo "- machine: $(nproc) CPUs ($cpu), $mem RAM, kernel $(uname -r)"
echo "- cold cache: $COLD_DESC"
echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (measurements are only meaningful on an otherwise idle machine)"
echo "- wall, warm caches: the nnlint process alone, start to exit as the shell sees it; cold caches: under /usr/bin/time (~$(us_to_ms "$BASE_MIN") ms of its own included); peak RSS and faults from GNU time (a run of its own beside each warm one)"
echo

# --- nnlint --------------------------------------------------------------------------------------
echo "## nnlint mem (release binary, table output to /dev/null)"
echo
echo "| model | nodes | file MB | cache | runs | wall min ms | wall median ms | wall max ms | peak RSS MiB (max) | minor faults | major faults | read from disk MiB | file resident after MiB (%) |"
echo "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
declare -A WARM_MEDIAN_US
while IFS=$'\t' read -r name path nodes _inits _wbytes; do
    case " $MODELS " in *" $name "*) ;; *) continue ;; esac
    size=$(stat -c %s "$path")
    size_mb=$(awk -v v="$size" 'BEGIN {printf "%.1f", v/1e6}')
    modes="warm"
    [ "$COLD_METHOD" != none ] && modes="warm warm-nnlint cold"
    [ "$COLD_METHOD" = drop_caches ] && modes="$modes cold-all"
    for mode in $modes; do
        : >"$TMP/wall.txt"; : >"$TMP/rss.txt"; : >"$TMP/maj.txt"; : >"$TMP/min.txt"; : >"$TMP/fsin.txt"; res="-"
        n=$RUNS
        case $mode in
            warm) # the whole file cached by a sequential read, as a download, a copy or onnx.load leave it
                [ "$COLD_METHOD" != none ] && evict_file "$COLD_METHOD" "$path"
                dd if="$path" of=/dev/null bs=1M status=none
                warm_binary
                run_nnlint "$path" ;; # warm-up
            warm-nnlint) # only the pages nnlint reads are cached: repeated nnlint runs on an unread file
                evict_file "$COLD_METHOD" "$path"
                warm_binary
                run_nnlint "$path" ;;
            *) n=$COLD_RUNS ;;
        esac
        for _ in $(seq "$n"); do
            case $mode in
                cold) evict_file "$COLD_METHOD" "$path"; [ "$COLD_METHOD" = drop_caches ] && warm_binary ;;
                cold-all) evict_file drop_caches "$path" ;;
            esac
            case $mode in warm*) run_nnlint "$path" direct ;; *) run_nnlint "$path" ;; esac
            echo "$WALL_US" >>"$TMP/wall.txt"; echo "$RSS_KB" >>"$TMP/rss.txt"
            echo "$MAJFLT" >>"$TMP/maj.txt"; echo "$MINFLT" >>"$TMP/min.txt"; echo "$FSIN" >>"$TMP/fsin.txt"
            if [ "$mode" != warm ] && [ "$HAVE_FINCORE" = 1 ]; then res=$(resident_bytes "$path"); fi
        done
        read -r wmin wmed wmax < <(stats "$TMP/wall.txt")
        read -r _ _ rmax < <(stats "$TMP/rss.txt")
        read -r _ majmed _ < <(stats "$TMP/maj.txt")
        read -r _ minmed _ < <(stats "$TMP/min.txt")
        read -r _ fsmed _ < <(stats "$TMP/fsin.txt")
        [ "$mode" = warm ] && WARM_MEDIAN_US[$name]=$wmed
        case $mode in warm*) [ "$HAVE_FINCORE" = 1 ] && res=$(resident_bytes "$path") ;; esac
        if [ "$res" != "-" ] && [ "$res" != "?" ]; then
            res=$(awk -v r="$res" -v s="$size" 'BEGIN {printf "%.2f (%.2f%%)", r/1048576, 100*r/s}')
        fi
        echo "| $name | $nodes | $size_mb | $mode | $n | $(us_to_ms "$wmin") | $(us_to_ms "$wmed") | $(us_to_ms "$wmax") | $(kb_to_mib "$rmax") | $minmed | $majmed | $(awk -v v="$fsmed" 'BEGIN {printf "%.2f", v*512/1048576}') | $res |"
    done
done <"$TMP/models.tsv"
echo
echo "warm: the whole file is in the page cache, put there by a sequential read (\`dd bs=1M\`), then one warm-up run."
echo "warm-nnlint: only the pages an earlier nnlint run read are cached. cold: the model file is evicted before"
echo "each run (the binary stays cached); cold-all: every cache is dropped (binary and libc too)."
echo "Peak RSS counts the file pages nnlint maps, and the kernel maps a whole large folio (up to 2 MiB) of a"
echo "file cached by a sequential read on the first touch: compare warm and warm-nnlint."
echo "minor faults (a fresh page, 4 KiB or 2 MiB: the kernel zeroes it), major faults, read from disk: medians"
echo "(GNU time's \"File system inputs\", 512-byte blocks). Resident after:"
echo "how much of the model file is in the page cache after the last run (fincore)."
echo

# --- Python onnx ---------------------------------------------------------------------------------
echo "## Python onnx.load + onnx.shape_inference.infer_shapes, same files"
echo
if [ "$PY_RUNS" = 0 ]; then
    echo "skipped (PY_RUNS=0)"
elif [ -z "$PY" ]; then
    echo "skipped: no Python with the onnx package (set NNLINT_PY=/path/to/python)"
    log "note: Python onnx skipped (no interpreter with onnx found)"
else
    cat >"$TMP/onnx_bench.py" <<'EOF'
import resource, sys, time
import onnx
t0 = time.perf_counter()
m = onnx.load(sys.argv[1])
t1 = time.perf_counter()
inferred = onnx.shape_inference.infer_shapes(m)
t2 = time.perf_counter()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
# load+infer ms, load ms, infer ms, peak RSS KiB, value_info entries inferred
print(f"{(t2 - t0) * 1e3:.1f} {(t1 - t0) * 1e3:.1f} {(t2 - t1) * 1e3:.1f} {rss} {len(inferred.graph.value_info)}")
EOF
    onnx_ver=$("$PY" -c 'import onnx; print(onnx.__version__)')
    echo "Python: \`$PY\` ($("$PY" --version 2>&1), onnx $onnx_ver). load+infer is timed inside the interpreter (interpreter start and \`import onnx\` excluded; the process wall includes them). The ratio is Python's best load+infer over nnlint's warm median wall (whole process), so it understates nnlint's advantage."
    echo
    echo "| model | cache | runs | onnx.load ms | infer_shapes ms | load+infer ms (best) | process wall ms | peak RSS MiB | inferred value_info | ratio vs nnlint warm median |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    while IFS=$'\t' read -r name path _nodes _inits _wbytes; do
        case " $MODELS " in *" $name "*) ;; *) continue ;; esac
        pmodes="warm"
        [ "$COLD_METHOD" != none ] && [ "$name" = big ] && pmodes="warm cold"
        for mode in $pmodes; do
            : >"$TMP/py.txt"
            n=$PY_RUNS
            [ "$mode" = warm ] && cat "$path" >/dev/null
            [ "$mode" = cold ] && n=1
            for _ in $(seq "$n"); do
                if [ "$mode" = cold ]; then
                    evict_file "$COLD_METHOD" "$path"
                    "$PY" -c 'import onnx' # the interpreter and onnx back in cache: only the model is cold
                fi
                t0=$(now_us)
                out=$("$PY" "$TMP/onnx_bench.py" "$path")
                t1=$(now_us)
                echo "$out $((t1 - t0))" >>"$TMP/py.txt"
            done
            read -r tot load inf rss vi wall < <(sort -n "$TMP/py.txt" | head -1)
            ratio="-"
            if [ "$mode" = warm ] && [ -n "${WARM_MEDIAN_US[$name]:-}" ]; then
                ratio=$(awk -v p="$tot" -v n="${WARM_MEDIAN_US[$name]}" 'BEGIN {r = p/(n/1000); printf (r < 10 ? "%.2fx" : "%.0fx"), r}')
            fi
            echo "| $name | $mode | $n | $load | $inf | $tot | $(us_to_ms "$wall") | $(kb_to_mib "$rss") | $vi | $ratio |"
        done
    done <"$TMP/models.tsv"
fi
echo

# --- per node, and the other commands -----------------------------------------------------------
# Instructions by callgrind (deterministic: the figure a CI regression check may compare, where a
# wall time may not), per node, then lint, mem --train and report against mem (warm, medians).
echo "## Per node, and the other commands"
echo
HAVE_CALLGRIND=0
if [ "${CALLGRIND:-1}" != 0 ] && command -v valgrind >/dev/null 2>&1; then HAVE_CALLGRIND=1; fi
[ "$HAVE_CALLGRIND" = 1 ] || echo "callgrind: skipped (CALLGRIND=0 or no valgrind)."
# median_ms CMD...: median wall of RUNS runs of a command, after one warm-up
median_ms() {
    : >"$TMP/cmd.txt"
    "$@" >/dev/null 2>&1 || true
    for _ in $(seq "$RUNS"); do
        local t0 t1
        t0=$(now_us); "$@" >/dev/null 2>&1 || true; t1=$(now_us)
        echo $((t1 - t0)) >>"$TMP/cmd.txt"
    done
    local med
    read -r _ med _ < <(stats "$TMP/cmd.txt")
    us_to_ms "$med"
}
ratio_of() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2fx", a/b}'; }
echo "| model | nodes | instructions (callgrind) | per node | mem ms | lint ms | lint / mem | mem --train ms | --train / mem | report ms | report page |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
while IFS=$'\t' read -r name path nodes _inits _wbytes; do
    case " $MODELS " in *" $name "*) ;; *) continue ;; esac
    ir="-"; per="-"
    if [ "$HAVE_CALLGRIND" = 1 ]; then
        valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.out" "$NNLINT" mem "$path" >/dev/null 2>"$TMP/cg.err"
        ir=$(awk '/I[ ]+refs:/ {gsub(",", "", $NF); print $NF}' "$TMP/cg.err")
        per=$(awk -v i="$ir" -v n="$nodes" 'BEGIN {printf "%.0f", i/n}')
        ir=$(awk -v i="$ir" 'BEGIN {printf "%.1fM", i/1e6}')
    fi
    cat "$path" >/dev/null
    mem_ms=$(median_ms "$NNLINT" mem "$path")
    lint_ms=$(median_ms "$NNLINT" lint "$path")
    train_ms=$(median_ms "$NNLINT" mem --train "$path")
    report_ms=$(median_ms "$NNLINT" report "$path" -o "$TMP/page.html")
    page=$(awk -v b="$(stat -c %s "$TMP/page.html")" 'BEGIN {printf "%.2f MB", b/1e6}')
    echo "| $name | $nodes | $ir | $per | $mem_ms | $lint_ms | $(ratio_of "$lint_ms" "$mem_ms") | $train_ms | $(ratio_of "$train_ms" "$mem_ms") | $report_ms | $page |"
done <"$TMP/models.tsv"
echo
echo "instructions: \`valgrind --tool=callgrind nnlint mem MODEL\` (whole process, table to /dev/null). The"
echo "other columns: medians of $RUNS warm runs after one warm-up; report writes the HTML page (fit plans"
echo "and lint included)."
echo

# --- in-process series ---------------------------------------------------------------------------
if [ "$INPROCESS" != 0 ]; then
    log "running cargo bench --bench mem (in-process series)..."
    cargo bench --bench mem --quiet 2>/dev/null | sed -n '/^## /,$p'
    echo
fi
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
