//! What the console stands on, without a browser: the files at `/ui/` and
//! their security headers, `GET /v1/whoami`, the per-function stats, and
//! errors that name the field they are about.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::harness::{Backend, Server};

const HANDLER: &[u8] = br#"
def handle(event, context):
    if event.get("fail"):
        raise RuntimeError("asked to fail")
    return {"ok": True}
"#;

crate::both_stores!(
    whoami_names_the_token_and_its_namespaces,
    stats_count_calls_errors_and_latency
);

#[tokio::test]
async fn console_files_carry_strict_headers() {
    let server = Server::start(Backend::Sqlite).await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let get = |path: &str| client.get(format!("{}{path}", server.url)).send();

    let redirect = get("/ui").await.unwrap();
    assert_eq!(redirect.status(), StatusCode::PERMANENT_REDIRECT);
    assert_eq!(redirect.headers()["location"], "/ui/");

    for (path, status, content_type) in [
        ("/ui", 308, None),
        ("/ui/", 200, Some("text/html; charset=utf-8")),
        ("/ui/index.html", 200, Some("text/html; charset=utf-8")),
        ("/ui/js/main.js", 200, Some("text/javascript; charset=utf-8")),
        ("/ui/app.css", 200, Some("text/css; charset=utf-8")),
        ("/ui/vendor/uPlot.esm.js", 200, Some("text/javascript; charset=utf-8")),
        ("/ui/vendor/uPlot.LICENSE", 200, Some("text/plain; charset=utf-8")),
        ("/ui/no-such-file.js", 404, Some("application/json")),
        ("/ui/../Cargo.toml", 404, None),
        ("/ui/%2e%2e/Cargo.toml", 404, None),
        ("POST /ui/", 405, Some("application/json")),
        ("DELETE /ui/js/main.js", 405, Some("application/json")),
    ] {
        let (method, path) = path.split_once(' ').unwrap_or(("GET", path));
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let response = client
            .request(method, format!("{}{path}", server.url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), status, "{path}");
        let headers = response.headers();
        if let Some(content_type) = content_type {
            assert_eq!(headers["content-type"], content_type, "{path}");
        }
        if path.contains("..") || path.contains("%2e") {
            continue; // normalised by the client or refused before the console
        }
        let csp = headers["content-security-policy"].to_str().unwrap();
        for directive in [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "connect-src 'self'",
            "frame-ancestors 'none'",
            "base-uri 'none'",
        ] {
            assert!(csp.contains(directive), "{path}: {csp}");
        }
        assert!(
            !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval") && !csp.contains("http"),
            "{csp}"
        );
        assert_eq!(headers["x-frame-options"], "DENY", "{path}");
        assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(headers["referrer-policy"], "no-referrer", "{path}");
    }

    // The page loads only its own files: no inline script, nothing from another origin.
    let index = get("/ui/").await.unwrap().text().await.unwrap();
    assert!(
        index.contains(r#"<script type="module" src="js/main.js"></script>"#),
        "{index}"
    );
    assert!(!index.contains("//"), "no absolute URLs: {index}");

    // ETags: a matching If-None-Match is a 304 with the same strict headers.
    let first = get("/ui/js/api.js").await.unwrap();
    let etag = first.headers()["etag"].to_str().unwrap().to_string();
    assert_eq!(first.headers()["cache-control"], "no-cache");
    let again = client
        .get(format!("{}/ui/js/api.js", server.url))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(again.headers()["x-frame-options"], "DENY");
    let other = client
        .get(format!("{}/ui/js/dom.js", server.url))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::OK, "another file's tag does not match");

    // Only reads: the console adds no endpoint that writes or bypasses auth.
    let post = client.post(format!("{}/ui/", server.url)).send().await.unwrap();
    assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
    let head = client.head(format!("{}/ui/app.css", server.url)).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::OK);
}

async fn whoami_names_the_token_and_its_namespaces(backend: Backend) {
    let server = Server::start(backend).await;
    let (status, me) = server.call_as(None, Method::GET, "/v1/whoami", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{me}");

    let (status, me) = server.call(Method::GET, "/v1/whoami", None).await;
    assert_eq!(status, StatusCode::OK, "{me}");
    assert_eq!(me, json!({"name": "admin", "admin": true, "namespaces": []}));

    for ns in ["beta", "alpha"] {
        let (status, body) = server
            .call(
                Method::POST,
                &format!("/v1/namespaces/{ns}/functions"),
                Some(json!({"name": "f", "runtime": "python3.11"})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let (_, me) = server.call(Method::GET, "/v1/whoami", None).await;
    assert_eq!(me["namespaces"], json!(["alpha", "beta"]), "namespaces in use, by name");

    let (status, created) = server
        .call(
            Method::POST,
            "/v1/tokens",
            Some(json!({"name": "team-a", "namespaces": ["team-a", "shared"]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let token = created["token"].as_str().unwrap();
    let (status, me) = server.call_as(Some(token), Method::GET, "/v1/whoami", None).await;
    assert_eq!(status, StatusCode::OK, "{me}");
    assert_eq!(
        me,
        json!({"name": "team-a", "admin": false, "namespaces": ["team-a", "shared"]})
    );
}

async fn stats_count_calls_errors_and_latency(backend: Backend) {
    let server = Server::start(backend).await;
    server
        .deploy(
            "ns",
            "calc",
            json!({"runtime": "python3.11"}),
            &[("handler.py", HANDLER)],
        )
        .await;
    for body in [r#"{}"#, r#"{}"#, r#"{}"#, r#"{"fail": true}"#] {
        server.invoke(Method::POST, "/fn/ns/calc", body).await;
    }
    for _ in 0..200 {
        if server.records("ns", "calc").await.len() >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let path = "/v1/namespaces/ns/functions/calc/stats";
    let (status, stats) = server
        .call(Method::GET, &format!("{path}?window=3600&step=60"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{stats}");
    assert_eq!(stats["calls"], 4, "{stats}");
    assert_eq!(stats["errors"], 1, "{stats}");
    assert_eq!(stats["window"], 3600);
    assert_eq!(stats["truncated"], false);
    let points = stats["points"].as_array().unwrap();
    assert_eq!(points.len(), 60);
    let sum = |key: &str| points.iter().map(|p| p[key].as_u64().unwrap()).sum::<u64>();
    assert_eq!((sum("calls"), sum("errors")), (4, 1));
    let (p50, p99) = (stats["p50_ms"].as_f64().unwrap(), stats["p99_ms"].as_f64().unwrap());
    assert!(p50 > 0.0 && p50 <= p99, "{stats}");
    // Steps start on whole minutes.
    let first: chrono::DateTime<chrono::Utc> = points[0]["start"].as_str().unwrap().parse().unwrap();
    assert_eq!(first.timestamp() % 60, 0, "{stats}");
    // The default is the last hour by minute.
    let (_, default) = server.call(Method::GET, path, None).await;
    assert_eq!(
        (default["window"].clone(), default["step"].clone()),
        (json!(3600), json!(60))
    );

    for (query, field) in [
        ("window=10", "window"),
        ("window=99999999", "window"),
        ("window=3600&step=1", "step"),
        ("window=604800&step=60", "step"),
        ("window=600&step=601", "step"),
    ] {
        let (status, body) = server.call(Method::GET, &format!("{path}?{query}"), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert_eq!(body["field"], field, "{query}: {body}");
    }
    let (status, body) = server.call(Method::GET, &format!("{path}?bogus=1"), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = server
        .call(Method::GET, "/v1/namespaces/ns/functions/nope/stats", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let other = server.token_for(&["other"]).await;
    let (status, body) = server.call_as(Some(&other), Method::GET, path, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
}

#[tokio::test]
async fn errors_name_the_field_they_are_about() {
    let server = Server::start(Backend::Sqlite).await;
    let cases: Vec<(&str, Value, &str)> = vec![
        ("functions", json!({"runtime": "python3.11"}), "name"),
        (
            "functions",
            json!({"name": "Bad Name", "runtime": "python3.11"}),
            "name",
        ),
        ("functions", json!({"name": "f"}), "runtime"),
        ("functions", json!({"name": "f", "runtime": "cobol"}), "runtime"),
        (
            "functions",
            json!({"name": "f", "runtime": "python3.11", "memory_mb": 1}),
            "memory_mb",
        ),
        (
            "functions",
            json!({"name": "f", "runtime": "python3.11", "entrypoint": "x"}),
            "entrypoint",
        ),
        (
            "functions",
            json!({"name": "f", "runtime": "python3.11", "env": {"1X": "v"}}),
            "env",
        ),
        (
            "functions",
            json!({"name": "f", "runtime": "python3.11", "env": {"X": "a\u{0}b"}}),
            "env",
        ),
        (
            "functions",
            json!({"name": "f", "runtime": "python3.11", "env": {"SLESS_SECRETS_DIR": "/etc"}}),
            "env",
        ),
        (
            "functions",
            json!({"name": "f", "runtime": "python3.11",
                   "env_from_secrets": [{"env": "SLESS_X", "secret": "s", "key": "k"}]}),
            "env_from_secrets",
        ),
        (
            "functions",
            json!({"name": "f", "runtime": "python3.11", "bogus": 1}),
            "bogus",
        ),
        (
            "functions",
            json!({"name": "f", "runtime": "python3.11", "status": {}}),
            "status",
        ),
    ];
    for (kind, body, field) in cases {
        let (status, err) = server
            .call(Method::POST, &format!("/v1/namespaces/ns/{kind}"), Some(body.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {err}");
        assert_eq!(err["field"], field, "{body}: {err}");
    }
    let (status, _) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "f", "runtime": "python3.11"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let triggers: Vec<(Value, &str)> = vec![
        (json!({"name": "t", "type": "cron", "function": "f"}), "schedule"),
        (
            json!({"name": "t", "type": "cron", "function": "f", "schedule": "61 * * * *"}),
            "schedule",
        ),
        (
            json!({"name": "t", "type": "cron", "function": "f", "schedule": "* * * * *", "timezone": "Mars/Base"}),
            "timezone",
        ),
        (json!({"name": "t", "type": "http", "function": "nope"}), "function"),
        (
            json!({"name": "t", "type": "http", "function": "f", "queue": "q"}),
            "queue",
        ),
        (
            json!({"name": "t", "type": "amqp", "function": "f", "queue": "q"}),
            "broker_url",
        ),
        (
            json!({"name": "t", "type": "amqp", "function": "f", "queue": "q", "broker_url": "amqp://10.1.2.3:5672/"}),
            "broker_url",
        ),
        (json!({"name": "<b>", "type": "http", "function": "f"}), "name"),
        (json!({"name": "t", "type": "smtp", "function": "f"}), "type"),
    ];
    for (body, field) in triggers {
        let (status, err) = server
            .call(Method::POST, "/v1/namespaces/ns/triggers", Some(body.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {err}");
        assert_eq!(err["field"], field, "{body}: {err}");
    }
    let (status, job) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/jobs",
            Some(json!({"name": "j", "function": "f", "run_id": 0})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let (status, err) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/jobs/j",
            Some(json!({"wait_timeout_sec": 100000})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(err["field"], "wait_timeout_sec", "{err}");
    // An error about no particular field has none.
    let (status, err) = server.call(Method::GET, "/v1/namespaces/ns/functions/nope", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(err.get("field").is_none(), "{err}");
}
