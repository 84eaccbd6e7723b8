#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# A private containerd for tests and demos, everything under one folder:
#
#   scripts/containerd-sandbox.sh start DIR   start containerd with root, state, config and socket in DIR,
#                                            import the local test image, wait until CRI answers
#   scripts/containerd-sandbox.sh stop DIR    kill containerd, its shims and containers, unmount, remove DIR
#
# `start` takes only a new or empty folder and marks it; `stop` removes only a marked folder.
#
# With PLEG_SANDBOX_OWNER_PID set, `start` also leaves a watcher that runs `stop DIR` once that process
# is gone, so a test killed on a timeout does not leave containerd behind.
#
# The CRI endpoint is unix://DIR/containerd.sock.  The image localhost/pleg-test:latest, built here
# from Debian's busybox-static and tests/integration/pause.c, serves as the sandbox image (/pause)
# and as the container image (busybox: sh, sleep, ...).  Pods must use the host network.
# Needs root, containerd, runc, busybox-static and gcc with a static libc (scripts/install-deps.sh).
# `stop` is safe to run twice, after a failed start, and on a folder that was never started.

set -euo pipefail

readonly IMAGE=localhost/pleg-test:latest
readonly MARKER=.containerd-sandbox
readonly NAMESPACE=k8s.io
readonly START_TIMEOUT_SEC=${PLEG_CONTAINERD_START_TIMEOUT:-60}
SELF=$(realpath "${BASH_SOURCE[0]}")
SRCDIR=$(dirname "$(dirname "$SELF")")

die() {
    echo "containerd-sandbox: $*" >&2
    exit 1
}

sha256() {
    sha256sum "$1" | cut -d' ' -f1
}

size() {
    stat -c %s "$1"
}

# An OCI image layout built by hand: one uncompressed layer with busybox and /pause, a config, a
# manifest, index.json and oci-layout, packed into one tar that `ctr images import` takes.
build_image() {
    local out=$1 work=$2
    local rootfs=$work/rootfs layout=$work/layout
    local layer_digest config_digest manifest_digest

    mkdir -p "$rootfs"/{bin,dev,etc,proc,sys,tmp} "$layout/blobs/sha256"
    cp /bin/busybox "$rootfs/bin/busybox"
    for applet in sh sleep true false cat echo ls ps kill; do
        ln -s busybox "$rootfs/bin/$applet"
    done
    gcc -static -O2 -o "$rootfs/pause" "$SRCDIR/tests/integration/pause.c"
    strip "$rootfs/pause"
    echo 'root:x:0:0:root:/:/bin/sh' >"$rootfs/etc/passwd"
    echo 'root:x:0:' >"$rootfs/etc/group"

    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$rootfs" -cf "$work/layer.tar" .
    layer_digest=$(sha256 "$work/layer.tar")
    mv "$work/layer.tar" "$layout/blobs/sha256/$layer_digest"

    cat >"$work/config.json" <<EOF
{"architecture":"amd64","os":"linux",
 "config":{"Env":["PATH=/bin"],"Cmd":["/pause"],"WorkingDir":"/"},
 "rootfs":{"type":"layers","diff_ids":["sha256:$layer_digest"]}}
EOF
    config_digest=$(sha256 "$work/config.json")

    cat >"$work/manifest.json" <<EOF
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
 "config":{"mediaType":"application/vnd.oci.image.config.v1+json",
           "digest":"sha256:$config_digest","size":$(size "$work/config.json")},
 "layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar",
            "digest":"sha256:$layer_digest","size":$(size "$layout/blobs/sha256/$layer_digest")}]}
EOF
    manifest_digest=$(sha256 "$work/manifest.json")

    mv "$work/config.json" "$layout/blobs/sha256/$config_digest"
    mv "$work/manifest.json" "$layout/blobs/sha256/$manifest_digest"
    cat >"$layout/index.json" <<EOF
{"schemaVersion":2,
 "manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json",
               "digest":"sha256:$manifest_digest","size":$(size "$layout/blobs/sha256/$manifest_digest"),
               "annotations":{"io.containerd.image.name":"$IMAGE","org.opencontainers.image.ref.name":"latest"}}]}
EOF
    echo '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$layout" -cf "$out" .
}

# overlayfs when the kernel mounts it on this file system (not on overlay or tmpfs roots of some CI
# machines), else the slow but always working native snapshotter.
pick_snapshotter() {
    local dir=$1 t=$1/overlay-probe
    mkdir -p "$t"/{lower,upper,work,merged}
    if mount -t overlay overlay -o "lowerdir=$t/lower,upperdir=$t/upper,workdir=$t/work" "$t/merged" \
        2>/dev/null; then
        umount "$t/merged"
        rm -rf "$t"
        echo overlayfs
    else
        rm -rf "$t"
        echo native
    fi
}

write_config() {
    local dir=$1 snapshotter=$2
    mkdir -p "$dir/cni/net.d" "$dir/cni/bin"
    # Host-network pods run no CNI plugin, so the bin dir stays empty; the CRI plugin only needs a
    # network config to load to report NetworkReady.
    cat >"$dir/cni/net.d/10-loopback.conflist" <<EOF
{"cniVersion":"0.4.0","name":"pleg-loopback","plugins":[{"type":"loopback"}]}
EOF

    cat >"$dir/config.toml" <<EOF
version = 2
root = "$dir/root"
state = "$dir/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$dir/containerd.sock"

[ttrpc]
  address = "$dir/containerd.sock.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$IMAGE"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "$snapshotter"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "$dir/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$dir/cni/bin"
    conf_dir = "$dir/cni/net.d"
EOF
}

ctr_() {
    ctr --address "$DIR/containerd.sock" --namespace "$NAMESPACE" "$@"
}

containerd_pid() {
    local pid
    [ -f "$DIR/containerd.pid" ] || return 1
    pid=$(cat "$DIR/containerd.pid")
    [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
    # a recycled pid is not ours
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$(command -v containerd)" ] || return 1
    echo "$pid"
}

start() {
    local snapshotter deadline pid
    for tool in containerd ctr runc gcc; do
        command -v "$tool" >/dev/null || die "$tool not found; run scripts/install-deps.sh"
    done
    [ -x /bin/busybox ] || die "/bin/busybox not found; run scripts/install-deps.sh"
    [ "$(id -u)" = 0 ] || die "containerd needs root"
    # containerd copies these into every host-network pod
    for f in /etc/hosts /etc/resolv.conf; do
        [ -f "$f" ] || die "$f is missing; containerd needs it for host-network pods"
    done
    containerd_pid >/dev/null && die "containerd already running for $DIR"
    # `stop` removes DIR: only ever a folder that `start` made or found empty.
    if [ -e "$DIR" ] && [ ! -e "$DIR/$MARKER" ] && [ -n "$(ls -A "$DIR" 2>/dev/null)" ]; then
        die "$DIR is not empty; give a new or empty folder"
    fi

    mkdir -p "$DIR"
    touch "$DIR/$MARKER"
    snapshotter=$(pick_snapshotter "$DIR")
    write_config "$DIR" "$snapshotter"
    mkdir -p "$DIR/image"
    build_image "$DIR/image/pleg-test.tar" "$DIR/image" || die "could not build the test image"

    # its own session: a terminal's ^C reaches the caller, whose `stop` then shuts containerd down
    setsid containerd --config "$DIR/config.toml" >"$DIR/containerd.log" 2>&1 </dev/null &
    echo $! >"$DIR/containerd.pid"

    deadline=$((SECONDS + START_TIMEOUT_SEC))
    until ctr_ version >/dev/null 2>&1 && cri_ready; do
        if ! pid=$(containerd_pid); then
            tail -n 30 "$DIR/containerd.log" >&2 || true
            die "containerd exited during start (log: $DIR/containerd.log)"
        fi
        if [ $SECONDS -ge $deadline ]; then
            tail -n 30 "$DIR/containerd.log" >&2 || true
            die "containerd did not get ready within ${START_TIMEOUT_SEC}s (log: $DIR/containerd.log)"
        fi
        sleep 0.2
    done

    if ! ctr_ images import --snapshotter "$snapshotter" "$DIR/image/pleg-test.tar" \
        >"$DIR/import.log" 2>&1; then
        cat "$DIR/import.log" >&2
        die "image import failed"
    fi
    if [ -n "${PLEG_SANDBOX_OWNER_PID:-}" ]; then
        setsid bash "$SELF" guard "$DIR" "$PLEG_SANDBOX_OWNER_PID" </dev/null >/dev/null 2>&1 &
    fi
    echo "containerd-sandbox: containerd $(containerd_pid) ready on unix://$DIR/containerd.sock" \
        "(snapshotter $snapshotter, image $IMAGE)" >&2
}

# The CRI plugin registers late and may fail to load on its own (the rest of containerd still runs).
cri_ready() {
    ctr_ plugins ls 2>/dev/null |
        awk '$1 == "io.containerd.grpc.v1" && $2 == "cri" { found = ($NF == "ok") } END { exit !found }'
}

children_of() {
    local stat line rest
    for stat in /proc/[0-9]*/stat; do
        read -r line 2>/dev/null <"$stat" || continue
        rest=${line##*) }                   # past "pid (comm) "; comm may hold blanks
        rest=${rest#* }                     # past the state
        [ "${rest%% *}" = "$1" ] && { line=${stat#/proc/}; echo "${line%/stat}"; }
    done
}

# Our shims are those whose -address is our socket.  Their children are the pods' and containers'
# first processes (pid namespace inits), so killing those takes the whole container down.  A killed
# shim leaves its socket in /run/containerd/s, named by the hash of address/namespace/id.
kill_shims() {
    local sock=$DIR/containerd.sock pid args id child
    local -a ours=()
    for p in /proc/[0-9]*; do
        pid=${p#/proc/}
        args=$(tr '\0' '\n' 2>/dev/null <"$p/cmdline") || continue
        [[ $(head -n1 <<<"$args") == *containerd-shim* ]] || continue
        grep -qxF -- "$sock" <<<"$args" || continue
        ours+=("$pid")
        for child in $(children_of "$pid"); do
            kill -KILL "$child" 2>/dev/null || true
        done
        kill -KILL "$pid" 2>/dev/null || true
        id=$(grep -A1 -xF -- -id <<<"$args" | tail -n1)
        rm -f "/run/containerd/s/$(printf '%s' "$sock/$NAMESPACE/$id" | sha256sum | cut -d' ' -f1)"
    done
    for pid in "${ours[@]}"; do
        while alive "$pid"; do
            sleep 0.05
        done
    done
}

kill_containers() {
    local root id
    for root in "$DIR"/runc/*/; do
        [ -d "$root" ] || continue
        for id in $(runc --root "$root" list -q 2>/dev/null); do
            runc --root "$root" delete --force "$id" >/dev/null 2>&1 || true
        done
    done
}

unmount_all() {
    local mnt tries
    for tries in 1 2 3; do
        # deepest first; mountinfo escapes blanks as octal, which our paths do not contain
        mapfile -t mounts < <(awk -v d="$DIR/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
        [ ${#mounts[@]} -eq 0 ] && return 0
        for mnt in "${mounts[@]}"; do
            umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
        done
    done
}

# running, not a zombie waiting for whoever adopted it
alive() {
    local state
    state=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

stop() {
    local pid deadline
    [ -d "$DIR" ] || return 0
    if [ ! -e "$DIR/$MARKER" ]; then
        # an empty folder (start failed before marking it) goes; anything else is not ours
        rmdir "$DIR" 2>/dev/null && return 0
        die "$DIR was not made by '$0 start'; refusing to remove it"
    fi
    if pid=$(containerd_pid); then
        kill -TERM "$pid" 2>/dev/null || true
        deadline=$((SECONDS + 10))
        while alive "$pid" && [ $SECONDS -lt $deadline ]; do
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
        while alive "$pid"; do
            sleep 0.05
        done
    fi
    kill_shims
    kill_containers
    unmount_all
    rm -rf "$DIR"
}

guard() {
    local owner=$1
    while [ -d "$DIR" ] && kill -0 "$owner" 2>/dev/null; do
        sleep 1
    done
    stop
}

[ $# -ge 2 ] || die "usage: $0 start|stop DIR"
DIR=$(realpath -m "$2")
case $DIR in
/ | /tmp | /var | /run | /usr | /home | /root) die "refusing to use $DIR" ;;
esac
case $1 in
start) start ;;
stop) stop ;;
guard) guard "$3" ;;
*) die "usage: $0 start|stop DIR" ;;
esac
