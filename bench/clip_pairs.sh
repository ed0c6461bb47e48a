#!/bin/sh
# Interleaved rounds of video-text contrastive training steps on the CPU: a tubelet build's
# bench_clip and PyTorch 2.x (bench/clip_peer.py: the same dual encoder on SDPA, fused AdamW)
# on the same model, batch shape and captions, one after the other in every round, so the
# machine's noise falls on both alike (docs/PERFORMANCE.md, section 9). Prints one JSON line
# per run, then the medians of the per-round ratios: tubelet's clips/s over PyTorch's of the
# same round, and its peak RSS over PyTorch's. The order within a round alternates (odd rounds
# tubelet first, even rounds PyTorch first), so neither side always runs on a machine the
# other has just warmed or cooled.
# Models (embed 256, 77-token captions, vocabulary 49408): small - video ViT 384/12/6, patch
# 16, 4x112x112, text 256 wide, 6 blocks, 4 heads, batch 8; base - ViT-B 768/12/12, patch 16,
# 4x224x224, text 512/12/8, batch 4.
# OPENBLAS_CORETYPE=Haswell for every command, as this environment sets it. BENCH_IDLE=S
# waits before every run until the CPUs have been at least 90% idle for S seconds in a row,
# for a machine another job uses in bursts (without it, runs follow each other at once).
# BENCH_PY: the Python with torch 2.x (default bench/venv/bin/python); PEER_FLAGS: more
# clip_peer.py flags (--mha, --foreach, --compile) for both models. BASE_RECOMPUTE_MLP=K
# (default 10; 0: none): each base round also runs tubelet with the video tower's
# --recompute-mlp K, as "tubelet-rmlpK".
# Usage: bench/clip_pairs.sh BUILD [ROUNDS=3] [BASE_ROUNDS=3] [THREADS=2]
set -eu
build=$1
rounds=${2:-3}
base_rounds=${3:-3}
threads=${4:-2}
export OPENBLAS_CORETYPE=Haswell OMP_NUM_THREADS="$threads"
py=${BENCH_PY:-bench/venv/bin/python}
[ -x "$py" ] || { echo "clip_pairs: no $py (sh bench/setup.sh, or BENCH_PY)" >&2; exit 1; }
[ -x "$build/bench/bench_clip" ] || { echo "clip_pairs: no $build/bench/bench_clip" >&2; exit 1; }
out=${BENCH_OUT:-bench/out}/clip
mkdir -p "$out"
results=$out/pairs.jsonl
: > "$results"
busy() { # CPU jiffies spent so far (user, nice, system, irq, softirq, steal), then all of them
    read -r _ u n s i w q sq st _ < /proc/stat
    echo $((u + n + s + q + sq + st)) $((u + n + s + i + w + q + sq + st))
}
wait_idle() {
    k=0
    while [ "$k" -lt "${BENCH_IDLE:-0}" ]; do
        set -- $(busy)
        sleep 1
        set -- "$@" $(busy)
        if [ $((($3 - $1) * 10)) -le $(($4 - $2)) ]; then k=$((k + 1)); else k=0; fi
    done
}
run() { # model round label command...
    m=$1 r=$2 label=$3
    shift 3
    wait_idle
    echo "{\"model\": \"$m\", \"round\": $r, \"run\": \"$label\", \"result\": $("$@")}" | tee -a "$results"
}
# model: dim depth heads patch frames size batch embed text-width text-heads text-depth steps
for cfg in "small 384 12 6 16 4 112 8 256 256 4 6 5" "base 768 12 12 16 4 224 4 256 512 8 12 3"; do
    set -- $cfg
    m=$1 steps=${13}
    shift
    set -- $1 $2 $3 $4 $5 $6 $7 $8 $9 ${10} ${11}
    n=$rounds
    [ "$m" = base ] && n=$base_rounds
    for r in $(seq "$n"); do
        for side in $([ $((r % 2)) = 1 ] && echo tubelet torch || echo torch tubelet); do
            if [ "$side" = tubelet ]; then
                run "$m" "$r" tubelet "$build/bench/bench_clip" "$@" "$steps"
                k=${BASE_RECOMPUTE_MLP:-10}
                if [ "$m" = base ] && [ "$k" -gt 0 ]; then
                    run "$m" "$r" "tubelet-rmlp$k" "$build/bench/bench_clip" "$@" "$steps" 0 "$k"
                fi
            else
                # shellcheck disable=SC2086
                run "$m" "$r" torch "$py" bench/clip_peer.py "$@" --steps "$steps" \
                    --threads "$threads" ${PEER_FLAGS:-}
            fi
        done
    done
done
"$py" - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def span(xs):
    return f"{statistics.median(xs):.2f}x ({min(xs):.2f}-{max(xs):.2f})"
print("| model | run | clips/s (median) | peak RSS MB | speed / PyTorch | memory / PyTorch "
      "| rounds |")
print("|---|---|---|---|---|---|---|")
for m in ("small", "base"):
    mine = [r for r in rows if r["model"] == m]
    torch = {r["round"]: r["result"] for r in mine if r["run"] == "torch"}
    labels = sorted({r["run"] for r in mine if r["run"] != "torch"}) + ["torch"]
    for label in labels:
        rs = [r for r in mine if r["run"] == label and r["round"] in torch]
        if not rs:
            continue
        speed = [r["result"]["clips_per_s"] / torch[r["round"]]["clips_per_s"] for r in rs]
        mem = [r["result"]["peak_rss_mb"] / torch[r["round"]]["peak_rss_mb"] for r in rs]
        print(f"| {m} | {rs[0]['result']['impl'] if label == 'torch' else label} "
              f"| {statistics.median(r['result']['clips_per_s'] for r in rs):.4g} "
              f"| {statistics.median(r['result']['peak_rss_mb'] for r in rs):.0f} "
              f"| {span(speed)} | {span(mem)} | {len(rs)} |")
    tub = [r["result"]["phase_s"] for r in mine if r["run"] == "tubelet"]  # default config
    if tub:
        print(f"| {m} | tubelet's phases, s per step (median) | " +
              ", ".join(f"{k} {statistics.median(p[k] for p in tub):.3f}" for k in tub[0]) +
              " | | | | |")
PY
