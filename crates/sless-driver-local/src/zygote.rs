//! The Python zygote (`runtimes/python/sless_zygote.py`): one interpreter
//! per server that has imported the shim and its standard-library modules
//! once, and forks a generic shim per instance instead of starting a new
//! interpreter (a fork costs a few milliseconds of CPU, a new interpreter
//! with the shim's imports about seventy).
//!
//! The zygote runs as root outside any sandbox, in a mount namespace of its
//! own whose root holds the shim at `/sless/shim` and the host's root at
//! `/host`. The server makes an instance's [`Confinement`] (uid, control
//! group, network namespace, scratch tmpfs) as for any sandbox, then sends
//! the zygote a [`ForkRequest`]: the confinement, the same mount view that
//! bubblewrap is given ([`Mount`]), the rlimits and the environment, with
//! the fork's stdin, stdout and stderr and a reply pipe. The fork joins the
//! control groups and the network namespace, makes its pid, mount, ipc, uts
//! and cgroup namespaces, builds the view (a copy of the zygote's template
//! of its shared part, see [`ForkRequest::shared`], with its own mounts on
//! top) and pivots into it, sets the
//! rlimits and SCHED_BATCH, closes every descriptor but its stdio, and
//! drops to the instance's uid with no capabilities and `no_new_privs`; it
//! says "ok" on the reply pipe only then, and only then runs the shim.
//!
//! **Invariant:** a fork serves only after it said "ok"; any step that
//! fails is the instance's failed start, as for a bubblewrap sandbox.
//!
//! The Node zygote (`runtimes/node/sless_zygote.js`, one per heap size) is
//! the same for Node shims: a node that loaded the shim, forking; it takes
//! the same requests (with no `exec`) and answers alike.

use std::io::IoSlice;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use serde::Serialize;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;

use super::sandbox::Mount;

/// What a fork is to become (see the module doc).
///
/// Its network namespace and the binds of its scratch tmpfs come as
/// descriptors, not paths: the zygote's own mount namespace receives no
/// mount the server makes after it started (see [`Zygote::new`]), so a
/// fork's copy of it stays small and the same however many instances run.
#[derive(Debug, Serialize)]
pub struct ForkRequest {
    /// The key of the template of its view's shared part (16 hex digits;
    /// `sandbox::template_key`). First, so the zygote finds it without
    /// parsing the request: `{"template":"KEY",...`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    pub uid: Option<u32>,
    /// `cgroup.procs` files the fork joins.
    pub cgroups: Vec<PathBuf>,
    /// The index in `descriptors` of the network namespace it enters (none:
    /// the host's network); counted after the four of its stdio and reply.
    pub netns: Option<usize>,
    pub mounts: Vec<Mount>,
    /// How many of the first `mounts` are the same for every sandbox: the
    /// zygote builds them once, as a template each fork copies.
    pub shared: usize,
    /// Host paths of binds in `mounts` made from a detached copy of that
    /// mount (`open_tree`), with the copy's index in `descriptors`.
    pub detached: Vec<(PathBuf, usize)>,
    /// What `netns` is opened from.
    #[serde(skip)]
    pub netns_path: Option<PathBuf>,
    /// The namespace, then the detached copies, once opened.
    #[serde(skip)]
    pub descriptors: Vec<OwnedFd>,
    pub chdir: String,
    pub limits: ForkLimits,
    pub env: Vec<(String, String)>,
    /// The program (and its arguments) the fork runs once confined, with
    /// its frame pipes on fds 3 and 4 as the Node shim takes them
    /// (PROTOCOL.md); none: the Python shim the zygote imported.
    pub exec: Option<Vec<String>>,
    /// A cold start waits for this shim (it was started while one did): its
    /// LOAD comes as soon as the server has linked and fitted it, so the
    /// Python shim does not rehearse after the usual few milliseconds
    /// (`REHEARSAL_DELAY_AWAITED` in the shim).
    pub awaited: bool,
    /// Python source a fork of the Python zygote runs once confined, in
    /// place of the shim, as `python -I -c` would (a build step:
    /// `builder::PYTHON_COMPILE`), so the step costs a fork instead of a
    /// new interpreter behind bubblewrap. Its reply pipe stays open until
    /// the source has run, and says `exit N` then ([`Zygote::run`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
}

impl ForkRequest {
    /// Opens the descriptors `netns` and `detached` name, in their order.
    /// Copying a mount waits for the kernel's mount lock, which every
    /// mount and unmount of other starts holds: run it off the runtime.
    pub fn open_descriptors(mut self) -> Result<ForkRequest, String> {
        if let Some(path) = &self.netns_path {
            let file = std::fs::File::open(path)
                .map_err(|e| format!("opening the network namespace {}: {e}", path.display()))?;
            self.descriptors.push(OwnedFd::from(file));
        }
        for (path, _) in &self.detached {
            self.descriptors.push(detached_copy(path)?);
        }
        Ok(self)
    }
}

/// A detached copy of the mount at `path` (the directory there and what is
/// below it on that mount), which a process in another mount namespace can
/// attach (`move_mount`) without that namespace holding the original.
fn detached_copy(path: &Path) -> Result<OwnedFd, String> {
    use rustix::mount::{open_tree, OpenTreeFlags};
    open_tree(
        rustix::fs::CWD,
        path,
        OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
    )
    .map_err(|e| format!("copying the mount at {}: {e}", path.display()))
}

/// The rlimits of a fork (soft and hard alike, as `prlimit` sets them).
#[derive(Debug, Serialize)]
pub struct ForkLimits {
    pub data: u64,
    pub nproc: u64,
    pub cpu: u64,
    pub nofile: u64,
}

/// A confined fork, waiting to say HELLO.
pub struct Forked {
    /// Its pid on the host.
    pub pid: u32,
    pub stdin: pipe::Sender,
    pub stdout: pipe::Receiver,
    pub stderr: pipe::Receiver,
}

/// A zygote of this server, started on the first fork and again when it
/// is found dead.
pub struct Zygote {
    /// What it is, for messages ("the Python zygote").
    name: String,
    /// Its program and arguments, which name its file relative to the data dir.
    command: Vec<String>,
    /// The data dir: the zygote starts there and names everything relative
    /// to it (`zygote/`, an empty directory it mounts its own root on in a
    /// mount namespace of its own, so several servers may share it).
    data_dir: PathBuf,
    running: Mutex<Option<Running>>,
    /// A fork of its running process said "ok".
    forked: std::sync::atomic::AtomicBool,
}

/// The server's ends of a fork's pipes.
struct Ends {
    stdin: OwnedFd,
    stdout: OwnedFd,
    stderr: OwnedFd,
    reply: OwnedFd,
}

/// How a fork that ran a request's `run` ended.
#[derive(Debug)]
pub struct Ran {
    /// Its stdout, then its stderr (the last bytes of each, `builder::read_tail`).
    pub output: Vec<u8>,
    /// Its exit code; None if it ended without saying (killed).
    pub exit: Option<i32>,
}

struct Running {
    control: OwnedFd,
    _process: tokio::process::Child,
}

/// The most descriptors one fork request carries (the zygote's limit too).
const MAX_DESCRIPTORS: usize = 16;

/// How long a fork may take to confine itself.
const FORK_TIMEOUT: Duration = Duration::from_secs(20);

impl Zygote {
    /// The zygote's mount namespace is private: nothing the server mounts
    /// later (scratch tmpfs, network namespaces) appears in it, and forks
    /// are handed theirs as descriptors ([`ForkRequest`]).
    pub fn python(python: String, shim_dir: &Path, data_dir: &Path) -> std::io::Result<Zygote> {
        let script = zygote_file(shim_dir, data_dir, "sless_zygote.py")?;
        let command = vec![python, "-u".into(), "-B".into(), script];
        Zygote::new("the Python zygote".into(), command, data_dir)
    }

    /// The Node zygote of Node shims whose heap is `heap_mb`: a shell holds
    /// fds 3 and 4 on /dev/null, so node's own descriptors land above the
    /// ones each fork's frames take, then becomes node. `--no-lazy`: every
    /// function of the zygote, the shim and node's modules they load is
    /// compiled as it loads, so a fork compiles none of what it runs first
    /// (confining itself, main(), a LOAD and a call: 0.85 ms of a fork's
    /// 5.2 ms of CPU in a C = 16 burst); the zygote turns lazy compiling
    /// back on before it serves (sless_zygote.js). `--no-flush-bytecode`:
    /// the zygote never runs most of that code, which V8 would otherwise
    /// drop after a few collections (and a fork dropping it would copy the
    /// pages it shares). `--use-largepages`: node's code, moved to huge
    /// pages of anonymous memory, reaches each fork as a few page-table
    /// entries copied by the fork instead of a few hundred page faults on
    /// node's file (0.3 ms of a fork's CPU); where the kernel has no huge
    /// pages node goes on as it is.
    pub fn node(node: &str, heap_mb: u32, shim_dir: &Path, data_dir: &Path) -> std::io::Result<Zygote> {
        let script = zygote_file(shim_dir, data_dir, "sless_zygote.js")?;
        let command = [
            "/bin/sh",
            "-c",
            "exec 3</dev/null 4</dev/null; exec \"$@\"",
            "sless-node-zygote",
            node,
            &super::launcher::node_heap_flag(heap_mb),
            "--single-threaded",
            "--no-lazy",
            "--no-flush-bytecode",
            "--use-largepages=silent",
            &script,
        ];
        let name = format!("the Node zygote (heap {heap_mb} MB)");
        Zygote::new(name, command.map(str::to_string).to_vec(), data_dir)
    }

    fn new(name: String, command: Vec<String>, data_dir: &Path) -> std::io::Result<Zygote> {
        std::fs::create_dir_all(data_dir.join("zygote"))?;
        Ok(Zygote {
            name,
            command,
            data_dir: data_dir.to_path_buf(),
            running: Mutex::new(None),
            forked: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Whether a fork of its running process confined itself (said "ok").
    pub fn has_forked(&self) -> bool {
        self.forked.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Forks a generic shim confined as `request` says.
    pub async fn fork(&self, request: &ForkRequest) -> Result<Forked, String> {
        let Ends {
            stdin,
            stdout,
            stderr,
            reply,
        } = self.request(request)?;
        let mut reply = pipe::Receiver::from_owned_fd(reply).map_err(|e| e.to_string())?;
        let mut text = String::new();
        tokio::time::timeout(FORK_TIMEOUT, reply.read_to_string(&mut text))
            .await
            .map_err(|_| {
                format!(
                    "the zygote's fork did not confine itself within {}s",
                    FORK_TIMEOUT.as_secs()
                )
            })?
            .map_err(|e| format!("reading the zygote's reply: {e}"))?;
        let answer = parse_reply(&text)?;
        self.forked.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(Forked {
            pid: answer.pid,
            stdin: pipe::Sender::from_owned_fd(stdin).map_err(|e| e.to_string())?,
            stdout: pipe::Receiver::from_owned_fd(stdout).map_err(|e| e.to_string())?,
            stderr: pipe::Receiver::from_owned_fd(stderr).map_err(|e| e.to_string())?,
        })
    }

    /// Runs `request.run` in a fork confined as `request` says, and waits
    /// for its end: what it wrote (stdout, then stderr) and how it ended.
    /// Unbounded in time: the caller bounds it, and a fork left running
    /// ends with its control group.
    pub async fn run(&self, request: &ForkRequest) -> Result<Ran, String> {
        let ends = self.request(request)?;
        drop(ends.stdin); // it reads nothing
        let receiver = |fd| pipe::Receiver::from_owned_fd(fd).map_err(|e| e.to_string());
        let (stdout, stderr, mut reply) = (receiver(ends.stdout)?, receiver(ends.stderr)?, receiver(ends.reply)?);
        let mut text = String::new();
        let (mut output, errors, read) = tokio::join!(
            super::builder::read_tail(stdout),
            super::builder::read_tail(stderr),
            reply.read_to_string(&mut text)
        );
        read.map_err(|e| format!("reading the zygote's reply: {e}"))?;
        let answer = parse_reply(&text)?;
        output.extend(errors);
        Ok(Ran {
            output,
            exit: answer.exit,
        })
    }

    /// Sends `request` with new pipes for the fork's stdio and reply:
    /// the server's ends of them.
    fn request(&self, request: &ForkRequest) -> Result<Ends, String> {
        let message = serde_json::to_vec(request).map_err(|e| e.to_string())?;
        let (stdin_child, stdin) = pipe_pair()?;
        let (stdout, stdout_child) = pipe_pair()?;
        let (stderr, stderr_child) = pipe_pair()?;
        let (reply, reply_child) = pipe_pair()?;
        let mut fds = vec![
            stdin_child.as_fd(),
            stdout_child.as_fd(),
            stderr_child.as_fd(),
            reply_child.as_fd(),
        ];
        fds.extend(request.descriptors.iter().map(|fd| fd.as_fd()));
        if fds.len() > MAX_DESCRIPTORS {
            return Err(format!("a fork request with {} descriptors", fds.len()));
        }
        self.send(&message, &fds)?;
        // The fork holds the only copies of its ends now.
        Ok(Ends {
            stdin,
            stdout,
            stderr,
            reply,
        })
    }

    /// Sends one request, starting the zygote first if it is not running
    /// (or was found dead by a failed send).
    fn send(&self, message: &[u8], fds: &[std::os::fd::BorrowedFd<'_>]) -> Result<(), String> {
        let mut running = self.running.lock().unwrap();
        let mut started = false;
        loop {
            if running.is_none() {
                *running = Some(self.start()?);
                started = true;
                // A new process (node or python may have changed under the
                // server): whether it can fork is to be seen again.
                self.forked.store(false, std::sync::atomic::Ordering::Relaxed);
            }
            let Some(zygote) = running.as_ref() else { continue };
            let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_DESCRIPTORS))];
            let mut ancillary = SendAncillaryBuffer::new(&mut space);
            ancillary.push(SendAncillaryMessage::ScmRights(fds));
            // Never blocks: a zygote that does not read is a failed start,
            // not a stalled server thread.
            let flags = SendFlags::NOSIGNAL | SendFlags::DONTWAIT;
            match rustix::net::sendmsg(&zygote.control, &[IoSlice::new(message)], &mut ancillary, flags) {
                Ok(_) => return Ok(()),
                Err(rustix::io::Errno::AGAIN) => {
                    return Err(format!("{} is not keeping up with fork requests", self.name))
                }
                Err(e) if !started => {
                    tracing::warn!(error = %e, "{} is gone; starting it again", self.name);
                    *running = None;
                }
                Err(e) => return Err(format!("sending a fork request to {}: {e}", self.name)),
            }
        }
    }

    fn start(&self) -> Result<Running, String> {
        use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};
        let (control, theirs) = socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)
            .map_err(|e| format!("making the zygote's socket: {e}"))?;
        let process = tokio::process::Command::new(&self.command[0])
            .args(&self.command[1..])
            .current_dir(&self.data_dir)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("LANG", "C.UTF-8")
            .stdin(std::process::Stdio::from(theirs))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting {} ({}): {e}", self.name, self.command[0]))?;
        tracing::debug!(pid = process.id(), "{} started", self.name);
        Ok(Running {
            control,
            _process: process,
        })
    }
}

/// Makes `dir` a mount point (bound on itself) whose mounts propagate to
/// the mount namespaces copied from this one as slaves (as `ip netns`
/// makes `/run/netns`).
pub(crate) fn shared_mount_point(dir: &Path) -> rustix::io::Result<()> {
    use rustix::mount::{mount_bind, mount_change, MountPropagationFlags};
    let dir = dir.canonicalize().map_err(|_| rustix::io::Errno::NOENT)?;
    let mounted = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .any(|point| Path::new(point) == dir);
    if !mounted {
        mount_bind(&dir, &dir)?;
    }
    mount_change(&dir, MountPropagationFlags::SHARED)
}

/// A zygote's file in the shim dir, relative to the data dir (where the
/// zygote starts).
fn zygote_file(shim_dir: &Path, data_dir: &Path, name: &str) -> std::io::Result<String> {
    let relative = shim_dir
        .strip_prefix(data_dir)
        .map_err(|_| std::io::Error::other("the shims are not in the data dir"))?
        .join(name);
    relative
        .into_os_string()
        .into_string()
        .map_err(|_| std::io::Error::other("the shim dir's path is not UTF-8"))
}

/// A pipe as (read end, write end), both close-on-exec.
fn pipe_pair() -> Result<(OwnedFd, OwnedFd), String> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| format!("making a pipe: {e}"))
}

/// What a fork's reply pipe said.
#[derive(Debug, PartialEq)]
struct Reply {
    /// The fork's pid on the host.
    pid: u32,
    /// How a fork that ran a request's `run` ended (`exit N`).
    exit: Option<i32>,
}

/// The fork's pid ("pid N", from the zygote) once the fork said "ok"; or
/// the error either reported. The two write to one pipe in either order.
fn parse_reply(text: &str) -> Result<Reply, String> {
    let mut pid = None;
    let mut ok = false;
    let mut exit = None;
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("pid ") {
            pid = n.trim().parse::<u32>().ok();
        } else if let Some(error) = line.strip_prefix("error: ") {
            return Err(format!("the zygote's fork failed to confine itself: {error}"));
        } else if line == "ok" {
            ok = true;
        } else if let Some(code) = line.strip_prefix("exit ") {
            exit = code.trim().parse::<i32>().ok();
        }
    }
    match (ok, pid) {
        (true, Some(pid)) => Ok(Reply { pid, exit }),
        (true, None) => Err("the zygote named no pid".to_string()),
        (false, _) => Err(format!(
            "the zygote's fork ended without confining itself ({:?})",
            text.trim()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request loop in C finds the key without parsing the request.
    #[test]
    fn a_request_begins_with_its_template_key() {
        let mut request = ForkRequest {
            template: Some("0123456789abcdef".into()),
            uid: Some(1000),
            cgroups: vec![],
            netns: None,
            mounts: vec![],
            shared: 0,
            detached: vec![],
            netns_path: None,
            descriptors: vec![],
            chdir: "/code".into(),
            limits: ForkLimits {
                data: 1,
                nproc: 1,
                cpu: 1,
                nofile: 1,
            },
            env: vec![],
            exec: None,
            awaited: false,
            run: None,
        };
        let json = serde_json::to_string(&request).unwrap();
        assert!(json.starts_with(r#"{"template":"0123456789abcdef","#), "{json}");
        request.template = None;
        let json = serde_json::to_string(&request).unwrap();
        assert!(json.starts_with(r#"{"uid":1000,"#), "{json}");
    }

    /// Sends `message` with `count` pipes' write ends (the last the reply
    /// pipe) as the server sends a request; the read ends back.
    fn send_raw(zygote: &Zygote, message: &[u8], count: usize) -> Vec<OwnedFd> {
        let pipes: Vec<_> = (0..count).map(|_| pipe_pair().unwrap()).collect();
        let ends: Vec<_> = pipes.iter().map(|(_, w)| w.as_fd()).collect();
        zygote.send(message, &ends).unwrap();
        pipes.into_iter().map(|(r, _)| r).collect()
    }

    /// All a pipe's writers wrote, once none is left.
    async fn read_to_end(fd: OwnedFd) -> String {
        let mut pipe = pipe::Receiver::from_owned_fd(fd).unwrap();
        let mut text = String::new();
        tokio::time::timeout(Duration::from_secs(20), pipe.read_to_string(&mut text))
            .await
            .expect("the zygote neither answered nor dropped a request within 20 s")
            .unwrap();
        text
    }

    /// What the server never sends (a request that is not JSON, too few
    /// descriptors, more bytes than the zygote takes) is answered on its
    /// reply pipe or dropped, its descriptors closed, and the zygote goes on
    /// serving: the requests are served in turn, so the last one answered
    /// shows it outlived the others. Both zygotes, each with its request
    /// loop in C handing these to Python or JS. Needs root, as the zygotes
    /// do.
    #[tokio::test]
    async fn a_zygote_answers_or_drops_a_bad_request_and_goes_on() {
        let root = std::env::temp_dir().join(format!("sless-zygote-{:016x}", rand::random::<u64>()));
        let shim_dir = root.join("shims").join("test");
        std::fs::create_dir_all(&shim_dir).unwrap();
        let data_dir = root.canonicalize().unwrap();
        let shim_dir = shim_dir.canonicalize().unwrap();
        super::super::launcher::write_shims(&shim_dir).unwrap();
        let zygotes = [
            Zygote::python("/usr/bin/python3.11".into(), &shim_dir, &data_dir).unwrap(),
            Zygote::node("/usr/bin/node", 64, &shim_dir, &data_dir).unwrap(),
        ];
        for zygote in &zygotes {
            let not_json = send_raw(zygote, b"not json", 4);
            let too_few = send_raw(zygote, br#"{"template":"0123456789abcdef"}"#, 3);
            let too_long = send_raw(zygote, &vec![b' '; (1 << 16) + 1], 4);
            let last = send_raw(zygote, b"[1, 2", 4);
            let reply = |mut ends: Vec<OwnedFd>| ends.pop().unwrap();
            let name = &zygote.name;
            let text = read_to_end(reply(not_json)).await;
            assert!(text.starts_with("error: "), "{name}: {text:?}");
            for end in too_few {
                assert_eq!(
                    read_to_end(end).await,
                    "",
                    "{name}: three descriptors are dropped, closed"
                );
            }
            let text = read_to_end(reply(too_long)).await;
            assert!(text.starts_with("error: "), "{name}: {text:?}");
            let text = read_to_end(reply(last)).await;
            assert!(text.starts_with("error: "), "{name}: {text:?}");
        }
        drop(zygotes);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_fork_serves_only_after_it_said_ok() {
        let reply = |pid, exit| Ok(Reply { pid, exit });
        assert_eq!(parse_reply("pid 42\nok\n"), reply(42, None));
        assert_eq!(parse_reply("ok\npid 42\n"), reply(42, None));
        assert_eq!(parse_reply("ok\npid 42\nexit 3\n"), reply(42, Some(3)));
        assert!(parse_reply("pid 42\n").unwrap_err().contains("without confining"));
        assert!(parse_reply("pid 42\nerror: mount /code: EPERM\n")
            .unwrap_err()
            .contains("mount /code: EPERM"));
        assert!(parse_reply("ok\n").unwrap_err().contains("no pid"));
    }
}
