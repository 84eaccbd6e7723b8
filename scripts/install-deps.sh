#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# Installs, as root on Debian 12, every package that building libpleg and running all its tests
# (the integration suite against a private containerd included) and scripts/demo.sh need.
# Idempotent: does nothing when everything is already installed.

set -euo pipefail

packages=(
    # build
    build-essential meson ninja-build pkg-config
    libglib2.0-dev libjson-glib-dev libsoup-3.0-dev libsystemd-dev
    libgrpc-dev protobuf-c-compiler libprotobuf-c-dev
    # tests
    check valgrind prometheus
    # the fuzz stage: tests/fuzz built as libFuzzer targets (clang's -fsanitize=fuzzer, whose
    # runtime is in libclang-rt-14-dev)
    clang libclang-rt-14-dev
    systemd # systemd-analyze verify, for the installed plegd.service; journald for the tests
    util-linux iproute2 # unshare(1) and ip(8): the outage test's private /run and loopback
    curl jq # the plegd-events test runs README's `curl -sN .../events | jq` consumer
    # plegd's TLS is GLib's: glib-networking's GnuTLS backend; openssl makes the certificates of
    # the plegd-security test (a CA, expired and foreign client certificates)
    glib-networking openssl
    scdoc   # builds the manual pages plegd(8) and libpleg(3) from doc/man/*.scd.in
    man-db  # man -l --warnings: the doc suite renders each page and fails on any warning
    gnuplot-nox # scripts/bench.sh's plots
    # a real runtime for tests/integration and the demo; busybox and a static libc build its image
    containerd runc busybox-static libc6-dev
)

missing=()
for pkg in "${packages[@]}"; do
    if [ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null)" != installed ]; then
        missing+=("$pkg")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#packages[@]} packages installed"
    exit 0
fi

if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing packages: ${missing[*]}; run as root" >&2
    exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
