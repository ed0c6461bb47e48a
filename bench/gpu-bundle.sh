#!/usr/bin/env bash
# bench/gpu-bundle.sh - builds here (nvcc, no GPU needed) the one compressed bundle that
# bench/gpu-check.sh runs on a GPU machine, which has CUDA but no FFmpeg, OpenBLAS or MPI and
# no package registry: the programs (test_backend, the parity harness with every backend;
# tubelet-step, `tubelet step` alone; attention_check, the flash kernels against double
# precision; test_vit, test_mae and test_clip, whose steps on the GPU are compared with the
# CPU's bf16 mode, with tests/ref's PyTorch references beside them: the tests are built to
# read them from the bundle's root; test_collectives, NCCL between 2 processes with
# tests/launch_env.sh) and the shared libraries they need but the C runtime's. The CUDA runtime is
# linked into the programs (static); the driver and cuBLASLt (500 MB) are the GPU machine's
# own, cuBLASLt found with dlopen when the backend opens (libcublasLt.so.13 or .so.12, or
# TUBELET_CUBLASLT=PATH). Prints its size; exits 1 if it is over the 64 MiB a device call
# carries.
#   bench/gpu-bundle.sh [OUT]   OUT: default build-gpu-bundle/tubelet-gpu.tar.xz
#   env: BUILD (the CMake build to use, default build-gpu-bundle), JOBS
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$root/build-gpu-bundle}
out=${1:-$build/tubelet-gpu.tar.xz}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTB_CUDA=ON -DTB_TEST_SOURCE_DIR=. \
    -DTB_TEST_PYTHON=python3 \
    >/dev/null
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target tubelet_step_only test_backend \
    attention_check test_vit test_mae test_clip test_collectives >/dev/null
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
b=$stage/tubelet-gpu
mkdir -p "$b/bin" "$b/lib"
cp "$build/tubelet-step" "$build/tests/test_backend" "$build/tests/gpu/attention_check" \
    "$build/tests/test_vit" "$build/tests/test_mae" "$build/tests/test_clip" \
    "$build/tests/test_collectives" "$b/bin/"
mkdir -p "$b/tests/ref"
cp "$root"/tests/ref/*.py "$b/tests/ref/"
cp "$root/tests/launch_env.sh" "$b/tests/"
for exe in "$b"/bin/*; do
    ldd "$exe" | awk '/=> \// { print $3 }'
done | sort -u | grep -v -E '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|libcublasLt|libcuda)\.so' |
    while read -r lib; do cp -L "$lib" "$b/lib/"; done
cp "$root/bench/gpu-check.sh" "$b/"
git -C "$root" rev-parse HEAD > "$b/COMMIT" 2>/dev/null || echo unknown > "$b/COMMIT"
mkdir -p "$(dirname "$out")"
tar -C "$stage" -cf - tubelet-gpu | xz -6 -T0 > "$out"
bytes=$(stat -c %s "$out")
echo "gpu-bundle: $out, $((bytes / 1024)) KiB ($(ls "$b/lib" | wc -l) libraries: $(ls "$b/lib" | tr '\n' ' '))"
if [ "$bytes" -gt $((64 * 1024 * 1024)) ]; then
    echo "gpu-bundle: over the 64 MiB a device call carries" >&2
    exit 1
fi
