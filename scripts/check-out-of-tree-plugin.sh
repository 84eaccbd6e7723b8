#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# Builds examples/out-of-tree-plugin as a plugin author outside this tree would, against libpleg as
# installed (headers and pkg-config file), and loads it with the installed plegd:
#
#   1. meson setup + install of libpleg with --prefix in a temporary directory (no tests) and
#      meson's default libdir (lib/x86_64-linux-gnu on Debian); the installed plegd.service must
#      name that prefix's plegd and plugin folder and pass `systemd-analyze verify`; plegd and
#      libpleg-harness must carry an rpath to that libdir; the harness (cri-sim, its header
#      folder pleg/harness/, libpleg-harness.pc) must be installed;
#   2. the example configured with PKG_CONFIG_PATH at that prefix only, built with -Dwerror=true;
#      it must have been compiled against the installed headers, export only
#      pleg_plugin_descriptor and not link against libpleg; its Check test (test-hello.c: the
#      fake host and cri-sim of libpleg-harness) must build against the installed
#      libpleg-harness and pass under `meson test`;
#   3. the installed plegd, without LD_LIBRARY_PATH, run with --plugin-dir=<the example's build
#      dir>: the plugin's own gate HelloPlugin (declared in hello.plugin, Alpha, off by default)
#      keeps it disabled without a flag, a misspelt gate is still refused, and with
#      --feature-gates=HelloPlugin=true plegd against a runtime that is not there must log
#      "plugin hello: running" and exit 0 on SIGTERM; run without --plugin-dir it must load the
#      installed watchdog plugin.
#
#   scripts/check-out-of-tree-plugin.sh [SOURCE_DIR]
#
# Registered as the meson test "out-of-tree-plugin" (suite "install").  KEEP_TMP=1 keeps the
# temporary directory for a look afterwards.

set -euo pipefail

src=$(cd "${1:-$(dirname "${BASH_SOURCE[0]}")/..}" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pleg-out-of-tree-XXXXXX")
prefix=$tmp/prefix
plegd_pid=

cleanup() {
    if [ -n "$plegd_pid" ]; then
        kill -KILL "$plegd_pid" 2>/dev/null || true
        wait "$plegd_pid" 2>/dev/null || true
    fi
    if [ "${KEEP_TMP:-}" = 1 ]; then
        echo "check-out-of-tree-plugin: kept $tmp"
    else
        rm -rf "$tmp"
    fi
}
trap cleanup EXIT

fail() {
    echo "check-out-of-tree-plugin: FAIL: $*" >&2
    exit 1
}

# The loader refuses group- or world-writable modules.
umask 022

# Run a step quietly; show its output when it fails.
step() {
    local name=$1
    shift
    echo "check-out-of-tree-plugin: $name"
    if ! "$@" >"$tmp/$name.log" 2>&1; then
        cat "$tmp/$name.log" >&2
        fail "$name: $*"
    fi
}

# 1. libpleg, installed.
step setup-libpleg meson setup "$tmp/libpleg-build" "$src" --prefix="$prefix" -Dtests=false
step build-libpleg ninja -C "$tmp/libpleg-build"
step install-libpleg meson install -C "$tmp/libpleg-build" --no-rebuild

# meson's libdir, relative to the prefix: "lib/x86_64-linux-gnu" on Debian.
libdir_rel=$(meson introspect --buildoptions "$tmp/libpleg-build" |
    python3 -c 'import json, sys; print([o["value"] for o in json.load(sys.stdin) if o["name"] == "libdir"][0])')
libdir=$prefix/$libdir_rel
echo "check-out-of-tree-plugin: libdir $libdir"

for header in pleg-plugin.h pleg-metrics.h pleg-types.h harness/fake-host.h harness/cri-sim.h; do
    [ -f "$prefix/include/pleg/$header" ] || fail "$header was not installed"
done
[ -x "$prefix/bin/plegd" ] || fail "plegd was not installed"
[ -x "$prefix/bin/cri-sim" ] || fail "cri-sim was not installed"
[ -x "$prefix/bin/cri-ctl" ] || fail "cri-ctl was not installed"
"$prefix/bin/cri-ctl" --help >/dev/null || fail "the installed cri-ctl does not run"
cri_sim_help=$("$prefix/bin/cri-sim" --help) || fail "cri-sim --help failed"
grep -q '^  exit CID CODE' <<<"$cri_sim_help" || fail "cri-sim --help does not list its commands"
for lib in libpleg.so.0 libpleg-harness.so.0; do
    [ -f "$libdir/$lib" ] || fail "$lib was not installed in $libdir"
done
for pc in libpleg libpleg-harness; do
    [ -f "$libdir/pkgconfig/$pc.pc" ] || fail "$pc.pc was not installed in $libdir/pkgconfig"
done
harness_exports=$(nm -D --defined-only "$libdir/libpleg-harness.so.0" | awk '$2 != "A" { print $3 }' |
    grep -Ev '^(fake_host_|cri_sim_)' || true)
[ -z "$harness_exports" ] || fail "libpleg-harness exports more than fake_host_* and cri_sim_*: $harness_exports"
# A prefix the dynamic linker does not search: the binaries say where libpleg is.
for binary in "$prefix/bin/plegd" "$prefix/bin/cri-ctl" "$libdir/libpleg-harness.so.0"; do
    readelf -d "$binary" | grep -E '\((RUNPATH|RPATH)\)' | grep -qF "[$libdir]" ||
        fail "$binary has no rpath to $libdir: $(readelf -d "$binary" | grep -E 'RUNPATH|RPATH')"
done

unit=$prefix/lib/systemd/system/plegd.service
[ -f "$unit" ] || fail "plegd.service was not installed in $prefix/lib/systemd/system"
grep -q "^ExecStart=$prefix/bin/plegd " "$unit" || fail "plegd.service does not run $prefix/bin/plegd"
grep -q -- "--plugin-dir=$libdir/pleg/plugins " "$unit" ||
    fail "plegd.service does not use the plugin folder $libdir/pleg/plugins"
if grep -q '@[a-z_]*@' "$unit"; then
    fail "plegd.service has unsubstituted variables: $(grep -o '@[a-z_]*@' "$unit" | sort -u)"
fi
# The unit's Documentation= names plegd(8): systemd-analyze looks it up with man(1), which must
# find the page this prefix installed.
step verify-unit env MANPATH="$prefix/share/man:" systemd-analyze verify "$unit"

# 2. The example plugin, against the installed libpleg only.
export PKG_CONFIG_PATH=$libdir/pkgconfig
unset PKG_CONFIG_LIBDIR
pkg-config --exists libpleg || fail "pkg-config does not find libpleg in $PKG_CONFIG_PATH"
plugindir=$(pkg-config --variable=plugindir libpleg)
[ "$plugindir" = "$libdir/pleg/plugins" ] ||
    fail "plugindir is \"$plugindir\", expected $libdir/pleg/plugins"
pkg-config --exists libpleg-harness || fail "pkg-config does not find libpleg-harness"

step setup-hello meson setup "$tmp/hello-build" "$src/examples/out-of-tree-plugin" -Dwerror=true \
    -Dtests=enabled
step build-hello ninja -C "$tmp/hello-build"

module=$tmp/hello-build/libpleg-hello.so
[ -f "$module" ] || fail "no $module"
[ -f "$tmp/hello-build/hello.plugin" ] || fail "hello.plugin was not copied next to the module"

commands=$tmp/hello-build/compile_commands.json
grep -q -- "-I$prefix/include" "$commands" || fail "hello.c was not compiled with -I$prefix/include"
if grep -q -- "$src/lib/include" "$commands"; then
    fail "hello.c was compiled against the source tree's headers"
fi

exports=$(nm -D --defined-only "$module" | awk '{ print $3 }' | sort)
[ "$exports" = pleg_plugin_descriptor ] ||
    fail "the module must export only pleg_plugin_descriptor, it exports: $(echo $exports)"
if readelf -d "$module" | grep -q 'NEEDED.*libpleg\.so'; then
    fail "the module links against libpleg"
fi

# The plugin's own test, through the installed harness.
test_hello=$tmp/hello-build/test-hello
[ -x "$test_hello" ] || fail "test-hello was not built"
readelf -d "$test_hello" | grep -q 'NEEDED.*libpleg-harness\.so' ||
    fail "test-hello does not link libpleg-harness"
grep -q -- "-I$src/tests/harness" "$commands" && fail "test-hello was compiled against the source tree's harness"
step test-hello meson test -C "$tmp/hello-build" --print-errorlogs
grep -Eq '^Ok: +1 *$' "$tmp/test-hello.log" || fail "test-hello did not run: $(cat "$tmp/test-hello.log")"

# 3. Loaded by the installed plegd, which finds libpleg through its rpath.
unset LD_LIBRARY_PATH

# run_plegd NAME NEEDLE ARGS...: runs the installed plegd until its stderr shows NEEDLE, then
# stops it with SIGTERM, which must exit 0.
run_plegd() {
    local name=$1 needle=$2
    shift 2
    echo "check-out-of-tree-plugin: $name"
    "$prefix/bin/plegd" --metrics-bind-address=127.0.0.1:0 --socket="$tmp/plegd.sock" \
        --container-runtime-endpoint="unix://$tmp/nothing.sock" --relist-period=100ms \
        "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
    plegd_pid=$!

    local deadline=$((SECONDS + 60))
    until grep -qF "$needle" "$tmp/$name.err"; do
        if ! kill -0 "$plegd_pid" 2>/dev/null; then
            cat "$tmp/$name.err" >&2
            fail "$name: plegd exited before logging \"$needle\""
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            cat "$tmp/$name.err" >&2
            fail "$name: plegd never logged \"$needle\""
        fi
        sleep 0.1
    done
    # Logged after the signal handlers are in place.
    until grep -q "relisting" "$tmp/$name.err"; do sleep 0.1; done

    kill -TERM "$plegd_pid"
    local status=0
    wait "$plegd_pid" || status=$?
    plegd_pid=
    cat "$tmp/$name.err"
    [ "$status" -eq 0 ] || fail "$name: plegd exited with $status on SIGTERM"
}

plegd_args=(--plugin-dir="$tmp/hello-build" --metrics-bind-address=127.0.0.1:0
    --socket="$tmp/plegd.sock" --container-runtime-endpoint="unix://$tmp/nothing.sock"
    --relist-period=100ms)

# Its gate is off by default: a required hello is then an error naming the gate.
echo "check-out-of-tree-plugin: gate-default-off"
status=0
timeout 60 "$prefix/bin/plegd" "${plegd_args[@]}" --require-plugins=hello \
    >"$tmp/off.out" 2>"$tmp/off.err" || status=$?
grep -q "required plugin hello is disabled: feature gate HelloPlugin is off" "$tmp/off.err" || {
    cat "$tmp/off.err" >&2
    fail "with HelloPlugin at its default, plegd did not say hello is disabled by its gate"
}
[ "$status" -ne 0 ] || fail "plegd exited 0 with a required plugin disabled"

# A gate nobody declares is still an error.
echo "check-out-of-tree-plugin: gate-unknown"
status=0
timeout 60 "$prefix/bin/plegd" "${plegd_args[@]}" --feature-gates=HelloPlugn=true \
    >"$tmp/unknown.out" 2>"$tmp/unknown.err" || status=$?
grep -q "unrecognized feature gate: HelloPlugn" "$tmp/unknown.err" || {
    cat "$tmp/unknown.err" >&2
    fail "plegd did not refuse the unknown gate HelloPlugn"
}
[ "$status" -eq 2 ] || fail "plegd exited $status on an unknown gate, expected 2"

run_plegd run-plegd "plugin hello: running" --plugin-dir="$tmp/hello-build" \
    --feature-gates=HelloPlugin=true --require-plugins=hello
# Without --plugin-dir: the prefix's own plugin folder.
run_plegd run-plegd-installed "plugin watchdog: running" --require-plugins=watchdog
grep -qF "plugins: searching $libdir/pleg/plugins (the installed plugin folder)" \
    "$tmp/run-plegd-installed.err" || fail "the installed plegd did not search $libdir/pleg/plugins"
grep -q "plugin evented: disabled (feature gate EventedPLEG off)" "$tmp/run-plegd-installed.err" ||
    fail "the installed plegd did not find the evented plugin"
echo "check-out-of-tree-plugin: OK"
