#!/bin/sh
# prep --plan against what it predicts (docs/PERFORMANCE.md, "prep --plan against bench-load"):
# on bench/corpus.sh's corpus, time `tubelet prep --plan` (W1), then prepare the corpus with the
# encoding it chose and with the others named below, run `tubelet bench-load` (W1, 2 workers,
# batch 16) on each and compare its clips per CPU-second (clips/s over the CPU the process
# used, as PERFORMANCE.md section 3 counts a core) with the plan's prediction.
# Usage: bench/plan_check.sh BUILD_DIR OUT_DIR [CORPUS_DIR=OUT_DIR/corpus] [ROUNDS=2]
#        [OTHERS="--gop=8,--no-bframes --gop=1 --gop=250,--tune=none"]
set -eu
build=$1
out=$2
corpus=${3:-$out/corpus}
rounds=${4:-2}
others=${5:-"--gop=8,--no-bframes --gop=1 --gop=250,--tune=none"}
bin=$build/tubelet
mkdir -p "$out"
sh "$(dirname "$0")/corpus.sh" "$build" "$corpus"
ann=$corpus/train.csv

t0=$(date +%s.%N)
"$bin" prep --plan --ann "$ann" "$corpus"/src/*.mp4 > "$out/plan.txt"
t1=$(date +%s.%N)
plan_s=$(echo "$t0 $t1" | awk '{printf "%.1f", $2 - $1}')
cat "$out/plan.txt"
echo "plan_check: prep --plan took $plan_s s (wall)"

# The plan's flags for an encoding: prep's defaults filled in, in the table's order.
full_flags() { # --gop=N[,--no-bframes][,--tune=T]
    gop=$(echo "$1" | tr ',' '\n' | sed -n 's/^--gop=//p')
    tune=$(echo "$1" | tr ',' '\n' | sed -n 's/^--tune=//p')
    nb=""
    case ",$1," in *,--no-bframes,*) [ "$gop" != 1 ] && nb=" --no-bframes" ;; esac
    echo "--gop $gop$nb --tune ${tune:-fastdecode} --short-side 320"
}
chosen=$(sed -n 's/^chosen: \(.*\) ([0-9]* MB per hour.*/\1/p' "$out/plan.txt")
[ -n "$chosen" ] || { echo "plan_check: the plan chose nothing" >&2; exit 1; }
list="$chosen"
for o in $others; do
    f=$(full_flags "$o")
    [ "$f" = "$chosen" ] || list="$list
$f"
done

echo "$list" > "$out/encodings.txt"
: > "$out/results.txt"
i=0
echo "$list" | while read -r flags; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    "$bin" prep "$corpus"/src/*.mp4 --out "$out/enc/e$i" --jobs 2 $flags > /dev/null
    pred=$(grep -F "\`$flags\`" "$out/plan.txt" | awk -F'|' '{gsub(/ /, "", $8); print $8}')
    mbh=$(grep -F "\`$flags\`" "$out/plan.txt" | awk -F'|' '{gsub(/ /, "", $4); print $4}')
    fpc=$(grep -F "\`$flags\`" "$out/plan.txt" | awk -F'|' '{gsub(/ /, "", $5); print $5}')
    bytes=$(find "$out/enc/e$i" -name '*.mp4' -type f -printf '%s\n' | awk '{s += $1} END {print s}')
    frames=$(cat "$out"/enc/e$i/*/video.idx | awk '$1 == "frames" {n += $2} END {print n}')
    for r in $(seq "$rounds"); do
        "$bin" bench-load --data "$out/enc/e$i" --ann "$ann" --workload w1 --workers 2 \
            --batch 16 --clips 1600 --seed "$r" | tail -1 |
            python3 -c 'import json, sys; r = json.loads(sys.stdin.read())
print("%.2f %.2f %.0f %.2f" % (r["clips_per_s"] * 100 / r["cpu_percent"], r["clips_per_s"],
      r["cpu_percent"], r["decoded_frames_per_s"] / r["clips_per_s"]))' > "$out/r.txt"
        echo "$flags|$pred|$mbh|$fpc|$bytes|$frames|$(cat "$out/r.txt")" >> "$out/results.txt"
    done
done

echo "| prep flags | MB per hour (plan / prepared) | frames decoded per clip (plan / bench-load) | predicted clips/s per core | measured clips per CPU-s (bench-load, median) | predicted / measured |"
echo "|---|---|---|---|---|---|"
python3 - "$out/results.txt" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    flags, pred, mbh, fpc, size, frames, r = line.rstrip("\n").split("|")
    per_cpu, per_s, cpu, dec = map(float, r.split())
    rows.setdefault(flags, []).append((float(pred), float(mbh), float(fpc), int(size),
                                       int(frames), per_cpu, dec))
for flags, rs in rows.items():
    pred, mbh, fpc, size, frames = rs[0][:5]
    meas = statistics.median(x[5] for x in rs)
    dec = statistics.median(x[6] for x in rs)
    real_mbh = size / 1e6 / (frames / 30 / 3600)
    print(f"| `{flags}` | {mbh:.0f} / {real_mbh:.0f} | {fpc:.1f} / {dec:.1f} | {pred:.1f} | "
          f"{meas:.1f} | {pred / meas:.2f} |")
PY
