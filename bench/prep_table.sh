#!/bin/sh
# The prep table of docs/PERFORMANCE.md: for 15 s and 300 s chunks and keyframe intervals
# 250 (x264's default, what AVION's chunks have), 60, 30 and 15, the bytes per minute of video
# and the mean number of frames a reader must decode for AVION's clips (W1: 4 frames over a
# random 2 s window; W2: 16 frames over 3 s), from the chunks' own indexes. Other settings are
# x264's defaults (--tune none); the last row per source is prep's default (fastdecode).
# Sources: a real camera video (opencv-doc's vtest.avi, looped 8x to 10.6 min) and a 10 min
# synthetic video. Usage: bench/prep_table.sh [BUILD_DIR]   (takes ~40 min on 2 cores)
set -eu
build=${1:-build}
bin=$build/tubelet
cost=$build/bench/decode_cost
out=${BENCH_OUT:-bench/out/prep}
mkdir -p "$out/src"

vtest=/usr/share/doc/opencv-doc/examples/data/vtest.avi
if [ ! -f "$out/src/vtest_loop.mp4" ]; then
    ffmpeg -nostdin -v error -y -stream_loop 7 -i "$vtest" -an -c:v libx264 -crf 14 \
        -preset veryfast "$out/src/vtest_loop.mp4.tmp.mp4"
    mv "$out/src/vtest_loop.mp4.tmp.mp4" "$out/src/vtest_loop.mp4"
fi
if [ ! -f "$out/src/synth/videos/P01_01.mp4" ]; then
    "$bin" synth --out "$out/src/synth" --videos 1 --seconds 600 >/dev/null
fi

printf '| source | chunk | GOP | tune | MB per min | W1 frames decoded (naive / reseek) | W2 frames decoded (naive / reseek) |\n'
printf '|---|---|---|---|---|---|---|\n'
row() { # src chunk gop tune
    name=$(basename "$1" .mp4)
    root="$out/c$2_g$3_$4"
    "$bin" prep "$1" --out "$root" --chunk-seconds "$2" --gop "$3" --tune "$4" >/dev/null
    w1=$("$cost" "$root/$name.mp4" 4 60)
    w2=$("$cost" "$root/$name.mp4" 16 90)
    echo "$w1 $w2" | awk -v s="$name" -v c="$2" -v g="$3" -v t="$4" '{
        for (i = 1; i <= NF; i++) { split($i, kv, "="); v[i] = kv[2] }
        printf "| %s | %s s | %s | %s | %.2f | %s / %s | %s / %s |\n",
               s, c, g, t, v[4] / 1e6, v[5], v[6], v[11], v[12] }'
}
for src in "$out/src/vtest_loop.mp4" "$out/src/synth/videos/P01_01.mp4"; do
    for chunk in 15 300; do
        for gop in 250 60 30 15; do
            row "$src" "$chunk" "$gop" none
        done
    done
    row "$src" 15 30 fastdecode
done
