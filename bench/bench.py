"""Measures the local driver's targets side by side in one run and prints
ratios: gateway vs. plain server (direct and behind nginx), cold start and
deploy time. Started by bench/run.sh; needs wrk and nginx on PATH."""

import argparse
import http.client
import io
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOKEN = "bench-admin-token-0123456789"
PY_HELLO = "def handle(event, context):\n    return {'hello': 'world'}\n"
JS_HELLO = "exports.handle = async (event, context) => ({ hello: 'world' });\n"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port}")


class Api:
    def __init__(self, port):
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port)

    def call(self, method, path, body=None, content_type="application/json"):
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        headers = {"authorization": f"Bearer {TOKEN}"}
        if data is not None:
            headers["content-type"] = content_type
        resp = self._send(method, path, data, headers)
        text = resp.read()
        return resp.status, (json.loads(text) if text else None)

    def get_fn(self, path):
        resp = self._send("GET", path, None, {})
        resp.read()
        return resp.status

    def _send(self, method, path, data, headers):
        """Sends on the kept-alive connection; once more on a new one if the
        server closed it while idle (its keep-alive timeout, during the
        throughput rounds)."""
        try:
            self.conn.request(method, path, body=data, headers=headers)
            return self.conn.getresponse()
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port)
            self.conn.request(method, path, body=data, headers=headers)
            return self.conn.getresponse()


def zip_of(name, text):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(name, text)
    return buf.getvalue()


def deploy(api, name, runtime, filename, code, extra):
    spec = {"name": name, "runtime": runtime, **extra}
    status, body = api.call("POST", "/v1/namespaces/bench/functions", spec)
    assert status in (201, 409), body
    return upload_and_wait(api, name, zip_of(filename, code))


def upload_and_wait(api, name, archive):
    return upload_and_wait_in(api, "bench", name, archive)


def upload_and_wait_in(api, namespace, name, archive):
    started = time.perf_counter()
    status, body = api.call("PUT", f"/v1/namespaces/{namespace}/functions/{name}/code", archive, "application/zip")
    assert status == 202, body
    code_hash = body["status"]["code_hash"]
    while True:
        status, body = api.call("GET", f"/v1/namespaces/{namespace}/functions/{name}")
        st = body["status"]
        if st.get("built_hash") == code_hash and st["phase"] == "Ready":
            return time.perf_counter() - started
        if st["phase"] == "Failed" and st.get("code_hash") == code_hash:
            raise RuntimeError(st["message"])
        time.sleep(0.002)


UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0}


def wrk(url, duration, connections):
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", url],
        check=True, capture_output=True, text=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = {}
    for pct, value, unit in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", out, re.M):
        lat[pct] = float(value) * UNITS[unit]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"{url}: {errors.group(1)} failed responses\n{out}")
    return rps, lat["50"], lat["99"]


def cpu_seconds(pid):
    """User + system CPU time of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def nginx_conf(prefix, routes):
    servers = "\n".join(
        f"""
    upstream up{port} {{ server 127.0.0.1:{target}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port};
        access_log off;
        location / {{
            proxy_pass http://up{port};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}"""
        for port, target in routes
    )
    return f"""
worker_processes 1;
daemon off;
error_log {prefix}/error.log warn;
pid {prefix}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
{servers}
}}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sless", required=True)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--cold-samples", type=int, default=30)
    ap.add_argument("--deploy-samples", type=int, default=15)
    ap.add_argument("--log-pairs", type=int, default=8,
                    help="pairs of runs with invocation records on and off (0: no such comparison)")
    ap.add_argument("--log-seconds", type=int, default=4)
    args = ap.parse_args()
    if args.log_pairs < 0 or args.rounds < 1:
        ap.error("--log-pairs takes 0 or more, --rounds 1 or more")

    work = tempfile.mkdtemp(prefix="sless-bench-")
    os.chmod(work, 0o711)  # sandboxed functions run as other users and must reach the data dir
    procs = []
    try:
        port = free_port()
        env = dict(os.environ, SLESS_DATA_DIR=f"{work}/data", SLESS_ADMIN_TOKEN=TOKEN,
                   SLESS_LISTEN=f"127.0.0.1:{port}", SLESS_LOG="warn")
        server = subprocess.Popen([args.sless, "server"], env=env, stdout=subprocess.DEVNULL)
        procs.append(server)
        wait_port(port)
        api = Api(port)
        # An instance per core, each taking several invocations at once.
        scaling = {"concurrency": 16, "max_instances": 2}
        deploy(api, "hello-py", "python3.11", "handler.py", PY_HELLO, scaling)
        deploy(api, "hello-js", "nodejs20", "handler.js", JS_HELLO, scaling)

        # The plain servers: Node's http module; for Python, asyncio's
        # streams server as its documentation writes one (the target's
        # baseline), plus the standard library's http.server and a raw
        # asyncio.Protocol responder that skips header parsing (the fastest
        # Python can answer at all), for reference.
        # The plain servers run on the interpreters sless runs handlers with.
        python = os.environ.get("SLESS_PYTHON", "/usr/bin/python3.11")
        plain = {
            "py-streams": [python, f"{HERE}/plain_streams_server.py"],
            "py-raw": [python, f"{HERE}/plain_server.py"],
            "py-http.server": [python, f"{HERE}/plain_http_server.py"],
            "node-http": [os.environ.get("SLESS_NODE", "/usr/bin/node"), f"{HERE}/plain_server.js"],
        }
        ports = {}
        for key, command in plain.items():
            ports[key] = free_port()
            procs.append(subprocess.Popen(command + [str(ports[key])], stdout=subprocess.DEVNULL))
        for key in plain:
            wait_port(ports[key])
        proxied = {key: free_port() for key in ("py-streams", "py-raw", "node-http")}
        prefix = f"{work}/nginx"
        os.makedirs(prefix)
        with open(f"{prefix}/nginx.conf", "w") as f:
            f.write(nginx_conf(prefix, [(proxied[key], ports[key]) for key in proxied]))
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        procs.append(subprocess.Popen([nginx, "-p", prefix, "-c", f"{prefix}/nginx.conf"]))
        for key in proxied:
            wait_port(proxied[key])

        print(f"# sless bench: {os.cpu_count()} cores, wrk -t1 -c{args.connections} -d{args.duration}s, hello handler, "
              f"median of {args.rounds} rounds over all targets")
        print("# sless and nginx without access logs; nginx with one worker and upstream keep-alive\n")
        print(f"{'target':<44} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
        gateway = lambda name: f"http://127.0.0.1:{port}/fn/bench/{name}"
        local = lambda p: f"http://127.0.0.1:{p}/"
        targets = [
            ("python: sless gateway", gateway("hello-py")),
            ("python: asyncio streams server, direct", local(ports["py-streams"])),
            ("python: nginx -> asyncio streams server", local(proxied["py-streams"])),
            ("python: raw asyncio.Protocol, direct", local(ports["py-raw"])),
            ("python: nginx -> raw asyncio.Protocol", local(proxied["py-raw"])),
            ("python: http.server, direct", local(ports["py-http.server"])),
            ("node: sless gateway", gateway("hello-js")),
            ("node: http module, direct", local(ports["node-http"])),
            ("node: nginx -> http module", local(proxied["node-http"])),
        ]
        # Rounds over every target, each target's figure the median of its
        # rounds: this shared machine drifts by tens of percent over minutes,
        # and rounds spread that drift over all targets alike.
        samples = {label: [] for label, _ in targets}
        for label, url in targets:
            wrk(url, 2, args.connections)  # warm-up
        for _ in range(args.rounds):
            for label, url in targets:
                samples[label].append(wrk(url, args.duration, args.connections))
        results = {}
        for label, _ in targets:
            runs = samples[label]
            results[label] = tuple(statistics.median(run[i] for run in runs) for i in range(3))
            rps, p50, p99 = results[label]
            print(f"{label:<44} {rps:>10.0f} {p50:>8.2f} {p99:>8.2f}")
        rps = lambda label: results[label][0]
        for runtime, direct, proxy in [
            ("python", "asyncio streams server, direct", "nginx -> asyncio streams server"),
            ("node", "http module, direct", "nginx -> http module"),
        ]:
            gw = rps(f"{runtime}: sless gateway")
            print(f"{runtime}: gateway / plain server direct = {gw / rps(f'{runtime}: {direct}'):.2f}x (target >= 0.9x); "
                  f"gateway / nginx -> plain server = {gw / rps(f'{runtime}: {proxy}'):.2f}x (target >= 1.0x)")
        gw = rps("python: sless gateway")
        print(f"python, for reference: gateway / raw asyncio.Protocol direct = {gw / rps('python: raw asyncio.Protocol, direct'):.2f}x, "
              f"/ nginx -> raw asyncio.Protocol = {gw / rps('python: nginx -> raw asyncio.Protocol'):.2f}x, "
              f"/ http.server direct = {gw / rps('python: http.server, direct'):.2f}x")

        if args.log_pairs:
            # The invocation log's cost: the same gateway with records off, runs interleaved.
            port_off = free_port()
            env_off = dict(env, SLESS_DATA_DIR=f"{work}/data-off", SLESS_LISTEN=f"127.0.0.1:{port_off}", SLESS_INVOCATION_LOG="false")
            server_off = subprocess.Popen([args.sless, "server"], env=env_off, stdout=subprocess.DEVNULL)
            procs.append(server_off)
            wait_port(port_off)
            api_off = Api(port_off)
            deploy(api_off, "hello-js", "nodejs20", "handler.js", JS_HELLO, scaling)
            # Short runs in alternating order, so drift of this shared machine
            # hits both sides alike; the median of the pairs' ratios is the figure.
            runs = {"on": (f"http://127.0.0.1:{port}/fn/bench/hello-js", server.pid),
                    "off": (f"http://127.0.0.1:{port_off}/fn/bench/hello-js", server_off.pid)}
            wrk(runs["off"][0], 2, args.connections)
            measured = {"on": [], "off": []}
            for i in range(args.log_pairs):
                for mode in ("on", "off") if i % 2 == 0 else ("off", "on"):
                    url, pid = runs[mode]
                    before = cpu_seconds(pid)
                    rps = wrk(url, args.log_seconds, args.connections)[0]
                    measured[mode].append((rps, (cpu_seconds(pid) - before) / (rps * args.log_seconds) * 1e6))
            ratios = [on[0] / off[0] for on, off in zip(measured["on"], measured["off"])]
            median = lambda values: statistics.median(values)
            print(f"\nnode gateway, invocation records on vs off ({args.log_pairs} pairs of {args.log_seconds} s): "
                  f"{median(r for r, _ in measured['on']):.0f} vs {median(r for r, _ in measured['off']):.0f} req/s; "
                  f"median ratio {median(ratios):.3f}x (target >= 0.95x); "
                  f"sless CPU per request {median(c for _, c in measured['on']):.1f} vs {median(c for _, c in measured['off']):.1f} us")

        print()
        for runtime, name, target in [("python", "hello-py", 10.0), ("node", "hello-js", 15.0)]:
            samples = []
            for i in range(args.cold_samples):
                # An env change starts a new generation: the function is at zero instances.
                status, body = api.call("PATCH", f"/v1/namespaces/bench/functions/{name}", {"env": {"BENCH": str(i)}})
                assert status == 200, body
                time.sleep(0.4)  # let the warm pool refill, as between real cold starts
                started = time.perf_counter()
                assert api.get_fn(f"/fn/bench/{name}") == 200
                samples.append((time.perf_counter() - started) * 1000)
            print(f"{runtime}: cold start p50 {pct(samples, 50):.1f} ms, p99 {pct(samples, 99):.1f} ms "
                  f"({len(samples)} samples; target p50 <= {target:.0f} ms)")

        samples = []
        for i in range(args.deploy_samples):
            archive = zip_of("handler.py", PY_HELLO + f"# revision {i}\n")
            samples.append(upload_and_wait(api, "hello-py", archive) * 1000)
        print(f"deploy (upload -> Ready, no dependencies): p50 {pct(samples, 50):.0f} ms, "
              f"p99 {pct(samples, 99):.0f} ms ({len(samples)} samples; target <= 500 ms)")
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
