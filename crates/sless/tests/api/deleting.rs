//! Deleting a function that triggers or jobs still name: refused with the
//! list of them (409), done together with them (`?cascade=true`), or, for
//! a caller that manages them itself, leaving them (`?orphan=true`). A call
//! under way when its function goes is answered. And `fired` only where it
//! counts something (cron ticks).

use std::sync::Arc;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::harness::{eventually, Backend, Server};

crate::both_stores!(deleting_a_named_function_is_refused_or_cascades);

const HELLO: &[(&str, &[u8])] = &[("handler.py", b"def handle(e, c):\n    return 'hi'\n")];

async fn create(server: &Server, kind: &str, body: Value) {
    let (status, created) = server
        .call(Method::POST, &format!("/v1/namespaces/ns/{kind}"), Some(body))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
}

/// Deploys `ns/hello` with two triggers: `web` (http) and `tick` (cron,
/// every second).
async fn hello_with_web_and_tick(server: &Server) {
    server
        .deploy("ns", "hello", json!({"runtime": "python3.11"}), HELLO)
        .await;
    create(
        server,
        "triggers",
        json!({"name": "web", "type": "http", "function": "hello"}),
    )
    .await;
    create(
        server,
        "triggers",
        json!({"name": "tick", "type": "cron", "function": "hello", "schedule": "* * * * * *"}),
    )
    .await;
}

async fn names(server: &Server, kind: &str) -> Vec<String> {
    let (status, list) = server
        .call(Method::GET, &format!("/v1/namespaces/ns/{kind}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap().to_string())
        .collect()
}

async fn deleting_a_named_function_is_refused_or_cascades(backend: Backend) {
    let server = Server::start(backend).await;
    // `tick` fires every second: it would keep firing at a deleted function.
    hello_with_web_and_tick(&server).await;
    server
        .deploy("ns", "other", json!({"runtime": "python3.11"}), HELLO)
        .await;
    create(&server, "jobs", json!({"name": "backfill", "function": "hello"})).await;
    create(
        &server,
        "triggers",
        json!({"name": "theirs", "type": "http", "function": "other"}),
    )
    .await;

    let (status, web) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/triggers/web",
            Some(json!({"enabled": false})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{web}");
    let (status, _, _) = server.invoke(Method::GET, "/fn/ns/hello", "").await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "its only http trigger is disabled"
    );

    // Refused, naming each of them; nothing changes.
    let (status, body) = server
        .call(Method::DELETE, "/v1/namespaces/ns/functions/hello", None)
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let message = body["error"].as_str().unwrap();
    for named in [
        r#"trigger "tick""#,
        r#"trigger "web""#,
        r#"job "backfill""#,
        "cascade=true",
    ] {
        assert!(message.contains(named), "{named} missing: {message}");
    }
    assert!(!message.contains("theirs"), "{message}");
    let (status, _) = server
        .call(Method::GET, "/v1/namespaces/ns/functions/hello", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(names(&server, "triggers").await, ["theirs", "tick", "web"]);

    // A query it does not know is a 400, not a silent plain delete.
    for query in ["cascade=yes", "force=true"] {
        let (status, body) = server
            .call(
                Method::DELETE,
                &format!("/v1/namespaces/ns/functions/hello?{query}"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
    }

    let (status, body) = server
        .call(
            Method::DELETE,
            "/v1/namespaces/ns/functions/hello?cascade=true&orphan=true",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // orphan=true: the function only; what names it stays for the caller
    // (Terraform) to delete or re-point.
    let (status, body) = server
        .call(Method::DELETE, "/v1/namespaces/ns/functions/other?orphan=true", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(names(&server, "functions").await, ["hello"]);
    assert_eq!(names(&server, "triggers").await, ["theirs", "tick", "web"]);
    server
        .deploy("ns", "other", json!({"runtime": "python3.11"}), HELLO)
        .await;

    // cascade=true: the function, its triggers and its job; others stay.
    let (status, body) = server
        .call(Method::DELETE, "/v1/namespaces/ns/functions/hello?cascade=true", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(names(&server, "functions").await, ["other"]);
    assert_eq!(names(&server, "triggers").await, ["theirs"]);
    assert!(names(&server, "jobs").await.is_empty());
    let (status, _, _) = server.invoke(Method::GET, "/fn/ns/hello", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A function of the same name starts clean: the disabled http trigger
    // deleted with the old one does not hold its /fn shut.
    server
        .deploy("ns", "hello", json!({"runtime": "python3.11"}), HELLO)
        .await;
    let (status, _, text) = server.invoke(Method::GET, "/fn/ns/hello", "").await;
    assert_eq!(status, StatusCode::OK, "{text}");

    // Nothing names it now: a plain delete works.
    let (status, body) = server
        .call(Method::DELETE, "/v1/namespaces/ns/functions/hello", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
}

/// A call under way when its function is deleted finishes and is answered
/// by its handler, as one under way on a retired version is (and as a
/// deleted pod drains on Kubernetes); only calls after the delete find no
/// function.
#[tokio::test]
async fn a_call_under_way_when_its_function_is_deleted_is_answered() {
    const SLOW: &[u8] =
        b"import time\ndef handle(event, context):\n    time.sleep(event.get('secs', 0))\n    return 'done'\n";
    let server = Arc::new(Server::start(Backend::Sqlite).await);
    server
        .deploy("ns", "slow", json!({"runtime": "python3.11"}), &[("handler.py", SLOW)])
        .await;
    // A first call leaves an instance running, so the next one reaches
    // the handler within milliseconds, well inside the wait below.
    let (status, _, text) = server.invoke(Method::POST, "/fn/ns/slow", "{}").await;
    assert_eq!(status, StatusCode::OK, "{text}");

    let under_way = {
        let server = server.clone();
        tokio::spawn(async move { server.invoke(Method::POST, "/fn/ns/slow", r#"{"secs": 3}"#).await })
    };
    tokio::time::sleep(Duration::from_millis(700)).await;
    let (status, body) = server
        .call(Method::DELETE, "/v1/namespaces/ns/functions/slow", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, _, _) = server.invoke(Method::POST, "/fn/ns/slow", "{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a call after the delete");

    let (status, _, text) = under_way.await.unwrap();
    assert_eq!(
        (status, text.as_str()),
        (StatusCode::OK, r#""done""#),
        "the call under way at the delete"
    );
}

#[tokio::test]
async fn fired_is_shown_for_cron_triggers_only() {
    let server = Server::start(Backend::Sqlite).await;
    hello_with_web_and_tick(&server).await;
    // http calls are counted in /metrics and the records, not on the trigger.
    let (status, _, _) = server.invoke(Method::GET, "/fn/ns/hello", "").await;
    assert_eq!(status, StatusCode::OK);
    let (_, web) = server.call(Method::GET, "/v1/namespaces/ns/triggers/web", None).await;
    assert!(web["status"].get("fired").is_none(), "{web}");
    let tick = server
        .wait_for("/v1/namespaces/ns/triggers/tick", 30, |t| {
            t["status"]["fired"].as_u64() >= Some(1)
        })
        .await;
    assert_eq!(tick["type"], "cron");
    let (_, list) = server.call(Method::GET, "/v1/namespaces/ns/triggers", None).await;
    for trigger in list["items"].as_array().unwrap() {
        let shown = trigger["status"].get("fired").is_some();
        assert_eq!(shown, trigger["type"] == "cron", "{trigger}");
    }
}

/// A function deleted while its build runs (installing its dependencies)
/// stops that build at once: its processes are killed and its namespace's
/// only build slot goes to the next build. The builds of another function
/// waiting for the slot meanwhile, of two uploads, give one version, the
/// newer upload's: the build of the older, no longer awaited, is skipped
/// when it gets the slot. The deleted function's build ran on to its
/// `build_timeout_sec` (an hour here), and the other function waited.
#[tokio::test]
async fn deleting_a_function_stops_its_build_and_frees_its_namespace_s_slot() {
    use super::deploys::{build_killed, no_build_left, recorded, BuildGate};
    let gate = BuildGate::start().await;
    let server = Server::start_with(
        Backend::Sqlite,
        &[("SLESS_NS_MAX_BUILDS", "1"), ("SLESS_NETWORK_ISOLATION", "false")],
    )
    .await;
    let held = gate.hold(&server, "held").await;

    create(&server, "functions", json!({"name": "next", "runtime": "python3.11"})).await;
    let upload = |answer: &'static str| {
        let server = &server;
        async move {
            let code = format!("def handle(e, c):\n    return '{answer}'\n");
            let zip = super::harness::zip_of(&[("handler.py", code.as_bytes())]);
            let (status, body) = server.upload("ns", "next", zip).await;
            assert_eq!(status, StatusCode::ACCEPTED, "{body}");
            body["status"]["code_hash"].as_str().unwrap().to_string()
        }
    };
    upload("older").await;
    server
        .wait_for("/v1/namespaces/ns/functions/next", 30, |f| {
            f["status"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("for a build slot of namespace ns"))
        })
        .await;
    let newer = upload("newer").await;

    let (status, body) = server
        .call(Method::DELETE, "/v1/namespaces/ns/functions/held", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    server.wait_built("ns", "next", &newer).await;
    assert_eq!(
        recorded(&server, "next").await,
        [(1, newer)],
        "one version, the newer upload's"
    );
    let (status, _, answer) = server.invoke(Method::GET, "/fn/ns/next", "").await;
    assert_eq!((status, answer.as_str()), (StatusCode::OK, "\"newer\""));

    build_killed(held).await;
    no_build_left(&server, &gate).await;
    assert_eq!(server.archives("ns", "held"), 0, "the deleted function's upload stays");
}

/// Deleting a function leaves no directory of its uploads behind, nor its
/// namespace's once it was the last: a tenant creating and deleting
/// functions under new names left two empty directories for each on the
/// server's disk, without bound.
#[tokio::test]
async fn a_deleted_function_leaves_no_directory_behind() {
    let server = Server::start(Backend::Sqlite).await;
    let handler: &[u8] = b"def handle(event, context):\n    return 1\n";
    for name in ["kept", "gone"] {
        server
            .deploy("ns", name, json!({"runtime": "python3.11"}), &[("handler.py", handler)])
            .await;
        server
            .deploy(
                "other",
                name,
                json!({"runtime": "python3.11"}),
                &[("handler.py", handler)],
            )
            .await;
    }
    let archives = server.data_path().join("blobs/archives");
    let (status, body) = server
        .call(Method::DELETE, "/v1/namespaces/ns/functions/gone", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = server
        .call(Method::DELETE, "/v1/namespaces/other/functions/gone", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = server
        .call(Method::DELETE, "/v1/namespaces/other/functions/kept", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    eventually(Duration::from_secs(10), || async {
        let left: Vec<_> = ["ns/gone", "other/gone", "other/kept", "other"]
            .into_iter()
            .filter(|dir| archives.join(dir).exists())
            .collect();
        match left.is_empty() {
            true => Ok(()),
            false => Err(format!("directories left under blobs/archives: {left:?}")),
        }
    })
    .await;
    assert_eq!(server.archives("ns", "kept"), 1, "the kept function's upload stays");
}
