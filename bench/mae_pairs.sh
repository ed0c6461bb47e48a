#!/bin/sh
# Interleaved rounds of VideoMAE pretraining steps on the CPU: a tubelet build's bench_mae,
# optionally an older build's, and PyTorch 2.x (bench/venv's bench/mae_peer.py, with SDPA) on
# the same model, batch shape, masking and optimizer, one after the other in every round, so
# the machine's noise falls on all of them alike (docs/PERFORMANCE.md, section 6). Prints one
# JSON line per run, then the medians of the per-round ratios: each tubelet run's clips/s over
# PyTorch's of the same round, decoder masking and optimizer, and its peak RSS over PyTorch's;
# and the cost of v2's running-cell decoder masking against v1's (running-cell clips/s over
# none's, same run, same round).
# Models (mask ratio 0.9, decoder 384/4/6): ViT-S (384/12/6, 16x112x112, batch 4; decoder mask
# none only: running cells need an even patch grid and 112/16 is 7) and ViT-B (768/12/12,
# 16x224x224, batch 2; decoder mask none and running-cell). Optimizers (MAE_OPTIMS, default
# "adamw lion"): AdamW, and Lion (AVION's for MAE pretraining; the peer runs AVION's Lion,
# tests/ref/mae_ref.py). Tubelet runs for each: "new" (the default) and "new-fused" (fused
# updates: each gradient span applied as the backward completes it, bench_mae's FUSED 1); for
# ViT-B without decoder masking also "new-fused-rmlpK" (the encoder's first K blocks
# recompute their MLP input; K = BASE_RECOMPUTE_MLP, default 11, 0: no such run).
# OPENBLAS_CORETYPE=Haswell for every command, as this environment sets it. BENCH_IDLE=S
# waits before every run until the CPUs have been at least 90% idle for S seconds in a row,
# for a machine another job uses in bursts (without it, runs follow each other at once).
# Usage: bench/mae_pairs.sh NEW_BUILD [OLD_BUILD|-] [ROUNDS=5] [BASE_ROUNDS=3] [THREADS=2]
# (an OLD_BUILD's bench_mae must take the OPTIM argument)
set -eu
new=$1
old=${2:--}
rounds=${3:-5}
base_rounds=${4:-3}
threads=${5:-2}
optims=${MAE_OPTIMS:-adamw lion}
rmlp=${BASE_RECOMPUTE_MLP:-11}
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
run() { # model round decoder-mask optimizer label command...
    m=$1 r=$2 dm=$3 opt=$4 label=$5
    shift 5
    wait_idle
    echo "{\"model\": \"$m\", \"round\": $r, \"dmask\": \"$dm\", \"optim\": \"$opt\"," \
        "\"run\": \"$label\", \"result\": $("$@")}" | tee -a "$results"
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
            for opt in $optims; do
                a="$steps 0.9 $dm 384 4 6 $opt"
                run "$m" "$r" "$dm" "$opt" new "$new/bench/bench_mae" "$@" $a 0 0
                run "$m" "$r" "$dm" "$opt" new-fused "$new/bench/bench_mae" "$@" $a 1 0
                if [ "$m" = base ] && [ "$dm" = none ] && [ "$rmlp" -gt 0 ]; then
                    run "$m" "$r" "$dm" "$opt" "new-fused-rmlp$rmlp" "$new/bench/bench_mae" \
                        "$@" $a 1 "$rmlp"
                fi
                [ "$old" = - ] ||
                    run "$m" "$r" "$dm" "$opt" old "$old/bench/bench_mae" "$@" $a
                run "$m" "$r" "$dm" "$opt" torch "$py" bench/mae_peer.py "$@" --steps "$steps" \
                    --threads "$threads" --sdpa --mask-ratio 0.9 --decoder-mask "$dm" \
                    --dec-dim 384 --dec-depth 4 --dec-heads 6 --optim "$opt"
            done
        done
    done
done
"$py" - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def span(xs):
    return f"{statistics.median(xs):.2f}x ({min(xs):.2f}-{max(xs):.2f})"
print("| model | decoder mask | optimizer | run | clips/s (median) | peak RSS MB "
      "| speed / PyTorch 2.x | memory / PyTorch 2.x | rounds |")
print("|---|---|---|---|---|---|---|---|---|")
labels = list(dict.fromkeys(r["run"] for r in rows))
groups = list(dict.fromkeys((r["model"], r["dmask"], r["optim"]) for r in rows))
for m, dm, opt in groups:
    mine = [r for r in rows if (r["model"], r["dmask"], r["optim"]) == (m, dm, opt)]
    torch = {r["round"]: r["result"] for r in mine if r["run"] == "torch"}
    for label in labels:
        rs = [r for r in mine if r["run"] == label and r["round"] in torch]
        if not rs:
            continue
        speed = [r["result"]["clips_per_s"] / torch[r["round"]]["clips_per_s"] for r in rs]
        mem = [r["result"]["peak_rss_mb"] / torch[r["round"]]["peak_rss_mb"] for r in rs]
        print(f"| {m} | {dm} | {opt} | {label} "
              f"| {statistics.median(r['result']['clips_per_s'] for r in rs):.4g} "
              f"| {statistics.median(r['result']['peak_rss_mb'] for r in rs):.0f} "
              f"| {span(speed)} | {statistics.median(mem):.2f}x | {len(rs)} |")
for m, opt in dict.fromkeys((m, opt) for m, _, opt in groups):
    for label in labels:
        by = lambda dm: {r["round"]: r["result"]["clips_per_s"] for r in rows
                         if (r["model"], r["dmask"], r["optim"], r["run"]) == (m, dm, opt, label)}
        v1, v2 = by("none"), by("running-cell")
        ratio = [v2[k] / v1[k] for k in v2 if k in v1]
        if ratio:
            print(f"| {m} | running-cell / none | {opt} | {label} | | | {span(ratio)} | "
                  f"| {len(ratio)} |")
PY
