#!/usr/bin/env bash
# bench/gpu-check.sh - the CUDA attention on a real GPU: builds tests/gpu/attention_check with
# nvcc alone (no CMake; no FFmpeg or OpenBLAS: it needs only the CUDA runtime), then runs the
# reference's self-test, the correctness cases (out, lse, dq, dk, dv against double precision),
# the timing on ViT-B's shapes, and, where compute-sanitizer exists, memcheck and racecheck
# passes over the small cases. Logs go to $OUT (default build-gpu-check/). Exit 1 if a check fails, 77 if
# there is no GPU.
#   bench/gpu-check.sh        env: NVCC, ARCHS (default "80 86 90"), MEMCHECK=0 skips both sanitizers
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
ARCHS=${ARCHS:-80 86 90}
out=${OUT:-$root/build-gpu-check}
mkdir -p "$out"
gencode=()
for a in $ARCHS; do gencode+=(-gencode "arch=compute_$a,code=sm_$a"); done

nvidia-smi 2>&1 | head -15 | tee "$out/nvidia-smi.txt"
echo "== build"
"$NVCC" -std=c++17 -O3 -lineinfo -Werror all-warnings -Xcompiler -Wall,-Wextra \
    -I"$root/include" -I"$root/src" "${gencode[@]}" \
    "$root/tests/gpu/attention_check.cu" "$root/src/tensor/cuda/attention.cu" \
    -o "$out/attention_check" 2>&1 | tee "$out/build.txt"
[ -x "$out/attention_check" ] || { echo "gpu-check: build failed"; exit 1; }

status=0
echo "== reference self-test"
"$out/attention_check" --selftest 2>&1 | tee "$out/selftest.txt" || status=1
echo "== correctness"
"$out/attention_check" 2>&1 | tee "$out/correctness.txt"
rc=${PIPESTATUS[0]}
[ "$rc" = 77 ] && { echo "gpu-check: no usable GPU here, nothing verified"; exit 77; }
[ "$rc" = 0 ] || status=1
echo "== timing"
"$out/attention_check" --time 2>&1 | tee "$out/timing.txt" || status=1
if [ "${MEMCHECK:-1}" != 0 ]; then
    sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    if [ -x "$sanitizer" ]; then
        echo "== memcheck (small cases)"
        timeout 300 "$sanitizer" --tool memcheck --error-exitcode 3 "$out/attention_check" --quick \
            2>&1 | tail -25 | tee "$out/memcheck.txt"
        [ "${PIPESTATUS[0]}" = 0 ] || status=1
        echo "== racecheck (shared-memory hazards, small cases)"
        timeout 300 "$sanitizer" --tool racecheck --error-exitcode 3 "$out/attention_check" --quick \
            2>&1 | tail -25 | tee "$out/racecheck.txt"
        [ "${PIPESTATUS[0]}" = 0 ] || status=1
    else
        echo "== memcheck skipped: no compute-sanitizer"
    fi
fi
echo "gpu-check: $([ "$status" = 0 ] && echo ok || echo FAILED) (logs in $out)"
exit "$status"
