#!/bin/sh
# Resources over a long run (docs/ROBUSTNESS.md, "Long runs"): CLIPS clips through the loader
# (tubelet bench-load: training epochs of 4-frame random-resized crops of 32 x 32, batches of
# 8) with its open descriptors and resident memory printed every EVERY clips. Data: tubelet
# synth's EPIC-style dataset, 8 videos of 60 s at 96x64, prepared in 2-second chunks: 240 chunk
# files against the WORKERS x 4 each worker's reader keeps open, so the cache is full and
# evicting all along. Ends with the verdict: descriptors constant, and the resident memory at
# the end within 5% of its value at 10% of the run (10,000 clips of 100,000).
# Usage: bench/long_run.sh [BUILD_DIR=build] [CLIPS=100000] [EVERY=5000] [WORKERS=2]
set -eu
build=${1:-build}
clips=${2:-100000}
every=${3:-5000}
workers=${4:-2}
out=${BENCH_OUT:-bench/out}/long_run
bin=$build/tubelet
mkdir -p "$out"
[ -f "$out/syn/annotations/EPIC_100_train.csv" ] ||
    "$bin" synth --out "$out/syn" --videos 8 --seconds 60 --size 96x64 >/dev/null
"$bin" prep "$out"/syn/videos/*.mp4 --out "$out/data" --chunk-seconds 2 --short-side 64 \
    --jobs 2 >/dev/null
echo "# $(ls "$out"/data/*/*.mp4 | wc -l) chunk files, $workers workers x 4 kept open"
"$bin" bench-load --data "$out/data" --ann "$out/syn/annotations/EPIC_100_train.csv" \
    --clips "$clips" --every "$every" --workers "$workers" --batch 8 --size 32 | tee "$out/run.jsonl"
tail -n 1 "$out/run.jsonl" | awk '{
    for (i = 1; i <= NF; i++) { k = $i; gsub(/[":{},]/, "", k); v = $(i + 1); gsub(/[,}]/, "", v); f[k] = v }
    drift = 100 * (f["rss_mb_at_end"] - f["rss_mb_at_10pct"]) / f["rss_mb_at_10pct"]
    ok = f["open_fds_min"] == f["open_fds_max"] && drift <= 5 && drift >= -5
    printf "# descriptors %d..%d; rss %.1f MB at 10%%, %.1f MB at the end (%+.2f%%): %s\n",
        f["open_fds_min"], f["open_fds_max"], f["rss_mb_at_10pct"], f["rss_mb_at_end"], drift,
        ok ? "flat" : "NOT flat"
    exit !ok }'
