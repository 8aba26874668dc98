//! The code-safety gate on the upload path: refusals are 400 and store
//! nothing; decisions show in the status and on /metrics.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::harness::{zip_of, Backend, Server};

const MINER: &[u8] = b"import subprocess\n\ndef handle(event, context):\n    subprocess.Popen(['./xmrig', '-o', 'stratum+tcp://pool.example.net:3333'])\n    return 'ok'\n";
const INNOCENT: &[u8] =
    b"# Data mining helpers: count words.\ndef handle(event, context):\n    return len(str(event).split())\n";

async fn new_function(server: &Server) {
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "f", "runtime": "python3.11"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

#[tokio::test]
async fn static_rules_refuse_a_miner_and_pass_innocent_code() {
    let server = Server::start_with(Backend::Sqlite, &[("SLESS_CODE_CHECK", "static")]).await;
    new_function(&server).await;
    let (status, body) = server.upload("ns", "f", zip_of(&[("handler.py", MINER)])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(message.starts_with("code validation failed: "), "{message}");
    assert!(message.contains("(handler.py:4)"), "names file and line: {message}");
    let (_, got) = server.call(Method::GET, "/v1/namespaces/ns/functions/f", None).await;
    assert_eq!(got["status"]["code_hash"], Value::Null, "nothing stored");
    assert!(!server.data_dir.path().join("blobs/archives/ns/f").exists());

    let (status, body) = server.upload("ns", "f", zip_of(&[("handler.py", INNOCENT)])).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["status"]["validation"], "passed: static");

    let metrics = server
        .request(Method::GET, "/metrics", Some(&server.admin))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("sless_code_checks_total{decision=\"rule_hit\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("sless_code_checks_total{decision=\"static_passed\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn llm_outage_follows_the_fail_mode() {
    // Nothing listens on port 9 of loopback: the reviewer is unreachable.
    let llm = [
        ("SLESS_CODE_CHECK", "llm"),
        ("SLESS_LLM_ENDPOINT", "http://127.0.0.1:9"),
        ("SLESS_LLM_TIMEOUT", "2"),
    ];
    let mut closed = llm.to_vec();
    closed.push(("SLESS_LLM_FAIL_MODE", "closed"));
    let server = Server::start_with(Backend::Sqlite, &closed).await;
    new_function(&server).await;
    let (status, body) = server.upload("ns", "f", zip_of(&[("handler.py", INNOCENT)])).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("code checker unavailable"),
        "{body}"
    );
    // The static rules still run first and win.
    let (status, body) = server.upload("ns", "f", zip_of(&[("handler.py", MINER)])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    let server = Server::start_with(Backend::Sqlite, &llm).await;
    new_function(&server).await;
    let (status, body) = server.upload("ns", "f", zip_of(&[("handler.py", INNOCENT)])).await;
    assert_eq!(status, StatusCode::ACCEPTED, "fail open: {body}");
    let validation = body["status"]["validation"].as_str().unwrap();
    assert!(validation.starts_with("unchecked: llm"), "{validation}");
}

#[tokio::test]
async fn llm_mode_without_endpoint_refuses_to_start() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sless"))
        .arg("server")
        .env("SLESS_CODE_CHECK", "llm")
        .env_remove("SLESS_LLM_ENDPOINT")
        .env("SLESS_DATA_DIR", tempfile::tempdir().unwrap().path())
        .env("SLESS_LISTEN", "127.0.0.1:0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("SLESS_LLM_ENDPOINT"), "{err}");
}
