//! What a server leaves on the machine when it stops or is killed: nothing
//! that lasts. Its pasta processes and sandboxes die with it, SIGKILL
//! included; its sandboxes' tmpfs mounts go when they stop and when the
//! server shuts down; after a kill, the next server on the data dir removes
//! the mounts and network namespaces the killed one left (even when its pid
//! belongs to another process by then), and so does the harness when it
//! drops a server.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::json;

use super::harness::{eventually, Backend, Server};

const HELLO: &[u8] = b"def handle(event, context):\n    return 'hello'\n";

/// Live processes whose `/proc/{p}/{file}` contains `needle`.
pub(super) fn live_processes_with(file: &str, needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            // "pid (comm) state ...": a zombie (Z) or dead (X) one is gone.
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start()).unwrap_or("Z");
            !state.starts_with(['Z', 'X'])
        })
        .filter(|p| {
            let text = std::fs::read(format!("/proc/{p}/{file}")).unwrap_or_default();
            String::from_utf8_lossy(&text).contains(needle)
        })
        .collect()
}

/// Live pasta processes serving a namespace of server `pid`
/// (`/run/netns/sless-{pid}-…`), whoever their parent is now.
pub(super) fn pastas_of(pid: u32) -> Vec<u32> {
    live_processes_with("cmdline", &format!("/run/netns/sless-{pid}-"))
}

/// Live processes in the control groups of server `pid`'s sandboxes.
fn sandboxed_processes_of(pid: u32) -> Vec<u32> {
    live_processes_with("cgroup", &format!("/sless-{pid}/"))
}

/// Mount points at or below `dir` (canonical), as the kernel lists them.
pub(super) fn mounts_under(dir: &Path) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|point| Path::new(point).starts_with(dir))
        .map(str::to_string)
        .collect()
}

/// The file system type mounted last at `point`, as the kernel lists it.
fn fs_type_at(point: &str) -> Option<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.split(' ').nth(4) == Some(point))
        .filter_map(|l| l.split(" - ").nth(1)?.split(' ').next().map(str::to_string))
        .next_back()
}

/// Network namespaces named for server `pid`.
pub(super) fn namespaces_of(pid: u32) -> Vec<String> {
    let prefix = format!("sless-{pid}-");
    std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

/// The running server's slots directory, `slots/{pid}-{start time}`.
fn slots_of(server: &Server) -> PathBuf {
    let slots = server.data_path().canonicalize().unwrap().join("slots");
    let prefix = format!("{}-", server.pid());
    std::fs::read_dir(&slots)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(&prefix))
        .unwrap_or_else(|| panic!("no slots directory of server {} in {}", server.pid(), slots.display()))
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
    assert!(
        !sandboxed_processes_of(pid).is_empty(),
        "instances run in the server's groups"
    );
    assert!(!mounts_under(&slots).is_empty(), "instances have scratch mounts");

    server.kill9();
    eventually(Duration::from_secs(5), || async {
        match (pastas_of(pid), sandboxed_processes_of(pid)) {
            (pastas, sandboxed) if pastas.is_empty() && sandboxed.is_empty() => Ok(()),
            left => Err(format!("pasta and sandboxed processes {left:?} outlived server {pid}")),
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
    // The scratch directory itself stays a mount point while the server
    // runs: a tmpfs of its own, so the sandboxes' mount points take no
    // inode of the data dir's file system.
    let scratch_dir = slots.join("scratch").display().to_string();
    assert_eq!(fs_type_at(&scratch_dir).as_deref(), Some("tmpfs"), "{scratch_dir}");
    eventually(Duration::from_secs(10), || async {
        match mounts_under(&slots)
            .into_iter()
            .filter(|m| *m != scratch_dir)
            .collect::<Vec<_>>()
        {
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

#[tokio::test]
async fn a_dead_servers_mounts_go_even_when_another_process_has_its_pid() {
    let mut server = Server::start(Backend::Sqlite).await;
    // Slots as a killed server leaves them, tagged with a pid that is alive
    // again (this test's) but with another start time.
    let stale = server
        .data_path()
        .canonicalize()
        .unwrap()
        .join("slots")
        .join(format!("{}-1", std::process::id()));
    let scratch = stale.join("0123456789abcdef.tmp");
    std::fs::create_dir_all(&scratch).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "sless-tmp"])
        .arg(&scratch)
        .status()
        .unwrap();
    assert!(mounted.success());
    assert!(!mounts_under(&stale).is_empty());

    server.restart();
    assert_eq!(mounts_under(&stale), Vec::<String>::new(), "a reused pid kept them");
    assert!(!stale.exists());
}

/// A build's artifact is on the server's disk while a version uses it:
/// a build whose handler does not load, and a deleted function's
/// versions, leave nothing behind (a tenant deploying code that fails, or
/// making and deleting functions, filled the disk a build at a time), and
/// the upload of a build that made no version goes too. An
/// artifact is shared by every function built from the same code, so it
/// stays while another function's version uses it, another tenant's too.
#[tokio::test]
async fn an_artifact_stays_only_while_a_version_uses_it() {
    let server = Server::start(Backend::Sqlite).await;
    // Loads only with NEED set.
    let needs: &[(&str, &[u8])] = &[(
        "handler.py",
        b"import os\nNEED = os.environ['NEED']\ndef handle(event, context):\n    return NEED\n",
    )];
    let with_need = json!({"runtime": "python3.11", "env": {"NEED": "yes"}});
    let a = server.deploy("ns", "a", with_need.clone(), needs).await;
    let shared = a["status"]["artifact"].as_str().unwrap().to_string();
    assert_eq!(server.artifacts(), vec![shared.clone()]);

    // The same code that does not load here: the artifact is a's too.
    server
        .deploy_fails("ns", "b", json!({"runtime": "python3.11"}), needs)
        .await;
    assert_eq!(server.artifacts(), vec![shared.clone()], "a's version uses it");
    // Code of its own that never loads: nothing of it stays.
    let fails: &[(&str, &[u8])] = &[("handler.py", b"raise RuntimeError('never loads')\n")];
    server
        .deploy_fails("ns", "c", json!({"runtime": "python3.11"}), fails)
        .await;
    assert_eq!(server.artifacts(), vec![shared.clone()]);
    // An install that fails makes no artifact.
    let install_fails: &[(&str, &[u8])] = &[("handler.py", HELLO), ("requirements.txt", b"./no-such-project\n")];
    server
        .deploy_fails("ns", "e", json!({"runtime": "python3.11"}), install_fails)
        .await;
    assert_eq!(server.artifacts(), vec![shared.clone()]);
    // Nor do their uploads stay: they made no version, and a function
    // failing upload after upload kept every archive.
    let kept = ["a", "b", "c", "e"].map(|name| server.archives("ns", name));
    assert_eq!(kept, [1, 0, 0, 0]);

    // Another tenant's function with the same code.
    server.deploy("other", "d", with_need, needs).await;
    for name in ["a", "b", "c", "e"] {
        let (status, body) = server
            .call(Method::DELETE, &format!("/v1/namespaces/ns/functions/{name}"), None)
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    }
    assert_eq!(server.artifacts(), vec![shared], "the other tenant's version uses it");
    let (status, _, body) = server.invoke(Method::GET, "/fn/other/d", "").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, r#""yes""#));
    let (status, body) = server
        .call(Method::DELETE, "/v1/namespaces/other/functions/d", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(server.artifacts(), Vec::<String>::new());
}

/// What a server before this one left among the artifacts that no version
/// uses (a crash between a build and its record; a server that kept failed
/// builds' and deleted functions' artifacts) goes at the next start; the
/// artifacts versions use stay and serve.
async fn an_artifact_no_version_uses_goes_at_the_next_start(backend: Backend) {
    let mut server = Server::start(backend).await;
    deploy_and_call(&server, "kept").await;
    let kept = server.artifacts();
    assert_eq!(kept.len(), 1, "{kept:?}");
    let left = server
        .data_path()
        .join("artifacts")
        .join("0123456789abcdef0123456789abcdef");
    std::fs::create_dir_all(left.join("pkg")).unwrap();
    std::fs::write(left.join("pkg/big.bin"), vec![7u8; 1 << 20]).unwrap();

    server.kill9();
    server.spawn();
    assert_eq!(server.artifacts(), kept);
    let (status, _, body) = server.invoke(Method::GET, "/fn/ns/kept", "").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, r#""hello""#));
}

/// The files under `dir`, at any depth.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            if entry.path().is_dir() {
                folders.push(entry.path());
            } else {
                files.push(entry.path());
            }
        }
    }
    files
}

/// Writes `path` (and its folders), last modified two hours ago when `old`.
fn leave(path: &Path, old: bool) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, b"left behind").unwrap();
    if old {
        backdate(path);
    }
}

/// Makes `path` look two hours old.
fn backdate(path: &Path) {
    backdate_by(path, Duration::from_secs(7200));
}

/// Makes `path` look `age` old.
fn backdate_by(path: &Path, age: Duration) {
    let file = std::fs::File::options().write(true).open(path).unwrap();
    file.set_modified(std::time::SystemTime::now() - age).unwrap();
}

/// What the object store keeps that nothing uses goes at the leader's
/// next sweep once it is an hour old: an upload no version was built from
/// and no function waits for (servers before this one kept failed
/// uploads), a deleted function's, and (PostgreSQL, where artifacts are
/// stored there for the replicas) an artifact's tarball no version uses.
/// What is younger, or used, stays however old.
async fn what_the_object_store_keeps_unused_goes_once_an_hour_old(backend: Backend) {
    let mut server = Server::start(backend).await;
    deploy_and_call(&server, "kept").await;
    let blobs = server.data_path().join("blobs");
    let used = files_under(&blobs);
    let uploads = blobs.join("archives/ns");
    let upload = |function: &str, hash: char| {
        uploads
            .join(function)
            .join(format!("{}.zip", hash.to_string().repeat(64)))
    };
    let fresh = upload("kept", 'b');
    let stale = [
        upload("kept", 'a'),
        upload("gone", 'c'),
        blobs.join(format!(
            "artifacts/0123456789abcdef0123456789abcdef/{}.tar.gz",
            "d".repeat(64)
        )),
    ];
    leave(&fresh, false);
    for path in &stale {
        leave(path, true);
    }
    // What a Kubernetes build Job left (its archive, its upload, the copy
    // being checked) goes once no build can still be under way: 3 hours.
    let build = |file: &str| blobs.join(format!("builds/0123456789abcdef0123456789abcdef/{file}"));
    let (running, crashed) = (build("e.zip"), [build("f.zip"), build("f.tar.gz.checking")]);
    leave(&running, true);
    for path in &crashed {
        leave(path, false);
        backdate_by(path, Duration::from_secs(4 * 3600));
    }
    for path in &used {
        backdate(path);
    }

    server.kill9();
    server.spawn();
    let left = files_under(&blobs);
    assert!(left.contains(&fresh), "{left:?}");
    assert!(used.iter().all(|path| left.contains(path)), "{used:?} of {left:?}");
    let swept = [true, true, backend == Backend::Postgres];
    for (path, swept) in stale.iter().zip(swept) {
        assert_eq!(left.contains(path), !swept, "{path:?} in {left:?}");
    }
    assert!(left.contains(&running), "a build may run 2 hours: {left:?}");
    assert!(crashed.iter().all(|path| !left.contains(path)), "{left:?}");
    let (status, _, body) = server.invoke(Method::GET, "/fn/ns/kept", "").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, r#""hello""#));
}

/// A version recorded before sizes were (0 bytes: the storage quota would
/// not count it) gets them at the leader's next sweep, from its artifact
/// and its upload.
async fn a_version_recorded_without_sizes_is_measured(backend: Backend) {
    let mut server = Server::start(backend).await;
    deploy_and_call(&server, "kept").await;
    let path = "/v1/namespaces/ns/functions/kept/versions/1";
    let (_, measured) = server.call(Method::GET, path, None).await;
    assert!(measured["artifact_bytes"].as_u64() > Some(0), "{measured}");
    assert!(measured["archive_bytes"].as_u64() > Some(0), "{measured}");
    server.kill9();
    server
        .run_sql("UPDATE function_versions SET artifact_bytes = 0, archive_bytes = 0")
        .await;
    server.spawn();
    let (_, version) = server.call(Method::GET, path, None).await;
    for field in ["artifact_bytes", "archive_bytes"] {
        assert_eq!(version[field], measured[field], "{field}: {version}");
    }
}

crate::both_stores!(
    a_version_recorded_without_sizes_is_measured,
    an_artifact_no_version_uses_goes_at_the_next_start,
    what_the_object_store_keeps_unused_goes_once_an_hour_old,
);
