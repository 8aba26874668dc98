// Sample innocent function: decodes an upload and asks git for its version.
const { execFile, spawn } = require("child_process");
const { promisify } = require("util");

exports.handle = async (event) => {
  const data = Buffer.from(event.document || "", "base64");
  const { stdout } = await promisify(execFile)("git", ["--version"]);
  const wc = spawn("wc", ["-c"]);
  wc.stdin.write(data);
  wc.stdin.end();
  return { bytes: data.length, git: stdout.trim(), echo: data.subarray(0, 16).toString("base64") };
};
