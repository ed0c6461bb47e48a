#!/bin/sh
# Installs, from Debian 12's packages, whatever tubelet's build, demo and tests need and this
# machine lacks. Idempotent: when everything is present it only runs dpkg-query and returns.
# Benchmark peers (decord, torchcodec, PyAV, PyTorch 2.x) are not here: bench/setup.sh.
set -eu

pkgs="build-essential cmake pkg-config
libavformat-dev libavcodec-dev libswscale-dev libavutil-dev libx264-dev
libopenblas-dev libopenblas-openmp-dev libopenmpi-dev openmpi-bin zlib1g-dev
ffmpeg opencv-doc python3 python3-dev python3-numpy python3-pytest python3-torch python3-regex
python3-pil python3-torchvision
clang libclang-rt-14-dev llvm"

missing=""
for p in $pkgs; do
    st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    case "$st" in
        *"ok installed") ;;
        *) missing="$missing $p" ;;
    esac
done

if [ -n "$missing" ]; then
    echo "setup: installing:$missing"
    SUDO=""
    if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# Debian's default BLAS alternative may be the reference BLAS (about 30x slower than
# OpenBLAS); make OpenBLAS the one numpy, PyTorch and tubelet load.
if command -v update-alternatives >/dev/null 2>&1; then
    arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
    for name in libblas.so.3 liblapack.so.3; do
        alt="libblas.so.3-$arch"
        [ "$name" = liblapack.so.3 ] && alt="liblapack.so.3-$arch"
        cand=$(update-alternatives --list "$alt" 2>/dev/null | grep openblas | head -n 1 || true)
        cur=$(readlink -f "/etc/alternatives/$alt" 2>/dev/null || true)
        if [ -n "$cand" ] && [ "$cur" != "$(readlink -f "$cand")" ]; then
            ${SUDO:-} update-alternatives --set "$alt" "$cand" >/dev/null 2>&1 || true
        fi
    done
fi

# The SASS gate (tests/gpu/sass_check.sh) reads the CUDA kernels' machine code with cuobjdump
# and nvdisasm, which Debian's CUDA packages lack: NVIDIA's PyPI wheels, into bench/'s virtual
# environment, wherever nvcc is (without them the gate says so and is skipped).
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    root=$(cd "$(dirname "$0")/.." && pwd)
    bin=$(ls -d "$root"/bench/venv/lib/python3*/site-packages/nvidia/cu*/bin 2>/dev/null | tail -n 1)
    if [ -z "$bin" ] || [ ! -x "$bin/cuobjdump" ] || [ ! -x "$bin/nvdisasm" ]; then
        if [ ! -x "$root/bench/venv/bin/pip" ]; then
            dpkg-query -W -f='${Status}' python3-venv 2>/dev/null | grep -q "ok installed" ||
                ${SUDO:-} apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
            /usr/bin/python3 -m venv "$root/bench/venv"
        fi
        "$root/bench/venv/bin/pip" install -q "nvidia-cuda-cuobjdump==13.5.*" \
            "nvidia-cuda-nvdisasm==13.5.*" ||
            echo "setup: cuobjdump and nvdisasm could not be installed: the SASS gate is skipped"
    fi
fi
exit 0
