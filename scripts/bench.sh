#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# scripts/bench.sh OUT-DIR [BUILD-DIR]
#
# Runs every benchmark of the tree (`meson test --benchmark`: the perf suite and the evented
# latency benchmark) one after the other in a release build (BUILD-DIR, default build-bench),
# and writes into OUT-DIR, which it creates:
#   NAME.log    what the benchmark printed (its table of figures, side by side)
#   NAME.json   its figures, for the benchmarks that take --json=FILE
#   summary.txt the table printed at the end: each benchmark, met or missed, how long it took
#   relist.png  libpleg's and the bare client's CPU per steady relist by size (with gnuplot)
# BENCH_ONLY="NAME..." runs only those benchmarks.  Exits 1 when a benchmark missed its goal or
# failed, 0 when every goal was met.  A benchmark
# measures side by side within its own run; run this on an otherwise quiet machine, and more
# than once, before trusting an absolute figure (doc/performance.md).

set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: scripts/bench.sh OUT-DIR [BUILD-DIR]" >&2
    exit 2
fi
out=$(mkdir -p "$1" && cd "$1" && pwd)
build=${2:-build-bench}
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" -Dbuildtype=release
fi
ninja -C "$build"

python3 - "$build" "$out" <<'EOF'
import json, os, shutil, subprocess, sys, time

build, out = sys.argv[1], sys.argv[2]
benchmarks = json.loads(subprocess.check_output(["meson", "introspect", "--benchmarks", build]))
only = os.environ.get("BENCH_ONLY", "").split()
if only:
    unknown = set(only) - {b["name"] for b in benchmarks}
    if unknown:
        sys.exit(f"bench.sh: no benchmark {' '.join(sorted(unknown))}")
    benchmarks = [b for b in benchmarks if b["name"] in only]
rows, failed = [], 0
for bench in sorted(benchmarks, key=lambda b: b["name"]):
    name, cmd = bench["name"], list(bench["cmd"])
    env = dict(os.environ, **(bench.get("env") or {}))
    helptext = subprocess.run([cmd[0], "--help"], capture_output=True, text=True, env=env,
                              cwd=bench.get("workdir") or build).stdout
    if "--json" in helptext:
        cmd.append(f"--json={out}/{name}.json")
    print(f"bench.sh: {name}: {' '.join(cmd)}", flush=True)
    start = time.monotonic()
    with open(f"{out}/{name}.log", "w") as log:
        try:
            status = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    # meson runs a benchmark in the build folder, and
                                    # gives programs (cri-sim) relative to it
                                    cwd=bench.get("workdir") or build,
                                    timeout=bench.get("timeout") or None).returncode
        except subprocess.TimeoutExpired:
            status = "timeout"
    took = time.monotonic() - start
    verdict = {0: "met", 77: "skipped"}.get(status, "MISSED" if status == 1 else f"failed ({status})")
    if verdict != "met":
        failed += 1
    rows.append((name, verdict, f"{took:.0f} s"))
    print(f"bench.sh: {name}: {verdict} in {took:.0f} s (log {out}/{name}.log)", flush=True)

width = max(len(r[0]) for r in rows) + 2
lines = [f"{'benchmark':<{width}}{'goal':<12}took"]
lines += [f"{n:<{width}}{v:<12}{t}" for n, v, t in rows]
with open(f"{out}/summary.txt", "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))

relist = f"{out}/relist.json"
if os.path.exists(relist) and shutil.which("gnuplot"):
    data = json.load(open(relist))
    with open(f"{out}/relist.dat", "w") as f:
        for size in data.get("sizes", []):
            f.write(f'{size["pods"]} {size["libpleg_cpu_ms"]["median"]} '
                    f'{size["bare_cpu_ms"]["median"]}\n')
    subprocess.run(["gnuplot", "-e",
                    f"set terminal png size 800,500; set output '{out}/relist.png';"
                    "set logscale xy; set xlabel 'pods (3 containers each)';"
                    "set ylabel 'CPU ms per steady relist (median)';"
                    f"plot '{out}/relist.dat' using 1:2 with linespoints title 'libpleg',"
                    f"'' using 1:3 with linespoints title 'bare client'"], check=False)
sys.exit(1 if failed else 0)
EOF
