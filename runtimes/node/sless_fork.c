// sless Node zygote's native part (sless_zygote.js): the system calls a
// fork needs to confine itself, which node has no binding for, and the
// fork itself. Loaded by node (process.dlopen) as a Node-API module; it
// uses node's own exports only (Node-API, libuv, and two V8 functions to
// seed a fork's random numbers anew), declared here so that building it
// needs no node headers. Each function throws a JS Error naming the call
// and errno on failure.
//
// Why a fork of node works at all (V8 does not support fork): the zygote
// runs with --single-threaded, so V8 posts no work to its platform's
// threads, which a fork does not have; fork() below first clears V8's
// MADV_DONTFORK on its heap, then the fork re-creates libuv's loop
// (uv_loop_fork) and seeds V8's random numbers anew, as CPython does at
// fork. The fork ends with _exit (exit_now): node's exit path joins the
// threads it does not have.

#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

// Node-API, as node exports it (js_native_api.h, node_api.h).
typedef struct napi_env__ *napi_env;
typedef struct napi_value__ *napi_value;
typedef struct napi_callback_info__ *napi_callback_info;
typedef int napi_status;
typedef napi_value (*napi_callback)(napi_env, napi_callback_info);
#define NAPI_OK 0
#define NAPI_AUTO_LENGTH SIZE_MAX
enum { NAPI_UNDEFINED = 0, NAPI_NULL = 1, NAPI_NUMBER = 3, NAPI_STRING = 4 };
extern napi_status napi_get_cb_info(napi_env, napi_callback_info, size_t *, napi_value *, napi_value *, void **);
extern napi_status napi_typeof(napi_env, napi_value, int *);
extern napi_status napi_get_value_double(napi_env, napi_value, double *);
extern napi_status napi_get_value_string_utf8(napi_env, napi_value, char *, size_t, size_t *);
extern napi_status napi_get_array_length(napi_env, napi_value, uint32_t *);
extern napi_status napi_get_element(napi_env, napi_value, uint32_t, napi_value *);
extern napi_status napi_create_double(napi_env, double, napi_value *);
extern napi_status napi_create_string_utf8(napi_env, const char *, size_t, napi_value *);
extern napi_status napi_create_array_with_length(napi_env, size_t, napi_value *);
extern napi_status napi_set_element(napi_env, napi_value, uint32_t, napi_value);
extern napi_status napi_get_null(napi_env, napi_value *);
extern napi_status napi_create_function(napi_env, const char *, size_t, napi_callback, void *, napi_value *);
extern napi_status napi_set_named_property(napi_env, napi_value, const char *, napi_value);
extern napi_status napi_throw_error(napi_env, const char *, const char *);

// libuv, as node exports it.
typedef struct uv_loop_s uv_loop_t;
extern uv_loop_t *uv_default_loop(void);
extern int uv_loop_fork(uv_loop_t *);

// V8's random number generator of the isolate, which seeds Math.random of
// every context; weak, so a node without them fails the fork, not the load.
extern void *_ZN2v87Isolate10GetCurrentEv(void) __attribute__((weak));
extern void *_ZN2v88internal7Isolate23random_number_generatorEv(void *) __attribute__((weak));
extern void _ZN2v84base21RandomNumberGenerator7SetSeedEl(void *, int64_t) __attribute__((weak));

#define MAX_ARGS 5
#define MAX_PATH 4096
#define MAX_MESSAGE (1 << 16)
#define MAX_FDS 16

static napi_value fail(napi_env env, const char *what) {
  char text[MAX_PATH + 128];
  snprintf(text, sizeof text, "%s: %s", what, strerror(errno));
  napi_throw_error(env, NULL, text);
  return NULL;
}

static napi_value number(napi_env env, double value) {
  napi_value result;
  napi_create_double(env, value, &result);
  return result;
}

static size_t args(napi_env env, napi_callback_info info, napi_value *argv) {
  size_t argc = MAX_ARGS;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  return argc;
}

// Argument i as a double (0 when missing or not a number).
static double arg_number(napi_env env, napi_value *argv, size_t argc, size_t i) {
  double value = 0;
  if (i < argc) napi_get_value_double(env, argv[i], &value);
  return value;
}

// Argument i as a string into buf (NULL for null or undefined).
static const char *arg_string(napi_env env, napi_value *argv, size_t argc, size_t i, char *buf) {
  int type = NAPI_UNDEFINED;
  if (i < argc) napi_typeof(env, argv[i], &type);
  if (type != NAPI_STRING) return NULL;
  size_t length = 0;
  napi_get_value_string_utf8(env, argv[i], buf, MAX_PATH, &length);
  return buf;
}

#define ARGS napi_value argv[MAX_ARGS]; size_t argc = args(env, info, argv)
#define INT(i) ((int)arg_number(env, argv, argc, (i)))

// Clears V8's MADV_DONTFORK on every mapping (V8 sets it on its heap, so a
// fork would run without one), then forks. In the fork: libuv's loop made
// anew (its epoll and wake-up descriptors are the zygote's otherwise) and
// V8's random numbers seeded from the kernel. Returns the pid (0 in the fork).
static int clear_dontfork(void) {
  FILE *maps = fopen("/proc/self/maps", "re");
  if (!maps) return -1;
  char line[512];
  while (fgets(line, sizeof line, maps)) {
    unsigned long start, end;
    if (sscanf(line, "%lx-%lx", &start, &end) == 2) madvise((void *)start, end - start, MADV_DOFORK);
  }
  fclose(maps);
  return 0;
}

// The zygote's descriptors as it forks (noted just before each fork, so
// the fork has the list): its own and those of its other libuv loops (a
// platform thread's, say), whose threads a fork does not have, and which
// uv_loop_fork does not make anew. Pipes among them are the zygote's own:
// a fork that wrote into one stopped the zygote, which reads them as root.
// A confined fork severs what it still holds of them (SeverInherited).
// The first 1024 descriptors are looked at (about 0.1 ms a fork): the
// zygote holds some 25, and what it inherited at a high number.
#define MAX_NOTED 1024
static struct {
  int fd;
  dev_t dev;
  ino_t ino;
} noted[MAX_NOTED];
static int noted_count;

static void note_descriptors(void) {
  struct stat st;
  noted_count = 0;
  for (int fd = 0; fd < MAX_NOTED; fd++) {
    if (fstat(fd, &st) != 0) continue;
    noted[noted_count].fd = fd;
    noted[noted_count].dev = st.st_dev;
    noted[noted_count].ino = st.st_ino;
    noted_count++;
  }
}

// In the fork, once confined: every pipe, socket or file that is still the
// zygote's (the object noted at the fork, not one made since: the signal
// lock libuv made anew, the frame pipes), but those in `keep` (an array),
// is closed: nothing of the fork's uses them (the loops they served have no
// thread here), and a new node holds none of them. Epolls and eventfds
// went before the fork's loop was made anew (become_fork). Returns how
// many were closed.
static napi_value SeverInherited(napi_env env, napi_callback_info info) {
  ARGS;
  int keep[MAX_FDS];
  uint32_t nkeep = 0;
  if (argc > 0) napi_get_array_length(env, argv[0], &nkeep);
  if (nkeep > MAX_FDS) nkeep = MAX_FDS;
  for (uint32_t i = 0; i < nkeep; i++) {
    napi_value fd;
    double value = -1;
    napi_get_element(env, argv[0], i, &fd);
    napi_get_value_double(env, fd, &value);
    keep[i] = (int)value;
  }
  struct stat st;
  int severed = 0;
  for (int i = 0; i < noted_count; i++) {
    int fd = noted[i].fd, kept = 0;
    for (uint32_t k = 0; k < nkeep; k++) kept |= keep[k] == fd;
    if (kept || fstat(fd, &st) != 0 || st.st_dev != noted[i].dev || st.st_ino != noted[i].ino) continue;
    if (S_ISCHR(st.st_mode)) continue;  // /dev/null: stdin, libuv's reserve
    if ((st.st_mode & S_IFMT) == 0) continue;  // an epoll, an eventfd
    close(fd);
    severed++;
  }
  return number(env, severed);
}

// In the fork: libuv's loop made anew and V8's random numbers seeded from
// the kernel; a fork that cannot ends.
static void become_fork(void) {
  // The zygote's epolls and eventfds (its loops' own: all share one inode,
  // so the ones made below could not be told from them later), closed
  // before uv_loop_fork makes the default loop's anew; the other loops'
  // threads are not here.
  struct stat st;
  for (int i = 0; i < noted_count; i++)
    if (noted[i].fd > 2 && fstat(noted[i].fd, &st) == 0 && (st.st_mode & S_IFMT) == 0) close(noted[i].fd);
  int64_t seed;
  if (uv_loop_fork(uv_default_loop()) != 0 || getrandom(&seed, sizeof seed, 0) != sizeof seed) _exit(70);
  void *rng = _ZN2v88internal7Isolate23random_number_generatorEv(_ZN2v87Isolate10GetCurrentEv());
  _ZN2v84base21RandomNumberGenerator7SetSeedEl(rng, seed);
}

static napi_value Fork(napi_env env, napi_callback_info info) {
  if (!_ZN2v87Isolate10GetCurrentEv || !_ZN2v88internal7Isolate23random_number_generatorEv ||
      !_ZN2v84base21RandomNumberGenerator7SetSeedEl) {
    errno = ENOSYS;
    return fail(env, "this node exports no way to seed a fork's Math.random");
  }
  if (clear_dontfork() != 0) return fail(env, "reading /proc/self/maps");
  note_descriptors();
  pid_t pid = fork();
  if (pid < 0) return fail(env, "fork");
  if (pid == 0) become_fork();
  return number(env, pid);
}

// The zygote's request loop (the Python zygote's sless_loop.c, whose comment
// says why): serveLoop(control, ownPidNs, keys, leftMs) takes requests,
// forks for each whose template (its key first in the request,
// {"template":"KEY", one of `keys`, each good for `leftMs[i]` more
// milliseconds) the zygote holds, and answers "pid N", running no JS and
// so writing no page of the V8 heap between forks; V8's heap does not
// change meanwhile either, so its MADV_DONTFORK is cleared once per call.
// Returns [JSON text, [descriptors], template index, 1] in a fork (made as
// Fork makes one), [JSON text, [descriptors], -1, 0] for a request the
// zygote's JS serves, or null when the server closed the socket.
#define KEY_LEN 16
#define MAX_TEMPLATES 8

static int64_t monotonic_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static napi_value request_value(napi_env env, const char *message, size_t length, const int *fds, int nfds,
                                int index, int forked) {
  napi_value result, text, list;
  napi_create_string_utf8(env, message, length, &text);
  napi_create_array_with_length(env, 0, &list);
  for (int i = 0; i < nfds; i++) napi_set_element(env, list, (uint32_t)i, number(env, fds[i]));
  napi_create_array_with_length(env, 4, &result);
  napi_set_element(env, result, 0, text);
  napi_set_element(env, result, 1, list);
  napi_set_element(env, result, 2, number(env, index));
  napi_set_element(env, result, 3, number(env, forked));
  return result;
}

static napi_value ServeLoop(napi_env env, napi_callback_info info) {
  ARGS;
  int control = INT(0), own_pid_ns = INT(1);
  char keys[MAX_TEMPLATES][KEY_LEN];
  int64_t until[MAX_TEMPLATES];
  uint32_t count = 0, given = 0;
  if (argc > 3) napi_get_array_length(env, argv[2], &given);
  int64_t now = monotonic_ms();
  for (uint32_t i = 0; i < given && count < MAX_TEMPLATES; i++) {
    napi_value key, left;
    char buf[KEY_LEN + 2];
    size_t length = 0;
    double ms = 0;
    napi_get_element(env, argv[2], i, &key);
    napi_get_element(env, argv[3], i, &left);
    if (napi_get_value_string_utf8(env, key, buf, sizeof buf, &length) != NAPI_OK || length != KEY_LEN) continue;
    napi_get_value_double(env, left, &ms);
    memcpy(keys[count], buf, KEY_LEN);
    until[count++] = now + (int64_t)ms;
  }
  if (!_ZN2v87Isolate10GetCurrentEv || !_ZN2v88internal7Isolate23random_number_generatorEv ||
      !_ZN2v84base21RandomNumberGenerator7SetSeedEl) {
    errno = ENOSYS;
    return fail(env, "this node exports no way to seed a fork's Math.random");
  }
  if (clear_dontfork() != 0) return fail(env, "reading /proc/self/maps");
  static char message[MAX_MESSAGE + 1];
  static const char prefix[] = "{\"template\":\"";
  const size_t p = sizeof prefix - 1;
  for (;;) {
    char control_buf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
    struct iovec iov = {message, MAX_MESSAGE};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control_buf,
                         .msg_controllen = sizeof control_buf};
    ssize_t n;
    do n = recvmsg(control, &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0) return fail(env, "reading a fork request");
    int fds[MAX_FDS], nfds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k && nfds < MAX_FDS; i++) memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    }
    if (n == 0 && nfds == 0) {
      napi_value null;
      napi_get_null(env, &null);
      return null;
    }
    if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) message[0] = 0;  // refused as not JSON
    int index = -1;
    if (nfds >= 4 && (size_t)n > p + KEY_LEN && memcmp(message, prefix, p) == 0 && message[p + KEY_LEN] == '"') {
      int64_t at = monotonic_ms();
      for (uint32_t i = 0; i < count; i++)
        if (memcmp(keys[i], message + p, KEY_LEN) == 0 && at < until[i]) index = (int)i;
    }
    if (index < 0) return request_value(env, message, (size_t)n, fds, nfds, -1, 0);
    char text[128];
    // The fork is pid 1 of a pid namespace of its own.
    if (unshare(CLONE_NEWPID) != 0) {
      snprintf(text, sizeof text, "error: unshare: %s\n", strerror(errno));
    } else {
      note_descriptors();
      pid_t pid = fork();
      if (pid == 0) {
        become_fork();
        return request_value(env, message, (size_t)n, fds, nfds, index, 1);
      }
      int fork_errno = errno;
      if (setns(own_pid_ns, CLONE_NEWPID) != 0) return fail(env, "setns");
      if (pid < 0)
        snprintf(text, sizeof text, "error: fork: %s\n", strerror(fork_errno));
      else
        snprintf(text, sizeof text, "pid %d\n", (int)pid);
    }
    ssize_t written = write(fds[3], text, strlen(text));  // the server may have stopped waiting
    (void)written;
    for (int i = 0; i < nfds; i++) close(fds[i]);
  }
}

static napi_value Unshare(napi_env env, napi_callback_info info) {
  ARGS;
  if (unshare(INT(0)) != 0) return fail(env, "unshare");
  return NULL;
}

static napi_value Setns(napi_env env, napi_callback_info info) {
  ARGS;
  if (setns(INT(0), INT(1)) != 0) return fail(env, "setns");
  return NULL;
}

// mount(source, target, fstype, flags, data); source, fstype, data may be null.
static napi_value Mount(napi_env env, napi_callback_info info) {
  ARGS;
  char source[MAX_PATH], target[MAX_PATH], fstype[MAX_PATH], data[MAX_PATH], what[MAX_PATH + 32];
  const char *t = arg_string(env, argv, argc, 1, target);
  if (!t) {
    errno = EINVAL;
    return fail(env, "mount with no target");
  }
  unsigned long flags = (unsigned long)arg_number(env, argv, argc, 3);
  if (mount(arg_string(env, argv, argc, 0, source), t, arg_string(env, argv, argc, 2, fstype), flags,
            arg_string(env, argv, argc, 4, data)) != 0) {
    int saved = errno;
    snprintf(what, sizeof what, "mount on %s", t);
    errno = saved;
    return fail(env, what);
  }
  return NULL;
}

static napi_value Umount2(napi_env env, napi_callback_info info) {
  ARGS;
  char target[MAX_PATH];
  const char *t = arg_string(env, argv, argc, 0, target);
  if (!t || umount2(t, INT(1)) != 0) return fail(env, "umount2");
  return NULL;
}

// open_tree(dirfd, path, flags): a descriptor of a (detached copy of a) mount.
static napi_value OpenTree(napi_env env, napi_callback_info info) {
  ARGS;
  char path[MAX_PATH];
  const char *p = arg_string(env, argv, argc, 1, path);
  long fd = syscall(SYS_open_tree, INT(0), p ? p : "", (unsigned)arg_number(env, argv, argc, 2));
  if (fd < 0) return fail(env, "copying a mount tree");
  return number(env, (double)fd);
}

// move_mount(fd, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH).
static napi_value MoveMount(napi_env env, napi_callback_info info) {
  ARGS;
  char target[MAX_PATH], what[MAX_PATH + 32];
  const char *t = arg_string(env, argv, argc, 1, target);
  if (!t || syscall(SYS_move_mount, INT(0), "", AT_FDCWD, t, 0x4 /* MOVE_MOUNT_F_EMPTY_PATH */) != 0) {
    int saved = errno;
    snprintf(what, sizeof what, "attaching a mount at %s", t ? t : "?");
    errno = saved;
    return fail(env, what);
  }
  return NULL;
}

// pivot_root(".", ".") in the working directory, then the old root detached.
static napi_value PivotHere(napi_env env, napi_callback_info info) {
  if (syscall(SYS_pivot_root, ".", ".") != 0) return fail(env, "pivot_root");
  if (umount2(".", MNT_DETACH) != 0) return fail(env, "detaching the old root");
  return NULL;
}

static napi_value Prctl(napi_env env, napi_callback_info info) {
  ARGS;
  if (prctl(INT(0), (unsigned long)arg_number(env, argv, argc, 1), 0, 0, 0) != 0) return fail(env, "prctl");
  return NULL;
}

// setrlimit(resource, value) for soft and hard alike; 2^64 - 1 and up: none.
static napi_value Setrlimit(napi_env env, napi_callback_info info) {
  ARGS;
  double value = arg_number(env, argv, argc, 1);
  rlim_t limit = value >= 18446744073709551615.0 ? RLIM_INFINITY : (rlim_t)value;
  struct rlimit both = {limit, limit};
  if (setrlimit(INT(0), &both) != 0) return fail(env, "setrlimit");
  return NULL;
}

static napi_value SchedBatch(napi_env env, napi_callback_info info) {
  struct sched_param param = {0};
  if (sched_setscheduler(0, SCHED_BATCH, &param) != 0) return fail(env, "sched_setscheduler");
  return NULL;
}

// The uid (and the same gid) with no supplementary groups: every capability
// goes with uid 0.
static napi_value DropTo(napi_env env, napi_callback_info info) {
  ARGS;
  uid_t uid = (uid_t)arg_number(env, argv, argc, 0);
  if (syscall(SYS_setgroups, 0, NULL) != 0) return fail(env, "setgroups");
  if (syscall(SYS_setresgid, uid, uid, uid) != 0) return fail(env, "setresgid");
  if (syscall(SYS_setresuid, uid, uid, uid) != 0) return fail(env, "setresuid");
  return NULL;
}

static napi_value Dup2(napi_env env, napi_callback_info info) {
  ARGS;
  if (dup2(INT(0), INT(1)) < 0) return fail(env, "dup2");
  return NULL;
}

static napi_value Close(napi_env env, napi_callback_info info) {
  ARGS;
  close(INT(0));
  return NULL;
}

// The whole text to a descriptor (a reply pipe).
static napi_value WriteAll(napi_env env, napi_callback_info info) {
  ARGS;
  char text[MAX_PATH];
  const char *t = arg_string(env, argv, argc, 1, text);
  for (size_t done = 0, length = t ? strlen(t) : 0; done < length;) {
    ssize_t n = write(INT(0), t + done, length - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(env, "writing a reply");
    done += (size_t)n;
  }
  return NULL;
}

// A pipe, both ends close-on-exec: [read end, write end].
static napi_value Pipe(napi_env env, napi_callback_info info) {
  (void)info;
  int ends[2];
  if (pipe2(ends, O_CLOEXEC) != 0) return fail(env, "pipe2");
  napi_value result;
  napi_create_array_with_length(env, 2, &result);
  napi_set_element(env, result, 0, number(env, ends[0]));
  napi_set_element(env, result, 1, number(env, ends[1]));
  return result;
}

static napi_value Getpid(napi_env env, napi_callback_info info) { return number(env, getpid()); }

// SIGCHLD ignored (the zygote's forks are reaped by the kernel) or default.
static napi_value IgnoreChildren(napi_env env, napi_callback_info info) {
  ARGS;
  signal(SIGCHLD, INT(0) ? SIG_IGN : SIG_DFL);
  return NULL;
}

static napi_value ExitNow(napi_env env, napi_callback_info info) {
  ARGS;
  _exit(INT(0));
}

static void define(napi_env env, napi_value exports, const char *name, napi_callback cb) {
  napi_value fn;
  napi_create_function(env, name, NAPI_AUTO_LENGTH, cb, NULL, &fn);
  napi_set_named_property(env, exports, name, fn);
}

napi_value napi_register_module_v1(napi_env env, napi_value exports) {
  define(env, exports, "fork", Fork);
  define(env, exports, "serveLoop", ServeLoop);
  define(env, exports, "unshare", Unshare);
  define(env, exports, "setns", Setns);
  define(env, exports, "mount", Mount);
  define(env, exports, "umount2", Umount2);
  define(env, exports, "openTree", OpenTree);
  define(env, exports, "moveMount", MoveMount);
  define(env, exports, "pivotHere", PivotHere);
  define(env, exports, "prctl", Prctl);
  define(env, exports, "setrlimit", Setrlimit);
  define(env, exports, "schedBatch", SchedBatch);
  define(env, exports, "dropTo", DropTo);
  define(env, exports, "dup2", Dup2);
  define(env, exports, "close", Close);
  define(env, exports, "writeAll", WriteAll);
  define(env, exports, "getpid", Getpid);
  define(env, exports, "pipe", Pipe);
  define(env, exports, "severInherited", SeverInherited);
  define(env, exports, "ignoreChildren", IgnoreChildren);
  define(env, exports, "exitNow", ExitNow);
  return exports;
}

int32_t node_api_module_get_api_version_v1(void) { return 8; }
