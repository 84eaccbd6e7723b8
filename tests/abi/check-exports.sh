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

# The names between "global:" and "local:", one per line, without the ';'.
sed -n '/global:/,/local:/p' "$map" | sed -e '/global:/d' -e '/local:/d' -e 's/[[:space:];]//g' \
    -e '/^$/d' | sort > "$tmp/listed"
if ! "$NM" -D --defined-only "$library" > "$tmp/table"; then
    echo "$library: cannot read the dynamic symbol table" >&2
    exit 1
fi
# Version nodes appear as absolute symbols (type A); everything else must be a function (T),
# named NAME@@LIBPLEG_0.
awk 'NF >= 3 && $2 != "A" { sub(/@.*/, "", $3); print $3 }' "$tmp/table" | sort > "$tmp/exported"
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
