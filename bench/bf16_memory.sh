#!/bin/sh
# bf16 mode's memory against fp32's, for the three ViT-B-sized models of the pairs scripts
# (bench_train, bench_mae, bench_clip; 2 threads, one step after a warm-up), from the step's
# memory plan (known before step 1: tb_*_plan's struct tb_plan_bytes): the activations (and
# scratch) live at the busiest tick, and the arena (with the gradients that live among
# them); and the process's peak RSS; bf16 over fp32; and the step's seconds. Memory, not
# speed: one run each (the seconds are one sample, for orientation).
# Usage: bench/bf16_memory.sh BUILD
set -eu
b=$1/bench
export OPENBLAS_CORETYPE=Haswell OMP_NUM_THREADS=2
get() { sed -n "s/.*\"$1\": *\([0-9.]*\).*/\1/p"; }
ratio() { echo "$1 $2" | awk '{ printf "%.3f", $1 / $2 }'; }
row() { # name command-tail (the precision goes last)
    name=$1
    shift
    f=$("$b/$@" fp32)
    h=$("$b/$@" bf16)
    fa=$(echo "$f" | get acts_mb) ha=$(echo "$h" | get acts_mb)
    fp=$(echo "$f" | get plan_mb) hp=$(echo "$h" | get plan_mb)
    fr=$(echo "$f" | get peak_rss_mb) hr=$(echo "$h" | get peak_rss_mb)
    echo "| $name | $fa | $ha | $(ratio "$ha" "$fa") | $fp | $hp | $(ratio "$hp" "$fp") |" \
        "$fr | $hr | $(ratio "$hr" "$fr") | $(echo "$f" | get seconds) | $(echo "$h" | get seconds) |"
}
echo "| model | activations MB fp32 | bf16 | bf16 / fp32 | arena MB fp32 | bf16 | bf16 / fp32 |" \
    "peak RSS MB fp32 | bf16 | bf16 / fp32 | step s fp32 | bf16 |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
row "cls ViT-B 16x224 b2" bench_train 768 12 12 16 224 2 1 16 2 0 0
row "mae ViT-B 16x224 b2" bench_mae 768 12 12 16 224 2 1 0.9 none 384 4 6 adamw 0 0
row "clip ViT-B 4x224 b4" bench_clip 768 12 12 16 4 224 4 256 512 8 12 1 0 0
