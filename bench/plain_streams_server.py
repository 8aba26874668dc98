"""A Python baseline: the hello handler behind an HTTP/1.1 server written the
way asyncio's documentation writes servers, with `asyncio.start_server` and
its streams (keep-alive, request line and headers parsed, standard library
only), hit directly."""

import asyncio
import json
import sys


def handle(event, context):
    return {"hello": "world"}


async def serve(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length") or 0)
            raw = await reader.readexactly(length) if length else b""
            try:
                event = json.loads(raw) if raw else {}
            except ValueError:
                event = raw.decode("utf-8", "replace")
            context = {"method": method, "path": path, "headers": headers}
            body = json.dumps(handle(event, context)).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(port):
    server = await asyncio.start_server(serve, "127.0.0.1", port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
