#!/bin/sh
# RandAugment's cost (docs/PERFORMANCE.md), at equal workers:
#   augment alone   bench_randaug (tubelet's, the workers' code) against bench/randaug_peer.py
#                   (VideoMAE's video RandAugment over Pillow in PyTorch's DataLoader), both on
#                   the same decoded 16-frame 224x224 clips of opencv-doc's vtest.avi;
#   the loader      tubelet bench-load, workload w2 (16 frames, random-resized-crop 224), with
#                   --rand-augment none and m7-n4, on tubelet synth's videos prepared by
#                   tubelet prep.
# Each number is the median of REPEATS runs. Usage:
#   bench/randaug_bench.sh [BUILD_DIR=build] [REPEATS=3] [WORKERS=2]
set -eu
build=${1:-build}
reps=${2:-3}
workers=${3:-2}
out=${BENCH_OUT:-bench/out}/randaug
bin=$build/tubelet
mkdir -p "$out"

[ -f "$out/syn/annotations/EPIC_100_train.csv" ] ||
    "$bin" synth --out "$out/syn" --videos 8 --seconds 60 >/dev/null
[ -d "$out/chunks" ] || "$bin" prep "$out"/syn/videos/*.mp4 --out "$out/chunks" --jobs 2 >/dev/null
ann=$out/syn/annotations/EPIC_100_train.csv
clips=$out/clips.rgb
"$bin" frames /usr/share/doc/opencv-doc/examples/data/vtest.avi --frames 0-127 \
    --crop-mode center --size 224x224 --out "$clips" >/dev/null

results=$out/results.jsonl
: > "$results"
for rep in $(seq "$reps"); do
    for spec in none m7-n4; do
        echo "{\"label\": \"loader $spec\", \"result\": $("$bin" bench-load --data "$out/chunks" \
            --ann "$ann" --workload w2 --workers "$workers" --batch 16 --clips 800 \
            --rand-augment $spec)}" >> "$results"
    done
    echo "{\"label\": \"augment tubelet\", \"result\": $("$build/bench/bench_randaug" "$clips" \
        8 16 224 224 "$workers" 800)}" >> "$results"
    echo "{\"label\": \"augment pytorch\", \"result\": $(OMP_NUM_THREADS=1 /usr/bin/python3 \
        bench/randaug_peer.py "$clips" 8 16 224 224 "$workers" 160)}" >> "$results"
    echo "randaug_bench: repeat $rep of $reps done" >&2
done

python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| what | clips/s (median) | runs |")
print("|---|---|---|")
for label in sorted({r["label"] for r in rows}):
    v = [r["result"]["clips_per_s"] for r in rows if r["label"] == label]
    extra = {r["result"].get("ops") for r in rows if r["label"] == label} - {None}
    note = f" ({', '.join(extra)})" if extra else ""
    print(f"| {label}{note} | {statistics.median(v):.1f} | {', '.join(f'{x:.1f}' for x in v)} |")
PY
