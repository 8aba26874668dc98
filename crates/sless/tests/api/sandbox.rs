//! Escapes a hostile handler attempts, each refused: another function's code,
//! the server's data dir, host secrets, a fork bomb, a memory balloon.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::harness::{Backend, Server};

const SECRET_CODE: &[u8] =
    b"SECRET = 'the-other-functions-secret-7f3a'\n\ndef handle(event, context):\n    return 'private'\n";

/// Tries to read paths given in the event and reports what it found.
const PROBE: &[u8] = br#"
import os

def try_read(path):
    try:
        with open(path, "rb") as f:
            return "READ:" + f.read(200).decode("utf-8", "replace")
    except Exception as e:
        return "DENIED:" + type(e).__name__

def walk_for(needle, roots):
    found = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in filenames:
                path = os.path.join(dirpath, name)
                if try_read(path).find(needle) >= 0:
                    found.append(path)
    return found

def handle(event, context):
    out = {name: try_read(path) for name, path in event["paths"].items()}
    out["uid"] = os.getuid()
    out["batch_policy"] = os.sched_getscheduler(0) == os.SCHED_BATCH
    out["found"] = walk_for(event["needle"], ["/code", "/tmp", "/sless", "/proc/self/root/code"])
    try:
        open("/code/written", "w").write("x")
        out["write_code"] = "WROTE"
    except Exception as e:
        out["write_code"] = "DENIED:" + type(e).__name__
    try:
        fd = os.open("/dev/tty", os.O_RDWR)
        out["tty"] = "TERMINAL" if os.isatty(fd) else "NOT A TERMINAL"
        os.close(fd)
    except OSError as e:
        out["tty"] = "DENIED:" + type(e).__name__
    out["tty_is_null"] = os.stat("/dev/tty").st_rdev == os.stat("/dev/null").st_rdev
    open("/tmp/mine", "w").write("private tmp")
    out["tmp"] = try_read("/tmp/mine")
    return out
"#;

const FORK_BOMB: &[u8] = br#"
import os, time

def handle(event, context):
    children = 0
    error = None
    for _ in range(5000):
        try:
            pid = os.fork()
        except OSError as e:
            error = type(e).__name__
            break
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        children += 1
    return {"children": children, "error": error}
"#;

const BALLOON: &[u8] = br#"
def handle(event, context):
    try:
        blob = bytearray(event["mb"] * 1024 * 1024)
        return {"allocated": len(blob)}
    except MemoryError:
        return {"allocated": 0, "error": "MemoryError"}
"#;

#[tokio::test]
async fn a_handler_cannot_read_other_code_the_data_dir_or_host_secrets() {
    let server = Server::start(Backend::Sqlite).await;
    server
        .deploy(
            "ns",
            "victim",
            json!({"runtime": "python3.11"}),
            &[("handler.py", SECRET_CODE)],
        )
        .await;
    server.invoke(Method::GET, "/fn/ns/victim", "").await;
    server
        .deploy(
            "ns",
            "probe",
            json!({"runtime": "python3.11"}),
            &[("handler.py", PROBE)],
        )
        .await;
    let data = server.data_dir.path().display().to_string();
    let event = json!({
        "needle": "the-other-functions-secret",
        "paths": {
            "shadow": "/etc/shadow",
            "database": format!("{data}/sless.db"),
            "admin_token": format!("{data}/admin-token"),
            "root_home": "/root/.bash_history",
        },
    });
    let (status, _, text) = server.invoke(Method::POST, "/fn/ns/probe", &event.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let out: Value = serde_json::from_str(&text).unwrap();
    for key in ["shadow", "database", "admin_token", "root_home"] {
        assert!(
            out[key].as_str().unwrap().starts_with("DENIED"),
            "{key} was readable: {out}"
        );
    }
    assert_eq!(out["found"], json!([]), "another function's code was visible: {out}");
    assert!(!text.contains("the-other-functions-secret-7f3a"));
    assert_ne!(out["uid"], 0, "handlers never run as root");
    assert_eq!(out["batch_policy"], true, "instances run under SCHED_BATCH: {out}");
    assert!(
        out["write_code"].as_str().unwrap().starts_with("DENIED"),
        "code is read-only: {out}"
    );
    assert_eq!(out["tmp"], "READ:private tmp", "a private writable /tmp");
    // No terminal to push input into (TIOCSTI): /dev/tty is the null device.
    assert_ne!(out["tty"], "TERMINAL", "{out}");
    assert_eq!(out["tty_is_null"], true, "{out}");
    // The victim's code is intact and still served.
    let (status, _, text) = server.invoke(Method::GET, "/fn/ns/victim", "").await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, r#""private""#));
}

#[tokio::test]
async fn a_fork_bomb_hits_the_process_cap() {
    let server = Server::start(Backend::Sqlite).await;
    server
        .deploy(
            "ns",
            "bomb",
            json!({"runtime": "python3.11", "timeout_sec": 20}),
            &[("handler.py", FORK_BOMB)],
        )
        .await;
    server
        .deploy(
            "ns",
            "bystander",
            json!({"runtime": "python3.11"}),
            &[("handler.py", b"def handle(e, c):\n    return 'fine'\n")],
        )
        .await;
    let (status, _, text) = server.invoke(Method::POST, "/fn/ns/bomb", "{}").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let out: Value = serde_json::from_str(&text).unwrap();
    assert!(
        out["children"].as_u64().unwrap() < 200,
        "fork bomb stopped by the cap: {out}"
    );
    assert_eq!(out["error"], "BlockingIOError", "{out}");
    let (status, _, text) = server.invoke(Method::GET, "/fn/ns/bystander", "").await;
    assert_eq!(
        (status, text.as_str()),
        (StatusCode::OK, r#""fine""#),
        "other functions unaffected"
    );
}

#[tokio::test]
async fn a_memory_balloon_is_refused() {
    let server = Server::start(Backend::Sqlite).await;
    server
        .deploy(
            "ns",
            "balloon",
            json!({"runtime": "python3.11", "memory_mb": 64}),
            &[("handler.py", BALLOON)],
        )
        .await;
    let (status, _, text) = server.invoke(Method::POST, "/fn/ns/balloon", r#"{"mb": 16}"#).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["allocated"],
        16 * 1024 * 1024
    );
    let (status, _, text) = server.invoke(Method::POST, "/fn/ns/balloon", r#"{"mb": 1024}"#).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["error"],
        "MemoryError",
        "{text}"
    );
}
