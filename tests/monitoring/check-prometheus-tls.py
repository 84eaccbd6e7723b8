#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""check-prometheus-tls.py: a real Prometheus scrapes plegd's /metrics over TLS with the
tls_config doc/security.md shows.

    check-prometheus-tls.py --plegd BIN --prometheus BIN --make-certs SCRIPT

Makes certificates with tests/plegd/make-test-certs.sh, starts plegd serving HTTPS with client
certificates (--tls-cert-file, --tls-private-key-file, --client-ca-file,
--serve-events-over-tcp=tls) and Prometheus with three jobs against it, then checks through
Prometheus' API that
  - the job with ca_file, cert_file and key_file is up and its samples are stored;
  - the job with ca_file alone is up too: /metrics is open to any TLS client;
  - the job whose ca_file is another CA is down with a certificate error: Prometheus verifies
    plegd's certificate.
Python standard library only; every wait has a deadline.
"""
import argparse
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

DEADLINE_SEC = 60
JOBS = {
    "with-client-certificate": {"ca_file": "ca.pem", "cert_file": "client.pem",
                                "key_file": "client.key"},
    "without-client-certificate": {"ca_file": "ca.pem"},
    "wrong-ca": {"ca_file": "other-ca.pem"},
}


# check-monitoring.py's Process: a child whose output threads collect, stopped at the end.
_spec = importlib.util.spec_from_file_location(
    "check_monitoring", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                     "check-monitoring.py"))
_monitoring = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_monitoring)
Process = _monitoring.Process


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
        return json.load(answer)["data"]


def prometheus_config(certs, target):
    lines = ["global:", "  scrape_interval: 1s", "  scrape_timeout: 1s", "scrape_configs:"]
    for job, tls in JOBS.items():
        lines += [f"  - job_name: {job}", "    scheme: https", "    tls_config:"]
        lines += [f"      {key}: {os.path.join(certs, name)}" for key, name in tls.items()]
        lines += ["    static_configs:", f"      - targets: ['{target}']"]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--plegd", required=True)
    parser.add_argument("--prometheus", required=True)
    parser.add_argument("--make-certs", required=True)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="plegd-prom-tls-") as tmp:
        certs = os.path.join(tmp, "certs")
        os.mkdir(certs, 0o700)
        subprocess.run(["bash", args.make_certs, certs], check=True)
        plegd = prometheus = None
        try:
            plegd = Process([args.plegd, f"--container-runtime-endpoint=unix://{tmp}/none.sock",
                             "--plugin-dir=", f"--socket={tmp}/plegd.sock",
                             "--metrics-bind-address=127.0.0.1:0",
                             f"--tls-cert-file={certs}/server.pem",
                             f"--tls-private-key-file={certs}/server.key",
                             f"--client-ca-file={certs}/ca.pem",
                             "--serve-events-over-tcp=tls"])
            url = plegd.wait_for("err", r"serving metrics on (https://\S+)").group(1)
            target = urllib.parse.urlsplit(url).netloc
            config = os.path.join(tmp, "prometheus.yml")
            with open(config, "w") as f:
                f.write(prometheus_config(certs, target))
            port = free_port()
            prometheus = Process([args.prometheus, f"--config.file={config}",
                                  f"--storage.tsdb.path={tmp}/data",
                                  f"--web.listen-address=127.0.0.1:{port}"])

            # Each job's target once it was scraped.
            deadline = time.monotonic() + DEADLINE_SEC
            targets = {}
            while time.monotonic() < deadline:
                try:
                    active = api(port, "/api/v1/targets")["activeTargets"]
                    targets = {t["labels"]["job"]: t for t in active if t["health"] != "unknown"}
                except OSError:
                    pass
                if len(targets) == len(JOBS):
                    break
                if prometheus.proc.poll() is not None:
                    sys.exit(f"prometheus exited:\n{prometheus.text('err')}")
                time.sleep(0.2)
            if len(targets) != len(JOBS):
                sys.exit(f"Prometheus did not scrape every job within {DEADLINE_SEC} s: "
                         f"{sorted(targets)}\n{prometheus.text('err')}")
            for job in ("with-client-certificate", "without-client-certificate"):
                if targets[job]["health"] != "up":
                    sys.exit(f"job {job} is {targets[job]['health']}: {targets[job]['lastError']}")
            wrong = targets["wrong-ca"]
            if wrong["health"] != "down" or "certificate" not in wrong["lastError"]:
                sys.exit(f"job wrong-ca is {wrong['health']} ({wrong['lastError']!r}): Prometheus "
                         "took a certificate its CA did not sign")

            # Samples of plegd's own series are stored.
            query = urllib.parse.quote('plegd_events_last_seq{job="with-client-certificate"}')
            while time.monotonic() < deadline:
                if api(port, f"/api/v1/query?query={query}")["result"]:
                    break
                time.sleep(0.2)
            else:
                sys.exit("no plegd_events_last_seq sample stored for the TLS job")
            print("prometheus scraped plegd over TLS: with and without a client certificate up, "
                  f"another CA down ({wrong['lastError']})")
        finally:
            for process in (prometheus, plegd):
                if process:
                    process.stop()


if __name__ == "__main__":
    main()
