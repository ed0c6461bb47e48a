#!/bin/sh
# Two builds' training step, side by side: for cls, mae and clip at ViT-S (and cls at ViT-T),
# ROUNDS interleaved pairs of the new and the old build's bench_train / bench_mae / bench_clip
# (fp32, 2 threads), the clips/s ratio new / old of each pair and their median. For a change
# that must not cost speed; the PyTorch peers are the same for both builds, so the ratio
# against them moves by this ratio.
# Usage: bench/build_pairs.sh NEW_BUILD OLD_BUILD [ROUNDS=5]
set -eu
export OPENBLAS_CORETYPE=Haswell OMP_NUM_THREADS=2
new=$1
old=$2
rounds=${3:-5}
get() { sed -n 's/.*"clips_per_s": *\([0-9.]*\).*/\1/p'; }
run() { # name command-tail
    name=$1
    shift
    rs=""
    for r in $(seq "$rounds"); do
        a=$("$new/bench/$@" | get)
        b=$("$old/bench/$@" | get)
        rs="$rs $(echo "$a $b" | awk '{ printf "%.3f", $1 / $2 }')"
    done
    med=$(echo "$rs" | tr ' ' '\n' | sed '/^$/d' | sort -n | awk '{ v[NR] = $1 }
        END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
    echo "$name: new / old median $med (rounds:$rs)"
}
run "cls ViT-S 16x112 b4" bench_train 384 12 6 16 112 4 2
run "mae ViT-S 16x112 b4" bench_mae 384 12 6 16 112 4 2 0.9 none 384 4 6 adamw 0 0
run "clip ViT-S 4x112 b8" bench_clip 384 12 6 16 4 112 8 256 256 4 6 2
run "cls ViT-T 8x112 b8" bench_train 192 12 3 8 112 8 3
