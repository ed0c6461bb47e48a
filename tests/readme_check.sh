#!/bin/sh
# ctest's test_readme: a new user's pass over the README's first two screens. Every ```sh block
# above the README's line "<!-- tests/readme_check.sh ..." runs as written, in a temporary
# directory whose build/tubelet is this build's program, with a temporary HOME (so `make
# install` fills its ~/.local); then each block's result is checked: the files it says it
# makes, the installed program, a C program built with the installed tubelet.pc, the Python
# package imported from ~/.local. Not run: `make demo` (minutes) and `make test` (this runs
# inside it): `make -n` shows each target exists and what it runs. Exits 77 (skipped) without
# opencv-doc's videos, which the README uses.
#   readme_check.sh SOURCE_DIR BUILD_DIR TUBELET PYTHON(- when no module) SANITIZE(ON|OFF) CC
set -eu
src=$1 build=$2 bin=$3 py=$4 sanitize=$5 cc=$6
videos=/usr/share/doc/opencv-doc/examples/data
if [ ! -f "$videos/Megamind.avi" ] || [ ! -f "$videos/vtest.avi" ]; then
    echo "test_readme: $videos lacks Megamind.avi or vtest.avi (opencv-doc): skipped"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "test_readme: FAIL: $*" >&2
    exit 1
}
want_file() {
    [ -s "$1" ] || fail "$2: no $1"
}
want_text() { # FILE TEXT WHAT
    grep -qF -- "$2" "$1" && return 0
    tail -n 20 "$1"
    fail "$3: '$2' not in its output (above, its end)"
}

# The blocks, one file each; the README's make commands aimed at this source and build.
awk -v dir="$tmp" '
    /^<!-- tests\/readme_check\.sh/ { marker = 1; exit }
    /^```sh$/ { n++; inside = 1; next }
    /^```/ && inside { inside = 0; next }
    inside { print > (dir "/block" n ".sh") }
    END { print n + 0 > (dir "/n_blocks"); print marker + 0 > (dir "/marker") }
' "$src/README.md"
[ "$(cat "$tmp/marker")" = 1 ] || fail "README.md has no '<!-- tests/readme_check.sh' line"
n_blocks=$(cat "$tmp/n_blocks")
[ "$n_blocks" -ge 3 ] || fail "README.md's first screens hold $n_blocks sh blocks, not 3 or more"
# (-o build: the build is there; demo and test only print their commands.) The variables
# expand when a block runs, not here:
# shellcheck disable=SC2016
for f in "$tmp"/block*.sh; do
    sed -E -i -e 's/^make (demo|test)([^#]*)(#.*)?$/tb_make -n \1\2 > "$TB_TMP\/make-\1.txt"/' \
        -e 's/^make install([^#]*)(#.*)?$/tb_make install\1/' "$f"
done

# python3 is the interpreter the module was built for; an instrumented module needs the
# sanitizer runtimes loaded first (as tests/python/run.sh does).
mkdir -p "$tmp/shim" "$tmp/home" "$tmp/work/build"
if [ "$py" = - ]; then
    echo "test_readme: this build has no Python module: the README's python3 lines are left out"
    for f in "$tmp"/block*.sh; do sed -i '/^python3 /d' "$f"; done
else
    {
        echo '#!/bin/sh'
        if [ "$sanitize" = ON ]; then
            asan=$("$cc" -print-file-name=libasan.so) ubsan=$("$cc" -print-file-name=libubsan.so)
            echo "export LD_PRELOAD=\"$asan $ubsan\""
            echo 'export ASAN_OPTIONS=detect_leaks=0'
        fi
        echo "exec \"$py\" \"\$@\""
    } > "$tmp/shim/python3"
    chmod +x "$tmp/shim/python3"
fi
ln -s "$bin" "$tmp/work/build/tubelet"

export TB_SRC="$src" TB_BUILD="$build" TB_TMP="$tmp" HOME="$tmp/home" PATH="$tmp/shim:$PATH"
export PYTHONDONTWRITEBYTECODE=1
unset MAKEFLAGS MFLAGS MAKELEVEL  # a make above (make test) is not this make's
i=1
while [ $i -le "$n_blocks" ]; do
    echo "test_readme: block $i:"
    sed 's/^/    /' "$tmp/block$i.sh"
    # shellcheck disable=SC2016
    { echo 'tb_make() { make -C "$TB_SRC" -o build BUILD="$TB_BUILD" "$@"; }'
      cat "$tmp/block$i.sh"; } > "$tmp/run$i.sh"
    if ! (cd "$tmp/work" && sh -e "$tmp/run$i.sh") > "$tmp/out$i.txt" 2>&1; then
        tail -n 30 "$tmp/out$i.txt"
        fail "block $i stopped"
    fi
    i=$((i + 1))
done
cat "$tmp"/out*.txt > "$tmp/out.txt"

# make demo and make test name what they run.
want_text "$tmp/make-demo.txt" "scripts/demo.sh" "make demo"
want_text "$tmp/make-test.txt" "ctest" "make test"

# make install: ~/.local holds the program, the library, every public header and tubelet.pc;
# `tubelet --help` ran the installed program.
local=$HOME/.local
want_file "$local/bin/tubelet" "make install"
want_file "$local/lib/libtubelet.a" "make install"
want_file "$local/lib/pkgconfig/tubelet.pc" "make install"
for h in "$src"/include/tubelet/*.h; do
    cmp -s "$h" "$local/include/tubelet/${h##*/}" || fail "make install: ${h##*/} not installed"
done
want_text "$tmp/out.txt" "usage: tubelet COMMAND" "tubelet --help"
PATH="$local/bin:$PATH" tubelet --help > "$tmp/help.txt"
want_text "$tmp/help.txt" "usage: tubelet COMMAND" "the installed tubelet --help"

# The installed header and library through tubelet.pc: a program that probes a video (FFmpeg),
# opens a ViT (the CPU backend: OpenBLAS, OpenMP) and asks the process count (MPI) links and
# counts the frames `tubelet probe` counts.
cat > "$tmp/tiny.c" << 'EOF'
#include <stdio.h>
#include <tubelet/dist.h>
#include <tubelet/model.h>
#include <tubelet/video.h>

int main(int argc, char **argv)
{
    struct tb_probe *p = NULL;
    tb_vit *m = NULL;
    struct tb_vit_config c = {.dim = 32, .depth = 1, .heads = 2, .patch = 8, .tubelet = 2,
                              .frames = 4, .height = 16, .width = 16, .classes = 3,
                              .pool = TB_POOL_MEAN, .pos = TB_POS_SINCOS};
    if (argc != 2 || tb_probe(&p, argv[1], 1) < 0 || tb_vit_open(&m, &c) < 0) {
        fprintf(stderr, "tiny: %s\n", tb_errmsg());
        tb_probe_free(&p);
        return 1;
    }
    printf("frames %lld params %lld processes %d\n", (long long)p->n_frames,
           (long long)tb_params_floats(tb_vit_params(m)), tb_dist_world());
    tb_vit_close(&m);
    tb_probe_free(&p);
    return 0;
}
EOF
flags=$(PKG_CONFIG_PATH="$local/lib/pkgconfig" pkg-config --cflags --libs tubelet) ||
    fail "pkg-config --cflags --libs tubelet"
want_text "$tmp/out.txt" "-ltubelet" "the README's pkg-config line"
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -o "$tmp/tiny" "$tmp/tiny.c" $flags || fail "cc tiny.c $flags"
"$tmp/tiny" "$videos/Megamind.avi" > "$tmp/tiny.txt" || fail "the program built with tubelet.pc"
frames=$("$bin" probe "$videos/Megamind.avi" | sed -n 's/^ *"frames": \([0-9]*\),*$/\1/p')
[ -n "$frames" ] || fail "tubelet probe printed no frame count"
want_text "$tmp/tiny.txt" "frames $frames params " "the program built with tubelet.pc"
want_text "$tmp/tiny.txt" " processes 1" "the program built with tubelet.pc"

# The Python package came from ~/.local (the user site), not from the build tree.
if [ "$py" != - ]; then
    "$tmp/shim/python3" -c 'import tubelet; print(tubelet.__file__)' > "$tmp/py.txt" ||
        fail "python3 -c 'import tubelet'"
    want_text "$tmp/py.txt" "$local/lib/" "import tubelet"
    ls "$(dirname "$(cat "$tmp/py.txt")")"/_tubelet*.so > /dev/null ||
        fail "no extension module beside $(cat "$tmp/py.txt")"
fi

# Bring your own videos: both prepared, the stats see them, a contact sheet, a checkpoint,
# an evaluation of every row.
mine=$tmp/work/mine
want_file "$mine/chunks/Megamind.mp4/video.idx" "tubelet prep"
want_file "$mine/chunks/vtest.mp4/video.idx" "tubelet prep"
rows=$(awk 'NR > 1 && NF' "$mine/actions.csv" | wc -l)
want_text "$tmp/out.txt" "$rows loaded, 0 skipped" "tubelet ann stats"
want_text "$tmp/out.txt" "2 of 2 videos readable" "tubelet ann stats"
want_file "$mine/sheet.png" "tubelet peek"
[ "$(head -c 4 "$mine/sheet.png" | od -An -c | tr -d ' ')" = "211PNG" ] ||
    fail "tubelet peek: $mine/sheet.png is not a PNG"
want_file "$mine/run/last.safetensors" "tubelet train"
want_text "$tmp/out.txt" "\"items\": $rows," "tubelet eval"
echo "test_readme: $n_blocks blocks of README.md ran as written and did what they say"
