#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# The whole test suite, as root on Debian 12: installs what the build and the tests need, then runs
# its stages, each a meson test run over one build:
#   main      every suite but soak, built with -Dwerror=true in $BUILD_DIR (default build-test);
#             the integration suite starts its own private containerd; the outage suite runs
#             plegd as the shipped unit through a 10-minute runtime outage (mostly waiting)
#   valgrind  the unit suite again under valgrind
#   asan      every suite but integration (containerd), install (a build of its own without
#             sanitizers), soak and outage (10 minutes of waiting), built with -Db_sanitize=address,undefined in $ASAN_BUILD_DIR (default
#             build-asan) and run under its default test setup "asan" (tests/meson.build): any
#             ASan or UBSan report, or a leak at exit, fails the test
#   soak      scripts/soak.sh: plegd against cri-sim with churn and faults for $SOAK_DURATION
#             (default 120s), over the same build
#   fuzz      tests/fuzz built with clang as libFuzzer targets (ASan, UBSan) in $FUZZ_BUILD_DIR
#             (default build-fuzz); each target fuzzes for FUZZ_SECONDS (default 60) from its
#             seeds and regressions (suite fuzz), after replaying them once (suite fuzz-replay,
#             which the main stage runs too, uninstrumented)
#   tsan      the threaded suites (core, evented, watchdog, host, plegd) and the setup's own
#             (tsan: a racy counter must be caught, GLib hand-offs must not) built with
#             -Db_sanitize=thread in build-tsan and run with --setup=tsan (less the suite volume:
#             listings of 26 MiB, about size, not threads, too slow there; and the suite tls:
#             glib-networking's handshake threads, which TSan cannot see): GLib's locks and
#             hand-offs made visible by tests/tsan/glib-tsan.c, every report judged by
#             tests/tsan/tsan-check.py (tests/tsan.supp)
# The last line is "N passed, N failed" over every stage; a skipped test counts as failed, and so
# does a stage whose build fails.  Exits non-zero on any failure.
#
# STAGES="main tsan" runs only the stages named (default: all of them).

set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD_DIR=${BUILD_DIR:-build-test}
ASAN_BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
TSAN_BUILD_DIR=${TSAN_BUILD_DIR:-build-tsan}
FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
STAGES=${STAGES:-main valgrind soak asan tsan fuzz}

bash scripts/install-deps.sh

results=()     # one meson testlog JSON per stage that ran
build_failures=0

# configure DIR MESON-SETUP-ARGS...: set up (or reconfigure) and build DIR; with BUILD_TARGETS
# set, only those ninja targets.
configure() {
    local dir=$1
    shift
    if [ -f "$dir/build.ninja" ]; then
        meson configure "$dir" "$@"
    else
        meson setup "$dir" "$@"
    fi
    ninja -C "$dir" ${BUILD_TARGETS:-}
}

# stage NAME DIR MESON-TEST-ARGS...: one meson test run whose log is DIR/meson-logs/NAME.json
# (meson appends "-SETUP" to the name when a --setup=SETUP is given).
stage() {
    local name=$1 dir=$2 status=0 log arg
    shift 2
    log=$name
    for arg in "$@"; do
        [[ $arg == --setup=* ]] && log=$name-${arg#--setup=}
    done
    rm -f "$dir/meson-logs/$log.json"
    meson test -C "$dir" --print-errorlogs --logbase "$name" "$@" || status=$?
    echo "test.sh: stage $name exited with $status"
    results+=("$dir/meson-logs/$log.json")
}

wants() {
    [[ " $STAGES " == *" $1 "* ]]
}

if wants main || wants valgrind || wants soak; then
    if configure "$BUILD_DIR" -Dwerror=true; then
        wants main && stage main "$BUILD_DIR" --no-suite soak
        wants valgrind && stage valgrind "$BUILD_DIR" --setup=valgrind --suite unit
        wants soak && stage soak "$BUILD_DIR" --suite soak
    else
        echo "test.sh: the build in $BUILD_DIR failed" >&2
        build_failures=$((build_failures + 1))
    fi
fi

if wants asan; then
    if configure "$ASAN_BUILD_DIR" -Dwerror=true -Db_sanitize=address,undefined; then
        stage asan "$ASAN_BUILD_DIR" --no-suite integration --no-suite install --no-suite soak \
            --no-suite outage
    else
        echo "test.sh: the build in $ASAN_BUILD_DIR failed" >&2
        build_failures=$((build_failures + 1))
    fi
fi

if wants tsan; then
    if configure "$TSAN_BUILD_DIR" -Dwerror=true -Db_sanitize=thread; then
        stage tsan "$TSAN_BUILD_DIR" --setup=tsan --suite tsan --suite core --suite evented \
            --suite watchdog --suite host --suite plegd --no-suite volume --no-suite tls
    else
        echo "test.sh: the build in $TSAN_BUILD_DIR failed" >&2
        build_failures=$((build_failures + 1))
    fi
fi

# Only the fuzz targets are built (the whole tree under ASan would take as long as the fuzzing).
# clang's -Wunused-variable flags g_autoptr() scope guards (GMutexLocker) that gcc accepts, so this
# build does not use -Dwerror; the main stage builds everything with -Dwerror=true.
if wants fuzz; then
    if CC=clang BUILD_TARGETS=fuzz-targets configure "$FUZZ_BUILD_DIR" -Dfuzzing=true \
        -Db_lundef=false -Dfuzz_seconds="$FUZZ_SECONDS"; then
        stage fuzz "$FUZZ_BUILD_DIR" --no-rebuild --suite fuzz-replay --suite fuzz
    else
        echo "test.sh: the build in $FUZZ_BUILD_DIR failed" >&2
        build_failures=$((build_failures + 1))
    fi
fi

# OK and EXPECTEDFAIL pass; everything else, SKIP included, fails.  No result at all is a failure too.
python3 - "$build_failures" "${results[@]}" <<'EOF'
import json, os, sys

passed, failed = 0, int(sys.argv[1])
for path in sys.argv[2:]:
    if not os.path.exists(path):
        print(f"test.sh: {path} is missing", file=sys.stderr)
        failed += 1
        continue
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            result = json.loads(line)["result"]
            if result in ("OK", "EXPECTEDFAIL"):
                passed += 1
            else:
                failed += 1
if passed + failed == 0:
    failed = 1
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
EOF
