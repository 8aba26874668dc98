//! Several `sless server` processes on one private PostgreSQL database and
//! one real S3-compatible server: any replica serves what any deployed, a
//! new version is served by every replica once Ready, the leader's work
//! (cron ticks, job runs, builds) moves on when it dies or stops, and S3
//! settings that cannot work stop the start naming the setting.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::harness::{eventually, zip_of, PgDb, S3Server, Server};

/// Answers of `/fn` calls: when each was sent, to which replica, the `v` got.
type Answers = Arc<Mutex<Vec<(Instant, usize, Option<u64>)>>>;

/// Replicas sharing a database and a bucket.
pub(super) struct Replicas {
    pub(super) servers: Vec<Server>,
    s3: S3Server,
    pub(super) db: PgDb,
}

pub(super) async fn replicas(n: usize, extra: &[(&str, &str)]) -> Replicas {
    let db = PgDb::create().await;
    let s3 = S3Server::start().await;
    let mut env = s3.env();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let servers = (0..n).map(|_| Server::replica(&db.url(), &env)).collect::<Vec<_>>();
    assert!(servers[0].leads().await, "the first replica leads");
    for follower in &servers[1..] {
        assert!(!follower.leads().await, "one leader only");
    }
    Replicas { servers, s3, db }
}

fn version_code(v: u32) -> Vec<(&'static str, Vec<u8>)> {
    vec![(
        "handler.py",
        format!("def handle(event, context):\n    return {{'v': {v}}}\n").into_bytes(),
    )]
}

pub(super) async fn upload(server: &Server, name: &str, v: u32) -> String {
    let files = version_code(v);
    let files: Vec<(&str, &[u8])> = files.iter().map(|(n, c)| (*n, c.as_slice())).collect();
    let (status, body) = server.upload("ns", name, zip_of(&files)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body["status"]["code_hash"].as_str().unwrap().to_string()
}

pub(super) async fn create(server: &Server, name: &str) {
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": name, "runtime": "python3.11"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

/// The `v` a replica's `/fn/ns/{name}` answers with (None for anything else).
pub(super) async fn answer(server: &Server, name: &str) -> Option<u64> {
    let (status, _, body) = server.invoke(Method::GET, &format!("/fn/ns/{name}"), "").await;
    if status != StatusCode::OK {
        return None;
    }
    serde_json::from_str::<Value>(&body).ok()?["v"].as_u64()
}

#[tokio::test]
async fn two_replicas_serve_what_either_deployed_and_a_new_version_once_ready() {
    serve_and_roll(2).await;
}

#[tokio::test]
async fn three_replicas_serve_what_any_deployed_and_a_new_version_once_ready() {
    serve_and_roll(3).await;
}

async fn serve_and_roll(n: usize) {
    let cluster = replicas(n, &[]).await;
    let (a, b) = (&cluster.servers[0], &cluster.servers[n - 1]);

    // Created, uploaded and built through the follower; built on the leader.
    create(b, "f").await;
    let hash = upload(b, "f", 1).await;
    a.wait_built("ns", "f", &hash).await;
    for (i, server) in cluster.servers.iter().enumerate() {
        assert_eq!(answer(server, "f").await, Some(1), "replica {i} serves it once Ready");
    }
    assert!(
        cluster
            .s3
            .keys("sless/archives/ns/f/")
            .iter()
            .any(|k| k.ends_with(".zip")),
        "the archive is in the bucket: {:?}",
        cluster.s3.keys("")
    );
    let tarballs = cluster.s3.keys("sless/artifacts/");
    assert!(tarballs.iter().any(|k| k.ends_with(".tar.gz")), "{tarballs:?}");
    // The follower never built it: its copy came from the bucket.
    let fetched = std::fs::read_dir(b.data_dir.path().join("artifacts"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .count();
    assert_eq!(fetched, 1, "the follower fetched the artifact");

    // A new version: no replica answers with the old one once the status
    // says Ready, and none fails while it rolls.
    let answers: Answers = Default::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut callers = Vec::new();
    for (i, url) in cluster.servers.iter().map(|s| s.url.clone()).enumerate() {
        let (answers, stop) = (answers.clone(), stop.clone());
        callers.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            for _ in 0..100_000 {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let sent = Instant::now();
                let got = match client.get(format!("{url}/fn/ns/f")).send().await {
                    Ok(r) if r.status() == StatusCode::OK => r.json::<Value>().await.ok().and_then(|v| v["v"].as_u64()),
                    _ => None,
                };
                answers.lock().unwrap().push((sent, i, got));
            }
        }));
    }
    let hash = upload(a, "f", 2).await;
    a.wait_built("ns", "f", &hash).await;
    let ready_seen = Instant::now();
    eventually(Duration::from_secs(10), || async {
        let after = answers
            .lock()
            .unwrap()
            .iter()
            .filter(|(sent, _, _)| *sent > ready_seen)
            .fold(vec![0; n], |mut count, (_, i, _)| {
                count[*i] += 1;
                count
            });
        if after.iter().all(|n| *n >= 20) {
            Ok(())
        } else {
            Err(format!("answers after Ready per replica: {after:?}"))
        }
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for caller in callers {
        caller.await.unwrap();
    }
    let answers = std::mem::take(&mut *answers.lock().unwrap());
    for (sent, replica, got) in answers.iter() {
        assert!(
            matches!(got, Some(1) | Some(2)),
            "replica {replica} failed a call during the rollout"
        );
        if *sent > ready_seen {
            assert_eq!(
                *got,
                Some(2),
                "replica {replica} answered with the old version after Ready"
            );
        }
    }
    // Records are written in batches: the newest comes a moment after its call.
    b.records_until("ns", "f", |records| records.first().is_some_and(|r| r["version"] == 2))
        .await;
}

#[tokio::test]
async fn one_handler_uploaded_to_many_functions_at_once_builds_everywhere() {
    let cluster = replicas(2, &[]).await;
    let names: Vec<String> = (0..24).map(|i| format!("same-{i}")).collect();
    for chunk in names.chunks(8) {
        let mut hashes = Vec::new();
        for (i, name) in chunk.iter().enumerate() {
            let server = &cluster.servers[i % 2];
            create(server, name).await;
            hashes.push((name, upload(server, name, 7).await));
        }
        for (name, hash) in hashes {
            cluster.servers[0].wait_built("ns", name, &hash).await;
        }
    }
    for name in &names {
        for server in &cluster.servers {
            assert_eq!(answer(server, name).await, Some(7), "{name}");
        }
    }
    let tarballs = cluster.s3.keys("sless/artifacts/");
    assert_eq!(tarballs.len(), 1, "one artifact for one code: {tarballs:?}");
}

/// Seconds (Unix time) of each invocation of `name`, oldest first.
async fn fired_seconds(server: &Server, name: &str) -> Vec<i64> {
    let mut seconds: Vec<i64> = server
        .records("ns", name)
        .await
        .iter()
        .map(|r| {
            chrono::DateTime::parse_from_rfc3339(r["started_at"].as_str().unwrap())
                .unwrap()
                .timestamp()
        })
        .collect();
    seconds.sort();
    seconds
}

#[tokio::test]
async fn a_killed_leader_hands_cron_ticks_over_without_losing_or_doubling_them() {
    let mut cluster = replicas(3, &[("SLESS_CRON_TICK_MS", "100")]).await;
    let leader = &cluster.servers[0];
    deploy_hello(leader, "tick").await;
    let (status, body) = cluster.servers[1]
        .call(
            Method::POST,
            "/v1/namespaces/ns/triggers",
            Some(json!({"name": "every-second", "type": "cron", "function": "tick", "schedule": "* * * * * *"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let follower = &cluster.servers[1];
    eventually(Duration::from_secs(20), || async {
        let n = fired_seconds(follower, "tick").await.len();
        if n >= 3 {
            Ok(())
        } else {
            Err(format!("{n} ticks so far"))
        }
    })
    .await;

    let killed_at = chrono::Utc::now().timestamp();
    cluster.servers[0].kill9();
    let survivors = &cluster.servers[1..];
    eventually(Duration::from_secs(10), || async {
        for server in survivors {
            if server.leads().await {
                return Ok(());
            }
        }
        Err("no survivor leads yet".to_string())
    })
    .await;
    let taken_over_at = chrono::Utc::now().timestamp();
    eventually(Duration::from_secs(20), || async {
        let last = fired_seconds(&survivors[0], "tick").await.last().copied().unwrap_or(0);
        if last >= taken_over_at + 3 {
            Ok(())
        } else {
            Err(format!("last tick at {last}, takeover at {taken_over_at}"))
        }
    })
    .await;
    let (status, _) = survivors[0]
        .call(Method::DELETE, "/v1/namespaces/ns/triggers/every-second", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    let seconds = fired_seconds(&survivors[0], "tick").await;
    let mut per_second: BTreeMap<i64, usize> = BTreeMap::new();
    for s in &seconds {
        *per_second.entry(*s).or_default() += 1;
    }
    let doubled: Vec<_> = per_second.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubled.is_empty(), "ticks fired twice: {doubled:?} in {per_second:?}");
    let (first, last) = (seconds[0], *seconds.last().unwrap());
    let missing: Vec<i64> = (first..=last).filter(|s| !per_second.contains_key(s)).collect();
    // Only the ticks between the kill and the takeover may be missing (a
    // late tick fires once, it is not replayed).
    for s in &missing {
        assert!(
            (killed_at - 1..=taken_over_at + 1).contains(s),
            "tick {s} lost outside the takeover window {killed_at}..{taken_over_at}: {per_second:?}"
        );
    }
    println!(
        "cron across a leader kill: {} ticks, {} missing ({missing:?}), takeover window {killed_at}..{taken_over_at}",
        seconds.len(),
        missing.len()
    );
}

/// Deploys `ns/{name}`: Python code answering `{"hello": "world"}`.
pub(super) async fn deploy_hello(server: &Server, name: &str) {
    let code: &[u8] = b"def handle(event, context):\n    return {'hello': 'world'}\n";
    server
        .deploy("ns", name, json!({"runtime": "python3.11"}), &[("handler.py", code)])
        .await;
}

const WORKER: &[u8] = b"import time\n\ndef handle(event, context):\n    time.sleep(event['sleep'])\n    return {'slept': event['sleep']}\n";

#[tokio::test]
async fn a_job_running_on_a_killed_leader_ends_interrupted_and_runs_again_on_the_next() {
    let mut cluster = replicas(2, &[]).await;
    cluster.servers[0]
        .deploy(
            "ns",
            "worker",
            json!({"runtime": "python3.11", "timeout_sec": 60}),
            &[("handler.py", WORKER)],
        )
        .await;
    let follower = &cluster.servers[1];
    let (status, body) = follower
        .call(
            Method::POST,
            "/v1/namespaces/ns/jobs",
            Some(json!({"name": "long", "function": "worker", "run_id": 1, "event": {"sleep": 30}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    follower
        .wait_for("/v1/namespaces/ns/jobs/long", 30, |j| j["status"]["phase"] == "Running")
        .await;
    cluster.servers[0].kill9();
    let follower = &cluster.servers[1];
    let job = follower
        .wait_for("/v1/namespaces/ns/jobs/long", 15, |j| j["status"]["phase"] == "Failed")
        .await;
    assert!(
        job["status"]["error"].as_str().unwrap().contains("interrupted"),
        "{job}"
    );
    assert!(follower.leads().await);
    let (status, body) = follower
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/jobs/long",
            Some(json!({"run_id": 2, "event": {"sleep": 0}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let job = follower
        .wait_for("/v1/namespaces/ns/jobs/long", 30, |j| {
            j["status"]["phase"] == "Succeeded"
        })
        .await;
    assert_eq!(job["status"]["result"], json!({"slept": 0}));
}

/// The job-run quota counts every replica's runs: a follower, which runs
/// none itself, refuses a run past it while the leader runs another.
#[tokio::test]
async fn a_follower_counts_the_leaders_job_runs_against_the_quota() {
    let cluster = replicas(2, &[("SLESS_NS_MAX_JOB_RUNS", "1")]).await;
    cluster.servers[0]
        .deploy(
            "ns",
            "worker",
            json!({"runtime": "python3.11", "timeout_sec": 60}),
            &[("handler.py", WORKER)],
        )
        .await;
    let follower = &cluster.servers[1];
    let job =
        |name: &str, sleep: u32| json!({"name": name, "function": "worker", "run_id": 1, "event": {"sleep": sleep}});
    let (status, body) = follower
        .call(Method::POST, "/v1/namespaces/ns/jobs", Some(job("first", 20)))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    follower
        .wait_for("/v1/namespaces/ns/jobs/first", 30, |j| {
            j["status"]["phase"] == "Running"
        })
        .await;
    let (status, body) = follower
        .call(Method::POST, "/v1/namespaces/ns/jobs", Some(job("second", 0)))
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("SLESS_NS_MAX_JOB_RUNS"),
        "{body}"
    );
}

#[tokio::test]
async fn sigterm_hands_leadership_over_at_once_and_builds_go_on() {
    let mut cluster = replicas(2, &[]).await;
    assert_eq!(cluster.servers[0].metric("sless_leader").await, Some(1.0));
    assert_eq!(cluster.servers[1].metric("sless_leader").await, Some(0.0));
    let status = cluster.servers[0].terminate_wait();
    assert!(status.success(), "{status:?}");
    let follower = &cluster.servers[1];
    eventually(Duration::from_secs(5), || async {
        match follower.metric("sless_leader").await {
            Some(1.0) => Ok(()),
            other => Err(format!("sless_leader is {other:?}")),
        }
    })
    .await;
    // Builds are the leader's: the one left leads and builds.
    deploy_hello(follower, "after").await;
    let (status, _, body) = follower.invoke(Method::GET, "/fn/ns/after", "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// Starts a server with the S3 code store and `env`; it must refuse to
/// start. Its stderr.
fn refused_with(s3: &S3Server, env: &[(&str, &str)]) -> String {
    let data = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sless"));
    cmd.arg("server")
        .env("SLESS_LISTEN", "127.0.0.1:0")
        .env("SLESS_DATA_DIR", data.path())
        .env_remove("SLESS_DATABASE_URL");
    for (k, v) in s3.env() {
        cmd.env(k, v);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(!out.status.success(), "{env:?} was accepted");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test]
async fn a_missing_bucket_or_refused_credentials_stop_the_start_naming_the_setting() {
    let s3 = S3Server::start().await;
    let err = refused_with(&s3, &[("SLESS_BLOB_URL", "s3://no-such-bucket/code")]);
    assert!(
        err.contains("SLESS_BLOB_URL") && err.contains("no-such-bucket") && err.contains("does not exist"),
        "{err}"
    );
    let err = refused_with(&s3, &[("SLESS_S3_SECRET_ACCESS_KEY", "not-the-secret")]);
    assert!(
        err.contains("SLESS_S3_ACCESS_KEY_ID") && err.contains("SLESS_S3_SECRET_ACCESS_KEY") && err.contains("refused"),
        "{err}"
    );
    let err = refused_with(&s3, &[("SLESS_S3_ENDPOINT", "ftp://127.0.0.1:1")]);
    assert!(err.contains("SLESS_S3_ENDPOINT"), "{err}");
    // The bucket itself works: the same settings start a server.
    let server = Server::start_with(
        super::harness::Backend::Sqlite,
        &s3.env()
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect::<Vec<_>>(),
    )
    .await;
    deploy_hello(&server, "f").await;
    assert!(!s3.keys("sless/archives/ns/f/").is_empty(), "{:?}", s3.keys(""));
}

#[tokio::test]
async fn a_build_left_building_by_a_dead_leader_finishes_on_the_next() {
    let mut cluster = replicas(2, &[]).await;
    let follower = &cluster.servers[1];
    create(follower, "late").await;
    // The leader is paused (it still holds the lock), so nobody builds the
    // upload; then it dies, and the next leader must build it.
    let leader_pid = cluster.servers[0].pid().to_string();
    std::process::Command::new("kill")
        .args(["-STOP", &leader_pid])
        .status()
        .unwrap();
    let hash = upload(follower, "late", 3).await;
    let (_, function) = follower
        .call(Method::GET, "/v1/namespaces/ns/functions/late", None)
        .await;
    assert_eq!(function["status"]["phase"], "Building", "{function}");
    cluster.servers[0].kill9();
    let follower = &cluster.servers[1];
    follower.wait_built("ns", "late", &hash).await;
    assert!(follower.leads().await);
    assert_eq!(answer(follower, "late").await, Some(3));
}

#[tokio::test]
async fn a_function_deleted_and_made_again_serves_its_new_code_on_every_replica() {
    let cluster = replicas(2, &[]).await;
    let (a, b) = (&cluster.servers[0], &cluster.servers[1]);
    create(a, "again").await;
    let hash = upload(a, "again", 1).await;
    a.wait_built("ns", "again", &hash).await;
    assert_eq!(answer(b, "again").await, Some(1));
    // Deleted and made again at once: its first version is version 1 too.
    let (status, body) = a.call(Method::DELETE, "/v1/namespaces/ns/functions/again", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    create(a, "again").await;
    let hash = upload(a, "again", 2).await;
    let function = a.wait_built("ns", "again", &hash).await;
    assert_eq!(function["status"]["version"], 1, "{function}");
    for (i, server) in cluster.servers.iter().enumerate() {
        assert_eq!(
            answer(server, "again").await,
            Some(2),
            "replica {i} serves the new code once Ready"
        );
    }
}

/// A replica keeps the artifacts it fetched only while a version uses
/// them: the leader prunes an old version (`SLESS_KEEP_VERSIONS`) with its
/// own copy and its tarball in the bucket, and the follower's copy goes at
/// its next sweep (`SLESS_ARTIFACT_SWEEP_SEC`), where it stayed for as
/// long as the follower ran.
#[tokio::test]
async fn a_follower_s_copy_of_a_pruned_version_goes_at_its_next_sweep() {
    let cluster = replicas(2, &[("SLESS_KEEP_VERSIONS", "1"), ("SLESS_ARTIFACT_SWEEP_SEC", "1")]).await;
    let (a, b) = (&cluster.servers[0], &cluster.servers[1]);
    create(a, "f").await;
    let hash = upload(a, "f", 1).await;
    a.wait_built("ns", "f", &hash).await;
    assert_eq!(answer(b, "f").await, Some(1));
    let first = b.artifacts();
    assert_eq!(first.len(), 1, "the follower fetched version 1: {first:?}");

    let hash = upload(a, "f", 2).await;
    let function = a.wait_built("ns", "f", &hash).await;
    let second = function["status"]["artifact"].as_str().unwrap().to_string();
    assert_eq!(answer(b, "f").await, Some(2));
    eventually(Duration::from_secs(30), || async {
        match (a.artifacts(), b.artifacts()) {
            (on_a, on_b) if on_a == [second.clone()] && on_b == [second.clone()] => Ok(()),
            left => Err(format!("version 1's artifact is still on a replica: {left:?}")),
        }
    })
    .await;
    // And in the bucket: the leader removed version 1's tarball as it
    // pruned it (a follower's sweep removes only its own copy).
    let tarballs = cluster.s3.keys("sless/artifacts/");
    assert!(
        !tarballs.is_empty()
            && tarballs
                .iter()
                .all(|k| k.starts_with(&format!("sless/artifacts/{second}/"))),
        "{tarballs:?}"
    );
    assert_eq!(answer(b, "f").await, Some(2));
}

/// Deletes function `name` through `server`.
async fn delete(server: &Server, name: &str) {
    let path = format!("/v1/namespaces/ns/functions/{name}");
    let (status, body) = server.call(Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
}

/// Uploads `zip` to `name` through `server`; returns its code hash.
async fn upload_zip(server: &Server, name: &str, zip: Vec<u8>) -> String {
    let (status, body) = server.upload("ns", name, zip).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body["status"]["code_hash"].as_str().unwrap().to_string()
}

/// A build that reuses the leader's copy of an artifact stores its
/// tarball again when the bucket lost it: here a function is deleted
/// through a follower (whose copy goes), its tarball is removed as a
/// follower's delete removed it before this server, and the function is
/// made again with the same code. The leader's build reused its copy and
/// the tarball it had recorded, and the follower, with no copy and nothing
/// to fetch, answered 503 for good while the status said Ready.
#[tokio::test]
async fn a_build_reusing_an_artifact_whose_tarball_left_the_bucket_stores_it_again() {
    let cluster = replicas(2, &[]).await;
    let (a, b) = (&cluster.servers[0], &cluster.servers[1]);
    create(a, "f").await;
    let hash = upload(a, "f", 5).await;
    a.wait_built("ns", "f", &hash).await;
    assert_eq!(answer(b, "f").await, Some(5));

    delete(b, "f").await;
    let artifacts = cluster.s3.root.path().join(&cluster.s3.bucket).join("sless/artifacts");
    std::fs::remove_dir_all(&artifacts).unwrap();
    create(b, "f").await;
    let hash = upload(b, "f", 5).await;
    let function = a.wait_built("ns", "f", &hash).await;
    let tarball = format!(
        "sless/artifacts/{}/{}.tar.gz",
        function["status"]["artifact"].as_str().unwrap(),
        function["status"]["artifact_digest"].as_str().unwrap()
    );
    assert_eq!(cluster.s3.keys(&tarball), [tarball], "the tarball is stored again");
    for (i, server) in cluster.servers.iter().enumerate() {
        assert_eq!(answer(server, "f").await, Some(5), "replica {i} serves it");
    }
}

/// A delete through a follower leaves the artifact's tarball to the
/// leader: the follower cannot see the leader's builds, and one of them
/// may be reusing the artifact for a version not recorded yet. Here the
/// leader builds `g` from `f`'s code (reusing its artifact, then checking
/// for 4 s that the handler loads) when `f` is deleted through the
/// follower; the follower removed the tarball, then could not fetch it to
/// serve `g`.
#[tokio::test]
async fn a_delete_through_a_follower_leaves_the_tarball_a_build_on_the_leader_reuses() {
    let cluster = replicas(2, &[]).await;
    let (a, b) = (&cluster.servers[0], &cluster.servers[1]);
    let slow_to_load = || {
        zip_of(&[(
            "handler.py",
            b"import time\ntime.sleep(4)\n\ndef handle(event, context):\n    return {'v': 7}\n",
        )])
    };
    create(a, "f").await;
    let hash = upload_zip(a, "f", slow_to_load()).await;
    a.wait_built("ns", "f", &hash).await;

    create(a, "g").await;
    let hash = upload_zip(a, "g", slow_to_load()).await;
    // The build of `g` has reused the artifact and is checking the load
    // (that the delete lands in this window makes the test sensitive, not
    // correct: outside it, it passes either way).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    delete(b, "f").await;
    a.wait_built("ns", "g", &hash).await;
    for (i, server) in cluster.servers.iter().enumerate() {
        assert_eq!(answer(server, "g").await, Some(7), "replica {i} serves it");
    }
}

/// The status and `v` of a call of version `version` of `name` on `server`.
async fn by_number(server: &Server, name: &str, version: u64) -> (StatusCode, Option<u64>) {
    let (status, _, body) = server
        .invoke(Method::GET, &format!("/fn/ns/{name}@{version}"), "")
        .await;
    let v = serde_json::from_str::<Value>(&body).ok().and_then(|b| b["v"].as_u64());
    (status, v)
}

/// Waits until `server` answers calls of `version` of `name` with 404,
/// calling all the while (which keeps a version from idling).
async fn await_no_version(server: &Server, name: &str, version: u64) {
    eventually(Duration::from_secs(5), || async {
        match by_number(server, name, version).await {
            (StatusCode::NOT_FOUND, _) => Ok(()),
            seen => Err(format!("version {version} still answers {seen:?}")),
        }
    })
    .await;
}

/// A version deleted by hand or pruned stops answering by number on
/// every replica within a reconcile period, as on the one that removed
/// it. Another replica that served it called by number went on serving it
/// for as long as calls kept coming (each put its idle retirement off).
#[tokio::test]
async fn a_version_deleted_or_pruned_stops_answering_by_number_on_every_replica() {
    let cluster = replicas(2, &[("SLESS_KEEP_VERSIONS", "2")]).await;
    let (a, b) = (&cluster.servers[0], &cluster.servers[1]);
    create(a, "f").await;
    for v in 1..=2 {
        let hash = upload(a, "f", v).await;
        a.wait_built("ns", "f", &hash).await;
    }
    assert_eq!(by_number(b, "f", 1).await, (StatusCode::OK, Some(1)));
    let (status, body) = a
        .call(Method::DELETE, "/v1/namespaces/ns/functions/f/versions/1", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    await_no_version(b, "f", 1).await;

    let hash = upload(a, "f", 3).await;
    a.wait_built("ns", "f", &hash).await;
    assert_eq!(by_number(b, "f", 2).await, (StatusCode::OK, Some(2)));
    // Version 4 is built: the leader keeps 4 and 3, and prunes 2.
    let hash = upload(a, "f", 4).await;
    a.wait_built("ns", "f", &hash).await;
    await_no_version(b, "f", 2).await;
    assert_eq!(by_number(b, "f", 3).await, (StatusCode::OK, Some(3)));
}

/// An upload that comes while the leader checks that the version built
/// before it loads is kept, then built and served: the rollout's write
/// was made over the status as read after the build, and the newer
/// upload's code was lost (the function stayed Ready on the older code).
#[tokio::test]
async fn an_upload_during_the_load_check_of_the_build_before_is_kept() {
    let gate = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = gate.local_addr().unwrap().port();
    // The gate is on the machine's loopback, which an isolated instance
    // cannot reach.
    let cluster = replicas(2, &[("SLESS_NETWORK_ISOLATION", "false")]).await;
    let leader = &cluster.servers[0];
    create(leader, "gated").await;
    let gated = format!(
        "import socket\n\n_gate = socket.create_connection(('127.0.0.1', {port}))\n_gate.recv(1)\n_gate.close()\n\n\n\
         def handle(event, context):\n    return {{'v': 1}}\n"
    );
    let (status, body) = leader
        .upload("ns", "gated", zip_of(&[("handler.py", gated.as_bytes())]))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    // Built, the first version's load check waits at the gate.
    let (mut held, _) = tokio::time::timeout(Duration::from_secs(120), gate.accept())
        .await
        .expect("the first build's handler reached the gate")
        .unwrap();
    let second = upload(leader, "gated", 2).await;
    tokio::io::AsyncWriteExt::write_all(&mut held, b"go").await.unwrap();
    tokio::spawn(async move {
        while let Ok((next, _)) = gate.accept().await {
            drop(next);
        }
    });
    for (i, server) in cluster.servers.iter().enumerate() {
        eventually(Duration::from_secs(90), || async {
            match answer(server, "gated").await {
                Some(2) => Ok(()),
                other => Err(format!("replica {i} answers {other:?}")),
            }
        })
        .await;
    }
    // Replicas serve a version while it rolls out; Ready comes after.
    let function = leader.wait_built("ns", "gated", &second).await;
    assert_eq!(function["status"]["code_hash"], second.as_str(), "{function}");
}

/// An upload through a follower while the leader builds the one before
/// stops the leader's build at once: the leader reads the function's
/// status in the store while it builds, and the namespace's only build
/// slot goes to the newer upload's build. The old build ran on to its
/// `build_timeout_sec` (an hour here), and the newer upload waited.
#[tokio::test]
async fn an_upload_through_a_follower_stops_the_leader_s_build_it_supersedes() {
    use super::deploys::{build_killed, no_build_left, recorded, BuildGate};
    let gate = BuildGate::start().await;
    // The gate is on the machine's loopback, which an isolated build cannot reach.
    let cluster = replicas(2, &[("SLESS_NS_MAX_BUILDS", "1"), ("SLESS_NETWORK_ISOLATION", "false")]).await;
    let (leader, follower) = (&cluster.servers[0], &cluster.servers[1]);
    let held = gate.hold(leader, "f").await;

    let newer = zip_of(&[("handler.js", b"exports.handle = () => ({v: 2});\n")]);
    let (status, body) = follower.upload("ns", "f", newer).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let hash = body["status"]["code_hash"].as_str().unwrap().to_string();
    leader.wait_built("ns", "f", &hash).await;
    assert_eq!(answer(follower, "f").await, Some(2));
    build_killed(held).await;
    no_build_left(leader, &gate).await;
    assert_eq!(
        recorded(leader, "f").await,
        [(1, hash)],
        "the stopped build made no version"
    );
}
