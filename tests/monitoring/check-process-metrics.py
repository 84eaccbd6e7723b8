#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""check-process-metrics.py: a busy plegd's process_* metrics move and agree with /proc.

    check-process-metrics.py --plegd BIN --cri-sim BIN

Starts cri-sim with 500 pods of 3 containers and plegd relisting them every 50 ms while
containers start, exit and go, and checks, against what this script reads of plegd's /proc
around each scrape:
  - process_cpu_seconds_total rises between scrapes while plegd works, and each value lies
    between the utime + stime read just before and just after its scrape;
  - process_start_time_seconds is the kernel's start time (btime + starttime) and falls between
    the spawn and the first scrape;
  - process_open_fds lies between the counts of /proc/PID/fd around the scrape, and
    process_max_fds is the soft "Max open files" of /proc/PID/limits;
  - process_resident_memory_bytes is within a factor 2 of VmRSS and at most
    process_virtual_memory_bytes;
  - plegd_build_info says the version `plegd --version` prints.
Python standard library only; every wait has a deadline.
"""
import os
import re
import subprocess
import sys
import tempfile
import time

from plegd_scrape import (DEADLINE_SEC, Process, parse_args, sample_value, scrape,
                          start_plegd, stop_all, wait_metrics)

PODS, CONTAINERS = 500, 3
TICKS = os.sysconf("SC_CLK_TCK")


def proc_stat(pid):
    """(utime + stime in seconds, starttime in seconds after boot) of @pid."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 of proc(5).
    return (int(fields[11]) + int(fields[12])) / TICKS, int(fields[19]) / TICKS


def boot_time():
    with open("/proc/stat") as f:
        return int(re.search(r"^btime (\d+)$", f.read(), re.M).group(1))


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def soft_nofile(pid):
    with open(f"/proc/{pid}/limits") as f:
        m = re.search(r"^Max open files\s+(\S+)", f.read(), re.M)
    return float("inf") if m.group(1) == "unlimited" else float(m.group(1))


def vm_rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"^VmRSS:\s+(\d+) kB$", f.read(), re.M).group(1)) * 1024


def churn_script(path):
    """Containers started, exited and removed in the bulk pods, 10 a step, every 20 ms."""
    lines = [f"bulk {PODS} {CONTAINERS}"]
    for step in range(400):
        for i in range(10):
            pod = f"bulk-{(step * 10 + i) % PODS}"
            cid = f"churn-{step}-{i}"
            lines += [f"container {pod} {cid}", f"start {cid}"]
            if step > 0:
                old = f"churn-{step - 1}-{i}"
                lines += [f"exit {old} {i}", f"rm {old}"]
        lines.append("sleep 20")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def measured_scrape(url, pid):
    """A scrape with plegd's CPU and open fds read just before and just after it."""
    cpu_before, _ = proc_stat(pid)
    fds_before = open_fds(pid)
    text = scrape(url)
    cpu_after, _ = proc_stat(pid)
    fds_after = open_fds(pid)
    return text, (cpu_before, cpu_after), (fds_before, fds_after)


def check(cond, message, text):
    if not cond:
        sys.exit(f"{message}\n/metrics:\n{text}")


def check_scrape(text, cpu, fds, pid):
    got = sample_value(text, "process_cpu_seconds_total")
    check(got is not None and cpu[0] - 0.011 <= got <= cpu[1] + 0.011,
          f"process_cpu_seconds_total {got} is not plegd's CPU time, {cpu[0]}..{cpu[1]} s", text)
    got = sample_value(text, "process_open_fds")
    # The fds read here do not count the scrape's own connection, which plegd may have open.
    check(got is not None and min(fds) - 1 <= got <= max(fds) + 1,
          f"process_open_fds {got} is not about plegd's {fds[0]}..{fds[1]} open fds", text)
    got = sample_value(text, "process_max_fds")
    check(got == soft_nofile(pid), f"process_max_fds {got} is not plegd's soft RLIMIT_NOFILE "
          f"{soft_nofile(pid)}", text)
    rss, vm = (sample_value(text, "process_resident_memory_bytes"),
               sample_value(text, "process_virtual_memory_bytes"))
    real = vm_rss_bytes(pid)
    check(rss is not None and real / 2 <= rss <= real * 2,
          f"process_resident_memory_bytes {rss} is far from VmRSS {real}", text)
    check(vm is not None and vm >= rss, f"process_virtual_memory_bytes {vm} < resident {rss}",
          text)


def main():
    args = parse_args("--plegd", "--cri-sim")
    version = subprocess.run([args.plegd, "--version"], capture_output=True, text=True,
                             check=True).stdout.split()[-1]

    with tempfile.TemporaryDirectory() as tmp:
        socket = os.path.join(tmp, "cri.sock")
        script = os.path.join(tmp, "churn.txt")
        churn_script(script)
        sim = Process([args.cri_sim, "--socket", socket, "--script", script])
        plegd = None
        try:
            sim.wait_for("out", r"(?m)^ready$")
            spawned = time.time()
            plegd, url = start_plegd(args.plegd, socket, "--relist-period=50ms",
                                     "--plugin-dir=")
            pid = plegd.proc.pid
            wait_metrics(url, lambda t: (sample_value(t, "kubelet_running_pods") or 0) >= PODS,
                         f"{PODS} running pods", plegd)
            first, cpu, fds = measured_scrape(url, pid)
            scraped = time.time()
            check_scrape(first, cpu, fds, pid)

            start = sample_value(first, "process_start_time_seconds")
            _, start_ticks = proc_stat(pid)
            check(start is not None and abs(start - (boot_time() + start_ticks)) < 0.02,
                  f"process_start_time_seconds {start} is not btime + starttime "
                  f"{boot_time() + start_ticks}", first)
            # btime is whole seconds: the start may read up to a second early.
            check(spawned - 1.5 <= start <= scraped,
                  f"process_start_time_seconds {start} is not between the spawn {spawned} and "
                  f"the first scrape {scraped}", first)
            check(f'plegd_build_info{{version="{version}",libpleg_version="{version}",' in first,
                  f"plegd_build_info does not say version {version}", first)

            # Working through the churn, plegd's CPU time rises.
            deadline = time.monotonic() + DEADLINE_SEC
            first_cpu = sample_value(first, "process_cpu_seconds_total")
            while True:
                later, cpu, fds = measured_scrape(url, pid)
                check_scrape(later, cpu, fds, pid)
                if sample_value(later, "process_cpu_seconds_total") >= first_cpu + 0.1:
                    break
                if time.monotonic() > deadline:
                    sys.exit(f"process_cpu_seconds_total stayed at {first_cpu} s for "
                             f"{DEADLINE_SEC} s while plegd relisted {PODS} pods every 50 ms:\n"
                             f"{later}")
                time.sleep(0.2)
            if plegd.proc.poll() is not None or sim.proc.poll() is not None:
                sys.exit(f"plegd or cri-sim ended early; plegd's stderr:\n{plegd.text('err')}\n"
                         f"cri-sim's:\n{sim.text('err')}")
        finally:
            stop_all(plegd, sim)
    print(f"process metrics agree with /proc; CPU time rose from {first_cpu} to "
          f"{sample_value(later, 'process_cpu_seconds_total')} s")


if __name__ == "__main__":
    main()
