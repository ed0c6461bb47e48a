#!/bin/sh
# Single-threaded clip reading, tubelet against its peers, side by side on the same clip lists
# (docs/PERFORMANCE.md). Workloads (AVION's): w1 = 4 frames over a random 2 s window, w2 = 16
# frames over a random 3 s window, random-resized-crop to 224 (torchvision's, scale 0.08-1).
# Data: four real videos (opencv-doc's vtest, a static camera; box, cup and Megamind, hand-held
# and film, looped to about a minute each) prepared two ways:
#   avion:   15 s chunks with x264's defaults (keyframe every 250 frames), as AVION's data;
#   tubelet: 15 s chunks with tubelet prep's defaults.
# Methods: tubelet (fused decode-crop reader), tubelet-all (no frame skipping), decode-only
# (libavcodec decoding what a naive reader must, no conversion), and the peers of
# bench/peers.py (decord, torchcodec, pyav; each + torchvision's crop). Every run is pinned to
# one core; each number is the median of REPEATS runs, interleaved.
# Usage: bench/reader_bench.sh [BUILD_DIR=build] [REPEATS=3] [CLIPS=300]
set -eu
build=${1:-build}
reps=${2:-3}
n_clips=${3:-300}
root=${BENCH_OUT:-bench/out}
src=$root/src
out=$root/reader
core=${BENCH_CORE:-1}
mkdir -p "$src" "$out"

data=/usr/share/doc/opencv-doc/examples/data
html=/usr/share/doc/opencv-doc/opencv4/html
loop() { # name input loops
    [ -f "$src/$1_loop.mp4" ] && return
    ffmpeg -nostdin -v error -y -stream_loop "$3" -i "$2" -an -c:v libx264 -crf 14 \
        -preset veryfast "$src/$1_loop.tmp.mp4"
    mv "$src/$1_loop.tmp.mp4" "$src/$1_loop.mp4"
}
[ -f "$src/box.mp4" ] || gzip -dc "$html/box.mp4.gz" > "$src/box.mp4"
[ -f "$src/cup.mp4" ] || gzip -dc "$html/cup.mp4.gz" > "$src/cup.mp4"
loop vtest "$data/vtest.avi" 0
loop box "$src/box.mp4" 3
loop cup "$src/cup.mp4" 7
loop Megamind "$data/Megamind.avi" 4

"$build/tubelet" prep "$src"/*_loop.mp4 --out "$out/avion" --gop 250 --tune none --jobs 2 >/dev/null
"$build/tubelet" prep "$src"/*_loop.mp4 --out "$out/tubelet" --jobs 2 >/dev/null
for d in avion tubelet; do
    for w in w1 w2; do
        "$build/bench/clips" $w "$n_clips" 1 "$out/$d"/*.mp4 > "$out/$d.$w.jsonl"
    done
done

py=bench/venv/bin/python
peers=""
if [ -x "$py" ]; then
    peers="decord torchcodec torchcodec-native pyav"
else
    echo "reader_bench: no bench/venv (run bench/setup.sh); peers skipped" >&2
fi
results=$out/results.jsonl
: > "$results"
run() { # data workload method
    list="$out/$1.$2.jsonl"
    case $3 in
    tubelet|tubelet-all|decode-only)
        line=$(taskset -c "$core" "$build/bench/bench_reader" "$3" "$list" 224 5) ;;
    *)
        line=$(OMP_NUM_THREADS=1 taskset -c "$core" "$py" bench/peers.py --peer "$3" \
               --clips "$list" --size 224 --warmup 5) ;;
    esac
    echo "{\"data\": \"$1\", \"workload\": \"$2\", \"method\": \"$3\", \"result\": $line}" \
        >> "$results"
}
for rep in $(seq "$reps"); do
    for w in w1 w2; do
        for m in tubelet tubelet-all decode-only $peers; do
            run avion $w $m
        done
        run tubelet $w tubelet
        run tubelet $w decode-only
    done
    echo "reader_bench: repeat $rep of $reps done" >&2
done

python3 - "$results" "$out" <<'PY'
import json, sys, statistics, os
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(data, w, m, key="clips_per_s"):
    v = [r["result"][key] for r in rows if r["data"] == data and r["workload"] == w and r["method"] == m]
    return statistics.median(v) if v else None
def rss(data, w, m):
    v = [r["result"]["peak_rss_mb"] for r in rows if r["data"] == data and r["workload"] == w and r["method"] == m]
    return max(v) if v else None
def mb_per_min(d):
    tot = frames = 0
    for v in os.listdir(d):
        idx = open(os.path.join(d, v, "video.idx")).read().split("\n")
        frames += int([l for l in idx if l.startswith("frames ")][0].split()[1])
        tot += sum(int(l.split("bytes=")[1]) for l in idx if l.startswith("chunk "))
    return tot / 1e6 / (frames / 30 / 60)
methods = sorted({(r["data"], r["method"]) for r in rows}, key=lambda x: (x[0] != "avion", x[1]))
print("| data | method | W1 clips/s | W2 clips/s | W1 decoded frames/clip | peak RSS MB |")
print("|---|---|---|---|---|---|")
for d, m in methods:
    w1, w2 = med(d, "w1", m), med(d, "w2", m)
    dec = med(d, "w1", m, "decoded_per_clip") if m.startswith(("tubelet", "decode")) else None
    print(f"| {d} | {m} | {w1:.1f} | {w2:.1f} | {'%.1f' % dec if dec else '-'} | {rss(d, 'w1', m):.0f} |")
for w in ("w1", "w2"):
    peers = [p for p in ("decord", "torchcodec", "torchcodec-native", "pyav") if med("avion", w, p)]
    best = max(peers, key=lambda p: med("avion", w, p)) if peers else None
    t_av, t_own, b = med("avion", w, "tubelet"), med("tubelet", w, "tubelet"), med("avion", w, "decode-only")
    print(f"\n{w}: on AVION-style chunks tubelet / decode-only = {t_av / b:.2f}x", end="")
    if best:
        bp = med("avion", w, best)
        print(f"; tubelet / best peer ({best}) = {t_av / bp:.2f}x; tubelet on its own chunks / best peer on AVION-style = {t_own / bp:.2f}x", end="")
    print()
print(f"\nbytes: avion {mb_per_min(sys.argv[2] + '/avion'):.2f} MB/min, tubelet {mb_per_min(sys.argv[2] + '/tubelet'):.2f} MB/min")
PY
