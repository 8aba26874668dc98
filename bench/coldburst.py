"""Cold starts at scale (issue 21): N functions per runtime, all scaled to
zero, each called once by C callers in parallel (distinct functions, so
every call is a cold start). Prints, per runtime and C, cold starts per
second, p50 and p99 of the first answer, the machine's load average before
and after each burst and its CPU (user, system, idle) over it, and the
figures' ratio to their targets; as root,
the CPU one cold start costs (the server's cpuacct group over the burst),
split into the server's threads, the zygotes and the rest (the instances
themselves), and each Python fork's own CPU, page faults and threads
(medians over the burst's instances, read from /proc after it); then the
proportional set size (PSS) of idle hello instances of each runtime.
`--code-lines N` gives each Python function a module of about N lines of
its own that its handler imports (compiled at import, or read back as the
bytecode its build made). `--after-idle K` adds K cold starts each made once none of the
tenant's instances runs any more (as after a quiet spell). `--code-files N` gives each function (either
runtime) N small modules in folders beside its handler, which it does not
import: the cost of a code tree's files alone, as dependencies a call
does not use. One command:

    python3 bench/coldburst.py --sless "$CARGO_TARGET_DIR/release/sless"

Several server settings side by side (`--mode`, repeatable, NAME:K=V,K=V)
run the same scenario on one server each, in turn, e.g.
`--mode fork:SLESS_PYTHON_ZYGOTE=true --mode exec:SLESS_PYTHON_ZYGOTE=false`.
Instances stop 1 s after their call (SLESS_IDLE_TIMEOUT_SEC=1), so memory
stays bounded by the burst's rate, and each burst starts once the last
one's instances are gone. Needs root for the PSS figures (it reads the
server's control groups)."""

import argparse
import collections
import concurrent.futures
import glob
import http.client
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import zipfile

ADMIN = "bench-admin-token-0123456789"
HELLO = {
    "python": ("python3.11", "handler.py", "def handle(event, context):\n    return {'hello': 'world'}\n"),
    "node": ("nodejs20", "handler.js", "exports.handle = async (event, context) => ({ hello: 'world' });\n"),
}
# Issue 21's targets: (cold starts/s at C=16, p50 at C=16 in ms, p50 at C=1 in ms).
TARGETS = {"python": (300.0, 25.0, 4.0), "node": (60.0, 60.0, 8.0)}
PSS_TARGET_MB = 3.0


class Api:
    def __init__(self, address):
        host, port = address.rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=300)

    def call(self, method, path, body=None, content_type="application/json"):
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        headers = {"authorization": f"Bearer {ADMIN}"}
        if data is not None:
            headers["content-type"] = content_type
        self.conn.request(method, path, body=data, headers=headers)
        resp = self.conn.getresponse()
        text = resp.read()
        return resp.status, text

    def json(self, method, path, body=None, content_type="application/json"):
        status, text = self.call(method, path, body, content_type)
        return status, (json.loads(text) if text else None)


def start_server(sless, data, env, log=None):
    env = dict(os.environ, SLESS_LISTEN="127.0.0.1:0", SLESS_DATA_DIR=data, SLESS_ADMIN_TOKEN=ADMIN,
               SLESS_LOG="warn", SLESS_IDLE_TIMEOUT_SEC="1", SLESS_NS_MAX_FUNCTIONS="100000",
               SLESS_NS_MAX_INSTANCES="1000000", SLESS_NS_MAX_MEMORY_MB="1000000000") | env
    stderr = open(log, "a") if log else subprocess.DEVNULL
    account = cpu_account()
    join = (lambda: open(f"{account}/cgroup.procs", "w").write("0")) if account else None
    proc = subprocess.Popen([sless, "server"], env=env, stdout=subprocess.PIPE, stderr=stderr, text=True,
                            preexec_fn=join)
    proc.account = account
    for line in proc.stdout:
        if line.startswith("sless: listening on "):
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, line.split("http://", 1)[1].strip()
    raise SystemExit("the server did not start")


def cpu_account():
    """A cpuacct control group (cgroup v1, as root) for the server and
    everything it starts (zygote, forks, pasta): its CPU time over a burst,
    divided by the burst's calls, is the CPU one cold start costs, a figure
    that other load on the machine does not blur as it blurs wall times."""
    base = "/sys/fs/cgroup/cpuacct"
    if os.geteuid() != 0 or not os.path.exists(f"{base}/cpuacct.usage"):
        return None
    path = f"{base}/sless-coldburst-{os.getpid()}-{time.monotonic_ns()}"
    os.mkdir(path)
    return path


def cpu_ns(account):
    if not account:
        return None
    with open(f"{account}/cpuacct.usage") as f:
        return int(f.read())


def thread_cpu_ms(pid):
    """CPU time (ms) of each live thread of process `pid`, keyed by (tid, name)."""
    threads = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return threads  # gone
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                threads[(tid, name)] = int(f.read().split()[0]) / 1e6
        except OSError:
            continue
    return threads


def processes():
    """(pid, the fields of /proc/PID/stat after the command) of each live process."""
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                yield int(p), f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile


def children(pid):
    """The pids of the live children of `pid`."""
    return [p for p, fields in processes() if fields[1] == str(pid)]


def zygote_of(server_pid):
    """The server's Python zygote (its child running sless_zygote.py), or None."""
    for p in children(server_pid):
        if any(a.endswith(b"sless_zygote.py") for a in cmdline(p)):
            return p
    return None


def zygotes_of(server_pid):
    """The server's zygotes: Python's and Node's (one per heap size)."""
    return tuple(p for p in children(server_pid)
                 if any(a.endswith((b"sless_zygote.py", b"sless_zygote.js")) for a in cmdline(p)))


def cpu_parts(server_pid):
    """What `split` compares: the server's threads and its zygotes' CPU now."""
    zygotes = zygotes_of(server_pid)
    return thread_cpu_ms(server_pid), (zygotes, sum(sum(thread_cpu_ms(z).values()) for z in zygotes))


def split(server_pid, before, after, total_ms, calls):
    """The CPU per cold start of the server's threads (by kind), the
    zygotes, and the rest of the server's control group by difference: the
    instances themselves, and threads that ended during the burst."""
    (threads0, (zygote0, z0)), (threads1, (zygote1, z1)) = before, after
    kinds = {}
    for (tid, name), ms in threads1.items():
        kind = "runtime" if tid == str(server_pid) else {"tokio-rt-worker": "blocking"}.get(name, name)
        kinds[kind] = kinds.get(kind, 0.0) + ms - threads0.get((tid, name), 0.0)
    server = sum(kinds.values())
    zygote = z1 - z0 if zygote0 == zygote1 else 0.0  # none started or ended
    shown = ", ".join(f"{k} {v / calls:.2f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]) if v / calls >= 0.01)
    return (f"server {server / calls:.2f} ms ({shown}), zygotes {zygote / calls:.2f} ms, "
            f"instances and the rest {(total_ms - server - zygote) / calls:.2f} ms")


def fork_costs(server_pid):
    """Each live fork of the zygote (after a burst: the burst's instances):
    its own CPU (ms, all its threads: thread_cpu_ms), its page
    faults, and how many threads it runs. Steadier than the rates: other
    load on the machine does not add to a process's own CPU."""
    zygote = str(zygote_of(server_pid))
    costs = []
    for p, fields in processes():
        if fields[1] == zygote:
            threads = thread_cpu_ms(p)
            if threads:  # not gone meanwhile
                costs.append((sum(threads.values()), int(fields[7]), len(threads)))
    return costs


def fork_line(costs):
    if not costs:
        return None
    threads = collections.Counter(c[2] for c in costs)
    return (f"{len(costs)} forks: own CPU median {statistics.median(c[0] for c in costs):.2f} ms, "
            f"page faults median {statistics.median(c[1] for c in costs):.0f}, threads "
            + ", ".join(f"{n}: {k}" for n, k in sorted(threads.items())))


def zip_of(files):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in files.items():
            z.writestr(name, text)
    return buf.getvalue()


def library(lines):
    """A Python module of about `lines` lines of plain functions, as a
    handler's own code beside it would be."""
    body = []
    for i in range(max(1, lines // 10)):
        body.append(f"""def f{i}(x, y=1):
    \"\"\"Adds up {i} a few ways.\"\"\"
    total = 0
    for k in range(y):
        total += x * k + {i}
    if total > {i}:
        return {{"total": total, "parts": [x, y, {i}], "name": "f{i}"}}
    return total

""")
    return "".join(body)


def code_of(runtime, code_lines, code_files=0):
    """The functions' files: hello, with `code_lines` a module of that many
    lines (Python) that the handler imports, and `code_files` modules of a
    line each in folders of 50 that nothing imports."""
    _, filename, code = HELLO[runtime]
    files = {filename: code}
    if runtime == "python" and code_lines > 0:
        files = {filename: "import lib\n\n" + code.replace("'world'}", "'world', 'lib': lib.f0(1)}"),
                 "lib.py": library(code_lines)}
    extension = filename.rsplit(".", 1)[1]
    for i in range(code_files):
        files[f"vendor/pkg{i // 50}/m{i}.{extension}"] = f"X = {i}\n" if extension == "py" else f"exports.x = {i};\n"
    return files


def deploy_all(address, namespace, runtime, names, extra=None, parallel=8, code_lines=0, code_files=0):
    """Creates and builds every function (one archive, so one artifact)."""
    rt = HELLO[runtime][0]
    archive = zip_of(code_of(runtime, code_lines, code_files))

    def one(name):
        api = Api(address)
        status, body = api.json("POST", f"/v1/namespaces/{namespace}/functions",
                                {"name": name, "runtime": rt, **(extra or {})})
        assert status in (201, 409), body
        status, body = api.json("PUT", f"/v1/namespaces/{namespace}/functions/{name}/code", archive, "application/zip")
        assert status == 202, body
        while True:
            _, f = api.json("GET", f"/v1/namespaces/{namespace}/functions/{name}")
            if f["status"]["phase"] == "Ready":
                return
            if f["status"]["phase"] == "Failed":
                raise SystemExit(f"{namespace}/{name} failed to build: {f['status']['message']}")
            time.sleep(0.05)

    with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        list(pool.map(one, names))


def instances(api, namespace):
    _, text = api.call("GET", "/metrics")
    total = 0
    for line in text.decode().splitlines():
        if line.startswith(f'sless_instances{{namespace="{namespace}"'):
            total += int(line.rsplit(" ", 1)[1])
    return total


def wait_for_zero(api, namespace, timeout=120):
    end = time.time() + timeout
    while instances(api, namespace) > 0:
        if time.time() > end:
            raise SystemExit(f"instances of {namespace} did not stop within {timeout} s")
        time.sleep(0.2)


def burst(address, namespace, names, callers):
    """Calls each function once, `callers` at a time; returns the rate and latencies (ms)."""
    todo = iter(names)
    lock = threading.Lock()
    latencies, failures = [], []

    def caller():
        conn = http.client.HTTPConnection(*address.rsplit(":", 1), timeout=300)
        while True:
            with lock:
                name = next(todo, None)
            if name is None:
                return
            started = time.perf_counter()
            conn.request("GET", f"/fn/{namespace}/{name}")
            resp = conn.getresponse()
            body = resp.read()
            took = (time.perf_counter() - started) * 1000
            with lock:
                latencies.append(took)
                if resp.status != 200:
                    failures.append((name, resp.status, body[:200]))

    threads = [threading.Thread(target=caller) for _ in range(callers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    if failures:
        raise SystemExit(f"{len(failures)} calls failed, e.g. {failures[:3]}")
    return len(names) / wall, latencies


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def load():
    return os.getloadavg()[0]


def machine_ticks():
    """The whole machine's CPU time so far, from /proc/stat: (user, system, idle) in ticks."""
    with open("/proc/stat") as f:
        user, nice, system, idle, iowait, irq, softirq = map(int, f.readline().split()[1:8])
    return user + nice, system + irq + softirq, idle + iowait


def machine_share(before, after):
    """The machine's CPU over an interval, as shares of all its CPUs' time."""
    spent = [a - b for a, b in zip(after, before)]
    total = sum(spent) or 1
    user, system, idle = (100 * part / total for part in spent)
    return f"machine: user {user:.0f}%, system {system:.0f}%, idle {idle:.0f}%"


def pss_kb(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return int(re.search(r"^Pss:\s+(\d+) kB", f.read(), re.M).group(1))
    except (OSError, AttributeError):
        return 0


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def instance_groups(server_pid):
    """The server's per-sandbox control groups (v1 memory controller, or v2)."""
    with open(f"/proc/{server_pid}/cgroup") as f:
        own = f.read().splitlines()
    for line in own:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return glob.glob(f"/sys/fs/cgroup/memory{path.rstrip('/')}/sless-{server_pid}/*/")
        if controllers == "" and os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            return glob.glob(f"/sys/fs/cgroup{path.rstrip('/')}/sless-{server_pid}/*/")
    return []


def idle_pss(address, server_pid, count, runtime):
    """PSS (kB) of idle loaded hello instances of `runtime`: the shim
    process alone, and every process of its sandbox; and of each one's
    pasta."""
    api = Api(address)
    namespace = f"burst-pss-{runtime}"
    names = [f"pss-{i}" for i in range(count)]
    deploy_all(address, namespace, runtime, names, {"min_instances": 1})
    for name in names:
        status, _ = api.call("GET", f"/fn/{namespace}/{name}")
        assert status == 200
    time.sleep(2)  # let them settle (and be the only ones: the bursts' are gone)
    shims, sandboxes = [], []
    for group in instance_groups(server_pid):
        try:
            with open(os.path.join(group, "cgroup.procs")) as f:
                pids = [int(p) for p in f.read().split()]
        except OSError:
            continue
        # The interpreter (a new one, or a fork of a zygote), not bubblewrap.
        shim = [p for p in pids if os.path.basename((cmdline(p) or [b""])[0]).startswith(runtime.encode())]
        if shim:
            shims.append(sum(pss_kb(p) for p in shim))
            sandboxes.append(sum(pss_kb(p) for p in pids))
    marker = f"/run/netns/sless-{server_pid}-".encode()
    pastas = [pss_kb(int(p)) for p in os.listdir("/proc") if p.isdigit()
              and any(a.startswith(marker) for a in cmdline(int(p)))
              and os.path.basename(cmdline(int(p))[0]) in (b"pasta", b"passt")]
    return shims, sandboxes, pastas


def run_mode(args, label, env):
    work = tempfile.mkdtemp(prefix="sless-coldburst-")
    os.chmod(work, 0o711)  # sandboxed functions run as other users and must reach the data dir
    server, address = start_server(args.sless, f"{work}/data", env, args.server_log)
    rows = []
    try:
        api = Api(address)
        for runtime in args.runtimes:
            namespace = f"burst-{runtime}"
            names = [f"f-{i}" for i in range(args.functions)]
            started = time.time()
            deploy_all(address, namespace, runtime, names, code_lines=args.code_lines, code_files=args.code_files)
            print(f"[{label}] {runtime}: {len(names)} functions deployed in {time.time() - started:.0f} s", flush=True)
            for callers in args.callers:
                wait_for_zero(api, namespace)
                time.sleep(args.settle)  # the warm pool refills
                before, cpu_before, parts_before = load(), cpu_ns(server.account), cpu_parts(server.pid)
                ticks_before = machine_ticks()
                rate, latencies = burst(address, namespace, names, callers)
                ticks_after = machine_ticks()
                after, cpu_after, parts_after = load(), cpu_ns(server.account), cpu_parts(server.pid)
                forks = fork_line(fork_costs(server.pid)) if runtime == "python" else None
                row = (label, runtime, callers, rate, pct(latencies, 50), pct(latencies, 99), before, after)
                rows.append(row)
                cpu = ""
                if cpu_before is not None:
                    cpu = f", CPU {(cpu_after - cpu_before) / 1e6 / len(names):.2f} ms per cold start"
                print(f"[{label}] {runtime} C={callers:<2}: {rate:6.1f} cold starts/s, p50 {row[4]:6.1f} ms, "
                      f"p99 {row[5]:6.1f} ms{cpu} (load average {before:.2f} -> {after:.2f})", flush=True)
                if cpu_before is not None:
                    total = (cpu_after - cpu_before) / 1e6
                    print(f"[{label}] {runtime} C={callers:<2}:   per cold start: "
                          f"{split(server.pid, parts_before, parts_after, total, len(names))}", flush=True)
                if forks:
                    print(f"[{label}] {runtime} C={callers:<2}:   {forks}", flush=True)
                print(f"[{label}] {runtime} C={callers:<2}:   {machine_share(ticks_before, ticks_after)}", flush=True)
            if args.single > 0:
                # One cold start at a time, the warm pool refilled in between
                # (as bench.py measures a cold start): a fork (or a warm
                # shim) and a load, without waiting for a refill.
                wait_for_zero(api, namespace)
                time.sleep(args.settle)
                before, latencies = load(), []
                for name in names[:args.single]:
                    latencies += burst(address, namespace, [name], 1)[1]
                    time.sleep(0.5)
                row = (label, runtime, "1*", 0.0, pct(latencies, 50),
                       pct(latencies, 99), before, load())
                rows.append(row)
                print(f"[{label}] {runtime} one at a time, pool refilled: p50 {row[4]:6.1f} ms, p99 {row[5]:6.1f} ms "
                      f"({len(latencies)} samples; load average {before:.2f} -> {row[7]:.2f})", flush=True)
            if args.after_idle > 0:
                # A cold start in a tenant none of whose instances runs
                # any more (as after a quiet spell): its network hub went
                # with its last instance.
                latencies = []
                for name in names[:args.after_idle]:
                    wait_for_zero(api, namespace)
                    time.sleep(args.settle)
                    latencies += burst(address, namespace, [name], 1)[1]
                print(f"[{label}] {runtime} after the tenant's instances all ended: p50 {pct(latencies, 50):6.1f} ms, "
                      f"max {max(latencies):6.1f} ms ({len(latencies)} samples)", flush=True)
        pss = {}
        if args.pss_instances > 0 and os.geteuid() == 0:
            for runtime in args.runtimes:
                pss[runtime] = idle_pss(address, server.pid, args.pss_instances, runtime)
    finally:
        stop_server(server, work)
    return rows, pss


def stop_server(server, work):
    """Stops the server as a user would (it unmounts and removes what it
    made: a killed one leaves its instances' scratch mounts on the host),
    then removes its directory and control group."""
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
    shutil.rmtree(work, ignore_errors=True)
    if server.account:
        try:
            os.rmdir(server.account)
        except OSError:
            pass  # a straggler still in it; the group is empty and harmless


def report(rows, pss_by_mode):
    print("\nmode      runtime  C   cold/s    p50 ms   p99 ms  load avg (1 min) before -> after"
          "\n(C = 1*: one at a time with the warm pool refilled in between; no rate)")
    for label, runtime, callers, rate, p50, p99, before, after in rows:
        shown = "       -" if callers == "1*" else f"{rate:8.1f}"
        print(f"{label:<9} {runtime:<7} {callers:>2} {shown} {p50:9.1f} {p99:8.1f}  {before:.2f} -> {after:.2f}")
    print("\nagainst the targets of issue 21 (figure / target; rate >= 1 and latency <= 1 meet them):")
    for label in dict.fromkeys(r[0] for r in rows):
        for runtime, (rate_t, p50_t, single_t) in TARGETS.items():
            mine = {r[2]: r for r in rows if r[0] == label and r[1] == runtime}
            parts = []
            if 16 in mine:
                parts.append(f"C=16 rate {mine[16][3]:.1f}/{rate_t:.0f} = {mine[16][3] / rate_t:.2f}x")
                # 16 callers that always wait: their mean wait is 16 / rate
                # (Little's law), so a p50 target is a rate target too.
                parts.append(f"C=16 p50 {mine[16][4]:.1f}/{p50_t:.0f} ms = {mine[16][4] / p50_t:.2f}x "
                             f"(16 / rate = {16000 / mine[16][3]:.1f} ms; {p50_t:.0f} ms asks about "
                             f"{16000 / p50_t:.0f}/s)")
            if 1 in mine:
                parts.append(f"C=1 p50 {mine[1][4]:.1f}/{single_t:.0f} ms = {mine[1][4] / single_t:.2f}x")
            if "1*" in mine:
                parts.append(f"single cold start p50 {mine['1*'][4]:.1f}/{single_t:.0f} ms = {mine['1*'][4] / single_t:.2f}x")
            if parts:
                print(f"  {label} {runtime}: " + "; ".join(parts))
    for label, by_runtime in pss_by_mode.items():
        for runtime, (shims, sandboxes, pastas) in by_runtime.items():
            if not shims:
                print(f"  {label}: no idle {runtime} instance found for PSS")
                continue
            line = (f"  {label} idle {runtime} hello PSS ({len(shims)} instances): shim process median "
                    f"{statistics.median(shims) / 1024:.1f} MB")
            if runtime == "python":  # the target is Python's
                line += f" ({statistics.median(shims) / 1024 / PSS_TARGET_MB:.2f}x of {PSS_TARGET_MB:.0f} MB)"
            line += f", whole sandbox {statistics.median(sandboxes) / 1024:.1f} MB"
            if pastas:
                line += f", its pasta (network) {statistics.median(pastas) / 1024:.1f} MB"
            print(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sless", required=True)
    ap.add_argument("--functions", type=int, default=200, help="functions per runtime (N)")
    ap.add_argument("--callers", default="1,4,16", help="callers in parallel (C), comma separated")
    ap.add_argument("--runtimes", default="python,node")
    ap.add_argument("--settle", type=float, default=2.0, help="seconds between bursts for the warm pool")
    ap.add_argument("--pss-instances", type=int, default=10)
    ap.add_argument("--single", type=int, default=30,
                    help="cold starts one at a time, the warm pool refilled in between (0: none)")
    ap.add_argument("--after-idle", type=int, default=0,
                    help="cold starts each once none of the tenant's instances runs any more (0: none)")
    ap.add_argument("--code-lines", type=int, default=0,
                    help="Python functions import a module of about this many lines of their own")
    ap.add_argument("--code-files", type=int, default=0,
                    help="each function's code holds this many more modules, in folders, that it does not import")
    ap.add_argument("--server-log", help="append the servers' log here (its level through --mode, "
                    "e.g. --mode debug:SLESS_LOG=sless_driver_local=debug)")
    ap.add_argument("--mode", action="append", default=[],
                    help="NAME:K=V,K=V server environment of one side (repeatable)")
    args = ap.parse_args()
    args.callers = [int(c) for c in args.callers.split(",")]
    args.runtimes = args.runtimes.split(",")
    modes = []
    for mode in args.mode or ["default:"]:
        label, _, pairs = mode.partition(":")
        modes.append((label, dict(p.split("=", 1) for p in pairs.split(",") if p)))
    print(f"{os.cpu_count()} CPUs, load average {load():.2f}; N = {args.functions}, C = {args.callers}", flush=True)
    rows, pss_by_mode = [], {}
    for label, env in modes:
        mode_rows, pss = run_mode(args, label, env)
        rows += mode_rows
        pss_by_mode[label] = pss
    report(rows, pss_by_mode)


if __name__ == "__main__":
    main()
