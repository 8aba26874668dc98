//! Upgrades and downgrades of the data: what an older server built serves
//! after the upgrade as the versions this one records; a database a newer
//! sless migrated is refused with a message rather than read by a server
//! that does not know what is in it.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::harness::{Backend, Server};

crate::both_stores!(
    a_function_built_before_versions_is_version_1_after_the_upgrade,
    a_database_a_newer_sless_migrated_is_refused
);

const HELLO: &[u8] = b"def handle(event, context):\n    return {'hello': context['version']}\n";

/// A database left by a server from before versions (no version tables:
/// their migrations apply at the next start) with a built function: it
/// serves without a new upload, its build is version 1 (by number, by an
/// alias), and that version's size counts from this start on.
async fn a_function_built_before_versions_is_version_1_after_the_upgrade(backend: Backend) {
    let mut server = Server::start(backend).await;
    server
        .deploy("ns", "old", json!({"runtime": "python3.11"}), &[("handler.py", HELLO)])
        .await;
    server.kill9();
    let downgrade = match backend {
        Backend::Sqlite => "DELETE FROM schema_migrations WHERE version IN (5, 10);",
        Backend::Postgres => "DELETE FROM schema_migrations WHERE version IN (6, 11, 13);",
    };
    server
        .run_sql(&format!(
            "DROP TABLE function_versions; DROP TABLE function_aliases; {downgrade}"
        ))
        .await;
    server.spawn();

    let (status, _, body) = server.invoke(Method::POST, "/fn/ns/old", "{}").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, r#"{"hello":1}"#));
    let (status, version) = server
        .call(Method::GET, "/v1/namespaces/ns/functions/old/versions/1", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{version}");
    // Measured at this start: the storage quota counts it.
    for field in ["artifact_bytes", "archive_bytes"] {
        assert!(version[field].as_u64() > Some(0), "{field}: {version}");
    }
    let (status, alias) = server
        .call(
            Method::PUT,
            "/v1/namespaces/ns/functions/old/aliases/live",
            Some(json!({"version": 1})),
        )
        .await;
    assert!(status.is_success(), "{alias}");
    for target in ["old@1", "old@live"] {
        let (status, _, body) = server.invoke(Method::POST, &format!("/fn/ns/{target}"), "{}").await;
        assert_eq!(status, StatusCode::OK, "{target}: {body}");
        assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["hello"], 1, "{body}");
    }
}

/// A newer sless's migration recorded in the database (schema version
/// 1000): this one stops at start and says why, and the data stays as it
/// was (once the marker is gone, it serves again).
async fn a_database_a_newer_sless_migrated_is_refused(backend: Backend) {
    let mut server = Server::start(backend).await;
    let (status, _) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "kept", "runtime": "python3.11"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    server.kill9();
    server
        .run_sql("INSERT INTO schema_migrations (version, applied_at) VALUES (1000, '2030-01-01T00:00:00.000000Z')")
        .await;
    let stderr = server.refused_start();
    assert!(
        stderr.contains("migrated by a newer sless (schema version 1000;"),
        "{stderr}"
    );
    server
        .run_sql("DELETE FROM schema_migrations WHERE version = 1000")
        .await;
    server.spawn();
    let (status, function) = server.call(Method::GET, "/v1/namespaces/ns/functions/kept", None).await;
    assert_eq!(status, StatusCode::OK, "{function}");
}
