#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Fails when a plugin module exports a symbol other than pleg_plugin_descriptor (pleg-plugin.h:
# a plugin exports exactly one symbol; plugins/plugin.map is the version script that does it).
# Usage: check-plugin-exports.sh MODULE...
set -eu

NM=${NM:-nm}
status=0
[ $# -gt 0 ] || { echo "usage: $0 MODULE..." >&2; exit 2; }

for module in "$@"; do
    bad=0
    if ! table=$("$NM" -D --defined-only "$module"); then
        echo "$module: cannot read the dynamic symbol table" >&2
        status=1
        continue
    fi
    symbols=$(printf '%s\n' "$table" | awk 'NF >= 3 { print $3 }')
    extra=$(printf '%s\n' "$symbols" | grep -v -x -e 'pleg_plugin_descriptor' -e '' || true)
    if [ -n "$extra" ]; then
        echo "$module exports more than pleg_plugin_descriptor:" >&2
        printf '  %s\n' $extra >&2
        bad=1
    fi
    if ! printf '%s\n' "$symbols" | grep -q -x 'pleg_plugin_descriptor'; then
        echo "$module does not export pleg_plugin_descriptor" >&2
        bad=1
    fi
    if [ $bad -eq 0 ]; then
        echo "$module: ok"
    else
        status=1
    fi
done
exit $status
