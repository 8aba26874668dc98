"""Soak: many concurrent clients for a while over a mix of functions, one
normal, one that crashes its instance, one that runs past its timeout and
one that floods its output. Prints the answers by status (only 200 and the
configured 429/502/504 are expected; anything else, and any connection
error, is an error), the server's resident memory over the run, and the
instance processes left once the server has stopped (none expected).

    python3 bench/soak.py --sless target/release/sless [--clients 200] [--seconds 60]
"""

import argparse
import asyncio
import collections
import http.client
import io
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile

TOKEN = "soak-admin-token-0123456789"
FUNCTIONS = {
    # name: (weight, handler source, spec)
    "normal": (70, "def handle(event, context):\n    return {'ok': True}\n", {}),
    "crash": (
        5,
        "import os\n\ndef handle(event, context):\n    os._exit(3)\n",
        {},
    ),
    "slow": (
        10,
        "import time\n\ndef handle(event, context):\n    time.sleep(3)\n    return 'late'\n",
        {"timeout_sec": 1},
    ),
    "flood": (
        15,
        "import sys\n\ndef handle(event, context):\n"
        "    for _ in range(64):\n        sys.stdout.write('x' * 4095 + '\\n')\n"
        "    return {'statusCode': 200, 'body': 'y' * 200000}\n",
        {},
    ),
}
EXPECTED = {200, 429, 502, 504}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(port, method, path, body=None, content_type="application/json"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    headers = {"authorization": f"Bearer {TOKEN}"}
    if data is not None:
        headers["content-type"] = content_type
    conn.request(method, path, body=data, headers=headers)
    resp = conn.getresponse()
    text = resp.read()
    conn.close()
    return resp.status, (json.loads(text) if text else None)


def deploy(port, name, code, spec):
    body = {"name": name, "runtime": "python3.11", "max_instances": 4, "concurrency": 8, **spec}
    status, created = api(port, "POST", "/v1/namespaces/soak/functions", body)
    assert status == 201, created
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("handler.py", code)
    status, uploaded = api(port, "PUT", f"/v1/namespaces/soak/functions/{name}/code", archive.getvalue(), "application/zip")
    assert status == 202, uploaded
    for _ in range(600):
        _, function = api(port, "GET", f"/v1/namespaces/soak/functions/{name}")
        if function["status"]["phase"] in ("Ready", "Failed"):
            assert function["status"]["phase"] == "Ready", function
            return
        time.sleep(0.1)
    raise RuntimeError(f"{name} did not build")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def leftover_processes(marker):
    """Processes whose command line names this run's data dir."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


async def client(port, deadline, counts, latencies):
    names = list(FUNCTIONS)
    weights = [FUNCTIONS[n][0] for n in names]
    reader = writer = None
    while time.monotonic() < deadline:
        name = random.choices(names, weights)[0]
        started = time.monotonic()
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"POST /fn/soak/{name} HTTP/1.1\r\nhost: soak\r\ncontent-length: 2\r\n\r\n{{}}".encode())
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
            status = int(head.split(b" ", 2)[1])
            length = 0
            close = False
            for line in head.split(b"\r\n")[1:]:
                key, _, value = line.partition(b":")
                if key.strip().lower() == b"content-length":
                    length = int(value)
                if key.strip().lower() == b"connection" and value.strip().lower() == b"close":
                    close = True
            await asyncio.wait_for(reader.readexactly(length), 60)
            counts[(name, status)] += 1
            latencies.append(time.monotonic() - started)
            if close:
                writer.close()
                reader = writer = None
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError, IndexError) as e:
            counts[(name, f"error: {type(e).__name__}")] += 1
            if writer is not None:
                writer.close()
            reader = writer = None
            await asyncio.sleep(0.05)
    if writer is not None:
        writer.close()


async def load(port, clients, seconds, server_pid):
    counts = collections.Counter()
    latencies = []
    samples = []
    deadline = time.monotonic() + seconds

    async def sample():
        while time.monotonic() < deadline:
            samples.append(rss_kib(server_pid))
            await asyncio.sleep(1)

    await asyncio.gather(sample(), *(client(port, deadline, counts, latencies) for _ in range(clients)))
    return counts, latencies, samples


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sless", required=True)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=int, default=60)
    args = parser.parse_args()

    data = tempfile.mkdtemp(prefix="sless-soak-")
    port = free_port()
    env = dict(os.environ, SLESS_LISTEN=f"127.0.0.1:{port}", SLESS_DATA_DIR=data, SLESS_ADMIN_TOKEN=TOKEN, SLESS_LOG="warn")
    server = subprocess.Popen([args.sless, "server"], env=env, stdout=subprocess.DEVNULL, stderr=open(f"{data}.log", "w"))
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        for name, (_, code, spec) in FUNCTIONS.items():
            deploy(port, name, code, spec)
        idle_rss = rss_kib(server.pid)
        counts, latencies, samples = asyncio.run(load(port, args.clients, args.seconds, server.pid))
        time.sleep(2)
        after_rss = rss_kib(server.pid)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    time.sleep(1)
    leftovers = leftover_processes(data)

    total = sum(counts.values())
    errors = sum(n for (_, status), n in counts.items() if status not in EXPECTED)
    print(f"soak: {args.clients} clients for {args.seconds}s, {total} answers ({total / args.seconds:.0f}/s)")
    for name in FUNCTIONS:
        by_status = {str(s): n for (f, s), n in sorted(counts.items(), key=lambda kv: str(kv[0])) if f == name}
        print(f"  {name:7} {by_status}")
    latencies.sort()
    if latencies:
        print(f"  latency p50 {latencies[len(latencies) // 2] * 1000:.1f} ms, p99 {latencies[int(len(latencies) * 0.99)] * 1000:.1f} ms")
    print(f"  unexpected answers and connection errors: {errors}")
    print(
        f"  server RSS: {idle_rss / 1024:.0f} MiB before, peak {max(samples, default=0) / 1024:.0f} MiB during, "
        f"{after_rss / 1024:.0f} MiB after"
    )
    print(f"  instance processes left after the server stopped: {len(leftovers)} {leftovers if leftovers else ''}")
    for pid in leftovers:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    subprocess.run(["rm", "-rf", data], check=False)
    sys.exit(1 if errors or leftovers else 0)


if __name__ == "__main__":
    main()
