#!/bin/sh
# The main job on the embedded default, the whole system on the CPU: a synthetic
# EPIC-Kitchens-style dataset whose verbs need motion (move left/right/up/down, rotate either
# way, grow, shrink), prepared into indexed chunks, a small video ViT trained to tell the verbs
# apart, then evaluated on held-out videos. About 7 minutes on 2 cores. The shapes are drawn
# 1.6x the synth's default size: at the default (~11 pixels across in the 64x64 clips, about
# one 8x8 patch) this model does not learn the direction of a turn (docs/PERFORMANCE.md, 5).
# Usage: [DEMO_PRECISION=bf16] scripts/demo.sh TUBELET_BINARY OUT_DIR (DEMO_PRECISION: train
# and evaluate in --precision fp32, the default, or bf16; docs/PRECISION.md)
set -eu
bin=${1:-build/tubelet}
out=${2:-demo}
precision=${DEMO_PRECISION:-fp32}
t0=$(date +%s)
mkdir -p "$out"
rm -rf "$out/run"

echo "== 1/4 synth: 128 videos of 60 s at 128x128 (shapes 1.6x the default size), EPIC-Kitchens-100"
echo "   style annotations"
"$bin" synth --out "$out/data" --videos 128 --seconds 60 --size 128x128 --actor-scale 1.6 \
    --preset ultrafast

echo "== 2/4 prep: 15 s chunks, short side 80, 30 fps, an index per chunk"
"$bin" prep "$out"/data/videos/*.mp4 --out "$out/chunks" --short-side 80 --preset ultrafast \
    --jobs 2
t1=$(date +%s)

echo "== 3/4 train: ViT (128 wide, 4 deep, 8x64x64 clips, 8x8x8 tubelets) on the verbs, $precision"
"$bin" train --data "$out/chunks" --train "$out/data/annotations/EPIC_100_train.csv" \
    --val "$out/data/annotations/EPIC_100_validation.csv" --label verb \
    --dim 128 --depth 4 --heads 4 --patch 8 --tubelet 8 --frames 8 --size 64 \
    --flip false --scale-min 0.8 --batch 16 --lr 0.0005 --warmup-epochs 2 --epochs 35 \
    --eval-every 5 --precision "$precision" \
    --log-every 50 --out "$out/run"
t2=$(date +%s)

echo "== 4/4 eval: the checkpoint on the held-out videos"
"$bin" eval --ckpt "$out/run/last.safetensors" --data "$out/chunks" \
    --val "$out/data/annotations/EPIC_100_validation.csv" --label verb --precision "$precision" \
    --predictions "$out/predictions.csv" > "$out/eval.json"
t3=$(date +%s)

echo
echo "Validation top-1 over training (held-out videos, 8 verbs, chance 12.5%):"
awk -F'[:,}]' '/"eval_epoch"/ {
        for (i = 1; i < NF; i++) {
            if ($i ~ /"eval_epoch"/) e = $(i + 1) + 0
            if ($i ~ /"top1"/) a = $(i + 1) * 100
        }
        bar = ""
        for (j = 0; j < int(a / 2 + 0.5); j++) bar = bar "#"
        printf "  epoch %3d  %5.1f%%  %s\n", e, a, bar
    }' "$out/run/metrics.jsonl"
awk -F'[:,}]' '{
        for (i = 1; i < NF; i++) {
            if ($i ~ /"items"/) n = $(i + 1) + 0
            if ($i ~ /"top1"/) a = $(i + 1) * 100
            if ($i ~ /"top5"/) b = $(i + 1) * 100
        }
        printf "\ndemo: top-1 %.1f%%, top-5 %.1f%% on %d held-out clips\n", a, b, n
    }' "$out/eval.json"
echo
echo "Confusion on the held-out clips (rows: true verb, columns: predicted):"
awk -F, 'FNR == 1 { f++; next }
    f == 1 { name[$1] = $2; k = $1 + 1 > k ? $1 + 1 : k; next }
    { c[$2, $3]++; n[$2]++ }
    END {
        printf "  %-22s", ""
        for (p = 0; p < k; p++) printf " %4d", p
        printf "   right\n"
        for (y = 0; y < k; y++) {
            printf "  %d %-20s", y, name[y]
            for (p = 0; p < k; p++) printf " %4d", c[y, p]
            printf "   %5.1f%%\n", n[y] ? 100 * c[y, y] / n[y] : 0
        }
    }' "$out/data/annotations/EPIC_100_verb_classes.csv" "$out/predictions.csv"
echo "demo: data $((t1 - t0)) s, training $((t2 - t1)) s, evaluation $((t3 - t2)) s," \
    "total $((t3 - t0)) s; run directory $out/run"
