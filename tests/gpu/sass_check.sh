#!/bin/sh
# tests/gpu/sass_check.sh - the compile gate on the CUDA backend's machine code (SASS) for every
# architecture it is built for, read with cuobjdump (NVIDIA's PyPI wheels nvidia-cuda-cuobjdump
# and nvidia-cuda-nvdisasm, which scripts/setup.sh installs into bench/venv where nvcc is):
# - no kernel uses local memory (LOCAL and STACK 0 in its resource usage; no LDL or STL
#   instruction in its SASS): a spill or a local array is a slow kernel;
# - the tensor-core kernels (budget lines marked hmma: the flash attention kernels; the products
#   are cuBLASLt's) hold HMMA instructions;
# - every kernel's registers and static shared memory are within its line of the checked-in
#   budget (tests/gpu/sass_budget.txt: a name pattern, registers, static shared bytes, flags);
#   a kernel no line matches fails too, so a new kernel gets a budget when it is added.
# Exit 0, 1 on a failure, 77 when no cuobjdump is found (said on stderr).
#   tests/gpu/sass_check.sh LIB BUDGET [CUOBJDUMP_DIR]     --print: the usage as budget lines
set -eu
print=0
if [ "${1:-}" = --print ]; then print=1; shift; fi
lib=$1
budget=$2
dir=${3:-}
if [ -z "$dir" ]; then
    root=$(cd "$(dirname "$0")/../.." && pwd)
    dir=$(ls -d "$root"/bench/venv/lib/python3*/site-packages/nvidia/cu*/bin 2>/dev/null | tail -n 1)
fi
if [ -z "$dir" ] || [ ! -x "$dir/cuobjdump" ] || [ ! -x "$dir/nvdisasm" ]; then
    echo "skip: no cuobjdump and nvdisasm (sh scripts/setup.sh installs them into bench/venv)" >&2
    exit 77
fi
PATH=$dir:$PATH
export PATH
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One line per kernel and architecture: arch name REG STACK SHARED LOCAL
cuobjdump --dump-resource-usage "$lib" 2>&1 | awk '
    /^Fatbin elf code/ { elf = 1 } /^Fatbin ptx code/ { elf = 0 }
    /arch = sm_/ { arch = $3 }
    elf && /Function .*:$/ { name = $2; sub(/:$/, "", name) }
    elf && /REG:/ && name != "" {
        r = s = sh = l = 0
        for (i = 1; i <= NF; i++) {
            split($i, kv, ":")
            if (kv[1] == "REG") r = kv[2]; if (kv[1] == "STACK") s = kv[2]
            if (kv[1] == "SHARED") sh = kv[2]; if (kv[1] == "LOCAL") l = kv[2]
        }
        print arch, name, r, s, sh, l; name = ""
    }' > "$tmp/usage"
# SASS: per kernel and architecture, the count of HMMA and of LDL/STL instructions.
cuobjdump --dump-sass "$lib" 2>&1 | awk '
    /arch = sm_/ { arch = $3 }
    /Function : / { if (name != "") print arch, name, h, l; name = $3; h = l = 0 }
    name != "" && /HMMA/ { h++ }
    name != "" && /[[:space:]](LDL|STL)(\.|[[:space:]])/ { l++ }
    END { if (name != "") print arch, name, h, l }' > "$tmp/sass"
if [ ! -s "$tmp/usage" ] || [ ! -s "$tmp/sass" ]; then
    echo "sass_check: cuobjdump read nothing from $lib" >&2
    exit 1
fi
if [ "$print" = 1 ]; then
    awk '{ if ($3 > r[$2]) r[$2] = $3; if ($5 > s[$2]) s[$2] = $5 }
         END { for (k in r) print k, r[k], s[k] }' "$tmp/usage" | sort
    exit 0
fi

awk -v budget="$budget" '
    BEGIN {
        while ((getline line < budget) > 0) {
            if (line ~ /^#/ || line ~ /^[[:space:]]*$/) continue
            n = split(line, f, /[[:space:]]+/)
            nb++; pat[nb] = f[1]; reg[nb] = f[2]; shm[nb] = f[3]; hm[nb] = (n >= 4 && f[4] == "hmma")
        }
        bad = 0
    }
    FILENAME ~ /usage$/ {
        k = 0
        for (i = 1; i <= nb && !k; i++) if (index($2, pat[i])) k = i
        if (!k) { printf "FAIL %s %s: no budget line matches (add one to %s)\n", $1, $2, budget; bad = 1; next }
        if ($4 > 0 || $6 > 0) { printf "FAIL %s %s: stack %d, local %d bytes\n", $1, $2, $4, $6; bad = 1 }
        if ($3 > reg[k]) { printf "FAIL %s %s: %d registers, budget %d\n", $1, $2, $3, reg[k]; bad = 1 }
        if ($5 > shm[k]) { printf "FAIL %s %s: %d static shared bytes, budget %d\n", $1, $2, $5, shm[k]; bad = 1 }
        want_h[$1 " " $2] = hm[k]; n_usage++
        next
    }
    {
        if ($4 > 0) { printf "FAIL %s %s: %d LDL/STL instructions\n", $1, $2, $4; bad = 1 }
        if (want_h[$1 " " $2] && $3 == 0) { printf "FAIL %s %s: no HMMA instruction\n", $1, $2; bad = 1 }
        if (want_h[$1 " " $2]) n_hmma++
        n_sass++
    }
    END {
        printf "sass_check: %d kernels x architectures, %d with tensor cores checked, %s\n",
               n_usage, n_hmma, bad ? "FAILED" : "ok"
        exit bad
    }' "$tmp/usage" "$tmp/sass"
