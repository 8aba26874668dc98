"""A second Python baseline: the hello handler behind the standard library's
http.server (HTTP/1.1 keep-alive, a thread per connection, Nagle off), hit
directly."""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def handle(event, context):
    return {"hello": "world"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_GET(self):
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            event = json.loads(raw) if raw else {}
        except ValueError:
            event = raw.decode("utf-8", "replace")
        body = json.dumps(handle(event, None)).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # load generators reset connections at the end of a run


if __name__ == "__main__":
    server = Server(("127.0.0.1", int(sys.argv[1])), Handler)
    print("ready", flush=True)
    server.serve_forever()
