//! Start-up, restart persistence, graceful shutdown and the API description.

use std::io::{Read, Write};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::json;

use super::harness::{eventually, hello_zip, Backend, Server};

crate::both_stores!(kill9_loses_nothing, sigterm_drains_in_flight_requests);

async fn kill9_loses_nothing(backend: Backend) {
    let mut server = Server::start(backend).await;
    server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "keep", "runtime": "python3.11", "memory_mb": 128})),
        )
        .await;
    let zip = hello_zip();
    let (status, uploaded) = server.upload("ns", "keep", zip.clone()).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let token = server.token_for(&["ns"]).await;
    let hash = uploaded["status"]["code_hash"].as_str().unwrap().to_string();
    let before = server.wait_built("ns", "keep", &hash).await;

    server.restart();

    let (status, after) = server.call(Method::GET, "/v1/namespaces/ns/functions/keep", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(after, before, "function unchanged across kill -9");
    let archive = server
        .data_dir
        .path()
        .join(format!("blobs/archives/ns/keep/{hash}.zip"));
    assert_eq!(std::fs::read(archive).unwrap(), zip, "archive kept");
    let (status, _) = server
        .call_as(Some(&token), Method::GET, "/v1/namespaces/ns/functions", None)
        .await;
    assert_eq!(status, StatusCode::OK, "scoped token still valid");
}

async fn sigterm_drains_in_flight_requests(backend: Backend) {
    let mut server = Server::start(backend).await;
    server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "slow", "runtime": "python3.11"})),
        )
        .await;
    // Start an upload, send half its body, then SIGTERM the server.
    let zip = hello_zip();
    let addr = server.url.trim_start_matches("http://").to_string();
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        stream,
        "PUT /v1/namespaces/ns/functions/slow/code HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Type: application/zip\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        server.admin,
        zip.len()
    )
    .unwrap();
    let half = zip.len() / 2;
    stream.write_all(&zip[..half]).unwrap();
    stream.flush().unwrap();
    // No outside sign tells when the server has taken the request off the
    // listen queue; this is the one wait left as a sleep.
    std::thread::sleep(Duration::from_millis(300));
    // New connections are refused while the old request is still served.
    sigterm_until_unlistened(&server).await;
    stream.write_all(&zip[half..]).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 202"),
        "in-flight upload completed: {answer}"
    );
    let status = server.wait_exit();
    assert!(status.success(), "exit code 0 after SIGTERM, got {status:?}");
}

/// Sends SIGTERM and waits until the server accepts no new connection:
/// the signal has been taken, and the drain has begun.
async fn sigterm_until_unlistened(server: &Server) {
    std::process::Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .unwrap();
    let addr = server.url.trim_start_matches("http://").to_string();
    eventually(Duration::from_secs(10), || async {
        match std::net::TcpStream::connect(&addr) {
            Err(_) => Ok(()),
            Ok(_) => Err("the listener still accepts after SIGTERM".to_string()),
        }
    })
    .await;
}

/// A second SIGTERM (or Ctrl-C) during the drain exits at once, with
/// status 1, without waiting for the call under way.
#[tokio::test]
async fn a_second_signal_exits_without_waiting() {
    let mut server = Server::start(Backend::Sqlite).await;
    let slow = b"import time\n\ndef handle(event, context):\n    time.sleep(20)\n    return 'done'\n";
    server
        .deploy("ns", "slow", json!({"runtime": "python3.11"}), &[("handler.py", slow)])
        .await;
    let url = format!("{}/fn/ns/slow", server.url);
    let call = tokio::spawn(async move { reqwest::get(url).await.map(|r| r.status()) });
    // No outside sign tells when the call has reached its instance.
    tokio::time::sleep(Duration::from_secs(2)).await;
    sigterm_until_unlistened(&server).await;
    let status = server.terminate_wait();
    assert_eq!(status.code(), Some(1), "{status:?}");
    let answered = call.await.unwrap();
    assert!(answered.is_err(), "the call was cut, not answered: {answered:?}");
}

#[tokio::test]
async fn first_start_generates_admin_token_once() {
    let dir = tempfile::tempdir().unwrap();
    let run = |dir: &std::path::Path| {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sless"))
            .arg("server")
            .env("SLESS_LISTEN", "127.0.0.1:0")
            .env("SLESS_DATA_DIR", dir)
            .env_remove("SLESS_ADMIN_TOKEN")
            .env_remove("SLESS_DATABASE_URL")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut printed = String::new();
        let url = loop {
            let mut line = String::new();
            assert!(
                std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0,
                "server exited: {printed}"
            );
            printed.push_str(&line);
            if let Some(u) = line.strip_prefix("sless: listening on ") {
                break u.trim().to_string();
            }
        };
        (child, printed, url)
    };
    let (mut child, printed, url) = run(dir.path());
    let token = printed
        .lines()
        .find(|l| l.starts_with("sless_"))
        .unwrap_or_else(|| panic!("token printed on first start: {printed}"))
        .to_string();
    let stored = std::fs::read_to_string(dir.path().join("admin-token")).unwrap();
    assert_eq!(stored.trim(), token);
    let client = reqwest::Client::new();
    let ok = client
        .get(format!("{url}/v1/tokens"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    child.kill().unwrap();
    child.wait().unwrap();

    let (mut child, printed, url) = run(dir.path());
    assert!(!printed.contains(&token), "token printed only once: {printed}");
    let ok = client
        .get(format!("{url}/v1/tokens"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK, "same token after restart");
    child.kill().unwrap();
    child.wait().unwrap();
    // What the killed server had mounted (as the harness does for its own).
    sless_driver_local::remove_leftovers(dir.path());
}

#[tokio::test]
async fn openapi_describes_every_endpoint() {
    let server = Server::start(Backend::Sqlite).await;
    let (status, doc) = server.call(Method::GET, "/v1/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    for (path, method) in [
        ("/healthz", "get"),
        ("/v1/tokens", "post"),
        ("/v1/tokens", "get"),
        ("/v1/tokens/{id}", "delete"),
        ("/v1/namespaces/{ns}/functions", "get"),
        ("/v1/namespaces/{ns}/functions", "post"),
        ("/v1/namespaces/{ns}/functions/{name}", "get"),
        ("/v1/namespaces/{ns}/functions/{name}", "patch"),
        ("/v1/namespaces/{ns}/functions/{name}", "delete"),
        ("/v1/namespaces/{ns}/functions/{name}/code", "put"),
        ("/v1/namespaces/{ns}/functions/{name}/stats", "get"),
        ("/v1/whoami", "get"),
    ] {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "{method} {path} missing"
        );
    }
    // The gateway takes any method, with or without a path after the name;
    // every operation has an id of its own.
    for path in ["/fn/{ns}/{name}", "/fn/{ns}/{name}/{rest}"] {
        for method in ["get", "post", "put", "patch", "delete", "head", "options"] {
            let operation = &paths[path][method];
            assert!(operation.is_object(), "{method} {path} missing");
            assert!(operation.get("security").is_none(), "{method} {path} is public");
        }
    }
    let rest = paths["/fn/{ns}/{name}/{rest}"]["get"]["parameters"].as_array().unwrap();
    assert!(
        rest.iter().any(|p| p["name"] == "rest" && p["in"] == "path"),
        "{rest:?}"
    );
    let mut ids: Vec<&str> = paths
        .values()
        .flat_map(|item| item.as_object().unwrap().values())
        .filter_map(|operation| operation["operationId"].as_str())
        .collect();
    let count = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), count, "operation ids are unique");
    let delete = &paths["/v1/namespaces/{ns}/functions/{name}"]["delete"];
    assert!(
        delete["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "cascade"),
        "{delete}"
    );
    assert!(delete["responses"]["409"].is_object(), "{delete}");
    assert!(doc["components"]["schemas"]["FunctionSpec"]["properties"]["runtime"].is_object());
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
}

#[tokio::test]
async fn errors_are_json_never_html() {
    let server = Server::start(Backend::Sqlite).await;
    let (status, body) = server.call(Method::GET, "/nope", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body["error"].is_string());
    let (status, body) = server.call(Method::DELETE, "/v1/namespaces/ns/functions", None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(body["error"].as_str().unwrap().contains("DELETE"), "{body}");
}

/// Starts the server with one bad setting; it must refuse to start. Its stderr.
fn refused_start(name: &str, value: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sless"))
        .args(["server"])
        .env(name, value)
        .env("SLESS_DATA_DIR", tempfile::tempdir().unwrap().path())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{name}={value} was accepted");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test]
async fn bad_config_is_refused_with_its_name() {
    let err = refused_start("SLESS_DATABASE_URL", "mysql://nope");
    assert!(
        err.contains("SLESS_DATABASE_URL") && err.contains("mysql://nope"),
        "{err}"
    );
    let err = refused_start("SLESS_WORKER_THREADS", "0");
    assert!(err.contains("worker-threads") && err.contains("'0'"), "{err}");
    let err = refused_start("SLESS_ARTIFACT_SWEEP_SEC", "0");
    assert!(err.contains("artifact-sweep-sec") && err.contains("'0'"), "{err}");
    let err = refused_start("SLESS_NS_MAX_STORAGE_MB", "0");
    assert!(
        err.contains("SLESS_NS_MAX_STORAGE_MB 0: expected a value between 1"),
        "{err}"
    );
    let err = refused_start("SLESS_BUILD_SHARE_SEC", "0");
    assert!(
        err.contains("SLESS_BUILD_SHARE_SEC 0: expected a value between 1"),
        "{err}"
    );
    let err = refused_start("SLESS_MAX_LONG_BUILDS", "65");
    assert!(
        err.contains("SLESS_MAX_LONG_BUILDS 65: expected a value between 0 and 64"),
        "{err}"
    );
    for name in ["SLESS_PIP_INDEX_URL", "SLESS_NPM_REGISTRY"] {
        let err = refused_start(name, "ftp://mirror.example/");
        assert!(err.contains(name) && err.contains("http:// or https://"), "{err}");
    }
    // A port already taken: the reason on one line, no backtrace even
    // where RUST_BACKTRACE is set.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sless"))
        .args(["server"])
        .env("SLESS_LISTEN", &addr)
        .env("RUST_BACKTRACE", "1")
        .env("SLESS_DATA_DIR", tempfile::tempdir().unwrap().path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with("sless server: ") && last.contains(&addr), "{err}");
    assert!(!err.contains("backtrace"), "{err}");
}
