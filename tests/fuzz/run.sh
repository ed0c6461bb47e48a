#!/bin/sh
# tests/fuzz/run.sh - runs the libFuzzer targets of a TB_FUZZ build (docs/ROBUSTNESS.md).
#
#   run.sh smoke NAME BIN     ctest's run: a few seconds from the seeds at a fixed seed, then
#                             every input under regress/NAME once; a scratch corpus, removed
#   run.sh fuzz BUILD [NAME...]
#                             each target (default: every fuzz_* in BUILD/tests/fuzz) for
#                             FUZZ_SECONDS (60), or FUZZ_RUNS executions when that is set; new
#                             inputs kept in BUILD/fuzz/corpus/NAME, crashes in
#                             BUILD/fuzz/artifacts/NAME, the log in BUILD/fuzz/logs/NAME.log;
#                             one summary line per target, exit 1 if any failed
#
# One job per target, in this process's priority (make fuzz runs it under nice). Each target's
# limits are in limits() below.
set -eu

here=$(cd "$(dirname "$0")" && pwd)

# Input size and memory for each target; -close_fd_mask=3 silences a target that prints (the
# CLI's flag parser writes its usage errors and --help); libFuzzer and the sanitizers still
# report on a copy of stderr.
limits() {
    case "$1" in
    reader) echo "-max_len=65536 -rss_limit_mb=2560" ;;
    chunk) echo "-max_len=8192 -rss_limit_mb=2048" ;;
    flags) echo "-max_len=8192 -rss_limit_mb=2048 -close_fd_mask=3" ;;
    *) echo "-max_len=16384 -rss_limit_mb=2048" ;;
    esac
}

common="-timeout=10 -print_final_stats=1"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
if [ -z "${ASAN_SYMBOLIZER_PATH:-}" ] && ! command -v llvm-symbolizer >/dev/null 2>&1 &&
   [ -x /usr/lib/llvm-14/bin/llvm-symbolizer ]; then
    export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer
fi

dict_for() {
    if [ -f "$here/dict/$1.dict" ]; then echo "-dict=$here/dict/$1.dict"; fi
}

# stat NAME LOG: one value of libFuzzer's final statistics.
stat() {
    sed -n "s/^stat::$1: *//p" "$2" | tail -n 1
}

smoke() {
    name=$1 bin=$2
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/tubelet-fuzz-smoke.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    mkdir "$tmp/corpus"
    # shellcheck disable=SC2046
    if ! "$bin" -seed=1 -max_total_time="${FUZZ_SMOKE_SECONDS:-3}" $common $(limits "$name") \
            $(dict_for "$name") -artifact_prefix="$tmp/" "$tmp/corpus" "$here/corpus/$name" \
            >"$tmp/log" 2>&1; then
        tail -n 60 "$tmp/log"
        for f in "$tmp"/crash-* "$tmp"/leak-* "$tmp"/timeout-* "$tmp"/oom-*; do
            [ -f "$f" ] || continue
            keep="./fuzz-$name-$(basename "$f")"
            cp "$f" "$keep"
            echo "fuzz_$name: FAILED on an input kept as $(pwd)/${keep#./}"
        done
        exit 1
    fi
    echo "fuzz_$name: $(stat number_of_executed_units "$tmp/log") executions from the seeds"
    n=0
    for f in "$here/regress/$name"/*; do
        [ -f "$f" ] || continue
        n=$((n + 1))
        # shellcheck disable=SC2046
        if ! "$bin" $common $(limits "$name") "$f" >"$tmp/log" 2>&1; then
            tail -n 60 "$tmp/log"
            echo "fuzz_$name: FAILED on regression input $f"
            exit 1
        fi
    done
    echo "fuzz_$name: $n regression inputs pass"
}

fuzz_one() {
    build=$1 name=$2
    bin="$build/tests/fuzz/fuzz_$name"
    out="$build/fuzz"
    mkdir -p "$out/corpus/$name" "$out/artifacts/$name" "$out/logs"
    log="$out/logs/$name.log"
    if [ -n "${FUZZ_RUNS:-}" ]; then budget="-runs=$FUZZ_RUNS"; else
        budget="-max_total_time=${FUZZ_SECONDS:-60}"; fi
    start=$(date +%s)
    status=0
    # shellcheck disable=SC2046
    "$bin" $budget $common $(limits "$name") $(dict_for "$name") \
        -artifact_prefix="$out/artifacts/$name/" "$out/corpus/$name" "$here/corpus/$name" \
        >"$log" 2>&1 || status=$?
    secs=$(($(date +%s) - start))
    execs=$(stat number_of_executed_units "$log")
    printf 'fuzz_%-12s %10s execs in %5d s (%s/s), peak RSS %s MB, corpus %d inputs: %s\n' \
        "$name" "${execs:-?}" "$secs" "$(stat average_exec_per_sec "$log")" \
        "$(stat peak_rss_mb "$log")" "$(find "$out/corpus/$name" -type f | wc -l)" \
        "$([ $status = 0 ] && echo ok || echo "FAILED (exit $status; $log, $out/artifacts/$name)")"
    return $status
}

case "${1:-}" in
smoke)
    smoke "$2" "$3"
    ;;
fuzz)
    build=$2
    shift 2
    names="$*"
    if [ -z "$names" ]; then
        for b in "$build"/tests/fuzz/fuzz_*; do
            [ -x "$b" ] && names="$names ${b##*/fuzz_}"
        done
    fi
    failed=0
    for name in $names; do
        fuzz_one "$build" "$name" || failed=1
    done
    exit $failed
    ;;
*)
    echo "usage: run.sh smoke NAME BIN | run.sh fuzz BUILD [NAME...]" >&2
    exit 2
    ;;
esac
