#!/usr/bin/env python3
"""Asynchronous invocation: how fast `POST /fn/...` with
`X-Sless-Invocation-Type: Event` is accepted (202 after the event is
durably stored), and how a backlog drains. A function is deployed turned
off (`replicas: 0`), N events are sent by the `async_load` example
(pipelined keep-alive connections), then the function is turned on and the
backlog drains; the server's resident memory is sampled throughout, so a
drain that held the backlog in memory would show.

    python3 bench/async_events.py --sless target/release/sless \
        --load target/release/examples/async_load [--database postgres://root@127.0.0.1:5432/test] [--events 100000]
"""

import argparse
import io
import json
import os
import subprocess
import tempfile
import time
import urllib.request
import uuid
import zipfile

ADMIN = "bench-admin-token-0123456789"


def call(url, method, path, body=None, content_type="application/json"):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(f"{url}{path}", data=data, method=method)
    req.add_header("Authorization", f"Bearer {ADMIN}")
    if data is not None:
        req.add_header("Content-Type", content_type)
    with urllib.request.urlopen(req, timeout=60) as r:
        text = r.read()
        return json.loads(text) if text else None


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def backlog(url):
    req = urllib.request.Request(f"{url}/metrics")
    req.add_header("Authorization", f"Bearer {ADMIN}")
    with urllib.request.urlopen(req, timeout=10) as r:
        total = 0
        for line in r.read().decode().splitlines():
            if line.startswith("sless_async_backlog{"):
                total += int(float(line.rsplit(" ", 1)[1]))
        return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sless", required=True)
    ap.add_argument("--load", required=True, help="the async_load example binary")
    ap.add_argument("--database", help="postgres://... admin URL (a private database is made); default SQLite")
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--connections", type=int, default=32)
    args = ap.parse_args()

    data = tempfile.mkdtemp(prefix="sless-async-bench-")
    env = dict(os.environ, SLESS_LISTEN="127.0.0.1:0", SLESS_DATA_DIR=data, SLESS_ADMIN_TOKEN=ADMIN,
               SLESS_LOG="warn", SLESS_ASYNC_MAX_BACKLOG=str(args.events * 2), SLESS_INVOCATION_LOG="false")
    db_name = None
    if args.database:
        db_name = f"sless_async_{uuid.uuid4().hex[:12]}"
        subprocess.run(["psql", args.database, "-qc", f"CREATE DATABASE {db_name}"], check=True)
        env["SLESS_DATABASE_URL"] = f"{args.database.rsplit('/', 1)[0]}/{db_name}"
    server = subprocess.Popen([args.sless, "server"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        for line in server.stdout:
            if line.startswith("sless: listening on "):
                url = line.split("listening on ", 1)[1].strip()
                break
        else:
            raise SystemExit("the server did not start")
        store = "PostgreSQL" if args.database else "SQLite"
        call(url, "POST", "/v1/namespaces/bench/functions",
             {"name": "sink", "runtime": "python3.11", "replicas": 0, "max_instances": 4, "concurrency": 16})
        code = io.BytesIO()
        with zipfile.ZipFile(code, "w") as z:
            z.writestr("handler.py", "def handle(event, context):\n    return {'ok': True}\n")
        call(url, "PUT", "/v1/namespaces/bench/functions/sink/code", code.getvalue(), "application/zip")
        for _ in range(600):
            if call(url, "GET", "/v1/namespaces/bench/functions/sink")["status"]["phase"] == "Ready":
                break
            time.sleep(0.2)
        rss_start = rss_mib(server.pid)

        addr = url.removeprefix("http://")
        out = subprocess.run([args.load, addr, "/fn/bench/sink", str(args.events), str(args.connections)],
                             check=True, capture_output=True, text=True).stdout.strip()
        print(f"accept into {store}: {out}")
        rss_full = rss_mib(server.pid)

        call(url, "PATCH", "/v1/namespaces/bench/functions/sink", {"replicas": None})
        started = time.monotonic()
        peak = rss_full
        waiting = backlog(url)
        while waiting > 0:
            time.sleep(0.5)
            peak = max(peak, rss_mib(server.pid))
            waiting = backlog(url)
        drained = time.monotonic() - started
        print(f"drain from {store}: {args.events} events in {drained:.1f} s: {args.events / drained:.0f} events/s")
        print(f"server RSS: {rss_start:.0f} MiB before, {rss_full:.0f} MiB with {args.events} events waiting, "
              f"{peak:.0f} MiB at most while draining, {rss_mib(server.pid):.0f} MiB after "
              f"(ratio peak/before {peak / rss_start:.2f})")
    finally:
        server.terminate()
        server.wait(timeout=30)
        if db_name:
            subprocess.run(["psql", args.database, "-qc", f"DROP DATABASE IF EXISTS {db_name} WITH (FORCE)"])


if __name__ == "__main__":
    main()
