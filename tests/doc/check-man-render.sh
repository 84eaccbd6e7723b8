#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# check-man-render.sh PAGE NAME: man-db renders the built manual page PAGE at 80 columns without a
# single groff or man warning, and the rendering has the sections every page needs and names NAME.

set -euo pipefail

page=$1
name=$2
err=$(mktemp)
trap 'rm -f "$err"' EXIT

out=$(MANWIDTH=80 MANPAGER=cat PAGER=cat LC_ALL=C.UTF-8 man -l --warnings "$page" 2>"$err")
if [ -s "$err" ]; then
    echo "man -l --warnings $page printed warnings:" >&2
    cat "$err" >&2
    exit 1
fi
for section in NAME SYNOPSIS DESCRIPTION "SEE ALSO"; do
    if ! grep -q "^$section\$" <<<"$out"; then
        echo "$page has no $section section; it renders as:" >&2
        echo "$out" >&2
        exit 1
    fi
done
if ! grep -q "^       $name - " <<<"$out"; then
    echo "$page does not name $name in NAME" >&2
    exit 1
fi
echo "$page renders without warnings ($(wc -l <<<"$out") lines)"
