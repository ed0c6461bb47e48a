#!/bin/sh
# The loader against PyTorch DataLoader baselines at equal workers (docs/PERFORMANCE.md):
#   tubelet bench-load            on tubelet prep's chunks (and, for reference, AVION-style);
#   python-numpy, python-torch    the same loader from Python (tubelet.Loader's NumPy views,
#                                 tubelet.torch.Loader's tensors; bench/python_loader.py), on
#                                 both kinds of chunks, when the build has the module;
#   pytorch-decord, -torchcodec   AVION's EPIC-Kitchens data path (bench/loader_peers.py:
#                                 chunked decord/torchcodec reads + torchvision crop and flip)
#                                 on AVION-style chunks (x264 defaults, keyframe every 250).
# Data: tubelet synth's EPIC-style dataset (8 videos of 60 s, its train annotations).
# Workloads: w1 = 4 frames per clip, w2 = 16 frames; random-resized-crop 224; batch 16.
# Each number is the median of REPEATS runs; a last, long tubelet run checks that memory stays
# flat over 10,000 clips.
# Usage: bench/loader_bench.sh [BUILD_DIR=build] [REPEATS=3] [WORKERS=2]
set -eu
build=${1:-build}
reps=${2:-3}
workers=${3:-2}
out=${BENCH_OUT:-bench/out}/loader
bin=$build/tubelet
py=bench/venv/bin/python
mkdir -p "$out"

[ -f "$out/syn/annotations/EPIC_100_train.csv" ] ||
    "$bin" synth --out "$out/syn" --videos 8 --seconds 60 >/dev/null
"$bin" prep "$out"/syn/videos/*.mp4 --out "$out/avion" --gop 250 --tune none --jobs 2 >/dev/null
"$bin" prep "$out"/syn/videos/*.mp4 --out "$out/tubelet" --jobs 2 >/dev/null
ann=$out/syn/annotations/EPIC_100_train.csv

results=$out/results.jsonl
: > "$results"
run() { # label data workload clips command...
    label=$1 data=$2 w=$3
    shift 3
    line=$("$@")
    echo "{\"label\": \"$label\", \"data\": \"$data\", \"workload\": \"$w\", \"result\": $line}" \
        >> "$results"
}
for rep in $(seq "$reps"); do
    for w in w1 w2; do
        t=4 clips=2000
        if [ $w = w2 ]; then t=16 clips=800; fi
        for d in tubelet avion; do
            run tubelet $d $w "$bin" bench-load --data "$out/$d" --ann "$ann" --workload $w \
                --workers "$workers" --batch 16 --clips $clips
        done
        if [ -d "$build/python/tubelet" ]; then
            for d in tubelet avion; do
                for kind in numpy torch; do
                    run python-$kind $d $w env PYTHONPATH="$build/python" OMP_NUM_THREADS=1 \
                        /usr/bin/python3 bench/python_loader.py --child $kind --tubelet "$bin" \
                        --root "$out/$d" --ann "$ann" --workload $w --workers "$workers" \
                        --batch 16 --clips $clips
                done
            done
        fi
        if [ -x "$py" ]; then
            for impl in decord torchcodec; do
                run pytorch-$impl avion $w "$py" bench/loader_peers.py --impl $impl \
                    --root "$out/avion" --ann "$ann" --frames $t --size 224 \
                    --workers "$workers" --batch 16 --clips $((clips / 4))
            done
        fi
    done
    echo "loader_bench: repeat $rep of $reps done" >&2
done
run tubelet-10k tubelet w1 "$bin" bench-load --data "$out/tubelet" --ann "$ann" --workload w1 \
    --workers "$workers" --batch 16 --clips 10000

python3 - "$results" "$workers" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def pick(label, data, w):
    return [r["result"] for r in rows if r["label"] == label and r["data"] == data and r["workload"] == w]
print(f"| loader | chunks | workload | clips/s | CPU % | peak RSS MB | RSS MB at 10% / end |")
print("|---|---|---|---|---|---|---|")
keys = sorted({(r["label"], r["data"], r["workload"]) for r in rows})
for label, data, w in keys:
    rs = pick(label, data, w)
    med = statistics.median(r["clips_per_s"] for r in rs)
    cpu = statistics.median(r.get("cpu_percent", 0) for r in rs)
    rss = max(r["peak_rss_mb"] for r in rs)
    r0 = rs[-1]
    print(f"| {label} | {data} | {w} | {med:.1f} | {cpu:.0f} | {rss:.0f} | "
          f"{r0.get('rss_mb_at_10pct', 0):.0f} / {r0.get('rss_mb_at_end', 0):.0f} |")
for w in ("w1", "w2"):
    t = statistics.median(r["clips_per_s"] for r in pick("tubelet", "tubelet", w))
    best = max((statistics.median(r["clips_per_s"] for r in pick(p, "avion", w)), p)
               for p in ("pytorch-decord", "pytorch-torchcodec") if pick(p, "avion", w))
    print(f"\n{w}, {sys.argv[2]} workers: tubelet on its chunks / best baseline ({best[1]}) on "
          f"AVION-style chunks = {t / best[0]:.2f}x")
    ta = statistics.median(r["clips_per_s"] for r in pick("tubelet", "avion", w))
    print(f"{w}: on the same AVION-style chunks, tubelet bench-load / best baseline = "
          f"{ta / best[0]:.2f}x")
    for kind in ("python-numpy", "python-torch"):
        for d, ref in (("tubelet", t), ("avion", ta)):
            if pick(kind, d, w):
                p = statistics.median(r["clips_per_s"] for r in pick(kind, d, w))
                print(f"{w}, {d} chunks: {kind} / tubelet bench-load = {p / ref:.3f}x; "
                      f"/ best baseline on AVION-style chunks = {p / best[0]:.2f}x")
PY
