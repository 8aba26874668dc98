"""The Kubernetes driver's serving figures (issue 17), on the fake cluster
(crates/sless-fake-cluster: a stand-in for the API server and kubelet
whose pods are real `sless instance` processes on 127.0.0.1, with a real
S3 server). Builds `sless` and the example
crates/sless-fake-cluster/examples/k8s_serving.rs in release, then runs
its scenarios (one function each there; `--scenario NAME` picks) and
prints the machine's load before and after. One command:

    python3 bench/k8s_serving.py [--calls N] [--concurrency N] [--rounds N]
                                 [--cold-rounds N] [--scenario warm|specialize]

Scenarios (all unless `--scenario` names some):
- warm: warm calls/s through the driver's gateway -> `sless instance`
  over TCP against the same handler on the local driver, same
  concurrency, rounds taking turns; medians and their ratio (target >= 0.8).
- specialize: crates/sless-fake-cluster/examples/k8s_specialize.rs, a new
  function at zero per round (`--cold-rounds`), its first call timed from
  the driver's invoke to the answer, with a warm pool (scale from zero,
  claim, specialize: presigned fetch, sha256, unpack, load; the call) and
  without (the function's own pod); p50/p99 of each and the warm p50's
  ratio to the 50 ms target.
"""

import argparse
import os
import subprocess
import sys


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cold-rounds", type=int, default=30)
    parser.add_argument("--scenario", action="append", default=[])
    args = parser.parse_args()
    scenarios = args.scenario or ["warm", "specialize"]
    serving = [s for s in scenarios if s != "specialize"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/sless-target"))
    env = dict(os.environ, CARGO_TARGET_DIR=target)
    build = ["cargo", "build", "--release", "--locked", "-q"]
    subprocess.run(build + ["-p", "sless"], cwd=root, env=env, check=True)
    examples = ["--example", "k8s_serving", "--example", "k8s_specialize"]
    subprocess.run(build + ["-p", "sless-fake-cluster"] + examples, cwd=root, env=env, check=True)
    sless = os.path.join(target, "release", "sless")
    serving_command = [
        os.path.join(target, "release", "examples", "k8s_serving"),
        "--sless", sless,
        "--calls", str(args.calls),
        "--concurrency", str(args.concurrency),
        "--rounds", str(args.rounds),
    ]
    for scenario in serving:
        serving_command += ["--scenario", scenario]
    specialize_command = [
        os.path.join(target, "release", "examples", "k8s_specialize"), sless, str(args.cold_rounds),
    ]
    status = 0
    print("load before:", uptime(), flush=True)
    if serving:
        status = status or subprocess.run(serving_command, cwd=root).returncode
    if "specialize" in scenarios:
        print("scenario specialize: a cold call with and without warm pods", flush=True)
        status = status or subprocess.run(specialize_command, cwd=root).returncode
    print("load after: ", uptime(), flush=True)
    sys.exit(status)


if __name__ == "__main__":
    main()
