'use strict';
// sless Node zygote: a node that has loaded the shim (and node's modules
// it uses) and run a handler's load and a call once, and forks a generic
// Node shim per instance instead of starting a new node (about 30 ms of
// CPU). The Python zygote's twin (sless_zygote.py, whose requests and
// replies it takes and gives alike): each fork confines itself before it
// runs anything else (control groups, network namespace, a pid, mount,
// ipc, uts and cgroup namespace of its own, the mount view the server
// describes, rlimits, SCHED_BATCH, then its own uid with no capabilities
// and no way to gain any), writes "ok" on its reply pipe, and only then
// runs the shim's main() with its frames on fds 3 and 4, stdin on
// /dev/null and stdout on stderr, as PROTOCOL.md has a Node shim take them.
//
// One per heap size (node --max-heap-size), started by the server as root,
// outside any sandbox, in the data dir (relative arguments: a fork's
// /proc/self/cmdline names no host path), with --single-threaded (V8 then
// gives its platform's threads no work: a fork has none of them), with
// --no-lazy and --no-flush-bytecode (what a fork runs is compiled once,
// here, and kept) and --use-largepages (node's code reaches a fork as a
// few page-table entries; zygote.rs says why each), the control socket
// (SOCK_SEQPACKET) on fd 0 and fds 3 and 4 held on /dev/null, so node's
// own descriptors land above them. The system calls node has no binding
// for are in sless_fork.node (sless_fork.c).
//
// What a fork of node keeps of the zygote, unlike a new node: V8's hash
// seed (one per zygote, as the Python zygote's), its address layout, and
// process.execArgv (the zygote's flags). Its Math.random is seeded anew.

const fs = require('fs');
const net = require('net');
const path = require('path');
const v8 = require('v8');

// The zygote's own view (as the Python zygote's): the host's root at HOST,
// the shim at SHIM.
const HOST = '/host';
const SHIM = '/sless/shim';
const NEW_ROOT = '/sless/newroot';
const TEMPLATE = '/sless/template'; // where Templates builds one
const HOST_PATHS = ['/usr', '/etc', '/dev', '/proc', '/sys/fs/cgroup'];
const CONTROL = 0;
const FRAMES_IN = 3;
const FRAMES_OUT = 4;
// The fork's stdin, stdout, stderr and reply pipe, then the rest (PROTOCOL).
const FORK_STDIO = 4;

const CLONE_NEWNS = 0x00020000;
const CLONE_NEWCGROUP = 0x02000000;
const CLONE_NEWUTS = 0x04000000;
const CLONE_NEWIPC = 0x08000000;
const CLONE_NEWPID = 0x20000000;
const CLONE_NEWNET = 0x40000000;
const MS_RDONLY = 1;
const MS_NOSUID = 2;
const MS_NODEV = 4;
const MS_NOEXEC = 8;
const MS_REMOUNT = 32;
const MS_BIND = 4096;
const MS_REC = 16384;
const MS_PRIVATE = 1 << 18;
const MNT_DETACH = 2;
const PR_SET_PDEATHSIG = 1;
const PR_SET_DUMPABLE = 4;
const PR_SET_NO_NEW_PRIVS = 38;
const SIGKILL = 9;
const AT_FDCWD = -100;
const OPEN_TREE_CLONE = 1;
const OPEN_TREE_CLOEXEC = 0o2000000;
const AT_EMPTY_PATH = 0x1000;
const AT_RECURSIVE = 0x8000;
const RLIMIT = { cpu: 0, data: 2, nproc: 6, nofile: 7 };

const native = require(path.join(__dirname, 'sless_fork.node'));

function makeMountPoint(target, like) {
  if (fs.existsSync(target)) return;
  let isDir = true;
  try {
    isDir = fs.statSync(like).isDirectory();
  } catch {
    // A missing host path: a directory, as the Python zygote makes one.
  }
  if (isDir) {
    fs.mkdirSync(target, { recursive: true });
  } else {
    fs.mkdirSync(path.dirname(target), { recursive: true });
    fs.closeSync(fs.openSync(target, 'a'));
  }
}

function bind(host, inside, readOnly, root, makePoint = true) {
  const source = HOST + host;
  const target = root + inside;
  if (makePoint) makeMountPoint(target, source);
  native.mount(source, target, null, MS_BIND, null);
  if (readOnly) native.mount(null, target, null, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, null);
}

// A detached copy of a mount (the server's open_tree) attached at inside.
function attach(fd, inside, readOnly, root, makePoint = true) {
  const target = root + inside;
  if (makePoint) fs.mkdirSync(target, { recursive: true });
  native.moveMount(fd, target);
  native.close(fd);
  if (readOnly) native.mount(null, target, null, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, null);
}

// A /dev like bubblewrap's --dev: a tmpfs with the harmless devices.
function makeDev(inside, root) {
  const dev = root + inside;
  fs.mkdirSync(dev, { recursive: true });
  native.mount('tmpfs', dev, 'tmpfs', MS_NOSUID | MS_NOEXEC, 'mode=0755,size=64k');
  for (const node of ['null', 'zero', 'full', 'random', 'urandom', 'tty']) bind(`/dev/${node}`, `${inside}/${node}`, false, root);
  for (const [name, target] of [['fd', '/proc/self/fd'], ['stdin', '/proc/self/fd/0'],
    ['stdout', '/proc/self/fd/1'], ['stderr', '/proc/self/fd/2']]) {
    fs.symlinkSync(target, `${dev}/${name}`);
  }
  fs.mkdirSync(`${dev}/shm`);
}

function remountReadOnly(inside, root) {
  const noexec = inside === '/dev' ? MS_NOEXEC : 0;
  native.mount(null, root + inside, null, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | noexec, null);
}

// An operation as [kind, its arguments].
function operation(op) {
  const [[kind, value]] = Object.entries(op);
  return [kind, Array.isArray(value) ? value : [value]];
}

// The server's mount operations (the list bubblewrap is given) under root;
// a bind whose host path is in `detached` attaches the descriptor given.
// Without `makePoints` the mount points are there already (a template's);
// a remount of a path in `remounted` was done there too.
function runMounts(mounts, detached, root, makePoints = true, remounted = new Set()) {
  for (const op of mounts) {
    const [kind, args] = operation(op);
    if ((kind === 'ro-bind' || kind === 'bind') && detached.has(args[0])) {
      attach(detached.get(args[0]), args[1], kind === 'ro-bind', root, makePoints);
      detached.delete(args[0]);
    } else if (kind === 'ro-bind-try') {
      if (fs.existsSync(HOST + args[0])) bind(args[0], args[1], true, root, makePoints);
    } else if (kind === 'ro-bind' || kind === 'bind') {
      bind(args[0], args[1], kind === 'ro-bind', root, makePoints);
    } else if (kind === 'symlink') {
      fs.symlinkSync(args[0], root + args[1]);
    } else if (kind === 'proc') {
      if (makePoints) fs.mkdirSync(root + args[0], { recursive: true });
      native.mount('proc', root + args[0], 'proc', MS_NOSUID | MS_NODEV | MS_NOEXEC, null);
    } else if (kind === 'dev') {
      makeDev(args[0], root);
    } else if (kind === 'tmpfs') {
      if (makePoints) fs.mkdirSync(root + args[0], { recursive: true });
      native.mount('tmpfs', root + args[0], 'tmpfs', MS_NOSUID | MS_NODEV, `mode=1777,size=${Number(args[1])}`);
    } else if (kind === 'remount-ro') {
      if (!remounted.has(args[0])) remountReadOnly(args[0], root);
    } else {
      throw new Error(`unknown mount operation ${JSON.stringify(kind)}`);
    }
  }
}

// A detached copy of the mount tree at `where` (relative to fd), with every
// mount below it.
function copyTree(fd, where = '') {
  return native.openTree(fd, where, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | (where ? 0 : AT_EMPTY_PATH));
}

// The part of the view every fork has alike (the first `shared` mount
// operations), built once as a detached, read-only tree holding the mount
// points of the fork's own mounts, which each fork copies: the Python
// zygote's Templates, whose comment says why and how.
class Templates {
  static MAX_AGE_MS = 10000;
  static MAX_COUNT = 4;
  static LOOP_TABLE = 8; // MAX_TEMPLATES in sless_fork.c

  constructor() {
    // { shared, own, tree, remounted, built }, as JSON for the first two.
    this.built = [];
    this.work = true;
    // The server's key of a request's template (ForkRequest::template) ->
    // its entry in `built`: what the request loop in C forks by.
    this.keys = new Map();
  }

  // [key, entry] of the templates the request loop in C may fork with,
  // at most as many as its table holds.
  fresh() {
    return [...this.keys].slice(-Templates.LOOP_TABLE);
  }

  remember(spec, entry) {
    if (typeof spec.template === 'string' && /^[0-9a-f]{16}$/.test(spec.template)) this.keys.set(spec.template, entry);
  }

  // [descriptor, remounted paths] for this request, or null: the fork
  // builds its whole view.
  forRequest(spec) {
    const shared = spec.shared || 0;
    if (!this.work || shared <= 0) return null;
    const detached = new Set((spec.detached || []).map(([host]) => host));
    const ownOps = spec.mounts.slice(shared);
    const own = ownOps.map((op) => ownShape(op, detached));
    if (own.includes(null)) return null;
    const key = JSON.stringify([spec.mounts.slice(0, shared), own]);
    const now = Date.now();
    const entry = this.built.find((e) => e.key === key);
    if (entry !== undefined) {
      if (now - entry.built < Templates.MAX_AGE_MS) {
        this.remember(spec, entry);
        return [entry.tree, entry.remounted];
      }
      this.drop(entry);
    }
    while (this.built.length >= Templates.MAX_COUNT) this.drop(this.built[0]);
    let made;
    try {
      made = buildTemplate(spec.mounts.slice(0, shared), ownOps, detached);
    } catch (err) {
      writeQuietly(2, `sless node zygote: forks build their whole view, no template: ${err.message}\n`);
      return null;
    }
    const built = { key, tree: made[0], remounted: made[1], built: now };
    this.built.push(built);
    this.remember(spec, built);
    return made;
  }

  drop(entry) {
    this.built.splice(this.built.indexOf(entry), 1);
    native.close(entry.tree);
    for (const [key, e] of [...this.keys]) if (e === entry) this.keys.delete(key);
  }
}

// What of a fork's own mount operation its template depends on; null for
// one a template cannot hold (own_shape of the Python zygote).
function ownShape(op, detached) {
  const [kind, args] = operation(op);
  if (kind === 'proc' || kind === 'tmpfs' || kind === 'remount-ro') return [kind, args[0], false];
  if (kind === 'bind' || kind === 'ro-bind') return [kind, args[1], detached.has(args[0])];
  return null;
}

// Builds the shared mounts and the mount points of the fork's own at
// TEMPLATE, read-only, and detaches it: [its descriptor, the paths it
// remounted read-only]. Checks that a copy of it can be made.
function buildTemplate(shared, own, detached) {
  native.mount('tmpfs', TEMPLATE, 'tmpfs', MS_NOSUID | MS_NODEV, 'mode=0755,size=1m');
  let tree;
  let remounted;
  try {
    runMounts(shared, new Map(), TEMPLATE);
    const mountedLater = new Set();
    const remounts = [];
    for (const op of own) {
      const [kind, args] = operation(op);
      let inside;
      if (kind === 'bind' || kind === 'ro-bind') {
        inside = args[1];
        if (detached.has(args[0])) fs.mkdirSync(TEMPLATE + inside, { recursive: true });
        else makeMountPoint(TEMPLATE + inside, HOST + args[0]);
      } else if (kind === 'remount-ro') {
        remounts.push(args[0]);
        continue;
      } else {
        inside = args[0];
        fs.mkdirSync(TEMPLATE + inside, { recursive: true });
      }
      mountedLater.add(inside);
    }
    remounted = new Set(remounts.filter((p) => !mountedLater.has(p)));
    for (const p of remounted) remountReadOnly(p, TEMPLATE);
    tree = copyTree(AT_FDCWD, TEMPLATE);
  } finally {
    native.umount2(TEMPLATE, MNT_DETACH);
  }
  try {
    native.close(copyTree(tree)); // what each fork does: older kernels refuse it
  } catch (err) {
    native.close(tree);
    throw err;
  }
  return [tree, remounted];
}

// Everything an instance runs in, in the order that keeps it safe (as the
// Python zygote's confine): control groups and network namespace while
// still root on the host, then namespaces of its own and the view, then
// limits, then the uid.
function confine(spec, fds, template) {
  for (const procs of spec.cgroups || []) {
    const fd = fs.openSync(HOST + procs, 'w');
    try {
      fs.writeSync(fd, '0');
    } finally {
      fs.closeSync(fd);
    }
  }
  if (spec.netns !== null && spec.netns !== undefined) {
    native.setns(fds[spec.netns], CLONE_NEWNET);
    native.close(fds[spec.netns]);
  }
  // Copied while still in the zygote's mount namespace (Templates).
  const tree = template === null ? null : copyTree(template[0]);
  if (template !== null) native.close(template[0]);
  native.unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP);
  native.mount(null, '/', null, MS_REC | MS_PRIVATE, null);
  const detached = new Map((spec.detached || []).map(([host, i]) => [host, fds[i]]));
  if (tree === null) {
    native.mount('tmpfs', NEW_ROOT, 'tmpfs', MS_NOSUID | MS_NODEV, 'mode=0755,size=1m');
    runMounts(spec.mounts, detached, NEW_ROOT);
  } else {
    native.moveMount(tree, NEW_ROOT);
    native.close(tree);
    runMounts(spec.mounts.slice(spec.shared), detached, NEW_ROOT, false, template[1]);
  }
  process.chdir(NEW_ROOT);
  native.pivotHere();
  process.chdir(spec.chdir);
  for (const [name, resource] of Object.entries(RLIMIT)) native.setrlimit(resource, spec.limits[name]);
  native.schedBatch();
  if (spec.uid !== null && spec.uid !== undefined) native.dropTo(spec.uid);
  native.prctl(PR_SET_NO_NEW_PRIVS, 1);
  // Leaving root made the process undumpable, which makes its /proc
  // entries root's; it holds nothing of root's, so it may read its own.
  native.prctl(PR_SET_DUMPABLE, 1);
  for (const name of Object.keys(process.env)) delete process.env[name];
  for (const [name, value] of spec.env) process.env[name] = value;
  process.env.PWD ??= process.cwd(); // as the shell that starts node elsewhere sets it
}

// In the fork: drop everything of the zygote's, confine, then serve.
function becomeInstance(control, fds, spec, shim, templates, template, nulls) {
  const [stdin, stdout, stderr, reply] = fds;
  try {
    native.ignoreChildren(0);
    native.prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (fds.some((fd) => fd <= FRAMES_OUT)) throw new Error("a request's descriptor landed below 5");
    native.close(control);
    native.dup2(stdin, FRAMES_IN);
    native.dup2(stdout, FRAMES_OUT);
    native.dup2(stderr, 2);
    native.dup2(stderr, 1);
    for (const fd of [stdin, stdout, stderr]) native.close(fd);
    for (const entry of templates.built) {
      if (template === null || entry.tree !== template[0]) native.close(entry.tree);
    }
    confine(spec, fds, template);
    // Its /dev/null descriptors (stdin, libuv's reserve) opened in its view,
    // as a new node's are: the zygote's are named /host/dev/null there.
    for (const fd of nulls) {
      const devNull = fs.openSync('/dev/null', 'r');
      native.dup2(devNull, fd);
      native.close(devNull);
    }
    // What is left of the request (a namespace or mount it did not use).
    for (const fd of fds.slice(FORK_STDIO)) native.close(fd);
    // Whatever else is still the zygote's (its other libuv loops' pipes,
    // epolls and eventfds): no instance may write into the zygote's pipes,
    // nor share one with another instance.
    native.severInherited([reply]);
  } catch (err) {
    native.writeAll(reply, `error: ${err.message}\n`);
    native.exitNow(1);
  }
  native.writeAll(reply, 'ok\n');
  native.close(reply);
  // What a new node running the shim would show: its own pid, no main
  // module (as one started from a snapshot), no module loaded but node's.
  process.reallyExit = (code) => native.exitNow(code);
  // Compiling is lazy again (serve()); bytecode stays unflushed, so what
  // the zygote compiled stays shared.
  process.execArgv = process.execArgv.filter((arg) => arg !== '--no-lazy');
  Object.defineProperty(process, 'pid', { value: native.getpid(), enumerable: true });
  process.argv = [process.execPath, `${SHIM}/sless_shim.js`];
  process.mainModule = undefined;
  const Module = require('module');
  for (const file of Object.keys(Module._cache)) delete Module._cache[file];
  shim.main(false);
}

// A reply the server may have stopped waiting for (its end closed) must
// not end the zygote.
function writeQuietly(fd, text) {
  try {
    fs.writeSync(fd, text);
  } catch {
    // Nowhere to say it.
  }
}

// The zygote's descriptors on /dev/null a fork keeps (stdin, libuv's
// reserve for running out of descriptors), not the ones it replaces.
function devNulls() {
  return fs.readdirSync('/proc/self/fd').map(Number).filter((fd) => {
    if (fd === 1 || fd === FRAMES_IN || fd === FRAMES_OUT) return false;
    try {
      return fs.readlinkSync(`/proc/self/fd/${fd}`) === `${HOST}/dev/null`;
    } catch {
      return false;
    }
  });
}

function serve(control, shim) {
  // Started with --no-lazy (zygote.rs): what it has loaded is compiled;
  // a handler's module, loaded in a fork, compiles as usual.
  v8.setFlagsFromString('--lazy');
  const templates = new Templates();
  const nulls = devNulls();
  const ownPidNs = fs.openSync(`${HOST}/proc/self/ns/pid`, 'r');
  for (;;) {
    // The request loop in C forks for every request whose template this
    // zygote holds, and hands the rest (and each fork) back here.
    const fresh = templates.fresh();
    const now = Date.now();
    const request = native.serveLoop(
      control,
      ownPidNs,
      fresh.map(([key]) => key),
      fresh.map(([, entry]) => Templates.MAX_AGE_MS - (now - entry.built)),
    );
    if (request === null) native.exitNow(0); // the server is gone
    const [message, fds, index, forked] = request;
    if (forked) {
      try {
        native.close(ownPidNs);
        const entry = fresh[index][1];
        becomeInstance(control, fds, JSON.parse(message), shim, templates, [entry.tree, entry.remounted], nulls);
      } catch (err) {
        writeQuietly(2, `sless node zygote: a fork failed: ${err.stack}\n`);
        native.exitNow(1);
      }
      return; // into node's event loop, as the shim
    }
    if (fds.length < FORK_STDIO) {
      for (const fd of fds) native.close(fd);
      writeQuietly(2, `sless node zygote: a request came with ${fds.length} descriptors, not 4 or more\n`);
      continue;
    }
    const reply = fds[FORK_STDIO - 1];
    try {
      const spec = JSON.parse(message);
      const template = templates.forRequest(spec);
      // The next child is pid 1 of a pid namespace of its own.
      native.unshare(CLONE_NEWPID);
      let pid;
      try {
        pid = native.fork();
      } finally {
        if (native.getpid() !== 1) native.setns(ownPidNs, CLONE_NEWPID);
      }
      if (pid === 0) {
        try {
          native.close(ownPidNs);
          becomeInstance(control, fds, spec, shim, templates, template, nulls);
        } catch (err) {
          // Never back into the zygote's loop (becomeInstance says why
          // on the reply pipe whatever fails before "ok").
          writeQuietly(2, `sless node zygote: a fork failed: ${err.stack}\n`);
          native.exitNow(1);
        }
        return; // into node's event loop, as the shim
      }
      writeQuietly(reply, `pid ${pid}\n`);
    } catch (err) {
      writeQuietly(reply, `error: ${err.message}\n`);
    }
    for (const fd of fds) native.close(fd);
  }
}

// A mount namespace whose root holds /usr, the shim at SHIM and HOST_PATHS
// and the data dir under HOST (enter_own_root of the Python zygote).
function enterOwnRoot(shimDir, base, dataDir) {
  native.unshare(CLONE_NEWNS);
  native.mount(null, '/', null, MS_REC | MS_PRIVATE, null);
  native.mount('tmpfs', base, 'tmpfs', MS_NOSUID | MS_NODEV, 'mode=0755,size=1m');
  for (const host of [...HOST_PATHS, dataDir]) {
    if (!fs.existsSync(host)) continue;
    makeMountPoint(base + HOST + host, host);
    native.mount(host, base + HOST + host, null, MS_BIND | (host === dataDir ? 0 : MS_REC), null);
  }
  for (const link of ['usr', 'etc', 'dev', 'proc', 'sys']) fs.symlinkSync(`${HOST.slice(1)}/${link}`, `${base}/${link}`);
  for (const link of ['bin', 'lib', 'lib64', 'sbin']) fs.symlinkSync(`usr/${link}`, `${base}/${link}`);
  fs.mkdirSync(base + SHIM, { recursive: true });
  fs.mkdirSync(base + NEW_ROOT, { recursive: true });
  fs.mkdirSync(base + TEMPLATE, { recursive: true });
  native.mount(shimDir, base + SHIM, null, MS_BIND, null);
  native.mount(null, base + SHIM, null, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, null);
  process.chdir(base);
  native.pivotHere();
  process.chdir('/');
}

function main() {
  const shimDir = __dirname;
  const dataDir = process.cwd();
  // fd 0 is the control socket; it moves up, fd 0 holds /dev/null.
  const control = fs.openSync('/dev/null', 'r');
  native.dup2(CONTROL, control);
  native.dup2(FRAMES_IN, CONTROL);
  native.dup2(FRAMES_IN, 1);
  makeStdio();
  enterOwnRoot(shimDir, path.join(dataDir, 'zygote'), dataDir);
  const shim = require(`${SHIM}/sless_shim.js`);
  // Once here what every fork runs first, so its compiled code is shared.
  shim.prepare();
  shim.warmUp(SHIM);
  native.ignoreChildren(1);
  // From the event loop, once the warm-up's streams have closed: a fork
  // returns there, to serve.
  warmStreams(() => serve(control, shim));
}

// process.stdout and process.stderr made once here, as sockets on a pipe,
// as a new node's are (the server gives it pipes): a fork has its own pipe
// on fds 1 and 2 and uses them as they are (making process.stdout took a
// fork about 0.4 ms of CPU). The zygote's own fds 1 and 2 are put back.
function makeStdio() {
  const [readEnd, writeEnd] = native.pipe();
  const stderr = fs.openSync('/dev/null', 'r');
  native.dup2(2, stderr);
  native.dup2(writeEnd, 1);
  native.dup2(writeEnd, 2);
  void process.stdout;
  void process.stderr;
  native.dup2(stderr, 2);
  native.dup2(FRAMES_IN, 1);
  for (const fd of [stderr, readEnd, writeEnd]) native.close(fd);
}

// What a fork's main() makes first is sockets on pipes: its stdout and
// stderr, its frames. Made once here over a pipe of the zygote's, a byte
// sent through, both closed, so node's code for them is compiled once for
// every fork (in a C = 16 burst, a fork's main() took about 2.4 ms of CPU
// before). Then `then`, from the event loop.
function warmStreams(then) {
  const [readEnd, writeEnd] = native.pipe();
  const reader = new net.Socket({ fd: readEnd, readable: true, writable: false });
  const writer = new net.Socket({ fd: writeEnd, readable: false, writable: true });
  let open = 2;
  const closed = () => {
    if (--open === 0) setImmediate(then);
  };
  reader.on('close', closed);
  writer.on('close', closed);
  reader.on('data', () => {
    writer.destroy();
    reader.destroy();
  });
  writer.write('warm');
}

main();
