#!/bin/sh
# bench/setup.sh -- Python environment for the peer baselines (bench/peers.py).
#
# Creates bench/venv (gitignored) and installs pinned, mutually compatible
# versions of torch / torchvision / torchcodec / decord / PyAV / numpy, and
# tensorboard (bench/tfevents_check.py reads `tubelet train --tensorboard` runs
# with it), then checks that each one imports and prints the versions.
#
# Interpreter: Debian's /usr/bin/python3 (3.11.2), chosen explicitly.  The
# `python3` on PATH on the dev machines is a pyenv 3.11.7 shim; we do NOT use it
# so the venv does not depend on ~/.pyenv.  Override with PYTHON=/path/to/python3.
#
# Idempotent: a stamp file (bench/venv/.peers-stamp) records the pins; when it
# matches, nothing is installed and only the import check runs (a few seconds).
#
# Torch source: the CPU-only wheels of https://download.pytorch.org/whl/cpu are
# used when that index is reachable (TORCH_INDEX=auto, the default, probes it).
# On the tubelet dev/CI machines only PyPI is reachable, so the PyPI wheels are
# installed: those are the CUDA builds and pull the nvidia-* runtime wheels
# (several GB in bench/venv).  They run fine on a machine without a GPU; the
# benchmark uses the CPU only.  TORCH_INDEX=cpu forces the CPU index,
# TORCH_INDEX=pypi forces PyPI.  (Switching an existing venv between the two
# builds needs `rm -rf bench/venv` first: pip treats 2.14.1 and 2.14.1+cpu as
# the same pinned version.)
#
# torchcodec does not bundle FFmpeg: it dlopens the system FFmpeg 5.1 libraries
# (libavcodec59, libavformat59, libavutil57, libswscale6, libswresample4,
# libavfilter8, libavdevice59), which this script apt-installs if missing.
# decord 0.6.0 and PyAV (av) bundle their own FFmpeg builds.
set -eu

# ---- pins (a set tested together on Debian 12 / Python 3.11 / FFmpeg 5.1) ----
TORCH_VER=2.14.1
TORCHVISION_VER=0.29.1      # the torchvision release built against torch 2.14.1
TORCHCODEC_VER=0.17.0       # supports FFmpeg 4..9, torch >= 2.11
DECORD_VER=0.6.0
AV_VER=18.1.0               # newest PyAV with Python 3.11 wheels
NUMPY_VER=2.4.6             # newest numpy with Python 3.11 wheels
TENSORBOARD_VER=2.21.0      # pure-Python wheel; its event reader needs no TensorFlow
PINS="torch==$TORCH_VER torchvision==$TORCHVISION_VER torchcodec==$TORCHCODEC_VER decord==$DECORD_VER av==$AV_VER numpy==$NUMPY_VER tensorboard==$TENSORBOARD_VER"

CPU_INDEX=https://download.pytorch.org/whl/cpu
PYPI_INDEX=https://pypi.org/simple

BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
VENV=$BENCH_DIR/venv
PYTHON=${PYTHON:-/usr/bin/python3}
TORCH_INDEX=${TORCH_INDEX:-auto}
STAMP=$VENV/.peers-stamp

say() { printf 'setup.sh: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

# ---- Debian packages, installed only when missing ---------------------------
DEB_PKGS="python3-venv libavcodec59 libavformat59 libavutil57 libswscale6 libswresample4 libavfilter8 libavdevice59"
missing=""
for p in $DEB_PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing="$missing $p"
    fi
done
if [ -n "$missing" ]; then
    say "installing Debian packages:$missing"
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install:$missing"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi

[ -x "$PYTHON" ] || die "$PYTHON not found"

# ---- import check / version report ------------------------------------------
check() {
    OMP_NUM_THREADS=1 "$VENV/bin/python" - <<'EOF'
import sys
vers = {"python": sys.version.split()[0]}
import numpy; vers["numpy"] = numpy.__version__
import torch; vers["torch"] = torch.__version__
import torchvision; vers["torchvision"] = torchvision.__version__
from torchvision.transforms import v2  # noqa: F401
import torchcodec; vers["torchcodec"] = torchcodec.__version__
from torchcodec.decoders import VideoDecoder  # noqa: F401  (loads libtorchcodec + system FFmpeg)
try:
    from torchcodec._core import get_ffmpeg_library_versions
    vers["torchcodec_ffmpeg"] = str(get_ffmpeg_library_versions().get("ffmpeg_version", "?"))
except Exception:
    pass
import decord; vers["decord"] = decord.__version__
import av; vers["av"] = av.__version__
try:
    vers["av_ffmpeg"] = av.ffmpeg_version_info
except AttributeError:
    pass
import tensorboard; vers["tensorboard"] = tensorboard.__version__
from tensorboard.backend.event_processing import event_accumulator  # noqa: F401
for k, v in vers.items():
    print(f"{k:18s} {v}")
EOF
}

WANT_STAMP="$PINS python=$PYTHON"
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT_STAMP" ]; then
    say "venv up to date: $VENV"
    if check; then exit 0; fi
    say "import check failed; reinstalling"
    rm -f "$STAMP"
fi

# ---- venv --------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
    say "creating venv $VENV with $PYTHON ($("$PYTHON" --version 2>&1))"
    "$PYTHON" -m venv "$VENV"
fi
# The venv's own pip (Debian's 23.0.1) is used as is: no unpinned pip upgrade.
PIP="$VENV/bin/python -m pip"

# ---- torch / torchvision / torchcodec ------------------------------------------
use_cpu=0
case "$TORCH_INDEX" in
    cpu) use_cpu=1 ;;
    pypi) use_cpu=0 ;;
    auto)
        if "$VENV/bin/python" -c "import urllib.request,sys; urllib.request.urlopen('$CPU_INDEX/torch/', timeout=10)" >/dev/null 2>&1; then
            use_cpu=1
        fi ;;
    *) die "TORCH_INDEX must be auto, cpu or pypi (got $TORCH_INDEX)" ;;
esac
TORCH_PKGS="torch==$TORCH_VER torchvision==$TORCHVISION_VER torchcodec==$TORCHCODEC_VER numpy==$NUMPY_VER"
if [ "$use_cpu" -eq 1 ]; then
    say "installing torch stack from the CPU-only index ($CPU_INDEX)"
    # shellcheck disable=SC2086
    $PIP install -q --index-url "$CPU_INDEX" --extra-index-url "$PYPI_INDEX" $TORCH_PKGS
else
    say "CPU index not used; installing torch stack from PyPI (CUDA build, runs on CPU)"
    # shellcheck disable=SC2086
    $PIP install -q $TORCH_PKGS
fi

# ---- decoders, tensorboard -----------------------------------------------------------
# shellcheck disable=SC2086
$PIP install -q "decord==$DECORD_VER" "av==$AV_VER" "numpy==$NUMPY_VER"
$PIP install -q "tensorboard==$TENSORBOARD_VER" "numpy==$NUMPY_VER"

check || die "import check failed"
printf '%s\n' "$WANT_STAMP" > "$STAMP"
say "done: $VENV"
