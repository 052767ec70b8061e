#!/bin/sh
# Builds the libFuzzer targets (clang, ASan + UBSan) and runs each one for a bounded time.
#
#   tests/fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]     default: 60 s, every target
#
# Environment: FUZZ_BUILD  build directory (default build-fuzz; set up on first use)
#              FUZZ_WORK   scratch directory (default a new /tmp/kgw-fuzz.XXXXXX)
#              FUZZ_MAX_LEN  libFuzzer -max_len (default 8192)
# Each target starts from a scratch copy of tests/fuzz/corpus/<target>; the checked-in corpus is
# never written. New inputs and any crash-*/leak-*/timeout-* files stay in the scratch
# directory. A crash makes the script exit 1; reproduce it with
#   $FUZZ_BUILD/tests/fuzz_<target> <crash file>    (or build/tests/replay_<target> <file>)
# and, once fixed, copy the input into tests/fuzz/corpus/<target>/ (keep each under ~100 files).
set -eu
cd "$(dirname "$0")/../.."

secs=${1:-60}
[ $# -gt 0 ] && shift
case $secs in
'' | *[!0-9]*)
    echo "usage: $0 [SECONDS_PER_TARGET] [TARGET...]" >&2
    exit 2
    ;;
esac
targets=$*
if [ -z "$targets" ]; then
    for f in tests/fuzz/fuzz_*.c; do
        t=${f#tests/fuzz/fuzz_}
        targets="$targets ${t%.c}"
    done
fi

build=${FUZZ_BUILD:-build-fuzz}
if ! command -v clang >/dev/null 2>&1; then
    echo "$0: clang is needed (apt-get install clang libclang-rt-14-dev)" >&2
    exit 2
fi
if [ ! -d "$build" ]; then
    CC=clang meson setup "$build" -Dfuzzing=true -Db_sanitize=address,undefined \
        -Db_lundef=false >/dev/null
fi
meson compile -C "$build" >/dev/null

work=${FUZZ_WORK:-$(mktemp -d /tmp/kgw-fuzz.XXXXXX)}
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"

status=0
for t in $targets; do
    bin=$build/tests/fuzz_$t
    if [ ! -x "$bin" ]; then
        echo "fuzz_$t: $bin missing (is $build configured with -Dfuzzing=true?)" >&2
        status=1
        continue
    fi
    dir=$work/$t
    mkdir -p "$dir/corpus" "$dir/artifacts"
    cp tests/fuzz/corpus/"$t"/* "$dir/corpus/"
    before=$(find "$dir/corpus" -type f | wc -l)
    if "$bin" -max_total_time="$secs" -max_len="${FUZZ_MAX_LEN:-8192}" -print_final_stats=1 \
        -artifact_prefix="$dir/artifacts/" "$dir/corpus" >"$dir/log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log")
        after=$(find "$dir/corpus" -type f | wc -l)
        echo "fuzz_$t: ok, ${runs:-?} runs in ${secs}s, $((after - before)) new inputs in $dir/corpus"
    else
        echo "fuzz_$t: FAILED, log $dir/log" >&2
        find "$dir/artifacts" -type f | sed 's/^/    /' >&2
        grep -m 5 -E 'ERROR|invariant failed|runtime error' "$dir/log" | sed 's/^/    /' >&2 || true
        status=1
    fi
done
echo "scratch directory: $work"
exit $status
