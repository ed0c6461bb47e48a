#!/bin/sh
# bench/gpu_cost.sh - an H200 time estimate of one ViT-B/16 training step (16 frames x 224,
# tubelet 2: N = 1568 + cls, batch 32, depth 12, bf16), per kernel, from counts measured on the
# emulated CUDA device (TBC_EMU_COST, src/tensor/cuda/emu/emulate_cost.h) by
# build/bench/gpu_cost_step. The emulator is too slow for the full step, so it runs 2 frames
# (N = 196 + cls = 197) at depths 1, 2 x batches 1, 2 (two at a time, about 5 minutes on 2
# cores); each kernel's launches, bytes, footprint, sectors, FLOPs and blocks (by name; in a
# cuBLASLt product's name the token dimension is BN, the patches BP, the batch B) are fitted
# bilinearly in depth and batch, then evaluated at depth 12 and batch 32 x r, r = 1569 / 197:
# the tokens of the batch, which is what all but attention see.
# Attention (attention_fwd_kernel, attention_bwd_kernel): its footprint and blocks scale as r, its FLOPs and
# re-reads (bytes beyond the footprint) as r^2 (each query block reads every key block).
# Usage: bench/gpu_cost.sh [BUILD_DIR] [--baseline FILE] (BUILD_DIR default: build; the
# runs go to $GPU_COST_DIR, default a temporary folder). Baseline: bench/gpu_cost_baseline.txt.
set -eu
build=build
baseline=
while [ $# -gt 0 ]; do
    case $1 in
    --baseline) baseline=$2; shift 2 ;;
    *) build=$1; shift ;;
    esac
done
bin=$build/bench/gpu_cost_step
if [ ! -x "$bin" ]; then
    echo "gpu_cost.sh: no $bin (cmake --build $build --target gpu_cost_step)" >&2
    exit 1
fi
dir=${GPU_COST_DIR:-$(mktemp -d)}
mkdir -p "$dir"
frames=2 size=224 n_run=197 n_full=1569
for lb in "1 1" "2 1" "1 2" "2 2"; do
    set -- $lb
    f=$dir/cost_L$1_B$2.tsv
    [ -s "$f" ] && continue
    echo "$bin $f.part 768 $1 12 $frames $size $2 16 2 && mv $f.part $f"
done | xargs -P2 -I{} sh -c {}

# Constants (H200 SXM): 4.8e12 B/s HBM3e and 989e12 dense bf16 tensor FLOP/s (NVIDIA H200
# datasheet). Efficiencies assumed: e_mem 0.8, the share of peak HBM bandwidth a streaming
# kernel reaches (STREAM-like copies on H100/H200 measure 80-90%); e_tc 0.7 for cuBLASLt
# GEMMs (large bf16 GEMMs on H100 run at ~650-750 of 989 TFLOP/s), 0.35 for our mma.sync
# flash attention (FlashAttention-2 reaches 35% of H100 peak: the FlashAttention-3 paper,
# Shah et al. 2024); a launch costs 2.5 us (kernel launch latency with no graph).
awk -v r="$(echo "$n_full $n_run" | awk "{print \$1 / \$2}")" -v nrun="$n_run" \
    -v rp="$(echo "$n_full $n_run" | awk "{print int((\$1 + 63) / 64) / int((\$2 + 63) / 64)}")" \
    -v base="$baseline" '
BEGIN { FS = "\t"; bw = 4.8e12; tc = 989e12; e_mem = 0.8; e_gemm = 0.7; e_attn = 0.35;
        launch = 2.5e-6; sms = 132 }
FNR == 1 { split(FILENAME, p, "_L"); split(p[2], q, "_B"); L = q[1] + 0; B = q[2] + 0; next }
{
    name = $1
    gsub(/^\(|\)$/, "", name); sub(/<.*/, "", name) # the instances of a template as one
    if (name ~ /^lt_matmul/) {           # the token and batch dimensions by name
        split(name, w, " "); split(w[2], d, "x"); s = ""
        for (i = 1; i <= 3; i++) {
            t = d[i] == B * nrun ? "BN" : d[i] == B * (nrun - 1) ? "BP" : d[i] == B ? "B" : d[i]
            s = s (i > 1 ? "x" : "") t
        }
        name = w[1] " " s (w[3] != "" ? " " w[3] : "")
    }
    split($2, g, ","); k = name SUBSEP L SUBSEP B; names[name] = 1
    n[k]++; by[k] += $5 + $6; ft[k] += $7 + $8; rq[k] += $9; sc[k] += $10; fl[k] += $11
    bl[k] += g[1] * g[2] * g[3]
}
function fit(a, nm, Bx,    q11, q21, q12, q22, d, b, c, a0) {
    q11 = a[nm, 1, 1]; q21 = a[nm, 2, 1]; q12 = a[nm, 1, 2]; q22 = a[nm, 2, 2]
    d = q22 - q21 - q12 + q11; b = q21 - q11 - d; c = q12 - q11 - d; a0 = q11 - b - c - d
    v = a0 + 12 * b + c * Bx + 12 * d * Bx
    return v < 0 ? 0 : v
}
END {
    if (base != "")
        while ((getline line < base) > 0)
            if (split(line, c, "|") > 10 && c[2] !~ /^ *kernel *$|---/) {
                gsub(/^ +| +$/, "", c[2]); gsub(/^\(|\)$/, "", c[2]); sub(/<.*/, "", c[2])
                gsub(/ /, "", c[12])
                gsub(/ /, "", c[4]); gsub(/ /, "", c[10])
                old[c[2]] = c[12]; if (c[10] == "mem") old_mem += c[4]
            }
    total = 0; nk = 0
    for (nm in names) {
        attn = nm ~ /^attention_(fwd|bwd)_kernel$/
        ln = fit(n, nm, 32)
        if (ln < 0.5) continue
        F = fit(ft, nm, 32 * r); sx = 32 * (attn ? r * rp : r)
        X = fit(by, nm, sx) - fit(ft, nm, sx)
        Bt = F + (X > 0 ? X : 0)
        Fl = fit(fl, nm, 32 * (attn ? rp * rp : r)); blk = fit(bl, nm, 32 * (attn ? rp : r))
        eff = fit(sc, nm, 32 * r) > 0 ? fit(rq, nm, 32 * r) / (32 * fit(sc, nm, 32 * r)) : 1
        e_tc = attn ? e_attn : e_gemm
        tm = Bt / (bw * e_mem); tf = Fl / (tc * e_tc); t = (tm > tf ? tm : tf) + ln * launch
        tl = F / (bw * e_mem); tl = (tl > tf ? tl : tf) + ln * launch
        row[++nk] = nm; T[nk] = t
        fmt = "| %-34s | %7.0f | %10.1f | %6.2f | %5.2f | %9.0f | %7.1f | %8.1f | %-3s | %-11s |"
        out[nk] = sprintf(fmt " %9.1f | %8.1f |",
            nm, ln, Bt / 1e6, F > 0 ? Bt / F : 0, eff, blk / ln, blk / ln / sms, Fl / 1e12,
            tm >= tf ? "mem" : "tc", (eff < 0.9 ? "sect " : "") (blk / ln < 264 ? "blocks" : ""),
            t * 1e6, tl * 1e6)
        total += t; ltotal += tl
        if (tm >= tf) {                  # memory-bound: the judged rules
            mem += Bt
            if (t < 50e-6)               # all its launches under 0.05% of the step
                small = small " " nm
            else if (eff < 0.9 || blk / ln < 264 || (F > 0 && Bt / F > 1.3))
                miss[++nmiss] = sprintf("%s (sect %.2f, %.0f blocks, %.2f x footprint)", nm,
                                        eff, blk / ln, F > 0 ? Bt / F : 0)
        }
    }
    for (i = 1; i <= nk; i++)            # by time, largest first
        for (j = i + 1; j <= nk; j++)
            if (T[j] > T[i]) {
                x = T[i]; T[i] = T[j]; T[j] = x
                x = out[i]; out[i] = out[j]; out[j] = x
                x = row[i]; row[i] = row[j]; row[j] = x
            }
    printf("ViT-B/16 step, 16x224, tubelet 2, N 1569, batch 32, depth 12, bf16: ")
    printf("H200 roofline estimate\n(HBM 4.8e12 B/s x 0.8, tensor 989e12 FLOP/s x 0.7 GEMM / ")
    printf("0.35 attention, 2.5 us a launch)\n\n")
    hfmt = "| %-34s | %7s | %10s | %6s | %5s | %9s | %7s | %8s | %-3s | %-11s | %9s | %8s |%s\n"
    printf(hfmt, "kernel",
        "launch", "MB moved", "/foot", "sect", "blk/lnch", "blk/SM", "TFLOP", "bnd", "flags", "us",
        "us@foot",
        base != "" ? " baseline us |" : "")
    rule = "------------------------------------|---------|------------|--------|-------|"
    rule = rule "-----------|---------|----------|-----|-------------|-----------|----------"
    printf("|%s|%s\n", rule, base != "" ? "-------------|" : "")
    for (i = 1; i <= nk; i++)
        printf("%s%s\n", out[i],
               base != "" ? sprintf(" %11s |", row[i] in old ? old[row[i]] : "-") : "")
    printf("\nstep total: %.1f ms (%.1f ms at the footprint)%s\n", total * 1e3, ltotal * 1e3,
           base != "" ? sprintf(" (baseline: %s)", btotal(base)) : "")
    printf("memory-bound kernels move %.1f GB%s\n", mem / 1e9,
           old_mem > 0 ? sprintf(" (baseline %.1f GB: %.2f of it)", old_mem / 1e3,
                                 mem / 1e6 / old_mem) : "")
    printf("memory-bound kernels under sector efficiency 0.9, 264 blocks or over 1.3 x their ")
    printf("footprint: %d\n", nmiss)
    for (i = 1; i <= nmiss; i++)
        printf("  %s\n", miss[i])
    printf("not judged (under 50 us a step in all: reductions to a few numbers):%s\n", small)
}
function btotal(f,    l, s) {
    close(f); s = "-"
    while ((getline l < f) > 0)
        if (l ~ /^step total:/) { sub(/^step total: /, "", l); s = l }
    return s
}
' "$dir"/cost_L1_B1.tsv "$dir"/cost_L2_B1.tsv "$dir"/cost_L1_B2.tsv "$dir"/cost_L2_B2.tsv
