# SPDX-License-Identifier: Apache-2.0
"""plegd_scrape: what the monitoring checks share to run cri-sim and plegd and read /metrics.

Process runs a program with its output read by threads, and waits for a line on a deadline;
start_plegd() starts plegd on a free port, scrape() fetches a URL without a proxy and
wait_metrics() until it shows something; parse_exposition() and sample_value() read Prometheus
text; parse_args() and stop_all() frame a check's main().  Python standard library only.
"""
import argparse
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

DEADLINE_SEC = 30


class Process:
    def __init__(self, argv, stdin=None):
        self.proc = subprocess.Popen(argv,
                                     stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=dict(os.environ, LC_ALL="C.UTF-8"))
        self.out, self.err = [], []
        self.lock = threading.Lock()
        for stream, sink in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._read, args=(stream, sink), daemon=True).start()
        if stdin is not None:
            self.send(stdin)  # left open: end of input would stop cri-sim

    def _read(self, stream, sink):
        for line in stream:
            with self.lock:
                sink.append(line)

    def send(self, text):
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def text(self, which):
        with self.lock:
            return "".join(self.out if which == "out" else self.err)

    def wait_for(self, which, pattern, count=1):
        """The last of the first @count matches of @pattern on std@which, within the deadline."""
        deadline = time.monotonic() + DEADLINE_SEC
        while time.monotonic() < deadline:
            found = list(re.finditer(pattern, self.text(which)))
            if len(found) >= count:
                return found[count - 1]
            if self.proc.poll() is not None:
                time.sleep(0.1)  # let the readers drain
                found = list(re.finditer(pattern, self.text(which)))
                if len(found) >= count:
                    return found[count - 1]
                break
            time.sleep(0.05)
        sys.exit(f"{self.proc.args[0]} never printed /{pattern}/ {count} times on std{which}; "
                 f"stderr:\n{self.text('err')}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=DEADLINE_SEC)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def parse_exposition(text):
    """{sample name: [labels dict, ...]} and {family: type}."""
    samples, types = {}, {}
    for line in text.splitlines():
        m = re.match(r"^# TYPE (\S+) (\S+)$", line)
        if m:
            types[m.group(1)] = m.group(2)
            continue
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+", line)
        if m:
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            samples.setdefault(m.group(1), []).append(labels)
    return samples, types


def scrape(url):
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=10) as r:
        return r.read().decode()


def sample_value(text, name, labels=None):
    """The value of the sample @name{@labels} (a dict, in the exposition's order), or None."""
    selector = ""
    if labels:
        selector = re.escape("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}")
    m = re.search(rf"^{re.escape(name)}{selector} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def start_plegd(plegd, socket, *flags):
    """plegd against the cri-sim at @socket, serving HTTP on a free port: (process, its /metrics
    URL).  /metrics over TCP, as Prometheus scrapes it; plegd's unix socket beside @socket (its
    default is the node's)."""
    api_socket = os.path.join(os.path.dirname(socket), "plegd.sock")
    process = Process([plegd, f"--container-runtime-endpoint=unix://{socket}",
                       "--metrics-bind-address=127.0.0.1:0", f"--socket={api_socket}", *flags])
    url = process.wait_for("err", r"serving metrics on (http://\S+)").group(1) + "/metrics"
    return process, url


def wait_metrics(url, ready, what, process):
    """Scrapes @url until @ready(text) holds; exits naming @what after the deadline."""
    deadline = time.monotonic() + DEADLINE_SEC
    while True:
        text = scrape(url)
        if ready(text):
            return text
        if time.monotonic() > deadline:
            sys.exit(f"plegd never showed {what}:\n{text}\nstderr:\n{process.text('err')}")
        time.sleep(0.1)


def parse_args(*flags):
    """The command line: each of @flags, required, with a value."""
    parser = argparse.ArgumentParser()
    for flag in flags:
        parser.add_argument(flag, required=True)
    return parser.parse_args()


def stop_all(*processes):
    """Stops each Process of @processes that is not None, in order."""
    for process in processes:
        if process:
            process.stop()
