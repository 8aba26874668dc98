"""What a Node shim's start costs, and what the heap flag and the startup
snapshot change (`node --max-heap-size`, `--snapshot-blob`, Node 20).
Starts each variant many times in turn, frames on fds 3 and 4 as the
launcher gives them, and prints the CPU time (user + system of the child,
from getrusage) and the wall time until the first 9 bytes (HELLO's head):

- node running the shim with no flag (before heaps were sized);
- node running the shim with a heap flag: any V8 flag changes V8's flag
  hash, so node rejects the code cache of its own modules;
- node started from a snapshot of the shim taken with that flag (what the
  warm pools start, `Launcher::node_snapshot`).

    python3 bench/node_snapshot.py [--starts 40] [--heap-mb 192]
"""

import argparse
import os
import resource
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHIM = os.path.join(HERE, "..", "runtimes", "node", "sless_shim.js")
NODE = os.environ.get("SLESS_NODE", "/usr/bin/node")
FDS = 'exec 3<&0 4>&1 </dev/null 1>&2; exec "$@"'
# The environment a sandboxed shim starts with has none of the caller's
# variables; NODE_EXTRA_CA_CERTS in particular (set on some machines for
# npm) makes every node start read a CA bundle, about 35 ms of CPU.
ENV = {"PATH": "/usr/bin:/bin"}


def start(args):
    """(CPU ms, wall ms) until 9 bytes come out on fd 4."""
    r_in, w_in = os.pipe()
    r_out, w_out = os.pipe()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(["/bin/sh", "-c", FDS, "shim", *args], stdin=r_in, stdout=w_out, env=ENV,
                            stderr=subprocess.DEVNULL)
    os.close(r_in)
    os.close(w_out)
    head = os.read(r_out, 9)
    wall = (time.perf_counter() - started) * 1000
    os.close(w_in)
    proc.wait()
    os.close(r_out)
    assert len(head) == 9, f"{args}: no HELLO"
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000, wall


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=40)
    parser.add_argument("--heap-mb", type=int, default=192)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="sless-node-snapshot-")
    flag = f"--max-heap-size={args.heap_mb}"
    blob = f"{work}/shim.blob"
    subprocess.run([NODE, flag, "--snapshot-blob", blob, "--build-snapshot", SHIM],
                   check=True, cwd=work, env=ENV, stdout=subprocess.DEVNULL)
    variants = {
        "shim, no flag": [NODE, SHIM],
        "shim, heap flag": [NODE, flag, SHIM],
        "snapshot, heap flag": [NODE, flag, "--snapshot-blob", blob],
    }
    cpus = {k: [] for k in variants}
    walls = {k: [] for k in variants}
    for _ in range(args.starts):
        for label, command in variants.items():
            cpu, wall = start(command)
            cpus[label].append(cpu)
            walls[label].append(wall)
    print(f"load average {os.getloadavg()[0]:.2f}; {args.starts} starts each, in turn; heap {args.heap_mb} MB")
    for label in variants:
        print(f"{label:22} CPU median {statistics.median(cpus[label]):5.1f} ms, "
              f"wall p50 {statistics.median(walls[label]):5.1f} ms")
    base = statistics.median(cpus["shim, no flag"])
    for label in ("shim, heap flag", "snapshot, heap flag"):
        print(f"{label} / shim, no flag CPU = {statistics.median(cpus[label]) / base:.2f}x")


if __name__ == "__main__":
    main()
