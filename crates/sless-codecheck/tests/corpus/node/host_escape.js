// Sample hostile function: asks the host's Docker daemon for a privileged container.
const http = require("http");

exports.handle = async () =>
  new Promise((resolve) => {
    const req = http.request(
      { socketPath: "/var/run/docker.sock", path: "/containers/json", method: "GET" },
      (res) => resolve({ status: res.statusCode }),
    );
    req.end();
  });
