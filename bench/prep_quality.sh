#!/bin/sh
# Mean PSNR (dB, Y+U+V as ffmpeg's psnr filter averages them) of prepared videos against their
# source resampled by ffmpeg itself (fps=30, short side 320): what the chunks' encoding costs in
# quality. Usage: bench/prep_quality.sh SOURCE PREPARED_DIR...
set -eu
src=$1
shift
for dir in "$@"; do
    list=$(mktemp)
    dir=$(cd "$dir" && pwd)
    awk '/^chunk /{split($3, f, "="); print "file '\''" d "/" f[2] "'\''"}' d="$dir" \
        "$dir/video.idx" > "$list"
    log=$(mktemp)
    ffmpeg -nostdin -v error -f concat -safe 0 -i "$list" -i "$src" -lavfi \
        "[1]fps=30,scale=w=if(gt(iw\,ih)\,-2\,320):h=if(gt(iw\,ih)\,320\,-2)[r];[0][r]psnr=stats_file=$log" \
        -f null -
    awk -v d="$dir" '{for (i = 1; i <= NF; i++) if ($i ~ /^psnr_avg:/) { split($i, a, ":");
        s += a[2]; n++ }} END { printf "%s: mean PSNR %.2f dB over %d frames\n", d, s / n, n }' "$log"
    rm -f "$list" "$log"
done
