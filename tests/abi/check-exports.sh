#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Fails unless LIBRARY exports exactly the functions that the global: section of MAP names, and no
# data.  Usage: check-exports.sh LIBRARY MAP
set -eu

NM=${NM:-nm}
[ $# -eq 2 ] || { echo "usage: $0 LIBRARY MAP" >&2; exit 2; }
library=$1
map=$2

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The names of every version node's global: section, one per line, as NAME@NODE: the lines
# after a "global:" up to its node's "local:" or closing "}".
awk '/^[A-Za-z0-9_]+[[:space:]]*{/ { node = $1 } /global:/ { on = 1; next } /local:|}/ { on = 0 }
     on && /^[[:space:]]*[a-z_0-9]+;/ { gsub(/[[:space:];]/, ""); print $0 "@" node }' "$map" |
    sort > "$tmp/listed"
if ! "$NM" -D --defined-only "$library" > "$tmp/table"; then
    echo "$library: cannot read the dynamic symbol table" >&2
    exit 1
fi
# Version nodes appear as absolute symbols (type A); everything else must be a function (T),
# named NAME@@LIBPLEG_<version>.
awk 'NF >= 3 && $2 != "A" { sub(/@@?/, "@", $3); print $3 }' "$tmp/table" | sort > "$tmp/exported"
awk 'NF >= 3 && $2 != "A" && $2 != "T" { print "  " $3 " (type " $2 ")" }' "$tmp/table" > "$tmp/data"

status=0
if [ -s "$tmp/data" ]; then
    echo "$library exports data symbols:" >&2
    cat "$tmp/data" >&2
    status=1
fi
extra=$(comm -13 "$tmp/listed" "$tmp/exported")
if [ -n "$extra" ]; then
    echo "$library exports symbols that $map does not list:" >&2
    printf '  %s\n' $extra >&2
    status=1
fi
missing=$(comm -23 "$tmp/listed" "$tmp/exported")
if [ -n "$missing" ]; then
    echo "$map lists symbols that $library does not export:" >&2
    printf '  %s\n' $missing >&2
    status=1
fi
[ $status -eq 0 ] && echo "$library: exports exactly the $(wc -l < "$tmp/listed") functions of $map"
exit $status
