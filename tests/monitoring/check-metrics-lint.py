#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""check-metrics-lint.py: every metric a real plegd exposes passes `promtool check metrics`, but
kubelet's own names.

    check-metrics-lint.py --promtool BIN --plegd BIN --cri-sim BIN --plugin-dir DIRS

Starts cri-sim and plegd against it with EventedPLEG on, both plugins and a --state-dir, makes
the labelled series appear (a container exits, a global relist fails, the event stream ends with
an error, an /events client connects), scrapes /metrics and lints it with promtool.

Families named kubelet_* are left out of the lint: plegd keeps kubelet's names and label values
as kubelet spells them, so that dashboards and alerts written for kubelet read plegd, and a few
of them break promtool's naming rules (kubelet_pleg_discard_events and
kubelet_evented_pleg_connection_*_count are counters without _total).  What promtool says of
them is printed, not judged.  Everything else (pleg_*, plegd_*, process_*) must lint clean; the
check first shows that promtool fails a bad counter, so that it cannot pass by accident.
Python standard library only; every wait has a deadline.
"""
import os
import re
import subprocess
import sys
import tempfile
import urllib.request

from plegd_scrape import (Process, parse_args, parse_exposition, sample_value, start_plegd,
                          stop_all, wait_metrics)

# Families that must be in the linted text: the exporter metrics and libpleg's own.
MUST_LINT = [
    "process_cpu_seconds_total", "process_open_fds", "process_max_fds",
    "process_resident_memory_bytes", "process_virtual_memory_bytes", "process_start_time_seconds",
    "plegd_build_info", "plegd_plugin_state", "pleg_relist_failures_total",
    "pleg_cri_listing_over_limit_total", "plegd_events_clients", "plegd_state_durable",
]


def promtool_lint(promtool, text):
    """(exit status, output) of `promtool check metrics` on @text."""
    run = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                         text=True, timeout=60)
    return run.returncode, (run.stdout + run.stderr).strip()


def split_families(text):
    """The exposition cut into (family name, its lines) in order: a family's HELP, TYPE and
    samples (a histogram's _bucket, _sum and _count included) travel together."""
    families, current, lines = [], None, []
    for line in text.splitlines():
        m = re.match(r"^# (?:HELP|TYPE) (\S+)", line)
        name = m.group(1) if m else None
        if name and name != current:
            if current is not None:
                families.append((current, lines))
            current, lines = name, []
        lines.append(line)
    if current is not None:
        families.append((current, lines))
    return families


def self_check(promtool):
    bad = ("# HELP bad_counter A counter without _total.\n# TYPE bad_counter counter\n"
           "bad_counter 1\n")
    status, _ = promtool_lint(promtool, bad)
    if status == 0:
        sys.exit("self-check failed: promtool passed a counter without _total")
    good = "# HELP good_total A counter.\n# TYPE good_total counter\ngood_total 1\n"
    status, out = promtool_lint(promtool, good)
    if status != 0:
        sys.exit(f"self-check failed: promtool failed a clean counter: {out}")


def busy_scrape(args, tmp):
    socket = os.path.join(tmp, "cri.sock")
    sim = Process([args.cri_sim, "--socket", socket],
                  stdin="pod u1 web\ncontainer u1 c1 app\nstart c1\n")
    plegd = None
    try:
        sim.wait_for("out", r"(?m)^ready$")
        plegd, url = start_plegd(args.plegd, socket, "--relist-period=100ms",
                                 "--feature-gates=EventedPLEG=true",
                                 f"--plugin-dir={args.plugin_dir}",
                                 "--require-plugins=evented,watchdog",
                                 f"--state-dir={os.path.join(tmp, 'state')}",
                                 # The /events client below comes over TCP.
                                 "--serve-events-over-tcp=loopback-unauthenticated")
        wait_metrics(url, lambda t: sample_value(t, "kubelet_evented_pleg_connection_state") == 1,
                     "a connected event stream", plegd)
        events = urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
            url.replace("/metrics", "/events"), timeout=10)
        # Relists that fail (five ListPodSandbox calls: a targeted relist after the exit may
        # take one), an exit, and a stream the runtime ends with an error.
        sim.send("fail ListPodSandbox 14 5\nexit c1 3\nend-stream error 14 bye\n")
        sim.wait_for("out", r"(?m)^ok$", count=6)
        text = wait_metrics(
            url,
            lambda t: (sample_value(t, "pleg_relist_failures_total",
                                    {"reason": "unavailable"}) or 0) >= 1
            and (sample_value(t, "kubelet_runtime_operations_errors_total",
                              {"operation_type": "get_container_events"}) or 0) >= 1
            and (sample_value(t, "plegd_events_clients") or 0) >= 1,
            "a failed relist, an ended event stream and an /events client", plegd)
        events.close()
        return text
    finally:
        stop_all(plegd, sim)


def main():
    args = parse_args("--promtool", "--plegd", "--cri-sim", "--plugin-dir")
    self_check(args.promtool)

    with tempfile.TemporaryDirectory() as tmp:
        text = busy_scrape(args, tmp)

    kept, kubelet = [], []
    for name, lines in split_families(text):
        (kubelet if name.startswith("kubelet_") else kept).append((name, lines))
    linted = "\n".join(line for _, lines in kept for line in lines) + "\n"
    _, types = parse_exposition(linted)
    missing = [name for name in MUST_LINT if name not in types]
    if missing:
        sys.exit(f"the scrape has no {', '.join(missing)} to lint:\n{text}")

    status, out = promtool_lint(args.promtool, linted)
    _, said = promtool_lint(args.promtool,
                            "\n".join(line for _, lines in kubelet for line in lines) + "\n")
    if said:
        print(f"promtool on kubelet's names, not judged:\n{said}")
    if status != 0:
        sys.exit(f"promtool check metrics failed (exit {status}):\n{out}\non:\n{linted}")
    print(f"{len(kept)} families lint clean ({len(kubelet)} kubelet_* families left out)")


if __name__ == "__main__":
    main()
