//! Function CRUD and code upload over HTTP.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::harness::{hello_zip, Backend, Server};

crate::both_stores!(
    create_get_list_patch_delete,
    duplicate_is_409,
    bad_names_and_fields_are_400,
    upload_stores_hash_and_builds,
    unknown_function_is_404,
    patches_at_once_keep_each_others_fields,
);

/// Patches sent at once, each setting another variable (or a trigger's
/// event key), all stay: each is read and written in the namespace's turn
/// (each used to merge into what it read, and the last write lost the
/// others).
async fn patches_at_once_keep_each_others_fields(backend: Backend) {
    let server = Server::start(backend).await;
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "f", "runtime": "python3.11"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let patches = (0..8).map(|n| {
        server.call(
            Method::PATCH,
            "/v1/namespaces/ns/functions/f",
            Some(json!({"env": {format!("VAR_{n}"): n.to_string()}})),
        )
    });
    for (status, body) in futures::future::join_all(patches).await {
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (_, function) = server.call(Method::GET, "/v1/namespaces/ns/functions/f", None).await;
    let env = function["env"].as_object().unwrap();
    assert_eq!(env.len(), 8, "{function}");

    // A trigger's too.
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/triggers",
            Some(json!({"name": "t", "type": "cron", "function": "f", "schedule": "0 0 1 1 *", "event": {}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let patches = (0..8).map(|n| {
        server.call(
            Method::PATCH,
            "/v1/namespaces/ns/triggers/t",
            Some(json!({"event": {format!("key_{n}"): n}})),
        )
    });
    for (status, body) in futures::future::join_all(patches).await {
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (_, trigger) = server.call(Method::GET, "/v1/namespaces/ns/triggers/t", None).await;
    assert_eq!(trigger["event"].as_object().unwrap().len(), 8, "{trigger}");
}

async fn create_get_list_patch_delete(backend: Backend) {
    let server = Server::start(backend).await;
    let (status, created) = server
        .call(
            Method::POST,
            "/v1/namespaces/team-a/functions",
            Some(json!({"name": "hello", "runtime": "python3.11", "env": {"GREETING": "hi"}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["name"], "hello");
    assert_eq!(created["namespace"], "team-a");
    assert_eq!(created["runtime"], "python3.11");
    assert_eq!(created["entrypoint"], "handler.handle", "default entrypoint");
    assert_eq!(created["env"]["GREETING"], "hi");
    assert_eq!(created["status"]["phase"], "Pending");
    assert_eq!(created["status"]["version"], 0);
    assert_eq!(
        created["status"]["url"],
        format!("{}/fn/team-a/hello", server.url),
        "url defaults to the listen address"
    );

    let (status, got) = server
        .call(Method::GET, "/v1/namespaces/team-a/functions/hello", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got, created);

    server
        .call(
            Method::POST,
            "/v1/namespaces/team-a/functions",
            Some(json!({"name": "another", "runtime": "nodejs20"})),
        )
        .await;
    server
        .call(
            Method::POST,
            "/v1/namespaces/team-b/functions",
            Some(json!({"name": "other-ns", "runtime": "nodejs20"})),
        )
        .await;
    let (status, list) = server.call(Method::GET, "/v1/namespaces/team-a/functions", None).await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<_> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["another", "hello"], "listed by name, own namespace only");

    let (status, patched) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/team-a/functions/hello",
            Some(json!({"memory_mb": 512, "env": {"EXTRA": "1"}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    assert_eq!(patched["memory_mb"], 512);
    assert_eq!(patched["env"], json!({"GREETING": "hi", "EXTRA": "1"}), "env is merged");
    assert_eq!(patched["timeout_sec"], created["timeout_sec"], "untouched fields kept");

    let (status, reset) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/team-a/functions/hello",
            Some(json!({"memory_mb": null})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(reset["memory_mb"], 256, "null resets to the default");

    let (status, body) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/team-a/functions/hello",
            Some(json!({"runtime": "nodejs20"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["error"].as_str().unwrap().contains("runtime"), "{body}");

    let (status, _) = server
        .call(Method::DELETE, "/v1/namespaces/team-a/functions/hello", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = server
        .call(Method::GET, "/v1/namespaces/team-a/functions/hello", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body["error"].as_str().unwrap().contains("hello"), "{body}");
    let (status, _) = server
        .call(Method::DELETE, "/v1/namespaces/team-a/functions/hello", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

async fn duplicate_is_409(backend: Backend) {
    let server = Server::start(backend).await;
    let body = json!({"name": "dup", "runtime": "python3.11"});
    let (status, _) = server
        .call(Method::POST, "/v1/namespaces/ns/functions", Some(body.clone()))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, err) = server
        .call(Method::POST, "/v1/namespaces/ns/functions", Some(body))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(err["error"].as_str().unwrap().contains("already exists"), "{err}");
}

async fn bad_names_and_fields_are_400(backend: Backend) {
    let server = Server::start(backend).await;
    let cases = [
        (
            "/v1/namespaces/ns/functions",
            json!({"name": "Bad_Name", "runtime": "python3.11"}),
            "Bad_Name",
        ),
        (
            "/v1/namespaces/ns/functions",
            json!({"name": "-x", "runtime": "python3.11"}),
            "DNS label",
        ),
        (
            "/v1/namespaces/NS/functions",
            json!({"name": "ok", "runtime": "python3.11"}),
            "namespace",
        ),
        (
            "/v1/namespaces/ns/functions",
            json!({"name": "ok", "runtime": "python3.11", "colour": "red"}),
            "colour",
        ),
        (
            "/v1/namespaces/ns/functions",
            json!({"name": "ok", "runtime": "ruby"}),
            "ruby",
        ),
        ("/v1/namespaces/ns/functions", json!({"name": "ok"}), "runtime"),
        ("/v1/namespaces/ns/functions", json!({"runtime": "python3.11"}), "name"),
        (
            "/v1/namespaces/ns/functions",
            json!({"name": "ok", "runtime": "python3.11", "memory_mb": 1}),
            "memory_mb",
        ),
        (
            "/v1/namespaces/ns/functions",
            json!({"name": "ok", "runtime": "python3.11", "timeout_sec": "x"}),
            "timeout_sec",
        ),
        (
            "/v1/namespaces/ns/functions",
            json!({"name": "ok", "runtime": "python3.11", "status": {}}),
            "read-only",
        ),
        (
            "/v1/namespaces/ns/functions",
            json!({"name": "ok", "runtime": "python3.11", "namespace": "other"}),
            "namespace",
        ),
        (
            "/v1/namespaces/ns/functions",
            json!({"name": "ok", "runtime": "python3.11", "entrypoint": "nodot"}),
            "entrypoint",
        ),
        (
            "/v1/namespaces/ns/functions",
            json!({"name": "ok", "runtime": "python3.11", "min_instances": 9, "max_instances": 2}),
            "min_instances",
        ),
        // Every replica reads every spec whenever the store changes.
        (
            "/v1/namespaces/ns/functions",
            json!({"name": "ok", "runtime": "python3.11", "env": {"A": "x".repeat(40_000), "B": "y".repeat(30_000)}}),
            "env holds 70002 bytes of names and values, more than the 65536 a function may",
        ),
        (
            "/v1/namespaces/ns/functions",
            json!({"name": "ok", "runtime": "python3.11", "entrypoint": format!("{}.handle", "m".repeat(300))}),
            "entrypoint must be at most 256 characters, got 307",
        ),
        (
            "/v1/namespaces/ns/functions",
            json!({"name": "ok", "runtime": "python3.11", "async": {"on_failure": {"type": "amqp", "queue": "q", "broker_url": format!("amqp://u:{}@127.0.0.1:5672/%2f", "p".repeat(3000))}}}),
            "broker_url must be at most 2048 characters",
        ),
    ];
    for (path, body, needle) in cases {
        let (status, err) = server.call(Method::POST, path, Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body} -> {err}");
        let message = err["error"].as_str().unwrap();
        assert!(
            message.contains(needle),
            "{body}: {message:?} should mention {needle:?}"
        );
    }
    // Not JSON at all, and JSON that is not an object.
    let response = server
        .request(Method::POST, "/v1/namespaces/ns/functions", Some(&server.admin))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    let (status, err) = super::harness::read(response).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(err["error"].as_str().unwrap().contains("not valid JSON"), "{err}");
    // Too deep for the parser: the same message as one the depth check refuses.
    for depth in [70, 200] {
        let deep = format!("{{\"name\": {}1{}}}", "[".repeat(depth), "]".repeat(depth));
        let response = server
            .request(Method::POST, "/v1/namespaces/ns/functions", Some(&server.admin))
            .header("content-type", "application/json")
            .body(deep)
            .send()
            .await
            .unwrap();
        let (status, err) = super::harness::read(response).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let message = err["error"].as_str().unwrap();
        assert!(
            message.contains("levels deep; at most 64 are kept"),
            "{depth}: {message}"
        );
    }
    let (status, _) = server
        .call(Method::POST, "/v1/namespaces/ns/functions", Some(json!([1, 2])))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Nothing was created by any of those.
    let (_, list) = server.call(Method::GET, "/v1/namespaces/ns/functions", None).await;
    assert_eq!(list["items"], json!([]));

    // A patch with an unknown field changes nothing.
    server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "ok", "runtime": "python3.11"})),
        )
        .await;
    let (status, err) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/functions/ok",
            Some(json!({"memory_mb": 512, "bogus": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(err["error"].as_str().unwrap().contains("bogus"), "{err}");
    let (_, got) = server.call(Method::GET, "/v1/namespaces/ns/functions/ok", None).await;
    assert_eq!(got["memory_mb"], 256);
}

async fn upload_stores_hash_and_builds(backend: Backend) {
    use sha2::Digest;
    let server = Server::start(backend).await;
    server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "up", "runtime": "python3.11"})),
        )
        .await;
    let zip = hello_zip();
    let (status, body) = server.upload("ns", "up", zip.clone()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let expected = hex::encode(sha2::Sha256::digest(&zip));
    assert_eq!(body["status"]["code_hash"], expected);
    assert_eq!(body["status"]["phase"], "Building");
    // The archive is in the code store under its hash.
    let stored = server
        .data_dir
        .path()
        .join(format!("blobs/archives/ns/up/{expected}.zip"));
    assert_eq!(std::fs::read(&stored).expect("archive stored"), zip);

    let (status, body) = server.upload("ns", "missing", hello_zip()).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

async fn unknown_function_is_404(backend: Backend) {
    let server = Server::start(backend).await;
    let (status, body) = server.call_as(None, Method::GET, "/fn/ns/nothing", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "pending", "runtime": "python3.11"})),
        )
        .await;
    let response = server
        .request(Method::POST, "/fn/ns/pending", None)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("retry-after"));
}

/// What a tenant may ask of the server is bounded by its configuration
/// (`SLESS_MAX_*`): a 400 naming the field, on create and on patch.
#[tokio::test]
async fn spec_values_are_bounded_by_the_servers_maxima() {
    let server = Server::start_with(
        Backend::Sqlite,
        &[
            ("SLESS_MAX_MEMORY_MB", "512"),
            ("SLESS_MAX_INSTANCES", "4"),
            ("SLESS_MAX_TIMEOUT_SEC", "60"),
            ("SLESS_MAX_BUILD_TIMEOUT_SEC", "400"),
            ("SLESS_MAX_TMP_MB", "100"),
        ],
    )
    .await;
    let token = server.token_for(&["ns"]).await;
    let cases = [
        (json!({"replicas": 4294967295u32}), "replicas"),
        (json!({"replicas": 30, "max_instances": 1}), "replicas"),
        (json!({"min_instances": 1000}), "min_instances"),
        (json!({"max_instances": 5}), "max_instances"),
        (json!({"memory_mb": 16384}), "memory_mb"),
        (json!({"memory_mb": 513}), "memory_mb"),
        (json!({"timeout_sec": 61}), "timeout_sec"),
        (json!({"build_timeout_sec": 401}), "build_timeout_sec"),
        (json!({"tmp_mb": 101}), "tmp_mb"),
        (json!({"tmp_mb": 0}), "tmp_mb"),
        (json!({"network": "host"}), "network"),
        (json!({"expose_errors": "yes"}), "expose_errors"),
    ];
    for (extra, field) in &cases {
        let mut body = json!({"name": "bounded", "runtime": "python3.11"});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let (status, err) = server
            .call_as(
                Some(&token),
                Method::POST,
                "/v1/namespaces/ns/functions",
                Some(body.clone()),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body} -> {err}");
        assert!(err["error"].as_str().unwrap().contains(field), "{body}: {err}");
        if err["field"] != Value::Null {
            assert_eq!(err["field"], *field, "{body}: {err}");
        }
    }
    let at_the_limits = json!({"name": "bounded", "runtime": "python3.11", "memory_mb": 512, "max_instances": 4,
        "min_instances": 4, "replicas": 4, "timeout_sec": 60, "build_timeout_sec": 400, "tmp_mb": 100,
        "network": "none", "expose_errors": true});
    let (status, created) = server
        .call_as(
            Some(&token),
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(at_the_limits),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(
        (created["network"].as_str(), created["tmp_mb"].as_u64()),
        (Some("none"), Some(100))
    );
    // The same bounds on a patch.
    for (extra, field) in &cases {
        let (status, err) = server
            .call_as(
                Some(&token),
                Method::PATCH,
                "/v1/namespaces/ns/functions/bounded",
                Some(extra.clone()),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{extra} -> {err}");
        assert!(err["error"].as_str().unwrap().contains(field), "{extra}: {err}");
    }
}
