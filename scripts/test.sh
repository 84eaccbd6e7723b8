#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# The whole test suite, as root on Debian 12: installs what the build and the tests need, builds with
# -Dwerror=true in $BUILD_DIR (default build-test), runs every meson test suite (the integration suite
# starts its own private containerd), then the unit suite again under valgrind.  The last line is
# "N passed, N failed" over both runs; a skipped test counts as failed.  Exits non-zero on any failure.

set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD_DIR=${BUILD_DIR:-build-test}

bash scripts/install-deps.sh

build() {
    if [ -f "$BUILD_DIR/build.ninja" ]; then
        meson configure "$BUILD_DIR" -Dwerror=true
    else
        meson setup "$BUILD_DIR" -Dwerror=true
    fi
    ninja -C "$BUILD_DIR"
}

if ! build; then
    echo "test.sh: the build failed" >&2
    echo "0 passed, 1 failed"
    exit 1
fi

logs=$BUILD_DIR/meson-logs
rm -f "$logs/testlog.json" "$logs/testlog-valgrind.json"

status=0
meson test -C "$BUILD_DIR" --print-errorlogs || status=$?
echo "test.sh: meson test exited with $status"
status=0
meson test -C "$BUILD_DIR" --print-errorlogs --setup=valgrind --suite unit || status=$?
echo "test.sh: meson test --setup=valgrind --suite unit exited with $status"

# OK and EXPECTEDFAIL pass; everything else, SKIP included, fails.  No result at all is a failure too.
python3 - "$logs/testlog.json" "$logs/testlog-valgrind.json" <<'EOF'
import json, os, sys

passed = failed = 0
for path in sys.argv[1:]:
    if not os.path.exists(path):
        print(f"test.sh: {path} is missing", file=sys.stderr)
        failed += 1
        continue
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            result = json.loads(line)["result"]
            if result in ("OK", "EXPECTEDFAIL"):
                passed += 1
            else:
                failed += 1
if passed + failed == 0:
    failed = 1
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
EOF
