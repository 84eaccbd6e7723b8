#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# The main job end to end, as root on Debian 12: installs the dependencies, builds libpleg in
# $BUILD_DIR (default build), starts a private containerd, runs plegd against it with its events
# (one JSON object per line) shown on this terminal, creates three pods whose containers exit with
# different codes, stops plegd, removes the pods while it is down, restarts it from its state
# directory, checks that plegd reported every step once (the removals after the restart, nothing
# twice), asks plegd with plegctl what died, what it sees and whether it is healthy, and shuts
# everything down.

set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD_DIR=${BUILD_DIR:-build}
IMAGE=localhost/pleg-test:latest
WAIT_SEC=30

say() {
    printf '\033[1mdemo: %s\033[0m\n' "$*" >&2
}

fail() {
    say "FAILED: $*"
    exit 1
}

bash scripts/install-deps.sh
[ -f "$BUILD_DIR/build.ninja" ] || meson setup "$BUILD_DIR"
ninja -C "$BUILD_DIR"

PLEGD=$BUILD_DIR/examples/plegd/plegd
PLEGCTL=$BUILD_DIR/examples/plegctl/plegctl
CRI_CTL=$BUILD_DIR/tests/tools/cri-ctl
DIR=$(mktemp -d /tmp/pleg-demo-XXXXXX)
ENDPOINT=unix://$DIR/containerd.sock
EVENTS=$DIR/events.jsonl
plegd_pid=

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "$plegd_pid" ]; then
        kill -TERM "$plegd_pid" 2>/dev/null || true
        wait "$plegd_pid" 2>/dev/null || true
    fi
    if [ $rc -ne 0 ] && [ -f "$DIR/plegd.log" ]; then
        say "plegd's log:"
        cat "$DIR/plegd.log" >&2
    fi
    say "stopping containerd"
    scripts/containerd-sandbox.sh stop "$DIR"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cri() {
    "$CRI_CTL" --endpoint="$ENDPOINT" "$@"
}

# plegctl against this demo's plegd, on its unix socket (the whole API).
plegctl() {
    "$PLEGCTL" --address="unix:$SOCKET" "$@"
}

# waits until plegd printed an event of type $1 for container $2 (and matching $3, a regex, if given)
wait_event() {
    local deadline=$((SECONDS + WAIT_SEC))
    until grep -F "\"$2\"" "$EVENTS" 2>/dev/null | grep -E "\"type\": *\"$1\"" | grep -E "${3:-.}" >/dev/null; do
        [ $SECONDS -lt $deadline ] || fail "no $1 event for $2 within ${WAIT_SEC}s"
        sleep 0.1
    done
}

http_get() {
    local hostport=${METRICS_URL#http://}
    (
        exec 3<>"/dev/tcp/${hostport%:*}/${hostport##*:}" &&
            printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$1" "$hostport" >&3 &&
            cat <&3
    )
}

say "starting a private containerd in $DIR"
PLEG_SANDBOX_OWNER_PID=$$ scripts/containerd-sandbox.sh start "$DIR"

# plegd serves /events and /pods on its unix socket (root and its group only; over TCP they
# answer 403): here in $DIR rather than the node's /run/plegd/plegd.sock.
SOCKET=$DIR/plegd.sock

# Starts plegd with its state in $DIR/state, its events appended to $EVENTS and shown here, and
# waits until it is live and ready (plegctl status exits 0); sets plegd_pid and METRICS_URL.
start_plegd() {
    : >"$DIR/plegd.log"
    "$PLEGD" --container-runtime-endpoint="$ENDPOINT" --relist-period=1s \
        --metrics-bind-address=127.0.0.1:0 --socket="$SOCKET" --state-dir="$DIR/state" \
        > >(tee -a "$EVENTS") 2>"$DIR/plegd.log" &
    plegd_pid=$!
    local deadline=$((SECONDS + WAIT_SEC))
    until METRICS_URL=$(grep -o 'serving metrics on http://[^ "]*' "$DIR/plegd.log" 2>/dev/null | cut -d' ' -f4) &&
        [ -n "$METRICS_URL" ] && plegctl status -o json >/dev/null 2>&1; do
        kill -0 "$plegd_pid" 2>/dev/null || fail "plegd exited"
        [ $SECONDS -lt $deadline ] || fail "plegd did not become ready within ${WAIT_SEC}s"
        sleep 0.2
    done
    say "plegd is live and ready, serving on $METRICS_URL"
}

say "starting plegd; its events follow"
start_plegd
# Run from the build tree without --plugin-dir, plegd loads the tree's own plugins.
say "plegd's plugins:"
grep -E 'plugins: searching|plugin [a-z0-9-]+: |warning: ' "$DIR/plegd.log" | sed 's/^[^:]*: [0-9:.]*: /  /' >&2 || true
grep -q 'plugin watchdog: running' "$DIR/plegd.log" || fail "plegd did not load the watchdog plugin"

declare -A sandbox container code
pods=(web batch job)
codes=(0 3 42)
for i in "${!pods[@]}"; do
    pod=${pods[$i]}
    code[$pod]=${codes[$i]}
    sandbox[$pod]=$(cri runp --name "$pod" --namespace demo --uid "demo-$pod")
    container[$pod]=$(cri create "${sandbox[$pod]}" --pod-name "$pod" --namespace demo --uid "demo-$pod" \
        --name main --image "$IMAGE" -- sh -c "sleep $((i + 2)); exit ${code[$pod]}")
    cri start "${container[$pod]}"
    say "pod $pod: container ${container[$pod]:0:12} runs 'sleep $((i + 2)); exit ${code[$pod]}'"
done

for pod in "${pods[@]}"; do
    wait_event ContainerStarted "${container[$pod]}"
done
for pod in "${pods[@]}"; do
    wait_event ContainerDied "${container[$pod]}" "\"exit_code\": *${code[$pod]}[,}]"
    say "pod $pod: plegd reported ContainerDied with exit code ${code[$pod]}" \
        "(runtime: $(cri inspect "${container[$pod]}"))"
done

say "what plegd sees (plegctl pods):"
plegctl pods -n demo -o table >&2

# What a consumer keeps to resume: the last seq it saw, and the history it belongs to.
last_seq=$(tail -n 1 "$EVENTS" | jq .seq)
instance=$(plegctl status -o json | jq -r .events.instance)
say "over TCP, where any local user and host-network pod can connect, /events is refused:"
say "  $(curl -s "$METRICS_URL/events")"
[[ $(curl -s -o /dev/null -w '%{http_code}' "$METRICS_URL/events") == 403 ]] || fail "/events over TCP was not refused"
say "stopping plegd at seq $last_seq (instance $instance); the pods are removed while it is down"
kill -TERM "$plegd_pid"
wait "$plegd_pid" || fail "plegd did not stop cleanly"
plegd_pid=
for pod in "${pods[@]}"; do
    cri rm "${container[$pod]}"
    cri stopp "${sandbox[$pod]}"
    cri rmp "${sandbox[$pod]}"
done

say "restarting plegd from its state directory: it reports only what changed while it was down"
start_plegd
for pod in "${pods[@]}"; do
    wait_event ContainerRemoved "${container[$pod]}"
    wait_event ContainerRemoved "${sandbox[$pod]}"
done
for pod in "${pods[@]}"; do
    for type in ContainerStarted ContainerDied ContainerRemoved; do
        n=$(jq -c --arg id "${container[$pod]}" --arg type "$type" \
            'select(.container_id == $id and .type == $type)' "$EVENTS" | wc -l)
        [ "$n" = 1 ] || fail "pod $pod: $n $type events for its container, not 1"
    done
done
say "a consumer that stored seq $last_seq resumes where it stopped:"
say "  plegctl events --since $last_seq --instance $instance"
resumed=$(plegctl events --since "$last_seq" --instance "$instance" -o json)
jq -r '"  \(.seq) \(.type) \(.namespace)/\(.pod) \(.container // "sandbox")"' <<<"$resumed" >&2
[ "$(jq -s 'map(select(.type == "ContainerRemoved")) | length' <<<"$resumed")" = $((2 * ${#pods[@]})) ] ||
    fail "the resumed read did not answer the removals: $resumed"
[ "$(jq -s '.[0].seq' <<<"$resumed")" = $((last_seq + 1)) ] || fail "the seqs did not go on from $last_seq"

say "which containers of namespace demo died, with what exit code and reason, in the last ten minutes:"
say "  plegctl events --type ContainerDied -n demo --sandbox=false --since 10m"
plegctl events --type ContainerDied -n demo --sandbox=false --since 10m -o table >&2
died=$(plegctl events --type ContainerDied -n demo --sandbox=false --since 10m -o json)
[ "$(jq -s length <<<"$died")" = "${#pods[@]}" ] || fail "the bounded read did not answer one death a pod: $died"

say "is plegd healthy, and why (plegctl status):"
plegctl status -o table >&2 || fail "plegctl status says plegd is not live and ready"

say "plegd's relist metrics:"
http_get /metrics | grep -E '^kubelet_(pleg_relist_duration_seconds_(count|sum)|pleg_events_total|running_)' >&2 || true
say "done: plegd printed $(wc -l <"$EVENTS") events for 3 pods; all expected events seen"
