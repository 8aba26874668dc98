//! Instances over real HTTP: crash -> 502 then recovery, timeout -> 504,
//! queue full -> 429, scale to zero and back, pinned replicas, and a rollout
//! under concurrent load with no stale answers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::json;

use super::harness::{eventually, Backend, Server};

const PY_TOOLS: &[u8] = br#"
import os, time

# Instances run in their own pid namespace, so os.getpid() is the same in
# each; a random token names the process instead.
INSTANCE = os.urandom(8).hex()

def handle(event, context):
    what = event.get("what") if isinstance(event, dict) else None
    if what == "crash":
        os._exit(3)
    if what == "sleep":
        time.sleep(event["secs"])
    return {"pid": INSTANCE, "uid": os.getuid()}
"#;

fn instances(name: &str) -> String {
    format!("sless_instances{{namespace=\"ns\",function=\"{name}\"}}")
}

async fn pid(server: &Server, name: &str) -> String {
    let (status, _, text) = server.invoke(Method::POST, &format!("/fn/ns/{name}"), "{}").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    serde_json::from_str::<serde_json::Value>(&text).unwrap()["pid"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn crash_is_502_then_replaced() {
    let server = Server::start(Backend::Sqlite).await;
    server
        .deploy(
            "ns",
            "tools",
            json!({"runtime": "python3.11"}),
            &[("handler.py", PY_TOOLS)],
        )
        .await;
    let before = pid(&server, "tools").await;
    let (status, _, text) = server
        .invoke(Method::POST, "/fn/ns/tools", r#"{"what": "crash"}"#)
        .await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{text}");
    assert!(text.contains("crashed"), "{text}");
    let after = pid(&server, "tools").await;
    assert_ne!(before, after, "a new instance serves after the crash");
}

/// The instance token of `name` once it answers. With a timeout of a
/// second, a call that waits for an instance to start (a namespace per
/// instance on a loaded machine can take longer) times out: such a 504 is
/// retried until `UP_WITHIN`; any other failure fails the test.
async fn pid_once_up(server: &Server, name: &str) -> String {
    eventually(UP_WITHIN, || async {
        let (status, _, text) = server.invoke(Method::POST, &format!("/fn/ns/{name}"), "{}").await;
        match status {
            StatusCode::OK => Ok(serde_json::from_str::<serde_json::Value>(&text).unwrap()["pid"]
                .as_str()
                .unwrap()
                .to_string()),
            StatusCode::GATEWAY_TIMEOUT => Err(format!("no instance up yet: {text}")),
            other => panic!("{other}: {text}"),
        }
    })
    .await
}

/// How long an instance may take to start on a loaded machine.
const UP_WITHIN: Duration = Duration::from_secs(60);

#[tokio::test]
async fn timeout_is_504_and_recycles_the_instance() {
    let server = Server::start(Backend::Sqlite).await;
    server
        .deploy(
            "ns",
            "tools",
            json!({"runtime": "python3.11", "timeout_sec": 1}),
            &[("handler.py", PY_TOOLS)],
        )
        .await;
    let before = pid_once_up(&server, "tools").await;
    // The instance is up and idle: the call below runs at once.
    let started = Instant::now();
    let (status, _, text) = server
        .invoke(Method::POST, "/fn/ns/tools", r#"{"what": "sleep", "secs": 5}"#)
        .await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "answered at the timeout, not when the handler finished"
    );
    // Had the instance been kept, it would answer once its sleep is over,
    // with the same token.
    assert_ne!(
        pid_once_up(&server, "tools").await,
        before,
        "the timed-out instance was recycled"
    );
}

#[tokio::test]
async fn full_queue_is_429_with_retry_after() {
    let server = Server::start_with(Backend::Sqlite, &[("SLESS_MAX_QUEUE", "1")]).await;
    let spec = json!({"runtime": "python3.11", "concurrency": 1, "max_instances": 1});
    server.deploy("ns", "tools", spec, &[("handler.py", PY_TOOLS)]).await;
    pid(&server, "tools").await; // the instance is up: what follows measures the queue alone
    let server = Arc::new(server);
    let mut calls = Vec::new();
    for _ in 0..5 {
        let server = server.clone();
        calls.push(tokio::spawn(async move {
            server
                .invoke(Method::POST, "/fn/ns/tools", r#"{"what": "sleep", "secs": 1}"#)
                .await
        }));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut ok = 0;
    let mut limited = 0;
    for call in calls {
        let (status, headers, text) = call.await.unwrap();
        match status {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                limited += 1;
                assert!(headers.contains_key("retry-after"), "{text}");
                assert!(text.contains("too many requests waiting"), "{text}");
            }
            other => panic!("unexpected {other}: {text}"),
        }
    }
    // One runs, one waits, the other three are turned away.
    assert_eq!((ok, limited), (2, 3));
}

#[tokio::test]
async fn scales_out_under_load_then_to_zero_and_back() {
    let server = Server::start_with(Backend::Sqlite, &[("SLESS_IDLE_TIMEOUT_SEC", "1")]).await;
    let spec = json!({"runtime": "python3.11", "concurrency": 1, "max_instances": 3});
    server.deploy("ns", "tools", spec, &[("handler.py", PY_TOOLS)]).await;
    // The instance the deploy checked stops when idle, as any other.
    server.wait_metric(&instances("tools"), 0.0, 30).await;
    // Six callers keep all three instances' worth of work waiting until
    // more than one instance has answered: they start in parallel, but on a
    // loaded machine one may be up long before the others.
    let server = Arc::new(server);
    let seen = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let deadline = Instant::now() + UP_WITHIN;
    let callers: Vec<_> = (0..6)
        .map(|_| {
            let (server, seen) = (server.clone(), seen.clone());
            tokio::spawn(async move {
                while seen.lock().unwrap().len() < 2 && Instant::now() < deadline {
                    let (status, _, text) = server
                        .invoke(Method::POST, "/fn/ns/tools", r#"{"what": "sleep", "secs": 0.5}"#)
                        .await;
                    assert_eq!(status, StatusCode::OK, "{text}");
                    let pid = serde_json::from_str::<serde_json::Value>(&text).unwrap()["pid"]
                        .as_str()
                        .unwrap()
                        .to_string();
                    seen.lock().unwrap().insert(pid);
                }
            })
        })
        .collect();
    for caller in callers {
        caller.await.unwrap();
    }
    let pids = seen.lock().unwrap().clone();
    assert!(
        pids.len() > 1 && pids.len() <= 3,
        "scaled out to at most max_instances: {pids:?}"
    );
    server.wait_metric(&instances("tools"), 0.0, 30).await;
    pid(&server, "tools").await;
    assert_eq!(
        server.metric(&instances("tools")).await,
        Some(1.0),
        "scaled from zero on demand"
    );
}

#[tokio::test]
async fn replicas_pin_the_count_and_zero_turns_it_off() {
    let server = Server::start_with(Backend::Sqlite, &[("SLESS_IDLE_TIMEOUT_SEC", "1")]).await;
    let spec = json!({"runtime": "python3.11", "replicas": 2});
    server.deploy("ns", "tools", spec, &[("handler.py", PY_TOOLS)]).await;
    server.wait_metric(&instances("tools"), 2.0, 10).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        server.metric(&instances("tools")).await,
        Some(2.0),
        "pinned replicas are not scaled down when idle"
    );

    let (status, body) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/functions/tools",
            Some(json!({"replicas": 0})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _, text) = server.invoke(Method::POST, "/fn/ns/tools", "{}").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    server.wait_metric(&instances("tools"), 0.0, 10).await;

    server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/functions/tools",
            Some(json!({"replicas": null})),
        )
        .await;
    pid(&server, "tools").await;
}

#[tokio::test]
async fn rollout_under_load_never_answers_with_old_code_after_ready() {
    // On both schedulers: one thread (the default on two CPUs) and several,
    // where leases are taken and released from different threads at once.
    for threads in ["1", "3"] {
        rollout_under_load(threads).await;
    }
}

async fn rollout_under_load(threads: &str) {
    let server = Arc::new(Server::start_with(Backend::Sqlite, &[("SLESS_WORKER_THREADS", threads)]).await);
    let v1 = b"def handle(event, context):\n    return 'v1'\n";
    let v2 = b"def handle(event, context):\n    return 'v2'\n";
    server
        .deploy(
            "ns",
            "roll",
            json!({"runtime": "python3.11", "concurrency": 4}),
            &[("handler.py", v1)],
        )
        .await;

    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (server, stop, answered) = (server.clone(), stop.clone(), answered.clone());
        workers.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let sent = Instant::now();
                let (status, _, text) = server.invoke(Method::GET, "/fn/ns/roll", "").await;
                seen.push((sent, status, text));
                answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            seen
        }));
    }
    // The load runs before, through and after the rollout: wait for
    // answers, not for a fixed time (instances start slowly on a busy
    // machine).
    let answers_reach = |n: usize| {
        let answered = answered.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            while answered.load(std::sync::atomic::Ordering::SeqCst) < n && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    answers_reach(20).await;
    let (status, uploaded) = server
        .upload("ns", "roll", super::harness::zip_of(&[("handler.py", v2)]))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let hash = uploaded["status"]["code_hash"].as_str().unwrap().to_string();
    server.wait_built("ns", "roll", &hash).await;
    let ready_seen = Instant::now();
    let before = answered.load(std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(500)).await;
    answers_reach(before + 20).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);

    let mut total = 0;
    for worker in workers {
        for (sent, status, text) in worker.await.unwrap() {
            total += 1;
            assert_eq!(
                status,
                StatusCode::OK,
                "{threads} threads: no failed request during the rollout: {text}"
            );
            if sent > ready_seen {
                assert_eq!(
                    text, r#""v2""#,
                    "{threads} threads: request sent after Ready answered by old code"
                );
            }
        }
    }
    assert!(
        total >= 40,
        "{threads} threads: load ran through the rollout ({total} requests)"
    );
}

#[tokio::test]
async fn a_new_shim_version_rebuilds_and_rolls_every_function() {
    use sqlx::Connection;
    let mut server = Server::start(Backend::Sqlite).await;
    let built = server
        .deploy(
            "ns",
            "tools",
            json!({"runtime": "python3.11"}),
            &[("handler.py", PY_TOOLS)],
        )
        .await;
    assert_eq!(built["status"]["version"], 1);
    server.kill9();
    // Make version 1 look built by an older shim: its artifact id no longer
    // matches what the running shim version would build.
    let db = server.data_dir.path().join("sless.db");
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    sqlx::query("UPDATE resources SET status = json_set(status, '$.artifact', 'built-by-an-older-shim') WHERE kind = 'function' AND name = 'tools'")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    server.spawn();
    let rebuilt = server
        .wait_for("/v1/namespaces/ns/functions/tools", 60, |f| {
            f["status"]["version"] == 2 && f["status"]["phase"] == "Ready"
        })
        .await;
    assert_eq!(
        rebuilt["status"]["artifact"], built["status"]["artifact"],
        "rebuilt onto the current shim"
    );
    pid(&server, "tools").await;
}

/// Takes `LOAD_SECS` to load; answers its `MARK`.
const PY_SLOW_LOAD: &[u8] = br#"
import os, time

time.sleep(float(os.environ["LOAD_SECS"]))

def handle(event, context):
    return {"mark": os.environ["MARK"]}
"#;

/// A call waiting for an instance that new settings make stale while it
/// starts is served by an instance of the new settings. (The stale one was
/// stopped without waking the call, which waited out its timeout: a 504.)
#[tokio::test]
async fn a_call_waiting_on_a_start_that_new_settings_outdate_gets_the_new_settings() {
    let server = Server::start_with(Backend::Sqlite, &[("SLESS_IDLE_TIMEOUT_SEC", "1")]).await;
    let spec = json!({"runtime": "python3.11", "timeout_sec": 10,
        "env": {"LOAD_SECS": "0", "MARK": "old"}});
    server.deploy("ns", "slow", spec, &[("handler.py", PY_SLOW_LOAD)]).await;
    set_env(&server, "slow", json!({"LOAD_SECS": "2", "MARK": "old"})).await;
    server.wait_metric(&instances("slow"), 0.0, 30).await;

    // The call starts an instance that takes two seconds to load; the
    // settings change within them, and their instance loads at once.
    let server = Arc::new(server);
    let call = {
        let server = server.clone();
        tokio::spawn(async move { server.invoke(Method::POST, "/fn/ns/slow", "{}").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    set_env(&server, "slow", json!({"LOAD_SECS": "0", "MARK": "new"})).await;
    let (status, _, text) = call.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&text).unwrap()["mark"], "new");
}

crate::both_stores!(a_function_deleted_while_new_settings_load_keeps_nothing);

/// A function deleted while new settings are being applied to it keeps
/// nothing: no instance (the settings' instance, loading when the delete
/// stopped the function's instances, is stopped when it is ready) and, on
/// PostgreSQL, no record that this replica serves it (which the settings
/// wrote after the delete had forgotten it; a function made later under
/// the name would have counted this replica as serving its versions).
async fn a_function_deleted_while_new_settings_load_keeps_nothing(backend: Backend) {
    let server = Server::start(backend).await;
    let spec = json!({"runtime": "python3.11", "min_instances": 1,
        "env": {"LOAD_SECS": "0", "MARK": "old"}});
    server
        .deploy("ns", "doomed", spec, &[("handler.py", PY_SLOW_LOAD)])
        .await;
    server.wait_metric(&instances("doomed"), 1.0, 30).await;

    // The settings' instance takes two seconds to load; the delete comes within them.
    let server = Arc::new(server);
    let patch = {
        let server = server.clone();
        tokio::spawn(async move {
            let body = json!({"env": {"LOAD_SECS": "2", "MARK": "new"}});
            server
                .call(Method::PATCH, "/v1/namespaces/ns/functions/doomed", Some(body))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (status, body) = server
        .call(Method::DELETE, "/v1/namespaces/ns/functions/doomed", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = patch.await.unwrap();
    assert!(
        status == StatusCode::OK || status == StatusCode::NOT_FOUND,
        "{status}: {body}"
    );

    // Nothing of it runs, now or once what was loading is done.
    for _ in 0..3 {
        assert_eq!(server.metric(&instances("doomed")).await.unwrap_or(0.0), 0.0);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (status, _, _) = server.invoke(Method::POST, "/fn/ns/doomed", "{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    if let Some(db) = &server.db {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&db.url()).await.unwrap();
        let served: i64 = sqlx::query_scalar("SELECT count(*) FROM served_versions WHERE name = 'doomed'")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(served, 0, "a replica is still recorded as serving the deleted function");
    }
}

/// New settings for function `name`: its `env`.
async fn set_env(server: &Server, name: &str, env: serde_json::Value) {
    let (status, body) = server
        .call(
            Method::PATCH,
            &format!("/v1/namespaces/ns/functions/{name}"),
            Some(json!({ "env": env })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}
