"""The invocation records' cost alone (issue 21's "records on vs off >= 0.95x"):
the Node hello gateway of a server with records on against one with them
off, short wrk runs in alternating order, the median of the pairs' ratios;
with the server CPU per request and the machine's idle share of each run.
bench.py measures the same as one part of its run; this takes 3 minutes.

Given several binaries (`--sless A --sless B`), each gets its pair of
servers and all runs take turns, so binaries are compared under the same
drift of this shared machine:

    python3 bench/records.py --sless /tmp/sless-old --sless "$CARGO_TARGET_DIR/release/sless"
"""

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile

from bench import JS_HELLO, TOKEN, Api, cpu_seconds, deploy, free_port, wait_port, wrk


def machine_times():
    """(idle, total) jiffies of all CPUs so far."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return fields[3] + fields[4], sum(fields)


def start_server(binary, data_dir, records, procs):
    port = free_port()
    env = dict(os.environ, SLESS_DATA_DIR=data_dir, SLESS_ADMIN_TOKEN=TOKEN, SLESS_LISTEN=f"127.0.0.1:{port}",
               SLESS_LOG="warn", SLESS_INVOCATION_LOG="true" if records else "false")
    server = subprocess.Popen([binary, "server"], env=env, stdout=subprocess.DEVNULL)
    procs.append(server)
    wait_port(port)
    # As in bench.py: an instance per core, each taking several invocations at once.
    deploy(Api(port), "hello-js", "nodejs20", "handler.js", JS_HELLO, {"concurrency": 16, "max_instances": 2})
    return f"http://127.0.0.1:{port}/fn/bench/hello-js", server.pid


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sless", action="append", required=True, help="a server binary; repeat to compare")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--connections", type=int, default=32)
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="sless-records-")
    os.chmod(work, 0o711)  # sandboxed functions run as other users and must reach the data dir
    procs = []
    try:
        runs = []  # (binary index, records on, url, pid)
        for i, binary in enumerate(args.sless):
            for records in (True, False):
                url, pid = start_server(binary, f"{work}/data-{i}-{records}", records, procs)
                runs.append((i, records, url, pid))
        for _, _, url, _ in runs:
            wrk(url, 2, args.connections)  # warm-up
        measured = {(i, records): [] for i, records, _, _ in runs}
        for n in range(args.pairs):
            # Reversed every other round, so drift hits each server alike.
            for i, records, url, pid in runs if n % 2 == 0 else runs[::-1]:
                idle0, total0 = machine_times()
                cpu0 = cpu_seconds(pid)
                rps = wrk(url, args.seconds, args.connections)[0]
                idle1, total1 = machine_times()
                measured[(i, records)].append((rps, (cpu_seconds(pid) - cpu0) / (rps * args.seconds) * 1e6,
                                               (idle1 - idle0) / max(1, total1 - total0)))
        median = statistics.median
        print(f"# node gateway, invocation records on vs off: {args.pairs} pairs of {args.seconds} s, "
              f"wrk -c{args.connections}, {os.cpu_count()} cores")
        for i, binary in enumerate(args.sless):
            on, off = measured[(i, True)], measured[(i, False)]
            ratios = [a[0] / b[0] for a, b in zip(on, off)]
            print(f"{binary}: {median(r[0] for r in on):.0f} vs {median(r[0] for r in off):.0f} req/s; "
                  f"median ratio {median(ratios):.3f}x (target >= 0.95x; pairs {' '.join(f'{r:.2f}' for r in ratios)}); "
                  f"sless CPU per request {median(r[1] for r in on):.2f} vs {median(r[1] for r in off):.2f} us; "
                  f"machine idle {median(r[2] for r in on):.1%} vs {median(r[2] for r in off):.1%}")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
