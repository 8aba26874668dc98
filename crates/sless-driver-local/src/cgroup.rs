//! Control groups of instances and builds: memory (tmpfs, shared memory and
//! child processes count, as the kernel charges them), processes and CPU
//! per sandbox. cgroup v1 (a mount per controller) and v2 (one unified
//! mount) are both supported; a group lives below the server's own group,
//! `sless-{server pid}/{n}`, so groups of a server that is gone are found
//! and removed at start. Under v2 the server itself moves into
//! `sless-{server pid}/server` (a group with processes of its own cannot
//! hand controllers down).
//!
//! CPU is shared by namespace, not by group: the groups of one namespace
//! (its instances and builds) split one namespace's weight between them
//! ([`Group::join_namespace`]), so a tenant running a hundred busy
//! instances gets about the CPU of one running a single instance, not a
//! hundred times it, when both want more than there is.
//!
//! **Invariant:** a limit that cannot be written is an error the caller
//! turns into a failed start; nothing runs with a limit it asked for and
//! did not get.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// CPU period of the quota (µs); the quota is one CPU's worth of it.
const CPU_PERIOD_US: u64 = 100_000;

/// The CPU weight (cgroup v2's `cpu.weight` scale, its largest) of one
/// namespace, split between its groups; also the weight of a group that
/// belongs to no namespace yet (a warm shim) and, under v2, of the server's
/// own group, so the gateway weighs as much as one busy namespace.
const NAMESPACE_WEIGHT: u64 = 10_000;

/// The weight of each of a namespace's `members` groups: the namespace's,
/// halved for each doubling of its groups (the next power of two), so a
/// namespace's groups weigh between half and all of [`NAMESPACE_WEIGHT`]
/// and a namespace's groups are weighed anew only when their count
/// crosses a power of two.
fn member_weight(members: usize) -> u64 {
    (NAMESPACE_WEIGHT >> members.max(1).next_power_of_two().trailing_zeros()).max(1)
}

/// Writes a CPU weight on the v2 scale (1 to 10 000, 100 the default); v1's
/// `cpu.shares` is that scale times 1024 / 100 (1024 the default).
fn write_weight(cpu_dir: &Path, weight: u64, v2: bool) -> std::io::Result<()> {
    if v2 {
        write(&cpu_dir.join("cpu.weight"), &weight.to_string())
    } else {
        write(&cpu_dir.join("cpu.shares"), &(weight * 1024 / 100).max(2).to_string())
    }
}

/// The groups of each namespace, by group number, with the CPU directory
/// of each and the weight each was given.
#[derive(Debug, Default)]
struct Shares {
    namespaces: Mutex<HashMap<String, Members>>,
}

#[derive(Debug, Default)]
struct Members {
    dirs: HashMap<u64, PathBuf>,
    weight: u64,
}

impl Shares {
    /// Adds group `id` to `namespace`: it gets the namespace's weight per
    /// group, and the namespace's other groups too when that changed.
    fn join(&self, namespace: &str, id: u64, cpu_dir: &Path, v2: bool) -> Result<(), String> {
        let mut namespaces = self.namespaces.lock().unwrap_or_else(|e| e.into_inner());
        let members = namespaces.entry(namespace.to_string()).or_default();
        members.dirs.insert(id, cpu_dir.to_path_buf());
        let weight = member_weight(members.dirs.len());
        write_weight(cpu_dir, weight, v2).map_err(|e| format!("setting the CPU weight of a control group: {e}"))?;
        if weight != members.weight {
            members.weight = weight;
            reweigh(members, Some(id), v2);
        }
        Ok(())
    }

    /// Takes group `id` out of `namespace`, weighing the rest anew when
    /// their share per group changed.
    fn leave(&self, namespace: &str, id: u64, v2: bool) {
        let mut namespaces = self.namespaces.lock().unwrap_or_else(|e| e.into_inner());
        let Some(members) = namespaces.get_mut(namespace) else {
            return;
        };
        members.dirs.remove(&id);
        if members.dirs.is_empty() {
            namespaces.remove(namespace);
            return;
        }
        let weight = member_weight(members.dirs.len());
        if weight != members.weight {
            members.weight = weight;
            reweigh(members, None, v2);
        }
    }
}

/// Writes `members.weight` to every group of a namespace but `done`. A
/// group being removed may be gone already: nothing to weigh then.
fn reweigh(members: &Members, done: Option<u64>, v2: bool) {
    for (id, dir) in &members.dirs {
        if Some(*id) != done {
            if let Err(e) = write_weight(dir, members.weight, v2) {
                tracing::debug!(group = %dir.display(), error = %e, "cannot set a control group's CPU weight");
            }
        }
    }
}

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
    shares: Arc<Shares>,
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
            write_weight(&leaf, NAMESPACE_WEIGHT, true)
                .map_err(|e| anyhow::anyhow!("setting the CPU weight of {}: {e}", leaf.display()))?;
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
            shares: Arc::default(),
        })
    }

    /// A new group with `limits`; its `procs` files are where a sandbox's
    /// first process writes its pid.
    pub fn create(&self, limits: GroupLimits) -> Result<Group, String> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let name = id.to_string();
        let dirs = match &self.layout {
            Layout::V1 { memory, pids, cpu } => vec![memory.join(&name), pids.join(&name), cpu.join(&name)],
            Layout::V2 { parent } => vec![parent.join(&name)],
        };
        let group = Group {
            v2: matches!(self.layout, Layout::V2 { .. }),
            dirs,
            id,
            shares: self.shares.clone(),
            namespace: Mutex::new(None),
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
        write_weight(group.dir("cpu"), NAMESPACE_WEIGHT, group.v2)
            .map_err(|e| format!("setting the CPU weight of a control group: {e}"))?;
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
    /// Its number, which names it.
    id: u64,
    shares: Arc<Shares>,
    /// The namespace whose CPU weight it shares, once it has one.
    namespace: Mutex<Option<String>>,
}

impl Group {
    /// Makes the group one of `namespace`'s, which share one namespace's
    /// CPU weight (the module's doc): a warm shim's group when the shim is
    /// fitted to its function, a build's when it starts. Its weight and,
    /// when theirs changed, the namespace's other groups' are set here.
    pub fn join_namespace(&self, namespace: &str) -> Result<(), String> {
        let mut joined = self.namespace.lock().unwrap_or_else(|e| e.into_inner());
        if joined.as_deref() == Some(namespace) {
            return Ok(());
        }
        if let Some(before) = joined.take() {
            self.shares.leave(&before, self.id, self.v2);
        }
        self.shares.join(namespace, self.id, self.dir("cpu"), self.v2)?;
        *joined = Some(namespace.to_string());
        Ok(())
    }

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
        if let Some(namespace) = self.namespace.get_mut().unwrap_or_else(|e| e.into_inner()).take() {
            self.shares.leave(&namespace, self.id, self.v2);
        }
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

    /// A namespace's groups share one namespace's CPU weight, weighed anew
    /// as their count crosses a power of two; a group of no namespace yet
    /// (a warm shim) and the server's own weigh as a whole namespace.
    #[test]
    fn a_namespace_s_groups_share_one_namespace_s_cpu_weight() {
        let root = std::env::temp_dir().join(format!("sless-cgroup-shares-{:016x}", rand::random::<u64>()));
        let base = root.join("sless.service");
        std::fs::create_dir_all(&base).unwrap();
        std::fs::write(root.join("cgroup.controllers"), "cpu memory pids").unwrap();
        let cgroups = Cgroups::start_in(&root, "0::/sless.service\n", 4_000_002).unwrap();
        let parent = base.join("sless-4000002");
        let weight = |group: &Group| std::fs::read_to_string(group.dirs[0].join("cpu.weight")).unwrap();
        assert_eq!(
            std::fs::read_to_string(parent.join("server/cpu.weight")).unwrap(),
            "10000"
        );
        let limits = GroupLimits {
            memory_bytes: 64 << 20,
            processes: 64,
            cpus: 1.0,
        };
        let groups: Vec<Group> = (0..6).map(|_| cgroups.create(limits).unwrap()).collect();
        let weights = |groups: &[Group]| groups.iter().map(&weight).collect::<Vec<_>>();
        assert!(weights(&groups).iter().all(|w| w == "10000"), "{:?}", weights(&groups));
        for group in &groups[..3] {
            group.join_namespace("busy").unwrap();
        }
        groups[3].join_namespace("quiet").unwrap();
        groups[3].join_namespace("quiet").unwrap();
        // Three of "busy" split it as four would: 2 500 each.
        assert_eq!(weights(&groups), ["2500", "2500", "2500", "10000", "10000", "10000"]);
        groups[4].join_namespace("busy").unwrap();
        assert_eq!(weights(&groups), ["2500", "2500", "2500", "10000", "2500", "10000"]);
        let mut groups = groups;
        for gone in [4, 0] {
            let group = groups.remove(gone);
            drop_without_removing(group);
        }
        // Two of "busy" left: 5 000 each; "quiet" and the unfitted one as they were.
        assert_eq!(weights(&groups), ["5000", "5000", "10000", "10000"]);
        for group in groups {
            drop_without_removing(group);
        }
        assert!(
            cgroups.shares.namespaces.lock().unwrap().is_empty(),
            "every namespace left"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// Drops a group as its end does (it leaves its namespace) but leaves
    /// its directory, whose removal would wait for files a real cgroupfs
    /// does not hold.
    fn drop_without_removing(mut group: Group) {
        group.dirs.clear();
        drop(group);
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
