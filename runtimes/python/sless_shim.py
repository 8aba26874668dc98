# sless Python runtime shim: a warm, generic Python 3.11 interpreter that the
# sless server starts before it knows the function, then loads one handler into
# and serves invocations over length-prefixed frames on stdin/stdout.
# The wire protocol is runtimes/PROTOCOL.md. Standard library only.

# Everything the hot path needs is imported here, before HELLO, so LOAD only
# has to import the user's module.
import asyncio
import binascii
import collections
import contextvars
import fcntl
import importlib
import inspect
import io
import itertools
import json
import mmap
import os
import queue
import select
import socket
import struct
import sys
import _thread
import threading
import time
import traceback
import types
import urllib.parse
from threading import get_ident
from time import monotonic

RUNTIME = "python3.11"
SHIM_VERSION = "1"
STDOUT, STDERR = 1, 2

FRAME_HEAD = struct.Struct(">IcI")  # length of the rest, type, invocation id
U32 = struct.Struct(">I")
JSON_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
JSON_DECODER = json.JSONDecoder()


def _make_encode():
    """JSON_ENCODER.encode without its Python-level layers: CPython's C
    encoder called directly (same output), or the plain method elsewhere."""
    try:
        from _json import encode_basestring_ascii, make_encoder
    except ImportError:
        return JSON_ENCODER.encode
    encoder = make_encoder(None, JSON_ENCODER.default, encode_basestring_ascii, None, ":", ",", False, False, False)
    join = "".join

    def encode(value):
        if isinstance(value, str):
            return encode_basestring_ascii(value)
        return join(encoder(value, 0))

    return encode


json_encode = _make_encode()

JSON_TYPE = "application/json"
# Marks an answer the shim made because the handler failed (the gateway
# hides its text from public callers unless the function exposes errors).
ERROR_HEADER = "x-sless-error"
TEXT_TYPE = "text/plain; charset=utf-8"
BYTES_TYPE = "application/octet-stream"
NOT_SERIALIZABLE = "handler returned a value that is not JSON-serializable: "

# The invocation id that output written in the current context belongs to.
current_invocation = contextvars.ContextVar("sless_invocation", default=0)


class FrameWriter:
    """Writes whole frames to a file: the private copy of fd 1 (or, when
    the shim serves connections, a connection's ConnectionOut). While corked (the
    main thread is working through frames read at once) the main thread's
    frames collect in the buffer and go out together when it uncorks: one
    write, and one wake-up of the server, for the batch; other threads'
    frames go out at once. A watchdog thread writes what a batch holds once
    it has taken WATCHDOG_SECONDS, so a slow handler does not hold back the
    answers computed before it, and calls `on_tick` at each of its ticks."""

    WATCHDOG_SECONDS = 0.005

    def __init__(self, out, main_thread=None):
        self._out = out  # a buffered binary file: write() and flush()
        self._lock = threading.Lock()
        self._corked = 0  # nesting depth
        self._batches = 0  # batches corked so far, for the watchdog
        self._watching = threading.Event()
        self._main_thread = main_thread or threading.get_ident()  # the only thread that corks
        self.can_cork = False  # until the watchdog runs
        self.on_tick = None  # called by the watchdog each tick, outside the lock

    def start_watchdog(self):
        """Starts the watchdog thread; without it nothing is ever held."""
        try:
            start_own_thread(self._watch)
        except RuntimeError as exc:
            sys.__stderr__.write(f"sless shim: cannot start the flush watchdog, writing each frame at once: {exc}\n")
            return
        self.can_cork = True

    def send(self, kind, inv_id, payload):
        head = FRAME_HEAD.pack(len(payload) + 5, kind, inv_id)
        with self._lock:
            self._out.write(head)
            self._out.write(payload)
            if not self._corked or get_ident() != self._main_thread:
                self._out.flush()

    def cork(self):
        """Holds frames until the matching uncork (when the watchdog runs)."""
        with self._lock:
            self._corked += 1
            self._batches += 1
            if not self._watching.is_set():
                self._watching.set()

    def uncork(self):
        with self._lock:
            self._corked -= 1
            if not self._corked:
                self._out.flush()

    def _watch(self):
        seen = -1
        while True:
            self._watching.wait()
            time.sleep(self.WATCHDOG_SECONDS)
            with self._lock:
                if self._batches == seen:
                    if self._corked:
                        self._out.flush()  # one batch for a whole tick: let its answers out
                    else:
                        self._watching.clear()  # no batch for a whole tick: rest
                seen = self._batches
            if self.on_tick is not None:
                self.on_tick()

    @property
    def corked(self):
        return self._corked

    def flush(self):
        """Writes what the buffer holds now (a batch's frames so far)."""
        with self._lock:
            self._out.flush()

    def close(self):
        """Closes the file; no frame is written after (nor while) it does:
        later ones are dropped."""
        with self._lock:
            self._out.close()
            self._out = Discard()

    def send_json(self, kind, value):
        self.send(kind, 0, JSON_ENCODER.encode(value).encode())

    LOG_CHUNK = 64 * 1024  # bytes per LOG frame at most: the server refuses huge frames

    def send_log(self, inv_id, stream, text):
        data = text.encode("utf-8", "replace")
        for at in range(0, len(data), self.LOG_CHUNK):
            self.send(b"G", inv_id, bytes((stream,)) + data[at : at + self.LOG_CHUNK])

    def send_output(self, inv_id, head, body):
        frame_head = FRAME_HEAD.pack(len(head) + len(body) + 5, b"O", inv_id)
        with self._lock:
            self._out.write(frame_head)
            self._out.write(head)
            self._out.write(body)
            if not self._corked or get_ident() != self._main_thread:
                self._out.flush()


class CaptureStream(io.TextIOBase):
    """Stands in for sys.stdout / sys.stderr: what is written becomes LOG
    frames attributed to the invocation of the current context (0 outside
    one), sent line by line (a partial line waits for its end, a flush, the
    end of the invocation or PARTIAL_LINE_LIMIT characters)."""

    PARTIAL_LINE_LIMIT = 8192
    encoding = "utf-8"
    errors = "replace"

    def __init__(self, frames, stream, fd):
        self._frames = frames
        self._stream = stream
        self._fd = fd
        self._partial = {}  # invocation id -> text after its last newline
        self._lock = threading.Lock()

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        inv_id = current_invocation.get()
        with self._lock:
            pending = self._partial.pop(inv_id, "") + text
            cut = len(pending) if len(pending) >= self.PARTIAL_LINE_LIMIT else pending.rfind("\n") + 1
            if cut < len(pending):
                self._partial[inv_id] = pending[cut:]
            if cut:
                self._frames.send_log(inv_id, self._stream, pending[:cut])
        return len(text)

    def flush(self):
        self.flush_invocation(current_invocation.get())

    def flush_invocation(self, inv_id):
        if inv_id not in self._partial:  # nothing pending (only this invocation adds to its own entry)
            return
        with self._lock:
            pending = self._partial.pop(inv_id, "")
            if pending:
                self._frames.send_log(inv_id, self._stream, pending)

    def writable(self):
        return True

    def isatty(self):
        return False

    def fileno(self):
        return self._fd


class Context(dict):
    """The handler's `context`: fields readable as attributes or as keys.
    Made with dict's own constructor (no Python-level __init__: this is on
    every call's path); `_deadline_ms` is set after."""

    __slots__ = ("_deadline_ms",)

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def remaining_time_ms(self):
        if self._deadline_ms is None:
            return float("inf")
        return max(0, int(self._deadline_ms - time.time() * 1000))

    # Lambda's name for it, as Node's context has getRemainingTimeInMillis.
    get_remaining_time_in_millis = remaining_time_ms

    # Lambda's names for the fields handlers ported from it read; class
    # attributes, so no call pays for them. `memory_limit_in_mb` (a string,
    # as Lambda's) is set at LOAD.
    aws_request_id = property(lambda self: self["request_id"])
    function_name = property(lambda self: self["function"])
    function_version = property(lambda self: str(self["version"]))
    memory_limit_in_mb = None
    client_context = None
    identity = None


class HandlerThreads:
    """Up to `limit` threads for sync calls that overlap the main thread's,
    started when no thread is idle: concurrent.futures.ThreadPoolExecutor
    without a Future per call."""

    def __init__(self, limit):
        self._jobs = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._limit = limit
        self._started = 0

    def submit(self, job, args):
        self._jobs.put((job, args))
        if not self._idle.acquire(blocking=False) and self._started < self._limit:
            self._start_thread()

    def take_waiting(self):
        """A call that waits for a thread (when no more could be started), or None."""
        if self._jobs.empty():  # the usual case, asked each time the main thread is idle: no exception
            return None
        try:
            return self._jobs.get_nowait()
        except queue.Empty:  # a thread took it meanwhile
            return None

    def _start_thread(self):
        thread = threading.Thread(target=self._work, name=f"sless-handler-{self._started}", daemon=True)
        try:
            thread.start()
        except RuntimeError as exc:  # e.g. the process limit: queued calls wait for a running thread
            sys.__stderr__.write(f"sless shim: cannot start a handler thread: {exc}\n")
            return
        self._started += 1

    def _work(self):
        take = self._jobs.get
        while True:
            job, args = take()
            run(job, args)
            self._idle.release()


class SpareThread:
    """A thread started while the instance idles in the warm pool, parked
    until a cold start gives it its work. `Thread.start()` waits for the new
    thread to run (a switch of the interpreter lock each way), and a fork's
    first thread also makes its C library's arena: about 0.3 ms each on
    this machine, paid between READY and the first call when a sync
    handler's instance starts its loop and standby threads. Given work, a
    spare runs it as a thread started for it would (a context of its own,
    the name it was started with)."""

    def __init__(self, name):
        self._work = queue.SimpleQueue()
        if name in OWN_THREADS:
            start_own_thread(self._run)
        else:
            threading.Thread(target=self._run, name=name, daemon=True).start()

    def _run(self):
        target = self._work.get()
        if target is not None:
            target()

    def give(self, target):
        self._work.put(target)

    def release(self):
        self._work.put(None)


# The threads a sync handler's instance starts after READY, by name, made
# ahead by rehearse(); each is taken once, or released once LOAD is answered.
LOOP_THREAD = "sless-loop"
STANDBY_THREAD = "sless-standby-reader"
spare_threads = {}


# The spare threads that run only the shim's own code (no handler's).
OWN_THREADS = frozenset((STANDBY_THREAD,))


def start_own_thread(target):
    """Runs `target`, the shim's own code that never calls a handler, on a
    new thread the `threading` module does not know: a handler listing its
    threads sees its own (and the loop's, which runs its coroutines). Not
    `threading.Thread`: in a fresh fork of the zygote its start runs enough
    of `threading` (a Condition, an Event, the WeakSet of threads) to copy
    about 60 of the zygote's pages, and waits for the new thread to run.
    Measured in a fork, two threads started (run and exited): 0.99 ms and
    139 page faults more than none with `threading.Thread`, 0.47 ms and 37
    with `_thread` (medians of 100). Raises RuntimeError as
    `Thread.start()` does when no thread can be started."""
    _thread.start_new_thread(run_own_thread, (target,))


def run_own_thread(target):
    try:
        target()
    except BaseException:  # a bug of the shim's own: said, never silent
        traceback.print_exc(file=sys.__stderr__)


def start_thread(target, name):
    """Runs `target` on a daemon thread named `name`: a spare one if
    rehearse() made one, else a new one (the shim's own, for OWN_THREADS)."""
    spare = spare_threads.pop(name, None)
    if spare is not None:
        spare.give(target)
    elif name in OWN_THREADS:
        start_own_thread(target)
    else:
        threading.Thread(target=target, name=name, daemon=True).start()


def release_spare_threads():
    """Ends the spare threads nothing took (an async handler, concurrency 1)."""
    while spare_threads:
        spare_threads.popitem()[1].release()


class MainThreadCalls:
    """Serves a sync handler from the main thread, which imported its module
    (as python3 would, and AWS Lambda's runtime does): the main thread reads
    the frames and runs the calls itself, one after another, with no hand-off
    between threads and its answers to the calls of one read sent with one
    write. With `concurrency` above 1 a call must never wait long for a
    running one, however slow: the flush watchdog, at each tick, hands the
    calls the main thread has not started to pool threads when a call has
    waited for it, or the main thread has run the same call, for a whole
    tick (four while the main thread computes: see `tick`); a standby thread (asleep in epoll, armed only while the main
    thread runs that call) reads what arrives meanwhile and hands it to the
    pool too. After such a spill the shim stays THREADED_SECONDS in the mode
    for slow calls: of the calls read at once the first is the main
    thread's and the others go to the pool at once, and the standby is
    armed for every call the main thread runs. Calls that come one at a time
    (each after the answer to the one before) always run on the main thread."""

    THREADED_SECONDS = 1.0
    RUNNING_TICKS = 4

    def __init__(self, reader, frames, workers):
        self.reader = reader
        self.frames = frames
        self.mine = collections.deque()  # calls the main thread runs next
        self.pool = HandlerThreads(workers - 1) if workers > 1 else None
        self.read_lock = threading.Lock()  # one reader of the frame pipe at a time
        self.inline = True  # the main thread runs every call it reads
        self.threaded_until = 0.0  # monotonic time the mode for slow calls ends
        self.busy = False  # the main thread runs a call
        self.queued = 0  # calls put in `mine` so far
        self.taken = 0  # calls taken out of it so far (started or handed to the pool)
        self.seen = (-1, 0)  # (taken, queued) at the watchdog's last tick
        self.held = 0  # ticks in a row a call waited (or the main thread ran one call) for
        self.main_stat = f"/proc/self/task/{threading.get_native_id()}/stat"
        self.running = False  # the standby is armed (reads while the main thread runs a call)
        self.main_thread = threading.get_ident()
        self.epoll = None
        if self.pool is not None:
            self.epoll = select.epoll()
            self.epoll.register(reader.fd, select.EPOLLONESHOT)  # disarmed
            start_thread(self._standby, STANDBY_THREAD)
            if frames.can_cork:
                frames.on_tick = self.tick
            else:  # no watchdog to hand over a slow call's queue: overlapping calls go to the pool at once
                self.inline, self.threaded_until = False, float("inf")

    def submit(self, job, *args):
        """Called by whichever thread reads the frame of the call."""
        if self.pool is None or (
            threading.get_ident() == self.main_thread and (self.inline or not (self.busy or self.mine))
        ):
            self.mine.append((job, args))
            self.queued += 1
        else:
            self.pool.submit(job, args)

    def serve(self):
        reader, mine, pool = self.reader, self.mine, self.pool
        os.set_blocking(reader.fd, False)
        reader.take_frames()  # the frames read with LOAD
        wait_and_read = reader.wait_and_read
        while True:
            if mine:
                self._run_mine()
            elif pool is not None and (waiting := pool.take_waiting()) is not None:
                mine.append(waiting)
                self.queued += 1
            else:
                if not self.inline and time.monotonic() >= self.threaded_until:
                    self.inline = True
                with self.read_lock:
                    wait_and_read()

    def _run_mine(self):
        """Runs the calls read so far, their answers held for one write."""
        mine, frames = self.mine, self.frames
        can_cork = frames.can_cork
        if can_cork:
            frames.cork()
        while mine:
            try:
                job, args = mine.popleft()
            except IndexError:  # the watchdog handed them to the pool
                break
            self.taken += 1
            self.busy = True
            if not self.inline and self.pool is not None:
                self._arm()
            run(job, args)
            self.busy = False
            if self.running:
                self._disarm()
        if can_cork:
            frames.uncork()

    def tick(self):
        """The watchdog's: hands the calls waiting for the main thread to
        the pool, and arms the standby, when one of them has waited, or the
        main thread has run the same call, for a whole tick while the main
        thread waited (for I/O, a lock, a sleep), or for RUNNING_TICKS ticks
        while it ran or was ready to run: on a busy machine a thread that
        computes fast calls may wait that long for a core, and another
        thread would not serve its calls sooner."""
        mine, taken = self.mine, self.taken
        seen_taken, seen_queued = self.seen
        self.seen = (taken, self.queued)
        stuck = self.busy and taken == seen_taken
        if not (stuck or taken < seen_queued):
            self.held = 0
            return
        self.held += 1
        if self.held < self.RUNNING_TICKS and self._main_thread_runs():
            return
        self.held = 0
        self.inline = False
        self.threaded_until = time.monotonic() + self.THREADED_SECONDS
        while True:
            try:
                job, args = mine.popleft()
            except IndexError:
                break
            self.taken += 1
            self.pool.submit(job, args)
        if self.busy and not self.running:
            self._arm()

    def _main_thread_runs(self):
        """Whether the main thread is running or ready to run (state R)."""
        try:
            with open(self.main_stat, "rb") as stat:
                return stat.read().rpartition(b")")[2][:2] == b" R"
        except OSError:
            return False

    def answering(self):
        """The call is about to send its answer: from now on, the main thread
        reads, so the next call of a caller that waits for this answer runs
        on the main thread too."""
        if self.running and threading.get_ident() == self.main_thread:
            self._disarm()

    def _arm(self):
        self.running = True
        self.epoll.modify(self.reader.fd, select.EPOLLIN | select.EPOLLONESHOT)

    def _disarm(self):
        self.running = False
        self.epoll.modify(self.reader.fd, select.EPOLLONESHOT)

    def _standby(self):
        """Reads the frames that arrive while the main thread runs a call."""
        reader, epoll = self.reader, self.epoll
        while True:
            epoll.poll()
            with self.read_lock:
                if not (self.running and self.busy):
                    continue  # the call ended: the main thread reads
                while reader.on_readable():
                    pass
                if self.running:
                    epoll.modify(reader.fd, select.EPOLLIN | select.EPOLLONESHOT)


def no_op():
    pass


def run(job, args):
    try:
        job(*args)
    except Exception:
        traceback.print_exc(file=sys.__stderr__)


class LoadError(Exception):
    """LOAD failed; the message is what READY reports."""


class BadReturn(Exception):
    """The handler's return value cannot be turned into a response."""


class Function:
    """The loaded handler and what every invocation of it needs."""

    def __init__(self, spec, handler):
        self.handler = handler
        self.is_async = inspect.iscoroutinefunction(handler)
        self.arg_count = positional_arity(handler)
        self.name = spec.get("function", "")
        self.namespace = spec.get("namespace", "")
        self.version = spec.get("version")
        if spec.get("memory_mb"):
            Context.memory_limit_in_mb = str(spec["memory_mb"])
        self.max_output = int(spec.get("max_output_bytes") or 0) or None  # the server's response limit
        self.workers = max(1, int(spec.get("concurrency") or 1))


def positional_arity(handler):
    """How many of (event, context) the handler takes: 0, 1 or 2."""
    if (type(handler) is types.FunctionType and "__wrapped__" not in handler.__dict__
            and "__signature__" not in handler.__dict__):
        # What inspect.signature says of a plain function, from its code
        # (it would build a Signature: about 0.1 ms of a cold start).
        code = handler.__code__
        return 2 if code.co_flags & inspect.CO_VARARGS else min(2, code.co_argcount)
    try:
        params = inspect.signature(handler).parameters.values()
    except (TypeError, ValueError):
        return 2
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 2
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return min(2, sum(p.kind in positional for p in params))


IMPORTLIB_DIR = os.path.join(os.path.dirname(importlib.__file__), "")


def is_user_frame(frame):
    name = frame.filename
    return name != __file__ and not name.startswith(("<frozen importlib", IMPORTLIB_DIR))


def format_user_exception(exc):
    """The traceback of exc without the shim's and importlib's own frames."""
    report = traceback.TracebackException.from_exception(exc)
    user_frames = [frame for frame in report.stack if is_user_frame(frame)]
    report.stack = traceback.StackSummary.from_list(user_frames)
    return "".join(report.format())


# The most characters of an exception's message an error answer carries (the
# server keeps 4 KiB of an error), and of a failed LOAD's reason (a
# traceback; the server keeps 64 KiB): a message can be as large as what the
# handler was given, and escaped as JSON it could outgrow the largest frame.
MAX_ERROR_CHARS = 4096
MAX_LOAD_ERROR_CHARS = 64 * 1024


def clip(text, most):
    return text if len(text) <= most else text[:most] + " [... cut]"


def describe_exception(exc):
    message = clip(str(exc), MAX_ERROR_CHARS)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def load_function(spec):
    """Applies LOAD (env, cwd, module path) and resolves the entrypoint."""
    os.environ.update({str(k): str(v) for k, v in (spec.get("env") or {}).items()})
    code_dir = spec["code_dir"]
    os.chdir(code_dir)
    sys.path[:0] = spec.get("path") or [code_dir]
    entrypoint = spec.get("entrypoint", "")
    module_name, _, attr = entrypoint.rpartition(".")
    if not module_name or not attr:
        raise LoadError(f"entrypoint {entrypoint!r} must look like 'module.function'")
    # "src/app.handle" names module src.app, as Lambda's Python runtime reads it.
    module_name = module_name.replace("/", ".")
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:
        raise LoadError(f"cannot import module {module_name!r}:\n{format_user_exception(exc)}")
    try:
        handler = getattr(module, attr)
    except AttributeError:
        raise LoadError(f"module {module_name!r} has no function {attr!r} {defined_functions(module)}") from None
    if not callable(handler):
        raise LoadError(f"{entrypoint!r} is not callable (it is {type(handler).__name__})")
    return Function(spec, handler)


def defined_functions(module):
    """What a module defines, for a load error naming a function it lacks."""
    names = [
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and callable(value) and getattr(value, "__module__", None) == module.__name__
    ]
    if not names:
        return "(it defines no function)"
    return f"(it defines: {', '.join(names[:10])})"


def decode_header(text):
    """The INVOKE header: the server's compact JSON object, read by the C
    scanner directly (no whitespace to skip)."""
    try:
        header, end = JSON_DECODER.scan_once(text, 0)
    except StopIteration:
        raise ValueError("header is not JSON") from None
    if end != len(text) or not isinstance(header, dict):
        raise ValueError("header is not one JSON object")
    return header


def parse_http_event(text):
    if not text:
        return {}
    try:
        return JSON_DECODER.decode(text)
    except (ValueError, RecursionError):  # nested past the parser's depth: text, as Node has it
        return text


def build_call(function, header, body):
    """The (event, context) arguments for one INVOKE, cut to the handler's arity."""
    get = header.get
    kind = get("kind") or "http"
    text = body.decode("utf-8", "replace")
    if function.arg_count == 0:
        return ()
    event = parse_http_event(text) if kind == "http" else get("event")
    if function.arg_count == 1:
        return (event,)
    raw_query = get("query") or ""
    context = Context(
        trigger=kind,
        request_id=get("request_id", ""),
        function=function.name,
        namespace=function.namespace,
        version=function.version,
        method=get("method") or "",
        path=get("path") or "",
        query=dict(urllib.parse.parse_qsl(raw_query, keep_blank_values=True)) if raw_query else {},
        raw_query=raw_query,
        headers=get("headers") or {},
        body=text,
        raw_body=body,
    )
    context._deadline_ms = get("deadline_ms")
    return (event, context)


def output_head(status, headers):
    """The OUTPUT payload up to the body: u32 length and header JSON."""
    head = JSON_ENCODER.encode({"status": status, "headers": headers}).encode()
    return U32.pack(len(head)) + head


JSON_200_HEAD = output_head(200, {"content-type": JSON_TYPE})


def to_json(value):
    try:
        return json_encode(value).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise BadReturn(NOT_SERIALIZABLE + str(exc)) from None


def header_value(value):
    return value if isinstance(value, str) else to_json(value).decode()


def full_response(result):
    """(head, body) for a return value with an integer statusCode."""
    status = result["statusCode"]
    if not 100 <= status <= 599:
        raise BadReturn(f"handler returned an invalid statusCode: {status}")
    headers = result.get("headers") or {}
    if not isinstance(headers, dict):
        raise BadReturn("handler returned 'headers' that is not an object")
    headers = {str(name): header_value(value) for name, value in headers.items() if value is not None}
    multi = result.get("multiValueHeaders")
    if multi is not None:
        if not isinstance(multi, dict) or not all(isinstance(values, list) for values in multi.values()):
            raise BadReturn("handler returned 'multiValueHeaders' that is not an object of lists")
        for name, values in multi.items():
            set_values(headers, str(name), [header_value(v) for v in values if v is not None], replace=True)
    cookies = result.get("cookies")
    if cookies is not None:
        if not isinstance(cookies, list):
            raise BadReturn("handler returned 'cookies' that is not a list")
        set_values(headers, "set-cookie", [header_value(c) for c in cookies if c is not None], replace=False)
    body = result.get("body")
    if body is None:
        payload, content_type = b"", None
    elif isinstance(body, str) and result.get("isBase64Encoded") is True:
        payload, content_type = from_base64(body), BYTES_TYPE
    elif isinstance(body, str):
        payload, content_type = body.encode("utf-8", "replace"), TEXT_TYPE
    elif isinstance(body, (bytes, bytearray, memoryview)):
        payload, content_type = bytes(body), BYTES_TYPE
    else:
        payload, content_type = to_json(body), JSON_TYPE
    if content_type and not any(name.lower() == "content-type" for name in headers):
        headers["content-type"] = content_type
    return output_head(status, headers), payload


def set_values(headers, name, values, replace):
    """Lambda's other ways to give headers: `multiValueHeaders` (REST
    APIs: a header per value, in place of the same name in `headers`) and
    `cookies` (function URLs, HTTP APIs: a Set-Cookie each, besides those
    in `headers`). A name's value becomes a list: a header per value."""
    key = next((k for k in headers if k.lower() == name.lower()), name)
    before = [] if replace or key not in headers else headers[key]
    headers[key] = (before if isinstance(before, list) else [before]) + values


NOT_BASE64 = "handler returned isBase64Encoded with a body that is not base64 (standard alphabet, padded)"


def from_base64(text):
    """The bytes of a body a handler gave as base64 (`isBase64Encoded`, as
    Lambda's proxy integrations take binary answers): standard alphabet
    with its padding; whitespace (a MIME encoder's line breaks) skipped."""
    try:
        return binascii.a2b_base64("".join(text.split()), strict_mode=True)
    except ValueError:  # binascii.Error, and text that is not ASCII
        raise BadReturn(NOT_BASE64) from None


# Return types that are never awaitable: no coroutine check for them.
PLAIN_RESULTS = frozenset((dict, list, str, int, float, bool, type(None)))


def to_response(result):
    if isinstance(result, dict) and type(result.get("statusCode")) is int:
        return full_response(result)
    return JSON_200_HEAD, to_json(result)


def error_response(request_id, message, failed=False):
    """A 500 the shim answers; `failed` (the handler raised, or the call
    never reached it) marks it for the gateway, which hides the message
    from public callers."""
    body = JSON_ENCODER.encode({"error": message, "request_id": request_id}).encode()
    headers = {"content-type": JSON_TYPE, ERROR_HEADER: "1"} if failed else {"content-type": JSON_TYPE}
    return output_head(500, headers), body


class Shim:
    """Handles the frames from the server: one LOAD, then INVOKEs."""

    def __init__(self, frames, streams):
        self.frames = frames
        self.streams = streams
        # The asyncio loop, made at its first use (main_thread_loop): a
        # rehearsal, an async handler's LOAD, a sync handler's first
        # coroutine. A cold start of a sync handler makes none: a loop is
        # about 0.4 ms of its CPU, and it would only read LOAD.
        self.loop = None
        # Whether the loop runs on a thread of its own (a sync handler's,
        # from its first coroutine on: run_loop).
        self.loop_thread = False
        self.loop_lock = threading.Lock()
        self.function = None
        self.tasks = set()
        self.batch_tasks = 0  # tasks running when the current batch began
        # The context variables as the module's import left them; each
        # invocation runs in a copy of it.
        self.base_context = None
        # Set once a sync handler is loaded: the loop then gives the main
        # thread over to it (main() reads this when the loop stops).
        self.hand_over = False
        self.sync_calls = None  # MainThreadCalls, from then on
        self.pipe_reader = None  # the FrameReader of the pipe (main() sets it)
        self.serve = None  # ServeSettings, when LOAD has `serve`
        self.served = None  # the ServeReader once the shim serves connections

    def begin_batch(self):
        """Frames read at once are answered with one write: inline handlers'
        answers within the batch, async ones' first steps on the loop's
        next turn."""
        if self.frames.can_cork:
            self.frames.cork()
            self.batch_tasks = len(self.tasks)

    def end_batch(self):
        if self.frames.can_cork:
            if len(self.tasks) > self.batch_tasks:
                self.loop.call_soon(self.frames.uncork)
            else:
                self.frames.uncork()

    def on_frame(self, kind, inv_id, payload):
        if kind == b"I":
            self.invoke(inv_id, payload)
        elif kind == b"L":
            self.load(payload)
        elif kind == b"D" and self.served is not None:
            self.drain(payload)
        else:
            sys.__stderr__.write(f"sless shim: ignoring frame of type {kind!r}\n")

    def load(self, payload):
        answer = self.try_load(payload)
        if answer["ok"] and self.function.is_async:
            self.loop = main_thread_loop()  # calls run on it from now on
        self.frames.send_json(b"R", answer)
        if answer["ok"] and self.serve is not None:
            self.start_serving()
        if answer["ok"] and not self.function.is_async:
            # Frames after LOAD wait for the main thread's new role.
            self.hand_over = True
        else:
            release_spare_threads()

    def try_load(self, payload):
        """The READY answer to LOAD; output of the module's import is sent first."""
        if self.function is not None:
            return {"ok": False, "error": "a function is already loaded"}
        try:
            spec = json.loads(payload)
            if spec.get("serve") is not None:
                self.serve = ServeSettings(spec["serve"])
            self.function = load_function(spec)
            self.base_context = contextvars.copy_context()
        except LoadError as exc:
            return {"ok": False, "error": clip(str(exc), MAX_LOAD_ERROR_CHARS)}
        except Exception as exc:
            return {"ok": False, "error": f"bad LOAD: {describe_exception(exc)}"}
        finally:
            self.flush_output(0)
        return {"ok": True}

    def start_serving(self):
        """After READY: connections are accepted and served from now on
        (their calls' frames routed to them), next to the pipe."""
        serve = self.serve
        frames = RoutedFrames(self.frames, serve.timeout_ms)
        self.frames.flush()  # READY goes out before the first HELLO
        self.frames = frames
        for stream in self.streams:
            stream._frames = frames
        if self.function.is_async:
            self.served = ServeReader(self.pipe_reader, serve, self, frames, self.begin_batch, self.end_batch)
            self.loop.remove_reader(self.pipe_reader.fd)
            self.loop.add_reader(self.served.fd, self.served.on_readable)
        else:  # MainThreadCalls corks as it runs the calls
            self.served = ServeReader(self.pipe_reader, serve, self, frames, no_op, no_op)
        frames.start_watch()

    def drain(self, payload):
        try:
            quiet_ms = json.loads(payload)["quiet_ms"]
            self.frames.drain(float(quiet_ms))
        except (ValueError, TypeError, KeyError) as exc:
            sys.__stderr__.write(f"sless shim: ignoring a bad DRAIN frame: {describe_exception(exc)}\n")

    def invoke(self, inv_id, payload):
        request_id = ""
        try:
            header_len = U32.unpack_from(payload)[0]
            header = decode_header(payload[4 : 4 + header_len].decode())
            request_id = header.get("request_id", "")
            args = build_call(self.function, header, payload[4 + header_len :])
        except Exception as exc:
            message = "no function loaded" if self.function is None else f"bad INVOKE: {exc}"
            self.frames.send_output(inv_id, *error_response(request_id, message, failed=True))
            return
        function = self.function
        # Each invocation runs in a context of its own: the output capture
        # knows whose output it is, and context variables a handler sets do
        # not leak into the next call.
        context = self.base_context.copy()
        context.run(current_invocation.set, inv_id)
        if function.is_async:
            task = self.loop.create_task(self.serve_async(inv_id, request_id, args), context=context)
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        else:
            self.sync_calls.submit(context.run, self.serve_sync, inv_id, request_id, args)

    async def serve_async(self, inv_id, request_id, args):
        try:
            result = await self.function.handler(*args)
        except BaseException as exc:
            self.reply_error(inv_id, request_id, exc)
            return
        self.reply(inv_id, request_id, result)

    def serve_sync(self, inv_id, request_id, args):
        """Runs a sync handler on the main thread (or, for a call that
        overlaps it, a pool thread); a returned coroutine is awaited on the
        loop, which then runs on a thread of its own."""
        try:
            result = self.function.handler(*args)
            # asyncio (3.11) takes a generator for an old-style coroutine too.
            if type(result) not in PLAIN_RESULTS and asyncio.iscoroutine(result) and not inspect.isgenerator(result):
                self.run_loop()
                result = asyncio.run_coroutine_threadsafe(result, self.loop).result()
        except BaseException as exc:
            self.reply_error(inv_id, request_id, exc)
            return
        self.reply(inv_id, request_id, result)

    def run_loop(self):
        """Runs the loop on a thread of its own, once a sync handler needs
        it: most never return a coroutine, and a thread costs a cold start
        about 0.2 ms of CPU."""
        with self.loop_lock:
            if self.loop_thread:
                return
            self.loop_thread = True
            if self.loop is None:
                self.loop = asyncio.new_event_loop()

        def run():
            asyncio.set_event_loop(self.loop)
            self.loop.run_forever()

        start_thread(run, LOOP_THREAD)

    def flush_output(self, inv_id):
        for stream in self.streams:
            if stream._partial:  # only then can this invocation have output pending
                stream.flush_invocation(inv_id)

    def reply(self, inv_id, request_id, result):
        try:
            if type(result) is dict and type(result.get("statusCode")) is not int:
                # The common answer, a plain object, without to_response's calls.
                try:
                    response = JSON_200_HEAD, json_encode(result).encode()
                except (TypeError, ValueError, RecursionError) as exc:
                    raise BadReturn(NOT_SERIALIZABLE + str(exc)) from None
            else:
                response = to_response(result)
        except BadReturn as exc:
            response = error_response(request_id, str(exc))
        limit = self.function.max_output
        if limit is not None and len(response[1]) > limit:
            message = f"handler returned a response body of {len(response[1])} bytes, more than the limit of {limit}"
            response = error_response(request_id, message)
        for stream in self.streams:
            if stream._partial:  # only then can this invocation have output pending
                stream.flush_invocation(inv_id)
        if self.sync_calls is not None:
            self.sync_calls.answering()
        self.frames.send_output(inv_id, *response)

    def reply_error(self, inv_id, request_id, exc):
        self.flush_output(inv_id)
        self.frames.send_log(inv_id, STDERR, format_user_exception(exc))
        if self.sync_calls is not None:
            self.sync_calls.answering()
        self.frames.send_output(inv_id, *error_response(request_id, describe_exception(exc), failed=True))


def lazy_buffer(size):
    """`size` zero bytes, writable, whose pages the kernel provides as they
    are first written: a bytearray writes them all when made (64 page
    faults for 256 KiB, about 0.1 ms of a cold start), most never used."""
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)


class FrameReader:
    """Reads the server's frames into one reused buffer whenever the pipe is
    readable (asyncio's pipe transport would allocate a fresh 256 KiB bytes
    object per read) and hands each whole frame on; exits at EOF."""

    def __init__(self, fd, on_frame, on_batch_start, on_batch_end, size=256 * 1024):
        self.fd = fd
        self.on_frame = on_frame
        self.on_batch_start = on_batch_start  # before the first frame of a read
        self.on_batch_end = on_batch_end  # after its last
        self.buffer = lazy_buffer(size)
        self.start = 0  # first unconsumed byte
        self.end = 0  # end of the bytes read
        self.poller = None  # wait_and_read's, made at its first wait

    def wait_and_read(self, timeout_ms=None):
        """Waits for frames (the fd is non-blocking) and reads them: the
        wait for LOAD and MainThreadCalls'. False if none came within
        `timeout_ms`."""
        if self.poller is None:
            self.poller = select.poll()
            self.poller.register(self.fd, select.POLLIN)
        if not self.poller.poll(timeout_ms):
            return False
        self.on_readable()
        return True

    def on_readable(self):
        if self.end == len(self.buffer):
            self._make_room(1)
        try:
            with memoryview(self.buffer) as view:
                n = os.readv(self.fd, [view[self.end :]])
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            self.at_end()
            return False
        if n == 0:
            self.at_end()
            return False
        self.end += n
        self.take_frames()
        return True

    def take_frames(self):
        """Hands on the whole frames read so far (until pause() says stop)."""
        buffer, offset, end = self.buffer, self.start, self.end
        in_batch = False
        try:
            while end - offset >= 9:
                size, kind, inv_id = FRAME_HEAD.unpack_from(buffer, offset)
                if end - offset - 4 < size:
                    missing = 4 + size - (end - offset)
                    if len(buffer) - end < missing:
                        self._make_room(missing)
                    break
                payload = bytes(buffer[offset + 9 : offset + 4 + size])
                offset += 4 + size
                self.start = offset
                if not in_batch:
                    in_batch = True
                    self.on_batch_start()
                self.on_frame(kind, inv_id, payload)
                if self.pause():
                    break
        finally:
            if in_batch:
                self.on_batch_end()
        if self.start == self.end:
            self.start = self.end = 0

    def pause(self):
        """Whether to leave the frames after the current one for later."""
        return False

    def at_end(self):
        """The other end closed (or failed): for the server's pipe, the
        shim exits at once (PROTOCOL.md, Ending)."""
        os._exit(0)

    def _make_room(self, missing):
        """Moves the unconsumed bytes to the front, growing the buffer when
        the frame being read is larger than it."""
        pending = self.buffer[self.start : self.end]
        size = len(self.buffer)
        while size - len(pending) < missing:
            size *= 2
        if size != len(self.buffer):
            self.buffer = lazy_buffer(size)
        self.buffer[: len(pending)] = pending
        self.start, self.end = 0, len(pending)


# Serving the gateways' connections (LOAD "serve", PROTOCOL.md): the shim
# accepts them on the listening socket `sless instance` gives it and answers
# each call on the connection it came from, next to the pipes.

# Calls read from a connection get ids from here up inside the shim: above
# every id of the pipe's u32 frames, so `current_invocation` and the output
# capture tell them apart from the server's calls with one comparison.
CONNECTION_IDS = 1 << 32
# How long a write to a connection may wait for its peer to read, in all:
# past it the connection counts as dead (closed, its frames dropped), so a
# gateway that stops reading holds up the shim's other calls this long at
# most.
CONNECTION_SEND_SECONDS = 10.0
# How often the serve watch looks for calls past their timeout and for the
# end of a drain.
SERVE_WATCH_SECONDS = 0.02
# How often the serve watch tells `sless instance` (a K frame on the pipe)
# that nothing holds the interpreter: a handler in C code that keeps the GIL
# stops the watch too, and `sless instance` ends a shim silent past its
# timeout.
KEEPALIVE_SECONDS = 1.0


class ConnectionOut(io.RawIOBase):
    """The raw file under a connection's buffered writer (written under
    that FrameWriter's lock): one write() per flush of the buffer. The
    socket is non-blocking underneath its timeout, so a write is one
    system call, and sendall's wait for room (within the timeout) comes
    only when the peer is behind; past it, or on an error, the connection
    is shut down (its reader sees the end and closes it) and what is
    written after is dropped."""

    def __init__(self, sock):
        super().__init__()
        self.sock = sock
        self.fd = sock.fileno()
        self.failed = False

    def writable(self):
        return True

    def write(self, data):
        if self.failed:
            return len(data)
        try:
            try:
                sent = os.write(self.fd, data)
            except BlockingIOError:
                sent = 0
            if sent < len(data):
                self.sock.sendall(memoryview(data)[sent:])
        except OSError as exc:
            sys.__stderr__.write(f"sless shim: dropping a connection that takes no frames: {exc}\n")
            self.failed = True
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return len(data)

    def close(self):
        if not self.closed:
            self.sock.close()
        super().close()


class Discard:
    """Where a closed FrameWriter's frames go."""

    def write(self, data):
        pass

    def flush(self):
        pass


class Connection:
    """One gateway's connection: its frames in (a FrameReader on the
    socket) and out (a FrameWriter)."""

    def __init__(self, sock, served):
        self.fd = sock.fileno()
        self.served = served
        self.writer = FrameWriter(io.BufferedWriter(ConnectionOut(sock), 64 * 1024), served.frames.main_thread)
        self.reader = FrameReader(self.fd, self.on_frame, served.batch_start, served.batch_end)
        self.reader.pause = lambda: self.closed
        self.reader.at_end = self.close
        self.closed = False
        self.invoke = served.shim.invoke
        self.open_call = served.frames.open_call

    def on_frame(self, kind, conn_id, payload):
        if kind == b"I":
            self.invoke(self.open_call(self.writer, conn_id), payload)
        else:
            sys.__stderr__.write(f"sless shim: closing a connection that sent a frame of type {kind!r}\n")
            self.close()

    def close(self):
        """Closes the socket (by the thread that reads it, so no read is
        under way); calls still running answer into nothing."""
        if not self.closed:
            self.closed = True
            self.served.forget(self)
            self.writer.close()


class ServeReader:
    """The frames of the pipe and of every connection as one source for
    the loop and MainThreadCalls, which wait for `fd` to be readable: an
    epoll descriptor that is whenever the pipe, the listening socket or a
    connection is. on_readable() accepts what waits, reads what is ready
    and returns whether there was anything; take_frames() is the pipe's."""

    def __init__(self, pipe, serve, shim, frames, batch_start, batch_end):
        self.pipe = pipe
        self.listener = serve.listener
        self.listener_fd = serve.listener.fileno()
        self.hello = serve.hello
        self.shim = shim
        self.frames = frames
        self.batch_start = batch_start  # a connection's reader's, as the pipe's
        self.batch_end = batch_end
        self.connections = {}  # fd -> Connection
        self.epoll = select.epoll()
        self.fd = self.epoll.fileno()
        self.epoll.register(pipe.fd, select.EPOLLIN)
        self.epoll.register(self.listener_fd, select.EPOLLIN)

    def take_frames(self):
        self.pipe.take_frames()

    def on_readable(self, wait=0):
        events = self.epoll.poll(wait)
        for fd, _ in events:
            if fd == self.pipe.fd:
                self.pipe.on_readable()
            elif fd == self.listener_fd:
                self.accept()
            elif (connection := self.connections.get(fd)) is not None:
                connection.reader.on_readable()
        return bool(events)

    def wait_and_read(self):
        """MainThreadCalls' wait for frames and their reading: the epoll
        wait is the wait, one system call less than a poll of `fd` first."""
        self.on_readable(-1)

    def accept(self):
        """Takes every waiting connection (close-on-exec, as accept makes
        them) and sends each its HELLO first."""
        while True:
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. out of descriptors; the peer may have gone
                sys.__stderr__.write(f"sless shim: cannot accept a connection: {exc}\n")
                return
            try:
                if sock.family in (socket.AF_INET, socket.AF_INET6):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(CONNECTION_SEND_SECONDS)  # reads wait for epoll; sends wait this long at most
            except OSError:
                sock.close()
                continue
            connection = Connection(sock, self)
            connection.writer.send(b"H", 0, self.hello)
            self.connections[connection.fd] = connection
            self.epoll.register(connection.fd, select.EPOLLIN)

    def forget(self, connection):
        del self.connections[connection.fd]
        self.epoll.unregister(connection.fd)


class RoutedFrames:
    """FrameWriter's interface when the shim serves connections: a frame
    of a call read from a connection (id from CONNECTION_IDS up) goes to
    that connection with the id it gave, every other frame to the pipe.
    Corking holds the connections' frames with the pipe's, one flush
    watchdog (the pipe's) for all. A thread of its own (`watch`) times the
    connections' calls out and ends a drain."""

    def __init__(self, pipe, timeout_ms):
        self.pipe = pipe
        self.main_thread = threading.get_ident()  # the thread that corks
        self.can_cork = pipe.can_cork
        self.on_tick = None  # the watchdog's tick, as FrameWriter's
        pipe.on_tick = self._tick
        self.held = set()  # connection writers corked with the current batch
        self.batches = 0  # batches corked so far, for the watchdog
        self.seen = -1  # batches at the watchdog's last tick
        # id in the shim -> (connection's writer, connection's id, monotonic
        # time read), until its OUTPUT, oldest first. No lock: an insert and
        # a pop are atomic under the GIL, so an OUTPUT and the watch's
        # timeout never both take one call; the watch retries a look that
        # an insert disturbed.
        self.calls = {}
        self.ids = itertools.count(CONNECTION_IDS + 1)
        self.timeout = timeout_ms / 1000
        reason = f"no answer within {max(1, timeout_ms // 1000)}s; the instance restarts"
        self.timeout_error = JSON_ENCODER.encode({"error": "timeout", "reason": reason}).encode()
        self.last_answer = 0.0  # monotonic time of the last OUTPUT to a connection
        self.drain_from = None  # monotonic time of D, while draining
        self.drain_quiet = 0.0

    def open_call(self, writer, conn_id):
        """The id in the shim of a call read now from the connection that
        `writer` writes to."""
        inv_id = next(self.ids)
        self.calls[inv_id] = (writer, conn_id, monotonic())
        return inv_id

    def _writer(self, writer):
        """`writer`, corked with the pipe's batch when the main thread
        writes during one."""
        if self.pipe._corked and get_ident() == self.main_thread and writer not in self.held:
            writer.cork()
            self.held.add(writer)
        return writer

    def send(self, kind, inv_id, payload):
        if inv_id < CONNECTION_IDS:
            self.pipe.send(kind, inv_id, payload)
        elif (call := self.calls.get(inv_id)) is not None:
            self._writer(call[0]).send(kind, call[1], payload)

    def send_log(self, inv_id, stream, text):
        if inv_id < CONNECTION_IDS:
            self.pipe.send_log(inv_id, stream, text)
        elif (call := self.calls.get(inv_id)) is not None:
            self._writer(call[0]).send_log(call[1], stream, text)

    def send_output(self, inv_id, head, body):
        if inv_id < CONNECTION_IDS:
            self.pipe.send_output(inv_id, head, body)
            return
        call = self.calls.pop(inv_id, None)
        self.last_answer = monotonic()
        if call is not None:  # else timed out already
            self._writer(call[0]).send_output(call[1], head, body)

    def send_json(self, kind, value):
        self.pipe.send_json(kind, value)

    def flush(self):
        self.pipe.flush()

    def cork(self):
        self.pipe.cork()
        self.batches += 1

    def uncork(self):
        self.pipe.uncork()
        if not self.pipe.corked and self.held:
            for writer in self.held:
                writer.uncork()
            self.held.clear()

    def _tick(self):
        """The pipe's watchdog's tick: lets out what the connections' writers
        hold for a batch that has taken a whole tick, as it does the pipe's."""
        if self.batches == self.seen and self.pipe.corked:
            for writer in tuple(self.held):
                writer.flush()
        self.seen = self.batches
        if self.on_tick is not None:
            self.on_tick()

    def drain(self, quiet_ms):
        self.drain_quiet = quiet_ms / 1000
        self.drain_from = monotonic()

    def start_watch(self):
        start_own_thread(self._watch)

    def _watch(self):
        """Every SERVE_WATCH_SECONDS: a call unanswered past the timeout is
        answered with E and the shim exits 1 (a stuck handler cannot be taken
        back); while draining, the shim exits 0 once no connection's call
        has been in flight for the quiet time. Every KEEPALIVE_SECONDS it
        says K on the pipe."""
        said = 0.0
        while True:
            time.sleep(SERVE_WATCH_SECONDS)
            now = monotonic()
            if now - said >= KEEPALIVE_SECONDS:
                self.pipe.send(b"K", 0, b"")
                said = now
            try:
                late = self._take_late_call(now)
            except RuntimeError:  # a call came in while the oldest was looked up
                continue
            if late is not None:
                writer, conn_id, _ = late
                sys.__stderr__.write(f"sless shim: a call got no answer within {self.timeout:g}s; exiting\n")
                writer.send(b"E", conn_id, self.timeout_error)
                self._exit(1)
            drain_from = self.drain_from
            if not self.calls and drain_from is not None:
                if now - max(drain_from, self.last_answer) >= self.drain_quiet:
                    self._exit(0)

    def _take_late_call(self, now):
        """The oldest call, taken out of `calls` (its OUTPUT, should it come
        now, is dropped), when it is past the timeout; else None."""
        oldest = next(iter(self.calls.items()), None)
        if oldest is None or now - oldest[1][2] < self.timeout:
            return None
        return self.calls.pop(oldest[0], None)  # None: answered meanwhile

    def _exit(self, code):
        """Lets out every frame written so far, then ends the process."""
        for writer in tuple(self.held):
            writer.flush()
        self.pipe.flush()
        os._exit(code)


class ServeSettings:
    """LOAD's `serve`, checked before the handler's import (a bad one fails
    the LOAD). The listening socket (serve.fd) moves to a private
    close-on-exec copy, as the frame pipes, before the import can start a
    child process; the handler's fd serve.fd is free afterwards."""

    def __init__(self, serve):
        self.hello = JSON_ENCODER.encode(serve["hello"]).encode()
        self.timeout_ms = int(serve["timeout_ms"])
        if self.timeout_ms <= 0:
            raise ValueError(f"serve.timeout_ms must be positive, not {self.timeout_ms}")
        fd = int(serve["fd"])
        self.listener = socket.socket(fileno=private_copy(fd))
        os.close(fd)
        self.listener.setblocking(False)


def take_over_stdio():
    """Moves the frame pipes to private fds; the handler's fd 0 becomes
    /dev/null and its fd 1 goes to stderr, so stray writes cannot corrupt
    the frame stream. The private fds are close-on-exec (no child process
    gets them) and numbered high, away from the fds a handler opens."""
    frames_in, frames_out = private_copy(0), private_copy(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return frames_in, frames_out


# The first fd tried for the private frame pipes; F_DUPFD takes the lowest
# free one from here, below the usual soft limit of 1024 open files.
PRIVATE_FD_MIN = 700


def private_copy(fd):
    """A close-on-exec copy of fd, numbered from PRIVATE_FD_MIN when the
    open-files limit allows."""
    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, PRIVATE_FD_MIN)
    except OSError:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)


# The handler and the call that `rehearse` runs; the zygote writes the
# handler beside the shim as REHEARSAL_MODULE, with its bytecode.
REHEARSAL_SOURCE = "def handle(event, context):\n    return {'hello': 'world'}\n"
REHEARSAL_MODULE = "sless_rehearsal"
REHEARSAL_HEADER = '{"request_id":"","kind":"http","method":"GET","path":"","query":"","headers":{},"deadline_ms":0}'
# How long after HELLO an instance no LOAD came for rehearses: a cold
# start waiting for it sends LOAD at once, so it is idle in the warm pool.
REHEARSAL_DELAY = 0.005
# The same for a fork the server started while cold starts waited (the
# zygote sets it): its LOAD comes once the server has linked its code and
# fitted its limits, which in a burst (16 cold starts at once on two CPUs)
# often takes more than 5 ms, and a rehearsal then only delays the LOAD
# (it copies the same pages, then also compiles, runs and starts threads
# of its own). Should no cold start take it after all, it rehearses in
# the warm pool a little later.
REHEARSAL_DELAY_AWAITED = 0.25
# Whether this instance has rehearsed (for the shim's tests), and the file
# its rehearsal's handler came from (for the zygote's).
rehearsed = False
rehearsal_file = None


def rehearsal_module():
    """The rehearsal's handler, imported as a LOAD imports one: from the
    bytecode the zygote compiled beside the shim (REHEARSAL_MODULE), by
    the import system's finder, loader and module set-up, so that a real
    LOAD finds their pages copied too; compiled here where there is no such
    module (a shim not forked from the zygote). Leaves no module behind."""
    try:
        module = importlib.import_module(REHEARSAL_MODULE)
    except ImportError:
        namespace = {}
        exec(compile(REHEARSAL_SOURCE, "<sless rehearsal>", "exec"), namespace)
        return namespace
    finally:
        sys.modules.pop(REHEARSAL_MODULE, None)
    return vars(module)


def rehearse(shim):
    """What a LOAD and a first call run (the module finders, compiling and
    inspecting a handler, building its arguments, encoding its answer, an
    async call on the loop), run once on a handler of its own while the
    instance waits in the warm pool, keeping nothing of it. In a fork of
    the zygote each of these first touches copies the zygote's pages it
    writes (the reference counts of the objects it uses); done here, the
    cold start's LOAD and first call find those pages already copied.
    Measured in a fork: LOAD of a hello module 1.4-2.0 ms -> 0.6 ms, its
    first call 90-130 -> 20 us. It writes no frame and leaves no module,
    path entry or task behind, and makes the shim's loop, as a cold start
    of an async handler would. An instance taken at once (a burst) never
    runs it (its LOAD comes first), so a burst pays no extra CPU."""
    for finder in sys.meta_path:
        if hasattr(finder, "find_spec"):
            finder.find_spec("sless_shim", None)
            finder.find_spec("sless_rehearsal_finds_nothing", None)
    namespace = rehearsal_module()
    global rehearsal_file
    rehearsal_file = namespace["handle"].__code__.co_filename
    function = Function(json.loads('{"function":"","concurrency":1}'), namespace["handle"])
    context = contextvars.copy_context().copy()
    args = context.run(build_call, function, decode_header(REHEARSAL_HEADER), b"")
    to_response(function.handler(*args))
    json_encode(function.handler(*args)).encode()

    async def handle(event, context):
        return to_response(function.handler(event, context))

    inspect.iscoroutinefunction(handle)
    shim.loop = loop = main_thread_loop()
    loop.run_until_complete(loop.create_task(handle(*args), context=context))
    for name in (LOOP_THREAD, STANDBY_THREAD):
        spare_threads[name] = SpareThread(name)
    global rehearsed
    rehearsed = True


def main():
    frames_in, frames_out = take_over_stdio()
    frames = FrameWriter(open(frames_out, "wb", buffering=64 * 1024))
    sys.stdout = CaptureStream(frames, STDOUT, 1)
    sys.stderr = CaptureStream(frames, STDERR, 2)
    shim = Shim(frames, (sys.stdout, sys.stderr))
    os.set_blocking(frames_in, False)
    frames.start_watchdog()
    reader = FrameReader(frames_in, shim.on_frame, shim.begin_batch, shim.end_batch)
    reader.pause = lambda: shim.hand_over
    shim.pipe_reader = reader
    frames.send_json(b"H", {"runtime": RUNTIME, "shim_version": SHIM_VERSION, "pid": os.getpid()})
    wait_for_load(shim, reader)
    if shim.hand_over:
        serve_sync_handler(shim, reader)
    else:  # an async handler: its calls run on the loop, for good
        if shim.served is None:
            shim.loop.add_reader(reader.fd, reader.on_readable)
        shim.loop.run_forever()


def wait_for_load(shim, reader):
    """Reads frames (with no event loop) until a function is loaded; if
    none came for REHEARSAL_DELAY, rehearses first."""
    timeout_ms = REHEARSAL_DELAY * 1000
    while shim.function is None:
        if not reader.wait_and_read(timeout_ms):
            if timeout_ms is not None:
                rehearse(shim)
            timeout_ms = None


def main_thread_loop():
    """The main thread's asyncio loop: the one the handler's import made
    (asyncio.get_event_loop() makes one there), else a new one, set as the
    main thread's."""
    loop = loop_made_so_far()
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
    return loop


def loop_made_so_far():
    """The loop asyncio's policy holds for the main thread, without making
    one (3.11's policy keeps it in `_local._loop`)."""
    return getattr(getattr(asyncio.get_event_loop_policy(), "_local", None), "_loop", None)


def serve_sync_handler(shim, reader):
    """The main thread, which imported the handler's module, reads the
    frames and runs the calls from now on (MainThreadCalls); the loop moves
    to a thread of its own, where it awaits what a handler returns as a
    coroutine (started at the first such return, or at once when rehearse()
    made its thread). The main thread has no event loop of its own, as under
    python3, so a handler may call asyncio.run()."""
    reader.pause = lambda: False
    if shim.loop is None:  # the one the handler's import made, if it made one
        shim.loop = loop_made_so_far()
    asyncio.set_event_loop_policy(None)
    if LOOP_THREAD in spare_threads:  # made while idle: free to take now
        shim.run_loop()
    reader.on_batch_start = reader.on_batch_end = no_op  # MainThreadCalls corks as it runs the calls
    if shim.served is not None:  # the connections' frames too
        reader = shim.served
    shim.sync_calls = MainThreadCalls(reader, shim.frames, shim.function.workers)
    release_spare_threads()
    shim.sync_calls.serve()


if __name__ == "__main__":
    main()
