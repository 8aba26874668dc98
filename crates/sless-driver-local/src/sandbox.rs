//! Sandboxed commands: bubblewrap where present (own mount, pid, ipc and uts
//! namespaces; the host's /usr read-only; a private /tmp; no terminal; only
//! the binds a caller names), always as an unprivileged uid when the server runs as root,
//! and rlimits on the process. Without bubblewrap the same command runs with
//! the uid and rlimits only, which is logged once.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;

use tokio::process::Command;

/// First uid handed to sandboxed processes; each process gets its own so
/// per-user limits (process count) apply per instance.
const UID_BASE: u32 = 200_000;
const UID_SPAN: u32 = 50_000;

/// Host paths that hold the runtimes and the system libraries.
const SYSTEM_RO: &[&str] = &[
    "/usr",
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/mime.types",
];

/// How processes are confined.
pub struct Sandbox {
    bwrap: Option<PathBuf>,
    as_root: bool,
    next_uid: AtomicU32,
}

/// Limits applied to a sandboxed process.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Bytes of writable memory (RLIMIT_DATA).
    pub memory_bytes: u64,
    /// Processes (threads included) of its uid (RLIMIT_NPROC).
    pub processes: u64,
    /// CPU seconds over the process's life (RLIMIT_CPU).
    pub cpu_seconds: u64,
    /// Open files (RLIMIT_NOFILE).
    pub open_files: u64,
}

/// What a sandboxed command sees and runs.
pub struct Spec<'a> {
    pub program: &'a str,
    pub args: Vec<String>,
    /// `(host, inside)` read-only binds.
    pub ro: Vec<(PathBuf, String)>,
    /// `(host, inside)` read-write binds.
    pub rw: Vec<(PathBuf, String)>,
    /// Working directory, as seen inside.
    pub chdir: String,
    pub env: Vec<(String, String)>,
    pub share_net: bool,
}

impl Sandbox {
    pub fn detect() -> Sandbox {
        let bwrap = ["/usr/bin/bwrap", "/bin/bwrap", "/usr/local/bin/bwrap"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists());
        let as_root = rustix::process::geteuid().is_root();
        if bwrap.is_none() {
            static WARN: Once = Once::new();
            WARN.call_once(|| {
                tracing::warn!("bubblewrap (bwrap) not found: functions run with a separate uid and rlimits only, without filesystem isolation; install the bubblewrap package");
            });
        }
        Sandbox {
            bwrap,
            as_root,
            next_uid: AtomicU32::new(0),
        }
    }

    pub fn isolated(&self) -> bool {
        self.bwrap.is_some()
    }

    /// A fresh unprivileged uid (when the server is root; otherwise its own).
    pub fn allocate_uid(&self) -> Option<u32> {
        self.as_root
            .then(|| UID_BASE + self.next_uid.fetch_add(1, Ordering::Relaxed) % UID_SPAN)
    }

    /// The path a process sees for a bind: the inside path under bubblewrap,
    /// the host path without it.
    pub fn seen_path(&self, host: &Path, inside: &str) -> String {
        if self.isolated() {
            inside.to_string()
        } else {
            host.display().to_string()
        }
    }

    /// Builds the command; stdin/stdout piped, stderr piped. The scheduling
    /// policy and the limits are set by util-linux `chrt` and `prlimit`
    /// before anything else runs, so every process of the sandbox inherits
    /// them.
    ///
    /// The policy is SCHED_BATCH: a sandboxed process gets its fair share of
    /// CPU but, when woken, does not preempt the thread that woke it. The
    /// gateway thread that hands an instance an invocation keeps running
    /// and hands it the next ones too, and the instance then answers them
    /// in one batch: under load that halves the context switches per call.
    /// An idle core still runs a woken instance at once.
    pub fn command(&self, spec: &Spec<'_>, uid: Option<u32>, limits: Limits) -> Command {
        let mut cmd = Command::new("/usr/bin/chrt");
        cmd.args(["--batch", "0", "/usr/bin/prlimit"])
            .arg(format!("--data={}", limits.memory_bytes))
            .arg(format!("--nproc={}", limits.processes))
            .arg(format!("--cpu={}", limits.cpu_seconds))
            .arg(format!("--nofile={}", limits.open_files))
            .arg("--");
        match &self.bwrap {
            Some(bwrap) => {
                cmd.arg(bwrap);
                // No --new-session: setsid would put every instance in a
                // scheduler autogroup of its own, which costs a busy instance
                // about a third more CPU per invocation in context switches.
                // The terminal it guards against (TIOCSTI) is out of reach
                // anyway: stdio are pipes and /dev/tty is masked below.
                cmd.args(["--unshare-all", "--die-with-parent"]);
                if spec.share_net {
                    cmd.arg("--share-net");
                }
                for path in SYSTEM_RO {
                    cmd.args(["--ro-bind-try", path, path]);
                }
                for link in ["bin", "lib", "lib64", "sbin"] {
                    cmd.args(["--symlink", &format!("usr/{link}"), &format!("/{link}")]);
                }
                cmd.args(["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]);
                cmd.args(["--ro-bind", "/dev/null", "/dev/tty"]);
                for (host, inside) in &spec.ro {
                    cmd.arg("--ro-bind").arg(host).arg(inside);
                }
                for (host, inside) in &spec.rw {
                    cmd.arg("--bind").arg(host).arg(inside);
                }
                cmd.args(["--chdir", &spec.chdir, "--clearenv"]);
                for (k, v) in base_env().iter().chain(spec.env.iter()) {
                    cmd.args(["--setenv", k, v]);
                }
                cmd.arg("--").arg(spec.program).args(&spec.args);
            }
            None => {
                cmd.arg(spec.program)
                    .args(&spec.args)
                    .current_dir(&spec.chdir)
                    .env_clear();
                cmd.envs(base_env().iter().chain(spec.env.iter()).map(|(k, v)| (k, v)));
            }
        }
        if let Some(uid) = uid {
            cmd.uid(uid).gid(uid);
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }
}

fn base_env() -> Vec<(String, String)> {
    vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("HOME".into(), "/tmp".into()),
        ("LANG".into(), "C.UTF-8".into()),
        ("TMPDIR".into(), "/tmp".into()),
    ]
}

/// Lowers the memory limit of a running process and all its descendants
/// (a warm instance learns its function's memory size only when loaded).
pub fn limit_memory_tree(root: u32, bytes: u64) {
    use rustix::process::{prlimit, Pid, Resource, Rlimit};
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        if let Some(p) = Pid::from_raw(pid as i32) {
            let limit = Rlimit {
                current: Some(bytes),
                maximum: Some(bytes),
            };
            if let Err(e) = prlimit(Some(p), Resource::Data, limit) {
                tracing::debug!(pid, error = %e, "lowering the memory limit failed");
            }
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            stack.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
        }
    }
}

/// Makes a directory owned by `uid` (when given) so a sandboxed process can write it.
pub fn make_owned_dir(path: &Path, uid: Option<u32>) -> std::io::Result<()> {
    std::fs::create_dir_all(path)?;
    if let Some(uid) = uid {
        std::os::unix::fs::chown(path, Some(uid), Some(uid))?;
    }
    Ok(())
}
