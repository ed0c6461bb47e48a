#!/bin/sh
# Interleaved rounds of training steps on the CPU: a tubelet build, optionally an older one
# (to show a change costs nothing), and PyTorch 2.x (bench/venv's, with SDPA) on the same
# model and batch shape, one after the other in every round, so the machine's noise falls on
# all of them alike (docs/PERFORMANCE.md, section 4). Prints one JSON line per run, then the
# medians of the per-round ratios: each tubelet run's clips/s over PyTorch's of the same round,
# and its peak RSS over PyTorch's.
# Models: ViT-T (192/12/3, 8x112x112, batch 8), ViT-S (384/12/6, 16x112x112, batch 4), ViT-B
# (768/12/12, 16x224x224, batch 2; also with --recompute-mlp 8).
# OPENBLAS_CORETYPE=Haswell for every command, as this environment sets it.
# Usage: bench/train_pairs.sh NEW_BUILD [OLD_BUILD|-] [ROUNDS=5] [BASE_ROUNDS=2] [THREADS=2]
set -eu
new=$1
old=${2:--}
rounds=${3:-5}
base_rounds=${4:-2}
threads=${5:-2}
export OPENBLAS_CORETYPE=Haswell OMP_NUM_THREADS="$threads"
py=bench/venv/bin/python
[ -x "$py" ] || { echo "train_pairs: no $py (sh bench/setup.sh)" >&2; exit 1; }
out=${BENCH_OUT:-bench/out}/train
mkdir -p "$out"
results=$out/pairs.jsonl
: > "$results"
run() { # model round label command...
    m=$1 r=$2 label=$3
    shift 3
    echo "{\"model\": \"$m\", \"round\": $r, \"run\": \"$label\", \"result\": $("$@")}" | tee -a "$results"
}
for cfg in "tiny 192 12 3 8 112 8 5 0" "small 384 12 6 16 112 4 3 0" "base 768 12 12 16 224 2 2 8"; do
    set -- $cfg
    m=$1 steps=$8 mlp=$9
    shift
    set -- $1 $2 $3 $4 $5 $6
    n=$rounds
    [ "$m" = base ] && n=$base_rounds
    for r in $(seq "$n"); do
        run "$m" "$r" new "$new/bench/bench_train" "$@" "$steps"
        [ "$old" = - ] || run "$m" "$r" old "$old/bench/bench_train" "$@" "$steps"
        if [ "$mlp" -gt 0 ]; then
            run "$m" "$r" new-mlp "$new/bench/bench_train" "$@" "$steps" 16 2 0 "$mlp"
            [ "$old" = - ] || run "$m" "$r" old-mlp "$old/bench/bench_train" "$@" "$steps" 16 2 0 "$mlp"
        fi
        run "$m" "$r" torch "$py" bench/train_peer.py "$@" --steps "$steps" --threads "$threads" --sdpa
    done
done
"$py" - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| model | run | clips/s (median) | peak RSS MB | speed / PyTorch 2.x | memory / PyTorch 2.x | rounds |")
print("|---|---|---|---|---|---|---|")
for m in ("tiny", "small", "base"):
    mine = [r for r in rows if r["model"] == m]
    torch = {r["round"]: r["result"] for r in mine if r["run"] == "torch"}
    for label in ("new", "old", "new-mlp", "old-mlp", "torch"):
        rs = [r for r in mine if r["run"] == label]
        if not rs:
            continue
        speed = [r["result"]["clips_per_s"] / torch[r["round"]]["clips_per_s"] for r in rs]
        mem = [r["result"]["peak_rss_mb"] / torch[r["round"]]["peak_rss_mb"] for r in rs]
        print(f"| {m} | {label} | {statistics.median(r['result']['clips_per_s'] for r in rs):.4g} "
              f"| {statistics.median(r['result']['peak_rss_mb'] for r in rs):.0f} "
              f"| {statistics.median(speed):.2f}x ({min(speed):.2f}-{max(speed):.2f}) "
              f"| {statistics.median(mem):.2f}x | {len(rs)} |")
    news = {r["round"]: r["result"]["clips_per_s"] for r in mine if r["run"] == "new"}
    olds = {r["round"]: r["result"]["clips_per_s"] for r in mine if r["run"] == "old"}
    if olds:
        ratio = [news[k] / olds[k] for k in olds if k in news]
        print(f"| {m} | new / old | | | {statistics.median(ratio):.3f}x "
              f"({min(ratio):.3f}-{max(ratio):.3f}) | | {len(ratio)} |")
PY
