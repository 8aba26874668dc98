# Tests of the Python zygote's request loop in C (runtimes/python/sless_loop.c),
# driven over a socket pair as the server drives the zygote: it forks for a
# request whose template it holds, hands any other back, and answers what it
# cannot serve (too few descriptors, a request cut short) without ending.
# Compiles the loop with the C compiler the server's build uses (cc). Forks
# into a pid namespace of their own: needs root, as the zygote does.
# Run from the repo root: python3 -m unittest discover -s runtimes/tests -p 'test_loop.py' -v

import ctypes
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "..", "python", "sless_loop.c")
KEY = "0123456789abcdef"
MAX_FDS = 16


class Request(ctypes.Structure):
    _fields_ = [("buf", ctypes.c_void_p), ("cap", ctypes.c_int64), ("len", ctypes.c_int64),
                ("fds", ctypes.c_int * MAX_FDS), ("nfds", ctypes.c_int), ("template_index", ctypes.c_int)]


class Table(ctypes.Structure):
    _fields_ = [("count", ctypes.c_int), ("keys", (ctypes.c_char * 16) * 8), ("until_ns", ctypes.c_int64 * 8)]


class RequestLoop(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        library = os.path.join(cls.dir.name, "sless_loop.so")
        subprocess.run(["cc", "-O2", "-Wall", "-shared", "-fPIC", "-o", library, SOURCE], check=True)
        cls.serve = ctypes.CDLL(library, use_errno=True).sless_serve
        cls.serve.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        cls.serve.restype = ctypes.c_int

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def setUp(self):
        self.server, self.zygote = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # A loop waiting for a request that will not come fails (-1), not hangs.
        self.zygote.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 5, 0))
        self.own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self.buf = ctypes.create_string_buffer(1 << 16)
        self.request = Request(buf=ctypes.cast(self.buf, ctypes.c_void_p), cap=1 << 16)
        self.table = Table()

    def tearDown(self):
        for s in (self.server, self.zygote):
            s.close()
        os.close(self.own_pid_ns)

    def hold(self, key, seconds):
        i = self.table.count
        self.table.keys[i].raw = key.encode()
        self.table.until_ns[i] = time.monotonic_ns() + int(seconds * 1e9)
        self.table.count = i + 1

    def send(self, message, count=4):
        """Sends `message` with `count` descriptors (four pipes' write ends
        but the last, a reply pipe's); returns the reply pipe's read end."""
        pipes = [os.pipe() for _ in range(count)]
        socket.send_fds(self.server, [message], [w for _, w in pipes])
        for r, w in pipes[:-1]:
            os.close(r)
            os.close(w)
        reply, w = pipes[-1] if pipes else (None, None)
        if w is not None:
            os.close(w)
        return reply

    def loop(self):
        got = self.serve(self.zygote.fileno(), self.own_pid_ns, ctypes.byref(self.request), ctypes.byref(self.table))
        if got == 0:  # in the fork: tell the test what it got, then end
            os.write(self.request.fds[3], f"fork {os.getpid()} {self.request.template_index} {self.request.len}\n"
                     .encode())
            os._exit(0)
        return got

    def test_a_request_whose_template_it_holds_is_forked_and_the_rest_come_back(self):
        self.hold("ffffffffffffffff", 60)
        self.hold(KEY, 60)
        message = f'{{"template":"{KEY}","uid":1}}'.encode()
        forked = self.send(message)
        other = b'{"template":"aaaaaaaaaaaaaaaa","uid":2}'
        self.send(other)
        # The first is forked (the zygote answers its pid, the fork, pid 1
        # of its own namespace, what it got); the second comes back.
        self.assertEqual(self.loop(), 1)
        self.assertEqual(ctypes.string_at(self.buf, self.request.len), other)
        self.assertEqual(self.request.nfds, 4)
        with os.fdopen(forked) as f:
            lines = f.read().splitlines()
        self.assertEqual(len(lines), 2, lines)
        pid_line = next(line for line in lines if line.startswith("pid "))
        self.assertGreater(int(pid_line.split()[1]), 1)
        self.assertIn(f"fork 1 1 {len(message)}", lines)
        # Still in its own pid namespace: the next fork's is a new one.
        self.assertEqual(os.readlink("/proc/self/ns/pid_for_children"), os.readlink("/proc/self/ns/pid"))
        for fd in self.request.fds[:self.request.nfds]:
            os.close(fd)

    def test_a_stale_template_or_no_key_comes_back_to_be_built(self):
        self.hold(KEY, -1)  # to be built again
        for message in (f'{{"template":"{KEY}"}}'.encode(), b'{"uid":1}', b'{"template":"short"}'):
            self.send(message)
            self.assertEqual(self.loop(), 1)
            self.assertEqual(ctypes.string_at(self.buf, self.request.len), message)
            for fd in self.request.fds[:self.request.nfds]:
                os.close(fd)

    def test_bad_requests_are_answered_or_dropped_and_the_loop_goes_on(self):
        self.hold(KEY, 60)
        # Three descriptors: dropped (and said on stderr), none left open.
        open_before = len(os.listdir("/proc/self/fd"))
        os.close(self.send(f'{{"template":"{KEY}"}}'.encode(), count=3))
        # Longer than the buffer: answered on its reply pipe.
        self.request.cap = 64
        cut = self.send(f'{{"template":"{KEY}","pad":"{"x" * 200}"}}'.encode())
        self.server.shutdown(socket.SHUT_WR)
        self.assertEqual(self.loop(), 2)  # the end of the stream
        with os.fdopen(cut) as f:
            self.assertEqual(f.read(), "error: the request was cut short\n")
        self.assertEqual(len(os.listdir("/proc/self/fd")), open_before)


if __name__ == "__main__":
    sys.exit(unittest.main())
