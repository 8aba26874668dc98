//! What one tenant can do to another, or reach that it should not: record
//! retention per namespace, broker hosts from the operator's allow-list,
//! log streams that end with their token, a protected `/metrics`, cookies
//! scoped to their function.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::json;

use super::harness::{Backend, Server};

const NOISY: &[u8] = br#"
import os

def handle(event, context):
    if event.get("flood"):
        print(os.urandom(24 * 1024).hex())
    return "ok"
"#;

async fn count(server: &Server, ns: &str, name: &str) -> usize {
    server.records(ns, name).await.len()
}

/// Waits until the function's record count is `expected` (after a prune).
async fn wait_count(server: &Server, ns: &str, name: &str, expected: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let got = count(server, ns, name).await;
        if got == expected {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{ns}/{name} kept {got} records, expected {expected}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

crate::both_stores!(one_tenants_calls_never_prune_another_tenants_records);

async fn one_tenants_calls_never_prune_another_tenants_records(backend: Backend) {
    let mut server = Server::start(backend).await;
    for ns in ["team-a", "team-b"] {
        server
            .deploy(ns, "noisy", json!({"runtime": "python3.11"}), &[("handler.py", NOISY)])
            .await;
    }
    for _ in 0..3 {
        server.invoke(Method::POST, "/fn/team-b/noisy", "{}").await;
    }
    for _ in 0..8 {
        server.invoke(Method::POST, "/fn/team-a/noisy", "{}").await;
    }
    wait_count(&server, "team-a", "noisy", 8).await;
    wait_count(&server, "team-b", "noisy", 3).await;
    // The next start prunes at once, here to 3 records per namespace.
    server.kill9();
    server.extra_env.push(("SLESS_INVOCATION_KEEP".into(), "3".into()));
    server.spawn();
    wait_count(&server, "team-a", "noisy", 3).await;
    assert_eq!(
        count(&server, "team-b", "noisy").await,
        3,
        "team-a's calls pruned team-b's records"
    );
}

#[tokio::test]
async fn a_namespace_that_floods_its_output_is_pruned_by_size_alone() {
    let server = Server::start_with(Backend::Sqlite, &[("SLESS_INVOCATION_MAX_BYTES", "400000")]).await;
    for ns in ["flood", "quiet"] {
        server
            .deploy(ns, "noisy", json!({"runtime": "python3.11"}), &[("handler.py", NOISY)])
            .await;
    }
    for _ in 0..3 {
        server.invoke(Method::POST, "/fn/quiet/noisy", "{}").await;
    }
    wait_count(&server, "quiet", "noisy", 3).await;
    // 48 KiB of random text per call: 40 calls write about 2 MB of records,
    // which early prunes keep near 400 KB.
    for _ in 0..40 {
        let (status, _, _) = server
            .invoke(Method::POST, "/fn/flood/noisy", r#"{"flood": true}"#)
            .await;
        assert_eq!(status, StatusCode::OK);
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let kept = count(&server, "flood", "noisy").await;
        if kept > 0 && kept <= 12 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the flood kept {kept} records");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        count(&server, "quiet", "noisy").await,
        3,
        "the flood pruned another namespace"
    );
}
