#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# scripts/soak.sh [DURATION]: a soak of plegd against cri-sim with churn and faults.
#
# plegd relists every 100 ms with EventedPLEG on, against cri-sim on a unix socket in a temporary
# folder.  A driver (tests/soak/soak.py) keeps about 30 pods alive: it creates pods with 1-3
# containers, starts them (a few never start and exit from CREATED), lets them exit with known
# codes, removes containers and then pods, and removes some pods with their containers still
# running (they exit 137).  About a fifth of the runs and exits are too short for any relist to
# see.  Every 3-8 s it ends the GetContainerEvents streams (cleanly or with an error); every
# 20-30 s it takes the runtime away for 2-5 s (socket removed, or left stale as a killed runtime
# does), and changes pods meanwhile: cri-sim keeps its state.  Decisions come from one seeded RNG;
# the seed is printed and SOAK_SEED=N replays the same decisions (timings differ, so not the same
# interleaving with the relists).
#
# At the end the churn stops and plegd must report the final state within 30 s.  What is checked
# (precisely in tests/soak/soakcheck.py, from kubelet's PLEG table in doc/design.md):
#   - per container and sandbox, plegd's events are ContainerStarted, ContainerDied,
#     ContainerRemoved in that order, each at most once (no duplicate ContainerDied), Removed only
#     after Died, Died's exit code the one it exited with, each for its own pod;
#   - no missing event: a state that lasted over one whole successful global relist (known from
#     kubelet_pleg_relist_duration_seconds_count scraped every 50 ms, outside the outages) was
#     reported: running -> ContainerStarted, exited -> ContainerDied with its exit code; objects
#     created and removed between two relists may legitimately give nothing at all;
#   - the final live set from plegd's events equals cri-sim's, and cri-sim's own CRI listing
#     (cri-ctl ps / pods) equals what the driver did;
#   - growth: plegd's RSS, fd and thread counts (/proc, every 2 s after a warm-up of
#     min(15 s, DURATION/6)): the last third's maximum may exceed the first third's by at most
#     RSS +8 MiB, fds +8, threads +20 (room kept from when each of the 16 status calls in flight,
#     --max-status-calls-in-flight=16, took a pool thread; they are now driven from the relist's
#     thread).  Steady state is ~30 pods / ~70 objects, about 0.5 MiB of
#     records and caches (FACTS: 6 KiB per container), so 8 MiB is room for glibc's per-thread
#     arenas and fragmentation yet far below a leak of a few hundred bytes per event over 10,000s
#     of events; fds: gRPC's reconnects and the soak's own HTTP scrapes hold a few at any moment;
#     threads: GLib's shared pool and gRPC's executor threads come and go by a few;
#   - the evented watcher reconnected after broken streams and its relists produced events;
#     plegd exits 0 on SIGTERM and logs no warning.
#
# DURATION: seconds, or with s / m (default $SOAK_DURATION, else 120s).  Binaries come from
# $PLEGD, $CRI_SIM, $CRI_CTL, $PLEG_PLUGIN_DIR when set (meson's test does), else from
# ${BUILD_DIR:-build}.  SOAK_TRACE=FILE saves everything recorded as JSON.  Exit 0 when all checks
# pass, 1 when one fails (each on a "soak: FAIL:" line), 2 on a usage or setup error.  Every
# process and temporary file is removed on the way out, also on failure or SIGTERM.

set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
duration=${1:-${SOAK_DURATION:-120s}}
case $duration in
    *m) secs=$(( ${duration%m} * 60 )) ;;
    *s) secs=${duration%s} ;;
    *) secs=$duration ;;
esac
if ! [[ $secs =~ ^[0-9]+$ ]] || (( secs < 12 )); then
    echo "soak.sh: DURATION must be 12 seconds or more (e.g. 120, 120s, 2m), not '$duration'" >&2
    exit 2
fi

build=${BUILD_DIR:-$src/build}
PLEGD=${PLEGD:-$build/examples/plegd/plegd}
CRI_SIM=${CRI_SIM:-$build/tests/harness/cri-sim/cri-sim}
CRI_CTL=${CRI_CTL:-$build/tests/tools/cri-ctl}
PLEG_PLUGIN_DIR=${PLEG_PLUGIN_DIR:-$build/plugins/evented}
for bin in "$PLEGD" "$CRI_SIM" "$CRI_CTL"; do
    if [ ! -x "$bin" ]; then
        echo "soak.sh: $bin is missing: build first (ninja -C $build) or set BUILD_DIR" >&2
        exit 2
    fi
done

workdir=$(mktemp -d "${TMPDIR:-/tmp}/pleg-soak.XXXXXX")
driver=
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    if [ -n "$driver" ] && kill -0 "$driver" 2>/dev/null; then
        # The driver stops plegd and cri-sim itself; they get SIGKILL should it die first.
        kill -TERM "$driver" 2>/dev/null || true
        wait "$driver" 2>/dev/null || true
    fi
    rm -rf "$workdir"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

args=(--duration "$secs" --workdir "$workdir" --plegd "$PLEGD" --cri-sim "$CRI_SIM"
      --cri-ctl "$CRI_CTL" --plugin-dir "$PLEG_PLUGIN_DIR")
[ -n "${SOAK_SEED:-}" ] && args+=(--seed "$SOAK_SEED")
[ -n "${SOAK_TRACE:-}" ] && args+=(--trace "$SOAK_TRACE")

python3 "$src/tests/soak/soak.py" "${args[@]}" &
driver=$!
status=0
wait "$driver" || status=$?
driver=
exit "$status"
