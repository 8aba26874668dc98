//! A deploy that cannot load never goes live: every build ends with the
//! handler loaded as an instance loads it, a load failure is a failed build
//! with the user's own traceback (and a hint where the mistake is a common
//! one), and the version before keeps serving.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::harness::{Backend, Server};

const GOOD_V1: &[u8] = b"def handle(event, context):\n    return 'v1'\n";
const SYNTAX_ERROR: &[u8] = b"def handle(event, context)\n    return 'v2'\n";

fn message(function: &Value) -> String {
    function["status"]["message"].as_str().unwrap_or_default().to_string()
}

crate::both_stores!(
    a_broken_update_leaves_the_working_version_serving,
    a_newer_upload_stops_the_build_it_supersedes
);

async fn a_broken_update_leaves_the_working_version_serving(backend: Backend) {
    let server = Server::start(backend).await;
    let py = json!({"runtime": "python3.11"});
    server
        .deploy("ns", "live", py.clone(), &[("handler.py", GOOD_V1)])
        .await;
    let (status, _, body) = server.invoke(Method::GET, "/fn/ns/live", "").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "\"v1\""));

    let failed = server
        .deploy_fails("ns", "live", py, &[("handler.py", SYNTAX_ERROR)])
        .await;
    let text = message(&failed);
    assert!(text.contains("SyntaxError"), "{text}");
    assert!(text.contains("handler.py\", line 1"), "the user's own frame: {text}");
    assert!(!text.contains("sless_shim"), "no frames of the shim: {text}");
    assert!(text.contains("version 1 keeps serving"), "{text}");
    assert_eq!(failed["status"]["version"], 1, "no new version");
    for _ in 0..5 {
        let (status, _, body) = server.invoke(Method::GET, "/fn/ns/live", "").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "\"v1\""), "v1 still answers");
    }
}

#[tokio::test]
async fn handlers_that_cannot_load_fail_the_build_with_the_users_error() {
    let server = Server::start(Backend::Sqlite).await;
    let py = json!({"runtime": "python3.11"});

    // A syntax error on the first deploy: Failed, and /fn does not serve it.
    let failed = server
        .deploy_fails("ns", "syntax", py.clone(), &[("handler.py", SYNTAX_ERROR)])
        .await;
    assert!(
        message(&failed).contains("SyntaxError: expected ':'"),
        "{}",
        message(&failed)
    );
    assert_eq!(failed["status"]["version"], 0);
    let (status, _, text) = server.invoke(Method::GET, "/fn/ns/syntax", "").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{text}");

    // A module without the entrypoint function.
    let failed = server
        .deploy_fails(
            "ns",
            "noentry",
            py.clone(),
            &[("handler.py", b"def other(event, context):\n    return 1\n")],
        )
        .await;
    let text = message(&failed);
    assert!(text.contains("handle"), "names the missing function: {text}");

    // An import that raises: the user's traceback, their frame included.
    let failed = server
        .deploy_fails(
            "ns",
            "raises",
            py.clone(),
            &[("handler.py", b"import os\nraise RuntimeError('needs DB_URL')\n")],
        )
        .await;
    let text = message(&failed);
    assert!(text.contains("RuntimeError: needs DB_URL"), "{text}");
    assert!(text.contains("line 2"), "{text}");

    // No handler file at all.
    let failed = server
        .deploy_fails("ns", "nofile", py.clone(), &[("README.md", b"hello\n")])
        .await;
    assert!(message(&failed).contains("handler"), "{}", message(&failed));

    // The handler zipped inside its folder: a hint says what to do.
    let failed = server
        .deploy_fails("ns", "nested", py.clone(), &[("hello-python/handler.py", GOOD_V1)])
        .await;
    let text = message(&failed);
    assert!(
        text.contains("found hello-python/handler.py: zip the contents of hello-python/"),
        "{text}"
    );

    // Node code deployed as Python.
    let failed = server
        .deploy_fails(
            "ns",
            "wrongrt",
            py.clone(),
            &[("handler.js", b"exports.handle = async () => 1;\n")],
        )
        .await;
    let text = message(&failed);
    assert!(text.contains("found handler.js, which is Node.js code"), "{text}");
    assert!(text.contains("runtime nodejs20"), "{text}");

    // Node: a syntax error fails too.
    let failed = server
        .deploy_fails(
            "ns",
            "nodebad",
            json!({"runtime": "nodejs20"}),
            &[("handler.js", b"exports.handle = async (e) => {\n")],
        )
        .await;
    assert!(message(&failed).contains("SyntaxError"), "{}", message(&failed));
}

#[tokio::test]
async fn settings_that_break_the_load_are_not_applied() {
    let server = Server::start(Backend::Sqlite).await;
    let code: &[u8] = b"import os\nif os.environ.get('BREAK'):\n    raise RuntimeError('BREAK is set')\ndef handle(event, context):\n    return os.environ.get('GREETING', 'none')\n";
    server
        .deploy(
            "ns",
            "env",
            json!({"runtime": "python3.11", "env": {"GREETING": "hi"}}),
            &[("handler.py", code)],
        )
        .await;
    let (status, patched) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/functions/env",
            Some(json!({"env": {"GREETING": "new", "BREAK": "1"}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    assert_eq!(patched["status"]["phase"], "Failed", "{patched}");
    let text = message(&patched);
    assert!(text.contains("not applied") && text.contains("BREAK is set"), "{text}");
    let (status, _, body) = server.invoke(Method::GET, "/fn/ns/env", "").await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, "\"hi\""),
        "the old settings serve"
    );

    // Fixed settings apply and the function is Ready again.
    let (status, patched) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/functions/env",
            Some(json!({"env": {"BREAK": null}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    assert_eq!(patched["status"]["phase"], "Ready", "{patched}");
    let (status, _, body) = server.invoke(Method::GET, "/fn/ns/env", "").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "\"new\""));
}

/// A handler that says when its module was imported, which process (a
/// random token: instances have pid namespaces of their own) and how many
/// calls that process has served.
const STAMPED: &[u8] = br#"
import os, time
IMPORTED_AT = time.time()
INSTANCE = os.urandom(8).hex()
CALLS = 0

def handle(event, context):
    global CALLS
    CALLS += 1
    return {"imported_at": IMPORTED_AT, "instance": INSTANCE, "calls": CALLS}
"#;

/// The instance that passed the load check serves: a deploy starts one
/// instance, not two, and the first call after it is not a cold start. New
/// settings of a function that scales to zero leave it at zero.
#[tokio::test]
async fn the_checked_instance_serves_the_first_call() {
    let server = Server::start(Backend::Sqlite).await;
    server
        .deploy(
            "ns",
            "stamped",
            json!({"runtime": "python3.11"}),
            &[("handler.py", STAMPED)],
        )
        .await;
    let ready_at = unix_now();
    let instances = "sless_instances{namespace=\"ns\",function=\"stamped\"}";
    assert_eq!(
        server.metric(instances).await,
        Some(1.0),
        "the checked instance, before any call"
    );

    let first = call(&server, "stamped").await;
    assert!(
        first["imported_at"].as_f64().unwrap() < ready_at,
        "imported before the version was Ready (by the load check): {first}"
    );
    assert_eq!(first["calls"], 1);
    let second = call(&server, "stamped").await;
    assert_eq!((&second["instance"], &second["calls"]), (&first["instance"], &json!(2)));
    assert_eq!(server.metric(instances).await, Some(1.0), "no second instance");
    let records = server.records_until("ns", "stamped", |r| r.len() == 2).await;
    assert_eq!(
        records[1]["cold_start"], false,
        "the first call found the instance up: {}",
        records[1]
    );

    // New settings: the checked instance of the new generation is not
    // kept (the function scales to zero), so the next call starts one.
    let (status, body) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/functions/stamped",
            Some(json!({"env": {"A": "1"}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    server.wait_metric(instances, 0.0, 30).await;
    let after = call(&server, "stamped").await;
    assert_ne!(after["instance"], first["instance"]);
    let records = server.records_until("ns", "stamped", |r| r.len() == 3).await;
    assert_eq!(records[0]["cold_start"], true, "{}", records[0]);
}

/// Nothing calls the new version: its checked instance is stopped by the
/// idle reaper like any other.
#[tokio::test]
async fn an_uncalled_checked_instance_is_reaped_when_idle() {
    let server = Server::start_with(Backend::Sqlite, &[("SLESS_IDLE_TIMEOUT_SEC", "1")]).await;
    server
        .deploy(
            "ns",
            "idle",
            json!({"runtime": "python3.11"}),
            &[("handler.py", GOOD_V1)],
        )
        .await;
    server
        .wait_metric("sless_instances{namespace=\"ns\",function=\"idle\"}", 0.0, 30)
        .await;
    let (status, _, body) = server.invoke(Method::GET, "/fn/ns/idle", "").await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, "\"v1\""),
        "started again on demand"
    );
}

async fn call(server: &Server, name: &str) -> Value {
    let (status, _, text) = server.invoke(Method::POST, &format!("/fn/ns/{name}"), "{}").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    serde_json::from_str(&text).unwrap()
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A build that runs a while (here npm's preinstall script of the code's
/// own package.json, no registry needed) says so in the status, with the
/// tool and the file, instead of "waiting for the build"; then it ends as
/// any other.
#[tokio::test]
async fn a_long_build_says_it_runs() {
    let server = Server::start(Backend::Sqlite).await;
    let (status, created) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "slow", "runtime": "nodejs20"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let package = br#"{"name": "slow", "version": "1.0.0", "private": true, "scripts": {"preinstall": "sleep 4"}}"#;
    let handler = b"exports.handle = () => 'built';\n";
    let zip = super::harness::zip_of(&[("package.json", package), ("handler.js", handler)]);
    let (status, uploaded) = server.upload("ns", "slow", zip).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{uploaded}");
    assert!(message(&uploaded).contains("waiting for the build"), "{uploaded}");
    let running = server
        .wait_for("/v1/namespaces/ns/functions/slow", 4, |f| {
            message(f).contains("npm installs the dependencies of package.json")
        })
        .await;
    assert_eq!(running["status"]["phase"], "Building", "{running}");
    assert!(message(&running).contains("its log follows when it ends"), "{running}");
    let hash = uploaded["status"]["code_hash"].as_str().unwrap();
    server.wait_built("ns", "slow", hash).await;
    let (status, _, body) = server.invoke(Method::GET, "/fn/ns/slow", "").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "\"built\""));
}

/// Slow builds of a few namespaces do not hold every other namespace's
/// back: a build past its share of the server's two build slots
/// (`SLESS_BUILD_SHARE_SEC`) hands its slot to the next build and runs on
/// as a long build, up to `SLESS_MAX_LONG_BUILDS` at once; past those, a
/// slow build keeps its slot, and the next waits for one to end.
#[tokio::test]
async fn a_slow_build_hands_its_slot_on_up_to_the_long_builds_bound() {
    let server = Server::start_with(
        Backend::Sqlite,
        &[("SLESS_BUILD_SHARE_SEC", "1"), ("SLESS_MAX_LONG_BUILDS", "1")],
    )
    .await;
    // Each in a namespace of its own: one namespace builds one at a time.
    let upload = |ns: &'static str, name: &'static str, slow: bool| {
        let server = &server;
        async move {
            let (runtime, files): (&str, Vec<(&str, &[u8])>) = if slow {
                (
                    "nodejs20",
                    vec![
                        (
                            "package.json",
                            br#"{"name": "slow", "version": "1.0.0", "private": true, "scripts": {"preinstall": "sleep 25"}}"#,
                        ),
                        ("handler.js", b"exports.handle = () => 'built';\n"),
                    ],
                )
            } else {
                (
                    "python3.11",
                    vec![("handler.py", b"def handle(event, context):\n    return 'quick'\n")],
                )
            };
            let (status, created) = server
                .call(
                    Method::POST,
                    &format!("/v1/namespaces/{ns}/functions"),
                    Some(json!({"name": name, "runtime": runtime})),
                )
                .await;
            assert_eq!(status, StatusCode::CREATED, "{created}");
            let (status, uploaded) = server.upload(ns, name, super::harness::zip_of(&files)).await;
            assert_eq!(status, StatusCode::ACCEPTED, "{uploaded}");
            if slow {
                server
                    .wait_for(&format!("/v1/namespaces/{ns}/functions/{name}"), 20, |f| {
                        message(f).contains("npm installs the dependencies")
                    })
                    .await;
            }
            uploaded["status"]["code_hash"].as_str().unwrap().to_string()
        }
    };
    let phases = |namespaces: &'static [&'static str]| {
        let server = &server;
        async move {
            let mut phases = Vec::new();
            for ns in namespaces {
                let (_, f) = server
                    .call(Method::GET, &format!("/v1/namespaces/{ns}/functions/f"), None)
                    .await;
                phases.push(f["status"]["phase"].as_str().unwrap().to_string());
            }
            phases
        }
    };
    // a and b hold both slots; a second on, one of them is a long build.
    tokio::join!(upload("a", "f", true), upload("b", "f", true));
    let quick = upload("c", "f", false).await;
    server.wait_built("c", "f", &quick).await;
    assert_eq!(phases(&["a", "b"]).await, ["Building"; 2], "c did not wait for a or b");
    // d takes the slot c had; the one long build's slot is taken, so b
    // and d keep theirs, and e waits.
    upload("d", "f", true).await;
    let waiting = upload("e", "f", false).await;
    // b's second build waits for b's own slot, and says so.
    let second = upload("b", "g", false).await;
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let (_, e) = server.call(Method::GET, "/v1/namespaces/e/functions/f", None).await;
    assert!(
        message(&e).contains("for a build slot: the server's 2 build slots are taken"),
        "{e}"
    );
    // Which other namespaces' builds hold the slots is theirs: e is told
    // the slots are taken, not by whom.
    for other in ["namespace a", "namespace b", "namespace d"] {
        assert!(!message(&e).contains(other), "{e}");
    }
    let (_, g) = server.call(Method::GET, "/v1/namespaces/b/functions/g", None).await;
    assert!(
        message(&g).contains("for a build slot of namespace b: it builds 1 at once (the server's SLESS_NS_MAX_BUILDS)"),
        "{g}"
    );
    assert_eq!(phases(&["a", "b", "d"]).await, ["Building"; 3]);
    // The metrics count them: e and b/g waiting, b and d in the server's
    // slots, a in the long build's.
    for (state, builds) in [("waiting", 2.0), ("running", 2.0), ("long", 1.0)] {
        let series = format!("sless_builds{{state=\"{state}\"}}");
        assert_eq!(server.metric(&series).await, Some(builds), "{series}");
    }
    server.wait_built("e", "f", &waiting).await;
    server.wait_built("b", "g", &second).await;
    assert_eq!(server.metric("sless_builds{state=\"waiting\"}").await, Some(0.0));
}

/// A build held on the test's loopback: the npm `preinstall` script of
/// [`BuildGate::code`] connects to the gate and waits for a byte that never
/// comes, so the build runs until its process is killed, which closes the
/// connection. Its server needs `SLESS_NETWORK_ISOLATION=false` (a build's
/// own network cannot reach the machine's loopback).
pub(super) struct BuildGate {
    listener: tokio::net::TcpListener,
    port: u16,
}

impl BuildGate {
    pub(super) async fn start() -> BuildGate {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        BuildGate { listener, port }
    }

    /// The name of the gate's script, which the build's processes' command
    /// lines hold.
    pub(super) fn script(&self) -> String {
        format!("gate-{}.js", self.port)
    }

    /// Node code whose build waits at this gate.
    pub(super) fn code(&self) -> Vec<u8> {
        let script = self.script();
        let package = format!(
            r#"{{"name": "gated", "version": "1.0.0", "private": true, "scripts": {{"preinstall": "node {script}"}}}}"#
        );
        let gate = format!(
            "require('net').connect({}, '127.0.0.1').on('data', () => process.exit(0));\n",
            self.port
        );
        super::harness::zip_of(&[
            ("package.json", package.as_bytes()),
            (&script, gate.as_bytes()),
            ("handler.js", b"exports.handle = () => 'gated';\n"),
        ])
    }

    /// Creates the Node function `ns/{name}` with a build timeout of an
    /// hour, uploads [`BuildGate::code`] to it through `server` and waits
    /// until its build reached the gate; the build's connection, held open.
    pub(super) async fn hold(&self, server: &Server, name: &str) -> tokio::net::TcpStream {
        let spec = json!({"name": name, "runtime": "nodejs20", "build_timeout_sec": 3600});
        let (status, body) = server
            .call(Method::POST, "/v1/namespaces/ns/functions", Some(spec))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let (status, body) = server.upload("ns", name, self.code()).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        self.reached().await
    }

    /// Waits until a build reached the gate; its connection, held open.
    pub(super) async fn reached(&self) -> tokio::net::TcpStream {
        let (held, _) = tokio::time::timeout(std::time::Duration::from_secs(120), self.listener.accept())
            .await
            .expect("a build reached the gate")
            .unwrap();
        held
    }
}

/// Waits until the build process holding the other end of `held` is gone:
/// its end closed, so a read ends (the gate never sent anything to answer).
pub(super) async fn build_killed(mut held: tokio::net::TcpStream) {
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        tokio::io::AsyncReadExt::read(&mut held, &mut byte),
    )
    .await
    .expect("the build holding the gate was not killed");
    assert!(matches!(read, Ok(0) | Err(_)), "the gate got {read:?}");
}

/// Waits until nothing of a stopped build is left on `server`'s machine:
/// no process runs `gate`'s script, no `.build-*` directory stays among
/// the artifacts, no build's tmpfs (its /tmp, its directory) stays mounted.
pub(super) async fn no_build_left(server: &Server, gate: &BuildGate) {
    let data = server.data_path().canonicalize().unwrap();
    super::harness::eventually(std::time::Duration::from_secs(30), || async {
        let running = super::leftovers::live_processes_with("cmdline", &gate.script());
        let building: Vec<_> = std::fs::read_dir(data.join("artifacts"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with(".build-"))
            .collect();
        let mounted: Vec<_> = super::leftovers::mounts_under(&data)
            .into_iter()
            .filter(|point| point.contains("/build-"))
            .collect();
        if running.is_empty() && building.is_empty() && mounted.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "processes {running:?}, directories {building:?} and mounts {mounted:?} stay"
            ))
        }
    })
    .await;
}

/// The version numbers and code hashes recorded for `ns/{name}`, newest first.
pub(super) async fn recorded(server: &Server, name: &str) -> Vec<(u64, String)> {
    let (status, list) = server
        .call(
            Method::GET,
            &format!("/v1/namespaces/ns/functions/{name}/versions"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["version"].as_u64().unwrap(),
                v["code_hash"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// An upload while the build of the one before runs (installing its
/// dependencies) stops that build at once: its processes are killed, its
/// namespace's only build slot goes to the new upload's build, and it
/// leaves nothing (no version, no upload, no build directory). The old
/// build ran on to its `build_timeout_sec` (an hour here), holding the
/// slot, and the new upload waited for it.
async fn a_newer_upload_stops_the_build_it_supersedes(backend: Backend) {
    let gate = BuildGate::start().await;
    let server = Server::start_with(
        backend,
        &[("SLESS_NS_MAX_BUILDS", "1"), ("SLESS_NETWORK_ISOLATION", "false")],
    )
    .await;
    let held = gate.hold(&server, "f").await;

    let newer = super::harness::zip_of(&[("handler.js", b"exports.handle = () => 'newer';\n")]);
    let (status, body) = server.upload("ns", "f", newer).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let hash = body["status"]["code_hash"].as_str().unwrap().to_string();
    let function = server.wait_built("ns", "f", &hash).await;
    assert_eq!(function["status"]["version"], 1, "{function}");
    let (status, _, answer) = server.invoke(Method::GET, "/fn/ns/f", "").await;
    assert_eq!((status, answer.as_str()), (StatusCode::OK, "\"newer\""));

    build_killed(held).await;
    no_build_left(&server, &gate).await;
    assert_eq!(
        recorded(&server, "f").await,
        [(1, hash)],
        "the stopped build made no version"
    );
    super::harness::eventually(std::time::Duration::from_secs(30), || async {
        match server.archives("ns", "f") {
            1 => Ok(()),
            n => Err(format!("{n} uploads kept; the stopped build's is not removed")),
        }
    })
    .await;
}
