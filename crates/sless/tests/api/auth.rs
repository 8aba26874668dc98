//! The 401/403 matrix across every endpoint, and token creation.

use reqwest::{Method, StatusCode};
use serde_json::json;

use super::harness::{Backend, Server};

crate::both_stores!(every_endpoint_needs_a_token, scoped_tokens, token_management);

/// Every `/v1` endpoint with a namespace, as (method, path).
fn namespaced_endpoints(ns: &str) -> Vec<(Method, String)> {
    vec![
        (Method::GET, format!("/v1/namespaces/{ns}/functions")),
        (Method::POST, format!("/v1/namespaces/{ns}/functions")),
        (Method::GET, format!("/v1/namespaces/{ns}/functions/f")),
        (Method::PATCH, format!("/v1/namespaces/{ns}/functions/f")),
        (Method::DELETE, format!("/v1/namespaces/{ns}/functions/f")),
        (Method::PUT, format!("/v1/namespaces/{ns}/functions/f/code")),
        (Method::GET, format!("/v1/namespaces/{ns}/functions/f/stats")),
        (Method::GET, format!("/v1/namespaces/{ns}/functions/f/versions")),
        (Method::GET, format!("/v1/namespaces/{ns}/functions/f/versions/1")),
        (Method::DELETE, format!("/v1/namespaces/{ns}/functions/f/versions/1")),
        (Method::GET, format!("/v1/namespaces/{ns}/functions/f/aliases")),
        (Method::PUT, format!("/v1/namespaces/{ns}/functions/f/aliases/live")),
        (Method::DELETE, format!("/v1/namespaces/{ns}/functions/f/aliases/live")),
    ]
}

fn admin_endpoints() -> Vec<(Method, String)> {
    vec![
        (Method::POST, "/v1/tokens".to_string()),
        (Method::GET, "/v1/tokens".to_string()),
        (Method::DELETE, "/v1/tokens/abc".to_string()),
    ]
}

async fn every_endpoint_needs_a_token(backend: Backend) {
    let server = Server::start(backend).await;
    let mut all = namespaced_endpoints("ns");
    all.extend(admin_endpoints());
    all.push((Method::GET, "/v1/whoami".into()));
    all.push((Method::GET, "/v1/no-such-thing".into()));
    all.push((Method::GET, "/v1/openapi.jsonx".into()));
    all.push((Method::GET, "/v1/openapi.json/x".into()));
    for (method, path) in &all {
        for token in [None, Some("wrong-token"), Some("")] {
            let (status, body) = server.call_as(token, method.clone(), path, None).await;
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{method} {path} with {token:?}: {body}"
            );
            assert!(body["error"].as_str().unwrap().contains("token"), "{body}");
        }
        // A scheme other than Bearer is not accepted either.
        let response = server
            .request(method.clone(), path, None)
            .header("authorization", format!("Basic {}", server.admin))
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNAUTHORIZED,
            "{method} {path} with Basic"
        );
    }
    // Public endpoints need none: health, and the API's description (only
    // GET: nothing else at that path opens).
    let (status, doc) = server.call_as(None, Method::GET, "/v1/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    assert!(doc["openapi"].is_string(), "{doc}");
    let (status, _) = server.call_as(None, Method::POST, "/v1/openapi.json", None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (status, body) = server.call_as(None, Method::GET, "/healthz", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "ok");
}

async fn scoped_tokens(backend: Backend) {
    let server = Server::start(backend).await;
    let token_a = server.token_for(&["team-a"]).await;
    for (method, path) in namespaced_endpoints("team-b") {
        let (status, body) = server.call_as(Some(&token_a), method.clone(), &path, None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {body}");
        assert!(body["error"].as_str().unwrap().contains("team-b"), "{body}");
    }
    for (method, path) in admin_endpoints() {
        let (status, body) = server.call_as(Some(&token_a), method.clone(), &path, None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {body}");
    }
    // Its own namespace works end to end.
    let (status, body) = server
        .call_as(
            Some(&token_a),
            Method::POST,
            "/v1/namespaces/team-a/functions",
            Some(json!({"name": "mine", "runtime": "nodejs20"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    for (method, path) in namespaced_endpoints("team-a") {
        let (status, body) = server.call_as(Some(&token_a), method.clone(), &path, None).await;
        assert!(
            status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN,
            "{method} {path} should pass auth: {status} {body}"
        );
    }
    let (status, _) = server
        .call_as(
            Some(&token_a),
            Method::GET,
            "/v1/namespaces/team-a/functions/mine",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    // A token may cover several namespaces; any valid token reads the API description.
    let token_ab = server.token_for(&["team-a", "team-b"]).await;
    let (status, _) = server
        .call_as(Some(&token_ab), Method::GET, "/v1/namespaces/team-b/functions", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = server
        .call_as(Some(&token_a), Method::GET, "/v1/openapi.json", None)
        .await;
    assert_eq!(status, StatusCode::OK);
}

async fn token_management(backend: Backend) {
    let server = Server::start(backend).await;
    let (status, created) = server
        .call(
            Method::POST,
            "/v1/tokens",
            Some(json!({"name": "ci", "namespaces": ["a", "b", "a"]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let secret = created["token"].as_str().unwrap().to_string();
    assert!(secret.starts_with("sless_") && secret.len() > 40);
    assert_eq!(created["namespaces"], json!(["a", "b"]), "each namespace once");
    assert_eq!(created["admin"], false);

    let (status, list) = server.call(Method::GET, "/v1/tokens", None).await;
    assert_eq!(status, StatusCode::OK);
    let text = list.to_string();
    assert!(text.contains("\"ci\""), "{text}");
    assert!(!text.contains(&secret), "the secret is never listed");

    // The store keeps a hash, not the secret.
    if backend == Backend::Sqlite {
        let db = std::fs::read(server.data_dir.path().join("sless.db")).unwrap();
        let wal = std::fs::read(server.data_dir.path().join("sless.db-wal")).unwrap_or_default();
        for bytes in [db, wal] {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "secret stored in clear"
            );
        }
    }

    for bad in [
        json!({"name": "x", "namespaces": ["Not_A_Label"]}),
        json!({"name": "x", "namespaces": []}),
        json!({"name": "", "namespaces": ["a"]}),
        json!({"name": "x", "namespaces": ["a"], "extra": true}),
        json!({"name": "x".repeat(sless_api::MAX_TOKEN_NAME_CHARS + 1), "namespaces": ["a"]}),
        json!({"name": "x\nforged log line", "namespaces": ["a"]}),
        json!({"name": "x", "namespaces": (0..=sless_api::MAX_TOKEN_NAMESPACES).map(|n| format!("n{n}")).collect::<Vec<_>>()}),
    ] {
        let (status, body) = server.call(Method::POST, "/v1/tokens", Some(bad.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad} -> {body}");
    }

    // Revoking takes effect at once.
    let id = created["id"].as_str().unwrap();
    let (status, _) = server
        .call_as(Some(&secret), Method::GET, "/v1/namespaces/a/functions", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = server.call(Method::DELETE, &format!("/v1/tokens/{id}"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = server
        .call_as(Some(&secret), Method::GET, "/v1/namespaces/a/functions", None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}
