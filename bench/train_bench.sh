#!/bin/sh
# Training-step throughput and peak memory on the CPU, tubelet against PyTorch, same model
# (tests/ref/vit_ref.py's), same threads, in one run (docs/PERFORMANCE.md): ViT-T (192 wide, 12
# deep, 3 heads, 8x112x112 clips, batch 8), ViT-S (384/12/6, 16x112x112, batch 4), ViT-B
# (768/12/12, 16x224x224, batch 2). PyTorch 1.13 is Debian's python3-torch (OpenBLAS, explicit
# softmax attention, as AVION used); PyTorch 2.x is bench/venv's (MKL, SDPA).
# OPENBLAS_CORETYPE is set to Haswell for every command, as this environment sets it (OpenBLAS
# 0.3.21 does not recognise this processor and would otherwise fall back to its SSE3 kernels).
# PyTorch 2.x runs twice: as installed, and with THP_MEM_ALLOC_ENABLE=1, its opt-in to
# transparent huge pages (given only on request on this machine), which tubelet asks for
# itself for its big buffers; the comparison is against the faster of the two.
# tubelet runs twice: keeping every block's activations, and with --recompute (block inputs
# only); ViT-B a third time with --recompute-mlp 8 (8 of its 12 blocks recompute their MLP
# hidden layer: its peak under half of PyTorch's).
# First, bench_gemm: tubelet's sgemm against OpenBLAS's on the same shapes (bench/out/train/gemm.md),
# and bench_attention: the attention op's two CPU paths on the ViTs' shapes (attention.md).
# The summary gives each configuration's median clips/s and peak, then the medians of its
# per-round ratios: speed against the faster PyTorch 2.x run of the same round (as installed
# or with THP), memory against PyTorch 2.x as installed.
# Usage: bench/train_bench.sh [BUILD_DIR=build] [REPEATS=3] [THREADS=2]
# (ViT-B runs BASE_REPEATS rounds, 1 unless set: a round takes ~5 minutes on 2 cores.)
set -eu
build=${1:-build}
reps=${2:-3}
threads=${3:-2}
export OPENBLAS_CORETYPE=Haswell OMP_NUM_THREADS="$threads"
out=${BENCH_OUT:-bench/out}/train
mkdir -p "$out"
results=$out/results.jsonl
: > "$results"
"$build/bench/bench_gemm" 1 | tee "$out/gemm.md"
"$build/bench/bench_attention" 1 | tee "$out/attention.md"
for cfg in "tiny 192 12 3 8 112 8 0" "small 384 12 6 16 112 4 0" "base 768 12 12 16 224 2 8"; do
    set -- $cfg
    name=$1 mlp=$8
    shift
    set -- $1 $2 $3 $4 $5 $6
    n=$reps steps=3
    if [ "$name" = tiny ]; then steps=5; fi
    if [ "$name" = base ]; then n=${BASE_REPEATS:-1} steps=2; fi
    for r in $(seq "$n"); do
        echo "{\"model\": \"$name\", \"round\": $r, \"result\": $("$build/bench/bench_train" "$@" $steps)}" >> "$results"
        echo "{\"model\": \"$name\", \"round\": $r, \"result\": $("$build/bench/bench_train" "$@" $steps 16 2 1)}" >> "$results"
        if [ "$mlp" -gt 0 ]; then
            echo "{\"model\": \"$name\", \"round\": $r, \"result\": $("$build/bench/bench_train" "$@" $steps 16 2 0 "$mlp")}" >> "$results"
        fi
        echo "{\"model\": \"$name\", \"round\": $r, \"result\": $(/usr/bin/python3 bench/train_peer.py "$@" --steps $steps --threads "$threads")}" >> "$results"
        if [ -x bench/venv/bin/python ]; then
            echo "{\"model\": \"$name\", \"round\": $r, \"result\": $(bench/venv/bin/python bench/train_peer.py "$@" --steps $steps --threads "$threads" --sdpa)}" >> "$results"
            echo "{\"model\": \"$name\", \"round\": $r, \"result\": $(THP_MEM_ALLOC_ENABLE=1 bench/venv/bin/python bench/train_peer.py "$@" --steps $steps --threads "$threads" --sdpa)}" >> "$results"
        fi
    done
    echo "train_bench: $name done" >&2
done
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| model | implementation | clips/s | peak RSS MB |")
print("|---|---|---|---|")
for m in ("tiny", "small", "base"):
    impls = sorted({r["result"]["impl"] for r in rows if r["model"] == m})
    for i in impls:
        rs = [r["result"] for r in rows if r["model"] == m and r["result"]["impl"] == i]
        print(f"| {m} | {i} | {statistics.median(x['clips_per_s'] for x in rs):.4g} | "
              f"{max(x['peak_rss_mb'] for x in rs):.0f} |")
print()
print("| model | tubelet | speed / PyTorch 2.x (rounds) | memory / PyTorch 2.x |")
print("|---|---|---|---|")
for m in ("tiny", "small", "base"):
    mine = sorted({r["result"]["impl"] for r in rows
                   if r["model"] == m and r["result"]["impl"].startswith("tubelet")})
    for i in mine:
        speed, mem = [], []
        for rnd in sorted({r["round"] for r in rows if r["model"] == m}):
            got = {r["result"]["impl"]: r["result"] for r in rows
                   if r["model"] == m and r["round"] == rnd}
            peers = [v for k, v in got.items() if k.startswith("pytorch-2")]
            plain = [v for k, v in got.items() if k.startswith("pytorch-2") and
                     not k.endswith("-thp")]
            if i not in got or not peers:
                continue
            speed.append(got[i]["clips_per_s"] / max(p["clips_per_s"] for p in peers))
            if plain:
                mem.append(got[i]["peak_rss_mb"] / plain[0]["peak_rss_mb"])
        if speed:
            mem_txt = f"{statistics.median(mem):.2f}x" if mem else "-"
            print(f"| {m} | {i} | {statistics.median(speed):.2f}x "
                  f"({min(speed):.2f}-{max(speed):.2f}, {len(speed)}) | {mem_txt} |")
PY
