#!/usr/bin/env python3
"""Leader takeover time: two `sless server` replicas on a private PostgreSQL
database; the leader is killed with SIGKILL, and the time until the other
says it leads (`/healthz`) is measured. The killed one is started again as
a follower, and the next kill follows. Prints p50 and max over N kills."""

import argparse
import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.request

ADMIN = "bench-admin-token-0123456789"


def healthz(url):
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=1) as r:
            return json.load(r)
    except Exception:
        return None


class Replica:
    def __init__(self, sless, db_url):
        self.sless = sless
        self.db_url = db_url
        self.data = tempfile.mkdtemp(prefix="sless-takeover-")
        self.proc = None
        self.url = None

    def start(self):
        env = dict(os.environ, SLESS_LISTEN="127.0.0.1:0", SLESS_DATA_DIR=self.data,
                   SLESS_DATABASE_URL=self.db_url, SLESS_ADMIN_TOKEN=ADMIN,
                   SLESS_WARM_INSTANCES="0", SLESS_LOG="warn")
        self.proc = subprocess.Popen([self.sless, "server"], env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        for line in self.proc.stdout:
            if line.startswith("sless: listening on "):
                self.url = line.split("listening on ", 1)[1].strip()
                break
        else:
            raise SystemExit("replica did not start")

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sless", required=True)
    ap.add_argument("--pg", default="postgres://root@127.0.0.1:5432/test")
    ap.add_argument("--kills", type=int, default=10)
    args = ap.parse_args()
    db = f"sless_takeover_{os.getpid()}"
    base = args.pg.rsplit("/", 1)[0]
    subprocess.run(["psql", args.pg, "-qc", f"CREATE DATABASE {db}"], check=True)
    replicas = [Replica(args.sless, f"{base}/{db}") for _ in range(2)]
    times = []
    try:
        for r in replicas:
            r.start()
        for _ in range(args.kills):
            deadline = time.monotonic() + 30
            while True:
                leaders = [r for r in replicas if (healthz(r.url) or {}).get("leader")]
                if len(leaders) == 1:
                    break
                if time.monotonic() > deadline:
                    raise SystemExit("no single leader")
                time.sleep(0.05)
            leader = leaders[0]
            other = next(r for r in replicas if r is not leader)
            killed = time.monotonic()
            leader.kill9()
            while not (healthz(other.url) or {}).get("leader"):
                if time.monotonic() - killed > 30:
                    raise SystemExit("no takeover within 30 s")
                time.sleep(0.01)
            times.append(time.monotonic() - killed)
            leader.start()  # back as a follower
    finally:
        for r in replicas:
            r.stop()
        subprocess.run(["psql", args.pg, "-qc", f"DROP DATABASE IF EXISTS {db} WITH (FORCE)"])
    times.sort()
    p50 = times[len(times) // 2]
    print(f"leader takeover after kill -9 over {len(times)} kills: p50 {p50 * 1000:.0f} ms, "
          f"max {times[-1] * 1000:.0f} ms (followers try the lock every 500 ms)")


if __name__ == "__main__":
    main()
