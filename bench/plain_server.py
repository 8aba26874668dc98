"""A reference point: the hello handler behind a raw asyncio.Protocol HTTP/1.1
responder (keep-alive, standard library only) that reads only Content-Length
and parses no other header: about the fastest Python can answer HTTP at all,
so the bench prints the gateway's ratio to it beside the plain servers'."""

import asyncio
import json
import sys


def handle(event, context):
    return {"hello": "world"}


class HttpProtocol(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
        self.buffer = b""

    def data_received(self, data):
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            end = head_end + 4 + length
            if len(self.buffer) < end:
                return
            raw, self.buffer = self.buffer[head_end + 4:end], self.buffer[end:]
            try:
                event = json.loads(raw) if raw else {}
            except ValueError:
                event = raw.decode("utf-8", "replace")
            body = json.dumps(handle(event, None)).encode()
            self.transport.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                + str(len(body)).encode() + b"\r\n\r\n" + body
            )


async def main(port):
    loop = asyncio.get_running_loop()
    server = await loop.create_server(HttpProtocol, "127.0.0.1", port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
