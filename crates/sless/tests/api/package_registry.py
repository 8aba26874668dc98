"""A package index and registry on loopback for the fidelity tests' builds:
the wheels and npm tarballs that scripts/test-packages.sh fetched, served
as a PEP 503 simple index (`/simple/{project}/`) and as an npm registry
(`/npm/{name}`, tarballs under `/tarballs/`). Prints its port, then serves
until killed.

    python3 package_registry.py DIR
"""

import base64
import hashlib
import json
import os
import re
import sys
import tarfile
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = sys.argv[1]
WHEELS = os.path.join(ROOT, "pypi")
TARBALLS = os.path.join(ROOT, "npm")


def normalized(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def digest(path, algorithm):
    with open(path, "rb") as f:
        return hashlib.new(algorithm, f.read())


def npm_packages():
    """name -> version -> (manifest, tarball file)."""
    packages = {}
    for file in sorted(os.listdir(TARBALLS)):
        with tarfile.open(os.path.join(TARBALLS, file)) as tar:
            member = next(m for m in tar.getmembers() if m.name.endswith("package.json") and m.name.count("/") == 1)
            manifest = json.load(tar.extractfile(member))
        packages.setdefault(manifest["name"], {})[manifest["version"]] = (manifest, file)
    return packages


PACKAGES = npm_packages()


class Registry(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, body, content_type):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def file(self, directory, name):
        path = os.path.join(directory, os.path.basename(name))
        if not os.path.isfile(path):
            return self.answer(404, b"not found\n", "text/plain")
        with open(path, "rb") as f:
            self.answer(200, f.read(), "application/octet-stream")

    def do_GET(self):
        base = f"http://{self.headers['Host']}"
        parts = [urllib.parse.unquote(p) for p in self.path.split("?")[0].strip("/").split("/")]
        if len(parts) == 2 and parts[0] == "simple":
            wheels = [w for w in sorted(os.listdir(WHEELS)) if normalized(w.split("-")[0]) == normalized(parts[1])]
            if not wheels:
                return self.answer(404, b"not found\n", "text/plain")
            links = "".join(
                f'<a href="{base}/files/{w}#sha256={digest(os.path.join(WHEELS, w), "sha256").hexdigest()}">{w}</a>\n'
                for w in wheels
            )
            return self.answer(200, f"<!DOCTYPE html><html><body>\n{links}</body></html>\n".encode(), "text/html")
        if len(parts) == 2 and parts[0] == "files":
            return self.file(WHEELS, parts[1])
        if len(parts) == 2 and parts[0] == "tarballs":
            return self.file(TARBALLS, parts[1])
        if len(parts) in (2, 3) and parts[0] == "npm":
            name = "/".join(parts[1:])
            if name not in PACKAGES:
                return self.answer(404, b'{"error": "not found"}', "application/json")
            versions = {}
            for version, (manifest, file) in PACKAGES[name].items():
                path = os.path.join(TARBALLS, file)
                sha512 = base64.b64encode(digest(path, "sha512").digest()).decode()
                versions[version] = dict(
                    manifest,
                    dist={
                        "tarball": f"{base}/tarballs/{file}",
                        "shasum": digest(path, "sha1").hexdigest(),
                        "integrity": f"sha512-{sha512}",
                    },
                )
            latest = sorted(versions, key=lambda v: [int(x) if x.isdigit() else 0 for x in re.split(r"[.+-]", v)])[-1]
            body = {"name": name, "dist-tags": {"latest": latest}, "versions": versions}
            return self.answer(200, json.dumps(body).encode(), "application/json")
        self.answer(404, b"not found\n", "text/plain")


server = ThreadingHTTPServer(("127.0.0.1", 0), Registry)
print(server.server_address[1], flush=True)
server.serve_forever()
