//! Versions and aliases over real HTTP: every build is a version that can
//! be listed, fetched and called by number; an alias points at a version
//! or splits calls between two, moves atomically (rollback is moving it
//! back) and keeps its versions serving while `$latest` moves on; old
//! versions beyond `SLESS_KEEP_VERSIONS` go unless an alias holds them,
//! and so does a version deleted by hand; a namespace's versions keep no
//! more than its storage quota;
//! a version that finds no room to start is refused, saying why; and an
//! alias moved through one replica routes on the other.

use futures::StreamExt;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::harness::{eventually, Backend, PgDb, S3Server, Server};

/// Answers `{"v": v}`, after `event["sleep"]` seconds when the call asks.
fn code(v: u32) -> Vec<u8> {
    format!(
        "import time\n\ndef handle(event, context):\n    time.sleep(event.get('sleep', 0))\n    return {{'v': {v}, 'version': context['version']}}\n"
    )
    .into_bytes()
}

/// Deploys the handler answering `{"v": v}`; returns the uploaded code hash.
async fn deploy(server: &Server, name: &str, v: u32) -> String {
    let function = server
        .deploy(
            "ns",
            name,
            json!({"runtime": "python3.11"}),
            &[("handler.py", &code(v))],
        )
        .await;
    function["status"]["built_hash"].as_str().unwrap().to_string()
}

/// The `v` a call of `/fn/ns/{target}` answers with; panics on anything but 200.
async fn v_of(server: &Server, target: &str) -> u64 {
    let (status, _, body) = server.invoke(Method::POST, &format!("/fn/ns/{target}"), "{}").await;
    assert_eq!(status, StatusCode::OK, "{target}: {body}");
    serde_json::from_str::<Value>(&body).unwrap()["v"].as_u64().unwrap()
}

const MANY_INSTANCES: &str = "sless_instances{namespace=\"ns\",function=\"many\"}";

/// A server with versions 1 to `n` of `many`, `$latest` (n) serving the
/// instance its deploy checked; versions not called stay up for 10 minutes.
async fn many_versions(n: u32) -> Server {
    let server = Server::start_with(Backend::Sqlite, &[("SLESS_IDLE_TIMEOUT_SEC", "600")]).await;
    for v in 1..=n {
        deploy(&server, "many", v).await;
    }
    server.wait_metric(MANY_INSTANCES, 1.0, 30).await;
    server
}

/// Once the retired versions have drained, `$latest` and two versions
/// called by number serve, and no more.
async fn two_by_number_serve(server: &Server) {
    server.wait_metric(MANY_INSTANCES, 3.0, 30).await;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(
        server.metric(MANY_INSTANCES).await,
        Some(3.0),
        "more than two versions called by number serve"
    );
}

/// Anyone may call any kept version by number, and each serves up to its
/// `max_instances`, while the namespace's quotas count the function once: a
/// function serves two versions called by number at most, the one called
/// least lately draining to make room, and it answers again when called.
#[tokio::test]
async fn a_function_serves_two_versions_called_by_number_at_most() {
    let server = many_versions(4).await;
    assert_eq!(v_of(&server, "many@1").await, 1);
    assert_eq!(v_of(&server, "many@2").await, 2);
    server.wait_metric(MANY_INSTANCES, 3.0, 30).await;
    // A third: version 1, called least lately, goes.
    assert_eq!(v_of(&server, "many@3").await, 3);
    two_by_number_serve(&server).await;
    // Called again, it serves again (and version 2 goes).
    assert_eq!(v_of(&server, "many@1").await, 1);
    assert_eq!(v_of(&server, "many").await, 4);
}

/// Calls of several versions by number at once deploy them one at a time
/// (a lock per function), each making room before it starts, and a version
/// deployed for a call is not retired before that call reaches it: every
/// call is answered by its own version, and two versions called by number
/// serve afterwards at most.
#[tokio::test]
async fn versions_called_by_number_at_once_are_each_answered_and_two_serve_at_most() {
    let server = many_versions(5).await;
    let targets: Vec<String> = (1..=4).map(|v| format!("many@{v}")).collect();
    let answers = futures::future::join_all(targets.iter().map(|target| v_of(&server, target))).await;
    assert_eq!(answers, [1, 2, 3, 4]);
    two_by_number_serve(&server).await;
}

/// While both versions called by number that serve were deployed for calls
/// not answered yet, a call of a third waits until the first of those
/// holds lapses (5 s after its deploy, though its call goes on), then
/// retires that version and is answered by its own; the calls under way
/// on the retired version and the other are answered by theirs.
#[tokio::test]
async fn a_version_call_finding_no_room_waits_for_the_first_hold_to_lapse() {
    let server = many_versions(4).await;
    // Each holds its version for 15 s, past the 5 s a deploy holds it for.
    let held_call = |v: u32| {
        let url = format!("{}/fn/ns/many@{v}", server.url);
        tokio::spawn(async move {
            let answer = reqwest::Client::new()
                .post(url)
                .body(r#"{"sleep": 15}"#)
                .send()
                .await
                .unwrap();
            (answer.status(), answer.text().await.unwrap())
        })
    };
    // One after the other: version 2's deploy is under way before the third call.
    let first = held_call(1);
    server.wait_metric(MANY_INSTANCES, 2.0, 30).await;
    let second = held_call(2);
    server.wait_metric(MANY_INSTANCES, 3.0, 30).await;

    let (status, _, body) = server.invoke(Method::POST, "/fn/ns/many@3", "{}").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["v"], 3, "{body}");

    for (v, call) in [(1, first), (2, second)] {
        let (status, body) = call.await.unwrap();
        assert_eq!(status, StatusCode::OK, "many@{v}: {body}");
        assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["v"], v, "{body}");
    }
}

async fn put_alias(server: &Server, function: &str, alias: &str, spec: Value) -> (StatusCode, Value) {
    server
        .call(
            Method::PUT,
            &format!("/v1/namespaces/ns/functions/{function}/aliases/{alias}"),
            Some(spec),
        )
        .await
}

/// The numbers of a function's versions, newest first.
async fn version_numbers(server: &Server, function: &str) -> Vec<u64> {
    let (_, list) = server
        .call(
            Method::GET,
            &format!("/v1/namespaces/ns/functions/{function}/versions"),
            None,
        )
        .await;
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_u64().unwrap())
        .collect()
}

/// Waits until `function` keeps versions `numbers` and the server keeps
/// `artifacts` artifacts: old versions go in the prune a build starts once
/// its new version is Ready, not before the build's status says so.
async fn pruned_to(server: &Server, function: &str, numbers: &[u64], artifacts: usize) {
    eventually(std::time::Duration::from_secs(10), || async {
        let kept = version_numbers(server, function).await;
        let on_disk = server.artifacts().len();
        if kept == numbers && on_disk == artifacts {
            Ok(())
        } else {
            Err(format!(
                "versions {kept:?} with {on_disk} artifacts on disk, not {numbers:?} with {artifacts}"
            ))
        }
    })
    .await;
}

/// An answer of `status` whose error says `text`.
fn refused(answer: &(StatusCode, Value), status: StatusCode, text: &str) {
    assert_eq!(answer.0, status, "{}", answer.1);
    let error = answer.1["error"].as_str().unwrap_or_default();
    assert!(error.contains(text), "{error:?} does not say {text:?}");
}

/// A 400 whose body names `field`.
fn names_field(answer: &(StatusCode, Value), field: &str) {
    assert_eq!(answer.0, StatusCode::BAD_REQUEST, "{}", answer.1);
    assert_eq!(answer.1["field"], field, "{}", answer.1);
}

crate::both_stores!(
    versions_are_listed_fetched_and_called_by_number,
    an_alias_splits_moves_and_rolls_back,
    old_versions_go_unless_an_alias_holds_them,
    pruning_keeps_an_artifact_a_kept_version_shares,
    a_namespace_keeps_no_more_than_its_storage_quota,
    versions_past_the_kept_number_do_not_count_against_the_quota,
    a_lowered_kept_number_prunes_at_the_next_sweep,
    two_builds_at_once_cannot_both_take_the_last_room,
    a_version_goes_unless_it_serves_or_an_alias_holds_it,
    the_code_a_function_serves_uploaded_again_makes_no_version,
);

/// Versions of the same code share an artifact: a prune that removes
/// several versions leaves the artifact while a version it has not reached
/// yet shares it, and goes on to the older ones. (On PostgreSQL, telling
/// that an artifact was in use failed, and the prune stopped there.) The
/// prune here is the one deleting an alias causes: the versions it held
/// past `SLESS_KEEP_VERSIONS` go at once.
async fn pruning_keeps_an_artifact_a_kept_version_shares(backend: Backend) {
    let server = Server::start_with(backend, &[("SLESS_KEEP_VERSIONS", "1")]).await;
    // Versions 1 to 4 run the code of v 1, 2, 3 and 2 again; one alias
    // holds 1 and 2 while 3 and 4 are built (4's build prunes 3), then goes.
    deploy(&server, "sf", 1).await;
    let (status, body) = put_alias(&server, "sf", "both", json!({"version": 1})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    deploy(&server, "sf", 2).await;
    let (status, body) = put_alias(&server, "sf", "both", json!({"version": 1, "weights": {"2": 0.5}})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    deploy(&server, "sf", 3).await;
    deploy(&server, "sf", 2).await;
    // Version 3 and its artifact go; 4 shares 2's.
    pruned_to(&server, "sf", &[4, 2, 1], 2).await;
    // The prune removes 2 and 1 in one pass; 2 shares 4's artifact.
    let (status, body) = server
        .call(Method::DELETE, "/v1/namespaces/ns/functions/sf/aliases/both", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let numbers = version_numbers(&server, "sf").await;
    let on_disk = server.artifacts().len();
    assert_eq!(
        (numbers, on_disk),
        (vec![4], 1),
        "only version 4 and its artifact are kept"
    );
    assert_eq!(v_of(&server, "sf").await, 2);
}

/// The code `$latest` serves, uploaded again (a redeploy with nothing
/// changed), builds nothing and makes no version: it would push a kept one
/// out. Other code, and then that code again, make versions as ever.
async fn the_code_a_function_serves_uploaded_again_makes_no_version(backend: Backend) {
    let server = Server::start(backend).await;
    deploy(&server, "same", 1).await;
    deploy(&server, "same", 1).await;
    assert_eq!(version_numbers(&server, "same").await, [1]);
    let (_, function) = server.call(Method::GET, "/v1/namespaces/ns/functions/same", None).await;
    assert_eq!(
        (
            function["status"]["phase"].as_str(),
            function["status"]["version"].as_u64()
        ),
        (Some("Ready"), Some(1)),
        "{function}"
    );
    deploy(&server, "same", 2).await;
    deploy(&server, "same", 1).await;
    assert_eq!(version_numbers(&server, "same").await, [3, 2, 1]);
    assert_eq!(v_of(&server, "same").await, 1);
}

/// A version no longer needed can be deleted, with its artifact and its
/// upload; not the one the function serves, nor one an alias points at,
/// and the answers say which and why.
async fn a_version_goes_unless_it_serves_or_an_alias_holds_it(backend: Backend) {
    let server = Server::start(backend).await;
    for v in 1..=3 {
        deploy(&server, "df", v).await;
    }
    let (status, body) = put_alias(&server, "df", "live", json!({"version": 3, "weights": {"2": 0.1}})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let delete = |version: &'static str| {
        let server = &server;
        async move {
            let path = format!("/v1/namespaces/ns/functions/df/versions/{version}");
            server.call(Method::DELETE, &path, None).await
        }
    };
    let serving = "version 3 is what function \"df\" serves ($latest)";
    refused(&delete("3").await, StatusCode::CONFLICT, serving);
    refused(&delete("2").await, StatusCode::CONFLICT, "is what alias live points at");
    assert_eq!(delete("9").await.0, StatusCode::NOT_FOUND);
    names_field(&delete("two").await, "version");
    assert_eq!((server.artifacts().len(), server.archives("ns", "df")), (3, 3));
    // Another tenant's token deletes nothing here.
    let other = server.token_for(&["other"]).await;
    let path = "/v1/namespaces/ns/functions/df/versions/1";
    let (status, body) = server.call_as(Some(&other), Method::DELETE, path, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(version_numbers(&server, "df").await, [3, 2, 1]);

    let (status, body) = delete("1").await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(version_numbers(&server, "df").await, [3, 2]);
    assert_eq!((server.artifacts().len(), server.archives("ns", "df")), (2, 2));
    let (status, _, body) = server.invoke(Method::POST, "/fn/ns/df@1", "{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(v_of(&server, "df@2").await, 2);
    assert_eq!(delete("1").await.0, StatusCode::NOT_FOUND);
}

/// 400 KiB that do not compress: a version of [`big_code`] keeps about
/// 800 KiB (its artifact and its uploaded archive).
fn ballast() -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    (0..400 * 1024)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// Deploys the handler answering `{"v": v}` with [`ballast`] beside it, in
/// namespace `ns`; returns the function once its build ended.
async fn deploy_big(server: &Server, ns: &str, name: &str, v: u32, ready: bool) -> Value {
    let ballast = ballast();
    let files: &[(&str, &[u8])] = &[("handler.py", &code(v)), ("ballast.bin", &ballast)];
    let spec = json!({"runtime": "python3.11"});
    if ready {
        server.deploy(ns, name, spec, files).await
    } else {
        server.deploy_fails(ns, name, spec, files).await
    }
}

/// A namespace's kept versions take no more than `SLESS_NS_MAX_STORAGE_MB`:
/// a build past it fails, saying so, and leaves nothing; versions the
/// build's prune removes do not count, those an alias holds do, and
/// deleting the alias gives their room back at once. An artifact two
/// functions share counts once; another namespace has its own quota.
async fn a_namespace_keeps_no_more_than_its_storage_quota(backend: Backend) {
    let server = Server::start_with(
        backend,
        &[("SLESS_KEEP_VERSIONS", "2"), ("SLESS_NS_MAX_STORAGE_MB", "3")],
    )
    .await;
    deploy_big(&server, "ns", "big", 1, true).await;
    let (status, body) = put_alias(&server, "big", "pin", json!({"version": 1})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // Three versions kept (4, 3 and the pinned 1) after 4's prune: 2.4 MiB.
    for v in 2..=4 {
        deploy_big(&server, "ns", "big", v, true).await;
    }
    pruned_to(&server, "big", &[4, 3, 1], 3).await;
    let (_, version) = server
        .call(Method::GET, "/v1/namespaces/ns/functions/big/versions/4", None)
        .await;
    for field in ["artifact_bytes", "archive_bytes"] {
        let bytes = version[field].as_u64().unwrap();
        assert!((400 * 1024..500 * 1024).contains(&bytes), "{field}: {version}");
    }

    // A fourth would be 3.2 MiB: refused, and nothing of it stays.
    let refused = deploy_big(&server, "ns", "other", 9, false).await;
    let message = refused["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("namespace ns would keep 3.")
            && message.contains("over its quota of 3.0 MiB (the server's SLESS_NS_MAX_STORAGE_MB)"),
        "{message}"
    );
    assert_eq!(refused["status"]["version"], 0, "{refused}");
    assert_eq!(server.artifacts().len(), 3, "the refused build's artifact is gone");
    // Another namespace's quota is its own.
    deploy_big(&server, "elsewhere", "other", 9, true).await;

    // Without the alias, version 1 goes at once: the same build fits.
    let (status, body) = server
        .call(Method::DELETE, "/v1/namespaces/ns/functions/big/aliases/pin", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(version_numbers(&server, "big").await, [4, 3]);
    deploy_big(&server, "ns", "other", 9, true).await;
    assert_eq!(v_of(&server, "other").await, 9);
    // Another function of the same code shares the artifact, which counts
    // once: only its upload is more (2.8 MiB).
    deploy_big(&server, "ns", "twin", 4, true).await;
    assert_eq!(server.artifacts().len(), 3, "big 4 and 3, other 9 (with elsewhere's)");
}

/// A function's versions past `SLESS_KEEP_VERSIONS` that no alias holds
/// are about to be pruned and do not count against the quota, though
/// the prune that removes them has not run yet (it runs after its build
/// is Ready, or, as here, at the first periodic sweep once the server
/// keeps fewer versions): another function of the namespace still fits.
async fn versions_past_the_kept_number_do_not_count_against_the_quota(backend: Backend) {
    let mut server = Server::start_with(
        backend,
        &[("SLESS_KEEP_VERSIONS", "3"), ("SLESS_NS_MAX_STORAGE_MB", "3")],
    )
    .await;
    for v in 1..=3 {
        deploy_big(&server, "ns", "big", v, true).await;
    }
    // 2.4 MiB kept; once the server keeps one version, 0.8 MiB count.
    keep_versions(&mut server, "1");
    server.restart();
    assert_eq!(
        version_numbers(&server, "big").await,
        [3, 2, 1],
        "no build of big pruned it yet"
    );
    deploy_big(&server, "ns", "other", 9, true).await;
    assert_eq!(v_of(&server, "other").await, 9);
}

/// Restarts of `server` keep `keep` versions of each function.
fn keep_versions(server: &mut Server, keep: &str) {
    for (name, value) in &mut server.extra_env {
        if name == "SLESS_KEEP_VERSIONS" {
            *value = keep.into();
        }
    }
}

/// After an operator lowers `SLESS_KEEP_VERSIONS`, a function that is not
/// built again keeps the new number of versions (and those its aliases
/// name) from the first periodic sweep on: the others go with their
/// artifacts, and what is kept still answers.
async fn a_lowered_kept_number_prunes_at_the_next_sweep(backend: Backend) {
    let mut server = Server::start_with(backend, &[("SLESS_KEEP_VERSIONS", "4")]).await;
    for v in 1..=4 {
        deploy(&server, "kept", v).await;
    }
    let (status, body) = put_alias(&server, "kept", "first", json!({"version": 1})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    pruned_to(&server, "kept", &[4, 3, 2, 1], 4).await;
    keep_versions(&mut server, "1");
    server.extra_env.push(("SLESS_ARTIFACT_SWEEP_SEC".into(), "1".into()));
    server.restart();
    pruned_to(&server, "kept", &[4, 1], 2).await;
    assert_eq!(v_of(&server, "kept").await, 4);
    assert_eq!(v_of(&server, "kept@first").await, 1);
}

/// A handler whose import waits until the test's gate on 127.0.0.1:`port`
/// lets it go: a deploy of it holds its build between the storage check
/// and the version's record for as long as the test wants.
fn gated(port: u16) -> Vec<u8> {
    format!(
        "import socket\n\n_gate = socket.create_connection(('127.0.0.1', {port}))\n_gate.recv(1)\n_gate.close()\n\n\n\
         def handle(event, context):\n    return {{'gated': True}}\n"
    )
    .into_bytes()
}

/// Two builds of a namespace at once, each within its storage quota alone
/// but not together: the one checked second is refused, though the first
/// has not recorded its version yet (its handler is still loading), so the
/// namespace never keeps more than its quota.
async fn two_builds_at_once_cannot_both_take_the_last_room(backend: Backend) {
    let gate = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = gate.local_addr().unwrap().port();
    let server = Server::start_with(
        backend,
        &[
            ("SLESS_NS_MAX_STORAGE_MB", "1"),
            ("SLESS_NS_MAX_BUILDS", "2"),
            // The gate is on the machine's loopback, which an isolated
            // instance cannot reach.
            ("SLESS_NETWORK_ISOLATION", "false"),
        ],
    )
    .await;
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "first", "runtime": "python3.11"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let ballast = ballast();
    let files: &[(&str, &[u8])] = &[("handler.py", &gated(port)), ("ballast.bin", &ballast)];
    let (status, uploaded) = server.upload("ns", "first", super::harness::zip_of(files)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{uploaded}");
    let first = uploaded["status"]["code_hash"].as_str().unwrap().to_string();
    // Built and checked, the first version is loading: its handler waits
    // at the gate.
    let (mut held, _) = tokio::time::timeout(std::time::Duration::from_secs(120), gate.accept())
        .await
        .expect("the first build's handler reached the gate")
        .unwrap();
    // Meanwhile the second, about 0.9 MiB as the first, is checked.
    let second = deploy_big(&server, "ns", "second", 2, false).await;
    let message = second["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("namespace ns would keep 1.")
            && message.contains("over its quota of 1.0 MiB (the server's SLESS_NS_MAX_STORAGE_MB)"),
        "{message}"
    );
    // The gate lets the first go, and any later import at once.
    tokio::io::AsyncWriteExt::write_all(&mut held, b"go").await.unwrap();
    tokio::spawn(async move {
        while let Ok((next, _)) = gate.accept().await {
            drop(next);
        }
    });
    server.wait_built("ns", "first", &first).await;
    assert_eq!(server.artifacts().len(), 1, "the second build's artifact is gone");
}

async fn versions_are_listed_fetched_and_called_by_number(backend: Backend) {
    let server = Server::start(backend).await;
    let first = deploy(&server, "vf", 1).await;
    let second = deploy(&server, "vf", 2).await;

    let (status, list) = server
        .call(Method::GET, "/v1/namespaces/ns/functions/vf/versions", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let items = list["items"].as_array().unwrap();
    let numbers: Vec<u64> = items.iter().map(|v| v["version"].as_u64().unwrap()).collect();
    assert_eq!(numbers, [2, 1], "newest first: {list}");
    assert_eq!(items[0]["code_hash"], second);
    assert_eq!(items[0]["latest"], true);
    assert_eq!(items[1]["latest"], false);
    assert_eq!(items[1]["spec"]["runtime"], "python3.11");
    assert!(items[1]["built_at"].is_string(), "{list}");

    let (status, one) = server
        .call(Method::GET, "/v1/namespaces/ns/functions/vf/versions/1", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{one}");
    assert_eq!(one["code_hash"], first);
    assert_eq!(one["spec"]["entrypoint"], "handler.handle");

    // By number, and the plain URL stays `$latest`.
    assert_eq!(v_of(&server, "vf@1").await, 1);
    assert_eq!(v_of(&server, "vf@2").await, 2);
    assert_eq!(v_of(&server, "vf").await, 2);
    let (_, _, body) = server.invoke(Method::POST, "/fn/ns/vf@1/some/path", "{}").await;
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["version"], 1, "{body}");

    // The record says which version ran.
    let records = eventually(std::time::Duration::from_secs(10), || async {
        let records = server.records("ns", "vf").await;
        if records.iter().any(|r| r["version"] == 1) {
            Ok(records)
        } else {
            Err(format!("no record of version 1: {records:?}"))
        }
    })
    .await;
    assert!(records.iter().all(|r| r.get("alias").is_none()), "{records:?}");

    // What does not exist.
    let (status, _, body) = server.invoke(Method::POST, "/fn/ns/vf@9", "{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(body.contains("no version 9"), "{body}");
    for nothing in ["vf@", "vf@0", "vf@Live", "vf@a@b", "nope@1"] {
        let (status, _, body) = server.invoke(Method::POST, &format!("/fn/ns/{nothing}"), "{}").await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{nothing}: {body}");
    }
    for bad in ["abc", "+1", "0"] {
        let answer = server
            .call(
                Method::GET,
                &format!("/v1/namespaces/ns/functions/vf/versions/{bad}"),
                None,
            )
            .await;
        names_field(&answer, "version");
    }
    // An id or a console path of any length is echoed cut too.
    for path in [
        format!("/v1/namespaces/ns/functions/vf/async-invocations/{}", "i".repeat(5000)),
        format!("/ui/{}", "c".repeat(3000)),
    ] {
        let (status, body) = server.call(Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert!(body.to_string().len() < 600, "{} bytes", body.to_string().len());
    }
    // A selector or a version of any length is echoed cut.
    let long = "L".repeat(30_000);
    let (status, _, body) = server.invoke(Method::POST, &format!("/fn/ns/vf@{long}"), "{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        body.len() < 600 && body.contains("... (30000 bytes)"),
        "{} bytes",
        body.len()
    );
    let (status, body) = server
        .call(
            Method::GET,
            &format!("/v1/namespaces/ns/functions/vf/versions/{long}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.to_string().len() < 600, "{} bytes", body.to_string().len());
    let (status, body) = server
        .call(Method::GET, "/v1/namespaces/ns/functions/vf/versions/9", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let answer = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "vf@2", "runtime": "python3.11"})),
        )
        .await;
    names_field(&answer, "name");
}

async fn an_alias_splits_moves_and_rolls_back(backend: Backend) {
    let mut server = Server::start(backend).await;
    deploy(&server, "af", 1).await;
    deploy(&server, "af", 2).await;

    let (status, alias) = put_alias(&server, "af", "live", json!({"version": 1})).await;
    assert_eq!(status, StatusCode::CREATED, "{alias}");
    assert!(alias["url"].as_str().unwrap().ends_with("/fn/ns/af@live"), "{alias}");
    assert_eq!(v_of(&server, "af@live").await, 1);
    assert_eq!(v_of(&server, "af").await, 2, "the plain URL stays $latest");

    // 90/10 between versions 1 and 2 over 2000 calls.
    let (status, alias) = put_alias(&server, "af", "live", json!({"version": 1, "weights": {"2": 0.1}})).await;
    assert_eq!(status, StatusCode::OK, "{alias}");
    let answers: Vec<u64> = futures::stream::iter(0..2000)
        .map(|_| v_of(&server, "af@live"))
        .buffer_unordered(8)
        .collect()
        .await;
    let to_two = answers.iter().filter(|v| **v == 2).count();
    assert_eq!(answers.iter().filter(|v| **v == 1).count() + to_two, 2000);
    assert!((140..=260).contains(&to_two), "10% ± 3% of 2000 calls, got {to_two}");

    // Moved: every call goes to 2; rolled back: every call goes to 1.
    put_alias(&server, "af", "live", json!({"version": 2})).await;
    for _ in 0..20 {
        assert_eq!(v_of(&server, "af@live").await, 2);
    }
    let (status, alias) = put_alias(&server, "af", "live", json!({"version": 1})).await;
    assert_eq!(status, StatusCode::OK, "{alias}");
    assert_eq!(alias["weights"], Value::Null, "{alias}");
    for _ in 0..20 {
        assert_eq!(v_of(&server, "af@live").await, 1);
    }

    // A new build moves `$latest`, not the alias: version 1 keeps serving.
    deploy(&server, "af", 3).await;
    assert_eq!(v_of(&server, "af").await, 3);
    assert_eq!(v_of(&server, "af@live").await, 1);

    // Records and metrics carry the version and the alias.
    let records = eventually(std::time::Duration::from_secs(10), || async {
        let records = server.records("ns", "af").await;
        if records.iter().any(|r| r["alias"] == "live" && r["version"] == 2) {
            Ok(records)
        } else {
            Err("no record of the alias".to_string())
        }
    })
    .await;
    assert!(records.iter().any(|r| r["alias"] == "live" && r["version"] == 1));
    let series = r#"sless_version_invocations_total{namespace="ns",function="af",version="1",alias="live"}"#;
    assert!(server.metric(series).await.is_some_and(|n| n > 1000.0), "{series}");

    // Listed, and on the versions it points at.
    let (_, list) = server
        .call(Method::GET, "/v1/namespaces/ns/functions/af/aliases", None)
        .await;
    assert_eq!(list["items"][0]["name"], "live", "{list}");
    let (_, one) = server
        .call(Method::GET, "/v1/namespaces/ns/functions/af/versions/1", None)
        .await;
    assert_eq!(one["aliases"], json!(["live"]), "{one}");

    // Bad input is a 400 naming the field.
    names_field(
        &put_alias(&server, "af", "live", json!({"version": 9})).await,
        "version",
    );
    names_field(
        &put_alias(&server, "af", "live", json!({"version": 0})).await,
        "version",
    );
    names_field(&put_alias(&server, "af", "live", json!({})).await, "version");
    for weights in [
        json!({"9": 0.1}),
        json!({"2": 1.5}),
        json!({"2": -0.5}),
        json!({"1": 0.5}),
        json!({"x": 0.5}),
        json!({"2": 0.1, "3": 0.1}),
    ] {
        let answer = put_alias(&server, "af", "live", json!({"version": 1, "weights": weights})).await;
        names_field(&answer, "weights");
    }
    names_field(
        &put_alias(&server, "af", "live", json!({"version": 1, "extra": 1})).await,
        "extra",
    );
    for bad_name in ["1abc", "Live", "a@b", "a_b", "latest"] {
        names_field(&put_alias(&server, "af", bad_name, json!({"version": 1})).await, "name");
    }
    // `latest` is what people call the newest version: no alias takes it,
    // and `@latest` says where the newest is.
    refused(
        &put_alias(&server, "af", "latest", json!({"version": 1})).await,
        StatusCode::BAD_REQUEST,
        r#"alias name "latest" is reserved"#,
    );
    let (status, _, body) = server.invoke(Method::POST, "/fn/ns/af@latest", "{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(body.contains("/fn/ns/af calls the newest version"), "{body}");
    let (status, body) = put_alias(&server, "nope", "live", json!({"version": 1})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(v_of(&server, "af@live").await, 1, "a refused move changes nothing");

    // A merge patch ends a canary.
    put_alias(&server, "af", "canary", json!({"version": 3, "weights": {"2": 0.5}})).await;
    let (status, patched) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/functions/af/aliases/canary",
            Some(json!({"weights": null})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    for _ in 0..10 {
        assert_eq!(v_of(&server, "af@canary").await, 3);
    }

    // Aliases live in the store: a restarted server routes by them.
    server.restart();
    assert_eq!(v_of(&server, "af@live").await, 1);
    assert_eq!(v_of(&server, "af").await, 3);

    // Deleted: the alias answers 404.
    let (status, _) = server
        .call(Method::DELETE, "/v1/namespaces/ns/functions/af/aliases/live", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _, body) = server.invoke(Method::POST, "/fn/ns/af@live", "{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(body.contains("no alias \\\"live\\\""), "{body}");

    // Every replica holds every alias: a function has 100 at most
    // ("canary" and 99 more); moving one it has is still taken.
    for n in 1..100 {
        let (status, body) = put_alias(&server, "af", &format!("a{n}"), json!({"version": 3})).await;
        assert_eq!(status, StatusCode::CREATED, "a{n}: {body}");
    }
    refused(
        &put_alias(&server, "af", "one-more", json!({"version": 3})).await,
        StatusCode::BAD_REQUEST,
        "has 100 aliases already, the most it may",
    );
    let (status, body) = put_alias(&server, "af", "a7", json!({"version": 1})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

async fn old_versions_go_unless_an_alias_holds_them(backend: Backend) {
    let server = Server::start_with(backend, &[("SLESS_KEEP_VERSIONS", "2")]).await;
    deploy(&server, "kf", 1).await;
    let (status, body) = put_alias(&server, "kf", "stable", json!({"version": 1})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    for v in 2..=4 {
        deploy(&server, "kf", v).await;
    }
    // Old versions go once the newest is promoted, just after it is Ready:
    // the newest two and the one an alias holds.
    pruned_to(&server, "kf", &[4, 3, 1], 3).await;
    let (status, _, body) = server.invoke(Method::POST, "/fn/ns/kf@2", "{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(v_of(&server, "kf@stable").await, 1);
    assert_eq!(v_of(&server, "kf@3").await, 3);
    // An alias cannot point at a version no longer kept.
    names_field(
        &put_alias(&server, "kf", "stable", json!({"version": 2})).await,
        "version",
    );

    // Deleting the function deletes its versions and aliases.
    let (status, _) = server
        .call(Method::DELETE, "/v1/namespaces/ns/functions/kf", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    deploy(&server, "kf", 5).await;
    let (_, list) = server
        .call(Method::GET, "/v1/namespaces/ns/functions/kf/versions", None)
        .await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(server.artifacts().len(), 1, "the deleted function's artifacts are gone");
    let (_, aliases) = server
        .call(Method::GET, "/v1/namespaces/ns/functions/kf/aliases", None)
        .await;
    assert_eq!(aliases["items"], json!([]), "{aliases}");
}

/// An alias moved through one replica routes on the other within its
/// reconcile period (waited for, not timed).
#[tokio::test]
async fn an_alias_moved_on_one_replica_routes_on_the_other() {
    let db = PgDb::create().await;
    let s3 = S3Server::start().await;
    let env = s3.env();
    let a = Server::replica(&db.url(), &env);
    let b = Server::replica(&db.url(), &env);
    deploy(&a, "cf", 1).await;
    deploy(&a, "cf", 2).await;
    let (status, body) = put_alias(&a, "cf", "live", json!({"version": 1})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let answers_with = |v: u64| {
        let b = &b;
        async move {
            eventually(std::time::Duration::from_secs(20), || async {
                let (status, _, body) = b.invoke(Method::POST, "/fn/ns/cf@live", "{}").await;
                let got = serde_json::from_str::<Value>(&body).ok().and_then(|j| j["v"].as_u64());
                if status == StatusCode::OK && got == Some(v) {
                    Ok(())
                } else {
                    Err(format!("replica b answers {status} {body}, not v{v}"))
                }
            })
            .await
        }
    };
    answers_with(1).await;
    put_alias(&a, "cf", "live", json!({"version": 2})).await;
    answers_with(2).await;
    // Rollback through the other replica reaches the first.
    put_alias(&b, "cf", "live", json!({"version": 1})).await;
    eventually(std::time::Duration::from_secs(20), || async {
        match v_of(&a, "cf@live").await {
            1 => Ok(()),
            v => Err(format!("replica a still answers v{v}")),
        }
    })
    .await;
}
