#!/bin/sh
# The main job on the embedded default: a synthetic EPIC-Kitchens-style dataset, prepared into
# 15 s chunks, then probed. Usage: scripts/demo.sh TUBELET_BINARY OUT_DIR
set -eu
bin=${1:-build/tubelet}
out=${2:-demo}
mkdir -p "$out"

echo "== 1/3 synth: 8 videos of 60 s, EPIC-Kitchens-100 style annotations"
"$bin" synth --out "$out/data" --videos 8 --seconds 60

echo "== 2/3 prep: 15 s chunks, short side 320, 30 fps, with an index per chunk"
"$bin" prep "$out"/data/videos/*.mp4 --out "$out/chunks" --jobs 2

echo "== 3/3 probe: what the reader will see"
"$bin" probe "$out/chunks/P01_01.mp4" | sed -n '1,12p;/"chunks"/,$p' | cut -c1-110

echo
echo "demo: annotations in $out/data/annotations, chunks in $out/chunks"
head -n 3 "$out/data/annotations/EPIC_100_train.csv"
