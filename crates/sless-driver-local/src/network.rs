//! Network namespaces of instances and builds. Each gets a namespace of its
//! own (`ip netns add`), joined to the internet by `pasta` (Debian's passt,
//! a maintained user-mode network: the host's loopback is not mapped in, no
//! port is forwarded either way) and fenced by nftables rules inside it that
//! refuse loopback, private, link-local, shared, multicast and reserved
//! ranges, the host's own addresses and its gateway, and all of IPv6. Names
//! resolve through pasta's DNS forwarder at [`DNS_ADDRESS`] (the one
//! link-local destination let through, port 53 only), so the machine's own
//! resolver may sit at a private address without opening that range.
//!
//! A namespace is made when the warm instance is started, never on the
//! request path. A function with `network: none` cuts pasta off when it is
//! loaded (its tap goes with it: loopback only). The operator's private
//! destinations (`SLESS_PRIVATE_EGRESS`) are opened per namespace at load.
//!
//! **Invariant:** no sandboxed process runs in a namespace before its rules
//! are in place (the sandbox is started inside it only after `create`).
//! Namespaces are named `sless-{owner tag}-{n}` (the server's pid and start
//! time, see `owner`); those of a server that is gone, and their pasta
//! processes, are removed when a server starts.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tokio::process::Command;

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
        format!(
            "insert rule inet sless output ip daddr {}/{}{port} accept\n",
            self.address, self.prefix
        )
    }
}

/// Makes and removes the namespaces of this server process.
pub struct Networks {
    /// `sless-{server pid}-`: namespaces of a server that is gone are removed at start.
    prefix: String,
    rules: String,
    next: AtomicU64,
    private: Vec<PrivateEgress>,
    /// A resolv.conf naming [`DNS_ADDRESS`], bound over the sandbox's.
    pub resolv_conf: PathBuf,
}

impl Networks {
    /// Checks the tools, writes the resolver file, removes namespaces left by
    /// dead servers and fixes the rules (the host's addresses are read now).
    pub fn start(data_dir: &Path, private: Vec<PrivateEgress>) -> anyhow::Result<Networks> {
        for tool in [
            pasta::PASTA,
            pasta::SETPRIV,
            "/usr/sbin/nft",
            "/usr/sbin/ip",
            "/usr/bin/nsenter",
        ] {
            if !Path::new(tool).exists() {
                anyhow::bail!(
                    "network isolation needs {tool} (packages passt, nftables, iproute2, util-linux; scripts/setup-run.sh installs them), \
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
        Ok(Networks {
            prefix: format!("sless-{}-", owner::own_tag()),
            rules: rules(&host_addresses()),
            next: AtomicU64::new(0),
            private,
            resolv_conf,
        })
    }

    /// A new namespace with internet egress and the blocks in place.
    pub async fn create(&self) -> Result<Netns, String> {
        let name = format!("{}{}", self.prefix, self.next.fetch_add(1, Ordering::Relaxed));
        run(
            Command::new("/usr/sbin/ip").args(["netns", "add", &name]),
            "making a network namespace",
        )
        .await?;
        let netns = Netns {
            path: PathBuf::from("/run/netns").join(&name),
            pasta: Mutex::new(None),
        };
        // Rules first: nothing is connected before they hold.
        nft(&netns.path, &self.rules).await?;
        let pasta = Pasta::connect(&netns.path, DNS_ADDRESS).await?;
        *netns.pasta.lock().unwrap() = Some(pasta);
        Ok(netns)
    }

    /// Removes every namespace of this server (at shutdown: pasta quits when
    /// its namespace's file goes, and is killed when the server exits).
    pub fn release(&self) {
        for entry in std::fs::read_dir("/run/netns").into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().starts_with(&self.prefix) {
                remove_netns(&entry.path());
            }
        }
    }

    /// Opens the operator's private destinations for `namespace`, if it has any.
    pub async fn open_private(&self, netns: &Netns, namespace: &str) -> Result<(), String> {
        let rules: String = self
            .private
            .iter()
            .filter(|p| p.namespace == namespace)
            .map(PrivateEgress::rule)
            .collect();
        if rules.is_empty() {
            return Ok(());
        }
        nft(&netns.path, &rules).await
    }
}

/// One network namespace; removed (and its pasta with it) when dropped.
pub struct Netns {
    pub path: PathBuf,
    /// None once it is cut off.
    pasta: Mutex<Option<Pasta>>,
}

impl Netns {
    /// Takes the namespace off the network: pasta stops and its tap device
    /// goes, loopback stays. Waits until pasta is gone.
    pub async fn cut_off(&self) -> Result<(), String> {
        let pasta = self.pasta.lock().unwrap().take();
        match pasta {
            Some(pasta) => pasta.stop().await,
            None => Ok(()),
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        drop(self.pasta.get_mut().unwrap().take());
        remove_netns(&self.path);
    }
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

/// The nftables rules of a namespace: refuse (at once, not by timeout)
/// everything but loopback, DNS to pasta's forwarder, and public IPv4.
fn rules(host: &[Ipv4Addr]) -> String {
    let mut blocked: Vec<String> = BLOCKED_V4.iter().map(|s| s.to_string()).collect();
    blocked.extend(host.iter().map(|a| a.to_string()));
    format!(
        "table inet sless {{\n\
         \x20 chain output {{\n\
         \x20   type filter hook output priority 0; policy accept;\n\
         \x20   oif \"lo\" accept\n\
         \x20   ip daddr {DNS_ADDRESS} udp dport 53 accept\n\
         \x20   ip daddr {DNS_ADDRESS} tcp dport 53 accept\n\
         \x20   ip daddr {{ {} }} reject with icmp type admin-prohibited\n\
         \x20   meta nfproto ipv6 reject with icmpv6 type admin-prohibited\n\
         \x20 }}\n\
         }}\n",
        blocked.join(", ")
    )
}

async fn nft(netns: &Path, rules: &str) -> Result<(), String> {
    let mut cmd = Command::new("/usr/bin/nsenter");
    cmd.arg(format!("--net={}", netns.display()))
        .args(["/usr/sbin/nft", "-f", "-"])
        .env_clear();
    run_with_input(&mut cmd, rules.as_bytes(), "fencing the network namespace (nft)").await
}

async fn run(cmd: &mut Command, what: &str) -> Result<(), String> {
    run_with_input(cmd, &[], what).await
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

    #[test]
    fn private_egress_entries_parse_or_name_the_bad_one() {
        let parsed =
            PrivateEgress::parse_all(&["billing=10.0.0.5:5432".into(), " ops=192.168.1.0/24 ".into()]).unwrap();
        assert_eq!(parsed[0].namespace, "billing");
        assert_eq!((parsed[0].prefix, parsed[0].port), (32, Some(5432)));
        assert_eq!((parsed[1].prefix, parsed[1].port), (24, None));
        assert!(parsed[0].rule().contains("ip daddr 10.0.0.5/32 th dport 5432 accept"));
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
    fn rules_refuse_private_ranges_and_the_hosts_addresses() {
        let text = rules(&["192.0.2.2".parse().unwrap()]);
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
        assert!(text.contains("meta nfproto ipv6 reject"));
    }
}
