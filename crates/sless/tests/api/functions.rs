//! Function CRUD and code upload over HTTP.

use reqwest::{Method, StatusCode};
use serde_json::json;

use super::harness::{hello_zip, Backend, Server};

crate::both_stores!(
    create_get_list_patch_delete,
    duplicate_is_409,
    bad_names_and_fields_are_400,
    upload_stores_hash_and_builds,
    unknown_function_is_404,
);

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
