#!/bin/sh
# Encodings at AVION's frame size (docs/PERFORMANCE.md, "Encodings at 568x320"): bench/corpus.sh's
# videos prepared by tubelet prep with each encoding below (15 s chunks, short side 320: 568x320),
# then, in ROUNDS interleaved rounds, per encoding and workload (W1: 4 frames, W2: 16, AVION's
# segment sampling over the CSV's actions):
#   limit    bench/decode_limit: libavcodec decoding exactly the frames each clip needs, one
#            thread, clips per CPU-second;
#   tubelet  tubelet bench-load, 2 workers, batch 16, random-resized-crop 224: clips/s, and
#            clips per CPU-second (clips/s over the CPU it used: a share of a busy machine
#            counts as what it was);
#   peer     (avion encoding only, when PEER_PY names a Python with torch and torchcodec/decord)
#            bench/loader_peers.py, AVION's DataLoader path, 2 workers.
# MB per hour counts the chunk files. Prints a Markdown table of medians; raw lines in
# OUT/results.jsonl.
# Usage: bench/encodings.sh BUILD_DIR OUT_DIR [ROUNDS=3] [ENCODINGS="name:flags ..."]
set -eu
build=$1
out=$2
rounds=${3:-3}
encs=${4:-"avion:--gop=250,--tune=none default:--gop=30 g30nb:--gop=30,--no-bframes
g16nb:--gop=16,--no-bframes g8nb:--gop=8,--no-bframes g6nb:--gop=6,--no-bframes
g5nb:--gop=5,--no-bframes g4nb:--gop=4,--no-bframes g1:--gop=1"}
bin=$build/tubelet
sh "$(dirname "$0")/corpus.sh" "$build" "$out"
ann=$out/train.csv
names=""
: > "$out/encodings.txt"
for e in $encs; do
    name=${e%%:*}
    flags=$(echo "${e#*:}" | tr ',' ' ')
    names="$names $name"
    echo "$name $flags" >> "$out/encodings.txt"
    # shellcheck disable=SC2086
    "$bin" prep "$out"/src/*.mp4 --out "$out/enc/$name" --jobs 2 $flags >/dev/null
done

res=$out/results.jsonl
: > "$res"
emit() { # name workload kind json
    echo "{\"enc\": \"$1\", \"workload\": \"$2\", \"kind\": \"$3\", \"r\": $4}" >> "$res"
}
for round in $(seq "$rounds"); do
    for name in $names; do
        for w in w1 w2; do
            clips=1600
            [ $w = w2 ] && clips=480
            emit "$name" $w limit "$("$build/bench/decode_limit" "$out/enc/$name" "$ann" $w \
                $((clips / 4)) "$round")"
            emit "$name" $w tubelet "$("$bin" bench-load --data "$out/enc/$name" --ann "$ann" \
                --workload $w --workers 2 --batch 16 --clips $clips --seed "$round")"
            if [ "$name" = avion ] && [ -n "${PEER_PY:-}" ]; then
                t=4
                [ $w = w2 ] && t=16
                for impl in torchcodec decord; do
                    emit "$name" $w "peer-$impl" "$(PYTHONDONTWRITEBYTECODE=1 "$PEER_PY" \
                        bench/loader_peers.py --impl $impl --root "$out/enc/$name" --ann "$ann" \
                        --frames $t --size 224 --workers 2 --batch 16 --clips $((clips / 4)))"
                done
            fi
        done
    done
    echo "encodings: round $round of $rounds done" >&2
done

for name in $names; do
    bytes=$(find "$out/enc/$name" -name '*.mp4' -type f -printf '%s\n' | awk '{s += $1} END {print s}')
    echo "$name $bytes"
done > "$out/bytes.txt"
python3 - "$res" "$out/bytes.txt" "$out/enc" "$out/encodings.txt" <<'PY'
import glob, json, os, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
size = dict(l.split() for l in open(sys.argv[2]))
flags = dict(l.rstrip("\n").split(" ", 1) for l in open(sys.argv[4]))
def frames(enc):  # frames of the whole corpus, from the indexes
    n = 0
    for d in glob.glob(os.path.join(sys.argv[3], enc, "*.mp4")):
        for line in open(os.path.join(d, "video.idx")):
            if line.startswith("frames "):
                n += int(line.split()[1])
                break
    return n
def med(enc, w, kind, key):
    v = [r["r"][key] for r in rows if r["enc"] == enc and r["workload"] == w and r["kind"] == kind]
    return statistics.median(v) if v else None
print("| encoding | prep flags | MB per hour | workload | frames decoded per clip (limit) | "
      "decode-only limit, clips per CPU-s | tubelet, clips per CPU-s | tubelet / limit | "
      "tubelet clips/s, 2 workers | CPU % |")
print("|---|---|---|---|---|---|---|---|---|---|")
for e in dict.fromkeys(r["enc"] for r in rows):
    hours = frames(e) / 30 / 3600
    mbh = int(size[e]) / 1e6 / hours if hours else 0
    for w in ("w1", "w2"):
        lim = med(e, w, "limit", "clips_per_cpu_s")
        t = statistics.median(r["r"]["clips_per_s"] * 100 / r["r"]["cpu_percent"] for r in rows
                              if r["enc"] == e and r["workload"] == w and r["kind"] == "tubelet")
        print(f"| {e} | `{flags[e]}` | {mbh:.0f} | {w.upper()} | "
              f"{med(e, w, 'limit', 'decoded_per_clip'):.1f} | {lim:.1f} | {t:.1f} | "
              f"{t / lim:.2f} | {med(e, w, 'tubelet', 'clips_per_s'):.1f} | "
              f"{med(e, w, 'tubelet', 'cpu_percent'):.0f} |")
for w in ("w1", "w2"):
    for kind in ("peer-torchcodec", "peer-decord"):
        v = [r["r"]["clips_per_s"] * 100 / r["r"]["cpu_percent"] for r in rows
             if r["enc"] == "avion" and r["workload"] == w and r["kind"] == kind]
        if v:
            print(f"{w}: {kind} on the avion chunks, 2 workers: {med('avion', w, kind, 'clips_per_s'):.1f}"
                  f" clips/s, {statistics.median(v):.1f} clips per CPU-s")
PY
