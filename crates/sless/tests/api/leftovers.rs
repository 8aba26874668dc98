//! What a server leaves on the machine when it stops or is killed: nothing
//! that lasts. Its pasta processes die with it, SIGKILL included; its
//! sandboxes' tmpfs mounts go when they stop and when the server shuts
//! down; after a kill, the next server on the data dir removes the mounts
//! and network namespaces the killed one left, and so does the harness when
//! it drops a server.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::json;

use super::harness::{eventually, Backend, Server};

const HELLO: &[u8] = b"def handle(event, context):\n    return 'hello'\n";

/// Live pasta processes serving a namespace of server `pid`
/// (`/run/netns/sless-{pid}-…`), whoever their parent is now.
fn pastas_of(pid: u32) -> Vec<u32> {
    let needle = format!("/run/netns/sless-{pid}-");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let comm_and_state = stat.split_once('(').map(|(_, rest)| rest).unwrap_or("");
            let pasta = comm_and_state.starts_with("pasta") || comm_and_state.starts_with("passt");
            let zombie = comm_and_state
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']));
            pasta && !zombie
        })
        .filter(|p| {
            let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains(&needle)
        })
        .collect()
}

/// Mount points at or below `dir` (canonical), as the kernel lists them.
fn mounts_under(dir: &Path) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|point| Path::new(point).starts_with(dir))
        .map(str::to_string)
        .collect()
}

/// Network namespaces named for server `pid`.
fn namespaces_of(pid: u32) -> Vec<String> {
    let prefix = format!("sless-{pid}-");
    std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

fn slots_of(server: &Server) -> PathBuf {
    server
        .data_path()
        .canonicalize()
        .unwrap()
        .join("slots")
        .join(server.pid().to_string())
}

async fn deploy_and_call(server: &Server, name: &str) {
    server
        .deploy("ns", name, json!({"runtime": "python3.11"}), &[("handler.py", HELLO)])
        .await;
    let (status, _, text) = server.invoke(Method::GET, &format!("/fn/ns/{name}"), "").await;
    assert_eq!(status, StatusCode::OK, "{text}");
}

#[tokio::test]
async fn a_killed_servers_pasta_dies_with_it_and_the_next_start_clears_the_rest() {
    let mut server = Server::start(Backend::Sqlite).await;
    deploy_and_call(&server, "hello").await;
    let pid = server.pid();
    let slots = slots_of(&server);
    let data = server.data_path().canonicalize().unwrap();
    assert!(!pastas_of(pid).is_empty(), "an instance's namespace is served by pasta");
    assert!(!mounts_under(&slots).is_empty(), "instances have scratch mounts");

    server.kill9();
    eventually(Duration::from_secs(5), || async {
        match pastas_of(pid) {
            left if left.is_empty() => Ok(()),
            left => Err(format!("pasta {left:?} outlived server {pid}")),
        }
    })
    .await;
    assert!(!mounts_under(&slots).is_empty(), "a killed server cannot unmount");

    server.spawn();
    assert_eq!(
        mounts_under(&slots),
        Vec::<String>::new(),
        "the next start unmounts them"
    );
    assert_eq!(namespaces_of(pid), Vec::<String>::new(), "and removes the namespaces");
    assert!(!slots.exists());

    // The harness's teardown (a kill) leaves nothing mounted either.
    deploy_and_call(&server, "again").await;
    let pid = server.pid();
    drop(server);
    assert_eq!(mounts_under(&data), Vec::<String>::new());
    assert_eq!(namespaces_of(pid), Vec::<String>::new());
}

#[tokio::test]
async fn scratch_mounts_go_when_instances_stop_and_when_the_server_shuts_down() {
    let mut server = Server::start_with(Backend::Sqlite, &[("SLESS_WARM_INSTANCES", "0")]).await;
    let pid = server.pid();
    let slots = slots_of(&server);
    deploy_and_call(&server, "hello").await;
    assert!(!mounts_under(&slots).is_empty(), "the instance has a scratch mount");

    let (status, body) = server
        .call(Method::DELETE, "/v1/namespaces/ns/functions/hello", None)
        .await;
    assert!(status.is_success(), "{status} {body}");
    eventually(Duration::from_secs(10), || async {
        match mounts_under(&slots) {
            left if left.is_empty() => Ok(()),
            left => Err(format!("still mounted after the function went: {left:?}")),
        }
    })
    .await;

    deploy_and_call(&server, "again").await;
    assert!(!mounts_under(&slots).is_empty());
    assert!(!namespaces_of(pid).is_empty());
    assert!(server.terminate_wait().success());
    assert_eq!(mounts_under(&slots), Vec::<String>::new(), "unmounted at shutdown");
    assert_eq!(
        namespaces_of(pid),
        Vec::<String>::new(),
        "namespaces removed at shutdown"
    );
    assert_eq!(pastas_of(pid), Vec::<u32>::new());
}
