#!/bin/bash
# containerd-sandbox.sh removes only folders that its own `start` made: `stop` on any other folder
# must fail and leave it as it was, and `start` must refuse a folder with something in it.
set -euo pipefail
script=$1
victim=$(mktemp -d)
trap 'rm -rf "$victim"' EXIT
echo precious > "$victim/data.txt"

if "$script" stop "$victim" 2>/dev/null; then
    echo "stop removed a folder that start never made" >&2
    exit 1
fi
[ "$(cat "$victim/data.txt")" = precious ] || { echo "stop touched $victim" >&2; exit 1; }

if "$script" start "$victim" 2>/dev/null; then
    "$script" stop "$victim" || true
    echo "start took a folder that was not empty" >&2
    exit 1
fi
[ "$(cat "$victim/data.txt")" = precious ] || { echo "start touched $victim" >&2; exit 1; }
# a folder that does not exist is fine to stop
"$script" stop "$victim/never-made"
echo "containerd-sandbox.sh refuses foreign folders"
