//! What a failing function leaves behind and what it tells whom: a start-up
//! failure at call time is a record, a log line and a metric for the owner
//! and a bare 502 with the request id for the caller; a function that serves
//! nothing says why (503 on `/fn`, `status.not_serving` on the API); a
//! handler's error is kept cut to 4 KiB; a body over a limit and a bad cron
//! schedule name what to change.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::harness::{zip_of, Backend, Server};

crate::both_stores!(start_failure_is_recorded_logged_and_counted_but_not_shown_to_the_caller);

/// Imports fine, unless `BOOM` is set: then its import raises (a dependency
/// that fails only with certain settings). Changing `env` deploys the built
/// artifact again without a build, so the failure shows at call time.
/// A module that imports until `deadline` (seconds since the epoch) and
/// raises from then on: it passes the build's load check, and the instances
/// started after the deadline fail to start.
fn boom_at_import_after(deadline: u64) -> String {
    format!(
        r#"
import os, time

if time.time() > {deadline}:
    raise RuntimeError("boom while importing, secret=" + os.environ["BOOM"])

def handle(event, context):
    return {{"ok": True}}
"#
    )
}

async fn start_failure_is_recorded_logged_and_counted_but_not_shown_to_the_caller(backend: Backend) {
    // Idle instances stop after a second: the instance the build checked
    // is gone long before the deadline.
    let server = Server::start_with(backend, &[("SLESS_IDLE_TIMEOUT_SEC", "1")]).await;
    // Long enough for the build (and its load check) on a busy machine.
    let deadline = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 15;
    let code = boom_at_import_after(deadline);
    server
        .deploy(
            "ns",
            "fragile",
            json!({"runtime": "python3.11", "env": {"BOOM": "hunter2"}}),
            &[("handler.py", code.as_bytes())],
        )
        .await;
    // The checked instance stops when idle (the function scales to zero):
    // the next call starts an instance, after the deadline.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(now < deadline, "the build took longer than the test allows");
    tokio::time::sleep(std::time::Duration::from_secs(deadline - now + 1)).await;
    server
        .wait_metric("sless_instances{namespace=\"ns\",function=\"fragile\"}", 0.0, 30)
        .await;

    // The caller: a 502 that says the function failed to start, with the
    // request id, and nothing of the traceback, the secret or a path.
    let response = server
        .request(Method::POST, "/fn/ns/fragile", None)
        .header("x-request-id", "start-failure-1")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(response.headers()["x-request-id"], "start-failure-1");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["request_id"], "start-failure-1", "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(message.contains("ns/fragile failed to start"), "{body}");
    for hidden in [
        "RuntimeError",
        "boom",
        "hunter2",
        "Traceback",
        "handler.py",
        "/code",
        "shim",
    ] {
        assert!(!message.contains(hidden), "{hidden:?} reached the caller: {body}");
    }

    // The owner: a record with the error and the traceback as its log.
    let records = server
        .records_until("ns", "fragile", |r| {
            r.iter().any(|r| r["request_id"] == "start-failure-1")
        })
        .await;
    let record = records.iter().find(|r| r["request_id"] == "start-failure-1").unwrap();
    assert_eq!(record["status"], "502", "{record}");
    assert_eq!(record["trigger"], "http", "{record}");
    assert!(
        record["error"].as_str().unwrap().contains("failed to start"),
        "{record}"
    );
    let printed = record["logs"][0]["text"].as_str().unwrap();
    assert!(printed.contains("RuntimeError: boom while importing"), "{record}");
    assert_eq!(record["logs"][0]["stream"], "stderr", "{record}");

    // ... which `logs` prints under the request id ...
    let logs = server
        .request(
            Method::GET,
            "/v1/namespaces/ns/functions/fragile/logs",
            Some(&server.admin),
        )
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        logs.lines()
            .any(|l| l.contains("start-failure-1 stderr") && l.contains("RuntimeError: boom while importing")),
        "{logs}"
    );
    // ... and /metrics counts.
    server
        .wait_metric(
            r#"sless_invocations_total{namespace="ns",function="fragile",trigger="http",status="502"}"#,
            1.0,
            10,
        )
        .await;

    // A job on the same function fails the same way, with a record of its own.
    let (status, job) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/jobs",
            Some(json!({"name": "once", "function": "fragile", "run_id": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let job = server
        .wait_for("/v1/namespaces/ns/jobs/once", 60, |j| j["status"]["phase"] == "Failed")
        .await;
    assert!(
        job["status"]["error"].as_str().unwrap().contains("could not start"),
        "{job}"
    );
    server
        .records_until("ns", "fragile", |r| {
            r.iter().any(|r| {
                r["trigger"] == "job"
                    && r["logs"][0]["text"]
                        .as_str()
                        .is_some_and(|t| t.contains("RuntimeError: boom while importing"))
            })
        })
        .await;
}

/// The error a handler answers with is its record's `error`, kept up to
/// 4 KiB, cut on a character boundary and marked: a record stays small
/// whatever the handler says.
#[tokio::test]
async fn a_handlers_error_is_kept_cut_to_4_kib() {
    let server = Server::start(Backend::Sqlite).await;
    let code = b"def handle(event, context):\n    return {'statusCode': 500, 'body': {'error': '\\u00e9' * 10000}}\n";
    server
        .deploy(
            "ns",
            "verbose",
            json!({"runtime": "python3.11"}),
            &[("handler.py", code)],
        )
        .await;
    let (status, _, _) = server.invoke(Method::POST, "/fn/ns/verbose", "{}").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    let records = server.records_until("ns", "verbose", |r| !r.is_empty()).await;
    let error = records[0]["error"].as_str().unwrap();
    assert!(error.len() <= 4096, "{} bytes kept", error.len());
    assert!(error.starts_with('\u{e9}'), "{}", records[0]);
    assert!(
        error.ends_with("\u{e9} [... cut]"),
        "not cut, or not marked: {}",
        records[0]
    );
}

#[tokio::test]
async fn a_function_that_serves_nothing_says_why() {
    let server = Server::start(Backend::Sqlite).await;
    let not_serving = |f: &Value| f["status"]["not_serving"].as_str().map(str::to_string);

    // No code yet: /fn says so (still with Retry-After: code may be on its way).
    let (status, created) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "empty", "runtime": "python3.11"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(not_serving(&created).as_deref(), Some("no code uploaded yet"));
    let (status, headers, text) = server.invoke(Method::GET, "/fn/ns/empty", "").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    assert!(text.contains("has no code yet"), "{text}");
    assert!(headers.get("retry-after").is_some());

    // The first build failed: not "retry shortly", but where to look.
    server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "broken", "runtime": "python3.11"})),
        )
        .await;
    let zip = zip_of(&[
        ("handler.py", b"def handle(e, c):\n    return 1\n"),
        ("requirements.txt", b"./vendor/does-not-exist.whl\n"),
    ]);
    let (status, uploaded) = server.upload("ns", "broken", zip).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{uploaded}");
    let hash = uploaded["status"]["code_hash"].as_str().unwrap();
    let failed = server.wait_build_end("ns", "broken", hash).await;
    assert_eq!(failed["status"]["phase"], "Failed", "{failed}");
    let (status, headers, text) = server.invoke(Method::POST, "/fn/ns/broken", "{}").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    assert!(
        text.contains("the last build failed: see `sless get broken -n ns`"),
        "{text}"
    );
    assert!(!text.contains("retry"), "{text}");
    assert!(headers.get("retry-after").is_none());
    let (_, broken) = server
        .call(Method::GET, "/v1/namespaces/ns/functions/broken", None)
        .await;
    assert!(
        not_serving(&broken).unwrap().contains("the last build failed"),
        "{broken}"
    );

    // Serving: no reason. A failed update keeps the previous version serving.
    let hello: &[(&str, &[u8])] = &[("handler.py", b"def handle(e, c):\n    return 'hi'\n")];
    let ready = server
        .deploy("ns", "hello", json!({"runtime": "python3.11"}), hello)
        .await;
    assert_eq!(not_serving(&ready), None, "{ready}");
    assert!(
        ready["status"].get("not_serving").is_none(),
        "absent, not null: {ready}"
    );
    let bad_update = zip_of(&[
        ("handler.py", b"def handle(e, c):\n    return 'v2'\n"),
        ("requirements.txt", b"./vendor/does-not-exist.whl\n"),
    ]);
    let (_, uploaded) = server.upload("ns", "hello", bad_update).await;
    let after = server
        .wait_build_end("ns", "hello", uploaded["status"]["code_hash"].as_str().unwrap())
        .await;
    assert_eq!(after["status"]["phase"], "Failed");
    assert_eq!(not_serving(&after), None, "version 1 serves: {after}");

    // Triggers: every one disabled, or only the http ones.
    for (name, body) in [
        ("web", json!({"name": "web", "type": "http", "function": "hello"})),
        (
            "tick",
            json!({"name": "tick", "type": "cron", "function": "hello", "schedule": "0 3 * * *"}),
        ),
    ] {
        let (status, created) = server
            .call(Method::POST, "/v1/namespaces/ns/triggers", Some(body))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{name}: {created}");
    }
    let disable = |path: &'static str| server.call(Method::PATCH, path, Some(json!({"enabled": false})));
    disable("/v1/namespaces/ns/triggers/web").await;
    let (_, hello) = server
        .call(Method::GET, "/v1/namespaces/ns/functions/hello", None)
        .await;
    assert!(
        not_serving(&hello).unwrap().contains("http triggers are disabled"),
        "{hello}"
    );
    disable("/v1/namespaces/ns/triggers/tick").await;
    let (_, list) = server.call(Method::GET, "/v1/namespaces/ns/functions", None).await;
    let hello = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "hello")
        .unwrap();
    assert_eq!(
        not_serving(hello).as_deref(),
        Some("disabled: all 2 of its triggers are disabled"),
        "{hello}"
    );
    // With no http trigger left, a call is refused as the function is off,
    // and says where to read why.
    let (status, body) = server
        .call(Method::DELETE, "/v1/namespaces/ns/triggers/web", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let answer = super::harness::eventually(std::time::Duration::from_secs(20), || async {
        match server.invoke(Method::POST, "/fn/ns/hello", "{}").await {
            (StatusCode::SERVICE_UNAVAILABLE, _, body) if !body.contains("http triggers") => Ok(body),
            (status, _, body) => Err(format!("{status}: {body}")),
        }
    })
    .await;
    assert!(
        answer.contains("every trigger of it is disabled") && answer.contains("status.not_serving"),
        "{answer}"
    );

    let (_, pinned_off) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/functions/empty",
            Some(json!({"replicas": 0})),
        )
        .await;
    assert_eq!(not_serving(&pinned_off).as_deref(), Some("no code uploaded yet"));
}

#[tokio::test]
async fn bodies_over_a_limit_name_it_and_the_setting_that_raises_it() {
    let server = Server::start_with(
        Backend::Sqlite,
        &[
            ("SLESS_MAX_INVOKE_BYTES", "1000"),
            ("SLESS_MAX_JSON_BYTES", "2000"),
            ("SLESS_MAX_UPLOAD_BYTES", "3000"),
        ],
    )
    .await;
    server
        .deploy(
            "ns",
            "small",
            json!({"runtime": "python3.11"}),
            &[("handler.py", b"def handle(e, c):\n    return 'ok'\n")],
        )
        .await;
    let (status, _, text) = server.invoke(Method::POST, "/fn/ns/small", &"x".repeat(1001)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{text}");
    assert!(
        text.contains("limit of 1000 bytes") && text.contains("SLESS_MAX_INVOKE_BYTES"),
        "{text}"
    );

    let big_json = json!({"name": "big", "runtime": "python3.11", "env": {"A": "x".repeat(2000)}});
    let (status, body) = server
        .call(Method::POST, "/v1/namespaces/ns/functions", Some(big_json))
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(
        message.contains("limit of 2000 bytes") && message.contains("SLESS_MAX_JSON_BYTES"),
        "{body}"
    );

    let random: Vec<u8> = (0..4000).map(|_| rand::random::<u8>()).collect();
    let (status, body) = server.upload("ns", "small", zip_of(&[("blob.bin", &random)])).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(
        message.contains("limit of 3000 bytes") && message.contains("SLESS_MAX_UPLOAD_BYTES"),
        "{body}"
    );

    // A declared length over the limit is refused at once: a client that
    // waits for `100 Continue` (as curl does for large bodies) gets the 413
    // instead, and sends nothing.
    for (path, setting) in [
        ("/fn/ns/small", "SLESS_MAX_INVOKE_BYTES"),
        ("/v1/namespaces/ns/functions", "SLESS_MAX_JSON_BYTES"),
        ("/v1/namespaces/ns/functions/small/code", "SLESS_MAX_UPLOAD_BYTES"),
    ] {
        let answer = announce_a_body(&server, path, 50 * 1024 * 1024);
        assert!(
            answer.starts_with("HTTP/1.1 413") && answer.contains(setting),
            "{path}: {answer}"
        );
    }
}

/// Sends a request's head announcing a body of `length` bytes, waiting for
/// `100 Continue`, and returns what the server answers to the head alone.
fn announce_a_body(server: &Server, path: &str, length: usize) -> String {
    use std::io::{Read, Write};
    let addr = server.url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let method = if path.ends_with("/code") { "PUT" } else { "POST" };
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\n\
         Content-Length: {length}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
        server.admin
    )
    .unwrap();
    let mut answer = vec![0; 4096];
    let n = stream.read(&mut answer).unwrap_or(0);
    String::from_utf8_lossy(&answer[..n]).into_owned()
}

#[tokio::test]
async fn a_bad_cron_schedule_names_the_field_and_its_range() {
    let server = Server::start(Backend::Sqlite).await;
    server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "f", "runtime": "python3.11"})),
        )
        .await;
    for (schedule, expected) in [
        ("0 25 * * *", r#"the hour field "25" is not valid: it takes 0-23"#),
        (
            "*/5 * * 13 *",
            r#"the month field "13" is not valid: it takes 1-12 or JAN-DEC"#,
        ),
        ("99 0 9 * * *", r#"the second field "99" is not valid: it takes 0-59"#),
        (
            "0 9 * *",
            "5 fields (minute hour day-of-month month day-of-week), or 6 with seconds first; got 4 fields",
        ),
    ] {
        let (status, body) = server
            .call(
                Method::POST,
                "/v1/namespaces/ns/triggers",
                Some(json!({"name": "t", "type": "cron", "function": "f", "schedule": schedule})),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{schedule}: {body}");
        let message = body["error"].as_str().unwrap();
        assert!(message.contains(expected), "{schedule}: {message}");
    }
}
