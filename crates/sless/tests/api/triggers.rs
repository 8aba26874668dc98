//! Triggers over real HTTP: the API and its validation, enable/disable in
//! place, cron firing (catch-up fires once; two servers on one PostgreSQL
//! fire each tick exactly once).

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::harness::{eventually, Backend, Server};

const ECHO: &[u8] = b"def handle(event, context):\n    print('event', event, context.trigger)\n    return event\n";

async fn with_function(backend: Backend) -> Server {
    let server = Server::start(backend).await;
    server
        .deploy("ns", "echo", json!({"runtime": "python3.11"}), &[("handler.py", ECHO)])
        .await;
    server
}

async fn create(server: &Server, body: Value) -> (StatusCode, Value) {
    server
        .call(Method::POST, "/v1/namespaces/ns/triggers", Some(body))
        .await
}

crate::both_stores!(trigger_api_and_validation);

async fn trigger_api_and_validation(backend: Backend) {
    let server = with_function(backend).await;
    let (status, http) = create(&server, json!({"name": "web", "type": "http", "function": "echo"})).await;
    assert_eq!(status, StatusCode::CREATED, "{http}");
    assert_eq!(http["enabled"], true);
    assert_eq!(http["status"]["url"], format!("{}/fn/ns/echo", server.url));
    let (status, _) = create(&server, json!({"name": "web", "type": "http", "function": "echo"})).await;
    assert_eq!(status, StatusCode::CONFLICT);

    // What the cron loop reads every tick is bounded.
    let long_list = vec!["0"; 600].join(",");
    let bad = [
        (
            json!({"name": "t1", "type": "cron", "function": "echo", "schedule": "0 0 1 1 *", "event": {"blob": "x".repeat(16 * 1024)}}),
            "a cron trigger's event must be at most 16384 bytes as JSON, got 16395",
        ),
        (
            json!({"name": "t1", "type": "cron", "function": "echo", "schedule": format!("{long_list} * * * *")}),
            "schedule must be at most 1024 characters, got 1207",
        ),
        (
            json!({"name": "t1", "type": "amqp", "function": "echo", "queue": "q", "broker_url": format!("amqp://guest:{}@127.0.0.1:5672/%2f", "p".repeat(2100))}),
            "broker_url must be at most 2048 characters",
        ),
        (
            json!({"name": "t1", "type": "http", "function": "nope"}),
            "does not exist",
        ),
        (
            json!({"name": "t1", "type": "cron", "function": "echo"}),
            "schedule is required",
        ),
        (
            json!({"name": "t1", "type": "cron", "function": "echo", "schedule": "61 * * * *"}),
            "invalid schedule",
        ),
        (
            // croner takes a lone L in any field (it never fires there):
            // the message names the field that holds it.
            json!({"name": "t1", "type": "cron", "function": "echo", "schedule": "L * * * *"}),
            r#"the minute field "L" is not valid: L goes alone in the day-of-month field"#,
        ),
        (
            json!({"name": "t1", "type": "cron", "function": "echo", "schedule": "0 0 * * JAN"}),
            r#"the day-of-week field "JAN" is not valid: JAN goes only in the month field"#,
        ),
        (
            json!({"name": "t1", "type": "cron", "function": "echo", "schedule": "* *"}),
            "5 fields",
        ),
        (
            json!({"name": "t1", "type": "cron", "function": "echo", "schedule": "* * * * *", "timezone": "Mars/Base"}),
            "unknown timezone",
        ),
        (
            json!({"name": "t1", "type": "http", "function": "echo", "schedule": "* * * * *"}),
            "schedule does not apply",
        ),
        (
            json!({"name": "t1", "type": "amqp", "function": "echo", "queue": "q"}),
            "broker_url is required",
        ),
        (
            json!({"name": "t1", "type": "amqp", "function": "echo", "broker_url": "http://x", "queue": "q"}),
            "amqp://",
        ),
        (json!({"name": "t1", "type": "smtp", "function": "echo"}), "type"),
        (json!({"name": "T1", "type": "http", "function": "echo"}), "DNS label"),
        (
            json!({"name": "t1", "type": "http", "function": "echo", "extra": 1}),
            "extra",
        ),
    ];
    for (body, needle) in bad {
        let (status, err) = create(&server, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body} -> {err}");
        assert!(
            err["error"].as_str().unwrap().contains(needle),
            "{body}: {err} should mention {needle:?}"
        );
    }

    let (status, cron) = create(
        &server,
        json!({"name": "tick", "type": "cron", "function": "echo", "schedule": "0 9 * * 1-5", "timezone": "Europe/Berlin", "event": {"k": 1, "fill": "x".repeat(16 * 1024 - 30)}}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{cron}");
    assert!(cron["status"]["next_fire_at"].is_string(), "{cron}");
    let (status, err) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/triggers/tick",
            Some(json!({"type": "http"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(err["error"].as_str().unwrap().contains("cannot be changed"), "{err}");
    let (_, list) = server.call(Method::GET, "/v1/namespaces/ns/triggers", None).await;
    let names: Vec<_> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["tick", "web"]);
    let (status, _) = server
        .call(Method::DELETE, "/v1/namespaces/ns/triggers/tick", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = server.call(Method::GET, "/v1/namespaces/ns/triggers/tick", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn disabling_every_trigger_frees_the_function_in_place() {
    let server = with_function(Backend::Sqlite).await;
    let (status, _) = create(&server, json!({"name": "web", "type": "http", "function": "echo"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _, _) = server.invoke(Method::POST, "/fn/ns/echo", "{}").await;
    assert_eq!(status, StatusCode::OK);
    let instances = "sless_instances{namespace=\"ns\",function=\"echo\"}";
    assert_eq!(server.metric(instances).await, Some(1.0));

    let (status, patched) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/triggers/web",
            Some(json!({"enabled": false})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    assert_eq!(patched["enabled"], false);
    assert_eq!(patched["created_at"], patched["created_at"], "changed in place");
    let (status, _, text) = server.invoke(Method::POST, "/fn/ns/echo", "{}").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    assert!(text.contains("disabled"), "{text}");
    server.wait_metric(instances, 0.0, 10).await;

    server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/triggers/web",
            Some(json!({"enabled": true})),
        )
        .await;
    let (status, _, _) = server.invoke(Method::POST, "/fn/ns/echo", "{}").await;
    assert_eq!(status, StatusCode::OK);
}

fn cron_records(records: &[Value]) -> Vec<&Value> {
    records.iter().filter(|r| r["trigger"] == "cron").collect()
}

#[tokio::test]
async fn cron_fires_with_its_event_and_records_status() {
    let server = Server::start_with(Backend::Sqlite, &[("SLESS_CRON_TICK_MS", "100")]).await;
    server
        .deploy("ns", "echo", json!({"runtime": "python3.11"}), &[("handler.py", ECHO)])
        .await;
    let (status, _) = create(
        &server,
        json!({"name": "every-second", "type": "cron", "function": "echo", "schedule": "* * * * * *", "event": {"from": "cron"}}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let trigger = server
        .wait_for("/v1/namespaces/ns/triggers/every-second", 15, |t| {
            t["status"]["fired"].as_u64() >= Some(2)
        })
        .await;
    assert!(trigger["status"]["last_fired_at"].is_string());
    assert_eq!(trigger["status"]["last_error"], Value::Null);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let records = loop {
        let records = server.records("ns", "echo").await;
        if cron_records(&records).len() >= 2 || std::time::Instant::now() > deadline {
            break records;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let fired = cron_records(&records);
    assert!(fired.len() >= 2, "{records:?}");
    assert_eq!(fired[0]["status"], "ok");
    let printed = fired[0]["logs"][0]["text"].as_str().unwrap();
    assert!(
        printed.contains("{'from': 'cron'} cron"),
        "the trigger's event reached the handler: {printed}"
    );

    // A failing handler leaves last_error.
    server
        .deploy(
            "ns",
            "echo",
            json!({"runtime": "python3.11"}),
            &[("handler.py", b"def handle(e, c):\n    raise ValueError('cron broke')\n")],
        )
        .await;
    server
        .wait_for("/v1/namespaces/ns/triggers/every-second", 15, |t| {
            t["status"]["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("cron broke"))
        })
        .await;
}

/// A cron call slower than its schedule: the ticks that come while it
/// runs are claimed and skipped, and counted (`skipped`), so a trigger
/// never runs two calls at once and none piles up in the function's queue.
#[tokio::test]
async fn ticks_that_come_while_the_call_before_runs_are_skipped() {
    let server = Server::start_with(Backend::Sqlite, &[("SLESS_CRON_TICK_MS", "100")]).await;
    let slow = b"import time\n\ndef handle(event, context):\n    time.sleep(event['sleep'])\n    return 'slept'\n";
    server
        .deploy(
            "ns",
            "slow",
            json!({"runtime": "python3.11", "concurrency": 4}),
            &[("handler.py", slow)],
        )
        .await;
    let (status, body) = create(
        &server,
        json!({"name": "every-second", "type": "cron", "function": "slow", "schedule": "* * * * * *", "event": {"sleep": 2.5}}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let trigger = server
        .wait_for("/v1/namespaces/ns/triggers/every-second", 30, |t| {
            t["status"]["fired"].as_u64() >= Some(3) && t["status"]["skipped"].as_u64() >= Some(2)
        })
        .await;
    assert_eq!(trigger["status"]["last_error"], Value::Null, "{trigger}");
    let records = eventually(Duration::from_secs(15), || async {
        let records = server.records("ns", "slow").await;
        match cron_records(&records).len() {
            n if n >= 2 => Ok(records),
            n => Err(format!("{n} cron records")),
        }
    })
    .await;
    let mut calls: Vec<(chrono::DateTime<chrono::FixedOffset>, f64)> = cron_records(&records)
        .iter()
        .map(|r| {
            assert_eq!(r["status"], "ok", "{r}");
            let started = chrono::DateTime::parse_from_rfc3339(r["started_at"].as_str().unwrap()).unwrap();
            (started, r["duration_ms"].as_f64().unwrap())
        })
        .collect();
    calls.sort_by_key(|(started, _)| *started);
    for pair in calls.windows(2) {
        let ((first, took), (next, _)) = (pair[0], pair[1]);
        let ended = first + chrono::Duration::microseconds((took * 1000.0) as i64);
        assert!(
            next >= ended,
            "a call started at {next} while the one of {first} ran: {calls:?}"
        );
    }
}

#[tokio::test]
async fn missed_ticks_fire_once_on_catch_up() {
    let mut server = Server::start_with(Backend::Sqlite, &[("SLESS_CRON_TICK_MS", "100")]).await;
    server
        .deploy("ns", "echo", json!({"runtime": "python3.11"}), &[("handler.py", ECHO)])
        .await;
    create(
        &server,
        json!({"name": "every-3s", "type": "cron", "function": "echo", "schedule": "*/3 * * * * *"}),
    )
    .await;
    let before = server
        .wait_for("/v1/namespaces/ns/triggers/every-3s", 15, |t| {
            t["status"]["fired"].as_u64() >= Some(1)
        })
        .await["status"]["fired"]
        .as_u64()
        .unwrap();
    server.kill9();
    tokio::time::sleep(Duration::from_secs(7)).await; // at least two ticks missed
    server.spawn();
    let after = server
        .wait_for("/v1/namespaces/ns/triggers/every-3s", 15, |t| {
            t["status"]["fired"].as_u64() > Some(before)
        })
        .await;
    assert_eq!(
        after["status"]["fired"].as_u64().unwrap(),
        before + 1,
        "catch-up fired once, not a burst: {after}"
    );
    // Until the next regular tick it stays at one catch-up.
    let next: chrono::DateTime<chrono::Utc> = after["status"]["next_fire_at"].as_str().unwrap().parse().unwrap();
    let quiet = (next - chrono::Utc::now())
        .to_std()
        .unwrap_or_default()
        .saturating_sub(Duration::from_millis(300));
    tokio::time::sleep(quiet).await;
    let (_, now) = server
        .call(Method::GET, "/v1/namespaces/ns/triggers/every-3s", None)
        .await;
    assert_eq!(now["status"]["fired"].as_u64().unwrap(), before + 1, "{now}");
}

#[tokio::test]
async fn two_servers_on_postgres_fire_each_tick_once() {
    let a = Server::start_with(Backend::Postgres, &[("SLESS_CRON_TICK_MS", "50")]).await;
    a.deploy("ns", "echo", json!({"runtime": "python3.11"}), &[("handler.py", ECHO)])
        .await;
    let b = Server::start_sharing(&a).await;
    create(
        &a,
        json!({"name": "every-second", "type": "cron", "function": "echo", "schedule": "* * * * * *"}),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (_, trigger) = b
        .call(Method::DELETE, "/v1/namespaces/ns/triggers/every-second", None)
        .await;
    assert_eq!(trigger, Value::Null);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let records = a.records("ns", "echo").await;
    let fired = cron_records(&records);
    assert!(fired.len() >= 4, "about one per second for 6 s: {}", fired.len());
    // Every second fired once between the two servers.
    let mut seconds: Vec<String> = fired
        .iter()
        .map(|r| r["started_at"].as_str().unwrap()[..19].to_string())
        .collect();
    seconds.sort();
    let before = seconds.len();
    seconds.dedup();
    assert_eq!(seconds.len(), before, "a tick fired twice: {seconds:?}");
}

/// A stop (SIGTERM) lets a cron call under way finish within its grace, as
/// it does calls over HTTP: the call's instance used to be stopped under
/// it as soon as the HTTP side had drained, and the tick was lost.
#[tokio::test]
async fn a_stop_lets_a_cron_call_under_way_finish() {
    let mut server = Server::start_with(Backend::Sqlite, &[("SLESS_CRON_TICK_MS", "100")]).await;
    let slow = b"import time\n\ndef handle(event, context):\n    time.sleep(3)\n    return 'done'\n";
    server
        .deploy("ns", "slow", json!({"runtime": "python3.11"}), &[("handler.py", slow)])
        .await;
    let (status, _) = create(
        &server,
        json!({"name": "tick", "type": "cron", "function": "slow", "schedule": "* * * * * *"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    server
        .wait_for("/v1/namespaces/ns/triggers/tick", 15, |t| {
            t["status"]["fired"].as_u64() >= Some(1)
        })
        .await;
    // No new tick from now on; the one under way sleeps on.
    let (status, body) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/triggers/tick",
            Some(json!({"enabled": false})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(server.terminate_wait().success());

    server.spawn();
    let (_, trigger) = server.call(Method::GET, "/v1/namespaces/ns/triggers/tick", None).await;
    let fired = trigger["status"]["fired"].as_u64().unwrap();
    assert_eq!(trigger["status"]["last_error"], Value::Null, "{trigger}");
    let records = server.records("ns", "slow").await;
    let ok = cron_records(&records).iter().filter(|r| r["status"] == "ok").count() as u64;
    assert_eq!(ok, fired, "every tick's call finished: {records:?}");
}
