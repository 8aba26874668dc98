//! Invocation records and logs: what each call left behind, output capture
//! and its cap, following logs live, and a database outage that slows or
//! fails no invocation.

use std::sync::atomic::Ordering;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::harness::{eventually, Backend, PgDb, Server, TcpProxy, ANSWER_BYTES};

const PRINTER: &[u8] = br#"
import sys

def handle(event, context):
    if event.get("flood"):
        print("x" * 200_000)
    print("out:", event.get("say", "nothing"))
    print("err line", file=sys.stderr)
    if event.get("fail"):
        raise RuntimeError("asked to fail")
    return {"ok": True}
"#;

/// Polls the invocation list until it holds `n` records.
async fn invocations(server: &Server, name: &str, n: usize) -> Vec<Value> {
    eventually(Duration::from_secs(10), || async {
        let (status, page) = server
            .call(
                Method::GET,
                &format!("/v1/namespaces/ns/functions/{name}/invocations?limit=100"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let items = page["items"].as_array().unwrap().clone();
        if items.len() >= n {
            Ok(items)
        } else {
            Err(format!("{} of {n} invocation records", items.len()))
        }
    })
    .await
}

crate::both_stores!(
    records_capture_output_and_page,
    records_stored_before_chunks_survive_the_upgrade
);

/// A database left by a server from before chunked records (schema 2, one
/// row per record) is migrated at start: its records read back unchanged.
async fn records_stored_before_chunks_survive_the_upgrade(backend: Backend) {
    let mut server = Server::start(backend).await;
    let (status, _) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "old", "runtime": "python3.11"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    server.kill9();
    let old_schema = match backend {
        Backend::Sqlite => include_str!("../../../sless-server/migrations/sqlite/0002_invocations.sql"),
        Backend::Postgres => include_str!("../../../sless-server/migrations/postgres/0002_invocations.sql"),
    };
    // Ids start with the start time; an hour ago is inside retention. The
    // chunks' migrations (3 and 4) apply again; the later ones' changes
    // stay as they are (an added column cannot be added twice).
    let micros = chrono::Utc::now().timestamp_micros() - 3_600_000_000;
    let (older, newer) = (format!("{micros:016x}deadbeef"), format!("{:016x}cafef00d", micros + 1));
    let downgrade = format!(
        "DROP TABLE invocation_chunks; DELETE FROM schema_migrations WHERE version IN (3, 4); {old_schema}
         INSERT INTO invocations VALUES ('{older}', 'ns', 'old', 3, 'cron', 'req-1',
           '2026-11-30T10:00:00.123456Z', 12.5, 'error', 'boom', 10, 20, TRUE,
           '[{{\"stream\":\"stdout\",\"text\":\"hi\\n\"}}]', FALSE),
           ('{newer}', 'ns', 'old', 4, 'http', 'req-2',
           '2026-11-30T10:00:00.123457Z', 1, '200', NULL, 0, 2, FALSE, '[]', TRUE);"
    );
    server.run_sql(&downgrade).await;
    server.spawn();
    let items = invocations(&server, "old", 2).await;
    let expected = json!([
        {"id": newer, "namespace": "ns", "function": "old", "version": 4, "trigger": "http",
         "request_id": "req-2", "started_at": "2026-11-30T10:00:00.123457Z", "duration_ms": 1.0, "status": "200",
         "error": null, "bytes_in": 0, "bytes_out": 2, "cold_start": false, "logs": [], "logs_truncated": true},
        {"id": older, "namespace": "ns", "function": "old", "version": 3, "trigger": "cron",
         "request_id": "req-1", "started_at": "2026-11-30T10:00:00.123456Z", "duration_ms": 12.5, "status": "error",
         "error": "boom", "bytes_in": 10, "bytes_out": 20, "cold_start": true,
         "logs": [{"stream": "stdout", "text": "hi\n"}], "logs_truncated": false},
    ]);
    assert_eq!(Value::Array(items), expected);
}

async fn records_capture_output_and_page(backend: Backend) {
    let server = Server::start(backend).await;
    server
        .deploy(
            "ns",
            "printer",
            json!({"runtime": "python3.11"}),
            &[("handler.py", PRINTER)],
        )
        .await;
    let (status, _, _) = server
        .invoke(Method::POST, "/fn/ns/printer", r#"{"say": "first"}"#)
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = server
        .invoke(Method::POST, "/fn/ns/printer", r#"{"say": "second", "fail": true}"#)
        .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    let (status, _, _) = server
        .invoke(Method::POST, "/fn/ns/printer", r#"{"flood": true}"#)
        .await;
    assert_eq!(status, StatusCode::OK);

    let items = invocations(&server, "printer", 3).await;
    let (flood, failed, first) = (&items[0], &items[1], &items[2]);
    assert_eq!(first["trigger"], "http");
    assert_eq!(first["status"], "200");
    assert_eq!(first["version"], 1);
    assert_eq!(
        first["cold_start"], false,
        "the instance checked by the deploy served it"
    );
    assert_eq!(failed["cold_start"], false);
    let duration_ms = first["duration_ms"].as_f64().unwrap();
    assert!(duration_ms > 0.0);
    // Kept to the microsecond.
    let micros = duration_ms * 1000.0;
    assert!((micros - micros.round()).abs() < 1e-6, "{duration_ms}");
    assert_eq!(first["bytes_in"], r#"{"say": "first"}"#.len());
    assert_eq!(first["bytes_out"], r#"{"ok":true}"#.len());
    let lines: Vec<(String, String)> = first["logs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["stream"].as_str().unwrap().to_string(),
                l["text"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(lines.contains(&("stdout".into(), "out: first\n".into())), "{lines:?}");
    assert!(lines.contains(&("stderr".into(), "err line\n".into())), "{lines:?}");
    assert_eq!(failed["status"], "500");
    assert!(failed["error"].as_str().unwrap().contains("asked to fail"), "{failed}");
    let traceback: String = failed["logs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["text"].as_str().unwrap())
        .collect();
    assert!(
        traceback.contains("Traceback") && traceback.contains("RuntimeError"),
        "{traceback}"
    );
    assert_eq!(flood["logs_truncated"], true);
    let kept: usize = flood["logs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["text"].as_str().unwrap().len())
        .sum();
    assert!(kept < 100_000, "output capped, {kept} bytes kept");

    // Paging, newest first.
    let (_, page) = server
        .call(
            Method::GET,
            "/v1/namespaces/ns/functions/printer/invocations?limit=2",
            None,
        )
        .await;
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    let before = page["next_before"].as_str().unwrap();
    let (_, older) = server
        .call(
            Method::GET,
            &format!("/v1/namespaces/ns/functions/printer/invocations?limit=2&before={before}"),
            None,
        )
        .await;
    assert_eq!(older["items"][0]["id"], first["id"]);
    assert_eq!(older["next_before"], Value::Null);
    // An empty cursor is no cursor: the first page.
    let (status, again) = server
        .call(
            Method::GET,
            "/v1/namespaces/ns/functions/printer/invocations?limit=2&before=",
            None,
        )
        .await;
    assert_eq!((status, &again["items"]), (StatusCode::OK, &page["items"]), "{again}");
    for query in ["limit=0", "before=zzz", "before=0006282C5E1F4A3B9C0D1E2F"] {
        let (status, body) = server
            .call(
                Method::GET,
                &format!("/v1/namespaces/ns/functions/printer/invocations?{query}"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
    }

    // Text logs.
    let text = server
        .request(
            Method::GET,
            "/v1/namespaces/ns/functions/printer/logs?tail=1000",
            Some(&server.admin),
        )
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.lines().any(|l| l.ends_with(" stdout out: first")), "{text}");
    // The last lines of all, in order; a tail past the bound is refused.
    let tail = |n: &str| {
        server
            .request(
                Method::GET,
                &format!("/v1/namespaces/ns/functions/printer/logs?tail={n}"),
                Some(&server.admin),
            )
            .send()
    };
    let last: Vec<&str> = text.lines().collect();
    let two = tail("2").await.unwrap().text().await.unwrap();
    assert_eq!(two.lines().collect::<Vec<_>>(), last[last.len() - 2..], "{two}");
    let response = tail("10001").await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(response.text().await.unwrap().contains("at most 10000"));
}

/// Prints 65,000 control characters (under the 64 KiB cap), which JSON
/// writes six bytes each, then which call this is.
const LOUD: &[u8] = br#"
import sys

def handle(event, context):
    sys.stdout.write("\x01" * 65000 + " call %d\n" % event["n"])
    return 1
"#;

/// What handlers printed is the tenant's: one answer holds at most 4 MiB
/// of it whatever the `limit` or `tail` (1000 such records were a 390 MB
/// page), a page ends where the next starts so paging loses no record,
/// and a log's history is its newest lines that fit.
#[tokio::test]
async fn an_answer_holds_at_most_4_mib_of_output_and_paging_loses_nothing() {
    const CALLS: usize = 30;
    let server = Server::start(Backend::Sqlite).await;
    server
        .deploy("ns", "loud", json!({"runtime": "python3.11"}), &[("handler.py", LOUD)])
        .await;
    for n in 0..CALLS {
        let (status, _, body) = server
            .invoke(Method::POST, "/fn/ns/loud", &json!({"n": n}).to_string())
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let pages = server
        .pages_holding("/v1/namespaces/ns/functions/loud/invocations?limit=1000", CALLS)
        .await;
    // Some 390 KB a record: a few pages of a few records each.
    assert!(pages.len() >= 3, "{} pages", pages.len());
    for (size, page) in &pages {
        assert!(*size <= ANSWER_BYTES + 1024, "a page of {size} bytes");
        assert!(!page["items"].as_array().unwrap().is_empty());
    }
    let calls: Vec<String> = pages
        .iter()
        .flat_map(|(_, p)| p["items"].as_array().unwrap().clone())
        .map(|r| {
            let text = r["logs"][0]["text"].as_str().unwrap();
            text.trim_start_matches('\u{1}').trim().to_string()
        })
        .collect();
    let expected: Vec<String> = (0..CALLS).rev().map(|n| format!("call {n}")).collect();
    assert_eq!(calls, expected, "every record once, newest first");

    let server = &server;
    let logs = |accept: &'static str| async move {
        let response = server
            .request(
                Method::GET,
                "/v1/namespaces/ns/functions/loud/logs?tail=10000",
                Some(&server.admin),
            )
            .header("accept", accept)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response.text().await.unwrap()
    };
    // As events, each line is some 390 KB: the newest that fit, in order.
    let events = logs("text/event-stream").await;
    assert!(events.len() <= ANSWER_BYTES, "{} bytes of events", events.len());
    let calls: Vec<usize> = events
        .split_terminator("\n\n")
        .map(|event| {
            let event: Value = serde_json::from_str(event.strip_prefix("data: ").unwrap()).unwrap();
            let text = event["text"].as_str().unwrap().trim_start_matches('\u{1}').trim();
            text.strip_prefix("call ").unwrap().parse().unwrap()
        })
        .collect();
    assert!(calls.len() >= 5 && calls.len() < CALLS, "{} events", calls.len());
    assert_eq!(calls, (CALLS - calls.len()..CALLS).collect::<Vec<_>>());
    // As text, 65 KB a line: all of them fit, read a page of records at a time.
    let text = logs("text/plain").await;
    assert_eq!(text.lines().count(), CALLS, "{} bytes of text", text.len());
    assert!(text.lines().last().unwrap().ends_with(&format!(" call {}", CALLS - 1)));

    // Stats read every record too, a bounded page at a time.
    let (status, stats) = server
        .call(Method::GET, "/v1/namespaces/ns/functions/loud/stats", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{stats}");
    assert_eq!(
        (stats["calls"].as_u64(), stats["truncated"].as_bool()),
        (Some(CALLS as u64), Some(false))
    );
}

/// Each open log stream holds a connection: a namespace holds 32 at most
/// (429 past them, other namespaces unaffected), and a closed one gives its
/// place back.
#[tokio::test]
async fn a_namespace_holds_at_most_32_log_streams() {
    let server = Server::start(Backend::Sqlite).await;
    for ns in ["ns", "other"] {
        server
            .deploy(
                ns,
                "printer",
                json!({"runtime": "python3.11"}),
                &[("handler.py", PRINTER)],
            )
            .await;
    }
    let follow = |ns: &'static str| {
        server
            .request(
                Method::GET,
                &format!("/v1/namespaces/{ns}/functions/printer/logs?follow=true"),
                Some(&server.admin),
            )
            .send()
    };
    let mut open = Vec::new();
    for _ in 0..32 {
        let response = follow("ns").await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        open.push(response);
    }
    let refused = follow("ns").await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(refused.text().await.unwrap().contains("32 log streams open"));
    assert_eq!(follow("other").await.unwrap().status(), StatusCode::OK);
    drop(open.pop());
    eventually(Duration::from_secs(10), || async {
        match follow("ns").await.unwrap().status() {
            StatusCode::OK => Ok(()),
            status => Err(format!("a closed stream's place is not given back: {status}")),
        }
    })
    .await;
}

/// Deploys PRINTER as ns/printer and opens a live tail of it
/// (`logs?follow=true`) that accepts `accept`.
async fn tail_printer(server: &Server, accept: &str) -> reqwest::Response {
    server
        .deploy(
            "ns",
            "printer",
            json!({"runtime": "python3.11"}),
            &[("handler.py", PRINTER)],
        )
        .await;
    server
        .request(
            Method::GET,
            "/v1/namespaces/ns/functions/printer/logs?follow=true",
            Some(&server.admin),
        )
        .header("accept", accept)
        .send()
        .await
        .unwrap()
}

/// A live tail (`logs?follow=true`) open when the server is told to stop
/// ends at once, its body complete: it has nothing to drain, and it held
/// the shutdown for the whole grace period (`sless logs -f` or the
/// console's tail delayed every restart by it).
#[tokio::test]
async fn a_stop_ends_live_tails_at_once() {
    // A grace far past the 30 s the harness waits for an exit.
    let mut server = Server::start_with(Backend::Sqlite, &[("SLESS_SHUTDOWN_GRACE_SEC", "300")]).await;
    let mut tail = tail_printer(&server, "*/*").await;
    assert_eq!(tail.status(), StatusCode::OK);
    assert!(
        server.terminate_wait().success(),
        "the server exits before its grace ends"
    );
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while tail.chunk().await.expect("the tail ends cleanly, not cut").is_some() {}
    })
    .await;
    assert!(ended.is_ok(), "the tail has ended");
}

#[tokio::test]
async fn follow_receives_lines_as_they_happen() {
    let server = Server::start(Backend::Sqlite).await;
    let mut response = tail_printer(&server, "text/event-stream").await;
    // The handler subscribes before it answers: with the headers here,
    // every line from now on reaches the stream.
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    server
        .invoke(Method::POST, "/fn/ns/printer", r#"{"say": "live-line"}"#)
        .await;
    let mut received = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !received.contains("live-line") {
        let chunk = tokio::time::timeout_at(deadline, response.chunk())
            .await
            .expect("a line within 10 s");
        received.push_str(&String::from_utf8_lossy(&chunk.unwrap().expect("stream open")));
    }
    let event = received.lines().find(|l| l.contains("live-line")).unwrap();
    let event: Value = serde_json::from_str(event.strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(event["stream"], "stdout");
    assert_eq!(event["text"], "out: live-line");
}

// Multi-threaded: the proxy must keep running while the harness blocks on
// the server's start-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_database_fails_no_invocation() {
    let proxy = TcpProxy::start(5432).await;
    let db = PgDb::create().await;
    let url = db.url().replace(":5432/", &format!(":{}/", proxy.port));
    let server = Server::start_with(
        Backend::Sqlite,
        &[("SLESS_DATABASE_URL", &url), ("SLESS_INVOCATION_BUFFER", "20")],
    )
    .await;
    server
        .deploy(
            "ns",
            "printer",
            json!({"runtime": "python3.11"}),
            &[("handler.py", PRINTER)],
        )
        .await;
    server.invoke(Method::POST, "/fn/ns/printer", "{}").await;
    invocations(&server, "printer", 1).await;

    proxy.up.store(false, Ordering::SeqCst);
    // The proxy drops its connections within 50 ms of the cut: wait until
    // a new one through it is closed at once.
    eventually(Duration::from_secs(5), || async {
        use tokio::io::AsyncReadExt;
        let mut probe = tokio::net::TcpStream::connect(("127.0.0.1", proxy.port))
            .await
            .map_err(|e| e.to_string())?;
        match tokio::time::timeout(Duration::from_millis(500), probe.read(&mut [0u8; 1])).await {
            Ok(Ok(0)) | Ok(Err(_)) => Ok(()),
            other => Err(format!("the proxy still passes connections: {other:?}")),
        }
    })
    .await;
    let started = std::time::Instant::now();
    for i in 0..60 {
        let (status, _, text) = server
            .invoke(Method::POST, "/fn/ns/printer", &format!(r#"{{"say": "{i}"}}"#))
            .await;
        assert_eq!(status, StatusCode::OK, "invocation {i} with the database down: {text}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the outage did not slow invocations down"
    );
    let dropped = server.metric("sless_invocation_records_dropped_total").await.unwrap();
    // 60 calls: one batch held for retry, 15 buffered (a namespace alone
    // holds three quarters of the buffer), the rest dropped.
    assert!(
        dropped >= 15.0,
        "records beyond the buffer are dropped and counted: {dropped}"
    );

    // Read while nothing can be written, so what the writer does the moment
    // the database is back counts as resumed.
    let written_before = server.metric("sless_invocation_records_written_total").await.unwrap();
    proxy.up.store(true, Ordering::SeqCst);
    eventually(Duration::from_secs(20), || async {
        let written = server.metric("sless_invocation_records_written_total").await.unwrap();
        if written >= written_before + 15.0 {
            Ok(())
        } else {
            Err(format!("writes did not resume: {written}"))
        }
    })
    .await;
    invocations(&server, "printer", 16).await;
    drop(db);
}

#[tokio::test]
async fn retention_keeps_the_newest_records() {
    let mut server = Server::start(Backend::Sqlite).await;
    server
        .deploy(
            "ns",
            "printer",
            json!({"runtime": "python3.11"}),
            &[("handler.py", PRINTER)],
        )
        .await;
    for i in 0..5 {
        server
            .invoke(Method::POST, "/fn/ns/printer", &format!(r#"{{"say": "{i}"}}"#))
            .await;
    }
    let all = invocations(&server, "printer", 5).await;
    server.kill9();
    server.extra_env.push(("SLESS_INVOCATION_KEEP".into(), "3".into()));
    server.spawn();
    let kept = eventually(Duration::from_secs(10), || async {
        let (_, page) = server
            .call(Method::GET, "/v1/namespaces/ns/functions/printer/invocations", None)
            .await;
        let kept = page["items"].as_array().unwrap().clone();
        if kept.len() == 3 {
            Ok(kept)
        } else {
            Err(format!("retention did not prune: {} records", kept.len()))
        }
    })
    .await;
    assert_eq!(kept[0]["id"], all[0]["id"], "the newest are kept");
}

/// What a handler prints as it loads (its import, Lambda's INIT) starts the
/// output of the first call its instance serves, so it is in the
/// function's log and that call's record; the next call's is its own.
#[tokio::test]
async fn what_a_handler_prints_as_it_loads_starts_its_first_call_s_output() {
    let server = Server::start(Backend::Sqlite).await;
    let py =
        b"print('connecting at import')\n\ndef handle(event, context):\n    print('in call', event)\n    return 'ok'\n";
    let js = b"console.log('connecting at import');\nexports.handle = (event) => { console.log('in call', event); return 'ok'; };\n";
    for (name, runtime, file, code) in [
        ("py", "python3.11", "handler.py", &py[..]),
        ("js", "nodejs20", "handler.js", &js[..]),
    ] {
        server
            .deploy("ns", name, json!({"runtime": runtime}), &[(file, code)])
            .await;
        for n in [1, 2] {
            let (status, _, text) = server
                .invoke(Method::POST, &format!("/fn/ns/{name}"), &n.to_string())
                .await;
            assert_eq!(status, StatusCode::OK, "{text}");
        }
        let records = server.records_until("ns", name, |records| records.len() == 2).await;
        let printed = |record: &Value| -> String {
            (record["logs"].as_array().unwrap().iter())
                .map(|chunk| chunk["text"].as_str().unwrap().to_string())
                .collect()
        };
        // Newest first.
        assert_eq!(
            printed(&records[1]),
            "connecting at import\nin call 1\n",
            "{name}: {}",
            records[1]
        );
        assert_eq!(printed(&records[0]), "in call 2\n", "{name}: {}", records[0]);
        let path = format!("/v1/namespaces/ns/functions/{name}/logs?tail=10");
        let response = server
            .request(Method::GET, &path, Some(&server.admin))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let log = response.text().await.unwrap();
        assert!(log.contains("connecting at import"), "{name}: {log}");
    }
}

/// A server whose log cannot be written (stderr on `/dev/full`, as on a
/// full disk) serves on: the lines are lost, not the server. Writing the
/// log used to panic the task that logged (tracing's own report of the
/// failed write is an `eprintln!`), and with the accept loop's task gone
/// every later request hung.
#[tokio::test]
async fn a_log_that_cannot_be_written_stops_nothing() {
    let mut server = Server::start_with(Backend::Sqlite, &[]).await;
    server.kill9();
    server.log_file = Some("/dev/full".into());
    server.extra_env.push(("SLESS_LOG".into(), "debug".into()));
    server.spawn();
    server
        .deploy(
            "ns",
            "printer",
            json!({"runtime": "python3.11"}),
            &[("handler.py", PRINTER)],
        )
        .await;
    for i in 0..20 {
        let (status, _, body) = server.invoke(Method::POST, "/fn/ns/printer", "{}").await;
        assert_eq!(status, StatusCode::OK, "call {i}: {body}");
        let (status, _, _) = server.invoke(Method::GET, "/fn/ns/missing", "").await;
        assert_eq!(status, StatusCode::NOT_FOUND, "call {i}");
    }
    let (status, body) = server.call(Method::GET, "/healthz", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}
