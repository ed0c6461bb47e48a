#!/bin/sh
# Two builds' training step side by side, for every configuration of bench/train_pairs.sh,
# mae_pairs.sh and clip_pairs.sh (fp32, 2 threads): bench_train, bench_mae and bench_clip's
# peak RSS and clips/s, ROUNDS interleaved pairs (new, then old), each pair's ratio new / old
# and their median. Peak memory does not depend on timing (one round says it); speed needs
# the rounds, the machine otherwise idle. The PyTorch peers of the pairs scripts are the same
# for both builds, so the ratio against them moves by these ratios.
# Usage: bench/plan_memory.sh NEW_BUILD OLD_BUILD [ROUNDS=1]
set -eu
new=$1
old=$2
rounds=${3:-1}
export OPENBLAS_CORETYPE=Haswell OMP_NUM_THREADS=2
get() { sed -n "s/.*\"$1\": *\([0-9.]*\).*/\1/p"; }
median() { tr ' ' '\n' | sed '/^$/d' | sort -n | awk '{ v[NR] = $1 }
    END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
row() { # name command-tail (run from each build's bench/)
    name=$1
    shift
    ra="" rb="" sa="" sb="" q=""
    for r in $(seq "$rounds"); do
        a=$("$new/bench/$@")
        b=$("$old/bench/$@")
        ra="$ra $(echo "$a" | get peak_rss_mb)" rb="$rb $(echo "$b" | get peak_rss_mb)"
        x=$(echo "$a" | get clips_per_s) y=$(echo "$b" | get clips_per_s)
        sa="$sa $x" sb="$sb $y" q="$q $(echo "$x $y" | awk '{ printf "%.3f", $1 / $2 }')"
    done
    ma=$(echo "$ra" | median) mb=$(echo "$rb" | median)
    echo "| $name | $mb | $ma | $(echo "$ma $mb" | awk '{ printf "%.3f", $1 / $2 }') |" \
        "$(echo "$sb" | median) | $(echo "$sa" | median) | $(echo "$q" | median) ($q ) |"
}
echo "| configuration | peak RSS MB before | after | after / before | clips/s before | after |" \
    "after / before, median (rounds) |"
echo "|---|---|---|---|---|---|---|"
row "cls ViT-T 8x112 b8" bench_train 192 12 3 8 112 8 3
row "cls ViT-S 16x112 b4" bench_train 384 12 6 16 112 4 2
row "cls ViT-B 16x224 b2" bench_train 768 12 12 16 224 2 1
row "cls ViT-B 16x224 b2 recompute-mlp 8" bench_train 768 12 12 16 224 2 1 16 2 0 8
# running-cell decoder masking needs an even grid of patches: ViT-B at 224 only, as mae_pairs
row "mae ViT-S 16x112 b4 none" bench_mae 384 12 6 16 112 4 2 0.9 none 384 4 6 adamw 0 0
row "mae ViT-S 16x112 b4 none fused" bench_mae 384 12 6 16 112 4 2 0.9 none 384 4 6 adamw 1 0
for dm in none running-cell; do
    row "mae ViT-B 16x224 b2 $dm" bench_mae 768 12 12 16 224 2 1 0.9 $dm 384 4 6 adamw 0 0
    row "mae ViT-B 16x224 b2 $dm fused" bench_mae 768 12 12 16 224 2 1 0.9 $dm 384 4 6 adamw 1 0
done
row "mae ViT-B 16x224 b2 fused recompute-mlp 8" bench_mae 768 12 12 16 224 2 1 0.9 none 384 4 6 adamw 1 8
row "clip ViT-S 4x112 b8" bench_clip 384 12 6 16 4 112 8 256 256 4 6 2
row "clip ViT-B 4x224 b4" bench_clip 768 12 12 16 4 224 4 256 512 8 12 1
row "clip ViT-B 4x224 b4 recompute-mlp 10" bench_clip 768 12 12 16 4 224 4 256 512 8 12 1 0 10
