//! Asynchronous calls (`X-Sless-Invocation-Type: Event`) over real HTTP on
//! both stores: the 202 and its record, retries with backoff, dead letters
//! to a function and to a RabbitMQ queue, the bounds, and a kill -9 right
//! after the 202s that loses nothing.

use std::time::Duration;

use futures::StreamExt;

use lapin::options::{BasicGetOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::harness::{eventually, hex_id, Backend, Server, ANSWER_BYTES};

const BROKER: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// Echoes its event, fails when asked to.
const HANDLER: &[u8] = br#"
import json

def handle(event, context):
    print("got", json.dumps(event), "attempt", context.headers.get("x-sless-attempt"))
    if isinstance(event, dict) and event.get("fail"):
        raise RuntimeError("failing on purpose: " + str(event.get("fail")))
    return {"echo": event}
"#;

/// Fails its first two calls, then succeeds (one instance keeps the count).
const FAILS_TWICE: &[u8] = br#"
calls = 0

def handle(event, context):
    global calls
    calls += 1
    print("call", calls, "attempt", context.headers.get("x-sless-attempt"))
    if calls <= 2:
        raise RuntimeError("call %d fails" % calls)
    return {"calls": calls}
"#;

/// Sleeps as many seconds as its event asks.
const SLEEPS: &[u8] = br#"
import time

def handle(event, context):
    time.sleep(event.get("sleep", 0))
    return {"slept": event.get("sleep", 0)}
"#;

/// Deploys HANDLER as `ns/{name}` with `spec`; the function.
async fn deploy(server: &Server, name: &str, spec: Value) -> Value {
    server.deploy("ns", name, spec, &[("handler.py", HANDLER)]).await
}

/// Sends an asynchronous call; returns status, Location and body.
async fn send_event(server: &Server, path: &str, body: &str) -> (StatusCode, Option<String>, Value) {
    let response = server
        .request(Method::POST, path, None)
        .header("x-sless-invocation-type", "Event")
        .body(body.to_string())
        .send()
        .await
        .expect("request sent");
    let location = response
        .headers()
        .get("location")
        .map(|v| v.to_str().unwrap().to_string());
    let (status, body) = super::harness::read(response).await;
    (status, location, body)
}

/// Waits until the event's record reaches `status`; returns the record.
async fn record_reaches(server: &Server, location: &str, status: &str, secs: u64) -> Value {
    eventually(Duration::from_secs(secs), || async {
        let (code, record) = server.call(Method::GET, location, None).await;
        if code == StatusCode::OK && record["status"] == status {
            Ok(record)
        } else {
            Err(format!("{code}: {record}"))
        }
    })
    .await
}

/// The outcome record of event `id` that `function` (running HANDLER) got.
async fn outcome_sent_to(server: &Server, function: &str, id: &str) -> Value {
    let printed = eventually(Duration::from_secs(30), || async {
        let logs: Vec<String> = server
            .records("ns", function)
            .await
            .iter()
            .filter_map(|r| r["logs"][0]["text"].as_str().map(str::to_string))
            .collect();
        logs.into_iter()
            .find(|l| l.contains(id))
            .ok_or_else(|| format!("nothing about {id} printed by {function} yet"))
    })
    .await;
    serde_json::from_str(printed.trim_start_matches("got ").split(" attempt").next().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {printed}"))
}

async fn accepted_then_delivered(backend: Backend) {
    let server = Server::start_with(backend, &[("SLESS_ASYNC_MAX_EVENT_BYTES", "1024")]).await;
    deploy(&server, "echo", json!({"runtime": "python3.11"})).await;
    let (status, location, body) = send_event(&server, "/fn/ns/echo", r#"{"n": 1}"#).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let location = location.expect("a Location header");
    let id = body["id"].as_str().unwrap();
    assert_eq!(
        location,
        format!("/v1/namespaces/ns/functions/echo/async-invocations/{id}")
    );
    assert_eq!(
        (body["status"].as_str(), body["location"].as_str()),
        (Some("queued"), Some(location.as_str()))
    );
    let record = record_reaches(&server, &location, "succeeded", 60).await;
    assert_eq!(
        (record["attempts"].as_u64(), record["succeeded_attempt"].as_u64()),
        (Some(1), Some(1)),
        "{record}"
    );
    assert_eq!(record["last_status"], 200, "{record}");
    // The attempt is an ordinary invocation record under the event's request id.
    let request_id = body["request_id"].as_str().unwrap().to_string();
    let calls = eventually(Duration::from_secs(20), || async {
        let calls: Vec<Value> = server
            .records("ns", "echo")
            .await
            .into_iter()
            .filter(|r| r["request_id"] == request_id.as_str())
            .collect();
        if calls.is_empty() {
            Err("no record of the attempt yet".to_string())
        } else {
            Ok(calls)
        }
    })
    .await;
    assert_eq!(calls.len(), 1);
    let printed = calls[0]["logs"][0]["text"].as_str().unwrap_or_default();
    assert!(
        printed.contains(r#"{"n": 1}"#) && printed.contains("attempt 1"),
        "{printed}"
    );
    // The record tells the attempt from a direct call, which says `http`.
    assert_eq!(
        (calls[0]["trigger"].as_str(), calls[0]["status"].as_str()),
        (Some("async"), Some("200")),
        "{}",
        calls[0]
    );
    let (status, _, answer) = server.invoke(Method::POST, "/fn/ns/echo", r#"{"n": 2}"#).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let records = server
        .records_until("ns", "echo", |records| {
            records.iter().any(|r| r["request_id"] != request_id.as_str())
        })
        .await;
    let direct = records.iter().find(|r| r["request_id"] != request_id.as_str()).unwrap();
    assert_eq!(direct["trigger"], "http", "{direct}");

    // Prefer: respond-async asks for the same.
    let response = server
        .request(Method::POST, "/fn/ns/echo/sub?x=1", None)
        .header("prefer", "respond-async")
        .body("plain text")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let location = response.headers()["location"].to_str().unwrap().to_string();
    record_reaches(&server, &location, "succeeded", 60).await;

    // The list, by state.
    let (status, page) = server
        .call(
            Method::GET,
            "/v1/namespaces/ns/functions/echo/async-invocations?status=succeeded",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["items"].as_array().unwrap().len(), 2, "{page}");
    for (query, field) in [("status=done", "status"), ("before=zzz", "before")] {
        let (status, bad) = server
            .call(
                Method::GET,
                &format!("/v1/namespaces/ns/functions/echo/async-invocations?{query}"),
                None,
            )
            .await;
        assert_eq!(
            (status, bad["field"].as_str()),
            (StatusCode::BAD_REQUEST, Some(field)),
            "{query}: {bad}"
        );
    }

    // Bounds and bad input.
    let (status, _, body) = send_event(&server, "/fn/ns/echo", &"x".repeat(2000)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("SLESS_ASYNC_MAX_EVENT_BYTES"),
        "{body}"
    );
    // What is stored counts, not only the body: here a query.
    let long_query = format!("/fn/ns/echo?q={}", "y".repeat(1200));
    let (status, _, body) = send_event(&server, &long_query, "{}").await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert!(body["error"].as_str().unwrap().contains("as stored"), "{body}");
    let (status, _, body) = send_event(&server, "/fn/ns/echo@1", "{}").await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "events go to the latest version: {body}"
    );
    let (status, _, body) = send_event(&server, "/fn/ns/missing", "{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let response = server
        .request(Method::POST, "/fn/ns/echo", None)
        .header("x-sless-invocation-type", "Later")
        .send()
        .await
        .unwrap();
    let (status, body) = super::harness::read(response).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("X-Sless-Invocation-Type"),
        "{body}"
    );
    let (status, body) = server
        .call(
            Method::GET,
            "/v1/namespaces/ns/functions/echo/async-invocations/0000",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let accepted = server.metric(r#"sless_async_events_total{outcome="accepted"}"#).await;
    assert_eq!(accepted, Some(2.0));
}

async fn fails_twice_then_succeeds_in_three_calls(backend: Backend) {
    let server = Server::start_with(backend, &[("SLESS_ASYNC_RETRY_BASE_MS", "50")]).await;
    server
        .deploy(
            "ns",
            "flaky",
            json!({"runtime": "python3.11", "max_instances": 1, "concurrency": 1}),
            &[("handler.py", FAILS_TWICE)],
        )
        .await;
    let (status, location, body) = send_event(&server, "/fn/ns/flaky", "{}").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let record = record_reaches(&server, &location.unwrap(), "succeeded", 60).await;
    assert_eq!(
        (record["attempts"].as_u64(), record["succeeded_attempt"].as_u64()),
        (Some(3), Some(3)),
        "{record}"
    );
    let calls = eventually(Duration::from_secs(20), || async {
        let calls = server.records("ns", "flaky").await;
        if calls.len() >= 3 {
            Ok(calls)
        } else {
            Err(format!("{} calls recorded", calls.len()))
        }
    })
    .await;
    let mut statuses: Vec<&str> = calls.iter().map(|c| c["status"].as_str().unwrap()).collect();
    statuses.sort();
    assert_eq!(statuses, ["200", "500", "500"], "exactly three calls: {calls:?}");
}

async fn dead_letter_to_a_function(backend: Backend) {
    let server = Server::start_with(backend, &[("SLESS_ASYNC_RETRY_BASE_MS", "50")]).await;
    deploy(&server, "dlq", json!({"runtime": "python3.11"})).await;
    let spec = json!({"runtime": "python3.11", "async": {"retry_limit": 1, "on_failure": {"type": "function", "function": "dlq"}}});
    let function = deploy(&server, "broken", spec).await;
    assert_eq!(function["async"]["retry_limit"], 1, "{function}");
    assert_eq!(function["async"]["max_event_age_sec"], 21600, "{function}");
    let (status, location, body) = send_event(&server, "/fn/ns/broken", r#"{"fail": "boom"}"#).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["id"].as_str().unwrap().to_string();
    let record = record_reaches(&server, &location.unwrap(), "failed", 60).await;
    assert_eq!(record["attempts"], 2, "{record}");
    assert!(
        record["last_error"]
            .as_str()
            .unwrap()
            .contains("failing on purpose: boom"),
        "{record}"
    );
    // The dead letter is an event of its own for `dlq`, which prints it.
    let (_, page) = server
        .call(Method::GET, "/v1/namespaces/ns/functions/dlq/async-invocations", None)
        .await;
    let letter = &page["items"][0];
    assert_eq!(letter["source"], id.as_str(), "{page}");
    let location = format!(
        "/v1/namespaces/ns/functions/dlq/async-invocations/{}",
        letter["id"].as_str().unwrap()
    );
    record_reaches(&server, &location, "succeeded", 60).await;
    let sent = outcome_sent_to(&server, "dlq", &id).await;
    assert_eq!(sent["condition"], "retries_exhausted", "{sent}");
    assert_eq!(
        (sent["attempts"].as_u64(), sent["status"].as_u64()),
        (Some(2), Some(500)),
        "{sent}"
    );
    assert!(
        sent["error"].as_str().unwrap().contains("failing on purpose: boom"),
        "{sent}"
    );
    assert_eq!(sent["request"]["body"], r#"{"fail": "boom"}"#, "{sent}");
    // A delivered event's outcome goes to `on_success`, with the answer.
    let spec = json!({"runtime": "python3.11", "async": {"on_success": {"type": "function", "function": "dlq"}}});
    deploy(&server, "fine", spec).await;
    let (status, location, body) = send_event(&server, "/fn/ns/fine", r#"{"n": 7}"#).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["id"].as_str().unwrap().to_string();
    record_reaches(&server, &location.unwrap(), "succeeded", 60).await;
    let sent = outcome_sent_to(&server, "dlq", &id).await;
    assert_eq!(
        (sent["condition"].as_str(), sent["attempts"].as_u64()),
        (Some("success"), Some(1)),
        "{sent}"
    );
    assert_eq!(sent["response"]["status"], 200, "{sent}");
    assert_eq!(sent["response"]["body"], r#"{"echo":{"n":7}}"#, "{sent}");
    // A bad setting names its field.
    let (status, body) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/functions/broken",
            Some(json!({"async": {"retry_limit": 11}})),
        )
        .await;
    assert_eq!(
        (status, body["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("async.retry_limit")),
        "{body}"
    );
}

async fn dead_letter_to_a_rabbitmq_queue(backend: Backend) {
    let server = Server::start(backend).await;
    let queue = format!("sless-async-dead-{}", hex_id());
    let spec = json!({"runtime": "python3.11", "async": {"retry_limit": 0,
        "on_failure": {"type": "amqp", "broker_url": BROKER, "queue": queue}}});
    deploy(&server, "broken", spec).await;
    let (status, location, body) = send_event(&server, "/fn/ns/broken", r#"{"fail": "to the queue"}"#).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["id"].as_str().unwrap().to_string();
    let record = record_reaches(&server, &location.unwrap(), "failed", 60).await;
    assert_eq!(record["attempts"], 1, "{record}");
    assert!(record.get("destination_error").is_none(), "{record}");
    // Read back from the real broker.
    let connection = Connection::connect(BROKER, ConnectionProperties::default())
        .await
        .expect("RabbitMQ on 127.0.0.1:5672 is required for these tests");
    let channel = connection.create_channel().await.unwrap();
    let options = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(queue.as_str().into(), options, FieldTable::default())
        .await
        .unwrap();
    let message = channel
        .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("the dead letter is in the queue");
    let sent: Value = serde_json::from_slice(&message.delivery.data).unwrap();
    assert_eq!(
        (sent["id"].as_str(), sent["condition"].as_str()),
        (Some(id.as_str()), Some("retries_exhausted")),
        "{sent}"
    );
    assert_eq!(sent["attempts"], 1, "{sent}");
    assert!(sent["error"].as_str().unwrap().contains("to the queue"), "{sent}");
    assert_eq!(sent["request"]["body"], r#"{"fail": "to the queue"}"#, "{sent}");
    let _ = channel.queue_delete(queue.as_str().into(), Default::default()).await;
    // A broker the operator does not allow is refused when the function is saved.
    let (status, body) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/functions/broken",
            Some(json!({"async": {"on_failure": {"type": "amqp", "broker_url": "amqp://10.1.2.3:5672/%2f", "queue": "q"}}})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["field"], "async.on_failure.broker_url", "{body}");
}

/// A broker that takes connections and never answers holds up only the
/// outcomes sent to it: another function's outcome reaches the real broker
/// meanwhile.
#[tokio::test]
async fn a_silent_broker_holds_up_only_its_own_destinations() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    // Keeps what it accepts open, and says nothing.
    let _silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
            if held.len() > 100 {
                break;
            }
        }
    });
    let server = Server::start(Backend::Sqlite).await;
    let queue = format!("sless-async-dead-{}", hex_id());
    let failing_to = |url: &str, queue: &str| {
        json!({"runtime": "python3.11", "async": {"retry_limit": 0,
            "on_failure": {"type": "amqp", "broker_url": url, "queue": queue}}})
    };
    let silent_url = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
    deploy(&server, "stuck", failing_to(&silent_url, "q")).await;
    deploy(&server, "broken", failing_to(BROKER, &queue)).await;
    let (status, stuck, body) = send_event(&server, "/fn/ns/stuck", r#"{"fail": "stuck"}"#).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    // Its outcome is being sent to the silent broker (10 s per try, two tries).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (status, location, body) = send_event(&server, "/fn/ns/broken", r#"{"fail": "to the queue"}"#).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let record = record_reaches(&server, &location.unwrap(), "failed", 8).await;
    assert!(record.get("destination_error").is_none(), "{record}");
    let (_, stuck) = server.call(Method::GET, &stuck.unwrap(), None).await;
    assert_eq!(
        stuck["status"], "running",
        "still sending to the silent broker: {stuck}"
    );
    let connection = Connection::connect(BROKER, ConnectionProperties::default())
        .await
        .expect("RabbitMQ on 127.0.0.1:5672 is required for these tests");
    let channel = connection.create_channel().await.unwrap();
    let _ = channel.queue_delete(queue.as_str().into(), Default::default()).await;
}

async fn kill_after_202_loses_nothing(backend: Backend) {
    let mut server = Server::start_with(backend, &[("SLESS_ASYNC_MAX_BACKLOG", "30")]).await;
    // Off (replicas 0): the events wait in the store, whatever the timing.
    deploy(&server, "echo", json!({"runtime": "python3.11", "replicas": 0})).await;
    // Until the namespace's backlog is full: refused, naming the setting.
    // (The bound counts an event being stored as waiting, so it may refuse
    // one early while a count of the store runs; never one late.)
    let mut locations = Vec::new();
    let refused = loop {
        let (status, location, body) =
            send_event(&server, "/fn/ns/echo", &json!({"n": locations.len()}).to_string()).await;
        if status != StatusCode::ACCEPTED {
            break (status, body);
        }
        locations.push(location.unwrap());
        assert!(
            locations.len() <= 30,
            "more events accepted than SLESS_ASYNC_MAX_BACKLOG"
        );
    };
    assert_eq!(refused.0, StatusCode::TOO_MANY_REQUESTS, "{}", refused.1);
    assert!(
        refused.1["error"].as_str().unwrap().contains("SLESS_ASYNC_MAX_BACKLOG"),
        "{}",
        refused.1
    );
    assert!(locations.len() >= 29, "{} accepted", locations.len());
    server.kill9();
    server.spawn();
    for location in &locations {
        let (status, record) = server.call(Method::GET, location, None).await;
        assert_eq!(status, StatusCode::OK, "{record}");
        assert!(
            record["status"] == "queued" || record["status"] == "running",
            "{record}"
        );
    }
    server
        .wait_metric(
            r#"sless_async_backlog{namespace="ns",function="echo"}"#,
            locations.len() as f64,
            20,
        )
        .await;
    let (status, body) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/functions/echo",
            Some(json!({"replicas": null})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for location in &locations {
        // A replica's lease on PostgreSQL (60 s) outlives a kill -9.
        let record = record_reaches(&server, location, "succeeded", 150).await;
        assert_eq!(record["succeeded_attempt"], record["attempts"], "{record}");
    }
    eventually(Duration::from_secs(20), || async {
        let n = server.records("ns", "echo").await.len();
        if n >= locations.len() {
            Ok(())
        } else {
            Err(format!("{n} calls"))
        }
    })
    .await;
}

/// Events sent many at a time (so each commit stores several) are all
/// stored before their 202s: a kill -9 right after the last 202 loses none.
/// While the function is off they are parked (due when they would expire,
/// not polled every second), and turning it on delivers them all.
async fn concurrent_202s_survive_a_kill_and_wait_parked(backend: Backend) {
    const EVENTS: usize = 300;
    let mut server = Server::start(backend).await;
    deploy(&server, "echo", json!({"runtime": "python3.11", "replicas": 0})).await;
    let answers: Vec<_> = futures::stream::iter(0..EVENTS)
        .map(|n| {
            let server = &server;
            async move { send_event(server, "/fn/ns/echo", &json!({"n": n}).to_string()).await }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let mut ids: Vec<String> = answers
        .into_iter()
        .map(|(status, _, body)| {
            assert_eq!(status, StatusCode::ACCEPTED, "{body}");
            body["id"].as_str().unwrap().to_string()
        })
        .collect();
    server.kill9();
    server.spawn();
    ids.sort();
    let list = |status: &'static str| {
        let server = &server;
        async move {
            let path = format!("/v1/namespaces/ns/functions/echo/async-invocations?limit=1000{status}");
            let (code, page) = server.call(Method::GET, &path, None).await;
            assert_eq!(code, StatusCode::OK, "{page}");
            page["items"].as_array().unwrap().clone()
        }
    };
    let mut stored: Vec<String> = list("")
        .await
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    stored.sort();
    assert_eq!(stored, ids, "every event answered 202 is in the store after the kill");
    // Parked: due in about six hours (async.max_event_age_sec), not in a second.
    let hour_later = chrono::Utc::now() + chrono::Duration::hours(1);
    eventually(Duration::from_secs(30), || async {
        let queued = list("&status=queued").await;
        let parked = queued
            .iter()
            .filter(|r| {
                r["next_attempt_at"]
                    .as_str()
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                    .is_some_and(|t| t > hour_later)
            })
            .count();
        let age = server
            .metric(r#"sless_async_oldest_event_age_seconds{namespace="ns",function="echo"}"#)
            .await;
        if parked == EVENTS && age.is_some_and(|age| age > 0.0) {
            Ok(())
        } else {
            Err(format!(
                "{parked} of {} queued events parked: {:?}",
                queued.len(),
                queued.first()
            ))
        }
    })
    .await;
    let (status, body) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/functions/echo",
            Some(json!({"replicas": null})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    eventually(Duration::from_secs(120), || async {
        let done = list("&status=succeeded").await.len();
        if done == EVENTS {
            Ok(())
        } else {
            Err(format!("{done} of {EVENTS} delivered"))
        }
    })
    .await;
}

/// An event that waits longer than `async.max_event_age_sec` (here for a
/// function turned off, so parked) fails without an attempt, and its
/// dead letter says why.
async fn an_event_too_old_fails_without_an_attempt(backend: Backend) {
    let server = Server::start(backend).await;
    deploy(&server, "dlq", json!({"runtime": "python3.11"})).await;
    let spec = json!({"runtime": "python3.11", "replicas": 0,
        "async": {"max_event_age_sec": 60, "on_failure": {"type": "function", "function": "dlq"}}});
    deploy(&server, "off", spec).await;
    let (status, location, body) = send_event(&server, "/fn/ns/off", "{}").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["id"].as_str().unwrap().to_string();
    let record = record_reaches(&server, &location.unwrap(), "failed", 120).await;
    assert_eq!(record["attempts"], 0, "{record}");
    assert!(
        record["last_error"].as_str().unwrap().contains("max_event_age_sec"),
        "{record}"
    );
    let sent = outcome_sent_to(&server, "dlq", &id).await;
    assert_eq!(
        (sent["condition"].as_str(), sent["attempts"].as_u64()),
        (Some("event_age_exceeded"), Some(0)),
        "{sent}"
    );
}

/// An event waiting parked for a function that is then deleted fails at
/// once without an attempt ("no longer exists"), not when it would expire;
/// one sent to a function deleted and made again under its name is not
/// delivered to the new one (its code and destinations are another's),
/// even while that one cannot run yet.
async fn an_event_for_a_deleted_function_is_not_delivered_to_its_successor(backend: Backend) {
    let server = Server::start(backend).await;
    // Off (replicas 0): the events wait parked until the delete.
    let off = json!({"runtime": "python3.11", "replicas": 0});
    for name in ["gone", "reused"] {
        deploy(&server, name, off.clone()).await;
    }
    let (status, gone, body) = send_event(&server, "/fn/ns/gone", "{}").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (status, reused, body) = send_event(&server, "/fn/ns/reused", "{}").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    for name in ["gone", "reused"] {
        let (status, body) = server
            .call(Method::DELETE, &format!("/v1/namespaces/ns/functions/{name}"), None)
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    }
    // Made again, and off too: nothing would wake the old event for it.
    deploy(&server, "reused", off).await;

    let record = record_reaches(&server, &gone.unwrap(), "failed", 30).await;
    assert_eq!(record["attempts"], 0, "{record}");
    assert!(
        record["last_error"]
            .as_str()
            .unwrap()
            .contains("ns/gone no longer exists"),
        "{record}"
    );
    let record = record_reaches(&server, &reused.unwrap(), "failed", 30).await;
    assert_eq!(record["attempts"], 0, "{record}");
    let error = record["last_error"].as_str().unwrap();
    // Deleted when its attempt came, or made again already.
    assert!(
        error.contains("was deleted after the event was accepted") || error.contains("no longer exists"),
        "{record}"
    );
    // Turned on, the new function takes none of the old events.
    let (status, body) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/functions/reused",
            Some(json!({"replicas": null})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        server.records("ns", "reused").await,
        Vec::<Value>::new(),
        "the new function ran it"
    );
    eventually(Duration::from_secs(10), || async {
        match server
            .metric(r#"sless_async_backlog{namespace="ns",function="gone"}"#)
            .await
        {
            None => Ok(()),
            waiting => Err(format!("the deleted function's backlog is at {waiting:?}")),
        }
    })
    .await;
}

/// An outcome goes to a destination function only when it exists (else
/// the source event says why), and it counts in the namespace's backlog
/// bounds like an accepted event: a two-byte call whose answer is large
/// cannot store more than the bound allows, and no outcome more than the
/// event limit. A destination given whole in a PATCH replaces the old one,
/// of either kind.
async fn outcomes_are_bounded_and_go_only_to_functions_that_exist(backend: Backend) {
    let server = Server::start_with(
        backend,
        &[
            ("SLESS_ASYNC_MAX_BACKLOG_MB", "1"),
            ("SLESS_AMQP_ALLOWED_HOSTS", "127.0.0.1:5672"),
        ],
    )
    .await;
    // Off: its outcomes wait parked, holding their bytes.
    let off = json!({"runtime": "python3.11", "replicas": 0});
    deploy(&server, "sink", off).await;
    // 200 000 control characters: 1.2 MB as JSON, cut to the event limit.
    let noisy = br#"
def handle(event, context):
    return "" * 200000
"#;
    let to_sink = json!({"runtime": "python3.11", "async": {"on_success": {"type": "function", "function": "sink"}}});
    server.deploy("ns", "noisy", to_sink, &[("handler.py", noisy)]).await;
    let mut errors = Vec::new();
    for _ in 0..6 {
        let (status, location, body) = send_event(&server, "/fn/ns/noisy", "{}").await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        let record = record_reaches(&server, &location.unwrap(), "succeeded", 60).await;
        errors.push(record["destination_error"].as_str().unwrap_or_default().to_string());
    }
    let stored = errors.iter().filter(|e| e.is_empty()).count();
    assert!((1..=4).contains(&stored), "{stored} outcomes stored: {errors:?}");
    let refused = errors.iter().find(|e| !e.is_empty()).expect("one refused");
    assert!(
        refused.contains("the outcome was not sent to ns/sink")
            && refused.contains("SLESS_ASYNC_MAX_BACKLOG_MB of 1 MiB"),
        "{refused}"
    );
    server
        .wait_metric(
            r#"sless_async_backlog{namespace="ns",function="sink"}"#,
            stored as f64,
            20,
        )
        .await;
    let bytes = server
        .metric(r#"sless_async_backlog_bytes{namespace="ns",function="sink"}"#)
        .await
        .unwrap_or_default();
    assert!(
        bytes <= stored as f64 * (256.0 + 2.0) * 1024.0 && bytes <= 1024.0 * 1024.0,
        "{stored} outcomes hold {bytes} bytes"
    );

    // A destination function that does not exist gets nothing stored.
    let to_ghost = json!({"async": {"on_success": {"type": "function", "function": "ghost"}}});
    let (status, body) = server
        .call(Method::PATCH, "/v1/namespaces/ns/functions/noisy", Some(to_ghost))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // The deliverer reads a function's spec at most once a second.
    eventually(Duration::from_secs(30), || async {
        let (status, location, body) = send_event(&server, "/fn/ns/noisy", "{}").await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        let record = record_reaches(&server, &location.unwrap(), "succeeded", 60).await;
        let error = record["destination_error"].as_str().unwrap_or_default();
        if error.contains("the destination function ns/ghost does not exist") {
            Ok(())
        } else {
            Err(format!("sent as before: {record}"))
        }
    })
    .await;
    let (_, page) = server
        .call(Method::GET, "/v1/namespaces/ns/functions/ghost/async-invocations", None)
        .await;
    assert_eq!(page["items"], json!([]), "{page}");

    // Whole destinations replace each other; one without a type is merged.
    let amqp = json!({"type": "amqp", "broker_url": BROKER, "queue": "outcomes"});
    for (patch, expected) in [
        (amqp.clone(), amqp.clone()),
        (
            json!({"queue": "others"}),
            json!({"type": "amqp", "broker_url": BROKER, "queue": "others"}),
        ),
        (
            json!({"type": "function", "function": "sink"}),
            json!({"type": "function", "function": "sink"}),
        ),
    ] {
        let (status, body) = server
            .call(
                Method::PATCH,
                "/v1/namespaces/ns/functions/noisy",
                Some(json!({"async": {"on_success": patch}})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["async"]["on_success"], expected, "{body}");
    }
}

/// One namespace's backlog of slow events holds its share of the delivery
/// slots (three quarters of them by default), not all: another namespace's event is
/// delivered while they run.
async fn a_namespaces_slow_events_leave_slots_to_others(backend: Backend) {
    let server = Server::start_with(backend, &[("SLESS_ASYNC_CONCURRENCY", "4")]).await;
    let slow = json!({"runtime": "python3.11", "max_instances": 8, "concurrency": 1, "timeout_sec": 60});
    server.deploy("busy", "slow", slow, &[("handler.py", SLEEPS)]).await;
    server
        .deploy(
            "quiet",
            "fast",
            json!({"runtime": "python3.11"}),
            &[("handler.py", SLEEPS)],
        )
        .await;
    for _ in 0..8 {
        let (status, _, body) = send_event(&server, "/fn/busy/slow", r#"{"sleep": 30}"#).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    let running = || async {
        let path = "/v1/namespaces/busy/functions/slow/async-invocations?status=running";
        let (code, page) = server.call(Method::GET, path, None).await;
        assert_eq!(code, StatusCode::OK, "{page}");
        page["items"].as_array().unwrap().len()
    };
    eventually(Duration::from_secs(20), || async {
        match running().await {
            3 => Ok(()),
            n => Err(format!("{n} of busy's events running")),
        }
    })
    .await;
    let (status, location, body) = send_event(&server, "/fn/quiet/fast", "{}").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    // Well before busy's first events end (30 s).
    record_reaches(&server, &location.unwrap(), "succeeded", 15).await;
    assert_eq!(running().await, 3, "busy holds its share of the 4 slots, no more");
}

/// Anyone may call `/fn` asynchronously, and each event is stored until
/// delivered: what a namespace's waiting events hold is bounded
/// (`SLESS_ASYNC_MAX_BACKLOG_MB`), as stored and as the store counts it
/// again every second; past it an event is refused naming the bound,
/// a smaller one that fits is taken, another namespace's too.
async fn a_namespace_s_waiting_events_hold_no_more_than_its_bound(backend: Backend) {
    let server = Server::start_with(backend, &[("SLESS_ASYNC_MAX_BACKLOG_MB", "1")]).await;
    for ns in ["ns", "other"] {
        // Off (replicas 0): the events wait in the store.
        server
            .deploy(
                ns,
                "echo",
                json!({"runtime": "python3.11", "replicas": 0}),
                &[("handler.py", HANDLER)],
            )
            .await;
    }
    let big = "x".repeat(200 * 1024);
    for n in 0..5 {
        let (status, _, body) = send_event(&server, "/fn/ns/echo", &big).await;
        assert_eq!(status, StatusCode::ACCEPTED, "event {n}: {body}");
    }
    let refused = |body: &Value| {
        let error = body["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("namespace \"ns\" has 0.98 MiB of asynchronous events waiting, and this one (0.20 MiB)")
                && error.contains("SLESS_ASYNC_MAX_BACKLOG_MB of 1 MiB"),
            "{body}"
        );
    };
    let (status, _, body) = send_event(&server, "/fn/ns/echo", &big).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    refused(&body);
    let (status, _, body) = send_event(&server, "/fn/ns/echo", r#"{"small": 1}"#).await;
    assert_eq!(status, StatusCode::ACCEPTED, "one that fits: {body}");
    let (status, _, body) = send_event(&server, "/fn/other/echo", &big).await;
    assert_eq!(status, StatusCode::ACCEPTED, "another namespace's: {body}");
    // As the store counts it (every second), the bound holds the same.
    server
        .wait_metric(r#"sless_async_backlog{namespace="ns",function="echo"}"#, 6.0, 20)
        .await;
    let bytes = server
        .metric(r#"sless_async_backlog_bytes{namespace="ns",function="echo"}"#)
        .await
        .unwrap_or_default();
    assert!(bytes > 5.0 * 200.0 * 1024.0, "counted {bytes} bytes");
    let (status, _, body) = send_event(&server, "/fn/ns/echo", &big).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    refused(&body);
}

/// SIGTERM lets the attempts under way finish within the grace period,
/// and queues again, uncounted, the one that outlasts it: with no retries
/// allowed, none of them fails because the server stopped.
async fn a_shutdown_drains_attempts_and_hands_back_the_rest(backend: Backend) {
    let mut server = Server::start_with(backend, &[("SLESS_SHUTDOWN_GRACE_SEC", "6")]).await;
    server
        .deploy(
            "ns",
            "sleeper",
            json!({"runtime": "python3.11", "async": {"retry_limit": 0}}),
            &[("handler.py", SLEEPS)],
        )
        .await;
    let mut short = Vec::new();
    for _ in 0..2 {
        let (status, location, body) = send_event(&server, "/fn/ns/sleeper", r#"{"sleep": 3}"#).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        short.push(location.unwrap());
    }
    let (status, long, body) = send_event(&server, "/fn/ns/sleeper", r#"{"sleep": 12}"#).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let long = long.unwrap();
    for location in short.iter().chain([&long]) {
        record_reaches(&server, location, "running", 30).await;
    }
    assert!(server.terminate_wait().success());
    server.spawn();
    // Finished during the drain: succeeded before the restart (a delivery
    // after it would take three more seconds).
    for location in &short {
        let (code, record) = server.call(Method::GET, location, None).await;
        assert_eq!(code, StatusCode::OK, "{record}");
        assert_eq!(
            (record["status"].as_str(), record["attempts"].as_u64()),
            (Some("succeeded"), Some(1)),
            "{record}"
        );
    }
    // Handed back, not failed, and delivered after the restart as its
    // first counted attempt.
    let (_, record) = server.call(Method::GET, &long, None).await;
    assert!(
        record["last_error"].as_str().unwrap_or("").contains("shut down"),
        "{record}"
    );
    let record = record_reaches(&server, &long, "succeeded", 60).await;
    assert_eq!(
        (record["attempts"].as_u64(), record["succeeded_attempt"].as_u64()),
        (Some(1), Some(1)),
        "{record}"
    );
}

/// Fails with 4 KiB of error text that says which event it is, then
/// control characters (JSON writes each as six bytes).
const LOUD_ERROR: &[u8] = br#"
def handle(event, context):
    return {"statusCode": 500, "body": {"error": "event %d " % event["n"] + "\x01" * 5000}}
"#;

/// What an event's last error says is the tenant's, 4 KiB of it, which
/// JSON may write six times as long: a page of events holds at most 4 MiB
/// whatever the `limit` (1000 such events were a 24 MB answer), and ends
/// where the next page starts, so paging returns every event once.
async fn a_page_of_events_holds_at_most_4_mib_and_paging_loses_none(backend: Backend) {
    const EVENTS: usize = 250;
    let server = Server::start(backend).await;
    server
        .deploy(
            "ns",
            "loud",
            json!({"runtime": "python3.11", "async": {"retry_limit": 0}}),
            &[("handler.py", LOUD_ERROR)],
        )
        .await;
    let mut sent = Vec::new();
    for n in 0..EVENTS {
        let (status, _, body) = send_event(&server, "/fn/ns/loud", &json!({"n": n}).to_string()).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        sent.push(body["id"].as_str().unwrap().to_string());
    }
    let pages = server
        .pages_holding(
            "/v1/namespaces/ns/functions/loud/async-invocations?status=failed&limit=1000",
            EVENTS,
        )
        .await;
    // Some 24 KB an event: two pages.
    assert!(pages.len() >= 2, "{} pages", pages.len());
    for (size, page) in &pages {
        assert!(*size <= ANSWER_BYTES + 1024, "a page of {size} bytes");
        assert!(!page["items"].as_array().unwrap().is_empty());
    }
    let listed: Vec<Value> = pages
        .iter()
        .flat_map(|(_, p)| p["items"].as_array().unwrap().clone())
        .collect();
    let error = listed[0]["last_error"].as_str().unwrap();
    assert!(error.len() > 4000 && error.contains('\u{1}'), "{error}");
    let ids: Vec<String> = listed.iter().map(|e| e["id"].as_str().unwrap().to_string()).collect();
    sent.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(ids, sent, "every event once, newest first");
}

crate::both_stores!(
    a_page_of_events_holds_at_most_4_mib_and_paging_loses_none,
    a_shutdown_drains_attempts_and_hands_back_the_rest,
    a_namespace_s_waiting_events_hold_no_more_than_its_bound,
    a_namespaces_slow_events_leave_slots_to_others,
    an_event_for_a_deleted_function_is_not_delivered_to_its_successor,
    outcomes_are_bounded_and_go_only_to_functions_that_exist,
    an_event_too_old_fails_without_an_attempt,
    concurrent_202s_survive_a_kill_and_wait_parked,
    accepted_then_delivered,
    fails_twice_then_succeeds_in_three_calls,
    dead_letter_to_a_function,
    dead_letter_to_a_rabbitmq_queue,
    kill_after_202_loses_nothing,
);
