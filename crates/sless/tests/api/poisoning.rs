//! Store poisoning: what a handler or a client produces is bounded before it
//! is stored, and a stored record that does not read back (written by an
//! older server, or damaged) stops neither the start, nor a list, nor its
//! own deletion.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::harness::{Backend, Server};

/// Returns a list nested `event.depth` levels deep, or answers with `event.status`.
const NESTER: &[u8] = br#"
def handle(event, context):
    if "status" in event:
        return {"statusCode": event["status"], "body": "odd"}
    value = 1
    for _ in range(event["depth"]):
        value = [value]
    return value
"#;

/// A server on `backend` with NESTER deployed as `ns/nester`.
async fn with_nester(backend: Backend) -> Server {
    let server = Server::start(backend).await;
    server
        .deploy(
            "ns",
            "nester",
            json!({"runtime": "python3.11"}),
            &[("handler.py", NESTER)],
        )
        .await;
    server
}

async fn run_job(server: &Server, name: &str, event: Value) -> Value {
    let (status, job) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/jobs",
            Some(json!({"name": name, "function": "nester", "event": event, "run_id": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    server
        .wait_for(&format!("/v1/namespaces/ns/jobs/{name}"), 60, |j| {
            matches!(j["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
        })
        .await
}

crate::both_stores!(
    a_deep_job_result_is_refused_not_stored,
    an_unreadable_record_is_skipped_reported_and_deletable,
    only_real_statuses_reach_the_caller_and_the_metrics,
);

async fn a_deep_job_result_is_refused_not_stored(backend: Backend) {
    let mut server = with_nester(backend).await;
    // 127 levels parse, and would be stored one level deeper than the parser reads back.
    let deep = run_job(&server, "deep", json!({"depth": 127})).await;
    assert_eq!(deep["status"]["phase"], "Failed", "{deep}");
    let error = deep["status"]["error"].as_str().unwrap();
    assert!(error.contains("nested"), "{error}");
    assert!(deep["status"]["result"].is_null());
    let ok = run_job(&server, "ok", json!({"depth": 64})).await;
    assert_eq!(ok["status"]["phase"], "Succeeded", "{ok}");

    // A client's deep event is a 400 naming the problem.
    let mut event = json!(1);
    for _ in 0..100 {
        event = json!([event]);
    }
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/jobs",
            Some(json!({"name": "deep-event", "function": "nester", "event": event})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["error"].as_str().unwrap().contains("nested"), "{body}");

    // Everything reads back, also after a restart, and deletes.
    server.restart();
    let (status, list) = server.call(Method::GET, "/v1/namespaces/ns/jobs", None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["items"].as_array().unwrap().len(), 2, "{list}");
    let (status, _) = server.call(Method::DELETE, "/v1/namespaces/ns/jobs/deep", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}

async fn an_unreadable_record_is_skipped_reported_and_deletable(backend: Backend) {
    let mut server = with_nester(backend).await;
    let good = run_job(&server, "good", json!({"depth": 1})).await;
    assert_eq!(good["status"]["phase"], "Succeeded", "{good}");
    // What an older server could store: a status nested past the parser's
    // limit, and a trigger spec no current type reads.
    server.kill9();
    let deep_status = format!(
        "{{\"phase\":\"Succeeded\",\"run_id\":1,\"result\":{}1{}}}",
        "[".repeat(127),
        "]".repeat(127)
    );
    insert_raw(
        &server,
        "job",
        "poisoned",
        r#"{"function":"nester","event":{},"run_id":1}"#,
        &deep_status,
    )
    .await;
    insert_raw(&server, "trigger", "strange", r#"{"type":"carrier-pigeon"}"#, "{}").await;
    insert_raw(&server, "function", "broken", r#"{"runtime":"cobol"}"#, "{}").await;
    server.spawn();

    // The server started; lists leave the bad records out.
    let names = |list: &Value| -> Vec<String> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["name"].as_str().unwrap().to_string())
            .collect()
    };
    let (status, jobs) = server.call(Method::GET, "/v1/namespaces/ns/jobs", None).await;
    assert_eq!(status, StatusCode::OK, "{jobs}");
    assert_eq!(names(&jobs), ["good"]);
    let (status, triggers) = server.call(Method::GET, "/v1/namespaces/ns/triggers", None).await;
    assert_eq!(status, StatusCode::OK, "{triggers}");
    assert!(names(&triggers).is_empty());
    let (status, functions) = server.call(Method::GET, "/v1/namespaces/ns/functions", None).await;
    assert_eq!(status, StatusCode::OK, "{functions}");
    assert_eq!(names(&functions), ["nester"]);
    // The good function still serves.
    let (status, _, _) = server.invoke(Method::POST, "/fn/ns/nester", r#"{"depth": 1}"#).await;
    assert_eq!(status, StatusCode::OK);

    // Reading one says what is wrong and what to do.
    for path in ["jobs/poisoned", "triggers/strange", "functions/broken"] {
        let (status, body) = server
            .call(Method::GET, &format!("/v1/namespaces/ns/{path}"), None)
            .await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{path}: {body}");
        let error = body["error"].as_str().unwrap();
        assert!(
            error.contains("cannot be read") && error.contains("delete it"),
            "{path}: {error}"
        );
        let (status, body) = server
            .call(Method::DELETE, &format!("/v1/namespaces/ns/{path}"), None)
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{path}: {body}");
        let (status, _) = server
            .call(Method::GET, &format!("/v1/namespaces/ns/{path}"), None)
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
    }
}

/// Writes a resource row straight into the server's database (stopped).
async fn insert_raw(server: &Server, kind: &str, name: &str, spec: &str, status: &str) {
    use sqlx::Connection;
    let now = "2026-01-01T00:00:00.000000Z";
    let sql = "INSERT INTO resources (kind, namespace, name, spec, status, created_at, updated_at) \
               VALUES ($1, 'ns', $2, $3, $4, $5, $5)";
    match &server.db {
        Some(db) => {
            let mut conn = sqlx::PgConnection::connect(&db.url()).await.unwrap();
            let query = sqlx::query(sql).bind(kind).bind(name).bind(spec).bind(status).bind(now);
            query.execute(&mut conn).await.unwrap();
        }
        None => {
            let url = format!("sqlite://{}", server.data_dir.path().join("sless.db").display());
            let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
            let query = sqlx::query(sql).bind(kind).bind(name).bind(spec).bind(status).bind(now);
            query.execute(&mut conn).await.unwrap();
        }
    }
}

async fn only_real_statuses_reach_the_caller_and_the_metrics(backend: Backend) {
    let server = with_nester(backend).await;
    for code in [101, 102, 199, 600, 999] {
        let (status, _, body) = server
            .invoke(Method::POST, "/fn/ns/nester", &json!({"status": code}).to_string())
            .await;
        assert!(
            status == StatusCode::BAD_GATEWAY || status == StatusCode::INTERNAL_SERVER_ERROR,
            "{code}: {status} {body}"
        );
        assert!(body.contains("status") || body.contains("statusCode"), "{code}: {body}");
        // Either answer says which call it was, as every gateway error does.
        let answer: Value = serde_json::from_str(&body).unwrap();
        assert!(
            answer["request_id"].as_str().is_some_and(|id| !id.is_empty()),
            "{code}: {body}"
        );
    }
    let (status, _, _) = server.invoke(Method::POST, "/fn/ns/nester", r#"{"status": 299}"#).await;
    assert_eq!(status.as_u16(), 299);
    // A 101 is recorded as the 502 the caller got, with the reason.
    let records = server
        .wait_for("/v1/namespaces/ns/functions/nester/invocations", 10, |page| {
            page["items"].as_array().is_some_and(|items| items.len() == 6)
        })
        .await;
    let statuses: Vec<&str> = records["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert!(
        statuses.iter().all(|s| ["299", "500", "502"].contains(s)),
        "{statuses:?}"
    );
    let first = &records["items"].as_array().unwrap()[5];
    assert_eq!(first["status"], "502", "{first}");
    assert!(first["error"].as_str().unwrap().contains("status 101"), "{first}");
    for label in ["101", "102", "199", "600", "999"] {
        let series = format!(
            "sless_invocations_total{{namespace=\"ns\",function=\"nester\",trigger=\"http\",status=\"{label}\"}}"
        );
        assert_eq!(server.metric(&series).await, None, "{label} reached the metrics");
    }
}
