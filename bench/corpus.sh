#!/bin/sh
# The loader benchmarks' realistic corpus (docs/PERFORMANCE.md, "Encodings"): camera videos
# nobody here made (opencv-doc's vtest, box, cup and Megamind, cropped to 16:9 and looped to
# minutes) and tubelet synth's EPIC-style videos at 16:9, with one EPIC-Kitchens-100 CSV over
# all of them: synth's actions for its videos, and for the camera videos actions of 1-6 s
# (uniform, EPIC's typical lengths) one after another with gaps of 0-2 s. Prepared at short
# side 320 these are 568x320, AVION's frame size. Sources only: bench/encodings.sh prepares them.
# Usage: bench/corpus.sh BUILD_DIR OUT_DIR   (writes OUT_DIR/src/*.mp4, OUT_DIR/train.csv)
set -eu
build=$1
out=$2
src=$out/src
mkdir -p "$src"
data=/usr/share/doc/opencv-doc/examples/data
html=/usr/share/doc/opencv-doc/opencv4/html

# name input loops: crop the middle 16:9 band, loop, near-lossless (crf 14) so prep's encoding
# is what a benchmark measures.
loop() {
    [ -f "$src/$1.mp4" ] && return
    ffmpeg -nostdin -v error -y -stream_loop "$3" -i "$2" -an \
        -vf "crop=iw:trunc(iw*9/32)*2" -c:v libx264 -crf 14 -preset veryfast "$src/$1.tmp.mp4"
    mv "$src/$1.tmp.mp4" "$src/$1.mp4"
}
[ -f "$out/box.mp4" ] || gzip -dc "$html/box.mp4.gz" > "$out/box.mp4"
[ -f "$out/cup.mp4" ] || gzip -dc "$html/cup.mp4.gz" > "$out/cup.mp4"
loop vtest "$data/vtest.avi" 2        # 4.0 min, static surveillance camera
loop box "$out/box.mp4" 7             # 2.0 min, hand-held
loop cup "$out/cup.mp4" 15            # 2.2 min, hand-held
loop Megamind "$data/Megamind.avi" 12 # 2.4 min, film

[ -f "$out/syn/annotations/EPIC_100_train.csv" ] ||
    "$build/tubelet" synth --out "$out/syn" --videos 4 --seconds 120 --size 640x360 >/dev/null
for v in "$out"/syn/videos/*.mp4; do
    [ -e "$src/$(basename "$v")" ] || ln -s "$(cd "$(dirname "$v")" && pwd)/$(basename "$v")" "$src/"
done

# The camera videos' actions, drawn by a fixed seed.
csv=$out/train.csv
cp "$out/syn/annotations/EPIC_100_train.csv" "$csv.tmp"
for name in vtest box cup Megamind; do
    secs=$(ffprobe -v error -show_entries format=duration -of csv=p=0 "$src/$name.mp4")
    awk -v id="$name" -v len="$secs" -v seed="$(printf %s "$name" | cksum | cut -d' ' -f1)" '
    function ts(s) { return sprintf("%02d:%02d:%05.2f", int(s / 3600), int(s / 60) % 60, s - 60 * int(s / 60)) }
    BEGIN {
        srand(seed); t = rand() * 2; n = 0
        while (1) {
            d = 1 + 5 * rand()
            if (t + d > len - 0.1) break
            printf "%s_%d,P99,%s,%s,%s,%s,%d,%d,take thing,take,0,thing,0,\"[%sthing%s]\",\"[0]\"\n",
                id, n, id, ts(t), ts(t), ts(t + d), int(t * 30), int((t + d) * 30), "\047", "\047"
            n++; t += d + 2 * rand()
        }
    }' >> "$csv.tmp"
done
mv "$csv.tmp" "$csv"
echo "corpus: $(ls "$src" | wc -l) videos, $(($(wc -l < "$csv") - 1)) actions in $csv" >&2
