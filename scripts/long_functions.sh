#!/bin/sh
# scripts/long_functions.sh - the functions of src/ longer than N lines (default 80), longest
# first, from ctags' first and last line of each (Universal Ctags: --fields=+ne). The house
# rule (docs/DEVELOPING.md, Conventions) allows them only in kernels and table-driven parsers.
#   sh scripts/long_functions.sh [N]
n=${1:-80}
cd "$(dirname "$0")/.." || exit 1
find src -name '*.c' -o -name '*.cu' -o -name '*.cpp' | sort |
    xargs ctags --fields=+ne --kinds-C=f --kinds-C++=f --language-force=C++ -o - 2>/dev/null |
    awk -F'\t' -v n="$n" '{
        s = 0; e = 0
        for (i = 4; i <= NF; i++) {
            if ($i ~ /^line:/) s = substr($i, 6)
            if ($i ~ /^end:/) e = substr($i, 5)
        }
        if (e - s + 1 > n) printf "%5d %s:%d %s\n", e - s + 1, $2, s, $1
    }' | sort -rn
