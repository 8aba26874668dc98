# Measures each runtime shim over pipes: cold start (LOAD + first INVOKE on a
# warm, started shim -> first OUTPUT) and the invocations/s of a hello handler
# with 8 invocations in flight. Not part of the unittest run:
#   python3 runtimes/tests/throughput.py [seconds]

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from test_shims import FRAME_HEAD, NODE_COMMAND, PYTHON_COMMAND, U32, encode_frame, invoke_header

IN_FLIGHT = 8
HELLO_HANDLERS = {
    "python": ("handler.py", PYTHON_COMMAND, 'def handle(event, context):\n    return {"hello": "world"}\n'),
    "node": ("handler.js", NODE_COMMAND, 'exports.handle = async () => ({ hello: "world" });\n'),
}


def read_frame_type(out):
    size = U32.unpack(out.read(4))[0]
    return out.read(size)[:1]


def read_until_output(out):
    while read_frame_type(out) != b"O":
        pass


def load_frame(code_dir):
    spec = {
        "code_dir": code_dir,
        "path": [code_dir],
        "entrypoint": "handler.handle",
        "env": {},
        "function": "hello",
        "namespace": "bench",
        "version": 1,
        "concurrency": IN_FLIGHT,
    }
    return encode_frame(b"L", 0, json.dumps(spec).encode())


def invoke_payload():
    head = json.dumps(invoke_header(0, deadline_ms=int(time.time() * 1000) + 600_000)).encode()
    return U32.pack(len(head)) + head


def measure(code_dir, command, seconds):
    """Returns (cold start ms, invocations/s) for one fresh shim."""
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def send(data):
        proc.stdin.write(data)
        proc.stdin.flush()

    def invoke_frame(inv_id):
        return FRAME_HEAD.pack(len(payload) + 5, b"I", inv_id) + payload

    try:
        assert read_frame_type(proc.stdout) == b"H"
        payload = invoke_payload()
        started = time.perf_counter()
        send(load_frame(code_dir) + invoke_frame(1))
        assert read_frame_type(proc.stdout) == b"R"
        read_until_output(proc.stdout)
        cold_ms = (time.perf_counter() - started) * 1000
        send(b"".join(invoke_frame(i) for i in range(2, 2 + IN_FLIGHT)))
        next_id, done = 2 + IN_FLIGHT, 0
        started = time.perf_counter()
        stop = started + seconds
        while time.perf_counter() < stop:
            read_until_output(proc.stdout)
            done += 1
            send(invoke_frame(next_id))
            next_id += 1
        return cold_ms, done / (time.perf_counter() - started)
    finally:
        proc.kill()
        proc.wait()


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    for runtime, (file_name, command, source) in HELLO_HANDLERS.items():
        code_dir = tempfile.mkdtemp(prefix="sless-bench-")
        try:
            Path(code_dir, file_name).write_text(source)
            cold_ms, rate = measure(code_dir, command, seconds)
        finally:
            shutil.rmtree(code_dir)
        print(f"{runtime}: cold start {cold_ms:.1f} ms, {rate:,.0f} invocations/s with {IN_FLIGHT} in flight")


if __name__ == "__main__":
    main()
