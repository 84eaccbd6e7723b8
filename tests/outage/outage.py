#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""outage.py: plegd as the shipped unit runs it, through a runtime outage of 10 minutes.

    outage.py --unit plegd.service --plegd BIN --plugin-dir DIRS --cri-sim BIN [--duration SEC]

issue #22 point 1: a runtime that is down, for any length of time, fails readiness, never
liveness, since restarting plegd cannot bring the runtime back.  So under the unit systemd
installs (Type=notify, WatchdogSec=10s, WatchdogSignal=SIGABRT, Restart=on-failure) an outage
of 10 minutes, far past kubelet's 3-minute relist threshold, must leave plegd running with its
ring of events intact and no heartbeat gap that would have made systemd kill it.

systemd is not PID 1 here, so the test does what systemd would for the unit: it runs the
unit's ExecStart as written, in a mount and network namespace of its own (a private /run with a
systemd-journald of its own and the unit's RuntimeDirectory=, a private loopback so that the
unit's port 10388 is free), with
the environment systemd gives a Type=notify unit with WatchdogSec= (NOTIFY_SOCKET,
WATCHDOG_USEC, INVOCATION_ID), stdout to /dev/null (StandardOutput=null) and stderr a stream
to journald (StandardError=journal).  Only the paths of the install are replaced by the build
tree's: the binary, --plugin-dir, --state-dir (a fresh directory of mode 0700, as
StateDirectory= makes it), and the runtime endpoint, whose unix socket cri-sim serves.

Checks:
  - plegd is running at the end of the outage, and exits 0 on SIGTERM after it;
  - WATCHDOG=1 comes at the interval systemd asks for (WatchdogSec / 2): no gap above it, with
    1.5 s for scheduling on a loaded machine (systemd would kill at WatchdogSec);
  - /livez answers 200 every 5 s of the outage; /readyz?verbose answers 503 naming the runtime
    and, once the outage passed kubelet's threshold, kubelet's PLEG message;
  - after the runtime comes back: /readyz 200, the events from before the outage are still
    served with the same seqs and instance (the ring was not emptied), and a container that
    died during the outage is reported once, with its exit code.

PLEGD_OUTAGE_DURATION (seconds, default 600) shortens it for a run by hand.  Needs root (the
namespaces), unshare(1), ip(8) and systemd-journald; fails without them, never skips.  Exit 0
when every check passed, 1 when one failed (each on its own "outage: FAIL:" line).
"""

import argparse
import ctypes
import http.client
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

JOURNALD = ["/lib/systemd/systemd-journald", "/usr/lib/systemd/systemd-journald"]
PROBE_EVERY = 5.0  # seconds between /livez probes during the outage
SCHEDULING_SLACK = 1.5  # seconds a heartbeat may come late on a loaded 2-core machine
# kubelet's relist threshold, plegd's default: past it the PLEG message joins /readyz.
RELIST_THRESHOLD = 180.0
# gRPC's reconnect backoff grows to 120 s while the runtime is away: the first relist after the
# runtime is back may wait that long.
RECOVERY_TIMEOUT = 150.0
STEP_TIMEOUT = 60.0

failures = []


def log(msg):
    print(f"outage: {msg}", flush=True)


def fail(msg):
    failures.append(msg)
    log(f"FAIL: {msg}")


def die_with_parent():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def wait_until(cond, timeout, what, step=0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} within {timeout:.0f} s")
        time.sleep(step)


# ---- the unit ----

def unit_service_section(path):
    """The [Service] settings of a unit file: name -> list of values, continuations joined."""
    settings = {}
    section = None
    pending = ""
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = pending + raw.rstrip("\n")
            pending = ""
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            stripped = line.strip()
            if not stripped or stripped.startswith(("#", ";")):
                continue
            if stripped.startswith("["):
                section = stripped
                continue
            if section == "[Service]" and "=" in stripped:
                name, value = stripped.split("=", 1)
                settings.setdefault(name.strip(), []).append(value.strip())
    return settings


def seconds(value):
    """A systemd time span of the forms the unit uses: 10s, 5min, 500ms, or plain seconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|s|sec|min|m)?", value)
    if not m:
        raise ValueError(f"cannot read time span {value!r}")
    scale = {"ms": 0.001, "s": 1, "sec": 1, "min": 60, "m": 60, None: 1}[m.group(2)]
    return float(m.group(1)) * scale


def unit_command(settings, args, endpoint, state_dir):
    """ExecStart with the install's paths replaced by the build tree's."""
    argv = shlex.split(settings["ExecStart"][-1])
    replaced = [args.plegd]
    for arg in argv[1:]:
        name = arg.split("=", 1)[0]
        if name == "--container-runtime-endpoint":
            arg = f"{name}=unix://{endpoint}"
        elif name == "--plugin-dir":
            arg = f"{name}={args.plugin_dir}"
        elif name == "--state-dir":
            arg = f"{name}={state_dir}"
        replaced.append(arg)
    return replaced


def flag(argv, name):
    for arg in argv:
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


# ---- the namespace: a private /run with journald, a private loopback ----

def enter_namespace():
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", "/run"], check=True)
    if os.path.isdir("/var/log/journal"):
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", "/var/log/journal"],
                       check=True)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    os.makedirs("/run/systemd/journal", exist_ok=True)
    journald = next((p for p in JOURNALD if os.access(p, os.X_OK)), None)
    if journald is None:
        raise RuntimeError("no systemd-journald")
    proc = subprocess.Popen([journald], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=die_with_parent)
    wait_until(lambda: os.path.exists("/run/systemd/journal/stdout"), STEP_TIMEOUT,
               "journald made /run/systemd/journal/stdout")
    return proc


def journal_stream(identifier):
    """A stream to journald, as systemd connects a unit's stderr (StandardError=journal)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("/run/systemd/journal/stdout")
    # identifier, unit id, priority, level prefix, to syslog, to kmsg, to console
    s.sendall(f"{identifier}\n\n6\n1\n0\n0\n0\n".encode())
    s.shutdown(socket.SHUT_RD)
    return s


# ---- cri-sim ----

class CriSim:
    def __init__(self, binary, socket_path):
        self.proc = subprocess.Popen([binary, "--socket", socket_path], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1,
                                     preexec_fn=die_with_parent)
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"cri-sim did not start: {line!r}")

    def run(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if answer != "ok":
            raise RuntimeError(f"cri-sim: {command!r} answered {answer!r}")

    def quit(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


# ---- plegd's HTTP API ----

class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


class Api:
    """GETs on plegd's TCP address (health), and on its unix socket when the unit gives one."""

    def __init__(self, tcp_address, unix_path):
        host, port = tcp_address.rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.unix_path = unix_path

    def get(self, path, private=False, timeout=10):
        if private and self.unix_path:
            conn = UnixHTTPConnection(self.unix_path, timeout)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read().decode("utf-8", "replace"), resp.getheaders()
        except OSError as e:
            return None, str(e), []
        finally:
            conn.close()

    def events(self):
        """Every event the ring holds (follow=false), and the history's instance."""
        status, body, headers = self.get("/events?follow=false&since=0", private=True)
        if status != 200:
            raise RuntimeError(f"/events answered {status}: {body.strip()}")
        instance = dict((k.lower(), v) for k, v in headers).get("plegd-instance")
        return [json.loads(line) for line in body.splitlines() if line], instance


# ---- the heartbeat ----

class Notifications:
    """sd_notify datagrams as systemd's NOTIFY_SOCKET receives them."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.lock = threading.Lock()
        self.ready = False
        self.heartbeats = []  # monotonic times of WATCHDOG=1
        self.other = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            data = self.sock.recv(4096).decode("utf-8", "replace")
            now = time.monotonic()
            with self.lock:
                for line in data.splitlines():
                    if line == "WATCHDOG=1":
                        self.heartbeats.append(now)
                    elif line == "READY=1":
                        self.ready = True
                    else:
                        self.other.append(line)

    def max_gap(self, since, until):
        with self.lock:
            beats = [since] + [t for t in self.heartbeats if since <= t <= until] + [until]
        return max(b - a for a, b in zip(beats, beats[1:])), len(beats) - 2


# ---- the test ----

def run(args):
    settings = unit_service_section(args.unit)
    watchdog_sec = seconds(settings["WatchdogSec"][-1])
    interval = watchdog_sec / 2  # the watchdog plugin's heartbeat, as sd_watchdog_enabled(3) advises
    if settings.get("Type", [""])[-1] != "notify":
        fail(f"the unit's Type= is {settings.get('Type')}, not notify")

    journald = enter_namespace()
    # RuntimeDirectory=: systemd makes /run/NAME before it starts the unit.
    mode = int(settings.get("RuntimeDirectoryMode", ["0755"])[-1], 8)
    for name in " ".join(settings.get("RuntimeDirectory", [])).split():
        os.makedirs(os.path.join("/run", name), exist_ok=True)
        os.chmod(os.path.join("/run", name), mode)
    work = tempfile.mkdtemp(prefix="plegd-outage-", dir="/run")
    state_dir = os.path.join(work, "state")
    os.mkdir(state_dir, 0o700)
    endpoint = os.path.join(work, "cri.sock")
    sim = CriSim(args.cri_sim, endpoint)
    for pod in ("p1", "p2"):
        sim.run(f"pod {pod}")
        for c in ("a", "b"):
            sim.run(f"container {pod} {pod}-{c}")
            sim.run(f"start {pod}-{c}")

    argv = unit_command(settings, args, endpoint, state_dir)
    api = Api(flag(argv, "--metrics-bind-address"), flag(argv, "--socket"))
    notify_path = os.path.join(work, "notify.sock")
    notes = Notifications(notify_path)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
           "NOTIFY_SOCKET": notify_path, "WATCHDOG_USEC": str(int(watchdog_sec * 1e6)),
           "INVOCATION_ID": uuid.uuid4().hex}
    for name in ("ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS"):
        if name in os.environ:
            env[name] = os.environ[name]
    stderr = journal_stream("plegd")
    log(f"plegd as the unit runs it: {shlex.join(argv)}")
    log(f"WatchdogSec={watchdog_sec:g}s: a heartbeat every {interval:g} s; "
        f"outage of {args.duration:g} s")
    plegd = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=stderr.fileno(), env=env, preexec_fn=die_with_parent)
    stderr.close()
    try:
        check(args, api, sim, plegd, notes, interval)
    finally:
        if plegd.poll() is None:
            plegd.kill()
            plegd.wait()
        sim.quit()
        journal_check(plegd.pid)
        journald.kill()


def check(args, api, sim, plegd, notes, interval):
    wait_until(lambda: notes.ready, STEP_TIMEOUT, "READY=1")
    wait_until(lambda: api.get("/readyz")[0] == 200, STEP_TIMEOUT, "/readyz 200")
    sim.run("exit p1-b 3")
    wait_until(lambda: any(e["type"] == "ContainerDied" and e.get("container_id") == "p1-b"
                           for e in api.events()[0]),
               STEP_TIMEOUT, "p1-b's death in /events")
    before, instance = api.events()
    log(f"{len(before)} events before the outage, seqs {before[0]['seq']}..{before[-1]['seq']}, "
        f"instance {instance}")

    sim.run("away -1 stale-socket")
    start = time.monotonic()
    end = start + args.duration
    died_during = False
    livez_failures = 0
    probes = 0
    while time.monotonic() < end:
        time.sleep(min(PROBE_EVERY, max(0.0, end - time.monotonic())))
        if plegd.poll() is not None:
            fail(f"plegd exited with {plegd.returncode} {time.monotonic() - start:.0f} s into "
                 "the outage")
            return
        status, body, _ = api.get("/livez?verbose")
        probes += 1
        if status != 200:
            livez_failures += 1
            fail(f"/livez answered {status} {time.monotonic() - start:.0f} s into the outage: "
                 f"{body.strip()}")
        if not died_during and time.monotonic() - start > args.duration / 2:
            sim.run("exit p2-a 7")  # a death the runtime keeps for plegd to find after
            died_during = True
    outage = time.monotonic() - start
    status, body, _ = api.get("/readyz?verbose")
    if status != 503 or "[-]runtime failed: " not in body:
        fail(f"/readyz?verbose at the end of the outage answered {status}: {body.strip()}")
    if outage > RELIST_THRESHOLD and "[-]pleg failed: pleg was last seen active " not in body:
        fail(f"/readyz?verbose lacks kubelet's PLEG message after {outage:.0f} s: {body.strip()}")
    gap, beats = notes.max_gap(start, time.monotonic())
    log(f"outage of {outage:.0f} s: {beats} heartbeats, widest gap {gap:.2f} s; "
        f"/livez 200 on {probes - livez_failures} of {probes} probes")
    if gap > interval + SCHEDULING_SLACK:
        fail(f"a heartbeat gap of {gap:.2f} s during the outage (interval {interval:g} s)")

    sim.run("back")
    back = time.monotonic()
    wait_until(lambda: api.get("/readyz")[0] == 200, RECOVERY_TIMEOUT, "/readyz 200 again")
    log(f"ready again {time.monotonic() - back:.1f} s after the runtime came back")

    def died_after():
        return [e for e in api.events()[0]
                if e["type"] == "ContainerDied" and e.get("container_id") == "p2-a"]
    deaths = wait_until(died_after, STEP_TIMEOUT, "p2-a's death in /events")
    after, instance_after = api.events()
    if after[:len(before)] != before:
        fail("the events from before the outage are not served as they were "
             f"({len(before)} then, the first {len(before)} of {len(after)} now differ)")
    if instance_after != instance:
        fail(f"the history changed: instance {instance} before, {instance_after} after")
    seqs = [e["seq"] for e in after]
    if seqs != list(range(seqs[0], seqs[0] + len(seqs))):
        fail(f"seqs are not contiguous: {seqs}")
    if len(deaths) != 1 or deaths[0].get("exit_code") != 7 or deaths[0].get("initial"):
        fail(f"the death during the outage is reported as {deaths}")

    gap, beats = notes.max_gap(start, time.monotonic())
    if gap > interval + SCHEDULING_SLACK:
        fail(f"a heartbeat gap of {gap:.2f} s (interval {interval:g} s)")
    if any(not line.startswith(("STATUS=", "MAINPID=", "RELOADING=", "STOPPING="))
           for line in notes.other):
        fail(f"unexpected notifications: {notes.other}")

    plegd.send_signal(signal.SIGTERM)
    try:
        code = plegd.wait(timeout=STEP_TIMEOUT)
    except subprocess.TimeoutExpired:
        fail("plegd did not exit within 60 s of SIGTERM")
        return
    if code != 0:
        fail(f"plegd exited with {code} on SIGTERM")


def journal_check(pid):
    """plegd's log reached the journal as records with a priority (StandardError=journal)."""
    out = subprocess.run(["journalctl", "--no-pager", "-D", "/run/log/journal", "-o", "json",
                          f"_PID={pid}"], capture_output=True, text=True)
    entries = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    logs = [e for e in entries if "PRIORITY" in e and "PLEG_TYPE" not in e]
    events = [e for e in entries if "PLEG_TYPE" in e]
    log(f"journal: {len(logs)} log records and {len(events)} events of plegd")
    if not logs:
        fail("no log record of plegd in the journal")
    if not events:
        fail("no event of plegd in the journal (--events-journal=yes)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--unit", required=True)
    parser.add_argument("--plegd", required=True)
    parser.add_argument("--plugin-dir", required=True)
    parser.add_argument("--cri-sim", required=True)
    parser.add_argument("--duration", type=float,
                        default=float(os.environ.get("PLEGD_OUTAGE_DURATION", "600")))
    args = parser.parse_args()

    if os.environ.get("PLEGD_OUTAGE_IN_NAMESPACE") != "1":
        # Into a mount and network namespace of our own, then on with the same arguments.
        env = dict(os.environ, PLEGD_OUTAGE_IN_NAMESPACE="1")
        cmd = ["unshare", "--mount", "--net", "--propagation", "private", "--",
               sys.executable] + sys.argv
        return subprocess.run(cmd, env=env).returncode

    try:
        run(args)
    except (TimeoutError, RuntimeError, OSError, subprocess.CalledProcessError) as e:
        fail(str(e))
    log(f"{'PASS' if not failures else 'FAIL'}: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
