//! What a handler reaches on the network: the internet through pasta, not
//! the machine's loopback services; nothing with `network: none`; an
//! operator's private destination only from the namespace it is granted to.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use std::time::Duration;

use super::harness::{eventually, Backend, Server};
use super::leftovers::{namespaces_of, pastas_of};

/// Python: `connect(host, port)` says "CONNECTED" or "BLOCKED:{error}".
macro_rules! connect_py {
    () => {
        r#"
def connect(host, port):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, port))
        return "CONNECTED"
    except OSError as e:
        return "BLOCKED:" + type(e).__name__
    finally:
        s.close()
"#
    };
}

/// Tries the machine's loopback services and an "internet" server from
/// inside a handler, and lists what the network looks like there; then
/// stays `linger` seconds (default none) before it answers.
const NET_PROBE: &[u8] = concat!(
    "import socket, time, urllib.request\n",
    connect_py!(),
    r#"
def handle(event, context):
    out = {"ports": {str(p): connect("127.0.0.1", p) for p in event["ports"]}}
    try:
        with urllib.request.urlopen(event["url"], timeout=5) as r:
            out["egress"] = r.read().decode()
    except Exception as e:
        out["egress"] = "FAILED:" + type(e).__name__
    out["interfaces"] = sorted(name for _, name in socket.if_nameindex())
    out["resolv"] = open("/etc/resolv.conf").read()
    time.sleep(event.get("linger", 0))
    return out
"#
)
.as_bytes();

/// An HTTP server in a network namespace this test makes, joined to the
/// host by a veth pair: "the internet" at a public-looking documentation
/// address (TEST-NET-2), or an operator's private service at a private
/// one. Traffic to it never leaves this machine. Removed when dropped.
struct Peer {
    netns: String,
    veth: String,
    server: std::process::Child,
    /// `address:port` of its server.
    addr: String,
    url: String,
    _dir: tempfile::TempDir,
}

impl Peer {
    /// The internet stand-in, at 198.51.100.0/24.
    fn internet(token: &str) -> Peer {
        Peer::start('v', "198.51.100", token)
    }

    /// A private service, at 10.213.x.0/24.
    fn private(token: &str) -> Peer {
        Peer::start('p', &format!("10.213.{}", std::process::id() / 64 % 256), token)
    }

    /// Serves `token` at an address of `net24` (`a.b.c`), one /30 of it per
    /// test process; `tag` tells the kinds of peer apart in device names.
    fn start(tag: char, net24: &str, token: &str) -> Peer {
        let id = std::process::id() % 100_000;
        let (netns, veth, peer) = (
            format!("slt-{tag}-{id}"),
            format!("slt{tag}{id}a"),
            format!("slt{tag}{id}b"),
        );
        let base = (id % 64) * 4;
        let (host_ip, peer_ip) = (format!("{net24}.{}", base + 1), format!("{net24}.{}", base + 2));
        let ip = |args: &[&str]| {
            let status = std::process::Command::new("ip").args(args).status().expect("ip runs");
            assert!(status.success(), "ip {args:?} failed");
        };
        let _ = std::process::Command::new("ip").args(["netns", "del", &netns]).status();
        let _ = std::process::Command::new("ip").args(["link", "del", &veth]).status();
        ip(&["netns", "add", &netns]);
        ip(&["link", "add", &veth, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", &peer, "netns", &netns]);
        ip(&["addr", "add", &format!("{host_ip}/30"), "dev", &veth]);
        ip(&["link", "set", &veth, "up"]);
        ip(&[
            "netns",
            "exec",
            &netns,
            "ip",
            "addr",
            "add",
            &format!("{peer_ip}/30"),
            "dev",
            &peer,
        ]);
        ip(&["netns", "exec", &netns, "ip", "link", "set", &peer, "up"]);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("index.html"), token).unwrap();
        let server = std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &netns,
                "python3",
                "-m",
                "http.server",
                "8000",
                "--bind",
                &peer_ip,
            ])
            .arg("--directory")
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("python3 http.server starts");
        let addr: std::net::SocketAddr = format!("{peer_ip}:8000").parse().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(200)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "the peer's server did not come up"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Peer {
            netns,
            veth,
            server,
            addr: format!("{peer_ip}:8000"),
            url: format!("http://{peer_ip}:8000/index.html"),
            _dir: dir,
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.veth])
            .status();
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.netns])
            .status();
    }
}

#[tokio::test]
async fn a_handler_reaches_the_internet_but_not_the_machines_services() {
    let peer = Peer::internet("hello from the internet");
    let server = Server::start(Backend::Sqlite).await;
    let api_port: u16 = server.url.rsplit(':').next().unwrap().parse().unwrap();
    server
        .deploy(
            "ns",
            "net",
            json!({"runtime": "python3.11"}),
            &[("handler.py", NET_PROBE)],
        )
        .await;
    server
        .deploy(
            "ns",
            "offline",
            json!({"runtime": "python3.11", "network": "none"}),
            &[("handler.py", NET_PROBE)],
        )
        .await;
    let event = json!({"ports": [5432, 5672, api_port], "url": peer.url});
    let (status, _, text) = server.invoke(Method::POST, "/fn/ns/net", &event.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let out: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(out["egress"], "hello from the internet", "internet egress works: {out}");
    for port in ["5432", "5672", &api_port.to_string()] {
        let seen = out["ports"][port].as_str().unwrap();
        assert!(
            seen.starts_with("BLOCKED"),
            "127.0.0.1:{port} reachable from a handler: {out}"
        );
    }
    assert_eq!(
        out["resolv"], "nameserver 169.254.1.53\noptions timeout:2 attempts:2\n",
        "DNS through pasta's forwarder: {out}"
    );

    let (status, _, text) = server.invoke(Method::POST, "/fn/ns/offline", &event.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let out: Value = serde_json::from_str(&text).unwrap();
    assert!(
        out["egress"].as_str().unwrap().starts_with("FAILED"),
        "network none: {out}"
    );
    assert_eq!(out["interfaces"], json!(["lo"]), "network none is loopback only: {out}");
    drop(peer);
}

#[tokio::test]
async fn a_private_destination_is_reachable_from_its_namespace_only() {
    let peer = Peer::private("hello from the private network");
    let grant = format!("alpha={}", peer.addr);
    let server = Server::start_with(Backend::Sqlite, &[("SLESS_PRIVATE_EGRESS", &grant)]).await;
    deploy_probes(&server, &["alpha", "beta"]).await;
    let event = json!({"ports": [], "url": peer.url});
    let alpha = probe(&server, "alpha", &event).await;
    let beta = probe(&server, "beta", &event).await;
    assert_granted_to_alpha_only(&alpha, &beta, &grant);
    drop(peer);
}

/// Deploys the network probe as `net` in each of `namespaces`.
async fn deploy_probes(server: &Server, namespaces: &[&str]) {
    for ns in namespaces {
        server
            .deploy(
                ns,
                "net",
                json!({"runtime": "python3.11"}),
                &[("handler.py", NET_PROBE)],
            )
            .await;
    }
}

/// What the probe of namespace `ns` answers to `event`.
async fn probe(server: &Server, ns: &str, event: &Value) -> Value {
    let (status, _, text) = server
        .invoke(Method::POST, &format!("/fn/{ns}/net"), &event.to_string())
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    serde_json::from_str(&text).unwrap()
}

/// `alpha`, granted the private peer by `grant`, reached it; `beta` did not.
fn assert_granted_to_alpha_only(alpha: &Value, beta: &Value, grant: &str) {
    assert_eq!(
        alpha["egress"], "hello from the private network",
        "{grant} opens the destination to alpha: {alpha}"
    );
    assert!(
        beta["egress"].as_str().unwrap().starts_with("FAILED"),
        "{grant} opened the destination to beta too: {beta}"
    );
}

/// Listens on port 8080 of its instance from import on, and answers its
/// address and whether it reaches itself there; with `targets`, tries those.
const LISTENER: &[u8] = concat!(
    connect_py!(),
    r#"
import socket, threading

server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", 8080))
server.listen(8)

def serve():
    while True:
        conn, _ = server.accept()
        conn.close()

threading.Thread(target=serve, daemon=True).start()

def handle(event, context):
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.connect(("198.51.100.1", 9))  # picks the route, sends nothing
    address = probe.getsockname()[0]
    targets = event.get("targets") or [[address, 8080]]
    return {"address": address, "reached": {f"{h}:{p}": connect(h, p) for h, p in targets}}
"#
)
.as_bytes();

#[tokio::test]
async fn instances_sharing_a_tenants_network_do_not_reach_each_other_or_the_hub() {
    let server = Server::start(Backend::Sqlite).await;
    for (ns, name) in [("alpha", "one"), ("alpha", "two"), ("beta", "three")] {
        server
            .deploy(ns, name, json!({"runtime": "python3.11"}), &[("handler.py", LISTENER)])
            .await;
    }
    let (status, _, text) = server.invoke(Method::POST, "/fn/alpha/one", "{}").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let one: Value = serde_json::from_str(&text).unwrap();
    let address = one["address"].as_str().unwrap().to_string();
    assert!(address.starts_with("100."), "a member's own address: {one}");
    let own = format!("{address}:8080");
    assert_eq!(one["reached"][&own], "CONNECTED", "it listens there: {one}");

    let event = json!({"targets": [[address, 8080], ["169.254.0.1", 8080]]}).to_string();
    for caller in ["/fn/alpha/two", "/fn/beta/three"] {
        let (status, _, text) = server.invoke(Method::POST, caller, &event).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let out: Value = serde_json::from_str(&text).unwrap();
        assert_ne!(out["address"], one["address"], "each instance its own namespace: {out}");
        for target in [own.as_str(), "169.254.0.1:8080"] {
            let seen = out["reached"][target].as_str().unwrap();
            assert!(seen.starts_with("BLOCKED"), "{caller} reached {target}: {out}");
        }
    }
}

/// Says which network namespace its instance is in, its address there,
/// and the links that have an IPv6 address.
const NETNS_REPORT: &[u8] = br#"
import os, socket

def handle(event, context):
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.connect(("198.51.100.1", 9))  # picks the route, sends nothing
    with open("/proc/net/if_inet6") as f:
        ipv6 = sorted({line.split()[-1] for line in f if line.strip()})
    with open("/proc/sys/net/ipv6/conf/eth0/disable_ipv6") as f:
        eth0_ipv6_off = f.read().strip() == "1"
    return {"net": os.readlink("/proc/self/ns/net"), "address": probe.getsockname()[0],
            "ipv6_links": ipv6, "eth0_ipv6_off": eth0_ipv6_off}
"#;

#[tokio::test]
async fn namespaces_made_ahead_of_demand_serve_one_instance_each_and_go_at_shutdown() {
    let mut server = Server::start_with(Backend::Sqlite, &[("SLESS_IDLE_TIMEOUT_SEC", "1")]).await;
    let pid = server.pid();
    let names: Vec<String> = (0..8).map(|i| format!("f{i}")).collect();
    for name in &names {
        server
            .deploy(
                "alpha",
                name,
                json!({"runtime": "python3.11"}),
                &[("handler.py", NETNS_REPORT)],
            )
            .await;
    }
    for name in &names {
        let series = format!("sless_instances{{namespace=\"alpha\",function=\"{name}\"}}");
        server.wait_metric(&series, 0.0, 30).await;
    }
    // Every function cold at once: more starts than warm shims, so most
    // take a namespace made ahead of demand (or make one) side by side.
    let calls = names.iter().map(|name| {
        let path = format!("/fn/alpha/{name}");
        let server = &server;
        async move { server.invoke(Method::GET, &path, "").await }
    });
    let mut nets = std::collections::HashSet::new();
    let mut addresses = std::collections::HashSet::new();
    for (status, _, text) in futures::future::join_all(calls).await {
        assert_eq!(status, StatusCode::OK, "{text}");
        let out: Value = serde_json::from_str(&text).unwrap();
        nets.insert(out["net"].as_str().unwrap().to_string());
        addresses.insert(out["address"].as_str().unwrap().to_string());
        // Nothing of IPv6 leaves it: its link out has none (loopback may).
        assert_eq!(out["eth0_ipv6_off"], true, "{out}");
        assert!(out["ipv6_links"].as_array().unwrap().iter().all(|l| l == "lo"), "{out}");
    }
    assert_eq!(nets.len(), names.len(), "each instance its own namespace: {nets:?}");
    assert_eq!(addresses.len(), names.len(), "each its own address: {addresses:?}");
    assert!(server.terminate_wait().success());
    assert_eq!(
        namespaces_of(pid),
        Vec::<String>::new(),
        "spares and instances' namespaces removed at shutdown"
    );
}

/// A tenant whose hub went (its instances idled out) takes the hub kept
/// ready, pasta connected, at its next cold start instead of waiting for a
/// new one; another spare is made after.
#[tokio::test]
async fn a_tenant_whose_hub_went_takes_the_spare_one_at_its_next_cold_start() {
    let server = Server::start_with(Backend::Sqlite, &[("SLESS_IDLE_TIMEOUT_SEC", "1")]).await;
    let pid = server.pid();
    let sleeper = b"import time\n\ndef handle(event, context):\n    time.sleep(3)\n    return 'slept'\n";
    server
        .deploy(
            "ns",
            "sleeper",
            json!({"runtime": "python3.11"}),
            &[("handler.py", sleeper)],
        )
        .await;
    // Its deploy's check made the tenant's hub; once its member is gone,
    // only the spare's pasta is left, with no member yet.
    let (spare, hub) = only_the_spare_hub(pid).await;
    let url = format!("{}/fn/ns/sleeper", server.url);
    let call = tokio::spawn(async move { reqwest::get(url).await.unwrap().text().await.unwrap() });
    a_member_joins(&hub).await;
    assert_eq!(call.await.unwrap(), "\"slept\"");
    eventually(Duration::from_secs(30), || async {
        let pastas = pastas_of(pid);
        (pastas.len() == 2 && pastas.contains(&spare))
            .then_some(())
            .ok_or(format!("the tenant's hub and a new spare: {pastas:?}"))
    })
    .await;
}

/// A tenant granted a private destination takes the hub kept ready too,
/// with its own rules in place of the spare's: it reaches its destination
/// through that hub, and another tenant still does not reach it.
#[tokio::test]
async fn a_granted_tenant_takes_the_spare_hub_with_its_own_rules() {
    let peer = Peer::private("hello from the private network");
    let grant = format!("alpha={}", peer.addr);
    let server = Server::start_with(
        Backend::Sqlite,
        &[("SLESS_PRIVATE_EGRESS", &grant), ("SLESS_IDLE_TIMEOUT_SEC", "1")],
    )
    .await;
    let pid = server.pid();
    deploy_probes(&server, &["alpha", "beta"]).await;
    let (_, hub) = only_the_spare_hub(pid).await;
    let url = format!("{}/fn/alpha/net", server.url);
    let event = json!({"ports": [], "url": peer.url, "linger": 3}).to_string();
    let call = tokio::spawn(async move {
        let response = reqwest::Client::new().post(url).body(event).send().await.unwrap();
        response.text().await.unwrap()
    });
    a_member_joins(&hub).await;
    let alpha: Value = serde_json::from_str(&call.await.unwrap()).unwrap();
    let beta = probe(&server, "beta", &json!({"ports": [], "url": peer.url})).await;
    assert_granted_to_alpha_only(&alpha, &beta, &grant);
    drop(peer);
}

/// Waits until the only pasta of server `pid` is the spare hub's (the
/// hubs its builds and deploys' checks made are gone): its pid, and the
/// hub's namespace (named in pasta's arguments).
async fn only_the_spare_hub(pid: u32) -> (u32, String) {
    eventually(Duration::from_secs(60), || async {
        let spare = match pastas_of(pid)[..] {
            [spare] => spare,
            ref other => return Err(format!("pasta processes {other:?}, not the spare's alone")),
        };
        let cmdline = std::fs::read(format!("/proc/{spare}/cmdline")).unwrap_or_default();
        let hub = String::from_utf8_lossy(&cmdline)
            .split('\0')
            .find(|arg| arg.starts_with("/run/netns/"))
            .ok_or(format!("pasta {spare} names no namespace"))?
            .to_string();
        // A hub with a member is a tenant's, before the next spare is made.
        match links_in(&hub).iter().any(|l| l.starts_with("sl")) {
            true => Err(format!("the only hub, {hub}, holds a member: a tenant's")),
            false => Ok((spare, hub)),
        }
    })
    .await
}

/// Waits until the hub bound at `hub` holds a member.
async fn a_member_joins(hub: &str) {
    eventually(Duration::from_secs(10), || async {
        let links = links_in(hub);
        links
            .iter()
            .any(|l| l.starts_with("sl"))
            .then_some(())
            .ok_or(format!("the spare hub holds no member: {links:?}"))
    })
    .await;
}

/// The network links of the namespace bound at `netns`.
fn links_in(netns: &str) -> Vec<String> {
    let out = std::process::Command::new("/usr/bin/nsenter")
        .arg(format!("--net={netns}"))
        .args(["cat", "/proc/net/dev"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(2)
        .filter_map(|line| line.split(':').next())
        .map(|name| name.trim().to_string())
        .collect()
}
