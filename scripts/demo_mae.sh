#!/bin/sh
# Does VideoMAE pretraining pay on the embedded default? The synthetic EPIC-Kitchens-style
# dataset of `make demo` (64 videos here), a small ViT pretrained with --task mae on every
# training clip without labels (raw-pixel target, 120 epochs), then fine-tuned on a quarter of
# the labelled clips to tell the actor's noun (colour and shape, 16 classes); against the
# same fine-tuning from scratch, at equal steps, for 2 seeds. Prints both accuracies of each
# seed, then the margins and the seed-to-seed spreads. About 13 minutes on 2 cores.
# DEMO_LABEL=verb fine-tunes on the verbs instead (docs/PERFORMANCE.md, section 7).
# Usage: scripts/demo_mae.sh TUBELET_BINARY OUT_DIR
set -eu
bin=${1:-build/tubelet}
out=${2:-demo-mae}
label=${DEMO_LABEL:-noun}
t0=$(date +%s)
mkdir -p "$out"

model="--dim 128 --depth 4 --heads 4 --patch 8 --tubelet ${DEMO_TUBELET:-8} --frames 8"
model="$model --size 64 --flip false --qv-bias true"
pretrain=${DEMO_PRETRAIN:---mask-ratio 0.75 --norm-target false --lr 1e-4 --warmup-lr 1e-6 --min-lr 1e-6 --epochs 120}

echo "== 1/3 synth and prep: 64 videos of 60 s at 128x128 (shapes 1.6x), 15 s chunks"
[ -f "$out/data/annotations/EPIC_100_train.csv" ] ||
    "$bin" synth --out "$out/data" --videos 64 --seconds 60 --size 128x128 --actor-scale 1.6 \
        --preset ultrafast
[ -d "$out/chunks" ] ||
    "$bin" prep "$out"/data/videos/*.mp4 --out "$out/chunks" --short-side 80 \
        --preset ultrafast --jobs 2 > "$out/prep.log"
ann=$out/data/annotations
# The labelled quarter: every fourth training action.
awk 'NR == 1 || NR % 4 == 2' "$ann/EPIC_100_train.csv" > "$out/train_quarter.csv"

top1() { sed -n 's/.*validation top-1 \([0-9.]*\)%.*/\1/p' "$1" | tail -n 1; }
: > "$out/top1.txt"
for seed in 0 1; do
    echo "== 2/3 seed $seed: MAE pretraining on all $(($(wc -l < "$ann/EPIC_100_train.csv") - 1))" \
        "training clips (no labels)"
    rm -rf "$out/mae$seed" "$out/ft$seed" "$out/scratch$seed"
    "$bin" train --task mae --data "$out/chunks" --train "$ann/EPIC_100_train.csv" $model \
        --dec-dim 64 --dec-depth 2 --dec-heads 2 --batch 16 --beta2 0.95 --warmup-epochs 2 \
        $pretrain --seed "$seed" --log-every 500 --out "$out/mae$seed" > "$out/mae$seed.log" 2>&1
    echo "== 3/3 seed $seed: fine-tuning on $(($(wc -l < "$out/train_quarter.csv") - 1))" \
        "labelled clips ($label), from the MAE and from scratch"
    ft="--data $out/chunks --train $out/train_quarter.csv --val $ann/EPIC_100_validation.csv"
    ft="$ft --label $label $model --scale-min 0.8 --batch 16 --lr 5e-4 --warmup-epochs 5"
    ft="$ft --epochs 40 --eval-every 0 --log-every 1000 --seed $seed"
    "$bin" train $ft --init "$out/mae$seed/last.safetensors" --out "$out/ft$seed" \
        > "$out/ft$seed.log" 2>&1
    "$bin" train $ft --out "$out/scratch$seed" > "$out/scratch$seed.log" 2>&1
    pre=$(top1 "$out/ft$seed.log") scr=$(top1 "$out/scratch$seed.log")
    echo "$pre $scr" >> "$out/top1.txt"
    echo "   seed $seed: pretrained $pre%, from scratch $scr% (validation top-1 of the ${label}s)"
done
awk '{ p[NR] = $1; s[NR] = $2 }
END {
    d1 = p[1] - s[1]; d2 = p[2] - s[2]; dp = p[1] - p[2]; ds = s[1] - s[2]
    if (dp < 0) dp = -dp
    if (ds < 0) ds = -ds
    printf "   margins %+.2f and %+.2f points; seed-to-seed spread %.2f pretrained, %.2f from scratch\n", d1, d2, dp, ds
}' "$out/top1.txt"
t1=$(date +%s)
echo "demo-mae: $((t1 - t0)) s; logs and runs in $out"
