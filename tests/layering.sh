#!/bin/sh
# tests/layering.sh - the house's layering rule (docs/DEVELOPING.md, Layout), checked on every
# #include "dir/..." of src/: a layer includes only its own headers, the public ones
# (tubelet/) and those of the layers below it; a backend's folder (tensor/cpu, tensor/cuda)
# is private to it. Prints each broken rule (file:line and the include) and exits 1 on any.
# Planted check: it also runs the rule on a line it must refuse, so it cannot pass vacuously.
#   sh tests/layering.sh SOURCE_DIR
root=${1:-.}
# layer: the layers it may include (besides itself and tubelet/)
allowed() {
    case $1 in
    core) echo "" ;;
    video) echo "core" ;;
    data) echo "core video" ;;
    tensor) echo "core" ;;
    model) echo "core tensor" ;;
    metrics) echo "core video data" ;;
    dist) echo "core" ;;
    train) echo "core video data tensor model metrics dist" ;;
    cli) echo "core video data tensor model metrics dist train" ;;
    *) echo "?" ;;
    esac
}
# check FILE LINE INCLUDE: 0 if allowed, else prints why and returns 1
check() {
    file=$1 line=$2 inc=$3
    layer=$(echo "$file" | sed 's|^src/||; s|/.*||')
    target=$(echo "$inc" | sed 's|/.*||')
    sub=$(echo "$file" | sed 's|^src/tensor/\([a-z]*\)/.*|\1|')
    case $inc in
    tensor/cpu/* | tensor/cuda/*)
        priv=$(echo "$inc" | cut -d/ -f2)
        case $file in src/tensor/"$priv"/*) ;; *)
            echo "$file:$line: includes $inc, private to src/tensor/$priv"
            return 1 ;;
        esac ;;
    esac
    [ "$target" = tubelet ] || [ "$target" = "$layer" ] && return 0
    for a in $(allowed "$layer"); do
        [ "$a" = "$target" ] && return 0
    done
    echo "$file:$line: layer $layer includes $inc (it may include: $(allowed "$layer") and its own)"
    return 1
}
cd "$root" || exit 1
# the rule refuses what it must: a model including the CPU backend's kernels, core including
# train
if check src/model/x.c 1 tensor/cpu/kernels.h >/dev/null || check src/core/x.c 1 train/task.h >/dev/null; then
    echo "layering.sh: the check passes a broken rule"
    exit 1
fi
bad=0
n=0
for f in $(find src -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cpp' | sort); do
    grep -n '^#include "[a-z_]*/' "$f" | sed 's/^\([0-9]*\):#include "\([^"]*\)".*/\1 \2/' >"${TMPDIR:-/tmp}/layering.$$"
    while read -r line inc; do
        n=$((n + 1))
        check "$f" "$line" "$inc" || bad=1
    done <"${TMPDIR:-/tmp}/layering.$$"
done
rm -f "${TMPDIR:-/tmp}/layering.$$"
echo "layering.sh: $n includes checked"
exit $bad
