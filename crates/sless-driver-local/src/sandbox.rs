//! Sandboxed commands: bubblewrap where present (own mount, pid, ipc and uts
//! namespaces; the host's /usr read-only; a read-only root and /dev; a
//! private sized /tmp and /dev/shm; no terminal; only the binds a caller
//! names), always as an unprivileged uid when the server runs as root, in
//! the control group and network namespace of its [`Confinement`], and
//! rlimits on the process. Without bubblewrap the same command runs with
//! the uid and rlimits only, which is logged once.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;

use tokio::process::Command;

use super::confine::Confinement;
use super::zygote::{ForkLimits, ForkRequest};

/// First uid handed to sandboxed processes; each process gets its own so
/// per-user limits (process count) apply per instance. Each server process
/// on the machine holds a block of `UID_SPAN` uids of its own (a lock file
/// per block under [`UID_LOCKS`]), so two servers never share a uid.
const UID_BASE: u32 = 200_000;
const UID_SPAN: u32 = 50_000;
const UID_BLOCKS: u32 = 64;
const UID_LOCKS: &str = "/run/sless/uid-blocks";

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
    /// The first uid of this server's block, and the lock that holds it.
    uid_base: u32,
    _uid_lock: Option<std::fs::File>,
    /// The resolv.conf of sandboxes in a network namespace of their own.
    pub resolv_conf: Option<PathBuf>,
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
    /// Size of /tmp where the server mounts none of its own (not root).
    pub tmp_bytes: u64,
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
    pub fn detect() -> anyhow::Result<Sandbox> {
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
        let (uid_base, uid_lock) = if as_root {
            let (block, lock) = claim_uid_block()?;
            (UID_BASE + block * UID_SPAN, Some(lock))
        } else {
            (UID_BASE, None)
        };
        Ok(Sandbox {
            bwrap,
            as_root,
            next_uid: AtomicU32::new(0),
            uid_base,
            _uid_lock: uid_lock,
            resolv_conf: None,
        })
    }

    pub fn isolated(&self) -> bool {
        self.bwrap.is_some()
    }

    /// A fresh unprivileged uid (when the server is root; otherwise its own).
    pub fn allocate_uid(&self) -> Option<u32> {
        self.as_root
            .then(|| self.uid_base + self.next_uid.fetch_add(1, Ordering::Relaxed) % UID_SPAN)
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

    /// Builds the command; stdin/stdout piped, stderr piped. As root, a
    /// shell puts itself into the confinement's control groups first (a
    /// failed write ends it before anything else runs), then `nsenter`
    /// enters its network namespace and drops to its uid. The scheduling
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
    pub fn command(&self, spec: &Spec<'_>, confinement: &Confinement, limits: Limits) -> Command {
        let mut cmd;
        match confinement.uid {
            Some(uid) => {
                let joins: String = confinement
                    .cgroup
                    .iter()
                    .flat_map(|g| g.procs_files())
                    .map(|f| format!("echo $$ > '{}' && ", f.display()))
                    .collect();
                cmd = Command::new("/bin/sh");
                cmd.arg("-c").arg(format!("{joins}exec \"$@\"")).arg("sh");
                cmd.arg("/usr/bin/nsenter");
                if let Some(netns) = &confinement.netns {
                    cmd.arg(format!("--net={}", netns.path.display()));
                }
                cmd.args(["-S", &uid.to_string(), "-G", &uid.to_string(), "--", "/usr/bin/chrt"]);
            }
            None => cmd = Command::new("/usr/bin/chrt"),
        }
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
                // In a namespace of its own the network is that one (the
                // sandbox is started inside it); else the host's when asked.
                if spec.share_net || confinement.netns.is_some() {
                    cmd.arg("--share-net");
                }
                for mount in self.view(spec, confinement, limits).mounts {
                    mount.push_args(&mut cmd);
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
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }
}

impl Sandbox {
    /// What a sandbox sees, in the order it is built: bubblewrap's
    /// options, which the zygote carries out itself for its forks. The
    /// first [`View::shared`] steps are the same for every sandbox of this
    /// server (the system files, /dev); the rest is the sandbox's own.
    pub fn view(&self, spec: &Spec<'_>, confinement: &Confinement, limits: Limits) -> View {
        let own_net = confinement.netns.is_some();
        let mut mounts = Vec::new();
        for path in SYSTEM_RO {
            if own_net && *path == "/etc/resolv.conf" {
                continue;
            }
            mounts.push(Mount::RoBindTry(path.into(), path.to_string()));
        }
        if let (true, Some(resolv)) = (own_net, &self.resolv_conf) {
            mounts.push(Mount::RoBind(resolv.clone(), "/etc/resolv.conf".into()));
        }
        for link in ["bin", "lib", "lib64", "sbin"] {
            mounts.push(Mount::Symlink(format!("usr/{link}"), format!("/{link}")));
        }
        mounts.push(Mount::Dev("/dev".into()));
        mounts.push(Mount::RoBind("/dev/null".into(), "/dev/tty".into()));
        let shared = mounts.len();
        mounts.push(Mount::Proc("/proc".into()));
        match &confinement.scratch {
            Some(scratch) => {
                mounts.push(Mount::Bind(scratch.path.join("tmp"), "/tmp".into()));
                mounts.push(Mount::Bind(scratch.path.join("shm"), "/dev/shm".into()));
            }
            None => mounts.push(Mount::Tmpfs("/tmp".into(), limits.tmp_bytes)),
        }
        for (host, inside) in &spec.ro {
            mounts.push(Mount::RoBind(host.clone(), inside.clone()));
        }
        for (host, inside) in &spec.rw {
            mounts.push(Mount::Bind(host.clone(), inside.clone()));
        }
        // Nothing else writable: the root and /dev (not their binds).
        mounts.push(Mount::RemountRo("/dev".into()));
        mounts.push(Mount::RemountRo("/".into()));
        View { mounts, shared }
    }

    /// What the zygote needs to make a fork of it into this sandbox.
    /// Its descriptors are opened by [`ForkRequest::open_descriptors`].
    pub fn fork_request(&self, spec: &Spec<'_>, confinement: &Confinement, limits: Limits) -> ForkRequest {
        let netns_path = confinement.netns.as_ref().map(|n| n.path.clone());
        // The descriptors after the fork's stdio: its namespace, then the
        // detached copies of its scratch binds, in this order.
        let netns = netns_path.as_ref().map(|_| FORK_STDIO);
        let View { mounts, shared } = self.view(spec, confinement, limits);
        let mut detached = Vec::new();
        if let Some(scratch) = &confinement.scratch {
            for mount in &mounts {
                if let Mount::Bind(host, _) | Mount::RoBind(host, _) = mount {
                    if host.starts_with(&scratch.path) {
                        let index = FORK_STDIO + usize::from(netns.is_some()) + detached.len();
                        detached.push((host.clone(), index));
                    }
                }
            }
        }
        ForkRequest {
            template: template_key(&mounts, shared, &detached),
            uid: confinement.uid,
            cgroups: confinement.cgroup.iter().flat_map(|g| g.procs_files()).collect(),
            netns,
            netns_path,
            mounts,
            shared,
            detached,
            descriptors: Vec::new(),
            chdir: spec.chdir.clone(),
            limits: ForkLimits {
                data: limits.memory_bytes,
                nproc: limits.processes,
                cpu: limits.cpu_seconds,
                nofile: limits.open_files,
            },
            env: base_env().into_iter().chain(spec.env.iter().cloned()).collect(),
            exec: None,
            awaited: false,
            run: None,
        }
    }

    /// Whether the server may confine forks itself (it must be root).
    pub fn as_root(&self) -> bool {
        self.as_root
    }
}

/// What the zygote's template for a fork's view depends on, hashed: the
/// shared mounts, and of each of the fork's own the kind, the place and
/// whether it comes as a detached copy (not the host path, which is the
/// instance's own). Requests with the same key take the same template, so
/// the zygote forks them without parsing them (`runtimes/python/
/// sless_loop.c`). None where a template cannot hold the fork's own mounts
/// (the zygote's `own_shape`): the fork builds its whole view.
fn template_key(mounts: &[Mount], shared: usize, detached: &[(PathBuf, usize)]) -> Option<String> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(mounts.get(..shared)?).ok()?.hash(&mut hasher);
    for mount in &mounts[shared..] {
        let (kind, inside, from_descriptor) = match mount {
            Mount::RoBind(host, inside) => ("ro-bind", inside, detached.iter().any(|(path, _)| path == host)),
            Mount::Bind(host, inside) => ("bind", inside, detached.iter().any(|(path, _)| path == host)),
            Mount::Proc(inside) => ("proc", inside, false),
            Mount::Tmpfs(inside, _) => ("tmpfs", inside, false),
            Mount::RemountRo(inside) => ("remount-ro", inside, false),
            Mount::RoBindTry(..) | Mount::Symlink(..) | Mount::Dev(..) => return None,
        };
        (kind, inside, from_descriptor).hash(&mut hasher);
    }
    Some(format!("{:016x}", hasher.finish()))
}

/// The descriptors every fork request carries first: the fork's stdin,
/// stdout, stderr and reply pipe.
const FORK_STDIO: usize = 4;

/// A sandbox's mount view, in the order it is built.
pub struct View {
    pub mounts: Vec<Mount>,
    /// How many of the first `mounts` every sandbox of this server has
    /// alike (no path of an instance or a tenant in them).
    pub shared: usize,
}

/// One step of building a sandbox's mount view: `(host, inside)` paths.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mount {
    RoBindTry(PathBuf, String),
    RoBind(PathBuf, String),
    Bind(PathBuf, String),
    /// `(target, inside)`.
    Symlink(String, String),
    Proc(String),
    Dev(String),
    /// A tmpfs of this many bytes.
    Tmpfs(String, u64),
    RemountRo(String),
}

impl Mount {
    fn push_args(&self, cmd: &mut Command) {
        match self {
            Mount::RoBindTry(host, inside) => cmd.arg("--ro-bind-try").arg(host).arg(inside),
            Mount::RoBind(host, inside) => cmd.arg("--ro-bind").arg(host).arg(inside),
            Mount::Bind(host, inside) => cmd.arg("--bind").arg(host).arg(inside),
            Mount::Symlink(target, inside) => cmd.args(["--symlink", target, inside]),
            Mount::Proc(inside) => cmd.args(["--proc", inside]),
            Mount::Dev(inside) => cmd.args(["--dev", inside]),
            Mount::Tmpfs(inside, bytes) => cmd.args(["--size", &bytes.to_string(), "--tmpfs", inside]),
            Mount::RemountRo(inside) => cmd.args(["--remount-ro", inside]),
        };
    }
}

/// The first free block of uids (its lock is held while the file is open).
fn claim_uid_block() -> anyhow::Result<(u32, std::fs::File)> {
    use rustix::fs::{flock, FlockOperation};
    std::fs::create_dir_all(UID_LOCKS)?;
    for block in 0..UID_BLOCKS {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(Path::new(UID_LOCKS).join(format!("{block}.lock")))?;
        if flock(&file, FlockOperation::NonBlockingLockExclusive).is_ok() {
            return Ok((block, file));
        }
    }
    anyhow::bail!("all {UID_BLOCKS} blocks of sandbox uids under {UID_LOCKS} are held by other sless servers")
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
/// (a warm instance learns its function's memory size only when loaded):
/// what stands in for the control group when the server is not root.
pub fn limit_memory_tree(root: u32, bytes: u64) -> Result<(), String> {
    use rustix::process::{prlimit, Pid, Resource, Rlimit};
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        if let Some(p) = Pid::from_raw(pid as i32) {
            let limit = Rlimit {
                current: Some(bytes),
                maximum: Some(bytes),
            };
            prlimit(Some(p), Resource::Data, limit)
                .map_err(|e| format!("lowering the memory limit of pid {pid}: {e}"))?;
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            stack.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
        }
    }
    Ok(())
}

/// Makes a directory owned by `uid` (when given) so a sandboxed process can write it.
pub fn make_owned_dir(path: &Path, uid: Option<u32>) -> std::io::Result<()> {
    std::fs::create_dir_all(path)?;
    if let Some(uid) = uid {
        std::os::unix::fs::chown(path, Some(uid), Some(uid))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(shared: &str, slot: &str, scratch: &str) -> (Vec<Mount>, usize, Vec<(PathBuf, usize)>) {
        let mounts = vec![
            Mount::RoBind(shared.into(), "/usr".into()),
            Mount::Proc("/proc".into()),
            Mount::RoBind(slot.into(), "/code".into()),
            Mount::Bind(format!("{scratch}/tmp").into(), "/tmp".into()),
            Mount::Tmpfs("/run".into(), 1 << 20),
            Mount::RemountRo("/".into()),
        ];
        (mounts, 2, vec![(format!("{scratch}/tmp").into(), 5)])
    }

    fn key(view: &(Vec<Mount>, usize, Vec<(PathBuf, usize)>)) -> Option<String> {
        template_key(&view.0, view.1, &view.2)
    }

    #[test]
    fn forks_whose_views_differ_only_in_their_own_paths_share_a_template_key() {
        let one = key(&view("/usr", "/data/slots/a", "/data/scratch/a.tmp")).unwrap();
        assert_eq!(one.len(), 16);
        assert!(one.bytes().all(|b| b.is_ascii_hexdigit()), "{one}");
        assert_eq!(
            Some(&one),
            key(&view("/usr", "/data/slots/b", "/data/scratch/b.tmp")).as_ref()
        );
        // The shared part differs: another template.
        assert_ne!(
            Some(&one),
            key(&view("/usr2", "/data/slots/a", "/data/scratch/a.tmp")).as_ref()
        );
        // The code comes as a detached copy instead of a bind of a host path.
        let mut detached = view("/usr", "/data/scratch/a.tmp/code", "/data/scratch/a.tmp");
        detached.2.push(("/data/scratch/a.tmp/code".into(), 6));
        assert_ne!(Some(&one), key(&detached).as_ref());
        // A mount a template cannot hold the point of: no template.
        let mut tried = view("/usr", "/data/slots/a", "/data/scratch/a.tmp");
        tried.0.push(Mount::RoBindTry("/etc/x".into(), "/etc/x".into()));
        assert_eq!(key(&tried), None);
    }
}
