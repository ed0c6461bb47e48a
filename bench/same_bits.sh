#!/bin/sh
# Two builds, the same bits: short trainings of cls (plain, fused updates, --recompute,
# --recompute-mlp; and in bf16: plain, with drop path and head dropout, recomputed), mae (and
# in bf16) and clip (frozen and learned temperature, max-margin, fused; bf16) on one
# small synthetic dataset, by each build, and their checkpoints and logged losses compared
# byte for byte. For a change that must not move a number (a memory planner, a refactor):
# prints one line per run and exits 1 on any difference.
# Usage: bench/same_bits.sh NEW_BUILD OLD_BUILD [OUT=bench/out/same_bits]
set -eu
new=$1
old=$2
out=${3:-bench/out/same_bits}
mkdir -p "$out"
bin=$new/tubelet
[ -f "$out/data/annotations/EPIC_100_train.csv" ] ||
    "$bin" synth --out "$out/data" --videos 8 --seconds 20 --size 96x96 --preset ultrafast >/dev/null
[ -d "$out/chunks" ] ||
    "$bin" prep "$out"/data/videos/*.mp4 --out "$out/chunks" --short-side 64 --preset ultrafast \
        --jobs 2 >/dev/null
ann=$out/data/annotations
common="--data $out/chunks --train $ann/EPIC_100_train.csv --dim 64 --depth 3 --heads 2 --patch 8
 --frames 4 --size 32 --batch 4 --epochs 2 --eval-every 0 --log-every 1"
fail=0
check() { # name flags...
    name=$1
    shift
    for b in new old; do
        dir=$new
        [ $b = old ] && dir=$old
        rm -rf "$out/$name.$b"
        "$dir/tubelet" train $common "$@" --out "$out/$name.$b" >"$out/$name.$b.log" 2>&1 ||
            { echo "$name: $b build failed (see $out/$name.$b.log)"; fail=1; return; }
    done
    grep -o '"loss": *[-0-9.e]*' "$out/$name.new/metrics.jsonl" > "$out/$name.new.loss"
    grep -o '"loss": *[-0-9.e]*' "$out/$name.old/metrics.jsonl" > "$out/$name.old.loss"
    if cmp -s "$out/$name.new/last.safetensors" "$out/$name.old/last.safetensors" &&
        cmp -s "$out/$name.new.loss" "$out/$name.old.loss"; then
        echo "$name: same checkpoint bytes and losses ($(wc -l < "$out/$name.new.loss") logged)"
    else
        echo "$name: DIFFERENT"
        fail=1
    fi
}
check cls --label verb --tubelet 2
check cls-fused --label verb --tubelet 2 --fused-update --clip-grad 0
check cls-recompute --label verb --tubelet 2 --recompute
check cls-mlp --label verb --tubelet 2 --recompute-mlp 2
check cls-bf16 --label verb --tubelet 2 --precision bf16
check cls-bf16-drop --label verb --tubelet 2 --precision bf16 --recompute-mlp 2 --drop-path 0.2 \
    --head-dropout 0.5
check cls-bf16-recompute --label verb --tubelet 2 --precision bf16 --recompute --fused-update \
    --clip-grad 0
mae="--task mae --tubelet 2 --dec-dim 32 --dec-depth 2 --dec-heads 2"
check mae $mae
check mae-bf16 $mae --precision bf16
clip="--task clip --tubelet 2 --embed 32 --text-width 32 --text-heads 2 --text-depth 2 --context 16"
check clip $clip
check clip-learned $clip --learn-temperature --temperature 0.05
check clip-max-margin $clip --loss max-margin --learn-temperature
check clip-fused $clip --learn-temperature --fused-update --clip-grad 0
check clip-bf16 $clip --learn-temperature --precision bf16
exit $fail
