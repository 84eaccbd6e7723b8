# SPDX-License-Identifier: Apache-2.0
"""The soak driver behind scripts/soak.sh (read that first): runs cri-sim and plegd, churns pods,
breaks the event stream, takes the runtime away, samples plegd, then checks (soakcheck.py).

    python3 soak.py --duration SECONDS --workdir DIR --plegd P --cri-sim C --cri-ctl T
                    --plugin-dir D [--seed N] [--trace FILE]

Exit 0 when every check passed, 1 when one failed (each failure on its own "soak: FAIL:" line),
2 on a usage or setup error.
"""

import argparse
import ctypes
import heapq
import http.client
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import soakcheck  # noqa: E402
from soakcheck import Obj  # noqa: E402

RELIST_PERIOD = "100ms"
# Pods alive at once the churn aims at ("a few dozen").
TARGET_PODS = 30
# Growth bounds, last third's max over first third's max (see scripts/soak.sh for why).
# plegd runs with STATUS_CALLS_IN_FLIGHT; its status calls once each took a pool thread, which
# came and went with the churn, and the thread bound still has that room.  They are now driven
# from the relist's thread, so the bound could be tightened once soak runs show it flat.
STATUS_CALLS_IN_FLIGHT = 16
BOUNDS = {"rss": (8 * 1024, "KiB"), "fds": (8, "fds"),
          "threads": (4 + STATUS_CALLS_IN_FLIGHT, "threads")}
SAMPLE_INTERVAL = 2.0  # seconds between /proc samples
SCRAPE_INTERVAL = 0.05  # seconds between relist-count scrapes
CATCH_UP_TIMEOUT = 30.0  # seconds plegd gets to report the final state


def log(msg):
    print(f"soak: {msg}", flush=True)


class SetupError(Exception):
    pass


def die_with_parent():
    """Children get SIGKILL if the driver dies without cleaning up (PR_SET_PDEATHSIG)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)


def wait_until(cond, timeout, step=0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(step)


# ---- cri-sim ----

class CriSim:
    def __init__(self, binary, socket_path):
        self.proc = subprocess.Popen([binary, "--socket", socket_path], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=None, text=True, bufsize=1,
                                     preexec_fn=die_with_parent,
                                     env=dict(os.environ, G_DEBUG="fatal-warnings"))
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            raise SetupError(f"cri-sim did not start: {line!r}")

    def run(self, command):
        """Runs one command; returns (time sent, time acknowledged)."""
        sent = time.monotonic()
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        ack = time.monotonic()
        if answer.strip() != "ok":
            raise SetupError(f"cri-sim: {command!r} answered {answer.strip()!r}")
        return sent, ack

    def quit(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


# ---- plegd ----

class Plegd:
    def __init__(self, args, endpoint):
        cmd = [args.plegd, f"--container-runtime-endpoint={endpoint}",
               f"--relist-period={RELIST_PERIOD}", "--metrics-bind-address=127.0.0.1:0",
               # the soak reads stdout; the default socket is the node's
               "--socket=",
               f"--max-status-calls-in-flight={STATUS_CALLS_IN_FLIGHT}",
               "--feature-gates=EventedPLEG=true", f"--plugin-dir={args.plugin_dir}",
               "--require-plugins=evented"]
        env = dict(os.environ, G_DEBUG="fatal-warnings")
        env.pop("NOTIFY_SOCKET", None)
        env.pop("WATCHDOG_USEC", None)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1,
                                     preexec_fn=die_with_parent, env=env)
        self.lock = threading.Lock()
        self.events = []  # parsed JSON lines
        self.bad_lines = []
        self.stderr = []  # (time read, line)
        self.port = None
        self.port_ready = threading.Event()
        self.threads = [threading.Thread(target=self._read_stdout, daemon=True),
                        threading.Thread(target=self._read_stderr, daemon=True)]
        for t in self.threads:
            t.start()
        if not self.port_ready.wait(30) or self.port is None:
            raise SetupError("plegd did not say where it serves metrics")

    def _read_stdout(self):
        for line in self.proc.stdout:
            try:
                e = json.loads(line)
            except ValueError:
                with self.lock:
                    self.bad_lines.append(line.rstrip("\n"))
                continue
            with self.lock:
                self.events.append(e)

    def _read_stderr(self):
        for line in self.proc.stderr:
            now = time.monotonic()
            line = line.rstrip("\n")
            m = re.search(r"serving metrics on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                self.port_ready.set()
            with self.lock:
                self.stderr.append((now, line))
        self.port_ready.set()

    def snapshot(self):
        with self.lock:
            return list(self.events)

    def stderr_lines(self):
        with self.lock:
            return list(self.stderr)

    def metrics(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("GET", "/metrics")
            resp = conn.getresponse()
            body = resp.read().decode()
        finally:
            conn.close()
        out = {}
        for line in body.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def proc_sample(self):
        pid = self.proc.pid
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
        return {"rss": int(status["VmRSS"].split()[0]), "threads": int(status["Threads"]),
                "fds": len(os.listdir(f"/proc/{pid}/fd"))}

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        for t in self.threads:
            t.join(5)
        return rc


class Sampler(threading.Thread):
    """Scrapes the relist count every SCRAPE_INTERVAL and /proc every SAMPLE_INTERVAL."""

    def __init__(self, plegd):
        super().__init__(daemon=True)
        self.plegd = plegd
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        self.relists = []  # (scrape begin, scrape end, count)
        self.samples = []  # {"t", "rss", "fds", "threads"}
        self.scrape_errors = 0
        self.sampling = threading.Event()  # set once warm-up is over

    def run(self):
        next_sample = 0.0
        while not self.stop_flag.is_set():
            begin = time.monotonic()
            try:
                m = self.plegd.metrics()
                end = time.monotonic()
                n = int(m["kubelet_pleg_relist_duration_seconds_count"])
                with self.lock:
                    self.relists.append((begin, end, n))
            except (OSError, http.client.HTTPException, KeyError):
                self.scrape_errors += 1
            if self.sampling.is_set() and begin >= next_sample:
                try:
                    s = self.plegd.proc_sample()
                    s["t"] = begin
                    with self.lock:
                        self.samples.append(s)
                except OSError:
                    pass
                next_sample = begin + SAMPLE_INTERVAL
            self.stop_flag.wait(SCRAPE_INTERVAL)

    def relist_count(self):
        with self.lock:
            return self.relists[-1][2] if self.relists else 0

    def wait_relists(self, n, timeout):
        """Waits until the count read by a scrape begun now or later is >= now's + n."""
        t0 = time.monotonic()
        with self.lock:
            base = self.relists[-1][2] if self.relists else 0

        def done():
            with self.lock:
                return any(b >= t0 and c >= base + n for b, _, c in self.relists[-5:])
        return wait_until(done, timeout)


# ---- churn ----

class Churn:
    """Pods with 1-3 containers that are created, started, exit with known codes and are
    removed, plus stream breaks and runtime outages, all decided by one seeded RNG."""

    EXIT_CODES = (0, 0, 0, 1, 2, 3, 42, 127, 143, 255)

    def __init__(self, sim, rng, t0):
        self.sim = sim
        self.rng = rng
        self.t0 = t0
        self.objects = {}
        self.pods = {}  # uid -> {"containers": [ids], "left": n not yet removed}
        self.queue = []  # (due, seq, fn, args)
        self.seq = 0
        self.n_pods = 0
        self.away_since = None
        self.outages = []  # (away sent, back ack) from the driver's side
        self.stats = {"pods": 0, "containers": 0, "exits": 0, "stream_breaks": 0, "outages": 0,
                      "pods_killed": 0, "never_started": 0}

    def at(self, delay, fn, *args):
        self.seq += 1
        heapq.heappush(self.queue, (time.monotonic() + delay, self.seq, fn, args))

    def run_until(self, t_end):
        self.at(0, self.spawn)
        self.at(self.rng.uniform(3, 8), self.break_stream)
        self.at(self.rng.uniform(20, 30), self.go_away)
        while True:
            now = time.monotonic()
            if now >= t_end:
                break
            if self.queue and self.queue[0][0] <= now:
                _, _, fn, args = heapq.heappop(self.queue)
                fn(*args)
                continue
            nxt = self.queue[0][0] if self.queue else t_end
            time.sleep(max(0.0, min(nxt, t_end) - now))
        if self.away_since is not None:
            self.come_back()

    def cmd(self, line):
        return self.sim.run(line)

    # pods and containers
    def spawn(self):
        alive = len(self.pods)
        if alive < TARGET_PODS:
            self.n_pods += 1
            uid = f"p{self.n_pods}"
            sent, ack = self.cmd(f"pod {uid}")
            sb = Obj(id=f"sb-{uid}", pod_uid=uid, sandbox=True)
            sb.enter("running", ack, sent)
            self.objects[sb.id] = sb
            n = self.rng.randint(1, 3)
            self.pods[uid] = {"containers": [], "left": n, "killed": False}
            self.stats["pods"] += 1
            for i in range(n):
                self.at(self.rng.uniform(0, 0.2), self.create, uid, f"{uid}-c{i}")
            # A few pods are removed with their containers still running: 137 and Died+Removed.
            if self.rng.random() < 0.15:
                self.at(self.rng.uniform(0.3, 6), self.kill_pod, uid)
        # Keeps roughly TARGET_PODS alive: a pod lives ~5-10 s, so about 4 new pods a second.
        self.at(self.rng.uniform(0.1, 0.4), self.spawn)

    def create(self, uid, cid):
        pod = self.pods.get(uid)
        if pod is None or pod["killed"]:
            return
        sent, ack = self.cmd(f"container {uid} {cid}")
        c = Obj(id=cid, pod_uid=uid)
        c.enter("created", ack, sent)
        self.objects[cid] = c
        pod["containers"].append(cid)
        self.stats["containers"] += 1
        if self.rng.random() < 0.05:
            # Fails to start: exits from CREATED.
            self.stats["never_started"] += 1
            self.at(self.rng.uniform(0.05, 1.0), self.exit, cid, 128)
        else:
            self.at(self.rng.uniform(0.02, 0.5), self.start, cid)

    def alive(self, cid):
        c = self.objects.get(cid)
        return c is not None and c.removed is None

    def start(self, cid):
        if not self.alive(cid) or self.objects[cid].state != "created":
            return
        sent, ack = self.cmd(f"start {cid}")
        self.objects[cid].enter("running", ack, sent)
        # Some run too briefly for a relist to see them running.
        run = self.rng.uniform(0.01, 0.3) if self.rng.random() < 0.2 else self.rng.uniform(0.5, 8)
        self.at(run, self.exit, cid, self.rng.choice(self.EXIT_CODES))

    def exit(self, cid, code):
        if not self.alive(cid) or self.objects[cid].state not in ("created", "running"):
            return
        sent, ack = self.cmd(f"exit {cid} {code}")
        c = self.objects[cid]
        c.enter("exited", ack, sent)
        c.exit_code = code
        self.stats["exits"] += 1
        dwell = self.rng.uniform(0.01, 0.2) if self.rng.random() < 0.2 else self.rng.uniform(0.3, 3)
        self.at(dwell, self.remove, cid)

    def remove(self, cid):
        if not self.alive(cid):
            return
        sent, _ = self.cmd(f"rm {cid}")
        c = self.objects[cid]
        c.remove(sent)
        pod = self.pods[c.pod_uid]
        pod["left"] -= 1
        if pod["left"] == 0:
            self.at(self.rng.uniform(0, 1.0), self.remove_pod, c.pod_uid)

    def kill_pod(self, uid):
        pod = self.pods.get(uid)
        if pod is None or pod["killed"]:
            return
        pod["killed"] = True
        self.stats["pods_killed"] += 1
        self.remove_pod(uid)

    def remove_pod(self, uid):
        pod = self.pods.pop(uid, None)
        if pod is None:
            return
        sent, ack = self.cmd(f"rmp {uid}")
        # cri-sim stops the pod first: running containers exit 137, the sandbox is NOTREADY.
        for cid in pod["containers"]:
            c = self.objects[cid]
            if c.removed is not None:
                continue
            if c.state == "running":
                c.enter("exited", ack, sent)
                c.exit_code = 137
                self.stats["exits"] += 1
            c.remove(sent)
        sb = self.objects[f"sb-{uid}"]
        sb.enter("exited", ack, sent)
        sb.remove(sent)

    # faults
    def break_stream(self):
        how = self.rng.choice(["ok", "error 14 stream broken by the soak",
                               "error 13 internal error from the soak"])
        self.cmd(f"end-stream {how}")
        self.stats["stream_breaks"] += 1
        self.at(self.rng.uniform(3, 8), self.break_stream)

    def go_away(self):
        stale = " stale-socket" if self.rng.random() < 0.5 else ""
        sent, _ = self.cmd(f"away -1{stale}")
        self.away_since = sent
        self.stats["outages"] += 1
        self.at(self.rng.uniform(2, 5), self.come_back)

    def come_back(self):
        if self.away_since is None:
            return
        _, ack = self.cmd("back")
        self.outages.append((self.away_since, ack))
        self.away_since = None
        self.at(self.rng.uniform(20, 30), self.go_away)


def plegd_outages(driver_outages, stderr_lines):
    """Spans in which plegd's relists may fail: from 1 s before each outage until plegd says its
    relists succeed again (at least 1 s after the runtime came back); plus any run of failures
    plegd reported on its own, from 2 s before its first message."""
    fails = []  # (first failure message, success message or None)
    start = None
    for t, line in stderr_lines:
        if "relist failed" in line and start is None:
            start = t
        elif "relist succeeded after" in line and start is not None:
            fails.append((start, t))
            start = None
    if start is not None:
        fails.append((start, float("inf")))
    spans = []
    for away, back in driver_outages:
        end = back + 1.0
        for b, e in fails:
            if away - 1.0 <= b <= back + 5.0:
                end = max(end, e + 0.5)
        spans.append((away - 1.0, end))
    spans.extend((b - 2.0, e + 0.5) for b, e in fails)
    return spans


def cri_listing(args, endpoint):
    listing = {}
    for what in ("ps", "pods"):
        out = subprocess.run([args.cri_ctl, f"--endpoint={endpoint}", "--timeout=10s", what],
                             check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) >= 2:
                listing[parts[0]] = parts[1]
    return listing


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--plegd", required=True)
    p.add_argument("--cri-sim", required=True)
    p.add_argument("--cri-ctl", required=True)
    p.add_argument("--plugin-dir", required=True)
    p.add_argument("--seed", type=int)
    p.add_argument("--trace")
    args = p.parse_args()

    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 2**31)
    log(f"seed {seed} (SOAK_SEED={seed} replays the same churn decisions)")
    rng = random.Random(seed)
    socket_path = os.path.join(args.workdir, "cri.sock")
    endpoint = f"unix://{socket_path}"
    sim = plegd = sampler = None
    failures = []
    try:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
        sim = CriSim(args.cri_sim, socket_path)
        plegd = Plegd(args, endpoint)
        sampler = Sampler(plegd)
        sampler.start()
        if not wait_until(lambda: any("first relist succeeded" in line
                                      for _, line in plegd.stderr_lines()), 30):
            raise SetupError("plegd's first relist did not succeed within 30 s")

        t0 = time.monotonic()
        churn = Churn(sim, rng, t0)
        warm_up = min(15.0, args.duration / 6)
        threading.Timer(warm_up, sampler.sampling.set).start()
        log(f"churning for {args.duration:.0f} s (relist period {RELIST_PERIOD}, ~{TARGET_PODS} "
            f"pods, resource samples every {SAMPLE_INTERVAL:.0f} s after {warm_up:.0f} s)")
        churn.run_until(t0 + args.duration)
        t_quiet = time.monotonic()
        sampler.sampling.clear()
        log("churn stopped: " + ", ".join(f"{k} {v}" for k, v in churn.stats.items()))

        # Catch up: plegd must report the final state after relists that began after the last
        # change, within a deadline.
        objects = churn.objects

        def caught_up():
            return not soakcheck.live_set_diff(objects, plegd.snapshot())
        if not (sampler.wait_relists(2, CATCH_UP_TIMEOUT) and wait_until(caught_up,
                                                                          CATCH_UP_TIMEOUT)):
            log(f"plegd did not catch up within {CATCH_UP_TIMEOUT:.0f} s")
        # A few more relists: nothing late may arrive (a duplicate, a stray Removed).
        if not sampler.wait_relists(3, CATCH_UP_TIMEOUT):
            failures.append("plegd stopped relisting after the churn")
        events = plegd.snapshot()

        listing = cri_listing(args, endpoint)
        metrics = plegd.metrics()
        with sampler.lock:
            relists = list(sampler.relists)
            samples = list(sampler.samples)
        outages = plegd_outages(churn.outages, plegd.stderr_lines())

        failures += soakcheck.check_truth(objects, listing)
        failures += soakcheck.check_sequences(objects, events)
        failures += soakcheck.check_final(objects, events)
        failures += soakcheck.check_seen(objects, events, relists, outages, t_quiet)
        failures += soakcheck.check_growth(samples, BOUNDS)
        if plegd.bad_lines:
            failures.append(f"plegd wrote {len(plegd.bad_lines)} lines that are not JSON, "
                            f"first: {plegd.bad_lines[0]!r}")
        evented = metrics.get('kubelet_pleg_events_total{relist_source="evented_pleg"}', 0)
        reconnects = metrics.get("kubelet_evented_pleg_connection_success_count", 0)
        if churn.stats["stream_breaks"] > 0 and reconnects < 2:
            failures.append(f"the evented watcher connected {reconnects:.0f} times in all: it "
                            f"never came back after a broken stream")
        if evented == 0:
            failures.append("no event came through the evented watcher's relist requests")
        if metrics.get("kubelet_pleg_discard_events", 0) > 0:
            log(f"note: {metrics['kubelet_pleg_discard_events']:.0f} events were deferred "
                f"(channel full) and delivered later")

        n_types = {}
        for e in events:
            n_types[e.get("type")] = n_types.get(e.get("type"), 0) + 1
        reported = soakcheck.events_by_id(events)
        unseen = sum(1 for o in objects.values() if o.id not in reported)
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(n_types.items()))
        log(f"plegd: {len(events)} events ({kinds}), "
            f"{relists[-1][2] if relists else 0} global relists, {evented:.0f} events from "
            f"evented relists, watcher connected {reconnects:.0f} times; {unseen} of "
            f"{len(objects)} objects were never reported (too brief, or still CREATED)")
        log(f"resources ({len(samples)} samples): {soakcheck.growth_summary(samples, BOUNDS)}")

        if args.trace:
            with open(args.trace, "w") as f:
                json.dump({"seed": seed, "events": events, "relists": relists,
                           "samples": samples, "outages": outages, "listing": listing,
                           "objects": {k: vars(v) for k, v in objects.items()},
                           "plegd_stderr": plegd.stderr_lines()}, f)
    except SetupError as e:
        failures.append(str(e))
    except Exception as e:  # a driver bug or a dead child: say so, still clean up and count it
        import traceback
        traceback.print_exc()
        failures.append(f"the soak driver stopped: {e!r}")
    finally:
        if sampler:
            sampler.stop_flag.set()
            sampler.join(15)
        if plegd:
            rc = plegd.stop()
            if rc != 0:
                failures.append(f"plegd exited with {rc} on SIGTERM")
            for _, line in plegd.stderr_lines():
                if re.match(r"\S+ ERROR ", line):
                    failures.append(f"plegd logged: {line}")
        if sim:
            rc = sim.quit()
            if rc != 0:
                failures.append(f"cri-sim exited with {rc}")

    for f in failures[:50]:
        log(f"FAIL: {f}")
    if len(failures) > 50:
        log(f"FAIL: ... and {len(failures) - 50} more")
    if failures:
        log(f"FAILED with {len(failures)} failures (seed {seed})")
        return 1
    log("passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
