# Contract tests for the sless runtime shims (runtimes/PROTOCOL.md): each test
# starts a shim as a subprocess with pipes, speaks the frame protocol to it and
# checks one row of the handler contract, for Python and for Node alike.
# Run from the repo root: python3 -m unittest discover -s runtimes/tests -v

import base64
import itertools
import json
import os
import queue
import shutil
import struct
import subprocess
import tempfile
import threading
import time
import unittest
from collections import defaultdict
from pathlib import Path

RUNTIMES_DIR = Path(__file__).resolve().parent.parent
PYTHON_COMMAND = ["/usr/bin/python3.11", "-u", "-B", str(RUNTIMES_DIR / "python" / "sless_shim.py")]
# As the driver starts Node (PROTOCOL.md): frames on fds 3 and 4, stdout on stderr.
NODE_FDS = 'exec 3<&0 4>&1 </dev/null 1>&2; exec "$@"'
NODE_COMMAND = ["/bin/sh", "-c", NODE_FDS, "sless-shim", "node", str(RUNTIMES_DIR / "node" / "sless_shim.js")]

FRAME_HEAD = struct.Struct(">IcI")
U32 = struct.Struct(">I")
STDOUT, STDERR = 1, 2
NOT_SERIALIZABLE = "handler returned a value that is not JSON-serializable: "


def encode_frame(kind, inv_id, payload):
    return FRAME_HEAD.pack(len(payload) + 5, kind, inv_id) + payload


# A field value that leaves the field out of the INVOKE header.
OMIT = object()


def invoke_header(inv_id, **fields):
    header = {
        "kind": "http",
        "request_id": f"req-{inv_id}",
        "deadline_ms": int(time.time() * 1000) + 30_000,
        "method": "POST",
        "path": "",
        "query": "",
        "headers": {},
        "event": None,
    }
    header.update(fields)
    return {name: value for name, value in header.items() if value is not OMIT}


def encode_invoke(inv_id, body=b"", **fields):
    head = json.dumps(invoke_header(inv_id, **fields)).encode()
    return encode_frame(b"I", inv_id, U32.pack(len(head)) + head + body)


class Output:
    """One OUTPUT frame, decoded."""

    def __init__(self, payload):
        head_len = U32.unpack_from(payload)[0]
        head = json.loads(payload[4 : 4 + head_len])
        self.status = head["status"]
        self.headers = head["headers"]
        self.body = payload[4 + head_len :]

    def json(self):
        return json.loads(self.body)


class ShimClient:
    """A shim subprocess and the frames it has sent, sorted by invocation."""

    def __init__(self, command, **popen_args):
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen_args
        )
        self.stderr_chunks = []
        self.control = []  # (type, JSON payload) of HELLO and READY frames
        self.logs = defaultdict(list)  # invocation id -> [(stream, text)]
        self.outputs = {}  # invocation id -> Output
        self.arrival = []  # invocation ids in the order their OUTPUT came
        self.keepalives = []  # monotonic times K frames arrived (a serving shim's, PROTOCOL.md)
        self._frames = queue.Queue()
        threading.Thread(target=self._read_frames, args=(self.proc.stdout,), daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_frames(self, out):
        while (head := out.read(4)) and len(head) == 4:
            rest = out.read(U32.unpack(head)[0])
            if rest[:1] == b"K":
                self.keepalives.append(time.monotonic())
                continue
            self._frames.put((rest[:1], U32.unpack_from(rest, 1)[0], rest[5:]))
        self._frames.put(None)

    def _read_stderr(self):
        while chunk := self.proc.stderr.read1(65536):
            self.stderr_chunks.append(chunk)

    def stderr_text(self):
        return b"".join(self.stderr_chunks).decode("utf-8", "replace")

    def send(self, data):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def _record(self, frame):
        if frame is None:
            raise AssertionError(f"shim closed its stdout; stderr:\n{self.stderr_text()}")
        kind, inv_id, payload = frame
        if kind == b"G":
            self.logs[inv_id].append((payload[0], payload[1:].decode()))
        elif kind == b"O":
            self.outputs[inv_id] = Output(payload)
            self.arrival.append(inv_id)
        else:
            self.control.append((kind, json.loads(payload)))

    def pump_until(self, done, timeout=5.0):
        deadline = time.monotonic() + timeout
        while not done():
            try:
                self._record(self._frames.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                raise AssertionError(f"no answer from the shim in {timeout}s; stderr:\n{self.stderr_text()}")

    def next_control(self):
        count = len(self.control)
        self.pump_until(lambda: len(self.control) > count)
        return self.control[-1]

    def hello(self):
        kind, hello = self.next_control()
        assert kind == b"H", kind
        return hello

    def load(self, code_dir, entrypoint, path, *args, **fields):
        self.send_load(code_dir, entrypoint, path, *args, **fields)
        kind, ready = self.next_control()
        assert kind == b"R", kind
        return ready

    def send_load(self, code_dir, entrypoint, path, env=None, concurrency=8, max_output=None, **fields):
        spec = {
            "code_dir": code_dir,
            "path": path,
            "entrypoint": entrypoint,
            "env": env or {},
            "function": "hello",
            "namespace": "demo",
            "version": 3,
            "concurrency": concurrency,
        }
        if max_output is not None:
            spec["max_output_bytes"] = max_output
        spec.update(fields)
        self.send(encode_frame(b"L", 0, json.dumps(spec).encode()))

    def wait_outputs(self, ids, timeout=5.0):
        self.pump_until(lambda: all(i in self.outputs for i in ids), timeout)
        return [self.outputs[i] for i in ids]

    def invoke(self, inv_id, body=b"", **fields):
        self.send(encode_invoke(inv_id, body, **fields))
        return self.wait_outputs([inv_id])[0]

    def log_text(self, inv_id, stream):
        return "".join(text for s, text in self.logs[inv_id] if s == stream)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            pipe.close()


class ShimContract:
    """The contract tests shared by both runtimes. A subclass sets `command`,
    `runtime`, `handler_file`, `sources` (fixture name -> handler source),
    what the "raise" fixture throws (`error_type`, `failing_function`) and
    the dependency layout (`dep_files`, `dep_path`)."""

    def spawn(self):
        client = ShimClient(self.command)
        self.addCleanup(client.close)
        client.hello()
        return client

    def spawn_taken(self, code_dir, entrypoint, path, **fields):
        """A shim taken at once, as by a cold start that waits for one: its
        LOAD is in its pipe before it says HELLO, so it never rehearses,
        however long a busy machine takes to run the test (a LOAD sent after
        HELLO came more than REHEARSAL_DELAY later under load). Returns
        (client, READY)."""
        client = ShimClient(self.command)
        self.addCleanup(client.close)
        client.send_load(code_dir, entrypoint, path, **fields)
        client.hello()
        kind, ready = client.next_control()
        assert kind == b"R", kind
        return client, ready

    def make_code_dir(self, files):
        code_dir = tempfile.mkdtemp(prefix="sless-shim-test-")
        self.addCleanup(shutil.rmtree, code_dir)
        for name, text in files.items():
            target = Path(code_dir, name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        return code_dir

    def load(
        self,
        fixture,
        entrypoint="handler.handle",
        files=None,
        path=(".",),
        env=None,
        concurrency=8,
        max_output=None,
        **fields,
    ):
        """A fresh shim with `fixture` as the handler module (more LOAD
        `fields` as given); returns (client, READY)."""
        code_dir = self.make_code_dir({self.handler_file: self.sources[fixture], **(files or {})})
        client = self.spawn()
        paths = [os.path.normpath(os.path.join(code_dir, p)) for p in path]
        return client, client.load(code_dir, entrypoint, paths, env, concurrency, max_output, **fields)

    def start(self, fixture, **load_args):
        client, ready = self.load(fixture, **load_args)
        self.assertEqual(ready, {"ok": True})
        return client

    # HELLO and LOAD

    def test_hello(self):
        client = ShimClient(self.command)
        self.addCleanup(client.close)
        self.assertEqual(client.hello(), {"runtime": self.runtime, "shim_version": "1", "pid": client.proc.pid})

    def test_load_missing_module(self):
        _, ready = self.load("echo", entrypoint="nope.handle")
        self.assertFalse(ready["ok"])
        self.assertIn("nope", ready["error"])

    def test_load_syntax_error(self):
        _, ready = self.load("syntax_error")
        self.assertFalse(ready["ok"])
        self.assertIn("SyntaxError", ready["error"])
        self.assertIn(self.handler_file, ready["error"])

    def test_load_missing_function(self):
        _, ready = self.load("echo", entrypoint="handler.missing")
        self.assertFalse(ready["ok"])
        self.assertIn("'missing'", ready["error"])

    def test_a_missing_function_names_what_the_module_has(self):
        _, ready = self.load("two_functions")
        self.assertFalse(ready["ok"])
        self.assertTrue(ready["error"].endswith(f"{self.has}: handler, helper)"), ready["error"])
        _, ready = self.load("not_callable", entrypoint="handler.handle")
        self.assertTrue(ready["error"].endswith(f"{self.has} no function)"), ready["error"])

    def test_load_not_callable(self):
        _, ready = self.load("not_callable", entrypoint="handler.answer")
        self.assertFalse(ready["ok"])
        self.assertIn("not callable" if self.runtime.startswith("python") else "not a function", ready["error"])

    def test_second_load_is_refused(self):
        client = self.start("echo")
        self.assertEqual(client.load("/", "handler.handle", ["/"])["ok"], False)

    def test_invoke_before_load_is_500(self):
        client = self.spawn()
        output = client.invoke(1, request_id="req-early")
        self.assertEqual((output.status, output.json()), (500, {"error": "no function loaded", "request_id": "req-early"}))

    def test_import_output_is_attributed_to_id_0(self):
        client = self.start("import_print")
        self.assertEqual(client.log_text(0, STDOUT), "loading\n")

    # Return values

    def test_json_value(self):
        output = self.start("value").invoke(1)
        self.assertEqual(output.status, 200)
        self.assertEqual(output.headers, {"content-type": "application/json"})
        self.assertEqual(output.json(), {"items": [1, 2.5, "three", None, True], "n": 7})

    def test_none_is_null(self):
        output = self.start("none").invoke(1)
        self.assertEqual((output.status, output.headers["content-type"], output.body), (200, "application/json", b"null"))

    def test_full_response_with_string_body(self):
        output = self.start("full_text").invoke(1)
        self.assertEqual(output.status, 201)
        self.assertEqual(
            output.headers,
            {"X-Custom": "yes", "x-count": "5", "content-type": "text/plain; charset=utf-8"},
        )
        self.assertEqual(output.body, "plain ü".encode())

    def test_full_response_with_json_body(self):
        output = self.start("full_json").invoke(1)
        self.assertEqual((output.status, output.headers), (202, {"content-type": "application/json"}))
        self.assertEqual(output.json(), {"k": [1, 2]})

    def test_full_response_without_body(self):
        output = self.start("full_empty").invoke(1)
        self.assertEqual((output.status, output.headers, output.body), (204, {}, b""))

    def test_full_response_keeps_its_content_type(self):
        output = self.start("full_html").invoke(1)
        self.assertEqual((output.headers, output.body), ({"Content-Type": "text/html"}, b"<p>hi</p>"))

    def test_lambda_s_cookies_and_multi_value_headers_are_a_header_per_value(self):
        client = self.start("lambda_headers")
        output = client.invoke(1, b'"ok"')
        self.assertEqual(output.status, 200)
        self.assertEqual(output.headers, {
            "Set-Cookie": ["first=0", "a=1; Path=/", "b=2"],
            "X-One": "a",
            "X-Multi": ["m1", "m2"],
            "X-Num": ["1"],
            "content-type": "text/plain; charset=utf-8",
        })
        for inv_id, (event, error) in enumerate([
            (b'"bad-cookies"', "handler returned 'cookies' that is not a list"),
            (b'"bad-multi"', "handler returned 'multiValueHeaders' that is not an object of lists"),
        ], start=2):
            output = client.invoke(inv_id, event)
            self.assertEqual((output.status, output.json()["error"]), (500, error))

    def test_full_response_with_bytes_body(self):
        output = self.start("full_bytes").invoke(1)
        self.assertEqual((output.headers, output.body), ({"content-type": "application/octet-stream"}, b"\x00\xffraw"))

    def test_a_binary_body_reaches_the_handler_as_sent(self):
        raw = bytes(range(256)) + b"\xff\xfe"
        output = self.start("raw_echo").invoke(1, raw)
        self.assertEqual(
            (output.status, output.headers, output.body), (200, {"content-type": "application/octet-stream"}, raw)
        )

    def test_a_body_marked_base64_is_sent_as_its_bytes(self):
        client = self.start("base64")
        data = bytes(range(256))
        # A MIME encoder's line breaks are skipped.
        output = client.invoke(1, json.dumps({"b64": base64.encodebytes(data).decode()}).encode())
        self.assertEqual(
            (output.status, output.headers, output.body), (200, {"content-type": "application/octet-stream"}, data)
        )
        image = {"b64": base64.b64encode(b"\x89PNG").decode(), "headers": {"Content-Type": "image/png"}}
        output = client.invoke(2, json.dumps(image).encode())
        self.assertEqual((output.headers, output.body), ({"Content-Type": "image/png"}, b"\x89PNG"))
        for bad in ["not base64!", "abc", "YQ", "YQ==YQ==", "ü", "-_-_"]:
            output = client.invoke(3, json.dumps({"b64": bad}).encode())
            self.assertEqual(output.status, 500, bad)
            self.assertEqual(
                output.json()["error"],
                "handler returned isBase64Encoded with a body that is not base64 (standard alphabet, padded)",
            )

    def test_invalid_status_code_is_500(self):
        output = self.start("bad_status").invoke(1)
        self.assertEqual(output.status, 500)
        self.assertEqual(output.json()["error"], "handler returned an invalid statusCode: 1000")

    def test_exception_is_500_with_traceback_only_in_the_log(self):
        client = self.start("raise")
        output = client.invoke(7, b'{"what": "x"}', request_id="req-seven")
        # Marked as the handler's failure: the gateway hides the message.
        self.assertEqual((output.status, output.headers), (500, {"content-type": "application/json", "x-sless-error": "1"}))
        self.assertEqual(output.json(), {"error": f"{self.error_type}: boom x", "request_id": "req-seven"})
        traceback_text = client.log_text(7, STDERR)
        self.assertIn(self.failing_function, traceback_text)
        self.assertIn("boom x", traceback_text)
        self.assertNotIn(self.failing_function, output.body.decode())
        self.assertNotIn("sless_shim", traceback_text)

    def test_an_error_message_is_cut_to_4096_characters_in_the_answer(self):
        # Escaped as JSON, a message of a million quotes would outgrow the
        # largest frame the server takes; cut, the instance goes on serving.
        client = self.start("raise")
        output = client.invoke(1, json.dumps({"what": '"' * 1_000_000}).encode())
        self.assertEqual(output.status, 500)
        error = output.json()["error"]
        self.assertTrue(error.startswith(f'{self.error_type}: boom ""'), error[:50])
        self.assertTrue(error.endswith('"" [... cut]'), error[-50:])
        self.assertEqual(len(error), len(f"{self.error_type}: ") + 4096 + len(" [... cut]"))
        self.assertEqual(client.invoke(2, b'{"what": "x"}').json()["error"], f"{self.error_type}: boom x")

    def test_a_load_error_is_cut_to_64_k_characters(self):
        _, ready = self.load("raise_at_import")
        self.assertFalse(ready["ok"])
        self.assertTrue(ready["error"].endswith("xxx [... cut]"), ready["error"][-80:])
        self.assertEqual(len(ready["error"]), 64 * 1024 + len(" [... cut]"))

    def test_a_body_nested_past_the_parsers_depth_is_text(self):
        self.assertEqual(self.start("echo").invoke(1, b"[" * 5000).json(), "[" * 5000)

    def test_value_that_is_not_serializable_is_500(self):
        output = self.start("unserializable").invoke(1, request_id="req-bad")
        self.assertEqual(output.status, 500)
        self.assertTrue(output.json()["error"].startswith(NOT_SERIALIZABLE), output.json())
        self.assertEqual(output.json()["request_id"], "req-bad")

    # Event and context

    def test_http_event_parsing(self):
        client = self.start("echo")
        self.assertEqual(client.invoke(1, b'{"a": [1, {"b": null}]}').json(), {"a": [1, {"b": None}]})
        self.assertEqual(client.invoke(2, b"").json(), {})
        self.assertEqual(client.invoke(3, b"hello there").json(), "hello there")
        self.assertEqual(client.invoke(4, b"\xff{").json(), "\ufffd{")

    def test_context_fields(self):
        client = self.start("context", memory_mb=256)
        deadline = int(time.time() * 1000) + 10_000
        output = client.invoke(
            5,
            b'{"p": 1}',
            request_id="req-ctx",
            deadline_ms=deadline,
            method="PUT",
            path="/rest/of/path",
            query="a=1&b=x%20y&a=3&flag",
            headers={"x-h": "v", "content-type": "application/json"},
        )
        result = output.json()
        self.assertEqual(
            result["fields"],
            {
                "trigger": "http",
                "request_id": "req-ctx",
                "function": "hello",
                "namespace": "demo",
                "version": 3,
                "method": "PUT",
                "path": "/rest/of/path",
                "query": {"a": "3", "b": "x y", "flag": ""},
                "raw_query": "a=1&b=x%20y&a=3&flag",
                "headers": {"x-h": "v", "content-type": "application/json"},
                "body": '{"p": 1}',
            },
        )
        self.assertTrue(result["same_by_key"])
        for remaining in result["remaining"]:
            self.assertTrue(8_000 < remaining <= 10_000, remaining)
        # Lambda's names, for handlers ported from it.
        self.assertEqual(result["lambda"], ["req-ctx", "hello", "3", "256", None, None])

    def test_empty_fields_may_be_left_out_of_the_header(self):
        # The server leaves out empty path, query and event.
        client = self.start("context")
        fields = client.invoke(1, method="GET", path=OMIT, query=OMIT, event=OMIT).json()["fields"]
        self.assertEqual((fields["method"], fields["path"], fields["query"], fields["raw_query"]), ("GET", "", {}, ""))
        client = self.start("event_and_trigger")
        self.assertEqual(client.invoke(2, kind="job", event=OMIT).json(), {"event": None, "trigger": "job"})

    def test_cron_and_job_events_come_from_the_header(self):
        client = self.start("event_and_trigger")
        cron = client.invoke(1, kind="cron", event={"tick": 1}, method="", headers={})
        self.assertEqual(cron.json(), {"event": {"tick": 1}, "trigger": "cron"})
        job = client.invoke(2, kind="job", event=[1, "two"])
        self.assertEqual(job.json(), {"event": [1, "two"], "trigger": "job"})

    # Handler forms

    def test_sync_handler(self):
        self.assertEqual(self.start("echo").invoke(1, b"[1]").json(), [1])

    def test_async_handler(self):
        self.assertEqual(self.start("async").invoke(1, b"[1]").json(), {"async": [1]})

    def test_one_argument_handler(self):
        self.assertEqual(self.start("one_arg").invoke(1, b'"x"').json(), {"one": "x"})

    # Output capture and concurrency

    def test_output_is_captured_per_invocation(self):
        client = self.start("print")
        output = client.invoke(9, b'{"msg": "hi"}')
        self.assertEqual(output.json(), "ok")
        self.assertEqual(client.log_text(9, STDOUT), "out hi\n")
        self.assertEqual(client.log_text(9, STDERR), "err hi\n")
        self.assertEqual(client.logs[0], [])

    def test_concurrent_async_invocations_are_attributed(self):
        client = self.start("slow_async")
        self.check_concurrent_invocations(client)

    def check_concurrent_invocations(self, client):
        """Four slow invocations at once: the shortest finishes first, and each
        one's output carries its own id."""
        delays = {1: 0.4, 2: 0.3, 3: 0.2, 4: 0.1}
        started = time.monotonic()
        client.send(b"".join(encode_invoke(i, json.dumps({"n": i, "delay": d}).encode()) for i, d in delays.items()))
        outputs = client.wait_outputs(list(delays))
        self.assertLess(time.monotonic() - started, 0.9)
        self.assertEqual(client.arrival, [4, 3, 2, 1])
        for inv_id, output in zip(delays, outputs):
            self.assertEqual(output.json(), inv_id)
            self.assertEqual(client.log_text(inv_id, STDOUT), f"start {inv_id}\ndone {inv_id}\n")

    # LOAD environment

    def test_dependency_from_path(self):
        client = self.start("dep", files=self.dep_files, path=self.dep_path)
        self.assertEqual(client.invoke(1, b'{"name": "sless"}').json(), "hello sless")

    def test_env_from_load(self):
        client = self.start("env", env={"GREETING": "bonjour"})
        self.assertEqual(client.invoke(1).json(), "bonjour")

    # Framing and lifetime

    def test_a_response_over_the_output_limit_is_a_500(self):
        client = self.start("echo", max_output=100)
        self.assertEqual(client.invoke(1, json.dumps("a" * 50).encode()).json(), "a" * 50)
        refused = client.invoke(2, json.dumps("b" * 200).encode())
        self.assertEqual(refused.status, 500)
        self.assertIn("more than the limit of 100", refused.json()["error"])

    def test_a_huge_write_goes_out_in_bounded_log_frames(self):
        client = self.start("shout")
        self.assertEqual(client.invoke(1, b"300000").json(), "ok")
        chunks = [text for stream, text in client.logs[1] if stream == 1]
        self.assertEqual(sum(len(c) for c in chunks), 300_000)
        self.assertLessEqual(max(len(c) for c in chunks), 64 * 1024)

    def test_frame_split_across_writes(self):
        client = self.start("echo")
        frame = encode_invoke(3, b'{"split": true}')
        for piece in (frame[:2], frame[2:7], frame[7:20], frame[20:-1], frame[-1:]):
            client.send(piece)
            time.sleep(0.02)
        self.assertEqual(client.wait_outputs([3])[0].json(), {"split": True})

    def test_large_frame_over_many_reads(self):
        client = self.start("echo")
        text = "x" * 1_000_000
        self.assertEqual(client.invoke(1, json.dumps(text).encode()).json(), text)

    def test_a_large_frame_between_small_ones_in_one_write(self):
        client = self.start("echo")
        text = "y" * 3_000_000
        client.send(
            encode_invoke(1, b"1") + encode_invoke(2, json.dumps(text).encode()) + encode_invoke(3, b"3")
        )
        self.assertEqual([o.json() for o in client.wait_outputs([1, 2, 3])], [1, text, 3])

    def test_frames_coalesced_in_one_write(self):
        client = self.start("echo")
        client.send(b"".join(encode_invoke(i, str(i).encode()) for i in (1, 2, 3)))
        self.assertEqual([o.json() for o in client.wait_outputs([1, 2, 3])], [1, 2, 3])

    def test_a_forged_frame_written_to_stdout_is_text_not_a_response(self):
        """A handler writes a well-formed OUTPUT frame for its own id to fd 1,
        to its runtime's stdout object and through a child process: the
        caller gets the handler's return value, the frame bytes are log
        text, and the child process holds no descriptor beyond stdio."""
        client = self.start("forge")
        for inv_id in (1, 2):
            output = client.invoke(inv_id, json.dumps({"id": inv_id}).encode())
            self.assertEqual(output.status, 200)
            answer = output.json()
            self.assertEqual(answer["answer"], "genuine")
            # The child's own stdio and the directory `ls` reads, nothing else.
            self.assertLessEqual(set(answer["child_fds"]), {"0", "1", "2", "3"}, answer)
            self.assertIn("forged", client.log_text(inv_id, STDOUT))
        deadline = time.monotonic() + 5
        while client.stderr_text().count("forged") < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertGreaterEqual(client.stderr_text().count("forged"), 4, "fd 1 and the child, twice, went to stderr")

    def test_eof_exits_0_without_finishing(self):
        client = self.start("slow_async")
        client.send(encode_invoke(1, b'{"n": 1, "delay": 10}'))
        client.proc.stdin.close()
        self.assertEqual(client.proc.wait(timeout=5), 0)


class PositionalArityTest(unittest.TestCase):
    """The shim's short cut for plain functions counts (event, context) as
    inspect.signature does, which it still asks of everything else."""

    def test_every_kind_of_handler_counts_as_inspect_counts_it(self):
        import functools
        import importlib.util
        import inspect

        spec = importlib.util.spec_from_file_location("shim_under_test", RUNTIMES_DIR / "python" / "sless_shim.py")
        shim = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(shim)

        def reference(handler):
            params = inspect.signature(handler).parameters.values()
            if any(p.kind is p.VAR_POSITIONAL for p in params):
                return 2
            positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            return min(2, sum(p.kind in positional for p in params))

        def decorated(function):
            @functools.wraps(function)
            def wrapper(*args):
                return function(*args)
            return wrapper

        def with_signature():
            pass
        with_signature.__signature__ = inspect.signature(lambda event: None)

        async def coroutine_function(event):
            pass

        class Callable:
            def __call__(self, event):
                pass

            def method(self, event, context):
                pass

        handlers = [
            lambda: 0, lambda event: 0, lambda event, context: 0, lambda event, context, extra=1: 0,
            lambda *args: 0, lambda event, *rest: 0, lambda event, *, key=1: 0, lambda event, /, context: 0,
            lambda **kwargs: 0, decorated(lambda event: 0), with_signature, coroutine_function,
            functools.partial(lambda a, b, c: 0, 1), Callable(), Callable().method,
        ]
        self.assertEqual([shim.positional_arity(h) for h in handlers], [reference(h) for h in handlers])
        self.assertEqual([reference(h) for h in handlers], [0, 1, 2, 2, 2, 2, 1, 2, 0, 1, 1, 1, 2, 1, 2])


class PythonShimTest(ShimContract, unittest.TestCase):
    command = PYTHON_COMMAND
    runtime = "python3.11"
    handler_file = "handler.py"
    has = "(it defines"
    error_type = "ValueError"
    failing_function = "fail_deeply"
    dep_files = {".deps/depmod.py": 'def greet(name):\n    return f"hello {name}"\n'}
    dep_path = (".deps", ".")
    sources = {
        "echo": "def handle(event, context):\n    return event\n",
        "shout": 'import sys\n\ndef handle(event, context):\n    sys.stdout.write("z" * event)\n    return "ok"\n',
        "syntax_error": "def handle(event, context)\n    return 1\n",
        "not_callable": "answer = 42\n",
        "two_functions": (
            "import json\nfrom json import dumps\n\n"
            "def handler(event, context):\n    return 1\n\n"
            "def helper():\n    return 2\n\n"
            "def _private():\n    return 3\n"
        ),
        "import_print": 'print("loading")\n\ndef handle(event, context):\n    return 1\n',
        "value": 'def handle(event, context):\n    return {"items": [1, 2.5, "three", None, True], "n": 7}\n',
        "none": "def handle(event, context):\n    return None\n",
        "full_text": (
            "def handle(event, context):\n"
            '    headers = {"X-Custom": "yes", "x-count": 5, "x-none": None}\n'
            '    return {"statusCode": 201, "headers": headers, "body": "plain ü"}\n'
        ),
        "full_json": 'def handle(event, context):\n    return {"statusCode": 202, "body": {"k": [1, 2]}}\n',
        "full_empty": 'def handle(event, context):\n    return {"statusCode": 204, "body": None}\n',
        "full_html": (
            "def handle(event, context):\n"
            '    return {"statusCode": 200, "headers": {"Content-Type": "text/html"}, "body": "<p>hi</p>"}\n'
        ),
        "full_bytes": 'def handle(event, context):\n    return {"statusCode": 200, "body": b"\\x00\\xffraw"}\n',
        "lambda_headers": (
            "def handle(event, context):\n"
            "    if event == 'bad-cookies':\n"
            "        return {'statusCode': 200, 'cookies': 'a=1'}\n"
            "    if event == 'bad-multi':\n"
            "        return {'statusCode': 200, 'multiValueHeaders': {'x': 'not a list'}}\n"
            "    return {'statusCode': 200, 'body': 'ok',\n"
            "            'headers': {'Set-Cookie': 'first=0', 'X-One': 'a', 'X-Multi': 'replaced'},\n"
            "            'multiValueHeaders': {'x-multi': ['m1', 'm2', None], 'X-Num': [1]},\n"
            "            'cookies': ['a=1; Path=/', 'b=2']}\n"
        ),
        "raw_echo": 'def handle(event, context):\n    return {"statusCode": 200, "body": context.raw_body}\n',
        "base64": (
            "def handle(event, context):\n"
            '    return {"statusCode": 200, "isBase64Encoded": True, "body": event["b64"],\n'
            '            "headers": event.get("headers", {})}\n'
        ),
        "bad_status": 'def handle(event, context):\n    return {"statusCode": 1000, "body": "x"}\n',
        "raise": (
            "def fail_deeply(what):\n"
            '    raise ValueError(f"boom {what}")\n\n'
            "def handle(event, context):\n"
            '    fail_deeply(event["what"])\n'
        ),
        "unserializable": "def handle(event, context):\n    return {1, 2}\n",
        "raise_at_import": 'raise RuntimeError("x" * 1_000_000)\n',
        "context": (
            'FIELDS = ["trigger", "request_id", "function", "namespace", "version", "method",\n'
            '          "path", "query", "raw_query", "headers", "body"]\n\n'
            "def handle(event, context):\n"
            "    return {\n"
            '        "fields": {name: getattr(context, name) for name in FIELDS},\n'
            '        "same_by_key": all(context[name] == getattr(context, name) for name in FIELDS),\n'
            '        "remaining": [context.remaining_time_ms(), context.get_remaining_time_in_millis()],\n'
            '        "lambda": [context.aws_request_id, context.function_name, context.function_version,\n'
            "                   context.memory_limit_in_mb, context.client_context, context.identity],\n"
            "    }\n"
        ),
        "event_and_trigger": 'def handle(event, context):\n    return {"event": event, "trigger": context.trigger}\n',
        "async": 'async def handle(event, context):\n    return {"async": event}\n',
        "one_arg": 'async def handle(event):\n    return {"one": event}\n',
        "zero_arg": 'def handle():\n    return "zero"\n',
        "print": (
            "import sys\n\n"
            "def handle(event, context):\n"
            '    print("out", event["msg"])\n'
            '    print("err", event["msg"], file=sys.stderr)\n'
            '    return "ok"\n'
        ),
        "slow_async": (
            "import asyncio\n\n"
            "async def handle(event, context):\n"
            '    print("start", event["n"])\n'
            '    await asyncio.sleep(event["delay"])\n'
            '    print("done", event["n"])\n'
            '    return event["n"]\n'
        ),
        "slow_sync": (
            "import time\n\n"
            "def handle(event, context):\n"
            '    print("start", event["n"])\n'
            '    time.sleep(event["delay"])\n'
            '    print("done", event["n"])\n'
            '    return event["n"]\n'
        ),
        "partial_line": (
            "import sys\n\n"
            "def handle(event, context):\n"
            '    sys.stdout.write(f"tail {event}")\n'
            "    return event\n"
        ),
        "thread": (
            "import threading, time\n\n"
            "def handle(event, context):\n"
            '    time.sleep(event.get("delay", 0))\n'
            "    return threading.current_thread().name\n"
        ),
        "spin": (
            "import threading, time\n\n"
            "def handle(event, context):\n"
            "    end = time.monotonic() + event\n"
            "    while time.monotonic() < end:\n"
            "        pass\n"
            "    return threading.current_thread().name\n"
        ),
        "sync_returning_coroutine": (
            "import asyncio\n\n"
            "async def work(event):\n"
            "    await asyncio.sleep(0)\n"
            '    return {"awaited": event}\n\n'
            "def handle(event, context):\n"
            "    return work(event)\n"
        ),
        "import_thread": (
            "import asyncio, sqlite3, threading\n\n"
            "IMPORTED_ON = threading.get_ident()\n"
            "LOCAL = threading.local()\n"
            'LOCAL.value = "set at import"\n'
            'DB = sqlite3.connect(":memory:")\n\n'
            "async def seven():\n"
            "    return 7\n\n"
            "def handle(event, context):\n"
            "    return {\n"
            '        "same_thread": threading.get_ident() == IMPORTED_ON,\n'
            '        "main": threading.current_thread() is threading.main_thread(),\n'
            '        "local": getattr(LOCAL, "value", None),\n'
            '        "sqlite": DB.execute("select 42").fetchone()[0],\n'
            '        "asyncio_run": asyncio.run(seven()),\n'
            "    }\n"
        ),
        "release": (
            "import threading\n\n"
            "RELEASED = threading.Event()\n\n"
            "def handle(event, context):\n"
            '    if event == "wait":\n'
            '        return "released" if RELEASED.wait(10) else "not released within 10 s"\n'
            '    if event == "release":\n'
            "        RELEASED.set()\n"
            "    return event\n"
        ),
        "forge": (
            "import os, struct, subprocess, sys\n\n"
            "def frame(inv_id):\n"
            "    head = b'{\"status\":299,\"headers\":{}}'\n"
            '    payload = struct.pack(">I", len(head)) + head + b"forged"\n'
            '    return struct.pack(">IcI", len(payload) + 5, b"O", inv_id) + payload\n\n'
            "def handle(event, context):\n"
            '    forged = frame(event["id"])\n'
            "    os.write(1, forged)\n"
            '    sys.stdout.write(forged.decode("latin-1"))\n'
            "    sys.stdout.flush()\n"
            '    subprocess.run(["/bin/sh", "-c", "cat"], input=forged, check=True)\n'
            '    fds = subprocess.run(["ls", "/proc/self/fd"], capture_output=True, text=True, check=True).stdout.split()\n'
            '    return {"answer": "genuine", "child_fds": fds}\n'
        ),
        "stray_fd_write": 'import os\n\ndef handle(event, context):\n    os.write(1, b"stray\\n")\n    return "clean"\n',
        "dep": 'import depmod\n\ndef handle(event, context):\n    return depmod.greet(event["name"])\n',
        "env": 'import os\n\ndef handle(event, context):\n    return os.environ["GREETING"]\n',
        "unserializable_in_object": "def handle(event, context):\n    return {'when': object()}\n",
        "generator": "def handle(event, context):\n    return (n for n in range(3))\n",
    }

    REHEARSAL = (
        "import asyncio, sys\n\n"
        "async def handle(event, context):\n"
        "    shim = sys.modules['__main__']\n"
        "    return {'rehearsed': shim.rehearsed, 'tasks': len(asyncio.all_tasks()),\n"
        "            'modules': [m for m in sys.modules if 'rehears' in m]}\n"
    )

    def test_an_entrypoint_may_name_its_module_as_a_path(self):
        # As Lambda's Python runtime reads "src/app.handler".
        client = self.start("echo", entrypoint="src/app.handle", files={"src/app.py": self.sources["echo"]})
        self.assertEqual(client.invoke(1, body=b'"x"').json(), "x")

    def test_an_idle_instance_rehearses_without_a_trace_and_a_loaded_one_never(self):
        # Left in the warm pool: it rehearses, writes no frame doing so,
        # and what it ran leaves no task or module behind.
        code_dir = self.make_code_dir({"handler.py": self.REHEARSAL})
        idle = self.spawn()
        time.sleep(0.2)
        self.assertTrue(idle._frames.empty(), "the rehearsal wrote a frame")
        self.assertEqual(idle.load(code_dir, "handler.handle", [code_dir]), {"ok": True})
        self.assertEqual(idle.invoke(1).json(), {"rehearsed": True, "tasks": 1, "modules": []})
        # Taken at once (a cold start waiting): no rehearsal.
        taken, ready = self.spawn_taken(code_dir, "handler.handle", [code_dir])
        self.assertEqual(ready, {"ok": True})
        time.sleep(0.1)
        self.assertEqual(taken.invoke(1).json(), {"rehearsed": False, "tasks": 1, "modules": []})

    THREADS = (
        "import os, sys, threading\n\n"
        "def handle(event, context):\n"
        "    shim = sys.modules['__main__']\n"
        "    return {'threads': sorted(t.name for t in threading.enumerate()),\n"
        "            'tasks': len(os.listdir('/proc/self/task')),\n"
        "            'spares': sorted(shim.spare_threads)}\n"
    )
    ASYNC_THREADS = THREADS.replace("def handle", "async def handle")

    def test_a_rehearsed_instance_starts_its_threads_ahead_and_keeps_no_spare(self):
        # Rehearsed, a sync handler's instance runs its loop and standby
        # reader on the threads it made while idle: the same threads as an
        # instance that made them after READY, and none parked. A handler
        # sees, by name, its main thread and the loop (which runs its
        # coroutines); the shim's own threads (the flush watchdog, the
        # standby reader) are threads of the process `threading` does not
        # list (start_own_thread), counted here from /proc.
        code_dir = self.make_code_dir({"handler.py": self.THREADS, "aio.py": self.ASYNC_THREADS})

        def settled(client, expected):
            """The first answer that is `expected` (a released spare may
            still be ending), else the last within 5 s."""
            deadline = time.monotonic() + 5
            for inv_id in itertools.count(1):
                got = client.invoke(inv_id).json()
                if got == expected or time.monotonic() > deadline:
                    return got
                time.sleep(0.05)

        # Rehearsed: main, flush, loop and standby. Taken at once, the loop
        # gets a thread only when a handler returns a coroutine
        # (test_a_sync_handlers_loop_is_made_with_the_first_coroutine); with
        # concurrency 1 there is no standby.
        for concurrency, wait, names, count in [(8, 0.2, ["MainThread", "sless-loop"], 4), (8, 0, ["MainThread"], 3),
                                                (1, 0.2, ["MainThread", "sless-loop"], 3), (1, 0, ["MainThread"], 2)]:
            if wait:
                client = self.spawn()
                time.sleep(wait)
                tasks = set(os.listdir(f"/proc/{client.proc.pid}/task"))
                self.assertEqual(len(tasks), 4, "main, flush and the spares")
                ready = client.load(code_dir, "handler.handle", [code_dir], concurrency=concurrency)
            else:
                client, ready = self.spawn_taken(code_dir, "handler.handle", [code_dir], concurrency=concurrency)
            self.assertEqual(ready, {"ok": True})
            expected = {"threads": names, "tasks": count, "spares": []}
            self.assertEqual(settled(client, expected), expected, (concurrency, wait))
            if wait:  # no thread was started after READY
                self.assertLessEqual(set(os.listdir(f"/proc/{client.proc.pid}/task")), tasks)
        # An async handler keeps its loop on the main thread: no spare stays.
        client = self.spawn()
        time.sleep(0.2)
        self.assertEqual(client.load(code_dir, "aio.handle", [code_dir]), {"ok": True})
        expected = {"threads": ["MainThread"], "tasks": 2, "spares": []}
        self.assertEqual(settled(client, expected), expected)

    def test_a_sync_handlers_loop_is_made_with_the_first_coroutine(self):
        # Taken at once, a sync handler's instance reads its LOAD with no
        # event loop and makes one (its epoll, its thread) only when a
        # handler returns a coroutine.
        code_dir = self.make_code_dir({"handler.py": (
            "import os, threading\n\n"
            "def epolls():\n"
            "    links = []\n"
            "    for fd in os.listdir('/proc/self/fd'):\n"
            "        try:\n"
            "            links.append(os.readlink(f'/proc/self/fd/{fd}'))\n"
            "        except OSError:\n"
            "            pass  # the listing's own descriptor\n"
            "    return links.count('anon_inode:[eventpoll]')\n\n"
            "def names():\n"
            "    return {'threads': sorted(t.name for t in threading.enumerate()),\n"
            "            'tasks': len(os.listdir('/proc/self/task')), 'epolls': epolls()}\n\n"
            "async def later():\n"
            "    return names()\n\n"
            "def handle(event, context):\n"
            "    return later() if event == 'coroutine' else names()\n"
        )})
        # Taken at once: no rehearsal, no spare threads.
        client, ready = self.spawn_taken(code_dir, "handler.handle", [code_dir], concurrency=1)
        self.assertEqual(ready, {"ok": True})
        # Main and the flush watchdog (the shim's own, unlisted), then the loop.
        self.assertEqual(client.invoke(1, b'"plain"').json(), {"threads": ["MainThread"], "tasks": 2, "epolls": 0})
        with_loop = {"threads": ["MainThread", "sless-loop"], "tasks": 3, "epolls": 1}
        self.assertEqual(client.invoke(2, b'"coroutine"').json(), with_loop)
        self.assertEqual(client.invoke(3, b'"coroutine"').json(), with_loop)
        self.assertEqual(client.invoke(4, b'"plain"').json(), with_loop)

    def test_the_loop_a_handlers_import_gets_is_the_one_its_calls_run_on(self):
        # asyncio.get_event_loop() at import (a module making futures, a
        # client bound to the loop) gets the loop its coroutines run on,
        # async or returned by a sync handler, rehearsed or not.
        code_dir = self.make_code_dir({
            "aio.py": ("import asyncio\nLOOP = asyncio.get_event_loop()\n\n"
                       "async def handle(event, context):\n"
                       "    return {'same': asyncio.get_running_loop() is LOOP}\n"),
            "sync.py": ("import asyncio\nLOOP = asyncio.get_event_loop()\n\n"
                        "async def check():\n"
                        "    return {'same': asyncio.get_running_loop() is LOOP}\n\n"
                        "def handle(event, context):\n"
                        "    return check()\n"),
        })
        for entrypoint in ("aio.handle", "sync.handle"):
            rehearsed = self.spawn()
            time.sleep(0.2)
            self.assertEqual(rehearsed.load(code_dir, entrypoint, [code_dir]), {"ok": True})
            taken, ready = self.spawn_taken(code_dir, entrypoint, [code_dir])
            self.assertEqual(ready, {"ok": True})
            for client, how in ((rehearsed, "rehearsed"), (taken, "taken at once")):
                self.assertEqual(client.invoke(1).json(), {"same": True}, (entrypoint, how))

    def test_a_plain_object_holding_a_value_that_is_not_serializable_is_500(self):
        # Plain objects take the reply's short path; it reports the same error.
        client = self.start("unserializable_in_object")
        output = client.invoke(1, request_id="req-obj")
        self.assertEqual(output.status, 500)
        self.assertTrue(output.json()["error"].startswith(NOT_SERIALIZABLE), output.json())
        self.assertEqual(output.json()["request_id"], "req-obj")

    def test_a_generator_a_sync_handler_returns_is_a_value_not_a_coroutine(self):
        # asyncio (3.11) takes a generator for an old-style coroutine: the
        # call failed with "Task got bad yield: 0".
        output = self.start("generator").invoke(1, request_id="req-gen")
        self.assertEqual(output.status, 500)
        self.assertEqual(output.json()["error"], NOT_SERIALIZABLE + "Object of type generator is not JSON serializable")

    def test_a_malformed_invoke_header_is_a_500_and_the_shim_keeps_serving(self):
        client = self.start("echo")
        for inv_id, header in [(1, b"not json"), (2, b'{"kind": "http"} trailing'), (3, b"[1, 2]")]:
            client.send(encode_frame(b"I", inv_id, U32.pack(len(header)) + header))
            out = client.wait_outputs([inv_id])[0]
            self.assertEqual(out.status, 500)
            self.assertIn("bad INVOKE", out.json()["error"])
        self.assertEqual(client.invoke(4, b'{"still": "here"}').json(), {"still": "here"})

    def test_sync_handlers_run_concurrently_in_the_pool(self):
        client = self.start("slow_sync", concurrency=4)
        self.check_concurrent_invocations(client)

    def test_a_sync_handler_runs_on_the_thread_that_imported_its_module(self):
        """As under python3 (and AWS Lambda's runtime): thread-local state the
        import set up (sqlite3's same-thread check, threading.local) holds in
        every call, however many calls came before; asyncio.run() works."""
        for concurrency in (1, 4):
            with self.subTest(concurrency=concurrency):
                client = self.start("import_thread", concurrency=concurrency)
                for inv_id in range(1, 301):
                    self.assertEqual(
                        client.invoke(inv_id).json(),
                        {"same_thread": True, "main": True, "local": "set at import", "sqlite": 42, "asyncio_run": 7},
                    )

    def test_a_slow_call_never_holds_up_calls_ready_to_run(self):
        """However many fast calls came before, a slow one does not keep the
        next call from running: the slow call waits for the next one to
        release it (and gives up after 10 s)."""
        client = self.start("release", concurrency=4)
        for inv_id in range(1, 301):
            self.assertEqual(client.invoke(inv_id, b'"fast"').json(), "fast")
        client.send(encode_invoke(301, b'"wait"') + encode_invoke(302, b'"release"'))
        outputs = client.wait_outputs([301, 302], timeout=15.0)
        self.assertEqual([o.json() for o in outputs], ["released", "release"])

    def test_overlapping_sync_calls_run_on_other_threads(self):
        client = self.start("thread", concurrency=4)
        client.send(b"".join(encode_invoke(i, b'{"delay": 0.3}') for i in (1, 2, 3)))
        names = sorted(o.json() for o in client.wait_outputs([1, 2, 3]))
        self.assertEqual(names, ["MainThread", "sless-handler-0", "sless-handler-1"])
        self.assertEqual(client.invoke(4).json(), "MainThread", "a call alone runs on the main thread")

    def test_fast_calls_read_at_once_all_run_on_the_main_thread(self):
        """No hand-off to another thread for calls that do not wait long."""
        client = self.start("thread", concurrency=4)
        client.send(b"".join(encode_invoke(i) for i in range(1, 21)))
        self.assertEqual({o.json() for o in client.wait_outputs(list(range(1, 21)))}, {"MainThread"})

    def test_calls_queued_behind_short_ones_go_to_other_threads(self):
        """Each call is shorter than the watchdog's tick, but the queue behind
        the main thread is not: once a call has waited a tick, the rest go to
        the pool instead of waiting 25 times 4 ms."""
        client = self.start("thread", concurrency=4)
        client.send(b"".join(encode_invoke(i, b'{"delay": 0.004}') for i in range(1, 26)))
        names = {o.json() for o in client.wait_outputs(list(range(1, 26)))}
        self.assertIn("MainThread", names)
        self.assertIn("sless-handler-0", names)

    def test_a_call_behind_one_that_computes_long_goes_to_another_thread(self):
        """A call that keeps the main thread computing (on the CPU, not
        waiting) holds up the next one a few ticks at most, not until it ends."""
        client = self.start("spin", concurrency=4)
        client.send(encode_invoke(1, b"1.5") + encode_invoke(2, b"0"))
        self.assertEqual(client.wait_outputs([2], timeout=1.0)[0].json(), "sless-handler-0")
        self.assertNotIn(1, client.outputs, "the second call was answered while the first still ran")
        self.assertEqual(client.wait_outputs([1])[0].json(), "MainThread")

    def test_answers_of_a_batch_are_not_held_back_by_a_slow_call_in_it(self):
        client = self.start("thread", concurrency=1)  # runs inline: one batch, one thread
        client.send(encode_invoke(1) + encode_invoke(2, b'{"delay": 1.5}'))
        started = time.monotonic()
        self.assertEqual(client.wait_outputs([1], timeout=1.0)[0].json(), "MainThread")
        self.assertNotIn(2, client.outputs, "the first answer came while the second call still ran")
        self.assertLess(time.monotonic() - started, 1.0)
        self.assertEqual(client.wait_outputs([2])[0].json(), "MainThread")

    def test_a_partial_line_reaches_its_invocation_at_the_end_of_the_call(self):
        """Also once the handler runs inline on the loop thread, where the end
        of the call flushes only when something is pending."""
        client = self.start("partial_line", concurrency=4)
        for inv_id in range(1, 206):
            self.assertEqual(client.invoke(inv_id, str(inv_id).encode()).json(), inv_id)
        for inv_id in (1, 205):
            self.assertEqual(client.log_text(inv_id, STDOUT), f"tail {inv_id}")
        self.assertEqual(client.logs[0], [])

    def test_zero_argument_handler(self):
        self.assertEqual(self.start("zero_arg").invoke(1).json(), "zero")

    def test_sync_handler_returning_a_coroutine_is_awaited(self):
        self.assertEqual(self.start("sync_returning_coroutine").invoke(1, b"5").json(), {"awaited": 5})

    def test_stray_write_to_fd_1_goes_to_stderr(self):
        client = self.start("stray_fd_write")
        self.assertEqual(client.invoke(1).json(), "clean")
        deadline = time.monotonic() + 2
        while "stray" not in client.stderr_text() and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertIn("stray", client.stderr_text())


class NodeShimTest(ShimContract, unittest.TestCase):
    command = NODE_COMMAND
    runtime = "nodejs20"
    handler_file = "handler.js"
    has = "(it exports"
    error_type = "TypeError"
    failing_function = "failDeeply"
    dep_files = {"node_modules/depmod/index.js": "exports.greet = (name) => `hello ${name}`;\n"}
    dep_path = ("node_modules",)
    sources = {
        "echo": "exports.handle = (event, context) => event;\n",
        "shout": "exports.handle = (event) => { process.stdout.write('z'.repeat(event)); return 'ok'; };\n",
        "syntax_error": "exports.handle = (event) => {\n  return event +;\n};\n",
        "not_callable": "exports.answer = 42;\n",
        "two_functions": "exports.handler = async () => 1;\nexports.helper = () => 2;\nexports.n = 3;\n",
        "callbacks": (
            "exports.handle = (event, context, callback) => {\n"
            "  if (event.fail === 'error') return callback(new RangeError('bad ' + event.n));\n"
            "  if (event.fail === 'text') return callback('plain words');\n"
            "  setTimeout(() => { callback(null, { n: event.n }); callback(null, 'twice'); }, 5);\n"
            "  return 'not the answer';\n"
            "};\n"
        ),
        "async_callbacks": "exports.handle = async (event, context, callback) => ({ n: event.n });\n",
        "import_print": 'console.log("loading");\nexports.handle = () => 1;\n',
        "value": 'exports.handle = async () => ({ items: [1, 2.5, "three", null, true], n: 7 });\n',
        "none": "exports.handle = async () => undefined;\n",
        "full_text": (
            "exports.handle = async () => ({\n"
            '  statusCode: 201, headers: { "X-Custom": "yes", "x-count": 5, "x-none": null }, body: "plain ü",\n'
            "});\n"
        ),
        "full_json": "exports.handle = async () => ({ statusCode: 202, body: { k: [1, 2] } });\n",
        "full_empty": "exports.handle = () => ({ statusCode: 204 });\n",
        "full_html": (
            'exports.handle = () => ({ statusCode: 200, headers: { "Content-Type": "text/html" }, body: "<p>hi</p>" });\n'
        ),
        "full_bytes": "exports.handle = () => ({ statusCode: 200, body: Buffer.from([0, 255, 114, 97, 119]) });\n",
        "lambda_headers": (
            "exports.handle = (event) => {\n"
            "  if (event === 'bad-cookies') return { statusCode: 200, cookies: 'a=1' };\n"
            "  if (event === 'bad-multi') return { statusCode: 200, multiValueHeaders: { x: 'not a list' } };\n"
            "  return { statusCode: 200, body: 'ok',\n"
            "    headers: { 'Set-Cookie': 'first=0', 'X-One': 'a', 'X-Multi': 'replaced' },\n"
            "    multiValueHeaders: { 'x-multi': ['m1', 'm2', null], 'X-Num': [1] },\n"
            "    cookies: ['a=1; Path=/', 'b=2'] };\n"
            "};\n"
        ),
        "raw_echo": "exports.handle = (event, context) => ({ statusCode: 200, body: context.raw_body });\n",
        "base64": (
            "exports.handle = (event) =>\n"
            "  ({ statusCode: 200, isBase64Encoded: true, body: event.b64, headers: event.headers || {} });\n"
        ),
        "bad_status": 'exports.handle = () => ({ statusCode: 1000, body: "x" });\n',
        "raise": (
            "function failDeeply(what) {\n"
            "  throw new TypeError(`boom ${what}`);\n"
            "}\n"
            "exports.handle = async (event) => failDeeply(event.what);\n"
        ),
        "unserializable": "exports.handle = async () => ({ big: 10n });\n",
        "raise_at_import": 'throw new Error("x".repeat(1000000));\n',
        "context": (
            'const FIELDS = ["trigger", "request_id", "function", "namespace", "version", "method",\n'
            '  "path", "query", "raw_query", "headers", "body"];\n'
            "exports.handle = async (event, context) => ({\n"
            "  fields: Object.fromEntries(FIELDS.map((name) => [name, context[name]])),\n"
            "  same_by_key: true,\n"
            "  remaining: [context.remaining_time_ms(), context.getRemainingTimeInMillis()],\n"
            "  lambda: [context.awsRequestId, context.functionName, context.functionVersion,\n"
            "    context.memoryLimitInMB, null, null],\n"
            "});\n"
        ),
        "event_and_trigger": "exports.handle = (event, context) => ({ event, trigger: context.trigger });\n",
        "async": "exports.handle = async (event, context) => ({ async: event });\n",
        "one_arg": "exports.handle = (event) => ({ one: event });\n",
        "print": (
            "exports.handle = async (event) => {\n"
            '  console.log("out", event.msg);\n'
            '  console.error("err", event.msg);\n'
            '  return "ok";\n'
            "};\n"
        ),
        "slow_async": (
            "const sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));\n"
            "exports.handle = async (event) => {\n"
            '  console.log("start", event.n);\n'
            "  await sleep(event.delay);\n"
            '  process.stdout.write(`done ${event.n}\\n`);\n'
            "  return event.n;\n"
            "};\n"
        ),
        "uncaught_in_callback": (
            "exports.handle = () => new Promise(() => {\n"
            '  setTimeout(() => { throw new RangeError("late"); }, 10);\n'
            "});\n"
        ),
        "dep": 'const depmod = require("depmod");\nexports.handle = (event) => depmod.greet(event.name);\n',
        "dep_on_path": 'const extra = require("extramod");\nexports.handle = () => extra.name;\n',
        "env": "exports.handle = () => process.env.GREETING;\n",
        "forge": (
            "const fs = require('fs');\n"
            "const cp = require('child_process');\n"
            "function frame(id) {\n"
            "  const head = Buffer.from('{\"status\":299,\"headers\":{}}');\n"
            "  const payload = Buffer.concat([Buffer.alloc(4), head, Buffer.from('forged')]);\n"
            "  payload.writeUInt32BE(head.length, 0);\n"
            "  const start = Buffer.alloc(9);\n"
            "  start.writeUInt32BE(payload.length + 5, 0);\n"
            "  start[4] = 0x4f;\n"
            "  start.writeUInt32BE(id, 5);\n"
            "  return Buffer.concat([start, payload]);\n"
            "}\n"
            "exports.handle = (event) => {\n"
            "  const forged = frame(event.id);\n"
            "  fs.writeSync(1, forged);\n"
            "  process.stdout.write(forged);\n"
            "  cp.execFileSync('/bin/sh', ['-c', 'cat'], { input: forged, stdio: ['pipe', 'inherit', 'inherit'] });\n"
            "  const fds = cp.execFileSync('ls', ['/proc/self/fd']).toString().split(/\\s+/).filter(Boolean);\n"
            "  return { answer: 'genuine', child_fds: fds };\n"
            "};\n"
        ),
    }

    def test_an_es_module_handler_loads_by_its_mjs_or_cjs_file(self):
        # Lambda's console writes a Node function as index.mjs; the entrypoint
        # names the file without its extension, as for handler.js.
        for name, source, answer in [
            ("index.mjs", "export const handler = async (event) => ({ esm: event });\n", {"esm": 7}),
            ("index.cjs", "exports.handler = (event) => ({ cjs: event });\n", {"cjs": 7}),
        ]:
            code_dir = self.make_code_dir({name: source})
            client = self.spawn()
            self.assertEqual(client.load(code_dir, "index.handler", [code_dir]), {"ok": True}, name)
            self.assertEqual(client.invoke(1, body=b"7").json(), answer, name)

    def test_an_es_module_awaiting_at_its_top_level_loads_and_its_calls_see_what_it_awaited(self):
        # Lambda's index.mjs often awaits its configuration at its top level:
        # READY comes once that has settled.
        source = (
            "const config = await new Promise((resolve) => setTimeout(() => resolve({ stage: 'prod' }), 50));\n"
            "export const handler = async (event) => ({ stage: config.stage, event });\n"
        )
        code_dir = self.make_code_dir({"index.mjs": source})
        client = self.spawn()
        self.assertEqual(client.load(code_dir, "index.handler", [code_dir]), {"ok": True})
        self.assertEqual(client.invoke(1, body=b"7").json(), {"stage": "prod", "event": 7})

    def test_an_es_module_awaiting_at_its_top_level_fails_its_load_as_any_other(self):
        for source, expected in [
            ("await null;\nthrow new RangeError('no configuration');\nexport const handler = () => 1;\n",
             ["cannot load module 'index'", "RangeError: no configuration", "index.mjs:2"]),
            ("await null;\nexport const other = () => 1;\n",
             ["module 'index' has no export 'handler'", "(it exports: other)"]),
            ("await null;\nexport const handler = 42;\n",
             ["'index.handler' is not a function (it is number)"]),
        ]:
            code_dir = self.make_code_dir({"index.mjs": source})
            client = self.spawn()
            ready = client.load(code_dir, "index.handler", [code_dir])
            self.assertFalse(ready["ok"], source)
            for text in expected:
                self.assertIn(text, ready["error"], source)

    def test_a_handler_of_three_arguments_answers_through_its_callback(self):
        client = self.start("callbacks")
        for n in (1, 2):
            output = client.invoke(n, json.dumps({"n": n}).encode())
            self.assertEqual((output.status, output.json()), (200, {"n": n}), "called back once, late")
        output = client.invoke(3, b'{"fail": "error", "n": 3}')
        self.assertEqual((output.status, output.json()["error"]), (500, "RangeError: bad 3"))
        output = client.invoke(4, b'{"fail": "text"}')
        self.assertEqual((output.status, output.json()["error"]), (500, "Error: plain words"))
        self.assertEqual(client.invoke(5, b'{"n": 5}').json(), {"n": 5})
        # An async handler of three arguments answers by its promise.
        self.assertEqual(self.start("async_callbacks").invoke(1, b'{"n": 6}').json(), {"n": 6})

    def test_a_handler_js_wins_over_an_mjs_of_the_same_name(self):
        code_dir = self.make_code_dir(
            {"handler.js": "exports.handle = () => 'js';\n", "handler.mjs": "export const handle = () => 'mjs';\n"}
        )
        client = self.spawn()
        self.assertEqual(client.load(code_dir, "handler.handle", [code_dir]), {"ok": True})
        self.assertEqual(client.invoke(1).json(), "js")

    def test_dependency_from_a_path_entry(self):
        files = {"vendor/extramod/index.js": 'exports.name = "extra";\n'}
        client = self.start("dep_on_path", files=files, path=("vendor", "."))
        self.assertEqual(client.invoke(1).json(), "extra")

    def test_uncaught_error_in_a_callback_fails_its_invocation(self):
        client = self.start("uncaught_in_callback")
        output = client.invoke(4, request_id="req-late")
        self.assertEqual((output.status, output.json()), (500, {"error": "RangeError: late", "request_id": "req-late"}))
        self.assertIn("late", client.log_text(4, STDERR))


if __name__ == "__main__":
    unittest.main()
