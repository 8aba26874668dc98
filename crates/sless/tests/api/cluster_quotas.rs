//! Quotas across replicas on one PostgreSQL: a namespace's quota turn is a
//! lock in the database, so creates sent to different replicas at once pass
//! a quota no more than creates sent to one; the lock is let go when the
//! turn ends, and one namespace's turn never waits for another's.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sless_server::cluster::turns::{lock_key, QUOTA_LOCK_CLASS};
use sqlx::Connection;

use super::cluster::replicas;
use super::harness::{eventually, Server};

/// Twenty creates at once in `ns`, alternating between the replicas; the
/// answers, each checked to be a 201 or a 403 naming `setting`.
async fn create_at_once(servers: &[Server], ns: &str, kind: &str, body: fn(usize) -> Value, setting: &str) -> usize {
    let path = format!("/v1/namespaces/{ns}/{kind}");
    let calls = (0..20).map(|n| servers[n % servers.len()].call(Method::POST, &path, Some(body(n))));
    let answers = futures::future::join_all(calls).await;
    for (status, body) in &answers {
        let refused = *status == StatusCode::FORBIDDEN && body["error"].as_str().unwrap_or("").contains(setting);
        assert!(*status == StatusCode::CREATED || refused, "{status}: {body}");
    }
    answers
        .iter()
        .filter(|(status, _)| *status == StatusCode::CREATED)
        .count()
}

async fn count(server: &Server, ns: &str, kind: &str) -> usize {
    let (status, list) = server
        .call(Method::GET, &format!("/v1/namespaces/{ns}/{kind}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    list["items"].as_array().unwrap().len()
}

#[tokio::test]
async fn creates_sent_to_two_replicas_at_once_cannot_pass_a_quota_together() {
    let cluster = replicas(2, &[("SLESS_NS_MAX_FUNCTIONS", "3"), ("SLESS_NS_MAX_TRIGGERS", "3")]).await;
    let servers = &cluster.servers;
    // Several namespaces at once: each a race the quota must win.
    let namespaces = ["a", "b", "c", "d"];
    let created = namespaces.map(|ns| {
        create_at_once(
            servers,
            ns,
            "functions",
            |n| json!({"name": format!("f{n}"), "runtime": "python3.11"}),
            "SLESS_NS_MAX_FUNCTIONS",
        )
    });
    assert_eq!(
        futures::future::join_all(created).await,
        [3; 4],
        "SLESS_NS_MAX_FUNCTIONS is 3"
    );
    for ns in namespaces {
        for server in servers {
            assert_eq!(count(server, ns, "functions").await, 3, "functions in {ns}");
        }
    }

    let (status, body) = servers[0]
        .call(
            Method::POST,
            "/v1/namespaces/t/functions",
            Some(json!({"name": "target", "runtime": "python3.11"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let triggers = create_at_once(
        servers,
        "t",
        "triggers",
        |n| json!({"name": format!("t{n}"), "type": "cron", "function": "target", "schedule": "0 0 1 1 *"}),
        "SLESS_NS_MAX_TRIGGERS",
    )
    .await;
    assert_eq!(triggers, 3, "SLESS_NS_MAX_TRIGGERS is 3");
    assert_eq!(count(&servers[1], "t", "triggers").await, 3);
}

/// Waits until no quota lock is held in the database, of any namespace.
async fn no_quota_lock_left(db: &sqlx::PgPool) {
    eventually(Duration::from_secs(5), || async move {
        match quota_locks(db, true).await {
            0 => Ok(()),
            n => Err(format!("{n} quota locks still held")),
        }
    })
    .await
}

/// Quota locks held (`granted`) or waited for in the database.
async fn quota_locks(db: &sqlx::PgPool, granted: bool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted = $2 \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND classid::bigint = $1",
    )
    .bind(i64::from(QUOTA_LOCK_CLASS))
    .bind(granted)
    .fetch_one(db)
    .await
    .unwrap()
}

async fn create_function(server: &Server, ns: &str, name: &str) -> (StatusCode, Value) {
    let body = json!({"name": name, "runtime": "python3.11"});
    server
        .call(Method::POST, &format!("/v1/namespaces/{ns}/functions"), Some(body))
        .await
}

#[tokio::test]
async fn a_quota_turn_lets_its_lock_go_when_it_ends_and_waits_only_for_its_own_namespace() {
    let cluster = replicas(2, &[("SLESS_NS_MAX_FUNCTIONS", "2")]).await;
    let (a, b) = (&cluster.servers[0], &cluster.servers[1]);
    let db = sqlx::PgPool::connect(&cluster.db.url()).await.unwrap();
    // The session that stands for another replica's turn.
    let mut other = sqlx::PgConnection::connect(&cluster.db.url()).await.unwrap();

    // Turns that end in a change, then in a refusal: each lets its lock go,
    // and the next, on the other replica, takes it at once.
    for (server, name) in [(a, "f1"), (b, "f2")] {
        let (status, body) = create_function(server, "ns", name).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    for server in [a, b] {
        let (status, body) = create_function(server, "ns", "f3").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    }
    no_quota_lock_left(&db).await;

    // Another replica's turn holds `held`'s creates back, and no other
    // namespace's.
    let (class, hash) = lock_key("held");
    sqlx::query("SELECT pg_advisory_lock($1, $2)")
        .bind(class)
        .bind(hash)
        .execute(&mut other)
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let url = a.url.clone();
        async move {
            reqwest::Client::new()
                .post(format!("{url}/v1/namespaces/held/functions"))
                .bearer_auth(super::harness::ADMIN)
                .json(&json!({"name": "f", "runtime": "python3.11"}))
                .send()
                .await
                .unwrap()
                .status()
        }
    });
    eventually(Duration::from_secs(5), || async {
        match quota_locks(&db, false).await {
            1 => Ok(()),
            n => Err(format!("{n} turns wait for a quota lock")),
        }
    })
    .await;
    for (server, ns) in [(a, "free"), (b, "free2")] {
        let (status, body) = tokio::time::timeout(Duration::from_secs(5), create_function(server, ns, "f"))
            .await
            .expect("another namespace's turn does not wait");
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    assert!(!waiting.is_finished(), "held's create waits for the lock");
    sqlx::query("SELECT pg_advisory_unlock($1, $2)")
        .bind(class)
        .bind(hash)
        .execute(&mut other)
        .await
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("held's create goes on once the lock is let go")
        .unwrap();
    assert_eq!(status, StatusCode::CREATED);
    let (status, body) = create_function(b, "held", "g").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    no_quota_lock_left(&db).await;
}
