#!/bin/sh
# A fair share of a busy machine (src/tensor/cpu/share.c): training-step throughput alone and
# beside one and two busy loops (`while :; do :; done` in sh), for tubelet as built (the fair
# share on, the default), tubelet with TUBELET_CPU_SHARE=off (its team fixed at OMP_NUM_THREADS,
# as before the fair share) and PyTorch 2.x (bench/venv's, SDPA), on the same model, batch and
# threads. Each round runs every implementation at every load, one after the other, so the
# machine's noise falls on all alike. Models: the demo's (128 wide, 4 deep, 4 heads, 8x64x64
# clips, 8x8x8 tubelets, batch 16) and ViT-S (384/12/6, 16x112x112, batch 4).
# Prints one JSON line per run, then per model and implementation the median clips/s at each
# load and the medians over rounds of the ratio loaded / alone (the same round's).
# OPENBLAS_CORETYPE=Haswell for every command, as this environment sets it.
# Usage: bench/share_bench.sh [BUILD=build] [ROUNDS=3] [THREADS=2]
set -eu
build=${1:-build}
rounds=${2:-3}
threads=${3:-2}
export OPENBLAS_CORETYPE=Haswell OMP_NUM_THREADS="$threads"
py=bench/venv/bin/python
[ -x "$py" ] || { echo "share_bench: no $py (sh bench/setup.sh)" >&2; exit 1; }
out=${BENCH_OUT:-bench/out}/share
mkdir -p "$out"
results=$out/results.jsonl
: > "$results"
busy() { # N: start N busy loops; their pids in $pids
    pids=""
    for i in $(seq "$1"); do
        sh -c 'while :; do :; done' &
        pids="$pids $!"
    done
}
run() { # model round load impl command...
    m=$1 r=$2 l=$3 impl=$4
    shift 4
    busy "$l"
    res=$("$@")
    [ -z "$pids" ] || kill $pids
    wait 2>/dev/null || true
    echo "{\"model\": \"$m\", \"round\": $r, \"load\": $l, \"impl\": \"$impl\", \"result\": $res}" |
        tee -a "$results"
}
for r in $(seq "$rounds"); do
    for cfg in "demo 128 4 4 8 64 16 40 8 8" "vit-s 384 12 6 16 112 4 3 16 2"; do
        set -- $cfg
        m=$1 steps=$8 patch=$9 tub=${10}
        shift
        set -- $1 $2 $3 $4 $5 $6
        for l in 0 1 2; do
            run "$m" "$r" "$l" tubelet "$build/bench/bench_train" "$@" "$steps" "$patch" "$tub"
            run "$m" "$r" "$l" tubelet-fixed env TUBELET_CPU_SHARE=off \
                "$build/bench/bench_train" "$@" "$steps" "$patch" "$tub"
            run "$m" "$r" "$l" pytorch "$py" bench/train_peer.py "$@" --steps "$steps" \
                --threads "$threads" --sdpa --patch "$patch" --tubelet "$tub"
        done
    done
done
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rate = {(r["model"], r["round"], r["load"], r["impl"]): r["result"]["clips_per_s"] for r in rows}
print("| model | implementation | clips/s alone | beside 1 busy loop | beside 2 | share kept, 1 loop | share kept, 2 loops |")
print("|---|---|---|---|---|---|---|")
for m in ("demo", "vit-s"):
    for impl in ("tubelet", "tubelet-fixed", "pytorch"):
        rs = sorted({k[1] for k in rate if k[0] == m and k[3] == impl})
        med = [statistics.median(rate[(m, r, l, impl)] for r in rs) for l in (0, 1, 2)]
        kept = [statistics.median(rate[(m, r, l, impl)] / rate[(m, r, 0, impl)] for r in rs)
                for l in (1, 2)]
        print("| %s | %s | %.1f | %.1f | %.1f | %.2f | %.2f |" % (m, impl, *med, *kept))
PY
