// The bench's baseline: the hello handler behind Node's own http module
// (keep-alive), hit directly.
const http = require("http");

const handle = async (event, context) => ({ hello: "world" });

http
  .createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", async () => {
      const raw = Buffer.concat(chunks).toString();
      let event = {};
      if (raw) {
        try { event = JSON.parse(raw); } catch { event = raw; }
      }
      const body = JSON.stringify(await handle(event, {}));
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
      res.end(body);
    });
  })
  .listen(Number(process.argv[2]), "127.0.0.1", () => console.log("ready"));
