"""A quiet tenant next to a busy one, in one run: the p50 of a quiet
namespace's calls (about 10 ms of CPU each) alone, then while another
namespace keeps --busy instances spinning on the CPU, and the ratio.
Namespaces share the CPU by namespace, not by instance (ARCHITECTURE.md,
"CPU by namespace"), so the ratio stays near 1 however many instances the
busy one runs; shared by instance it grew with them (30: about 16x).

    python3 bench/noisy_neighbor.py --sless "$CARGO_TARGET_DIR/release/sless"

Needs root (control groups)."""

import argparse
import os
import subprocess
import tempfile
import threading
import time

from bench import TOKEN, Api, free_port, pct, upload_and_wait_in, wait_port, zip_of

SPIN = '''import time

def handle(event, context):
    end = time.time() + event.get("ms", 100) / 1000
    n = 0
    while time.time() < end:
        n += 1
    return n
'''

WORK = '''import time

def handle(event, context):
    started = time.perf_counter()
    x = 0
    for i in range(event.get("n", 250000)):
        x += i * i
    return {"ms": (time.perf_counter() - started) * 1000}
'''


def deploy(api, namespace, name, code, spec):
    status, body = api.call("POST", f"/v1/namespaces/{namespace}/functions",
                            {"name": name, "runtime": "python3.11", **spec})
    assert status in (201, 409), body
    upload_and_wait_in(api, namespace, name, zip_of("handler.py", code))


def quiet_calls(api, samples):
    """Latency of the quiet tenant's calls seen by the caller, and inside the handler (ms)."""
    outside, inside = [], []
    for _ in range(samples):
        started = time.perf_counter()
        status, body = api.call("POST", "/fn/quiet/work", {"n": 250000})
        outside.append((time.perf_counter() - started) * 1000)
        assert status == 200, body
        inside.append(body["ms"])
    return outside, inside


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sless", required=True)
    ap.add_argument("--busy", type=int, default=30, help="instances the busy namespace keeps spinning")
    ap.add_argument("--samples", type=int, default=20)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="sless-bench-neighbor-")
    os.chmod(work, 0o711)
    port = free_port()
    env = dict(os.environ, SLESS_DATA_DIR=f"{work}/data", SLESS_ADMIN_TOKEN=TOKEN,
               SLESS_LISTEN=f"127.0.0.1:{port}", SLESS_LOG="warn")
    server = subprocess.Popen([args.sless, "server"], env=env, stdout=subprocess.DEVNULL)
    stop = threading.Event()
    try:
        wait_port(port)
        api = Api(port)
        deploy(api, "quiet", "work", WORK, {})
        deploy(api, "busy", "spin", SPIN, {"concurrency": 1, "max_instances": args.busy})

        def spin(ms, rounds):
            mine = Api(port)
            for _ in range(rounds):
                if stop.is_set():
                    return
                mine.call("POST", "/fn/busy/spin", {"ms": ms})

        # Start the busy instances first, so what follows runs no cold start.
        warm = [threading.Thread(target=spin, args=(300, 1)) for _ in range(args.busy)]
        for t in warm:
            t.start()
        for t in warm:
            t.join()
        quiet_calls(api, 3)
        alone, alone_inside = quiet_calls(api, args.samples)
        rounds = 200  # bounded: each call spins 500 ms, the samples take seconds
        busy = [threading.Thread(target=spin, args=(500, rounds)) for _ in range(args.busy)]
        for t in busy:
            t.start()
        time.sleep(1.0)
        crowded, crowded_inside = quiet_calls(api, args.samples)
        stop.set()
        for t in busy:
            t.join()
        print(f"quiet namespace alone: p50 {pct(alone, 50):.1f} ms "
              f"(in the handler {pct(alone_inside, 50):.1f} ms; {args.samples} calls)")
        print(f"next to {args.busy} busy instances of another namespace: p50 {pct(crowded, 50):.1f} ms "
              f"(in the handler {pct(crowded_inside, 50):.1f} ms)")
        print(f"quiet p50 crowded / alone = {pct(crowded, 50) / pct(alone, 50):.2f}x "
              f"(in the handler {pct(crowded_inside, 50) / pct(alone_inside, 50):.2f}x)")
    finally:
        stop.set()
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    main()
