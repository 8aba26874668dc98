#!/usr/bin/env python3
"""One handler uploaded to many functions, several uploads at a time, as a
new user would try it: every build must end Ready (two builds of the same
artifact at once used to fail one with "Directory not empty"). Starts its
own server (SQLite, or two replicas on a private PostgreSQL database with
--replicas 2 and a shared blob directory), prints how many ended Ready and
how long it took."""

import argparse
import concurrent.futures
import io
import json
import os
import subprocess
import tempfile
import time
import urllib.request
import zipfile

ADMIN = "bench-admin-token-0123456789"
CODE = "def handle(event, context):\n    return {'same': True}\n"


def call(url, method, path, body=None, content_type="application/json"):
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    req = urllib.request.Request(f"{url}{path}", data=data, method=method)
    req.add_header("Authorization", f"Bearer {ADMIN}")
    if data is not None:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def start(sless, data, env):
    env = dict(os.environ, SLESS_LISTEN="127.0.0.1:0", SLESS_DATA_DIR=data, SLESS_ADMIN_TOKEN=ADMIN,
               SLESS_LOG="warn", **env)
    proc = subprocess.Popen([sless, "server"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in proc.stdout:
        if line.startswith("sless: listening on "):
            return proc, line.split("listening on ", 1)[1].strip()
    raise SystemExit("server did not start")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sless", required=True)
    ap.add_argument("--functions", type=int, default=1000)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--pg", default="postgres://root@127.0.0.1:5432/test")
    args = ap.parse_args()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("handler.py", CODE)
    archive = buf.getvalue()
    env, db = {}, None
    blobs = tempfile.mkdtemp(prefix="sless-same-blobs-")
    if args.replicas > 1:
        db = f"sless_same_{os.getpid()}"
        subprocess.run(["psql", args.pg, "-qc", f"CREATE DATABASE {db}"], check=True)
        env = {"SLESS_DATABASE_URL": f"{args.pg.rsplit('/', 1)[0]}/{db}", "SLESS_BLOB_URL": f"file://{blobs}"}
    servers = [start(args.sless, tempfile.mkdtemp(prefix="sless-same-"), env) for _ in range(args.replicas)]
    urls = [url for _, url in servers]

    def one(i):
        url = urls[i % len(urls)]
        name = f"same-{i}"
        status, body = call(url, "POST", "/v1/namespaces/bench/functions", {"name": name, "runtime": "python3.11"})
        assert status == 201, body
        status, body = call(url, "PUT", f"/v1/namespaces/bench/functions/{name}/code", archive, "application/zip")
        assert status == 202, body
        for _ in range(6000):
            _, f = call(url, "GET", f"/v1/namespaces/bench/functions/{name}")
            if f["status"]["phase"] in ("Ready", "Failed"):
                return f["status"]["phase"], f["status"]["message"]
            time.sleep(0.05)
        return "Stuck", f["status"]["message"]

    started = time.monotonic()
    try:
        with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
            results = list(pool.map(one, range(args.functions)))
    finally:
        for proc, _ in servers:
            proc.terminate()
            proc.wait(timeout=60)
        if db:
            subprocess.run(["psql", args.pg, "-qc", f"DROP DATABASE IF EXISTS {db} WITH (FORCE)"])
    elapsed = time.monotonic() - started
    ready = sum(1 for phase, _ in results if phase == "Ready")
    failures = [m for phase, m in results if phase != "Ready"]
    print(f"same code in {args.functions} functions, {args.parallel} at a time, {args.replicas} replica(s): "
          f"{ready} Ready, {len(failures)} not, in {elapsed:.1f} s")
    for message in failures[:5]:
        print("  ", message)


if __name__ == "__main__":
    main()
