"""Cold start with network isolation on vs off, in one run: two servers
(SLESS_NETWORK_ISOLATION=true and false) on this machine, the same Python
hello handler on each, cold starts taken in alternating order so drift of
the machine hits both alike. Prints each side's p50/p99 and the ratio.

    python3 bench/isolation.py --sless "$CARGO_TARGET_DIR/release/sless"

Needs root, passt and nftables (scripts/setup-run.sh)."""

import argparse
import os
import subprocess
import tempfile
import time

from bench import PY_HELLO, TOKEN, Api, deploy, free_port, pct, wait_port


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sless", required=True)
    ap.add_argument("--samples", type=int, default=30)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="sless-bench-isolation-")
    os.chmod(work, 0o711)
    procs, apis = [], {}
    try:
        for mode in ("on", "off"):
            port = free_port()
            env = dict(os.environ, SLESS_DATA_DIR=f"{work}/{mode}", SLESS_ADMIN_TOKEN=TOKEN,
                       SLESS_LISTEN=f"127.0.0.1:{port}", SLESS_LOG="warn",
                       SLESS_NETWORK_ISOLATION="true" if mode == "on" else "false")
            procs.append(subprocess.Popen([args.sless, "server"], env=env, stdout=subprocess.DEVNULL))
            wait_port(port)
            apis[mode] = Api(port)
            deploy(apis[mode], "hello-py", "python3.11", "handler.py", PY_HELLO, {})
        samples = {"on": [], "off": []}
        for i in range(args.samples):
            for mode in ("on", "off") if i % 2 == 0 else ("off", "on"):
                api = apis[mode]
                # An env change starts a new generation: zero instances.
                status, body = api.call("PATCH", "/v1/namespaces/bench/functions/hello-py", {"env": {"BENCH": str(i)}})
                assert status == 200, body
                time.sleep(0.6)  # the warm pool refills (the namespace is made then, off the request path)
                started = time.perf_counter()
                assert api.get_fn("/fn/bench/hello-py") == 200
                samples[mode].append((time.perf_counter() - started) * 1000)
        for mode in ("on", "off"):
            print(f"python cold start, network isolation {mode}: p50 {pct(samples[mode], 50):.1f} ms, "
                  f"p99 {pct(samples[mode], 99):.1f} ms ({args.samples} samples)")
        print(f"cold start p50 on / off = {pct(samples['on'], 50) / pct(samples['off'], 50):.2f}x")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
