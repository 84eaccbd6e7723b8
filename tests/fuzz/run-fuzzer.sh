#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# run-fuzzer.sh TARGET NAME SECONDS WORK-DIR INPUT-DIR...
#
# Fuzzes the libFuzzer program TARGET for SECONDS over a copy, in WORK-DIR/corpus, of the files
# of the INPUT-DIRs (its committed seeds and regressions: the source tree is never written).
# Exits non-zero when libFuzzer found a crash, a sanitizer report, a timeout, a leak or an
# out-of-memory, and names the input that did it.

set -euo pipefail

# As tests/fuzz/meson.build sets it, for runs by hand: GLib's fatal messages raise SIGTRAP.
[[ ${ASAN_OPTIONS:-} == *handle_sigtrap* ]] || export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_sigtrap=1

target=$1 name=$2 seconds=$3 work=$4
shift 4

rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
for dir in "$@"; do
    for file in "$dir"/*; do
        [ -f "$file" ] && cp "$file" "$work/corpus/$(basename "$dir")-$(basename "$file")"
    done
done

status=0
# -timeout: one input taking 10 s is a hang; -rss_limit_mb: 2 GiB is a runaway allocation.
# -seed: the same mutations in the same order every run (FUZZ_SEED=0 for a random one), so that
# CI explores what it explored before and a new finding comes from a change, not from chance.
"$target" -seed="${FUZZ_SEED:-1}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/" "$work/corpus" || status=$?

if [ "$status" -eq 0 ]; then
    echo "run-fuzzer: $name: no crash in ${seconds}s; corpus grew to $(ls "$work/corpus" | wc -l) inputs"
    exit 0
fi

echo "run-fuzzer: $name: libFuzzer exited with $status" >&2
found=0
for artifact in "$work/artifacts"/*; do
    [ -f "$artifact" ] || continue
    found=1
    echo "run-fuzzer: $name: failing input: $artifact" >&2
    echo "  reproduce: $target $artifact" >&2
    echo "  fix the defect, then commit the input as tests/fuzz/regressions/$name/<what-it-hit>" >&2
done
[ "$found" -eq 1 ] || echo "run-fuzzer: $name: libFuzzer left no input behind; see the log above" >&2
exit 1
