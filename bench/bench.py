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
        self.conn.request(method, path, body=data, headers=headers)
        resp = self.conn.getresponse()
        text = resp.read()
        return resp.status, (json.loads(text) if text else None)

    def get_fn(self, path):
        self.conn.request("GET", path)
        resp = self.conn.getresponse()
        resp.read()
        return resp.status


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
    started = time.perf_counter()
    status, body = api.call("PUT", f"/v1/namespaces/bench/functions/{name}/code", archive, "application/zip")
    assert status == 202, body
    code_hash = body["status"]["code_hash"]
    while True:
        status, body = api.call("GET", f"/v1/namespaces/bench/functions/{name}")
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
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--cold-samples", type=int, default=30)
    ap.add_argument("--deploy-samples", type=int, default=15)
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="sless-bench-")
    os.chmod(work, 0o711)  # sandboxed functions run as other users and must reach the data dir
    procs = []
    try:
        port = free_port()
        env = dict(os.environ, SLESS_DATA_DIR=f"{work}/data", SLESS_ADMIN_TOKEN=TOKEN,
                   SLESS_LISTEN=f"127.0.0.1:{port}", SLESS_LOG="warn")
        procs.append(subprocess.Popen([args.sless, "server"], env=env, stdout=subprocess.DEVNULL))
        wait_port(port)
        api = Api(port)
        # An instance per core, each taking several invocations at once.
        scaling = {"concurrency": 16, "max_instances": 2}
        deploy(api, "hello-py", "python3.11", "handler.py", PY_HELLO, scaling)
        deploy(api, "hello-js", "nodejs20", "handler.js", JS_HELLO, scaling)

        py_port, js_port, pyhttp_port = free_port(), free_port(), free_port()
        procs.append(subprocess.Popen([sys.executable, f"{HERE}/plain_server.py", str(py_port)], stdout=subprocess.DEVNULL))
        procs.append(subprocess.Popen([sys.executable, f"{HERE}/plain_http_server.py", str(pyhttp_port)], stdout=subprocess.DEVNULL))
        procs.append(subprocess.Popen(["node", f"{HERE}/plain_server.js", str(js_port)], stdout=subprocess.DEVNULL))
        wait_port(py_port)
        wait_port(js_port)
        wait_port(pyhttp_port)
        ngx_py, ngx_js = free_port(), free_port()
        prefix = f"{work}/nginx"
        os.makedirs(prefix)
        with open(f"{prefix}/nginx.conf", "w") as f:
            f.write(nginx_conf(prefix, [(ngx_py, py_port), (ngx_js, js_port)]))
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        procs.append(subprocess.Popen([nginx, "-p", prefix, "-c", f"{prefix}/nginx.conf"]))
        wait_port(ngx_py)
        wait_port(ngx_js)

        print(f"# sless bench: {os.cpu_count()} cores, wrk -t1 -c{args.connections} -d{args.duration}s, hello handler")
        print("# plain server: Python = raw asyncio HTTP/1.1, Node = http module; sless and nginx without access logs\n")
        print(f"{'target':<34} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
        results = {}
        for runtime, name, direct, proxied in [
            ("python", "hello-py", py_port, ngx_py),
            ("node", "hello-js", js_port, ngx_js),
        ]:
            targets = {
                "sless gateway": f"http://127.0.0.1:{port}/fn/bench/{name}",
                "plain server, direct": f"http://127.0.0.1:{direct}/",
                "nginx -> plain server": f"http://127.0.0.1:{proxied}/",
            }
            if runtime == "python":
                targets["http.server, direct"] = f"http://127.0.0.1:{pyhttp_port}/"
            for label, url in targets.items():
                wrk(url, 2, args.connections)  # warm-up
                results[(runtime, label)] = wrk(url, args.duration, args.connections)
                rps, p50, p99 = results[(runtime, label)]
                print(f"{runtime + ': ' + label:<34} {rps:>10.0f} {p50:>8.2f} {p99:>8.2f}")
        print()
        for runtime in ("python", "node"):
            gw = results[(runtime, "sless gateway")][0]
            direct = results[(runtime, "plain server, direct")][0]
            proxied = results[(runtime, "nginx -> plain server")][0]
            print(f"{runtime}: gateway / direct = {gw / direct:.2f}x (target >= 0.9x); "
                  f"gateway / nginx = {gw / proxied:.2f}x (target >= 1.0x)")
            if runtime == "python":
                stdlib = results[(runtime, "http.server, direct")][0]
                print(f"python: gateway / http.server direct = {gw / stdlib:.2f}x")

        # The invocation log's cost: the same gateway with records off, runs interleaved.
        port_off = free_port()
        env_off = dict(env, SLESS_DATA_DIR=f"{work}/data-off", SLESS_LISTEN=f"127.0.0.1:{port_off}", SLESS_INVOCATION_LOG="false")
        procs.append(subprocess.Popen([args.sless, "server"], env=env_off, stdout=subprocess.DEVNULL))
        wait_port(port_off)
        api_off = Api(port_off)
        deploy(api_off, "hello-js", "nodejs20", "handler.js", JS_HELLO, scaling)
        on_url = f"http://127.0.0.1:{port}/fn/bench/hello-js"
        off_url = f"http://127.0.0.1:{port_off}/fn/bench/hello-js"
        wrk(off_url, 2, args.connections)
        on, off = [], []
        for _ in range(2):
            on.append(wrk(on_url, args.duration, args.connections)[0])
            off.append(wrk(off_url, args.duration, args.connections)[0])
        on_rps, off_rps = statistics.mean(on), statistics.mean(off)
        print(f"\nnode gateway with invocation records on: {on_rps:.0f} req/s, off: {off_rps:.0f} req/s "
              f"= {on_rps / off_rps:.3f}x (target >= 0.95x)")

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
