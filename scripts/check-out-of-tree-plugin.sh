#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# Builds examples/out-of-tree-plugin as a plugin author outside this tree would, against libpleg as
# installed (headers and pkg-config file), and loads it with the installed plegd:
#
#   1. meson setup + install of libpleg with --prefix in a temporary directory (no tests); the
#      installed plegd.service must name that prefix's plegd and plugin folder and pass
#      `systemd-analyze verify`;
#   2. the example configured with PKG_CONFIG_PATH at that prefix only, built with -Dwerror=true;
#      it must have been compiled against the installed headers, export only
#      pleg_plugin_descriptor and not link against libpleg;
#   3. the installed plegd run with --plugin-dir=<the example's build dir>: the plugin's own gate
#      HelloPlugin (declared in hello.plugin, Alpha, off by default) keeps it disabled without a
#      flag, a misspelt gate is still refused, and with --feature-gates=HelloPlugin=true plegd
#      against a runtime that is not there must log "plugin hello: running" and exit 0 on SIGTERM.
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
step setup-libpleg meson setup "$tmp/libpleg-build" "$src" --prefix="$prefix" --libdir=lib \
    -Dtests=false
step build-libpleg ninja -C "$tmp/libpleg-build"
step install-libpleg meson install -C "$tmp/libpleg-build" --no-rebuild

for header in pleg-plugin.h pleg-metrics.h pleg-types.h; do
    [ -f "$prefix/include/pleg/$header" ] || fail "$header was not installed"
done
[ -x "$prefix/bin/plegd" ] || fail "plegd was not installed"

unit=$prefix/lib/systemd/system/plegd.service
[ -f "$unit" ] || fail "plegd.service was not installed in $prefix/lib/systemd/system"
grep -q "^ExecStart=$prefix/bin/plegd " "$unit" || fail "plegd.service does not run $prefix/bin/plegd"
grep -q -- "--plugin-dir=$prefix/lib/pleg/plugins " "$unit" ||
    fail "plegd.service does not use the plugin folder $prefix/lib/pleg/plugins"
if grep -q '@[a-z_]*@' "$unit"; then
    fail "plegd.service has unsubstituted variables: $(grep -o '@[a-z_]*@' "$unit" | sort -u)"
fi
step verify-unit systemd-analyze verify "$unit"

# 2. The example plugin, against the installed libpleg only.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
unset PKG_CONFIG_LIBDIR
pkg-config --exists libpleg || fail "pkg-config does not find libpleg in $PKG_CONFIG_PATH"
plugindir=$(pkg-config --variable=plugindir libpleg)
[ "$plugindir" = "$prefix/lib/pleg/plugins" ] ||
    fail "plugindir is \"$plugindir\", expected $prefix/lib/pleg/plugins"

step setup-hello meson setup "$tmp/hello-build" "$src/examples/out-of-tree-plugin" -Dwerror=true
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

# 3. Loaded by the installed plegd.  Meson strips the build rpath on install.
export LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
plegd_args=(--plugin-dir="$tmp/hello-build" --metrics-bind-address=127.0.0.1:0
    --container-runtime-endpoint="unix://$tmp/nothing.sock" --relist-period=100ms)

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

echo "check-out-of-tree-plugin: run-plegd"
"$prefix/bin/plegd" "${plegd_args[@]}" --feature-gates=HelloPlugin=true \
    --require-plugins=hello >"$tmp/plegd.out" 2>"$tmp/plegd.err" &
plegd_pid=$!

deadline=$((SECONDS + 60))
until grep -q "plugin hello: running" "$tmp/plegd.err"; do
    if ! kill -0 "$plegd_pid" 2>/dev/null; then
        cat "$tmp/plegd.err" >&2
        fail "plegd exited before the plugin ran"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
        cat "$tmp/plegd.err" >&2
        fail "plegd never logged \"plugin hello: running\""
    fi
    sleep 0.1
done

kill -TERM "$plegd_pid"
status=0
wait "$plegd_pid" || status=$?
plegd_pid=
cat "$tmp/plegd.err"
[ "$status" -eq 0 ] || fail "plegd exited with $status on SIGTERM"
echo "check-out-of-tree-plugin: OK"
