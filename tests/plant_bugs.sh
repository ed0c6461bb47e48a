#!/bin/sh
# tests/plant_bugs.sh - what the CUDA tests catch: each bug of the list below is planted alone
# in a copy of the tree, which is built for the emulated device (TB_CUDA=EMU: no nvcc needed)
# and the named tests of `make test` are run on it; a plant is caught when one of them fails.
# (stdin is closed for the builds and tests: mpirun would read the list of plants.)
# Prints one line per plant and a summary; exits 1 if any plant was missed or would not apply.
# docs/CUDA.md keeps the table this prints. A few minutes per plant (the emulated backend is
# one translation unit; test_dist runs two MPI processes).
#   sh tests/plant_bugs.sh [NAME...]     (default: every plant)     env: JOBS, KEEP=1
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
src=$work/src
build=$work/build
mkdir -p "$src"
# The tree as it is now (tracked and untracked files git does not ignore).
(cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$src")
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTB_CUDA=EMU >/dev/null

# name @ file @ perl substitution (its first match in the whole file) @ ctest regex @ class
plants() {
    cat <<'EOF'
flash-barrier@src/tensor/cuda/attention.cu@s/\}\n        sync_block\(\);\n(        if \(t \+ 1 < ntiles\)\n            load_tile<FWD_BC, HS>\(sv)/}\n$1/@^test_backend$|attention_emulate@shared-memory race (issue 43's plant)
dq-plain-add@src/tensor/cuda/attention.cu@s/atomicAdd\(dst \+ qt \* 8, dq\[qt\]\[e\]\);/dst[qt * 8] += dq[qt][e];/@^test_backend$|attention_emulate@cross-block race (issue 43's plant)
wrong-lda@src/tensor/cuda/matmul.cu@s/N,    M,    K,\n                               1,    0,    K,/N,    M,    K,\n                               1,    0,    K - 1,/@^test_backend$@product record (issue 43's plant)
swapped-layout@src/tensor/cuda/matmul.cu@s/layout_create\(&e->a, lt_type\(g->ab_dt\), ar, ac, g->lda\)/layout_create(&e->a, lt_type(g->ab_dt), ac, ar, g->lda)/@^test_backend$@cuBLASLt descriptors (issue 43's plant)
no-comm-wait@src/tensor/cuda/backend.cu@s/ \|\| tbc_rt_wait\(c->comm, c->ev_compute\)//@^test_dist$@stream order (issue 43's plant)
bias-type@src/tensor/cuda/matmul.cu@s/const int32_t bias_t = lt_type\(g->d_dt\);/const int32_t bias_t = lt_type(g->ab_dt);/@^test_backend$@cuBLASLt types
no-alignment-prefs@src/tensor/cuda/matmul.cu@s/for \(int i = 0; i < 4 && !st; i\+\+\)/for (int i = 0; i < 0 \&\& !st; i++)/@^test_backend$@cuBLASLt alignment
no-bias-pointer@src/tensor/cuda/matmul.cu@s/        st = st \? st : lt->desc_set\(e->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof\(bias\)\);\n//@^test_backend$@cuBLASLt alignment
tree-no-barrier@src/tensor/cuda/step.cu@s/(SH_LD\(&tree\[threadIdx.x \+ half\]\)\);)\n        __syncthreads\(\);/$1/@^test_backend$|ops_emulate@shared-memory race
ln-no-barrier@src/tensor/cuda/layernorm.cu@s/    SH_ST\(&part\[1\]\[y\]\[x\], sb\);\n    __syncthreads\(\);/    SH_ST(&part[1][y][x], sb);/@^test_backend$|ops_emulate@shared-memory race
nccl-id-not-sent@src/tensor/cuda/backend.cu@s/    TBI_TRY\(tb_dist_bcast\(&msg, sizeof\(msg\), 0\)\);/    msg.ok = 1;/@^test_dist$@NCCL bootstrap
nccl-gather-count@src/tensor/cuda/backend.cu@s/all_gather\(x, all, n, TBC_NCCL_F32/all_gather(x, all, 2 * n, TBC_NCCL_F32/@^test_dist$@NCCL buffers
nccl-sum@src/tensor/cuda/backend.cu@s/TBC_NCCL_F32, TBC_NCCL_AVG/TBC_NCCL_F32, TBC_NCCL_SUM/@^test_dist$@NCCL arithmetic
no-overlap@src/train/loop.c@s/if \(f->world > 1 && !f->defer\) \{/if (f->world > 1 \&\& !f->defer \&\& 0) {/@^test_dist$@reduction overlap
zero-wrong-root@src/train/optim.c@s/                             opt->owner\[span\]\);/                             0);/@^test_dist$@ZeRO weights
zero-no-gather@src/train/loop.c@s/rc = tbi_optim_gather\(&r->opt\);\n    if \(rc == 0 && r->lead && improved/rc = 0;\n    if (rc == 0 \&\& r->lead \&\& improved/@^test_dist$@ZeRO checkpoint
stage-no-wait@src/tensor/cuda/backend.cu@s/if \(tbc_rt_event_sync\(c->stage_ev\[k\]\)\)/if (0)/@^test_backend$@pinned staging ring
early-read@src/tensor/cuda/attention.cu@s/cp_async_wait<1>\(\);/cp_async_wait<2>();/@^test_backend$|attention_emulate@asynchronous copy
EOF
}

want=" $* "
caught=0
missed=0
bad=0
printf '%-20s %-40s %s\n' plant class verdict
plants | while IFS='@' read -r name file expr tests class; do
    case "$want" in "  ") ;; *" $name "*) ;; *) continue ;; esac
    cp "$root/$file" "$src/$file"
    PLANT="$expr" perl -0777 -i -pe 'BEGIN { $n = 0 } $n += eval "$ENV{PLANT}"; END { exit($n == 1 ? 0 : 3) }' "$src/$file" ||
        { printf '%-20s %-40s %s\n' "$name" "$class" "DID NOT APPLY"; echo bad >> "$work/tally"; continue; }
    if ! cmake --build "$build" -j "${JOBS:-$(nproc)}" >"$work/$name.build" 2>&1 </dev/null; then
        printf '%-20s %-40s %s\n' "$name" "$class" "caught (does not build)"
        echo caught >> "$work/tally"
    elif (cd "$build" && ctest -R "$tests" >"$work/$name.log" 2>&1 </dev/null); then
        printf '%-20s %-40s %s\n' "$name" "$class" "MISSED ($tests passed)"
        echo missed >> "$work/tally"
    else
        why=$(grep -h -m1 -E '^emulate: |FAIL ' "$build"/Testing/Temporary/LastTest.log 2>/dev/null | cut -c1-110)
        printf '%-20s %-40s %s\n' "$name" "$class" "caught: $why"
        echo caught >> "$work/tally"
    fi
    cp "$root/$file" "$src/$file"
done
n_caught=$(grep -c caught "$work/tally" 2>/dev/null || true)
n_missed=$(grep -c -v caught "$work/tally" 2>/dev/null || true)
echo "plant_bugs: ${n_caught:-0} caught, ${n_missed:-0} missed or not applied"
[ "${n_missed:-0}" = 0 ]
