//! Network namespaces of instances and builds. Each sandbox gets a
//! namespace of its own (made by `unshare`, bound under `/run/netns` as `ip
//! netns` does), holding only loopback until it joins a hub: one namespace
//! per tenant (and one for builds) that routes its members' traffic to
//! `pasta` (Debian's passt, a maintained user-mode network: the host's
//! loopback is not mapped in, no port is forwarded either way). A member is
//! joined by a veth pair, its end `eth0` with an address of its own in
//! 100.64.0.0/10 and a default route to the hub, which masquerades it.
//!
//! The fence is the hub's nftables rules: forwarded traffic to loopback,
//! private, link-local, shared, multicast and reserved ranges, the host's
//! own addresses and its gateway, and all of IPv6 is refused, as is
//! traffic from one member to another and to the hub itself. Names resolve
//! through pasta's DNS forwarder at [`DNS_ADDRESS`] (the one link-local
//! destination let through, port 53 only), so the machine's own resolver
//! may sit at a private address without opening that range. The operator's
//! private destinations (`SLESS_PRIVATE_EGRESS`) are accepted by the hub of
//! the tenant they are granted to only.
//!
//! Why a hub: `pasta` costs about 10 ms of CPU to start and 20 MB of memory
//! to run, and `ip netns add` plus `nft` two processes more; one of each
//! per instance made the network most of a cold start's cost. A namespace
//! and a veth pair made with syscalls and netlink cost well under one.
//!
//! An instance's namespace is taken when its warm shim starts and joins its
//! tenant's hub when it is loaded (`network: none`: never). A hub is made
//! by the first member that needs it and goes with its last.
//!
//! Once a first hub was made, one more is kept ready, with the rules every
//! hub has and pasta connected, in no tenant's use: a tenant whose hub
//! went (its instances idled out) takes it at its next cold start instead
//! of waiting some 25 ms for a hub of its own, and a new spare is made
//! off the request path. A tenant granted private destinations takes it
//! too: its destinations are added to the spare's rules (one nft run
//! instead of a namespace, nft and pasta). The spare costs an idle pasta.
//!
//! Namespaces are made ahead of demand: one thread of their own keeps
//! [`SPARE_NAMESPACES`] fresh ones (loopback only, in no hub), and a sandbox
//! takes one (or makes one when none is left). Making one costs the kernel
//! a few milliseconds, and the server's runtime thread (one on a two-core
//! machine) never waits for it: every step of making, joining and removing
//! namespaces that can block runs off it.
//!
//! **Invariant:** a namespace has no way out but its hub, and a hub routes
//! nothing before its rules are in place (pasta joins it only after them).
//! A spare is fresh and goes to one sandbox only (taken out of the spares,
//! never put back); it is removed with that sandbox.
//! Namespaces and hubs are named `sless-{owner tag}-{n}` (the server's pid
//! and start time, see `owner`); those of a server that is gone, and their
//! pasta processes, are removed when a server starts. A member's file is
//! unbound when its namespace goes and kept for the next one (`Names`):
//! where `/run` is not a tmpfs, a new file costs an inode of its disk.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use tokio::process::Command;

use super::netlink::{self, Rtnl};
use super::owner;
use super::pasta::{self, Pasta};

/// Where a sandbox sends DNS queries; pasta forwards them to the host's
/// resolver.
pub const DNS_ADDRESS: Ipv4Addr = Ipv4Addr::new(169, 254, 1, 53);

/// Ranges no instance reaches (RFC 6890 special-purpose and private).
const BLOCKED_V4: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/3",
];

/// A private destination the operator opens to one namespace's functions
/// (`SLESS_PRIVATE_EGRESS`: `namespace=address[/prefix][:port]`, comma separated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrivateEgress {
    pub namespace: String,
    pub address: IpAddr,
    pub prefix: u8,
    pub port: Option<u16>,
}

impl PrivateEgress {
    /// Parses the whole setting; the error names the entry.
    pub fn parse_all(entries: &[String]) -> Result<Vec<PrivateEgress>, String> {
        entries
            .iter()
            .map(|e| e.trim())
            .filter(|e| !e.is_empty())
            .map(|entry| PrivateEgress::parse(entry).ok_or_else(|| {
                format!("SLESS_PRIVATE_EGRESS entry {entry:?}: expected namespace=IPv4[/prefix][:port], e.g. billing=10.0.0.5:5432")
            }))
            .collect()
    }

    fn parse(entry: &str) -> Option<PrivateEgress> {
        let (namespace, dest) = entry.split_once('=')?;
        sless_api::validate_name("namespace", namespace).ok()?;
        let (net, port) = match dest.rsplit_once(':') {
            Some((net, port)) => (net, Some(port.parse::<u16>().ok().filter(|p| *p > 0)?)),
            None => (dest, None),
        };
        let (address, prefix) = match net.split_once('/') {
            Some((a, p)) => (a, p.parse::<u8>().ok().filter(|p| *p <= 32)?),
            None => (net, 32),
        };
        let address: Ipv4Addr = address.parse().ok()?;
        Some(PrivateEgress {
            namespace: namespace.to_string(),
            address: IpAddr::V4(address),
            prefix,
            port,
        })
    }

    fn rule(&self) -> String {
        let port = self.port.map(|p| format!(" th dport {p}")).unwrap_or_default();
        format!("ip daddr {}/{}{port} accept", self.address, self.prefix)
    }
}

/// Where the hub end of every member's veth pair is, as its members see it
/// (their default route; never a destination: the hub refuses traffic to itself).
const HUB_ADDRESS: Ipv4Addr = Ipv4Addr::new(169, 254, 0, 1);
/// A member's end of its veth pair, in its own namespace.
const MEMBER_LINK: (&str, i32) = ("eth0", 2);
/// Members' addresses: 100.64.0.0/10 (shared address space, refused as a
/// destination), one per member of a hub, from the namespace's number.
const MEMBER_NET: u32 = 0x6440_0000;
const MEMBERS: u64 = (1 << 22) - 4;

/// Whose hub a namespace joins.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HubOf {
    /// A tenant's: its private destinations are open.
    Tenant(String),
    /// The builds': no private destination.
    Builds,
}

/// A hub being made or made; shared by its members, dropped with the last.
type HubCell = tokio::sync::OnceCell<Hub>;

/// Fresh member namespaces kept ready (a few milliseconds of the kernel's
/// time each, made ahead of a burst of cold starts; an idle one holds
/// little more than its loopback).
const SPARE_NAMESPACES: usize = 16;

/// Makes and removes the namespaces of this server process.
pub struct Networks {
    names: Arc<Names>,
    /// What a hub refuses (ranges and the host's addresses), nft syntax.
    blocked: String,
    spares: Arc<Spares>,
    private: Vec<PrivateEgress>,
    hubs: Mutex<HashMap<HubOf, Weak<HubCell>>>,
    /// A hub made ahead of demand, with no private destination (see the
    /// module doc), and whether one is being made.
    spare_hub: Arc<SpareHub>,
    /// A resolv.conf naming [`DNS_ADDRESS`], bound over the sandbox's.
    pub resolv_conf: PathBuf,
}

impl Networks {
    /// Checks the tools, writes the resolver file, removes namespaces left by
    /// dead servers and fixes the rules (the host's addresses are read now).
    pub fn start(data_dir: &Path, private: Vec<PrivateEgress>) -> anyhow::Result<Networks> {
        for tool in [pasta::PASTA, pasta::SETPRIV, "/usr/sbin/nft", "/usr/bin/nsenter"] {
            if !Path::new(tool).exists() {
                anyhow::bail!(
                    "network isolation needs {tool} (packages passt, nftables, util-linux; scripts/setup-run.sh installs them), \
                     or turn it off with SLESS_NETWORK_ISOLATION=off"
                );
            }
        }
        if !rustix::process::geteuid().is_root() {
            anyhow::bail!("network isolation makes network namespaces and needs root; run the server as root or set SLESS_NETWORK_ISOLATION=off");
        }
        let dir = data_dir.join("network");
        std::fs::create_dir_all(&dir)?;
        set_mode(&dir, 0o755)?;
        let resolv_conf = dir.join("resolv.conf");
        std::fs::write(
            &resolv_conf,
            format!("nameserver {DNS_ADDRESS}\noptions timeout:2 attempts:2\n"),
        )?;
        set_mode(&resolv_conf, 0o644)?;
        remove_stale();
        // As `ip netns` makes it: namespaces bound here later reach the
        // mount namespaces copied from this one (the zygote's).
        std::fs::create_dir_all(NETNS_DIR)?;
        super::zygote::shared_mount_point(Path::new(NETNS_DIR))
            .map_err(|e| anyhow::anyhow!("sharing mounts under {NETNS_DIR}: {e}"))?;
        let names = Arc::new(Names {
            prefix: format!("sless-{}-", owner::own_tag()),
            next: AtomicU64::new(0),
            unused: Mutex::new(Vec::new()),
        });
        let spares = Arc::new(Spares::default());
        let (keeper_spares, keeper_names) = (spares.clone(), names.clone());
        std::thread::Builder::new()
            .name("sless-netns".into())
            .stack_size(256 << 10)
            .spawn(move || keep_spares(&keeper_spares, &keeper_names, SPARE_NAMESPACES))?;
        Ok(Networks {
            names,
            blocked: blocked(&host_addresses()),
            spares,
            private,
            hubs: Mutex::new(HashMap::new()),
            spare_hub: Arc::default(),
            resolv_conf,
        })
    }

    /// A fresh namespace holding only loopback, a spare if one is ready;
    /// joined to `hub` at once when given.
    pub async fn create(&self, hub: Option<HubOf>) -> Result<Netns, String> {
        let netns = match self.spares.take() {
            Some(netns) => netns,
            None => {
                let names = self.names.clone();
                tokio::task::spawn_blocking(move || names.member(|path| netlink::new_netns(path, member_sysctls)))
                    .await
                    .map_err(|e| format!("making a network namespace: {e}"))?
                    .map_err(|e| format!("making a network namespace: {e}"))?
            }
        };
        if let Some(hub) = hub {
            self.join(&netns, hub).await?;
        }
        Ok(netns)
    }

    /// Joins `netns` to the hub of `hub` (made if it is the first member):
    /// from then on it reaches the internet and what that hub opens.
    pub async fn join(&self, netns: &Netns, hub: HubOf) -> Result<(), String> {
        if netns.hub.lock().unwrap().is_some() {
            return Ok(());
        }
        let cell = {
            let mut hubs = self.hubs.lock().unwrap();
            hubs.retain(|_, cell| cell.strong_count() > 0);
            match hubs.get(&hub).and_then(Weak::upgrade) {
                Some(cell) => cell,
                None => {
                    let cell = Arc::new(HubCell::new());
                    hubs.insert(hub.clone(), Arc::downgrade(&cell));
                    cell
                }
            }
        };
        cell.get_or_try_init(|| self.make_hub(&hub)).await?;
        // The kernel's network configuration is one lock: a join may wait
        // for it, on a thread of its own.
        let (hub_cell, path, member, rtnl) = (cell.clone(), netns.path.clone(), netns.member, netns.rtnl.clone());
        tokio::task::spawn_blocking(move || {
            let made = hub_cell.get().expect("made above");
            made.connect(&path, member, &rtnl)
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()))
        .map_err(|e| format!("joining the network namespace to its hub: {e}"))?;
        *netns.hub.lock().unwrap() = Some(cell);
        Ok(())
    }

    /// The hub of `hub`: the spare if one is ready (a granted tenant's
    /// private destinations added to its rules), else a new one; either
    /// way a spare is made for the next.
    async fn make_hub(&self, hub: &HubOf) -> Result<Hub, String> {
        let private: Vec<&PrivateEgress> = match hub {
            HubOf::Tenant(namespace) => self.private.iter().filter(|p| &p.namespace == namespace).collect(),
            HubOf::Builds => Vec::new(),
        };
        let made = match self.spare_hub.take() {
            Some(made) if private.is_empty() => made,
            Some(made) => {
                // Before any member joins it. On failure the spare is
                // dropped (its namespace and pasta go).
                nft(&made.path, &grant_rules(&private)).await?;
                made
            }
            None => make_hub(self.names.clone(), hub_rules(&self.blocked, &private)).await?,
        };
        self.spare_hub.refill(self.names.clone(), hub_rules(&self.blocked, &[]));
        Ok(made)
    }

    /// Removes every namespace of this server, spares included, and makes
    /// no more (at shutdown: pasta quits when its namespace's file goes,
    /// and is killed when the server exits).
    pub fn release(&self) {
        self.spares.stop();
        self.spare_hub.stop();
        for entry in std::fs::read_dir(NETNS_DIR).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().starts_with(&self.names.prefix) {
                remove_netns(&entry.path());
            }
        }
    }
}

/// A hub: its namespace forwards, its `rules` hold, then pasta joins it.
async fn make_hub(names: Arc<Names>, rules: String) -> Result<Hub, String> {
    let (path, rtnl) = tokio::task::spawn_blocking(move || {
        let (path, _) = names.next();
        netlink::new_netns(&path, hub_sysctls).map(|rtnl| (path, rtnl))
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|r| r.map_err(|e| e.to_string()))
    .map_err(|e| format!("making a network hub: {e}"))?;
    let mut made = Hub {
        path,
        rtnl: Mutex::new(rtnl),
        pasta: None,
    };
    // Rules first: nothing is connected before they hold.
    nft(&made.path, &rules).await?;
    made.pasta = Some(Pasta::connect(&made.path, DNS_ADDRESS).await?);
    Ok(made)
}

/// The hub kept ready (see the module doc).
#[derive(Default)]
struct SpareHub {
    /// The spare, and whether the server has stopped making namespaces.
    ready: Mutex<(Option<Hub>, bool)>,
    making: std::sync::atomic::AtomicBool,
}

impl SpareHub {
    fn take(&self) -> Option<Hub> {
        self.ready.lock().unwrap().0.take()
    }

    /// Makes a spare in the background unless one is ready or being made.
    fn refill(self: &Arc<Self>, names: Arc<Names>, rules: String) {
        let ready = self.ready.lock().unwrap();
        if ready.0.is_some() || ready.1 || self.making.swap(true, Ordering::AcqRel) {
            return;
        }
        drop(ready);
        let spare = self.clone();
        tokio::spawn(async move {
            match make_hub(names, rules).await {
                Ok(hub) => {
                    let mut ready = spare.ready.lock().unwrap();
                    if !ready.1 {
                        ready.0 = Some(hub);
                    } // else dropped here: its namespace and pasta go
                }
                Err(e) => {
                    tracing::warn!(error = %e, "making a spare network hub failed; the next new hub is made on demand")
                }
            }
            spare.making.store(false, Ordering::Release);
        });
    }

    /// Drops the spare and makes no more (at shutdown).
    fn stop(&self) {
        let spare = {
            let mut ready = self.ready.lock().unwrap();
            ready.1 = true;
            ready.0.take()
        };
        drop(spare);
    }
}

/// Names namespaces `sless-{owner tag}-{n}`, `n` counting up.
struct Names {
    /// `sless-{owner tag}-`: namespaces of a server that is gone are removed at start.
    prefix: String,
    next: AtomicU64,
    /// Files of members' namespaces that are gone, unmounted, for the next
    /// ones to be bound on: a new file takes an inode of /run's file
    /// system (on ext4 without a journal, about 0.3 ms of CPU in a burst:
    /// a third of making a namespace), an old one none. They are removed
    /// with the others at shutdown, or at the next start after a crash.
    unused: Mutex<Vec<PathBuf>>,
}

impl Names {
    /// A name (a new one, or the file of one that is gone), and a new number.
    fn next(&self) -> (PathBuf, u64) {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let path = self.unused.lock().unwrap().pop();
        (
            path.unwrap_or_else(|| PathBuf::from(NETNS_DIR).join(format!("{}{number}", self.prefix))),
            number,
        )
    }

    /// A member namespace, made by `make` at a name from [`Names::next`].
    /// Its number is always new (a member's link in its hub is named by
    /// it, and that of the namespace whose file it reuses may not be gone
    /// yet: the kernel removes a namespace's links after its last user).
    fn member(self: &Arc<Self>, make: impl FnOnce(&Path) -> std::io::Result<Rtnl>) -> std::io::Result<Netns> {
        let (path, number) = self.next();
        let rtnl = make(&path)?;
        Ok(Netns {
            path,
            member: number % MEMBERS,
            rtnl: Arc::new(rtnl),
            hub: Mutex::new(None),
            names: self.clone(),
        })
    }
}

/// The spare namespaces (see the module doc).
#[derive(Default)]
struct Spares {
    state: Mutex<SpareState>,
    /// The keeper waits here while the spares are full.
    wanted: Condvar,
    /// Held while one is made and put with the spares: once `stop` holds
    /// it, none is made any more.
    making: Mutex<()>,
}

#[derive(Default)]
struct SpareState {
    ready: VecDeque<Netns>,
    stopped: bool,
}

impl Spares {
    /// A ready spare, which is then no longer one.
    fn take(&self) -> Option<Netns> {
        let taken = self.state.lock().unwrap().ready.pop_front();
        if taken.is_some() {
            self.wanted.notify_one();
        }
        taken
    }

    /// Makes no more spares and removes those ready.
    fn stop(&self) {
        self.state.lock().unwrap().stopped = true;
        self.wanted.notify_all();
        let _making = self.making.lock().unwrap();
        let ready = std::mem::take(&mut self.state.lock().unwrap().ready);
        for netns in ready {
            remove_netns(&netns.path);
        }
    }
}

/// The keeper thread: keeps `target` spares ready until stopped.
fn keep_spares(spares: &Spares, names: &Arc<Names>, target: usize) {
    let maker = match netlink::NetnsMaker::here() {
        Ok(maker) => maker,
        Err(e) => {
            tracing::warn!(error = %e, "no spare network namespaces: each is made when a sandbox starts");
            return;
        }
    };
    let mut failures = 0u32;
    loop {
        {
            let mut st = spares.state.lock().unwrap();
            while !st.stopped && st.ready.len() >= target {
                st = spares.wanted.wait(st).unwrap();
            }
            if st.stopped {
                return;
            }
        }
        let made = {
            let _making = spares.making.lock().unwrap();
            if spares.state.lock().unwrap().stopped {
                return;
            }
            names
                .member(|path| maker.make(path, member_sysctls))
                .map(|netns| spares.state.lock().unwrap().ready.push_back(netns))
        };
        if let Err(e) = made {
            failures += 1;
            tracing::warn!(error = %e, "making a spare network namespace failed");
            std::thread::sleep(Duration::from_millis(100 << failures.min(6)));
        } else {
            failures = 0;
        }
    }
}

/// Where network namespaces are bound (where `ip netns` keeps them).
const NETNS_DIR: &str = "/run/netns";

/// One sandbox's network namespace; removed when dropped (its veth pair
/// goes with it, and its hub with the hub's last member).
pub struct Netns {
    pub path: PathBuf,
    /// Its number among the members of a hub (address and link).
    member: u64,
    /// A route socket inside it.
    rtnl: Arc<Rtnl>,
    hub: Mutex<Option<Arc<HubCell>>>,
    /// Where its file goes when it is gone.
    names: Arc<Names>,
}

impl Drop for Netns {
    /// Unbinds it; its file stays for the next namespace.
    fn drop(&mut self) {
        let path = std::mem::take(&mut self.path);
        let names = self.names.clone();
        super::confine::off_the_runtime(move || {
            match rustix::mount::unmount(&path, rustix::mount::UnmountFlags::DETACH) {
                Ok(()) => names.unused.lock().unwrap().push(path),
                Err(_) => remove_netns(&path),
            }
        });
    }
}

/// The namespace a tenant's members reach the internet through (see the
/// module doc); pasta is killed and the namespace removed when dropped.
struct Hub {
    path: PathBuf,
    /// Its route socket: one request at a time (each reads its own answer).
    rtnl: Mutex<Rtnl>,
    pasta: Option<Pasta>,
}

impl Hub {
    /// A veth pair between the hub and the member namespace at `path`
    /// (number `member`, route socket `member_rtnl`), addressed and routed.
    fn connect(&self, path: &Path, member: u64, member_rtnl: &Rtnl) -> std::io::Result<()> {
        let n = u32::try_from(member).unwrap_or(0);
        let address = Ipv4Addr::from(MEMBER_NET + 2 + n);
        let link = i32::try_from(16 + n).unwrap_or(i32::MAX);
        let (peer, peer_link) = MEMBER_LINK;
        let member_ns = netlink::open_netns(path)?;
        {
            let rtnl = self.rtnl.lock().unwrap();
            rtnl.add_veth(&format!("sl{n}"), link, peer, peer_link, member_ns.as_fd())?;
            rtnl.add_address(link, HUB_ADDRESS, 32)?;
            rtnl.link_up(link)?;
            rtnl.add_route(address, 32, None, link)?;
        }
        member_rtnl.add_address(peer_link, address, 32)?;
        member_rtnl.link_up(peer_link)?;
        member_rtnl.add_route(Ipv4Addr::UNSPECIFIED, 0, Some(HUB_ADDRESS), peer_link)
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        drop(self.pasta.take());
        remove_netns(&self.path);
    }
}

/// In a member's namespace: no IPv6 on the links it gets (its end of the
/// veth pair, made later, takes the `default` settings), so nothing of
/// IPv6 leaves it. Its loopback, there already, keeps `::1`: turning IPv6
/// off on a link that exists (`all`, or the link's own) needs the kernel's
/// network lock, which that write only tries, and retries at once while
/// another holds it (`restart_syscall`), spinning on the CPU. In a burst,
/// while joins and the kernel's clean-up of gone namespaces held it, that
/// was a third of the server's CPU (strace: 9 601 writes for 157
/// namespaces); `default` takes no lock.
fn member_sysctls() -> std::io::Result<()> {
    disable_ipv6(&["default"])
}

/// Writes 1 to `disable_ipv6` of each of `confs` (`all`, `default`, ...).
fn disable_ipv6(confs: &[&str]) -> std::io::Result<()> {
    for conf in confs {
        // A kernel without IPv6 has no such file: nothing to turn off.
        if let Err(e) = std::fs::write(format!("/proc/sys/net/ipv6/conf/{conf}/disable_ipv6"), "1") {
            if e.kind() != std::io::ErrorKind::NotFound {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// In a hub's namespace: no IPv6 at all, and IPv4 forwarding (which its
/// rules fence). Made once per tenant, so the lock's spin is rare here.
fn hub_sysctls() -> std::io::Result<()> {
    disable_ipv6(&["all", "default"])?;
    std::fs::write("/proc/sys/net/ipv4/ip_forward", "1")
}

fn remove_netns(path: &Path) {
    let _ = rustix::mount::unmount(path, rustix::mount::UnmountFlags::DETACH);
    let _ = std::fs::remove_file(path);
}

/// Whether a namespace name, `sless-{owner tag}-{n}`, is one of a server
/// process that is gone.
fn owner_gone(name: &str) -> bool {
    name.strip_prefix("sless-")
        .and_then(|n| n.rsplit_once('-'))
        .filter(|(_, n)| n.parse::<u64>().is_ok())
        .and_then(|(tag, _)| owner::is_gone(tag))
        .unwrap_or(false)
}

/// Namespaces of server processes that are gone, and their pasta processes
/// (which outlived their server before they ran under the keeper).
pub(crate) fn remove_stale() {
    pasta::stop_stale(owner_gone);
    for entry in std::fs::read_dir("/run/netns").into_iter().flatten().flatten() {
        if owner_gone(&entry.file_name().to_string_lossy()) {
            remove_netns(&entry.path());
        }
    }
}

/// The host's own IPv4 addresses and default gateways (outside the ranges
/// already blocked they would reach the host or its router).
fn host_addresses() -> Vec<Ipv4Addr> {
    let mut found = Vec::new();
    // /proc/net/fib_trie lists local addresses as "/32 host LOCAL".
    if let Ok(trie) = std::fs::read_to_string("/proc/net/fib_trie") {
        let mut last = None;
        for line in trie.lines() {
            let line = line.trim();
            if let Some(rest) = line.strip_prefix("|-- ") {
                last = rest.parse::<Ipv4Addr>().ok();
            } else if line.contains("/32 host LOCAL") {
                found.extend(last);
            }
        }
    }
    // Default gateways from /proc/net/route (little-endian hex).
    if let Ok(routes) = std::fs::read_to_string("/proc/net/route") {
        for line in routes.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() > 2 && fields[1] == "00000000" {
                if let Ok(gw) = u32::from_str_radix(fields[2], 16) {
                    found.push(Ipv4Addr::from(gw.swap_bytes()));
                }
            }
        }
    }
    found.retain(|a| !a.is_unspecified() && !a.is_loopback());
    found.sort();
    found.dedup();
    found
}

/// What a hub refuses, nft syntax: the special-purpose ranges and the
/// host's own addresses and gateways.
fn blocked(host: &[Ipv4Addr]) -> String {
    let mut blocked: Vec<String> = BLOCKED_V4.iter().map(|s| s.to_string()).collect();
    blocked.extend(host.iter().map(|a| a.to_string()));
    blocked.join(", ")
}

/// The nftables rules of a hub: members (links `sl*`) reach DNS at pasta's
/// forwarder, the `private` destinations and public IPv4; nothing else, not
/// each other, not the hub. Refused at once, not by timeout. Replies come
/// back by connection tracking; what leaves is masqueraded.
///
/// A segment from pasta that connection tracking calls invalid (seen: a
/// bare segment without flags, mid-handshake with a distant server) cannot
/// be mapped back to its member, so it would reach the hub's own TCP stack,
/// which answers it with a reset that kills the member's connection (npm
/// and pip in builds hung on TLS): such segments are dropped instead.
///
/// The `private` destinations are accepted in chain `grants`, which the
/// forward chain jumps to after DNS: a spare hub (made with none) taken by
/// a granted tenant gets them added there ([`grant_rules`]).
fn hub_rules(blocked: &str, private: &[&PrivateEgress]) -> String {
    let private: String = private.iter().map(|p| format!("    {}\n", p.rule())).collect();
    format!(
        "table inet sless {{\n\
         \x20 chain grants {{\n\
         {private}\
         \x20 }}\n\
         \x20 chain input {{\n\
         \x20   type filter hook input priority 0; policy accept;\n\
         \x20   ct state invalid drop\n\
         \x20   iifname \"sl*\" reject with icmpx type admin-prohibited\n\
         \x20 }}\n\
         \x20 chain forward {{\n\
         \x20   type filter hook forward priority 0; policy drop;\n\
         \x20   ct state established,related accept\n\
         \x20   iifname != \"sl*\" drop\n\
         \x20   oifname \"sl*\" reject with icmpx type admin-prohibited\n\
         \x20   ip daddr {DNS_ADDRESS} udp dport 53 accept\n\
         \x20   ip daddr {DNS_ADDRESS} tcp dport 53 accept\n\
         \x20   jump grants\n\
         \x20   ip daddr {{ {blocked} }} reject with icmp type admin-prohibited\n\
         \x20   meta nfproto ipv4 accept\n\
         \x20   reject with icmpx type admin-prohibited\n\
         \x20 }}\n\
         }}\n\
         table ip sless_nat {{\n\
         \x20 chain postrouting {{\n\
         \x20   type nat hook postrouting priority 100; policy accept;\n\
         \x20   oifname != \"sl*\" masquerade\n\
         \x20 }}\n\
         }}\n"
    )
}

/// What gives a hub made with no private destination those of `private`
/// (nft syntax): one rule each, added to its chain `grants`. Adding takes
/// nft a few milliseconds; replacing every rule (`flush ruleset`) took
/// three times that, most of it the kernel's retiring of the old ones.
fn grant_rules(private: &[&PrivateEgress]) -> String {
    private
        .iter()
        .map(|p| format!("add rule inet sless grants {}\n", p.rule()))
        .collect()
}

async fn nft(netns: &Path, rules: &str) -> Result<(), String> {
    let mut cmd = Command::new("/usr/bin/nsenter");
    cmd.arg(format!("--net={}", netns.display()))
        .args(["/usr/sbin/nft", "-f", "-"])
        .env_clear();
    run_with_input(&mut cmd, rules.as_bytes(), "fencing the network namespace (nft)").await
}

async fn run_with_input(cmd: &mut Command, input: &[u8], what: &str) -> Result<(), String> {
    use tokio::io::AsyncWriteExt;
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| format!("{what}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input).await.map_err(|e| format!("{what}: {e}"))?;
    }
    let out = tokio::time::timeout(std::time::Duration::from_secs(20), child.wait_with_output())
        .await
        .map_err(|_| format!("{what}: timed out"))?
        .map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file of a member that is gone is bound again by the next one,
    /// which gets a number of its own. Needs root (it makes namespaces).
    #[test]
    fn a_gone_members_file_is_bound_again_with_a_new_number() {
        use std::os::unix::fs::MetadataExt;
        assert!(
            rustix::process::geteuid().is_root(),
            "making network namespaces needs root"
        );
        std::fs::create_dir_all(NETNS_DIR).unwrap();
        let names = Arc::new(Names {
            prefix: format!("sless-test-{}-", std::process::id()),
            next: AtomicU64::new(0),
            unused: Mutex::new(Vec::new()),
        });
        let make = |names: &Arc<Names>| names.member(|path| netlink::new_netns(path, member_sysctls)).unwrap();
        // While a namespace is bound on it, the file's inode is the namespace's.
        let inode = |path: &Path| std::fs::metadata(path).unwrap().ino();

        let first = make(&names);
        let (path, number, bound) = (first.path.clone(), first.member, inode(&first.path));
        drop(first); // not on a runtime: unbound at once
        assert_eq!(*names.unused.lock().unwrap(), vec![path.clone()]);
        let file = inode(&path);
        assert_ne!(file, bound, "the file stays, unbound");

        let second = make(&names);
        assert_eq!(second.path, path, "bound on the file of the one that is gone");
        assert_ne!(second.member, number, "with a number of its own");
        let rebound = inode(&path);
        assert!(rebound != file && rebound != bound, "a new namespace is bound on it");
        assert!(names.unused.lock().unwrap().is_empty());
        let third = make(&names);
        assert_ne!(third.path, path, "a file in use is no one else's");

        for netns in [second, third] {
            let path = netns.path.clone();
            drop(netns);
            remove_netns(&path);
            assert!(!path.exists());
        }
    }

    #[test]
    fn private_egress_entries_parse_or_name_the_bad_one() {
        let parsed =
            PrivateEgress::parse_all(&["billing=10.0.0.5:5432".into(), " ops=192.168.1.0/24 ".into()]).unwrap();
        assert_eq!(parsed[0].namespace, "billing");
        assert_eq!((parsed[0].prefix, parsed[0].port), (32, Some(5432)));
        assert_eq!((parsed[1].prefix, parsed[1].port), (24, None));
        assert_eq!(parsed[0].rule(), "ip daddr 10.0.0.5/32 th dport 5432 accept");
        for bad in [
            "10.0.0.5",
            "Bad=10.0.0.5",
            "ns=10.0.0.5:0",
            "ns=10.0.0.5/33",
            "ns=host:80",
            "ns=::1",
        ] {
            let err = PrivateEgress::parse_all(&[bad.into()]).unwrap_err();
            assert!(err.contains(bad), "{err}");
        }
    }

    #[test]
    fn hub_rules_refuse_private_ranges_and_the_hosts_addresses_but_what_is_granted() {
        let grant = PrivateEgress::parse_all(&["ns=10.1.2.3:5432".into()]).unwrap();
        let text = hub_rules(&blocked(&["192.0.2.2".parse().unwrap()]), &[&grant[0]]);
        for range in [
            "10.0.0.0/8",
            "127.0.0.0/8",
            "169.254.0.0/16",
            "172.16.0.0/12",
            "192.168.0.0/16",
            "192.0.2.2",
        ] {
            assert!(text.contains(range), "{range} missing: {text}");
        }
        let at = |needle: &str| text.find(needle).unwrap_or_else(|| panic!("{needle} missing: {text}"));
        // The grants are accepted before the ranges are refused, after members are kept apart.
        assert!(at("oifname \"sl*\" reject") < at("jump grants"));
        assert!(at("jump grants") < at("reject with icmp type admin-prohibited"));
        let grants = &text[at("chain grants {")..at("chain input")];
        assert!(grants.contains("ip daddr 10.1.2.3/32 th dport 5432 accept"), "{text}");
        assert_eq!(
            grant_rules(&[&grant[0]]),
            "add rule inet sless grants ip daddr 10.1.2.3/32 th dport 5432 accept\n"
        );
        // What tracking cannot map back to a member never reaches the hub's
        // own TCP stack, which would reset the member's connection.
        assert!(at("chain input") < at("ct state invalid drop"));
        assert!(at("ct state invalid drop") < at("chain forward"));
        assert!(text.trim_end().ends_with('}'));
    }
}
