#!/bin/sh
# Two processes on the CPU (mpirun -np 2, one OpenMP thread each): the training throughput of
# a tubelet build against an older one, interleaved rounds. The model is ViT-S wide and deep
# (384/12/6, 22 M parameters) on the demo's small clips (8x64x64, 8x8x8 tubelets), 2 clips a
# process and step, so that the gradients' all-reduce is a visible share of the step. Data:
# the output of `make demo` (its chunks and the first 400 training rows). Prints each run's
# median clips/s over its log lines (the first left out), then the median of the per-round
# ratios new / old.
# Usage: bench/dist_pairs.sh NEW_BUILD OLD_BUILD [DEMO_DIR=demo] [ROUNDS=3]
set -eu
new=$1
old=$2
demo=${3:-demo}
rounds=${4:-3}
out=${BENCH_OUT:-bench/out}/dist
mkdir -p "$out"
head -401 "$demo/data/annotations/EPIC_100_train.csv" > "$out/train400.csv"
run() { # BUILD RUN_DIR: prints the median clips/s
    rm -rf "$2"
    OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        mpirun --oversubscribe -np 2 "$1/tubelet" train --data "$demo/chunks" \
        --train "$out/train400.csv" --label verb --dim 384 --depth 12 --heads 6 --patch 8 \
        --tubelet 8 --frames 8 --size 64 --flip false --batch 2 --epochs 1 --log-every 5 \
        --eval-every 0 --workers 1 --out "$2" > /dev/null 2>&1
    python3 -c "
import json, statistics, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '\"step\"' in l]
print(statistics.median(x['clips_per_s'] for x in r[1:]))" "$2/metrics.jsonl"
}
ratios=""
for r in $(seq "$rounds"); do
    a=$(run "$new" "$out/new")
    b=$(run "$old" "$out/old")
    echo "round $r: new $a clips/s, old $b clips/s"
    ratios="$ratios $(python3 -c "print($a / $b)")"
done
python3 -c "import statistics, sys; v = [float(x) for x in sys.argv[1:]]; print('new / old: median %.3f (%.3f-%.3f)' % (statistics.median(v), min(v), max(v)))" $ratios
