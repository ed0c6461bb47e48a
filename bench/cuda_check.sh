#!/usr/bin/env bash
# bench/cuda_check.sh - the CUDA checks that need no GPU, for src/tensor/cuda/attention.cu on
# each architecture: (1) the SASS of every tensor-core kernel holds HMMA instructions
# (cuobjdump --dump-sass); (2) ptxas -v: registers, shared memory and spills per kernel, where
# any spill fails; also the self-test of tests/gpu/attention_check's reference and the kernels
# run on the CPU (tests/gpu/attention_emulate.cpp). Prints one table; exits 1 if a check fails.
# No GPU is touched (bench/gpu-check.sh runs the kernels on one).
#   bench/cuda_check.sh [BUILD_DIR]   BUILD_DIR: a CMake build whose libtubelet_cuda.a is
#                                     dumped (default: the object compiled here)
#   env: NVCC (nvcc on PATH, else /usr/local/cuda/bin/nvcc), CXX (c++), CUOBJDUMP (default the one
#        bench/setup.sh's venv bundles with Triton), ARCHS (default "80 86 90")
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CUOBJDUMP=${CUOBJDUMP:-$root/bench/venv/lib/python3.11/site-packages/triton/backends/nvidia/bin/cuobjdump}
ARCHS=${ARCHS:-80 86 90}
build=${1:-}
[ -x "$NVCC" ] || { echo "cuda_check: no nvcc ($NVCC)" >&2; exit 1; }
[ -x "$CUOBJDUMP" ] || { echo "cuda_check: no cuobjdump at $CUOBJDUMP (set CUOBJDUMP)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
src=$root/src/tensor/cuda/attention.cu
gencode=()
for a in $ARCHS; do gencode+=(-gencode "arch=compute_$a,code=sm_$a"); done
flags=(-std=c++17 -O3 -Werror all-warnings -Xcompiler -Wall,-Wextra -I"$root/include" -I"$root/src")

# One compile for every architecture: the object, and ptxas's report per kernel and arch.
t0=$(date +%s.%N)
"$NVCC" "${flags[@]}" "${gencode[@]}" -Xptxas -v -c "$src" -o "$tmp/attention.o" 2> "$tmp/ptxas.txt" ||
    { cat "$tmp/ptxas.txt" >&2; echo "cuda_check: attention.cu does not compile" >&2; exit 1; }
t1=$(date +%s.%N)
if grep -qi "warning" "$tmp/ptxas.txt"; then grep -i warning "$tmp/ptxas.txt" >&2; exit 1; fi

obj=$tmp/attention.o
if [ -n "$build" ]; then
    obj=$build/libtubelet_cuda.a
    [ -f "$obj" ] || { echo "cuda_check: no $obj (build the tubelet_cuda target)" >&2; exit 1; }
fi

# Dynamic shared memory (the kernels have no static shared memory) and the reference's
# self-test, from the check program built for the host alone (it touches no GPU for these).
"$NVCC" "${flags[@]}" -gencode arch=compute_80,code=sm_80 "$root/tests/gpu/attention_check.cu" \
    "$src" -o "$tmp/attention_check" 2> "$tmp/check_build.txt" ||
    { cat "$tmp/check_build.txt" >&2; echo "cuda_check: attention_check does not compile" >&2; exit 1; }
"$tmp/attention_check" --info > "$tmp/smem.txt"
selftest_ok=1
"$tmp/attention_check" --selftest > "$tmp/selftest.txt" || selftest_ok=0
# The kernels themselves on the CPU (tests/gpu/emulate.h): indexing, masking, pipelining.
CXX=${CXX:-c++}
cuda_inc=$(dirname "$(dirname "$(readlink -f "$NVCC")")")/include
emulate_ok=1
"$CXX" -std=c++17 -O2 -Wall -Wextra -Werror -Wno-unknown-pragmas -I"$cuda_inc" -I"$root/include" \
    -I"$root/src" "$root/tests/gpu/attention_emulate.cpp" -o "$tmp/attention_emulate" 2> "$tmp/emulate_build.txt" ||
    { cat "$tmp/emulate_build.txt" >&2; echo "cuda_check: attention_emulate does not compile" >&2; exit 1; }
"$tmp/attention_emulate" > "$tmp/emulate.txt" || emulate_ok=0

# The headers are shared with C: they must compile as C11 too.
header_ok=1
printf '#include "tensor/cuda/cuda_attention.h"\n#include "tensor/cuda/cuda_ops.h"\n' > "$tmp/header.c"
"${CC:-cc}" -std=c11 -Wall -Wextra -Wstrict-prototypes -Werror -I"$cuda_inc" -I"$root/include" \
    -I"$root/src" -c "$tmp/header.c" -o "$tmp/header.o" 2> "$tmp/header.txt" || header_ok=0

for a in $ARCHS; do
    "$CUOBJDUMP" --dump-sass -arch "sm_$a" "$obj" > "$tmp/sass_$a.txt" ||
        { echo "cuda_check: no sm_$a code in $obj" >&2; exit 1; }
done

# A kernel's name from its mangled one: _Z20attention_fwd_kernelILi64EEv... ->
# attention_fwd_kernel<64> (the length prefix says where the name ends).
demangle() {
    local m=$1 len rest name
    len=$(echo "$m" | sed -E 's/^_Z([0-9]+).*/\1/')
    rest=${m#_Z"$len"}
    name=${rest:0:$len}
    rest=${rest:$len}
    if [[ $rest =~ ^ILi([0-9]+)E ]]; then name="$name<${BASH_REMATCH[1]}>"; fi
    echo "$name"
}

status=0
printf '%-26s %-6s %5s %11s %13s %6s  %s\n' kernel arch regs "smem bytes" "spill st/ld" HMMA check
for a in $ARCHS; do
    awk -v arch="sm_$a" '
        /Compiling entry function/ { match($0, /function .[^'"'"']+/); name = substr($0, RSTART + 10, RLENGTH - 10);
                                     on = index($0, "for '"'"'" arch "'"'"'") > 0 }
        on && /spill stores/ { st[name] = $5; ld[name] = $9 }
        on && /Used [0-9]+ registers/ { match($0, /Used [0-9]+/); regs[name] = substr($0, RSTART + 5, RLENGTH - 5); order[++n] = name }
        END { for (i = 1; i <= n; i++) print order[i], regs[order[i]], st[order[i]], ld[order[i]] }
    ' "$tmp/ptxas.txt" > "$tmp/regs_$a.txt"
    awk '/Function :/ { f = $3; n[f] = 0 } /HMMA/ { n[f]++ } END { for (k in n) print k, n[k] }' \
        "$tmp/sass_$a.txt" > "$tmp/hmma_$a.txt"
    while read -r mangled regs st ld; do
        name=$(demangle "$mangled")
        hmma=$(awk -v f="$mangled" '$1 == f { print $2 }' "$tmp/hmma_$a.txt")
        hmma=${hmma:-0}
        hs=$(echo "$name" | sed -nE 's/.*<([0-9]+)>/\1/p')
        smem=0
        case $name in
        attention_fwd_kernel*) smem=$(sed -nE "s/^HS $hs: forward ([0-9]+) .*/\1/p" "$tmp/smem.txt") ;;
        attention_bwd_kernel*) smem=$(sed -nE "s/^HS $hs: .*backward ([0-9]+) .*/\1/p" "$tmp/smem.txt") ;;
        esac
        check=ok
        if [ "$st" != 0 ] || [ "$ld" != 0 ]; then check="FAIL: spills"; status=1; fi
        case $name in
        attention_fwd_kernel* | attention_bwd_kernel*)
            if [ "$hmma" -eq 0 ]; then check="FAIL: no HMMA"; status=1; fi ;;
        *) hmma="-" ;; # the backward's elementwise pre and post passes use no tensor cores
        esac
        printf '%-26s %-6s %5s %11s %13s %6s  %s\n' "$name" "sm_$a" "$regs" "$smem" "$st/$ld" "$hmma" "$check"
    done < "$tmp/regs_$a.txt"
done
sed 's/^/reference self-test: /' "$tmp/selftest.txt"
[ "$selftest_ok" = 1 ] || status=1
if [ "$header_ok" = 1 ]; then
    echo "cuda_attention.h and cuda_ops.h as C11: ok"
else
    cat "$tmp/header.txt"
    status=1
fi
if [ "$emulate_ok" = 1 ]; then
    echo "CPU emulation of the kernels: $(tail -1 "$tmp/emulate.txt")"
else
    grep -v ' ok$' "$tmp/emulate.txt"
    status=1
fi
printf 'compile of attention.cu for %s: %.1f s; SASS from %s\n' "$(echo $ARCHS | sed 's/\([0-9]*\)/sm_\1/g')" \
    "$(echo "$t1 - $t0" | bc)" "$([ -n "$build" ] && echo "$obj" || echo "that object")"
if [ "$status" = 0 ]; then echo "cuda_check: ok"; else echo "cuda_check: FAILED"; fi
exit "$status"
