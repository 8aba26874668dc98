"""Would a user-land startup snapshot (`node --snapshot-blob`, Node 20) make a
Node shim start cheaper? Starts each variant many times in turn, frames on
fds 3 and 4 as the launcher gives them, and prints the CPU time (user +
system, children) and wall time until the first 9 bytes (HELLO's head):

- node running the shim (what the warm pool starts today);
- node requiring the shim's built-in modules, then writing 9 bytes;
- node started from a snapshot made after those same requires.

    python3 bench/node_snapshot.py
"""

import os
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
REQUIRES = """const fs = require('fs');
const net = require('net');
const path = require('path');
const util = require('util');
const Module = require('module');
const { AsyncLocalStorage } = require('async_hooks');
"""
HELLO = "fs.writeSync(4, Buffer.alloc(9));\n"


def start(args):
    """Wall ms until 9 bytes come out on fd 4."""
    r_in, w_in = os.pipe()
    r_out, w_out = os.pipe()
    started = time.perf_counter()
    proc = subprocess.Popen(["/bin/sh", "-c", FDS, "shim", *args], stdin=r_in, stdout=w_out, env=ENV,
                            stderr=subprocess.DEVNULL)
    os.close(r_in)
    os.close(w_out)
    os.read(r_out, 9)
    took = (time.perf_counter() - started) * 1000
    os.close(w_in)
    proc.wait()
    os.close(r_out)
    return took


def main():
    work = tempfile.mkdtemp(prefix="sless-node-snapshot-")
    with open(f"{work}/bare.js", "w") as f:
        f.write(REQUIRES + HELLO)
    with open(f"{work}/entry.js", "w") as f:
        f.write(REQUIRES + "require('v8').startupSnapshot.setDeserializeMainFunction(() => {\n" + HELLO + "});\n")
    subprocess.run([NODE, "--snapshot-blob", f"{work}/snap.blob", "--build-snapshot", f"{work}/entry.js"],
                   check=True, cwd=work, stderr=subprocess.DEVNULL)
    variants = {
        "shim (today)": [NODE, SHIM],
        "its requires, no snapshot": [NODE, f"{work}/bare.js"],
        "its requires, from a snapshot": [NODE, "--snapshot-blob", f"{work}/snap.blob"],
    }
    walls = {k: [] for k in variants}
    cpus = {k: [] for k in variants}
    for _ in range(30):
        for label, args in variants.items():
            before = os.times()
            walls[label].append(start(args))
            after = os.times()
            cpus[label].append((after.children_user + after.children_system
                                - before.children_user - before.children_system) * 1000)
    print(f"load average {os.getloadavg()[0]:.2f}; 30 starts each, in turn")
    for label in variants:
        print(f"{label:32} CPU mean {statistics.mean(cpus[label]):5.1f} ms, "
              f"wall p50 {statistics.median(walls[label]):6.1f} ms")
    ratio = statistics.mean(cpus["its requires, from a snapshot"]) / statistics.mean(cpus["its requires, no snapshot"])
    print(f"snapshot / no snapshot CPU = {ratio:.2f}x")


if __name__ == "__main__":
    main()
