// The Python zygote's request loop, in C (runtimes/python/sless_zygote.py,
// `serve`): it takes a request, forks, answers "pid N" and takes the next,
// without running any Python in the zygote between forks.
//
// Why: every fork write-protects the zygote's pages, which the fork shares,
// so each page the zygote writes afterwards is copied, and the loop in
// Python wrote some 170 pages per request (reference counts of what it
// touched, the objects that parsing the request made, its frames): page
// faults and copies in the zygote for every cold start. Here the zygote
// touches its stack and the request's buffer only. The fork returns to
// Python, which parses the request and confines itself as before.
//
// A request goes this way only when it names a template (its JSON begins
// {"template":"KEY", the server's key of the view's shared part) that the
// zygote holds and has not yet to build again; otherwise sless_serve
// returns the request to Python, which builds the template (or forks
// without one) and goes on.
//
// Loaded by the zygote with ctypes (which releases the interpreter's lock
// while this runs); built by the server's build.rs with the C compiler
// that links it, and written beside the shim.

#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_FDS 16
#define KEY_LEN 16
#define MAX_TEMPLATES 8

struct sless_request {
  char *buf;
  int64_t cap;
  int64_t len;
  int fds[MAX_FDS];
  int nfds;
  // The template the fork copies (an index into sless_templates), -1: none.
  int template_index;
};

struct sless_templates {
  int count;
  char keys[MAX_TEMPLATES][KEY_LEN];
  // CLOCK_MONOTONIC nanoseconds from which a template is built again.
  int64_t until_ns[MAX_TEMPLATES];
};

static void close_all(struct sless_request *req) {
  for (int i = 0; i < req->nfds; i++) close(req->fds[i]);
  req->nfds = 0;
}

// Writes a short reply, as Python's write_quietly: the server may have
// stopped waiting for it.
static void reply(int fd, const char *text) {
  ssize_t n = write(fd, text, strlen(text));
  (void)n;
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// The index of the fresh template the request names, or -1.
static int template_of(const struct sless_request *req, const struct sless_templates *t) {
  static const char prefix[] = "{\"template\":\"";
  size_t p = sizeof prefix - 1;
  if ((size_t)req->len < p + KEY_LEN + 1 || memcmp(req->buf, prefix, p) != 0 || req->buf[p + KEY_LEN] != '"')
    return -1;
  int64_t now = now_ns();
  for (int i = 0; i < t->count && i < MAX_TEMPLATES; i++)
    if (memcmp(t->keys[i], req->buf + p, KEY_LEN) == 0 && now < t->until_ns[i]) return i;
  return -1;
}

// Receives one request into `req`. Returns 1 with a request of 4 or more
// descriptors, 0 at the end of the stream, -1 on an error (errno).
static int receive(int control, struct sless_request *req) {
  union {
    char buf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
    struct cmsghdr align;
  } control_buf;
  for (;;) {
    struct iovec iov = {.iov_base = req->buf, .iov_len = (size_t)req->cap};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control_buf.buf,
                         .msg_controllen = sizeof control_buf.buf};
    ssize_t n = recvmsg(control, &msg, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) return 0;
    req->len = n;
    req->nfds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      int count = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      for (int i = 0; i < count && req->nfds < MAX_FDS; i++)
        memcpy(&req->fds[req->nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    }
    if (req->nfds < 4) {
      dprintf(2, "sless zygote: a request came with %d descriptors, not 4 or more\n", req->nfds);
      close_all(req);
      continue;
    }
    if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
      reply(req->fds[3], "error: the request was cut short\n");
      close_all(req);
      continue;
    }
    return 1;
  }
}

// Serves requests until one needs Python. Returns 0 in a fork (`req` holds
// its request and template), 1 in the zygote with a request for Python to
// serve, 2 at the end of the stream (the server is gone), -1 on an error
// (errno) that ends the zygote.
int sless_serve(int control, int own_pid_ns, struct sless_request *req, const struct sless_templates *t) {
  for (;;) {
    int got = receive(control, req);
    if (got <= 0) return got == 0 ? 2 : -1;
    int index = template_of(req, t);
    if (index < 0) return 1;
    // The fork is pid 1 of a pid namespace of its own.
    if (unshare(CLONE_NEWPID) != 0) {
      char text[128];
      snprintf(text, sizeof text, "error: unshare: %s\n", strerror(errno));
      reply(req->fds[3], text);
      close_all(req);
      continue;
    }
    pid_t pid = fork();
    if (pid == 0) {
      req->template_index = index;
      return 0;
    }
    int fork_errno = errno;
    if (setns(own_pid_ns, CLONE_NEWPID) != 0) return -1;
    char text[128];
    if (pid < 0)
      snprintf(text, sizeof text, "error: fork: %s\n", strerror(fork_errno));
    else
      snprintf(text, sizeof text, "pid %d\n", (int)pid);
    reply(req->fds[3], text);
    close_all(req);
  }
}
