#!/bin/sh
# Does video-text contrastive pretraining learn on the embedded default? `make demo`'s
# synthetic EPIC-Kitchens-style dataset (64 videos here) with its narrations ("move red
# square left"), a small dual encoder (LaViLa's layout: a CLIP video tower over 4 frames in
# 4-frame tubelets, a causal text tower, InfoNCE at temperature 0.07) trained from scratch on
# the training clips and their narrations, then evaluated zero-shot on the held-out videos:
# EK-100 multi-instance retrieval (mAP, nDCG) beside the same code's score for a random
# ranking, and verb classification by the class names (chance 12.5%). About 7 minutes on 2
# cores. DEMO_TUBELET=1 gives AVION's per-frame patches, which learn the nouns but, from
# scratch and in this budget, not the verbs (docs/PERFORMANCE.md, section 8).
# Usage: scripts/demo_clip.sh TUBELET_BINARY OUT_DIR
set -eu
bin=${1:-build/tubelet}
out=${2:-demo-clip}
t0=$(date +%s)
mkdir -p "$out"

echo "== 1/3 synth and prep: 64 videos of 60 s at 128x128 (shapes 1.6x), 15 s chunks"
[ -f "$out/data/annotations/EPIC_100_train.csv" ] ||
    "$bin" synth --out "$out/data" --videos 64 --seconds 60 --size 128x128 --actor-scale 1.6 \
        --preset ultrafast
[ -d "$out/chunks" ] ||
    "$bin" prep "$out"/data/videos/*.mp4 --out "$out/chunks" --short-side 80 \
        --preset ultrafast --jobs 2 > "$out/prep.log"
ann=$out/data/annotations

echo "== 2/3 contrastive pretraining on $(($(wc -l < "$ann/EPIC_100_train.csv") - 1)) clips" \
    "and their narrations; zero-shot evaluation on" \
    "$(($(wc -l < "$ann/EPIC_100_validation.csv") - 1)) held-out clips"
rm -rf "$out/run"
"$bin" train --task clip --data "$out/chunks" --train "$ann/EPIC_100_train.csv" \
    --val "$ann/EPIC_100_validation.csv" --class-names "$ann/EPIC_100_verb_classes.csv" \
    --dim 128 --depth 4 --heads 4 --patch 8 --tubelet ${DEMO_TUBELET:-4} --frames 4 --size 64 --scale-min 0.8 \
    --embed 64 --text-width 128 --text-heads 4 --text-depth 2 --context 16 \
    --batch 32 --epochs ${DEMO_EPOCHS:-60} --seed ${DEMO_SEED:-0} --lr 5e-4 --warmup-epochs 2 --min-lr 1e-5 --wd 0.05 \
    --beta2 0.98 --eval-every 0 --log-every 20 --out "$out/run" 2>&1 | tee "$out/train.log" |
    grep -E "eval after|zero-shot|clip:" || true
echo "== 3/3 the result (validation, zero-shot)"
tail -n 1 "$out/run/metrics.jsonl"
t1=$(date +%s)
echo "demo-clip: $((t1 - t0)) s; logs and runs in $out"
