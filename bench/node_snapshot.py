"""What a Node shim's cold start costs, and what the heap flag and the
startup snapshot change (`node --max-heap-size`, `--snapshot-blob`, Node 20).
Runs each variant many times in turn, frames on fds 3 and 4 as the
launcher gives them, through a whole cold start: node's start, HELLO, the
LOAD of a hello handler, READY, one INVOKE and its OUTPUT. Prints the CPU
time (user + system of the child, from getrusage) and its page faults:

- node running the shim with no flag (before heaps were sized);
- node running the shim with a heap flag: any V8 flag changes V8's flag
  hash, so node rejects the code cache of its own modules;
- node started from a snapshot of the shim taken with that flag, with the
  code cache node puts in a snapshot by default;
- the same without that code cache (`"withoutCodeCache": true`, what the
  warm pools start, `Launcher::node_snapshot`).

    python3 bench/node_snapshot.py [--starts 40] [--heap-mb 192]
"""

import argparse
import json
import os
import resource
import statistics
import struct
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SHIM = os.path.join(HERE, "..", "runtimes", "node", "sless_shim.js")
NODE = os.environ.get("SLESS_NODE", "/usr/bin/node")
FDS = 'exec 3<&0 4>&1 </dev/null 1>&2; exec "$@"'
# The environment a sandboxed shim starts with has none of the caller's
# variables; NODE_EXTRA_CA_CERTS in particular (set on some machines for
# npm) makes every node start read a CA bundle, about 35 ms of CPU.
ENV = {"PATH": "/usr/bin:/bin"}
HANDLER = "exports.handle = async (event, context) => ({ hello: 'world' });\n"


def frame(kind, ident, payload):
    return struct.pack(">I", len(payload) + 5) + kind + struct.pack(">I", ident) + payload


def read_exactly(fd, n):
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        assert chunk, "the shim closed its frames"
        data += chunk
    return data


def read_frame(fd):
    (length,) = struct.unpack(">I", read_exactly(fd, 4))
    body = read_exactly(fd, length)
    return body[:1], body[5:]


def cold_start(args, code_dir):
    """(CPU ms, page faults) of one shim from its start to its first answer."""
    r_in, w_in = os.pipe()
    r_out, w_out = os.pipe()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(["/bin/sh", "-c", FDS, "shim", *args], stdin=r_in, stdout=w_out, env=ENV,
                            stderr=subprocess.DEVNULL)
    os.close(r_in)
    os.close(w_out)
    kind, _ = read_frame(r_out)
    assert kind == b"H", f"{args}: no HELLO"
    load = {"code_dir": code_dir, "path": [code_dir], "entrypoint": "handler.handle", "env": {},
            "function": "hello", "namespace": "bench", "version": 1, "concurrency": 1}
    os.write(w_in, frame(b"L", 0, json.dumps(load).encode()))
    kind, body = read_frame(r_out)
    assert kind == b"R" and json.loads(body)["ok"], f"{args}: {body!r}"
    header = json.dumps({"kind": "http", "request_id": "bench", "method": "GET", "headers": {}}).encode()
    os.write(w_in, frame(b"I", 1, struct.pack(">I", len(header)) + header))
    while read_frame(r_out)[0] != b"O":
        pass
    os.close(w_in)
    proc.wait()
    os.close(r_out)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000
    return cpu, after.ru_minflt - before.ru_minflt


def snapshot(work, flag, name, without_code_cache):
    blob = os.path.join(work, f"{name}.blob")
    config = os.path.join(work, f"{name}.json")
    with open(config, "w") as f:
        json.dump({"builder": os.path.abspath(SHIM), "withoutCodeCache": without_code_cache}, f)
    subprocess.run([NODE, flag, "--snapshot-blob", blob, "--build-snapshot-config", config],
                   check=True, cwd=work, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return blob


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=40)
    parser.add_argument("--heap-mb", type=int, default=192)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="sless-node-snapshot-")
    code_dir = os.path.join(work, "code")
    os.mkdir(code_dir)
    with open(os.path.join(code_dir, "handler.js"), "w") as f:
        f.write(HANDLER)
    flag = f"--max-heap-size={args.heap_mb}"
    with_cache = snapshot(work, flag, "with-code-cache", False)
    without_cache = snapshot(work, flag, "without-code-cache", True)
    variants = {
        "shim, no flag": [NODE, SHIM],
        "shim, heap flag": [NODE, flag, SHIM],
        "snapshot, code cache": [NODE, flag, "--snapshot-blob", with_cache],
        "snapshot, no code cache": [NODE, flag, "--snapshot-blob", without_cache],
    }
    cpus = {k: [] for k in variants}
    faults = {k: [] for k in variants}
    for _ in range(args.starts):
        for label, command in variants.items():
            cpu, fault = cold_start(command, code_dir)
            cpus[label].append(cpu)
            faults[label].append(fault)
    print(f"load average {os.getloadavg()[0]:.2f}; {args.starts} cold starts each (start, LOAD, one call), "
          f"in turn; heap {args.heap_mb} MB; snapshots {os.path.getsize(with_cache) / 1e6:.1f} MB with "
          f"the code cache, {os.path.getsize(without_cache) / 1e6:.1f} MB without")
    for label in variants:
        print(f"{label:24} CPU median {statistics.median(cpus[label]):5.1f} ms, "
              f"page faults median {statistics.median(faults[label]):5.0f}")
    base = statistics.median(cpus["shim, no flag"])
    for label in list(variants)[1:]:
        print(f"{label} / shim, no flag CPU = {statistics.median(cpus[label]) / base:.2f}x")


if __name__ == "__main__":
    main()
