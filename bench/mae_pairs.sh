#!/bin/sh
# Interleaved rounds of VideoMAE pretraining steps on the CPU: a tubelet build's bench_mae,
# optionally an older build's, and PyTorch 2.x (bench/venv's bench/mae_peer.py, with SDPA) on
# the same model, batch shape and masking, one after the other in every round, so the
# machine's noise falls on all of them alike (docs/PERFORMANCE.md, section 6). Prints one JSON
# line per run, then the medians of the per-round ratios: each tubelet run's clips/s over
# PyTorch's of the same round and decoder masking, and its peak RSS over PyTorch's; and the
# cost of v2's running-cell decoder masking against v1's (running-cell clips/s over none's,
# same implementation, same round).
# Models (mask ratio 0.9, decoder 384/4/6): ViT-S (384/12/6, 16x112x112, batch 4; decoder mask
# none only: running cells need an even patch grid and 112/16 is 7) and ViT-B (768/12/12,
# 16x224x224, batch 2; decoder mask none and running-cell).
# OPENBLAS_CORETYPE=Haswell for every command, as this environment sets it. BENCH_IDLE=S
# waits before every run until the CPUs have been at least 90% idle for S seconds in a row,
# for a machine another job uses in bursts (without it, runs follow each other at once).
# Usage: bench/mae_pairs.sh NEW_BUILD [OLD_BUILD|-] [ROUNDS=5] [BASE_ROUNDS=3] [THREADS=2]
set -eu
new=$1
old=${2:--}
rounds=${3:-5}
base_rounds=${4:-3}
threads=${5:-2}
export OPENBLAS_CORETYPE=Haswell OMP_NUM_THREADS="$threads"
py=bench/venv/bin/python
[ -x "$py" ] || { echo "mae_pairs: no $py (sh bench/setup.sh)" >&2; exit 1; }
out=${BENCH_OUT:-bench/out}/mae
mkdir -p "$out"
results=$out/pairs.jsonl
: > "$results"
busy() { # CPU jiffies spent so far (user, nice, system, irq, softirq, steal), then all of them
    read -r _ u n s i w q sq st _ < /proc/stat
    echo $((u + n + s + q + sq + st)) $((u + n + s + i + w + q + sq + st))
}
wait_idle() {
    k=0
    while [ "$k" -lt "${BENCH_IDLE:-0}" ]; do
        set -- $(busy)
        sleep 1
        set -- "$@" $(busy)
        if [ $((($3 - $1) * 10)) -le $(($4 - $2)) ]; then k=$((k + 1)); else k=0; fi
    done
}
run() { # model round label command...
    m=$1 r=$2 label=$3
    shift 3
    wait_idle
    echo "{\"model\": \"$m\", \"round\": $r, \"run\": \"$label\", \"result\": $("$@")}" | tee -a "$results"
}
# model dim depth heads frames size batch steps decoder-masks
for cfg in "small 384 12 6 16 112 4 5 none" "base 768 12 12 16 224 2 3 none,running-cell"; do
    set -- $cfg
    m=$1 steps=$8 dmasks=$9
    shift
    set -- $1 $2 $3 $4 $5 $6
    n=$rounds
    [ "$m" = base ] && n=$base_rounds
    for r in $(seq "$n"); do
        for dm in $(echo "$dmasks" | tr , ' '); do
            sfx=
            [ "$dm" = none ] || sfx=-$dm
            run "$m" "$r" "new$sfx" "$new/bench/bench_mae" "$@" "$steps" 0.9 "$dm" 384 4 6
            [ "$old" = - ] ||
                run "$m" "$r" "old$sfx" "$old/bench/bench_mae" "$@" "$steps" 0.9 "$dm" 384 4 6
            run "$m" "$r" "torch$sfx" "$py" bench/mae_peer.py "$@" --steps "$steps" \
                --threads "$threads" --sdpa --mask-ratio 0.9 --decoder-mask "$dm" \
                --dec-dim 384 --dec-depth 4 --dec-heads 6
        done
    done
done
"$py" - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def span(xs):
    return f"{statistics.median(xs):.2f}x ({min(xs):.2f}-{max(xs):.2f})"
print("| model | run | decoder mask | clips/s (median) | peak RSS MB | speed / PyTorch 2.x "
      "| memory / PyTorch 2.x | rounds |")
print("|---|---|---|---|---|---|---|---|")
for m in ("small", "base"):
    mine = [r for r in rows if r["model"] == m]
    for dm in ("none", "running-cell"):
        sfx = "" if dm == "none" else "-" + dm
        torch = {r["round"]: r["result"] for r in mine if r["run"] == "torch" + sfx}
        for label in ("new", "old", "torch"):
            rs = [r for r in mine if r["run"] == label + sfx]
            if not rs:
                continue
            speed = [r["result"]["clips_per_s"] / torch[r["round"]]["clips_per_s"] for r in rs]
            mem = [r["result"]["peak_rss_mb"] / torch[r["round"]]["peak_rss_mb"] for r in rs]
            print(f"| {m} | {label} | {dm} "
                  f"| {statistics.median(r['result']['clips_per_s'] for r in rs):.4g} "
                  f"| {statistics.median(r['result']['peak_rss_mb'] for r in rs):.0f} "
                  f"| {span(speed)} | {statistics.median(mem):.2f}x | {len(rs)} |")
    for label in ("new", "old", "torch"):
        v1 = {r["round"]: r["result"]["clips_per_s"] for r in mine if r["run"] == label}
        v2 = {r["round"]: r["result"]["clips_per_s"] for r in mine
              if r["run"] == label + "-running-cell"}
        ratio = [v2[k] / v1[k] for k in v2 if k in v1]
        if ratio:
            print(f"| {m} | {label} | running-cell / none | | | {span(ratio)} | | {len(ratio)} |")
PY
