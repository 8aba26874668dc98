# Contract tests for a shim that serves the gateways' connections itself
# (runtimes/PROTOCOL.md, "The shim serves the connections itself"): each test
# starts a shim with a listening socket on fd 5, loads it with `serve`, and
# speaks frames to it over TCP connections on 127.0.0.1 as well as the pipes,
# for Python and for Node alike.
# Run from the repo root: python3 -m unittest discover -s runtimes/tests -p 'test_serve.py' -v

import json
import queue
import socket
import threading
import time
import unittest
from collections import defaultdict

from test_shims import (
    NODE_COMMAND,
    PYTHON_COMMAND,
    STDOUT,
    ShimClient,
    ShimContract,
    encode_frame,
    encode_invoke,
)

LISTEN_FD = 5
HELLO = {"runtime": "test-runtime", "namespace": "demo", "function": "hello", "version": 3, "concurrency": 4}
# How long a test waits to be sure that something does not happen.
QUIET_WAIT = 0.3


class GatewayConnection(ShimClient):
    """A gateway's connection to the shim's listening socket; its frames are
    recorded as ShimClient records the pipe's (`control` holds H and E)."""

    def __init__(self, port, shim):
        self.shim = shim
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.settimeout(None)
        self.control = []
        self.logs = defaultdict(list)
        self.outputs = {}
        self.arrival = []
        self.ended = False  # the shim closed the connection
        self._frames = queue.Queue()
        threading.Thread(target=self._read_frames, args=(self.sock.makefile("rb"),), daemon=True).start()

    def _read_frames(self, out):
        try:
            super()._read_frames(out)
        except OSError:  # reset: the shim closed (or exited) with frames of ours unread
            self._frames.put(None)

    def _record(self, frame):
        if frame is None:
            self.ended = True
        else:
            super()._record(frame)

    def stderr_text(self):
        return self.shim.stderr_text()

    def send(self, data):
        self.sock.sendall(data)

    def call(self, inv_id, event):
        self.send(encode_invoke(inv_id, json.dumps(event).encode()))

    def assert_silent(self):
        """Nothing arrives for QUIET_WAIT seconds."""
        time.sleep(QUIET_WAIT)
        self.assertion_free_drain()
        assert not self.control and not self.outputs and not self.logs and not self.ended, (
            self.control,
            self.outputs,
            self.logs,
        )

    def assertion_free_drain(self):
        while not self._frames.empty():
            self._record(self._frames.get())

    def close(self):
        self.sock.close()


class ServeContract:
    """The serve-mode tests shared by both runtimes. A subclass sets
    `command`, `handler_file` and `sources`: "sleepy" (prints "log <tag>" at
    once, answers the event after `delay` seconds; Python: a sync handler
    that prints "loading" at import), "sleepy_async" (the same, async) and
    "children" (answers {"listing": the `ls -l /proc/<pid>/fd` of a child
    shell it starts, letting it inherit what a child can}) and "holding"
    (keeps the interpreter for `seconds`: Python in C code holding the GIL,
    Node in a loop that never yields)."""

    make_code_dir = ShimContract.make_code_dir

    def spawn(self):
        """A started shim (HELLO read) holding a fresh listening socket on fd 5; returns (client, port)."""
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        port = listener.getsockname()[1]
        fd = listener.fileno()
        # bash: dash takes no descriptor above 9, and a test runner may hold that many
        move = "" if fd == LISTEN_FD else f"exec {LISTEN_FD}<&{fd} {fd}<&-; "
        command = ["/bin/bash", "-c", move + 'exec "$@"', "sless-serve-test", *self.command]
        client = ShimClient(command, pass_fds=(fd,))
        listener.close()  # the shim's now
        self.addCleanup(client.close)
        client.hello()
        return client, port

    def load(self, client, fixture, timeout_ms=30_000, concurrency=4, entrypoint="handler.handle"):
        code_dir = self.make_code_dir({self.handler_file: self.sources[fixture]})
        serve = {"fd": LISTEN_FD, "hello": HELLO, "timeout_ms": timeout_ms}
        return client.load(code_dir, entrypoint, [code_dir], concurrency=concurrency, serve=serve)

    def serve(self, fixture, **load_args):
        """A shim serving `fixture`; returns (client, port)."""
        client, port = self.spawn()
        self.assertEqual(self.load(client, fixture, **load_args), {"ok": True})
        return client, port

    def connect(self, client, port, hello=True):
        connection = GatewayConnection(port, client)
        self.addCleanup(connection.close)
        if hello:
            self.assertEqual(connection.hello(), HELLO)
        return connection

    def wait_exit(self, client, timeout=3.0):
        return client.proc.wait(timeout=timeout)

    # Accepting

    def test_each_connection_gets_the_hello_before_anything_else(self):
        client, port = self.serve("sleepy")
        first, second = self.connect(client, port, hello=False), self.connect(client, port, hello=False)
        for connection in (first, second):
            connection.pump_until(lambda: connection.control)
            self.assertEqual(connection.control, [(b"H", HELLO)])
            self.assertEqual((connection.outputs, dict(connection.logs)), ({}, {}))

    def test_no_connection_is_accepted_before_ready(self):
        client, port = self.spawn()
        early = self.connect(client, port, hello=False)
        early.assert_silent()
        self.assertEqual(self.load(client, "sleepy"), {"ok": True})
        self.assertEqual(early.hello(), HELLO)

    def test_a_failed_load_accepts_no_connection(self):
        client, port = self.spawn()
        early = self.connect(client, port, hello=False)
        self.assertFalse(self.load(client, "sleepy", entrypoint="missing.handle")["ok"])
        early.assert_silent()

    # Calls

    def test_equal_ids_on_two_connections_get_their_own_answers_and_logs(self):
        client, port = self.serve("sleepy")
        first, second = self.connect(client, port), self.connect(client, port)
        for connection, name in ((first, "a"), (second, "b")):
            connection.call(1, {"tag": f"{name}1", "delay": 0.2})
            connection.call(2, {"tag": f"{name}2", "delay": 0})
        for connection, name in ((first, "a"), (second, "b")):
            outputs = connection.wait_outputs([1, 2])
            self.assertEqual([output.json()["tag"] for output in outputs], [f"{name}1", f"{name}2"])
            self.assertEqual(connection.log_text(1, STDOUT), f"log {name}1\n")
            self.assertEqual(connection.log_text(2, STDOUT), f"log {name}2\n")
        self.assertEqual(client.outputs, {}, "no answer of a connection's call on stdout")
        self.assertNotIn(1, client.logs)

    def check_calls_run_concurrently(self, fixture):
        client, port = self.serve(fixture, concurrency=4)
        first, second = self.connect(client, port), self.connect(client, port)
        started = time.monotonic()
        for inv_id in (1, 2):
            first.call(inv_id, {"tag": f"a{inv_id}", "delay": 0.5})
            second.call(inv_id, {"tag": f"b{inv_id}", "delay": 0.5})
        for connection, name in ((first, "a"), (second, "b")):
            outputs = connection.wait_outputs([1, 2])
            self.assertEqual([output.json()["tag"] for output in outputs], [f"{name}1", f"{name}2"])
            self.assertEqual(connection.log_text(2, STDOUT), f"log {name}2\n")
        self.assertLess(time.monotonic() - started, 1.5, "four calls of 0.5 s at once, not one after another")

    def test_sync_calls_from_connections_run_concurrently(self):
        self.check_calls_run_concurrently("sleepy")

    def test_async_calls_from_connections_run_concurrently(self):
        self.check_calls_run_concurrently("sleepy_async")

    def test_the_pipe_is_served_as_before(self):
        client, port = self.serve("sleepy")
        self.assertEqual(client.log_text(0, STDOUT), "loading\n", "the import's output goes to stdout")
        connection = self.connect(client, port)
        connection.call(7, {"tag": "connection", "delay": 0.2})
        client.send(encode_invoke(7, b'{"tag": "pipe", "delay": 0}'))
        self.assertEqual(client.wait_outputs([7])[0].json()["tag"], "pipe")
        self.assertEqual(client.log_text(7, STDOUT), "log pipe\n")
        self.assertEqual(connection.wait_outputs([7])[0].json()["tag"], "connection")
        self.assertEqual(connection.log_text(7, STDOUT), "log connection\n")

    def test_eof_on_stdin_exits_0_with_a_connection_call_in_flight(self):
        client, port = self.serve("sleepy_async")
        connection = self.connect(client, port)
        connection.call(1, {"tag": "a", "delay": 10})
        connection.pump_until(lambda: connection.logs[1])
        client.proc.stdin.close()
        self.assertEqual(self.wait_exit(client), 0)

    def test_a_closed_connection_does_not_disturb_another(self):
        client, port = self.serve("sleepy")
        gone = self.connect(client, port)
        gone.call(1, {"tag": "gone", "delay": 0.4})
        gone.pump_until(lambda: gone.logs[1])
        gone.close()
        time.sleep(0.1)  # the shim closes its end: the next connection may get its number
        later = self.connect(client, port)
        later.call(1, {"tag": "later", "delay": 0})
        self.assertEqual(later.wait_outputs([1])[0].json()["tag"], "later")
        time.sleep(0.5)  # the closed connection's call has ended
        later.call(2, {"tag": "later2", "delay": 0})
        self.assertEqual(later.wait_outputs([2])[0].json()["tag"], "later2")
        self.assertEqual(later.arrival, [1, 2])
        self.assertEqual(later.log_text(1, STDOUT), "log later\n", "nothing of the closed connection's call")
        self.assertEqual(later.control, [(b"H", HELLO)])
        self.assertEqual(client.outputs, {})
        self.assertIsNone(client.proc.poll())

    def test_a_frame_other_than_invoke_closes_only_its_connection(self):
        client, port = self.serve("sleepy")
        bad, good = self.connect(client, port), self.connect(client, port)
        bad.send(encode_frame(b"L", 0, b"{}"))
        bad.pump_until(lambda: bad.ended)
        good.call(3, {"tag": "good", "delay": 0})
        self.assertEqual(good.wait_outputs([3])[0].json()["tag"], "good")
        self.assertEqual(bad.outputs, {})

    # Timeouts and draining

    def test_a_call_past_the_timeout_gets_an_error_and_the_shim_exits_1(self):
        client, port = self.serve("sleepy", timeout_ms=600)
        connection = self.connect(client, port)
        started = time.monotonic()
        connection.call(9, {"tag": "stuck", "delay": 5})
        kind, error = connection.next_control()
        self.assertGreater(time.monotonic() - started, 0.5)
        self.assertEqual(kind, b"E")
        self.assertEqual(error, {"error": "timeout", "reason": "no answer within 1s; the instance restarts"})
        self.assertEqual(self.wait_exit(client), 1)

    def test_the_error_of_a_timeout_carries_the_connections_id(self):
        client, port = self.serve("sleepy_async", timeout_ms=500)
        connection = self.connect(client, port)
        connection.send(encode_invoke(41, b'{"tag": "stuck", "delay": 5}'))
        connection.pump_until(lambda: len(connection.control) > 1)
        frame_ids = [inv_id for inv_id in connection.logs]
        self.assertEqual(frame_ids, [41])
        self.assertEqual(self.wait_exit(client), 1)

    def test_drain_exits_0_once_quiet(self):
        client, port = self.serve("sleepy")
        started = time.monotonic()
        client.send(encode_frame(b"D", 0, b'{"quiet_ms": 300}'))
        self.assertEqual(self.wait_exit(client), 0)
        self.assertGreater(time.monotonic() - started, 0.25)

    def test_drain_waits_for_calls_in_flight_and_keeps_serving(self):
        client, port = self.serve("sleepy")
        running = self.connect(client, port)
        running.call(1, {"tag": "long", "delay": 0.8})
        running.pump_until(lambda: running.logs[1])
        client.send(encode_frame(b"D", 0, b'{"quiet_ms": 200}'))
        time.sleep(0.3)
        self.assertIsNone(client.proc.poll(), "not while a call runs")
        newcomer = self.connect(client, port)
        newcomer.call(1, {"tag": "new", "delay": 0})
        self.assertEqual(newcomer.wait_outputs([1])[0].json()["tag"], "new")
        self.assertEqual(running.wait_outputs([1])[0].json()["tag"], "long")
        answered = time.monotonic()
        self.assertEqual(self.wait_exit(client), 0)
        self.assertGreater(time.monotonic() - answered, 0.15, "quiet for quiet_ms after the last answer")

    # Not held

    def test_a_serving_shim_says_k_every_second_but_not_while_a_handler_holds_it(self):
        client, port = self.serve("holding")
        deadline = time.monotonic() + 3
        while len(client.keepalives) < 2:
            self.assertLess(time.monotonic(), deadline, "K every second")
            time.sleep(0.05)
        connection = self.connect(client, port)
        started = time.monotonic()
        connection.call(1, {"seconds": 2.5})
        self.assertEqual(connection.wait_outputs([1], timeout=10)[0].json(), {"held": 2.5})
        answered = time.monotonic()
        held = [t for t in client.keepalives if started + 0.3 < t < answered - 0.3]
        self.assertEqual(held, [], "no K while the handler holds the interpreter")
        while not any(t > answered for t in client.keepalives):
            self.assertLess(time.monotonic(), answered + 3, "K again once it is given back")
            time.sleep(0.05)

    # Descriptors

    def children_listing(self):
        client, port = self.serve("children")
        connection = self.connect(client, port)
        connection.call(1, {})
        return connection.wait_outputs([1])[0].json()

    def test_a_handlers_child_processes_hold_no_socket(self):
        listing = self.children_listing()["listing"]
        self.assertIn("0 ->", listing)
        self.assertNotIn("socket:", listing)


PYTHON_SLEEPY = (
    "import time\n\n"
    'print("loading")\n\n'
    "def handle(event, context):\n"
    '    print("log", event["tag"])\n'
    '    time.sleep(event["delay"])\n'
    "    return event\n"
)


class PythonServeTest(ServeContract, unittest.TestCase):
    command = PYTHON_COMMAND
    handler_file = "handler.py"
    sources = {
        "sleepy": PYTHON_SLEEPY,
        "sleepy_async": (
            "import asyncio\n\n"
            'print("loading")\n\n'
            "async def handle(event, context):\n"
            '    print("log", event["tag"])\n'
            '    await asyncio.sleep(event["delay"])\n'
            "    return event\n"
        ),
        # PyDLL calls keep the GIL: the serve watch cannot run meanwhile.
        "holding": (
            "import ctypes\n\n"
            "def handle(event, context):\n"
            '    ctypes.pythonapi.usleep(int(event["seconds"] * 1_000_000))\n'
            '    return {"held": event["seconds"]}\n'
        ),
        "children": (
            "import os\nimport socket\nimport stat\nimport subprocess\n\n"
            "def handle(event, context):\n"
            '    shell = ["/bin/sh", "-c", "ls -l /proc/$$/fd"]\n'
            "    listing = subprocess.run(shell, close_fds=False, capture_output=True, text=True).stdout\n"
            "    try:\n"
            "        fd5_listens = stat.S_ISSOCK(os.fstat(5).st_mode) and socket.socket(fileno=os.dup(5)).getsockopt(\n"
            "            socket.SOL_SOCKET, socket.SO_ACCEPTCONN) != 0\n"
            "    except OSError:\n"
            "        fd5_listens = False\n"
            '    return {"listing": listing, "fd5_listens": fd5_listens}\n'
        ),
    }

    def test_the_handlers_fd_5_is_not_the_listening_socket(self):
        # (fd 5 may be another of the shim's, as a connection's socket.)
        self.assertFalse(self.children_listing()["fd5_listens"])

    def test_a_bad_serve_fails_the_load(self):
        client, _ = self.spawn()
        code_dir = self.make_code_dir({self.handler_file: PYTHON_SLEEPY})
        serve = {"fd": 63, "hello": HELLO, "timeout_ms": 1000}  # not open
        ready = client.load(code_dir, "handler.handle", [code_dir], serve=serve)
        self.assertFalse(ready["ok"])
        self.assertIn("Bad file descriptor", ready["error"])


class NodeServeTest(ServeContract, unittest.TestCase):
    command = NODE_COMMAND
    handler_file = "handler.js"
    sources = {
        "sleepy": (
            'console.log("loading");\n'
            "exports.handle = (event) => {\n"
            '  console.log("log", event.tag);\n'
            "  return new Promise((resolve) => setTimeout(() => resolve(event), event.delay * 1000));\n"
            "};\n"
        ),
        "sleepy_async": (
            'console.log("loading");\n'
            "exports.handle = async (event) => {\n"
            '  console.log("log", event.tag);\n'
            "  await new Promise((resolve) => setTimeout(resolve, event.delay * 1000));\n"
            "  return event;\n"
            "};\n"
        ),
        "holding": (
            "exports.handle = (event) => {\n"
            "  const end = Date.now() + event.seconds * 1000;\n"
            "  while (Date.now() < end) {}\n"
            "  return { held: event.seconds };\n"
            "};\n"
        ),
        "children": (
            'const { execSync } = require("child_process");\n'
            # Node gives a child its stdio as socket pairs: with those closed, a
            # socket left in the listing is one the child inherited.
            "exports.handle = async () => ({\n"
            '  listing: execSync("ls -l /proc/self/fd </dev/null 2>/dev/null | cat", { encoding: "utf8" }),\n'
            "});\n"
        ),
    }


if __name__ == "__main__":
    unittest.main()
