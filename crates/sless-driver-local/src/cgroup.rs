//! Control groups of instances and builds: memory (tmpfs, shared memory and
//! child processes count, as the kernel charges them), processes and CPU
//! per sandbox. cgroup v1 (a mount per controller) and v2 (one unified
//! mount) are both supported; a group lives below the server's own group,
//! `sless-{server pid}/{n}`, so groups of a server that is gone are found
//! and removed at start. Under v2 the server itself moves into
//! `sless-{server pid}/server` (a group with processes of its own cannot
//! hand controllers down).
//!
//! **Invariant:** a limit that cannot be written is an error the caller
//! turns into a failed start; nothing runs with a limit it asked for and
//! did not get.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::OnceLock;
use std::time::Duration;

/// CPU period of the quota (µs); the quota is one CPU's worth of it.
const CPU_PERIOD_US: u64 = 100_000;

/// The cgroup filesystem as mounted on this machine.
#[derive(Debug)]
enum Layout {
    /// One directory per controller: (memory, pids, cpu) parents.
    V1 {
        memory: PathBuf,
        pids: PathBuf,
        cpu: PathBuf,
    },
    /// The unified hierarchy, controllers enabled below the parent.
    V2 { parent: PathBuf },
}

/// Makes the groups of this server process.
#[derive(Debug)]
pub struct Cgroups {
    layout: Layout,
    next: AtomicU64,
}

/// Limits of one group.
#[derive(Debug, Clone, Copy)]
pub struct GroupLimits {
    pub memory_bytes: u64,
    pub processes: u64,
    /// CPUs' worth of time per period (1.0 = one CPU).
    pub cpus: f64,
}

impl Cgroups {
    /// Finds the controllers and makes this server's parent groups.
    pub fn start() -> anyhow::Result<Cgroups> {
        let own = std::fs::read_to_string("/proc/self/cgroup")?;
        Cgroups::start_in(Path::new("/sys/fs/cgroup"), &own, std::process::id())
    }

    /// [`Cgroups::start`] for the cgroup filesystem at `root`, server process
    /// `pid` whose `/proc/{pid}/cgroup` reads `own`.
    fn start_in(root: &Path, own: &str, pid: u32) -> anyhow::Result<Cgroups> {
        let dir = format!("sless-{pid}");
        let unified = root.join("cgroup.controllers").exists();
        let layout = if unified {
            let path = own
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .ok_or_else(|| anyhow::anyhow!("no cgroup v2 entry in /proc/self/cgroup"))?;
            let base = root.join(path.trim_start_matches('/'));
            let parent = base.join(&dir);
            remove_stale(&base);
            // v2 hands controllers down only from a group that holds no
            // process itself: the server moves into a leaf of its own,
            // `sless-{pid}/server`, next to its sandboxes' groups.
            let leaf = parent.join("server");
            std::fs::create_dir_all(&leaf)?;
            write(&leaf.join("cgroup.procs"), &pid.to_string())
                .map_err(|e| anyhow::anyhow!("moving the server into {}: {e}", leaf.display()))?;
            // Controllers for the instances' groups, below ours.
            write(&base.join("cgroup.subtree_control"), "+memory +pids +cpu").map_err(|e| {
                anyhow::anyhow!(
                    "enabling the memory, pids and cpu controllers for sandboxes in {}: {e} \
                     (a group that holds other processes cannot: run the server in a cgroup of its own, \
                     e.g. a systemd service with Delegate=yes, or a container)",
                    base.display()
                )
            })?;
            write(&parent.join("cgroup.subtree_control"), "+memory +pids +cpu")
                .map_err(|e| anyhow::anyhow!("enabling controllers in {}: {e}", parent.display()))?;
            Layout::V2 { parent }
        } else {
            let mut parents = Vec::new();
            for controller in ["memory", "pids", "cpu"] {
                let mount = root.join(controller);
                if !mount.join("cgroup.procs").exists() {
                    anyhow::bail!(
                        "the {controller} cgroup controller is not mounted at {}",
                        mount.display()
                    );
                }
                let path = own
                    .lines()
                    .find_map(|l| {
                        let mut parts = l.splitn(3, ':');
                        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                        controllers.split(',').any(|c| c == controller).then_some(path)
                    })
                    .unwrap_or("/");
                let base = mount.join(path.trim_start_matches('/'));
                remove_stale(&base);
                let parent = base.join(&dir);
                std::fs::create_dir_all(&parent)
                    .map_err(|e| anyhow::anyhow!("making cgroup {}: {e}", parent.display()))?;
                parents.push(parent);
            }
            let cpu = parents.pop().expect("three controllers");
            let pids = parents.pop().expect("three controllers");
            let memory = parents.pop().expect("three controllers");
            Layout::V1 { memory, pids, cpu }
        };
        Ok(Cgroups {
            layout,
            next: AtomicU64::new(0),
        })
    }

    /// A new group with `limits`; its `procs` files are where a sandbox's
    /// first process writes its pid.
    pub fn create(&self, limits: GroupLimits) -> Result<Group, String> {
        let name = self.next.fetch_add(1, Ordering::Relaxed).to_string();
        let dirs = match &self.layout {
            Layout::V1 { memory, pids, cpu } => vec![memory.join(&name), pids.join(&name), cpu.join(&name)],
            Layout::V2 { parent } => vec![parent.join(&name)],
        };
        let group = Group {
            v2: matches!(self.layout, Layout::V2 { .. }),
            dirs,
        };
        for dir in &group.dirs {
            std::fs::create_dir(dir).map_err(|e| format!("making a control group: {e}"))?;
        }
        group.set_memory(limits.memory_bytes)?;
        group.write_limit("pids", "pids.max", &limits.processes.to_string())?;
        let quota = ((limits.cpus * CPU_PERIOD_US as f64) as u64).max(1000);
        if group.v2 {
            group.write_limit("cpu", "cpu.max", &format!("{quota} {CPU_PERIOD_US}"))?;
        } else {
            group.write_limit("cpu", "cpu.cfs_period_us", &CPU_PERIOD_US.to_string())?;
            group.write_limit("cpu", "cpu.cfs_quota_us", &quota.to_string())?;
        }
        Ok(group)
    }
}

/// One sandbox's control group(s); its processes are killed and the group
/// removed when dropped.
#[derive(Debug)]
pub struct Group {
    v2: bool,
    /// v1: memory, pids, cpu; v2: the one group.
    dirs: Vec<PathBuf>,
}

impl Group {
    /// The `cgroup.procs` files a process joins the group through.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// Sets the memory limit (tmpfs pages and shared memory included).
    /// Lowering it below what the group uses makes the kernel reclaim; if it
    /// cannot, this fails.
    pub fn set_memory(&self, bytes: u64) -> Result<(), String> {
        if self.v2 {
            self.write_limit("memory", "memory.max", &bytes.to_string())?;
            // No swap to escape into where swap accounting exists.
            let swap = self.dirs[0].join("memory.swap.max");
            if swap.exists() {
                self.write_limit("memory", "memory.swap.max", "0")?;
            }
            Ok(())
        } else {
            // The kernel keeps memory+swap at least memory: a raise sets
            // memory+swap first (else EINVAL: a function of more than the
            // warm group's 1 GiB could not start), a cut sets it last.
            const MEMORY: &str = "memory.limit_in_bytes";
            const MEMSW: &str = "memory.memsw.limit_in_bytes";
            let mut files = vec![MEMORY];
            if self.dirs[0].join(MEMSW).exists() {
                let current = std::fs::read_to_string(self.dirs[0].join(MEMORY)).unwrap_or_default();
                let raising = current.trim().parse::<u64>().is_ok_and(|current| bytes > current);
                files.insert(usize::from(!raising), MEMSW);
            }
            for file in files {
                self.write_limit("memory", file, &bytes.to_string())?;
            }
            Ok(())
        }
    }

    /// Whether the kernel has killed a process of the group for going over
    /// its memory limit, and that limit in bytes (None: no such kill, or
    /// the kernel does not count them).
    pub fn out_of_memory(&self) -> Option<u64> {
        let (events, limit) = if self.v2 {
            ("memory.events", "memory.max")
        } else {
            ("memory.oom_control", "memory.limit_in_bytes")
        };
        let dir = self.dir("memory");
        let events = std::fs::read_to_string(dir.join(events)).ok()?;
        let kills: u64 = events
            .lines()
            .find_map(|line| line.strip_prefix("oom_kill "))?
            .trim()
            .parse()
            .ok()?;
        if kills == 0 {
            return None;
        }
        std::fs::read_to_string(dir.join(limit)).ok()?.trim().parse().ok()
    }

    fn dir(&self, controller: &str) -> &Path {
        match (self.v2, controller) {
            (true, _) | (false, "memory") => &self.dirs[0],
            (false, "pids") => &self.dirs[1],
            _ => &self.dirs[2],
        }
    }

    fn write_limit(&self, controller: &str, file: &str, value: &str) -> Result<(), String> {
        let path = self.dir(controller).join(file);
        write(&path, value).map_err(|e| format!("setting the {controller} limit ({file} = {value}): {e}"))
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // The processes may still be exiting: removed off the caller's thread.
        Reaper::remove(std::mem::take(&mut self.dirs));
    }
}

/// The thread that removes the groups of ended sandboxes ("sless-cgroups",
/// started at the first): it kills what is left in a group and removes
/// it, and tries again every [`Reaper::PAUSE`] while its processes are still
/// exiting, up to [`Reaper::TRIES`] times. One thread for all: a thread per
/// group cost each cold start's end a thread's start and exit, and a burst
/// of ends as many threads at once.
struct Reaper;

impl Reaper {
    const PAUSE: Duration = Duration::from_millis(50);
    const TRIES: u32 = 100;

    fn remove(dirs: Vec<PathBuf>) {
        static QUEUE: OnceLock<Option<Sender<Vec<PathBuf>>>> = OnceLock::new();
        let unsent = match QUEUE.get_or_init(Reaper::start) {
            Some(queue) => queue.send(dirs).err().map(|unsent| unsent.0),
            None => Some(dirs),
        };
        if let Some(dirs) = unsent {
            remove_groups(&dirs);
        }
    }

    /// The thread's queue, or None (groups are then removed on the spot).
    fn start() -> Option<Sender<Vec<PathBuf>>> {
        let (queue, groups) = std::sync::mpsc::channel();
        let started = std::thread::Builder::new()
            .name("sless-cgroups".into())
            .stack_size(64 << 10)
            .spawn(move || Reaper::run(&groups));
        if let Err(e) = started {
            tracing::warn!(error = %e, "cannot start the thread that removes control groups; removing each on the spot");
            return None;
        }
        Some(queue)
    }

    fn run(groups: &Receiver<Vec<PathBuf>>) {
        let mut pending: Vec<(Vec<PathBuf>, u32)> = Vec::new();
        loop {
            if pending.is_empty() {
                match groups.recv() {
                    Ok(dirs) => pending.push((dirs, 0)),
                    Err(_) => return,
                }
            }
            pending.extend(groups.try_iter().map(|dirs| (dirs, 0)));
            pending.retain_mut(|(dirs, tries)| {
                *tries += 1;
                !try_remove_groups(dirs) && *tries < Reaper::TRIES
            });
            if !pending.is_empty() {
                std::thread::sleep(Reaper::PAUSE);
            }
        }
    }
}

/// Kills what is left in the groups and removes them, trying again while
/// their processes exit.
fn remove_groups(dirs: &[PathBuf]) {
    for _ in 0..Reaper::TRIES {
        if try_remove_groups(dirs) {
            return;
        }
        std::thread::sleep(Reaper::PAUSE);
    }
}

/// Kills what is left in the groups and tries to remove them: whether they are gone.
fn try_remove_groups(dirs: &[PathBuf]) -> bool {
    for dir in dirs {
        for pid in std::fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
        {
            if let Some(pid) = pid.trim().parse::<i32>().ok().and_then(rustix::process::Pid::from_raw) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
    dirs.iter().all(|d| std::fs::remove_dir(d).is_ok() || !d.exists())
}

/// Groups left by server processes that are gone.
fn remove_stale(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("sless-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let children: Vec<PathBuf> = std::fs::read_dir(entry.path())
            .map(|d| d.flatten().filter(|e| e.path().is_dir()).map(|e| e.path()).collect())
            .unwrap_or_default();
        remove_groups(&children);
        let _ = std::fs::remove_dir(entry.path());
    }
}

fn write(path: &Path, value: &str) -> std::io::Result<()> {
    std::fs::write(path, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// v2 cannot be mounted with these controllers on a machine whose
    /// memory, pids and cpu controllers are bound to v1: the layout is
    /// checked on a directory tree shaped like a delegated v2 group.
    #[test]
    fn under_v2_the_server_moves_to_a_leaf_and_groups_get_their_limits() {
        let root = std::env::temp_dir().join(format!("sless-cgroup-v2-{:016x}", rand::random::<u64>()));
        let base = root.join("system.slice/sless.service");
        std::fs::create_dir_all(&base).unwrap();
        std::fs::write(root.join("cgroup.controllers"), "cpu memory pids").unwrap();
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();

        let cgroups = Cgroups::start_in(&root, "0::/system.slice/sless.service\n", 4_000_001).unwrap();
        let parent = base.join("sless-4000001");
        assert_eq!(read(&parent.join("server/cgroup.procs")), "4000001");
        assert_eq!(read(&base.join("cgroup.subtree_control")), "+memory +pids +cpu");
        assert_eq!(read(&parent.join("cgroup.subtree_control")), "+memory +pids +cpu");

        let group = cgroups
            .create(GroupLimits {
                memory_bytes: 96 << 20,
                processes: 64,
                cpus: 0.5,
            })
            .unwrap();
        let dir = parent.join("0");
        assert_eq!(group.procs_files(), vec![dir.join("cgroup.procs")]);
        assert_eq!(read(&dir.join("memory.max")), (96u64 << 20).to_string());
        assert_eq!(read(&dir.join("pids.max")), "64");
        assert_eq!(read(&dir.join("cpu.max")), "50000 100000");
        group.set_memory(128 << 20).unwrap();
        assert_eq!(read(&dir.join("memory.max")), (128u64 << 20).to_string());

        // Its removal would wait for files a real cgroupfs does not hold.
        std::mem::forget(group);
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// Plain directories stand in for groups: one that cannot go yet (a
    /// file in it, as a group whose processes are still exiting) is tried
    /// again until it can, without holding back the others; one thread
    /// removes them all.
    #[test]
    fn one_thread_removes_every_group_and_tries_a_busy_one_again() {
        let root = std::env::temp_dir().join(format!("sless-cgroup-reaper-{:016x}", rand::random::<u64>()));
        let (busy, free) = (root.join("busy"), root.join("free"));
        std::fs::create_dir_all(&busy).unwrap();
        std::fs::create_dir_all(&free).unwrap();
        std::fs::write(busy.join("held"), "").unwrap();
        let gone_within = |dir: &Path, wait: Duration| {
            let until = std::time::Instant::now() + wait;
            while dir.exists() && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            !dir.exists()
        };
        Reaper::remove(vec![busy.clone()]);
        Reaper::remove(vec![free.clone()]);
        assert!(gone_within(&free, Duration::from_secs(5)), "the free group is removed");
        assert!(busy.exists(), "the busy one waits");
        std::fs::remove_file(busy.join("held")).unwrap();
        assert!(
            gone_within(&busy, Duration::from_secs(5)),
            "the busy one is removed once it can be"
        );
        let reapers = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .flatten()
            .filter(|task| std::fs::read_to_string(task.path().join("comm")).is_ok_and(|c| c.trim() == "sless-cgroups"))
            .count();
        assert_eq!(reapers, 1);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
