# sless Python zygote: an interpreter that has imported the shim (and so the
# standard-library modules it uses) once, and forks a generic shim per
# instance instead of starting a new interpreter. Each fork confines itself
# before it runs anything else: the instance's control groups, network
# namespace, a pid, mount, ipc, uts and cgroup namespace of its own, the
# mount view the server describes (bubblewrap's, built here with mount(2):
# its shared part copied from a template the zygote built, see Templates),
# rlimits, SCHED_BATCH, then its own uid with no capabilities and no way to
# gain any. Only then does it run the shim's main(), which says HELLO; or,
# when the request names a program ("exec": a Node shim), it becomes that
# program, confined the same way; or, when it gives Python source ("run": a
# build's compile step), it runs that and says "exit N" on its reply pipe.
#
# Started by the server as root, outside any sandbox, in the data dir (its
# arguments name no host path: a fork's /proc/self/cmdline is the zygote's),
# with a SOCK_SEQPACKET socket on fd 0. Each message is one request: a JSON object and its file
# descriptors: the fork's stdin, stdout and stderr, and a reply pipe, then
# the fork's network namespace and detached copies of its scratch binds
# ("netns" and "detached" name their places in the list); its first member
# is the key of its view's template ({"template":"KEY",...), by which the
# request loop in C (sless_loop.c, CLoop) forks without parsing it. On the
# reply pipe the zygote writes "pid N" (the fork's pid on the host), then the
# fork writes "ok" once confined, or "error: ..." and exits. Standard library
# and that loop only; the zygote runs no code but these and the shim's
# imports.

import ctypes
import gc
import json
import os
import platform
import resource
import signal
import socket
import sys
import time
import traceback

# The zygote's own view: a small root of its own in which the host's root is
# at HOST and the shim at SHIM, so modules are imported from the paths the
# instances see them at.
HOST = "/host"
SHIM = "/sless/shim"
NEW_ROOT = "/sless/newroot"
TEMPLATE = "/sless/template"  # where Templates builds one
# What of the host is bound at HOST (with what is mounted below): the
# system files of the view, devices and control groups; and, without what
# is mounted below it, the data dir (the zygote's working directory:
# shims, slots, resolv.conf). Every fork's mount namespace starts as a copy
# of these, so the fewer the cheaper; nothing mounted later on the host
# reaches them (a fork gets its scratch and network namespace as
# descriptors), so that copy does not grow with the instances running.
HOST_PATHS = ("/usr", "/etc", "/dev", "/proc", "/sys/fs/cgroup")
# The most descriptors one request carries (the server's limit too), and
# its most bytes.
MAX_FDS = 16
REQUEST_BYTES = 1 << 16
# The length of a template's key (ForkRequest::template).
KEY_LEN = 16

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}[platform.machine()]
SYS_OPEN_TREE, SYS_MOVE_MOUNT = 428, 429  # the same on every architecture
AT_FDCWD, MOVE_MOUNT_F_EMPTY_PATH = -100, 0x4
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, AT_EMPTY_PATH, AT_RECURSIVE = 1, os.O_CLOEXEC, 0x1000, 0x8000

libc = ctypes.CDLL(None, use_errno=True)
sless_shim = None  # imported by main(), after the zygote entered its own root


def check(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def mount(source, target, fstype, flags, data=None):
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    check(libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
          f"mount {source} on {target}")


def unshare(flags):
    check(libc.unshare(flags), "unshare")


def attach(fd, inside, read_only, root, make_point=True):
    """Attaches a detached copy of a mount (the server's open_tree) at inside."""
    target = root + inside
    if make_point:
        os.makedirs(target, exist_ok=True)
    move_mount(fd, target, f"attaching {inside}")
    os.close(fd)
    if read_only:
        mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def move_mount(fd, target, what):
    check(libc.syscall(SYS_MOVE_MOUNT, fd, b"", AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY_PATH), what)


def copy_tree(fd, path=b""):
    """A detached copy of the mount tree at `path` (relative to fd), with
    every mount below it."""
    flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | (AT_EMPTY_PATH if not path else 0)
    copy = libc.syscall(SYS_OPEN_TREE, fd, path, flags)
    if copy < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"copying the mount tree: {os.strerror(errno)}")
    return copy


def pivot_root(new_root):
    """Makes new_root the root and detaches the old one (pivot_root(".", "."))."""
    os.chdir(new_root)
    check(libc.syscall(SYS_PIVOT_ROOT, b".", b"."), "pivot_root")
    check(libc.umount2(b".", MNT_DETACH), "detaching the old root")
    os.chdir("/")


def prctl(option, value):
    check(libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), f"prctl {option}")


def make_mount_point(path, like):
    """A directory, or an empty file when `like` (a host path) is a file."""
    if os.path.lexists(path):
        return
    if os.path.isdir(like):
        os.makedirs(path, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "a").close()


def bind(host, inside, read_only, root, make_point=True):
    source, target = HOST + host, root + inside
    if make_point:
        make_mount_point(target, source)
    mount(source, target, None, MS_BIND)
    if read_only:
        mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def make_dev(inside, root):
    """A /dev like bubblewrap's --dev: a tmpfs with the harmless devices."""
    dev = root + inside
    os.makedirs(dev, exist_ok=True)
    mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k")
    for node in ("null", "zero", "full", "random", "urandom", "tty"):
        bind(f"/dev/{node}", f"{inside}/{node}", False, root)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{dev}/{name}")
    os.mkdir(f"{dev}/shm")


def remount_ro(inside, root):
    noexec = MS_NOEXEC if inside == "/dev" else 0
    mount(None, root + inside, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | noexec)


def run_mounts(mounts, detached, root, make_points=True, remounted=()):
    """Runs the server's mount operations (the same list bubblewrap is
    given) under `root`. A bind whose host path is in `detached` attaches
    the descriptor given for it instead. Without `make_points` the mount
    points are there already (a template's); a remount of a path in
    `remounted` was done there too."""
    for op in mounts:
        ((kind, args),) = op.items()
        args = args if isinstance(args, list) else [args]
        if kind in ("ro-bind", "bind") and args[0] in detached:
            attach(detached.pop(args[0]), args[1], kind == "ro-bind", root, make_points)
        elif kind == "ro-bind-try":
            if os.path.exists(HOST + args[0]):
                bind(args[0], args[1], True, root, make_points)
        elif kind == "ro-bind":
            bind(args[0], args[1], True, root, make_points)
        elif kind == "bind":
            bind(args[0], args[1], False, root, make_points)
        elif kind == "symlink":
            os.symlink(args[0], root + args[1])
        elif kind == "proc":
            if make_points:
                os.makedirs(root + args[0], exist_ok=True)
            mount("proc", root + args[0], "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        elif kind == "dev":
            make_dev(args[0], root)
        elif kind == "tmpfs":
            if make_points:
                os.makedirs(root + args[0], exist_ok=True)
            mount("tmpfs", root + args[0], "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={args[1]}")
        elif kind == "remount-ro":
            if args[0] not in remounted:
                remount_ro(args[0], root)
        else:
            raise ValueError(f"unknown mount operation {kind!r}")


def build_view(spec, detached, template):
    """The fork's view, made its root: its own copy of the template's tree
    (copied before the fork left the zygote's mount namespace, see
    Templates) with its own mounts on top; or, without a template, every
    operation on a fresh tmpfs."""
    if template is None:
        mount("tmpfs", NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
        run_mounts(spec["mounts"], detached, NEW_ROOT)
    else:
        tree, remounted = template
        move_mount(tree, NEW_ROOT, "attaching the template")
        os.close(tree)
        run_mounts(spec["mounts"][spec["shared"]:], detached, NEW_ROOT, make_points=False, remounted=remounted)
    pivot_root(NEW_ROOT)


class Templates:
    """The part of the view every fork has alike (the first `shared`
    mount operations of a request: the system files, /dev), built once by
    the zygote instead of by each fork: about thirty mount calls fewer per
    fork. A template is a detached, read-only mount tree (the zygote holds
    its descriptor; it is in no mount namespace, so no fork's copy of the
    zygote's namespace grows with it) holding the mount points of the
    fork's own mounts. A fork copies it (open_tree) while still in the
    zygote's mount namespace, which the kernel requires, attaches the copy
    in its own namespace and mounts its own binds on top: they are in its
    namespace only. The copies share the template's read-only tmpfs root
    and /dev, which hold only mount points, symlinks and the device binds.

    A template is built again after MAX_AGE seconds, so a host file bound
    in it (/etc/hosts, say), replaced on the host, reaches new instances
    within that time. A fork holds its own descriptor of the template it
    copies, so dropping one never races a fork. Where the kernel cannot
    copy a detached tree (before Linux 6.15 or so), every fork builds its
    whole view, as without templates."""

    MAX_AGE = 10.0
    MAX_COUNT = 4  # kinds of request: one per server as the server asks

    def __init__(self):
        # [shared mounts, own shapes, descriptor, remounted, monotonic time built]
        self.built = []
        self.work = True
        # The server's key of a request's template (ForkRequest::template) ->
        # its entry in `built`: what the request loop in C forks by.
        self.keys = {}

    def for_request(self, spec):
        """The template for this request (descriptor, remounted paths), or
        None: the fork builds its whole view."""
        shared = spec.get("shared") or 0
        if not self.work or shared <= 0:
            return None
        mounts = spec["mounts"]
        detached = {host for host, _ in spec.get("detached") or []}
        own = [own_shape(op, detached) for op in mounts[shared:]]
        if None in own:
            return None
        now = time.monotonic()
        for entry in self.built:
            if entry[1] == own and entry[0] == mounts[:shared]:
                if now - entry[4] < self.MAX_AGE:
                    self.key(spec, entry)
                    return entry[2], entry[3]
                self.drop(entry)
                break
        while len(self.built) >= self.MAX_COUNT:
            self.drop(self.built[0])
        try:
            tree, remounted = build_template(mounts[:shared], mounts[shared:], detached)
        except OSError as exc:
            sys.stderr.write(f"sless zygote: forks build their whole view, no template: {exc}\n")
            self.work = True
            return None
        entry = [mounts[:shared], own, tree, remounted, now]
        self.built.append(entry)
        self.key(spec, entry)
        return tree, remounted

    def key(self, spec, entry):
        key = spec.get("template")
        if isinstance(key, str) and len(key) == KEY_LEN and key.isascii():
            self.keys[key] = entry

    def drop(self, entry):
        self.built.remove(entry)
        os.close(entry[2])
        for key in [key for key, e in self.keys.items() if e is entry]:
            del self.keys[key]

    def fresh(self):
        """[(key, entry, monotonic time from which it is built again)] of
        the templates the request loop in C may fork with, at most
        MAX_COUNT (its table's size) however many keys name them."""
        return [(key, entry, entry[4] + self.MAX_AGE) for key, entry in self.keys.items()][-CLoop.TEMPLATES:]


def own_shape(op, detached):
    """What of a fork's own mount operation its template depends on (kind,
    inside, attached from a descriptor?); None for one a template cannot
    hold. A bind's mount point is made a directory or a file as its host
    path is when the template is built: the server binds the same kind of
    thing at the same place each time."""
    ((kind, args),) = op.items()
    args = args if isinstance(args, list) else [args]
    if kind in ("proc", "tmpfs", "remount-ro"):
        return [kind, args[0], False]
    if kind in ("bind", "ro-bind"):
        return [kind, args[1], args[0] in detached]
    return None


def build_template(shared, own, detached):
    """Builds the `shared` mounts and the mount points of the fork's `own`
    at TEMPLATE, makes it read-only, and detaches it: (its descriptor, the
    paths it remounted read-only). Checks that a copy of it can be made."""
    mount("tmpfs", TEMPLATE, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    try:
        run_mounts(shared, {}, TEMPLATE)
        mounted_later, remounts = set(), []
        for op in own:
            ((kind, args),) = op.items()
            args = args if isinstance(args, list) else [args]
            if kind in ("bind", "ro-bind"):
                host, inside = args
                if host in detached:
                    os.makedirs(TEMPLATE + inside, exist_ok=True)
                else:
                    make_mount_point(TEMPLATE + inside, HOST + host)
            elif kind == "remount-ro":
                remounts.append(args[0])
                continue
            else:
                inside = args[0]
                os.makedirs(TEMPLATE + inside, exist_ok=True)
            mounted_later.add(inside)
        remounted = frozenset(path for path in remounts if path not in mounted_later)
        for path in remounted:
            remount_ro(path, TEMPLATE)
        tree = copy_tree(AT_FDCWD, TEMPLATE.encode())
    finally:
        check(libc.umount2(TEMPLATE.encode(), MNT_DETACH), "detaching the template")
    try:
        os.close(copy_tree(tree))  # what each fork does: older kernels refuse it
    except OSError:
        os.close(tree)
        raise
    return tree, remounted


def confine(spec, fds, template):
    """Everything an instance runs in, in the order that keeps it safe: the
    control groups and the network namespace while still root on the host,
    then namespaces of its own and the view, then limits, then the uid.
    `fds` are the request's descriptors (the network namespace and the
    detached scratch binds at the places the request names); `template`
    is the zygote's template for the view (its descriptor and the paths
    it remounted read-only), or None."""
    for procs in spec.get("cgroups") or []:
        # Not open(): a text file's layers cost a fork more than the write.
        fd = os.open(HOST + procs, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)
    if spec.get("netns") is not None:
        netns = fds[spec["netns"]]
        check(libc.setns(netns, CLONE_NEWNET), "entering the network namespace")
        os.close(netns)
    if template is not None:
        # Copied while still in the zygote's mount namespace (Templates).
        copy = copy_tree(template[0])
        os.close(template[0])
        template = copy, template[1]
    unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    build_view(spec, {host: fds[i] for host, i in spec.get("detached") or []}, template)
    os.chdir(spec["chdir"])
    limits = spec["limits"]
    for name, value in (("RLIMIT_DATA", limits["data"]), ("RLIMIT_NPROC", limits["nproc"]),
                        ("RLIMIT_CPU", limits["cpu"]), ("RLIMIT_NOFILE", limits["nofile"])):
        resource.setrlimit(getattr(resource, name), (value, value))
    os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    uid = spec.get("uid")
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # every capability goes with uid 0
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    # Leaving root made the process undumpable, which makes its /proc
    # entries root's; it holds nothing of root's, so it may read its own.
    prctl(PR_SET_DUMPABLE, 1)
    os.environ.clear()
    os.environ.update(dict(spec["env"]))


def become_instance(control, fds, spec, template):
    """In the fork: drop everything of the zygote's, confine, then serve."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    control.detach()
    stdin, stdout, stderr, reply = fds[:4]
    try:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if any(fd < 4 for fd in fds[4:] + ([template[0]] if template else [])):
            raise OSError("a request's descriptor landed below 4")
        for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2), (reply, 3)):
            os.dup2(fd, target, inheritable=False)
        os.set_inheritable(0, True), os.set_inheritable(1, True), os.set_inheritable(2, True)
        close_all_but(4, fds[4:] + ([template[0]] if template else []))
        confine(spec, fds, template)
        os.closerange(4, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    except BaseException as exc:  # noqa: BLE001 - the reason goes back to the server
        os.write(3, f"error: {exc}\n".encode(errors="replace"))
        os._exit(1)
    os.write(3, b"ok\n")
    if spec.get("run") is not None:
        run_source(spec["run"])
    os.close(3)
    if spec.get("exec"):
        run_program(spec["exec"], dict(spec["env"]))
    # What a new interpreter running the shim would show.
    sys.argv = [f"{SHIM}/sless_shim.py"]
    sys.modules["sless_zygote"] = sys.modules["__main__"]
    sys.modules["__main__"] = sless_shim
    if spec.get("awaited"):  # a cold start waits for this fork: its LOAD comes next
        sless_shim.REHEARSAL_DELAY = sless_shim.REHEARSAL_DELAY_AWAITED
    # The zygote's objects stay frozen: a collection that walked them would
    # write to every page they share with the zygote and its other forks.
    gc.enable()
    try:
        sless_shim.main()  # it ends the process itself (os._exit) at EOF
    except SystemExit as exc:
        os._exit(exc.code if isinstance(exc.code, int) else 1)
    except BaseException:  # noqa: BLE001 - never back into the zygote's loop
        traceback.print_exc()
    os._exit(1)


def run_source(source):
    """Runs a step of the server's (the request's "run": Python source,
    a build's compile step) as `python -I -c` would, then says on the reply
    pipe (fd 3, which the server reads to its end) how it ended: "exit N".
    Nothing of the function's code is run: the step only compiles it."""
    sys.argv = ["-c"]
    gc.enable()
    code = 0
    try:
        exec(compile(source, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:  # noqa: BLE001 - the reason goes to the build's log
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001, S110 - a closed pipe loses only output
            pass
    write_quietly(3, f"exit {code}\n".encode())
    # The server waits for the ends of these pipes, not for the process to
    # go: its exit unmaps the zygote's address space first.
    os.closerange(0, 4)
    os._exit(0)


def run_program(argv, env):
    """Replaces the confined fork with `argv` (a Node shim): the frame pipes
    on fds 3 and 4, stdin on /dev/null and stdout on stderr, as PROTOCOL.md
    has the Node shim take them, and the signals Python ignores (SIGPIPE,
    SIGXFSZ) back to their defaults, as a new process has them."""
    try:
        for signum in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(signum, signal.SIG_DFL)
        os.dup2(0, 3)
        os.dup2(1, 4)
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(2, 1)
        env.setdefault("PWD", os.getcwd())  # as the shell that starts one elsewhere sets it
        os.execve(argv[0], argv, env)
    except BaseException as exc:  # noqa: BLE001 - the reason goes to the server's log
        os.write(2, f"sless zygote: cannot run {argv[0]}: {exc}\n".encode(errors="replace"))
    os._exit(127)


def close_all_but(low, keep):
    """Closes every descriptor from `low` up that is not in `keep`."""
    for fd in sorted(set(keep)) + [resource.getrlimit(resource.RLIMIT_NOFILE)[1]]:
        if fd > low:
            os.closerange(low, fd)
        low = max(low, fd + 1)


class CLoop:
    """The request loop in C (sless_loop.c, beside the shim): it forks for
    each request whose template the zygote holds, with no Python run in
    the zygote between forks, so the zygote no longer writes (and copies,
    since its forks share them) some 170 pages per fork. A request it
    cannot serve comes back to Python (`serve_one`), as does the end of
    the stream. Without the library, Python serves every request."""

    TEMPLATES = 8  # the size of its table (MAX_TEMPLATES)

    class Request(ctypes.Structure):
        _fields_ = [("buf", ctypes.c_void_p), ("cap", ctypes.c_int64), ("len", ctypes.c_int64),
                    ("fds", ctypes.c_int * MAX_FDS), ("nfds", ctypes.c_int), ("template_index", ctypes.c_int)]

    class Table(ctypes.Structure):
        _fields_ = [("count", ctypes.c_int), ("keys", (ctypes.c_char * KEY_LEN) * 8),
                    ("until_ns", ctypes.c_int64 * 8)]

    @classmethod
    def load(cls):
        try:
            lib = ctypes.CDLL(f"{SHIM}/sless_loop.so", use_errno=True)
            after_fork = ctypes.pythonapi.PyOS_AfterFork_Child
        except (OSError, AttributeError) as exc:
            sys.stderr.write(f"sless zygote: forking from Python: {exc}\n")
            return None
        return cls(lib, after_fork)

    def __init__(self, lib, after_fork):
        self.serve_c = lib.sless_serve
        self.serve_c.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        self.serve_c.restype = ctypes.c_int
        self.after_fork = after_fork
        self.after_fork.argtypes, self.after_fork.restype = [], None
        self.buf = ctypes.create_string_buffer(REQUEST_BYTES)
        self.request = self.Request(buf=ctypes.cast(self.buf, ctypes.c_void_p), cap=REQUEST_BYTES)
        self.table = self.Table()

    def serve(self, control, own_pid_ns, templates):
        """Serves requests in C until one needs Python: (message, fds); None
        at the end of the stream. In a fork, never returns."""
        fresh = templates.fresh()
        self.table.count = len(fresh)
        for i, (key, _, until) in enumerate(fresh):
            self.table.keys[i].raw = key.encode()
            self.table.until_ns[i] = int(until * 1e9)
        got = self.serve_c(control.fileno(), own_pid_ns, ctypes.byref(self.request), ctypes.byref(self.table))
        if got == 2:
            return None
        if got < 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"the zygote's request loop: {os.strerror(errno)}")
        request = self.request
        message, fds = ctypes.string_at(self.buf, request.len), list(request.fds[:request.nfds])
        if got == 1:
            return message, fds
        # The fork: what os.fork() does in a child first (the interpreter's
        # lock and threads made anew, random seeds drawn anew, ...).
        self.after_fork()
        try:
            spec = json.loads(message)
            _, entry, _ = fresh[request.template_index]
            template = entry[2], entry[3]
        except BaseException as exc:  # noqa: BLE001 - the reason goes back to the server
            write_quietly(fds[3], f"error: {exc}\n".encode(errors="replace"))
            os._exit(1)
        become_instance(control, fds, spec, template)


def serve(control):
    templates = Templates()
    own_pid_ns = os.open(f"{HOST}/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    loop = CLoop.load()
    while True:
        if loop is not None:
            got = loop.serve(control, own_pid_ns, templates)
            if got is None:
                return  # the server is gone
            message, fds = got
        else:
            try:
                message, fds, _, _ = socket.recv_fds(control, REQUEST_BYTES, MAX_FDS)
            except InterruptedError:
                continue
            if not message:
                return  # the server is gone
            if len(fds) < 4:
                for fd in fds:
                    os.close(fd)
                sys.stderr.write(f"sless zygote: a request came with {len(fds)} descriptors, not 4 or more\n")
                continue
        serve_one(control, templates, own_pid_ns, message, fds)


def serve_one(control, templates, own_pid_ns, message, fds):
    """Forks for one request (in Python: see CLoop for the usual way)."""
    reply = fds[3]
    try:
        spec = json.loads(message)
        template = templates.for_request(spec)
        # The next child is pid 1 of a pid namespace of its own.
        unshare(CLONE_NEWPID)
        try:
            pid = os.fork()
        finally:
            if os.getpid() != 1:
                setns_fd(own_pid_ns, CLONE_NEWPID)
        if pid == 0:
            become_instance(control, fds, spec, template)
        write_quietly(reply, f"pid {pid}\n".encode())
    except Exception as exc:  # noqa: BLE001
        write_quietly(reply, f"error: {exc}\n".encode(errors="replace"))
    finally:
        for fd in fds:
            os.close(fd)


def write_quietly(fd, data):
    """A reply the server may have stopped waiting for (its end closed)
    must not end the zygote."""
    try:
        os.write(fd, data)
    except OSError:
        pass


def setns_fd(fd, nstype):
    check(libc.setns(fd, nstype), "returning to the zygote's pid namespace")


def enter_own_root(shim_dir, base, data_dir):
    """A mount namespace whose root holds /usr (for the interpreter),
    the shim at SHIM and HOST_PATHS and `data_dir` under HOST; `base` is
    an empty directory of the server's to build it on. Private: nothing
    the host mounts later propagates in, so its mount table (which every
    fork copies) stays as it is now."""
    unshare(CLONE_NEWNS)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", base, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for path in HOST_PATHS + (data_dir,):
        if os.path.exists(path):
            make_mount_point(base + HOST + path, path)
            # The data dir without the scratch mounts already below it.
            recursive = MS_REC if path != data_dir else 0
            mount(path, base + HOST + path, None, MS_BIND | recursive)
    for link in ("usr", "etc", "dev", "proc", "sys"):
        os.symlink(f"{HOST[1:]}/{link}", f"{base}/{link}")
    for link in ("bin", "lib", "lib64", "sbin"):
        os.symlink(f"usr/{link}", f"{base}/{link}")
    os.makedirs(base + SHIM)
    os.makedirs(base + NEW_ROOT)
    os.makedirs(base + TEMPLATE)
    mount(shim_dir, base + SHIM, None, MS_BIND)
    mount(None, base + SHIM, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    pivot_root(base)


def write_rehearsal(shim_dir):
    """The module a fork's rehearsal imports (sless_shim.rehearsal_module),
    with its bytecode as a Python build makes it (unchecked hash), written
    as new files: another server's zygote may be importing the old ones."""
    import py_compile

    path = os.path.join(shim_dir, sless_shim.REHEARSAL_MODULE + ".py")
    with open(f"{path}.{os.getpid()}", "w") as f:
        f.write(sless_shim.REHEARSAL_SOURCE)
    os.replace(f"{path}.{os.getpid()}", path)
    py_compile.compile(path, dfile=f"{SHIM}/{sless_shim.REHEARSAL_MODULE}.py", doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)


def warm_up():
    """Runs once here what every instance runs first (an event loop, JSON
    both ways, compiling and inspecting a handler), so that the caches and
    lazily made objects this fills are the zygote's, shared by every fork,
    rather than written anew into each fork's copy of its pages. Nothing
    of it stays open: the loop is closed and no event loop is set."""
    import asyncio
    import inspect

    loop = asyncio.new_event_loop()
    loop.close()
    asyncio.set_event_loop(None)
    json.loads(json.dumps({"a": [1, 2.5, "x", None, True], "b": {"c": "d"}}))
    namespace = {}
    exec(compile("def handle(event, context):\n    return {'hello': 'world'}\n", "handler.py", "exec"), namespace)
    inspect.signature(namespace["handle"])
    inspect.iscoroutinefunction(namespace["handle"])


def main():
    shim_dir = os.path.dirname(os.path.abspath(__file__))
    base = os.path.abspath("zygote")
    # No parent-death signal here: it would follow the server thread that
    # started the zygote, not the server. The zygote ends when its socket
    # does, which is when the server ends, however it ends; its forks have
    # the signal, and it has one thread.
    control = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    enter_own_root(shim_dir, base, os.getcwd())
    globals()["__file__"] = f"{SHIM}/sless_zygote.py"
    sys.path[0] = SHIM
    global sless_shim
    import sless_shim  # the point of the zygote: imported once, before any fork

    try:
        write_rehearsal(HOST + shim_dir)  # the shim dir, writable through the data dir's bind
    except Exception as exc:  # noqa: BLE001 - forks rehearse with a compile instead
        sys.stderr.write(f"sless zygote: no bytecode for the rehearsal: {exc}\n")
    warm_up()
    # Forks are reaped by the kernel; a fork sets SIGCHLD back for its own children.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    # What was imported stays shared with every fork: no collection touches it.
    gc.collect()
    gc.freeze()
    gc.disable()
    serve(control)


if __name__ == "__main__":
    main()
