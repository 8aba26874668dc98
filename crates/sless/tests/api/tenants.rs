//! What one tenant can do to another, or reach that it should not: record
//! retention per namespace, broker hosts from the operator's allow-list,
//! log streams that end with their token, a protected `/metrics`, cookies
//! scoped to their function, quotas that concurrent requests cannot pass
//! together.

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

crate::both_stores!(
    one_tenants_calls_never_prune_another_tenants_records,
    one_functions_calls_never_prune_its_neighbours_records
);

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

async fn one_functions_calls_never_prune_its_neighbours_records(backend: Backend) {
    let mut server = Server::start(backend).await;
    for name in ["busy", "quiet"] {
        server
            .deploy("team", name, json!({"runtime": "python3.11"}), &[("handler.py", NOISY)])
            .await;
    }
    for _ in 0..3 {
        server.invoke(Method::POST, "/fn/team/quiet", "{}").await;
    }
    for _ in 0..8 {
        server.invoke(Method::POST, "/fn/team/busy", "{}").await;
    }
    wait_count(&server, "team", "busy", 8).await;
    wait_count(&server, "team", "quiet", 3).await;
    // The next start prunes at once: 3 records per function, 100 per namespace.
    server.kill9();
    server
        .extra_env
        .push(("SLESS_INVOCATION_KEEP_PER_FUNCTION".into(), "3".into()));
    server.spawn();
    wait_count(&server, "team", "busy", 3).await;
    assert_eq!(
        count(&server, "team", "quiet").await,
        3,
        "the busy function's calls pruned its neighbour's records"
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

#[tokio::test]
async fn amqp_triggers_reach_only_the_brokers_the_operator_allows() {
    let mut server = Server::start_with(Backend::Sqlite, &[("SLESS_AMQP_ALLOWED_HOSTS", "127.0.0.1")]).await;
    server
        .deploy(
            "ns",
            "noisy",
            json!({"runtime": "python3.11"}),
            &[("handler.py", NOISY)],
        )
        .await;
    let trigger = |name: &str, url: &str| json!({"name": name, "type": "amqp", "function": "noisy", "broker_url": url, "queue": format!("q-{}", super::harness::hex_id())});
    // Other hosts are refused before any connection: nothing about what answers there.
    for url in [
        "amqp://10.1.2.3:5672/",
        "amqp://u:p@localhost:5432/",
        "amqp://127.0.0.1:5672@evil:6379/",
    ] {
        let (status, body) = server
            .call(Method::POST, "/v1/namespaces/ns/triggers", Some(trigger("scan", url)))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{url}: {body}");
        let error = body["error"].as_str().unwrap();
        assert!(error.contains("SLESS_AMQP_ALLOWED_HOSTS"), "{url}: {error}");
        assert!(!error.to_lowercase().contains("refused"), "{url}: {error}");
    }
    // An allowed host (any port) is accepted, also a closed one.
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/triggers",
            Some(trigger("closed", "amqp://127.0.0.1:1/")),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // The operator narrows the list: the stored trigger is not dialled again.
    server.kill9();
    server
        .extra_env
        .push(("SLESS_AMQP_ALLOWED_HOSTS".into(), "127.0.0.1:5672".into()));
    server.spawn();
    let trigger = server
        .wait_for("/v1/namespaces/ns/triggers/closed", 15, |t| {
            t["status"]["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("SLESS_AMQP_ALLOWED_HOSTS"))
        })
        .await;
    assert!(
        !trigger["status"]["last_error"].as_str().unwrap().contains("refused"),
        "{trigger}"
    );
}

#[tokio::test]
async fn a_revoked_token_or_a_deleted_function_ends_its_log_streams() {
    let server = Server::start(Backend::Sqlite).await;
    server
        .deploy(
            "ns",
            "noisy",
            json!({"runtime": "python3.11"}),
            &[("handler.py", NOISY)],
        )
        .await;
    let (status, created) = server
        .call(
            Method::POST,
            "/v1/tokens",
            Some(json!({"name": "reader", "namespaces": ["ns"]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let secret = created["token"].as_str().unwrap();
    let mut response = server
        .request(
            Method::GET,
            "/v1/namespaces/ns/functions/noisy/logs?follow=true",
            Some(secret),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let (status, _) = server
        .call(
            Method::DELETE,
            &format!("/v1/tokens/{}", created["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // The stream ends on its own (the server closes it), well before the bound.
    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        while let Ok(Some(_)) = response.chunk().await {}
    })
    .await;
    assert!(ended.is_ok(), "the stream outlived its token");

    // So does a deleted function's (`sless logs -f` used to wait forever).
    let mut response = server
        .request(
            Method::GET,
            "/v1/namespaces/ns/functions/noisy/logs?follow=true",
            Some(super::harness::ADMIN),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let (status, _) = server
        .call(Method::DELETE, "/v1/namespaces/ns/functions/noisy", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        while let Ok(Some(_)) = response.chunk().await {}
    })
    .await;
    assert!(ended.is_ok(), "the stream outlived its function");
}

#[tokio::test]
async fn metrics_need_a_token_and_forget_deleted_functions() {
    let server = Server::start_with(Backend::Sqlite, &[("SLESS_METRICS_TOKEN", "scrape-0123456789abcdef")]).await;
    server
        .deploy(
            "ns",
            "noisy",
            json!({"runtime": "python3.11"}),
            &[("handler.py", NOISY)],
        )
        .await;
    server.invoke(Method::POST, "/fn/ns/noisy", "{}").await;
    let scoped = server.token_for(&["ns"]).await;
    for (token, expected) in [
        (None, StatusCode::UNAUTHORIZED),
        (Some(scoped.as_str()), StatusCode::FORBIDDEN),
        (Some("scrape-0123456789abcdef"), StatusCode::OK),
        (Some(super::harness::ADMIN), StatusCode::OK),
    ] {
        let response = server.request(Method::GET, "/metrics", token).send().await.unwrap();
        assert_eq!(response.status(), expected, "{token:?}");
        let text = response.text().await.unwrap();
        assert_eq!(
            text.contains("namespace=\"ns\""),
            expected == StatusCode::OK,
            "{token:?}: {text}"
        );
    }
    let series = r#"sless_invocations_total{namespace="ns",function="noisy",trigger="http",status="200"}"#;
    assert_eq!(server.metric(series).await, Some(1.0));
    let (status, _) = server
        .call(Method::DELETE, "/v1/namespaces/ns/functions/noisy", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(server.metric(series).await, None, "a deleted function's series stayed");
}

/// Every function and the console share one origin: a function's answer
/// sets cookies on its own path only, and drops the headers that act on the
/// whole origin (a service worker's scope beyond its path, clearing what the
/// browser keeps for it). An answer with more headers than any client takes
/// is a 502, and the function and the server go on.
#[tokio::test]
async fn a_functions_answer_acts_on_its_own_path_only() {
    let server = Server::start(Backend::Sqlite).await;
    let code = br#"
def handle(event, context):
    if event.get("many"):
        return {"statusCode": 200, "headers": {f"x-{i}": "" for i in range(30000)}, "body": "ok"}
    headers = {
        "Set-Cookie": "sid=stolen; Path=/; Domain=127.0.0.1; HttpOnly",
        "Service-Worker-Allowed": "/",
        "Clear-Site-Data": '"*"',
        "X-Kept": "yes",
    }
    return {"statusCode": 200, "headers": headers, "body": "ok"}
"#;
    server
        .deploy("ns", "app", json!({"runtime": "python3.11"}), &[("handler.py", code)])
        .await;
    let (status, headers, _) = server.invoke(Method::GET, "/fn/ns/app", "").await;
    assert_eq!(status, StatusCode::OK);
    let cookie = headers["set-cookie"].to_str().unwrap();
    assert_eq!(cookie, "sid=stolen; HttpOnly; Path=/fn/ns/app");
    assert_eq!(headers["x-kept"], "yes");
    for dropped in ["service-worker-allowed", "clear-site-data"] {
        assert!(
            headers.get(dropped).is_none(),
            "{dropped} reached the caller: {headers:?}"
        );
    }

    let (status, _, body) = server.invoke(Method::POST, "/fn/ns/app", r#"{"many": true}"#).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert!(body.contains("answered with what the gateway cannot send"), "{body}");
    let refused = server
        .records_until("ns", "app", |r| r.iter().any(|r| r["status"] == "502"))
        .await;
    let error = refused.iter().find(|r| r["status"] == "502").unwrap()["error"].to_string();
    assert!(
        error.contains("more than 1000 headers") && !error.contains("crashed"),
        "{error}"
    );
    let (status, _, _) = server.invoke(Method::GET, "/fn/ns/app", "").await;
    assert_eq!(status, StatusCode::OK);
}

/// A namespace's quotas: functions, instances, memory and triggers (403),
/// job runs at once (429); each refusal names its setting, and other namespaces
/// are not held back.
#[tokio::test]
async fn namespace_quotas_are_refused_by_name() {
    let server = Server::start_with(
        Backend::Sqlite,
        &[
            ("SLESS_NS_MAX_FUNCTIONS", "2"),
            ("SLESS_NS_MAX_INSTANCES", "6"),
            ("SLESS_NS_MAX_MEMORY_MB", "2048"),
            ("SLESS_NS_MAX_JOB_RUNS", "1"),
            ("SLESS_NS_MAX_JOBS", "2"),
            ("SLESS_NS_MAX_TRIGGERS", "1"),
        ],
    )
    .await;
    let create = |ns: &'static str, body: serde_json::Value| {
        let server = &server;
        async move {
            server
                .call(Method::POST, &format!("/v1/namespaces/{ns}/functions"), Some(body))
                .await
        }
    };
    let slow = b"import time\n\ndef handle(e, c):\n    time.sleep(30)\n    return 'done'\n";
    server
        .deploy(
            "ns",
            "one",
            json!({"runtime": "python3.11", "timeout_sec": 60}),
            &[("handler.py", slow)],
        )
        .await;
    let (status, body) = create(
        "ns",
        json!({"name": "two", "runtime": "python3.11", "max_instances": 2}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = create("ns", json!({"name": "three", "runtime": "python3.11"})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("SLESS_NS_MAX_FUNCTIONS"),
        "{body}"
    );
    let (status, body) = create("other", json!({"name": "three", "runtime": "python3.11"})).await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "another namespace is not held back: {body}"
    );

    let (status, body) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/functions/two",
            Some(json!({"max_instances": 3})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("SLESS_NS_MAX_INSTANCES"),
        "{body}"
    );
    let (status, body) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/functions/two",
            Some(json!({"memory_mb": 1024})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("SLESS_NS_MAX_MEMORY_MB"),
        "{body}"
    );

    let job = |name: &'static str| json!({"name": name, "function": "one", "run_id": 1});
    let (status, body) = server
        .call(Method::POST, "/v1/namespaces/ns/jobs", Some(job("first")))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = server
        .call(Method::POST, "/v1/namespaces/ns/jobs", Some(job("second")))
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("SLESS_NS_MAX_JOB_RUNS"),
        "{body}"
    );
    // Jobs held, run or not: the second fits, the third is refused, a name
    // taken is still a 409, another namespace's job is its own.
    let idle = |name: &'static str| json!({"name": name, "function": "one", "run_id": 0});
    let (status, body) = server
        .call(Method::POST, "/v1/namespaces/ns/jobs", Some(idle("idle")))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = server
        .call(Method::POST, "/v1/namespaces/ns/jobs", Some(idle("third")))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("namespace ns is at its quota of 2 jobs (the server's SLESS_NS_MAX_JOBS)"),
        "{body}"
    );
    let (status, body) = server
        .call(Method::POST, "/v1/namespaces/ns/jobs", Some(idle("idle")))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/namespaces/other/jobs",
            Some(json!({"name": "third", "function": "three", "run_id": 0})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // A job's event is stored with it: bounded as an asynchronous call's.
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/namespaces/other/jobs",
            Some(json!({"name": "big", "function": "three", "event": "x".repeat(300_000)})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["field"], "event");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("a job's event must be at most 262144 bytes as JSON"),
        "{body}"
    );

    let trigger =
        |name: &'static str| json!({"name": name, "type": "cron", "function": "one", "schedule": "0 0 1 1 *"});
    let (status, body) = server
        .call(Method::POST, "/v1/namespaces/ns/triggers", Some(trigger("yearly")))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = server
        .call(Method::POST, "/v1/namespaces/ns/triggers", Some(trigger("again")))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("SLESS_NS_MAX_TRIGGERS"),
        "{body}"
    );
}

/// What a namespace runs is bounded by the instance quota too, not only
/// what it declares: the instances of an earlier version still finishing
/// calls count, so deploying again and again while calls hang gets a
/// tenant no more instances. An idle instance gives its room up; busy
/// ones do not, and the call that finds none is a 429 saying why.
#[tokio::test]
async fn draining_instances_count_against_the_namespace_quota() {
    let server = std::sync::Arc::new(Server::start_with(Backend::Sqlite, &[("SLESS_NS_MAX_INSTANCES", "2")]).await);
    let slow = |tag: &str| {
        format!("import time\n# {tag}\ndef handle(event, context):\n    time.sleep(event.get('secs', 0))\n    return 'done'\n")
    };
    let spec = json!({"runtime": "python3.11", "timeout_sec": 60, "max_instances": 1});
    server
        .deploy("ns", "slow", spec.clone(), &[("handler.py", slow("v1").as_bytes())])
        .await;
    server
        .deploy(
            "ns",
            "hello",
            json!({"runtime": "python3.11", "max_instances": 1}),
            &[("handler.py", b"def handle(e, c):\n    return 'hi'\n")],
        )
        .await;
    // Each deploy's checked instance serves on: two of two, one busy for 15 s.
    let hang = || {
        let server = server.clone();
        tokio::spawn(async move { server.invoke(Method::POST, "/fn/ns/slow", r#"{"secs": 15}"#).await })
    };
    let first = hang();
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // hello's idle instance makes room for the new version's check.
    server
        .deploy("ns", "slow", spec.clone(), &[("handler.py", slow("v2").as_bytes())])
        .await;
    let second = hang();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The first version's instance drains its call; the second's is busy.
    let (status, headers, text) = server.invoke(Method::GET, "/fn/ns/hello", "").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{text}");
    assert!(
        text.contains("namespace ns runs as many instances as its quota allows (2 of 2 instances"),
        "{text}"
    );
    assert_eq!(headers["retry-after"], "1");
    let failed = server
        .deploy_fails("ns", "slow", spec.clone(), &[("handler.py", slow("v3").as_bytes())])
        .await;
    let message = failed["status"]["message"].as_str().unwrap();
    assert!(
        message.contains(
            "checking the version needs an instance: namespace ns runs as many instances as its quota allows"
        ),
        "{message}"
    );

    for call in [first, second] {
        let (status, _, text) = call.await.unwrap();
        assert_eq!((status, text.as_str()), (StatusCode::OK, r#""done""#));
    }
    // The drained instance gave its room back.
    let (status, _, text) = server.invoke(Method::GET, "/fn/ns/hello", "").await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, r#""hi""#));
}

/// Twenty concurrent creates of functions, triggers and secrets in one
/// namespace: as many pass as its quota has room for, no more.
#[tokio::test]
async fn concurrent_creates_cannot_pass_a_quota_together() {
    let server = Server::start_with(
        Backend::Sqlite,
        &[("SLESS_NS_MAX_FUNCTIONS", "3"), ("SLESS_NS_MAX_TRIGGERS", "3")],
    )
    .await;
    let created = |kind: &'static str, body: fn(usize) -> serde_json::Value| {
        let server = &server;
        async move {
            let calls = (0..20).map(|n| async move {
                let path = format!("/v1/namespaces/ns/{kind}");
                server.call(Method::POST, &path, Some(body(n))).await
            });
            let answers = futures::future::join_all(calls).await;
            for (status, body) in &answers {
                assert!(
                    [StatusCode::CREATED, StatusCode::FORBIDDEN, StatusCode::BAD_REQUEST].contains(status),
                    "{status}: {body}"
                );
            }
            answers
                .iter()
                .filter(|(status, _)| *status == StatusCode::CREATED)
                .count()
        }
    };
    let functions = created(
        "functions",
        |n| json!({"name": format!("f{n}"), "runtime": "python3.11"}),
    )
    .await;
    assert_eq!(functions, 3, "SLESS_NS_MAX_FUNCTIONS is 3");
    let (status, list) = server.call(Method::GET, "/v1/namespaces/ns/functions", None).await;
    assert_eq!(
        (status, list["items"].as_array().unwrap().len()),
        (StatusCode::OK, 3),
        "{list}"
    );
    let function = list["items"][0]["name"].as_str().unwrap().to_string();
    let triggers = created(
        "triggers",
        |n| json!({"name": format!("t{n}"), "type": "cron", "function": "f0", "schedule": "0 0 1 1 *"}),
    );
    // The triggers' function must exist: f0 may not be among the three made.
    if function != "f0" {
        let (status, body) = server
            .call(Method::DELETE, &format!("/v1/namespaces/ns/functions/{function}"), None)
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
        let (status, body) = server
            .call(
                Method::POST,
                "/v1/namespaces/ns/functions",
                Some(json!({"name": "f0", "runtime": "python3.11"})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    assert_eq!(triggers.await, 3, "SLESS_NS_MAX_TRIGGERS is 3");
    let most = sless_api::MAX_SECRETS_PER_NAMESPACE;
    for n in 0..most - 2 {
        let body = json!({"name": format!("held{n}"), "data": {"k": "v"}});
        let (status, body) = server.call(Method::POST, "/v1/namespaces/ns/secrets", Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let secrets = created("secrets", |n| json!({"name": format!("s{n}"), "data": {"k": "v"}})).await;
    assert_eq!(secrets, 2, "a namespace holds {most} secrets at most");
}

/// Job runs past the namespace's quota that got in anyway (accepted under
/// a higher quota before a restart) wait their turn: the leader starts
/// them one after the other.
#[tokio::test]
async fn job_runs_past_the_quota_wait_their_turn() {
    let mut server = Server::start_with(Backend::Sqlite, &[("SLESS_NS_MAX_JOB_RUNS", "2")]).await;
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "worker", "runtime": "python3.11", "max_instances": 2})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // No code yet: both runs wait, Pending, for a version.
    for job in ["a", "b"] {
        let body = json!({"name": job, "function": "worker", "run_id": 1, "event": {"sleep": 2}});
        let (status, body) = server.call(Method::POST, "/v1/namespaces/ns/jobs", Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    server.kill9();
    for (key, value) in server.extra_env.iter_mut() {
        if key == "SLESS_NS_MAX_JOB_RUNS" {
            *value = "1".into();
        }
    }
    server.spawn();
    let worker = b"import time\n\ndef handle(event, context):\n    time.sleep(event['sleep'])\n    return 'slept'\n";
    let (status, body) = server
        .upload("ns", "worker", super::harness::zip_of(&[("handler.py", worker)]))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let mut runs = Vec::new();
    for job in ["a", "b"] {
        let done = server
            .wait_for(&format!("/v1/namespaces/ns/jobs/{job}"), 90, |j| {
                j["status"]["phase"] == "Succeeded"
            })
            .await;
        let time = |field: &str| {
            let text = done["status"][field].as_str().unwrap();
            chrono::DateTime::parse_from_rfc3339(text).unwrap()
        };
        runs.push((time("started_at"), time("finished_at")));
    }
    runs.sort();
    assert!(
        runs[1].0 >= runs[0].1,
        "SLESS_NS_MAX_JOB_RUNS is 1: the second run started before the first ended: {runs:?}"
    );
}

/// The memory limit (bytes) and CPU weight (cgroup v2's scale) of each
/// control group of the server's sandboxes, read from the cgroup
/// filesystem as the driver lays it out (v1: one tree per controller, the
/// groups numbered alike in each; v2: one tree).
fn sandbox_groups(server_pid: u32) -> Vec<(u64, u64)> {
    let own = std::fs::read_to_string(format!("/proc/{server_pid}/cgroup")).unwrap();
    let read = |path: std::path::PathBuf| -> Option<u64> { std::fs::read_to_string(path).ok()?.trim().parse().ok() };
    let numbered = |dir: &std::path::Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|entries| {
                (entries.flatten())
                    .filter_map(|e| e.file_name().to_str().map(str::to_string))
                    .filter(|name| name.parse::<u64>().is_ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    let root = std::path::Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").exists() {
        // The server moved into `sless-{pid}/server`.
        let path = own.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
        let parent = root.join(path.trim_start_matches('/')).parent().unwrap().to_path_buf();
        return (numbered(&parent).iter())
            .filter_map(|name| {
                Some((
                    read(parent.join(name).join("memory.max"))?,
                    read(parent.join(name).join("cpu.weight"))?,
                ))
            })
            .collect();
    }
    let parent = |controller: &str| {
        let path = own
            .lines()
            .find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                controllers.split(',').any(|c| c == controller).then_some(path)
            })
            .unwrap_or("/");
        root.join(controller)
            .join(path.trim_start_matches('/'))
            .join(format!("sless-{server_pid}"))
    };
    let (memory, cpu) = (parent("memory"), parent("cpu"));
    (numbered(&memory).iter())
        .filter_map(|name| {
            let shares = read(cpu.join(name).join("cpu.shares"))?;
            Some((
                read(memory.join(name).join("memory.limit_in_bytes"))?,
                shares * 100 / 1024,
            ))
        })
        .collect()
}

/// The CPU weights of the groups whose memory limit is `memory_mb`, sorted.
fn weights_of(groups: &[(u64, u64)], memory_mb: u64) -> Vec<u64> {
    let mut weights: Vec<u64> = (groups.iter())
        .filter(|(memory, _)| *memory == memory_mb << 20)
        .map(|(_, weight)| *weight)
        .collect();
    weights.sort();
    weights
}

/// CPU is shared by namespace: the instances of a namespace split one
/// namespace's weight (so a tenant running many busy instances cannot
/// crowd out one running a single instance), and the split follows the
/// count as instances come and go. Each function has a memory size of its
/// own here, by which its instances' groups are told apart.
#[tokio::test]
async fn a_namespace_s_instances_share_one_namespace_s_cpu_weight() {
    let server = std::sync::Arc::new(Server::start(Backend::Sqlite).await);
    let slow = b"import time\ndef handle(event, context):\n    time.sleep(event.get('secs', 0))\n    return 'done'\n";
    let busy = json!({"runtime": "python3.11", "memory_mb": 160, "concurrency": 1, "max_instances": 4});
    server.deploy("busy", "slow", busy, &[("handler.py", slow)]).await;
    let quiet = json!({"runtime": "python3.11", "memory_mb": 192});
    server.deploy("quiet", "one", quiet, &[("handler.py", slow)]).await;
    let (status, _, text) = server.invoke(Method::POST, "/fn/quiet/one", "{}").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let calls: Vec<_> = (0..3)
        .map(|_| {
            let server = server.clone();
            tokio::spawn(async move { server.invoke(Method::POST, "/fn/busy/slow", r#"{"secs": 4}"#).await })
        })
        .collect();
    // Three instances of "busy" (its deploy's checked one among them)
    // split it as four would; "quiet"'s one has a whole namespace's.
    super::harness::eventually(Duration::from_secs(20), || async {
        let groups = sandbox_groups(server.pid());
        let (busy, quiet) = (weights_of(&groups, 160), weights_of(&groups, 192));
        if busy == [2500, 2500, 2500] && quiet == [10000] {
            Ok(())
        } else {
            Err(format!("busy {busy:?}, quiet {quiet:?}"))
        }
    })
    .await;
    for call in calls {
        let (status, _, text) = call.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{text}");
    }
    // Its function deleted, "busy"'s instances leave; a new function's one
    // instance has the namespace's whole weight again.
    let (status, body) = server
        .call(Method::DELETE, "/v1/namespaces/busy/functions/slow", None)
        .await;
    assert!(status.is_success(), "{body}");
    let again = json!({"runtime": "python3.11", "memory_mb": 176});
    server.deploy("busy", "again", again, &[("handler.py", slow)]).await;
    super::harness::eventually(Duration::from_secs(30), || async {
        let groups = sandbox_groups(server.pid());
        let (gone, again) = (weights_of(&groups, 160), weights_of(&groups, 176));
        if gone.is_empty() && again == [10000] {
            Ok(())
        } else {
            Err(format!("deleted function's {gone:?}, new one's {again:?}"))
        }
    })
    .await;
}

/// A namespace's calls through `/fn` under way at once are bounded (each
/// holds a connection of the server's): past the bound a call is a 429
/// naming it, another namespace's calls go on, and the namespace's calls
/// are taken again once some are answered.
#[tokio::test]
async fn a_namespace_s_calls_under_way_are_bounded_and_leave_others_theirs() {
    const SLOW: &[u8] =
        b"import time\n\ndef handle(event, context):\n    time.sleep(event.get('s', 0))\n    return 'done'\n";
    let server = Server::start_with(Backend::Sqlite, &[("SLESS_NS_MAX_CALLS", "2")]).await;
    for ns in ["busy", "calm"] {
        server
            .deploy(
                ns,
                "slow",
                json!({"runtime": "python3.11", "max_instances": 4}),
                &[("handler.py", SLOW)],
            )
            .await;
    }
    let under_way: Vec<_> = (0..2)
        .map(|_| {
            let request = server.request(Method::POST, "/fn/busy/slow", None).body(r#"{"s": 4}"#);
            tokio::spawn(async move {
                let response = request.send().await.unwrap();
                (response.status(), response.text().await.unwrap())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let (status, headers, body) = server.invoke(Method::POST, "/fn/busy/slow", "{}").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(
        body.contains("namespace busy has 2 calls under way") && body.contains("SLESS_NS_MAX_CALLS"),
        "{body}"
    );
    assert_eq!(headers["retry-after"], "1");
    let (status, _, body) = server.invoke(Method::POST, "/fn/calm/slow", "{}").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "\"done\""));

    for call in under_way {
        let (status, body) = call.await.unwrap();
        assert_eq!((status, body.as_str()), (StatusCode::OK, "\"done\""));
    }
    let (status, _, body) = server.invoke(Method::POST, "/fn/busy/slow", "{}").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "\"done\""), "slots came back");
}

/// Requests of the API whose bodies come slowly hold a connection each; one
/// namespace holds at most 64 (slow bodies of a tenant used to take every
/// connection, and another tenant's API and `/fn` calls got 503s). Its next
/// one gets a 429 saying so, another namespace's goes on, and the places
/// come back when the slow ones end.
#[tokio::test]
async fn a_namespace_s_slow_api_bodies_hold_no_more_than_their_bound() {
    use tokio::io::AsyncWriteExt;
    let server = Server::start(Backend::Sqlite).await;
    let address = server.url.trim_start_matches("http://").to_string();
    let head = format!(
        "POST /v1/namespaces/slow/functions HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{",
        super::harness::ADMIN
    );
    let mut held = Vec::new();
    for _ in 0..64 {
        let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        held.push(stream);
    }
    let create = |ns: &'static str, name: &'static str| {
        let server = &server;
        async move {
            let path = format!("/v1/namespaces/{ns}/functions");
            server
                .call(
                    Method::POST,
                    &path,
                    Some(json!({"name": name, "runtime": "python3.11"})),
                )
                .await
        }
    };
    let refused = super::harness::eventually(Duration::from_secs(20), || async {
        match create("slow", "f").await {
            (StatusCode::TOO_MANY_REQUESTS, body) => Ok(body),
            (status, body) => Err(format!("{status}: {body}")),
        }
    })
    .await;
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("namespace slow has 64 API requests with a body under way"),
        "{refused}"
    );
    let (status, body) = create("other", "f").await;
    assert_eq!(status, StatusCode::CREATED, "another namespace: {body}");
    drop(held);
    let (status, body) = super::harness::eventually(Duration::from_secs(20), || async {
        match create("slow", "f").await {
            (StatusCode::TOO_MANY_REQUESTS, body) => Err(format!("still refused: {body}")),
            answer => Ok(answer),
        }
    })
    .await;
    assert_eq!(status, StatusCode::CREATED, "places came back: {body}");
}
