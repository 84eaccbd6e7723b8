#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""check-monitoring.py: the Grafana dashboard and the alerting rules of examples/monitoring ask
only for metrics a real plegd exposes.

    check-monitoring.py --dashboard JSON --rules YML --plegd BIN --cri-sim BIN --plugin-dir DIRS

Starts cri-sim (one pod, one running container) and plegd against it with EventedPLEG on and
the evented and watchdog plugins loaded, scrapes /metrics and checks that
  - the dashboard parses as JSON and every panel target has a PromQL expression;
  - every metric name in those expressions, in the dashboard's variable queries and in the
    rules' `expr:` is a series plegd exposes (histograms: NAME_bucket, _sum, _count), the only
    exception being Prometheus's own `up`;
  - every `label="value"` matcher names a label value plegd exposes for that metric;
  - kubelet_pleg_last_seen_seconds is current on a scrape that no /healthz request preceded
    (PlegdPLEGUnhealthy relies on it), and the evented stream connects.
Python standard library only; every wait has a deadline.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

DEADLINE_SEC = 30
# Series Prometheus adds itself to every target.
PROMETHEUS_SERIES = {"up"}
# Labels Prometheus adds to every series of a target.
TARGET_LABELS = {"job", "instance"}

PROMQL_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or",
    "unless", "inf", "nan", "atan2", "start", "end",
}


def strip_promql(expr):
    """The expression without Grafana variables, strings, ranges, and label lists of clauses."""
    expr = re.sub(r"\$\{\w+(?::\w+)?\}|\$\w+", "X", expr)  # $__rate_interval, ${var}
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers (may hold strings with spaces)
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges and subqueries
    expr = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', "", expr)
    return expr


def metric_names(expr):
    """Metric names in a PromQL expression: identifiers that are not functions or keywords."""
    names = set()
    for m in re.finditer(r"(?<![\w.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", strip_promql(expr)):
        name, call = m.group(1), m.group(2)
        if call or name.lower() in PROMQL_KEYWORDS:
            continue
        names.add(name)
    return names


def matchers(expr):
    """(metric, label, value) for every `label="value"` equality matcher after a metric name."""
    expr = re.sub(r"\$\{\w+(?::\w+)?\}|\$\w+", "X", expr)
    result = []
    for m in re.finditer(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}", expr):
        for lm in re.finditer(r'(\w+)\s*(=~|!=|!~|=)\s*"((?:[^"\\]|\\.)*)"', m.group(2)):
            if lm.group(2) == "=":
                result.append((m.group(1), lm.group(1), lm.group(3)))
    return result


def self_check():
    """The extractor finds what it must and nothing else, so that the real check can fail."""
    expr = ('histogram_quantile(0.99, sum by (instance, le) (rate(a_seconds_bucket{instance=~"$instance",'
            'x="y z"}[$__rate_interval]))) / ignoring(le) time() - b_total offset 5m > bool 1 '
            'and on (job) c:rule')
    got = metric_names(expr)
    want = {"a_seconds_bucket", "b_total", "c:rule"}
    if got != want:
        sys.exit(f"self-check failed: metric_names() gave {sorted(got)}, want {sorted(want)}")
    if matchers(expr) != [("a_seconds_bucket", "x", "y z")]:
        sys.exit(f"self-check failed: matchers() gave {matchers(expr)}")


# ---- the dashboard and the rules ----

def dashboard_queries(path):
    with open(path, encoding="utf-8") as f:
        dashboard = json.load(f)
    problems, exprs = [], []
    for key in ("title", "uid", "panels", "templating"):
        if key not in dashboard:
            problems.append(f"{path}: no \"{key}\"")

    def walk(panels):
        for panel in panels:
            if panel.get("type") == "row":
                walk(panel.get("panels", []))
                continue
            targets = panel.get("targets") or []
            if not targets:
                problems.append(f"{path}: panel \"{panel.get('title')}\" has no targets")
            for target in targets:
                expr = target.get("expr")
                if not isinstance(expr, str) or not expr.strip():
                    problems.append(f"{path}: a target of panel \"{panel.get('title')}\" has no expr")
                else:
                    exprs.append((f"panel \"{panel.get('title')}\"", expr))

    walk(dashboard.get("panels", []))
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        inner = re.match(r"^\s*(?:label_values|query_result)\((.*)\)\s*$", query or "")
        if not inner:
            problems.append(f"{path}: variable ${var.get('name')} has no label_values() query")
            continue
        # label_values(METRIC, LABEL): the label is not a metric.
        metric = inner.group(1).rsplit(",", 1)[0] if "," in inner.group(1) else inner.group(1)
        exprs.append((f"variable ${var.get('name')}", metric))
    return exprs, problems


def rule_exprs(path):
    """`expr:` of every rule, plain or a folded/literal block scalar.  Needs no YAML module: the
    rules file is written in this one style, and a rule whose expr is not found is an error."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    exprs, problems, n_rules, current = [], [], 0, None
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^\s*- (alert|record): *(\S+)", line)
        if m:
            n_rules += 1
            current = m.group(2)
        m = re.match(r"^(\s*)expr: *(.*)$", line)
        if m:
            indent, value = len(m.group(1)), m.group(2).strip()
            if value in (">", ">-", "|", "|-"):
                block = []
                i += 1
                while i < len(lines) and (not lines[i].strip() or
                                          len(lines[i]) - len(lines[i].lstrip()) > indent):
                    block.append(lines[i].strip())
                    i += 1
                value = " ".join(b for b in block if b)
                i -= 1
            elif value[:1] in "'\"":
                value = value[1:-1]
            exprs.append((f"rule {current}", value))
        i += 1
    if n_rules == 0 or len(exprs) != n_rules:
        problems.append(f"{path}: {n_rules} rules but {len(exprs)} exprs found")
    return exprs, problems


# ---- plegd ----

class Process:
    def __init__(self, argv, stdin=None):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=dict(os.environ, LC_ALL="C.UTF-8"))
        self.out, self.err = [], []
        self.lock = threading.Lock()
        for stream, sink in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._read, args=(stream, sink), daemon=True).start()
        if stdin is not None:
            self.proc.stdin.write(stdin)
            self.proc.stdin.flush()  # left open: end of input would stop cri-sim

    def _read(self, stream, sink):
        for line in stream:
            with self.lock:
                sink.append(line)

    def text(self, which):
        with self.lock:
            return "".join(self.out if which == "out" else self.err)

    def wait_for(self, which, pattern):
        deadline = time.monotonic() + DEADLINE_SEC
        while time.monotonic() < deadline:
            m = re.search(pattern, self.text(which))
            if m:
                return m
            if self.proc.poll() is not None:
                time.sleep(0.1)  # let the readers drain
                m = re.search(pattern, self.text(which))
                if m:
                    return m
                break
            time.sleep(0.05)
        sys.exit(f"{self.proc.args[0]} never printed /{pattern}/ on std{which}; stderr:\n{self.text('err')}")

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


def sample_value(text, name):
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def run_plegd(args, tmp):
    socket = os.path.join(tmp, "cri.sock")
    sim = Process([args.cri_sim, "--socket", socket], stdin="pod u1 web\ncontainer u1 c1 app\nstart c1\n")
    plegd = None
    try:
        sim.wait_for("out", r"(?m)^ready$")
        # The socket in the test's folder (the default is the node's); /metrics over TCP, as
        # Prometheus scrapes it.
        plegd = Process([args.plegd, f"--container-runtime-endpoint=unix://{socket}",
                         "--metrics-bind-address=127.0.0.1:0", "--relist-period=200ms",
                         f"--socket={os.path.join(tmp, 'plegd.sock')}",
                         "--feature-gates=EventedPLEG=true", f"--plugin-dir={args.plugin_dir}",
                         "--require-plugins=evented,watchdog"])
        url = plegd.wait_for("err", r"serving metrics on (http://\S+)").group(1) + "/metrics"
        # The first relist found the pod, and the stream is up.
        deadline = time.monotonic() + DEADLINE_SEC
        while True:
            text = scrape(url)
            pods = sample_value(text, "kubelet_running_pods")
            connected = sample_value(text, "kubelet_evented_pleg_connection_state")
            if pods == 1 and connected == 1:
                break
            if time.monotonic() > deadline:
                sys.exit(f"plegd never showed 1 running pod and a connected stream:\n{text}\n"
                         f"stderr:\n{plegd.text('err')}")
            time.sleep(0.1)
        last_seen = sample_value(text, "kubelet_pleg_last_seen_seconds")
        if last_seen is None or abs(time.time() - last_seen) > 10:
            sys.exit(f"kubelet_pleg_last_seen_seconds is {last_seen} at {time.time():.0f} on a "
                     "scrape without /healthz: an alert on its age would fire on a healthy PLEG")
        return text
    finally:
        if plegd:
            plegd.stop()
        sim.stop()


def main():
    parser = argparse.ArgumentParser()
    for flag in ("--dashboard", "--rules", "--plegd", "--cri-sim", "--plugin-dir"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args()
    self_check()

    queries, problems = dashboard_queries(args.dashboard)
    more, rule_problems = rule_exprs(args.rules)
    queries += more
    problems += rule_problems

    with tempfile.TemporaryDirectory() as tmp:
        exposition = run_plegd(args, tmp)
    samples, types = parse_exposition(exposition)

    def known(name):
        """A family of its own, or a histogram's or summary's _bucket, _sum or _count."""
        if name in types:
            return True
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        return base != name and types.get(base) in ("histogram", "summary")

    checked = set()
    for where, expr in queries:
        names = metric_names(expr)
        if not names:
            problems.append(f"{where}: no metric name in \"{expr}\"")
        for name in names:
            checked.add(name)
            if name in PROMETHEUS_SERIES:
                continue
            if not known(name):
                problems.append(f"{where}: {name} is not in plegd's /metrics")
        for metric, label, value in matchers(expr):
            if metric in PROMETHEUS_SERIES or label in TARGET_LABELS:
                continue
            found = samples.get(metric, [])
            # A labelled series appears once observed: a family without samples is not judged.
            if found and not any(s.get(label) == value for s in found):
                values = sorted({s.get(label, "(none)") for s in found})
                problems.append(f"{where}: {metric} has no {label}=\"{value}\" (it has {values})")

    # Not a failure: a family the dashboard does not show yet.
    families = {f for f in types if not f.startswith("pleg_hello")}
    used = {re.sub(r"_(bucket|sum|count)$", "", n) if re.sub(r"_(bucket|sum|count)$", "", n) in types else n
            for n in checked}
    for family in sorted(families - used):
        print(f"note: plegd exposes {family}, which neither the dashboard nor the rules use")

    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"{len(queries)} expressions, {len(checked)} metric names: all in plegd's /metrics")


if __name__ == "__main__":
    main()
