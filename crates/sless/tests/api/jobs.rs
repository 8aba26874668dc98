//! Jobs over real HTTP: Skipped at run_id 0, runs and reruns, results and
//! failures, the function's timeout, stopping by deletion, and a restart
//! during a run.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::harness::{eventually, Backend, Server};

const WORKER: &[u8] = br#"
import os, time

INSTANCE = os.urandom(6).hex()

def handle(event, context):
    if event.get("fail"):
        raise RuntimeError("job failed on purpose")
    if event.get("sleep"):
        time.sleep(event["sleep"])
    if event.get("big"):
        return {"blob": "x" * event["big"]}
    return {"doubled": event.get("n", 0) * 2, "trigger": context.trigger, "instance": INSTANCE}
"#;

async fn setup(backend: Backend) -> Server {
    let server = Server::start(backend).await;
    server
        .deploy(
            "ns",
            "worker",
            json!({"runtime": "python3.11", "timeout_sec": 3}),
            &[("handler.py", WORKER)],
        )
        .await;
    server
}

async fn finished(server: &Server, name: &str) -> Value {
    server
        .wait_for(&format!("/v1/namespaces/ns/jobs/{name}"), 60, |j| {
            matches!(j["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
        })
        .await
}

crate::both_stores!(
    jobs_skip_run_and_rerun,
    raises_at_once_keep_the_highest_run,
    a_large_result_is_kept_out_of_lists
);

async fn jobs_skip_run_and_rerun(backend: Backend) {
    let server = setup(backend).await;
    let (status, job) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/jobs",
            Some(json!({"name": "double", "function": "worker", "event": {"n": 21}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    assert_eq!(job["status"]["phase"], "Skipped", "run_id 0 creates without running");
    // (The record count after two runs, below, shows it never ran.)
    assert!(server.records("ns", "worker").await.is_empty(), "nothing ran");

    let (status, job) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/jobs/double",
            Some(json!({"run_id": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{job}");
    let done = finished(&server, "double").await;
    assert_eq!(done["status"]["phase"], "Succeeded", "{done}");
    assert_eq!(done["status"]["run_id"], 1);
    assert_eq!(done["status"]["result"]["doubled"], 42);
    assert_eq!(done["status"]["result"]["trigger"], "job");
    assert!(done["status"]["started_at"].is_string() && done["status"]["finished_at"].is_string());
    let first_instance = done["status"]["result"]["instance"].clone();

    // The serving pool is not where jobs run.
    let (_, _, text) = server.invoke(Method::POST, "/fn/ns/worker", "{}").await;
    let served: Value = serde_json::from_str(&text).unwrap();
    assert_ne!(served["instance"], first_instance);

    // Rerun with a new event; a lower run_id is refused.
    server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/jobs/double",
            Some(json!({"run_id": 2, "event": {"n": 5}})),
        )
        .await;
    let done = server
        .wait_for("/v1/namespaces/ns/jobs/double", 60, |j| {
            j["status"]["run_id"] == 2 && j["status"]["phase"] == "Succeeded"
        })
        .await;
    assert_eq!(done["status"]["result"]["doubled"], 10);
    assert_ne!(
        done["status"]["result"]["instance"], first_instance,
        "each run has its own instance"
    );
    let (status, err) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/jobs/double",
            Some(json!({"run_id": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(err["error"].as_str().unwrap().contains("only go up"), "{err}");

    // Every run is an invocation record like any other.
    let jobs: Vec<Value> = eventually(Duration::from_secs(5), || async {
        let jobs: Vec<Value> = server
            .records("ns", "worker")
            .await
            .into_iter()
            .filter(|r| r["trigger"] == "job")
            .collect();
        if jobs.len() >= 2 {
            Ok(jobs)
        } else {
            Err(format!("{} job records", jobs.len()))
        }
    })
    .await;
    assert_eq!(jobs.len(), 2);
    assert_eq!(jobs[0]["status"], "ok");
    assert_eq!(
        jobs[0]["id"], done["status"]["invocation_id"],
        "the job names its invocation record"
    );

    let (status, err) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/jobs",
            Some(json!({"name": "orphan", "function": "missing"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
}

#[tokio::test]
async fn failures_and_timeouts_end_failed() {
    let server = setup(Backend::Sqlite).await;
    server
        .call(
            Method::POST,
            "/v1/namespaces/ns/jobs",
            Some(json!({"name": "boom", "function": "worker", "run_id": 1, "event": {"fail": true}})),
        )
        .await;
    let done = finished(&server, "boom").await;
    assert_eq!(done["status"]["phase"], "Failed");
    assert!(
        done["status"]["error"]
            .as_str()
            .unwrap()
            .contains("job failed on purpose"),
        "{done}"
    );

    server
        .call(
            Method::POST,
            "/v1/namespaces/ns/jobs",
            Some(json!({"name": "slow", "function": "worker", "run_id": 1, "event": {"sleep": 10}})),
        )
        .await;
    let done = finished(&server, "slow").await;
    assert_eq!(done["status"]["phase"], "Failed");
    assert!(
        done["status"]["error"].as_str().unwrap().contains("timed out"),
        "function's timeout applies: {done}"
    );
}

/// Sandboxes of this server with a process alive.
fn sandboxes(server: &Server) -> usize {
    // A sandbox's processes share a control group of the server's; a fork
    // of the Python zygote has no slot path on its command line to find.
    let marker = format!("/sless-{}/", server.pid());
    let mut groups = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path().join("cgroup")) else {
            continue;
        };
        groups.extend(
            text.lines()
                .filter_map(|l| l.split_once(&marker).map(|(_, group)| group.to_string())),
        );
    }
    groups.len()
}

#[tokio::test]
async fn deleting_a_running_job_stops_it() {
    let server = setup(Backend::Sqlite).await;
    server
        .deploy(
            "ns",
            "worker",
            json!({"runtime": "python3.11", "timeout_sec": 60}),
            &[("handler.py", WORKER)],
        )
        .await;
    // Settled: the deploy's checked instance gone, the warm pool full (the
    // same count ten looks in a row).
    let mut last = (usize::MAX, 0);
    let idle = eventually(Duration::from_secs(20), || {
        let now = sandboxes(&server);
        last = if now == last.0 { (now, last.1 + 1) } else { (now, 1) };
        let seen = last;
        async move {
            if seen.1 >= 10 {
                Ok(seen.0)
            } else {
                Err(format!("{} sandboxes, not settled", seen.0))
            }
        }
    })
    .await;
    server
        .call(
            Method::POST,
            "/v1/namespaces/ns/jobs",
            Some(json!({"name": "long", "function": "worker", "run_id": 1, "event": {"sleep": 50}})),
        )
        .await;
    server
        .wait_for("/v1/namespaces/ns/jobs/long", 30, |j| j["status"]["phase"] == "Running")
        .await;
    eventually(Duration::from_secs(10), || async {
        match sandboxes(&server) {
            n if n > idle => Ok(()),
            n => Err(format!("{n} sandboxes: the run has no instance of its own")),
        }
    })
    .await;
    let (status, _) = server.call(Method::DELETE, "/v1/namespaces/ns/jobs/long", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    eventually(Duration::from_secs(10), || async {
        match sandboxes(&server) {
            n if n <= idle => Ok(()),
            n => Err(format!("the job's instance kept running after delete ({n} sandboxes)")),
        }
    })
    .await;
}

#[tokio::test]
async fn a_restart_during_a_run_ends_it_failed() {
    let mut server = setup(Backend::Sqlite).await;
    server
        .deploy(
            "ns",
            "worker",
            json!({"runtime": "python3.11", "timeout_sec": 60}),
            &[("handler.py", WORKER)],
        )
        .await;
    server
        .call(
            Method::POST,
            "/v1/namespaces/ns/jobs",
            Some(json!({"name": "cut", "function": "worker", "run_id": 1, "event": {"sleep": 30}})),
        )
        .await;
    server
        .wait_for("/v1/namespaces/ns/jobs/cut", 30, |j| j["status"]["phase"] == "Running")
        .await;
    server.restart();
    let (_, job) = server.call(Method::GET, "/v1/namespaces/ns/jobs/cut", None).await;
    assert_eq!(job["status"]["phase"], "Failed", "{job}");
    assert!(
        job["status"]["error"].as_str().unwrap().contains("interrupted"),
        "{job}"
    );
    // Raising run_id runs it again.
    server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/jobs/cut",
            Some(json!({"run_id": 2, "event": {"n": 1}})),
        )
        .await;
    let done = server
        .wait_for("/v1/namespaces/ns/jobs/cut", 60, |j| {
            j["status"]["run_id"] == 2 && j["status"]["phase"] == "Succeeded"
        })
        .await;
    assert_eq!(done["status"]["result"]["doubled"], 2);

    // Stopped (SIGTERM), the server says the run was interrupted, not
    // that the function crashed as its instance went.
    server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/jobs/cut",
            Some(json!({"run_id": 3, "event": {"sleep": 30}})),
        )
        .await;
    server
        .wait_for("/v1/namespaces/ns/jobs/cut", 30, |j| {
            j["status"]["run_id"] == 3 && j["status"]["phase"] == "Running"
        })
        .await;
    assert!(server.terminate_wait().success());
    server.spawn();
    let (_, job) = server.call(Method::GET, "/v1/namespaces/ns/jobs/cut", None).await;
    assert_eq!(job["status"]["phase"], "Failed", "{job}");
    assert!(
        job["status"]["error"]
            .as_str()
            .unwrap()
            .contains("interrupted: the server running it stopped"),
        "{job}"
    );
}

/// Raises of `run_id` sent at once are taken one after the other: the
/// highest one stays, a lower one that comes after it is refused (it used
/// to be written over it, and the job stayed Pending for a run that was
/// never started), and the job runs the run it shows.
async fn raises_at_once_keep_the_highest_run(backend: Backend) {
    let server = setup(backend).await;
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/jobs",
            Some(json!({"name": "race", "function": "worker", "run_id": 0})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let mut highest = 0;
    for round in 1..=5u64 {
        let ids: Vec<u64> = (0..6).map(|n| round * 100 + (n * 37) % 11).collect();
        highest = *ids.iter().max().unwrap();
        let patches = ids.iter().map(|&id| {
            server.call(
                Method::PATCH,
                "/v1/namespaces/ns/jobs/race",
                Some(json!({"run_id": id})),
            )
        });
        for (status, body) in futures::future::join_all(patches).await {
            match status {
                StatusCode::OK => assert!(body["run_id"].as_u64().unwrap() <= highest, "{body}"),
                StatusCode::BAD_REQUEST => assert!(
                    body["error"].as_str().unwrap().contains("run_id can only go up"),
                    "{body}"
                ),
                _ => panic!("{status}: {body}"),
            }
        }
        let (_, job) = server.call(Method::GET, "/v1/namespaces/ns/jobs/race", None).await;
        assert_eq!(job["run_id"], highest, "round {round}: {job}");
    }
    let job = server
        .wait_for("/v1/namespaces/ns/jobs/race", 60, |j| {
            j["status"]["run_id"] == highest && matches!(j["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
        })
        .await;
    assert_eq!(
        (job["status"]["phase"].as_str(), job["status"]["run_id"].as_u64()),
        (Some("Succeeded"), Some(highest)),
        "{job}"
    );
}

/// A result over 8 KiB is kept apart from the job's record: a list of jobs
/// (which the leader and every quota check read too) says only its size,
/// and the job's own GET has it whole. A small one stays in both.
async fn a_large_result_is_kept_out_of_lists(backend: Backend) {
    let server = setup(backend).await;
    for (name, big) in [("large", 200_000), ("small", 100)] {
        let (status, body) = server
            .call(
                Method::POST,
                "/v1/namespaces/ns/jobs",
                Some(json!({"name": name, "function": "worker", "run_id": 1, "event": {"big": big}})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let job = finished(&server, name).await;
        assert_eq!(job["status"]["phase"], "Succeeded", "{job}");
        assert_eq!(
            job["status"]["result"]["blob"].as_str().unwrap().len(),
            big,
            "GET has it whole"
        );
    }
    let (status, list) = server.call(Method::GET, "/v1/namespaces/ns/jobs", None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert!(
        list.to_string().len() < 16 * 1024,
        "the list holds {} bytes",
        list.to_string().len()
    );
    let items = list["items"].as_array().unwrap();
    let large = items.iter().find(|j| j["name"] == "large").unwrap();
    assert!(large["status"]["result"].is_null(), "{large}");
    assert!(large["status"]["result_bytes"].as_u64().unwrap() > 200_000, "{large}");
    let small = items.iter().find(|j| j["name"] == "small").unwrap();
    assert_eq!(
        small["status"]["result"]["blob"].as_str().unwrap().len(),
        100,
        "{small}"
    );
    // A new run with a small result leaves nothing of the large one.
    let (status, body) = server
        .call(
            Method::PATCH,
            "/v1/namespaces/ns/jobs/large",
            Some(json!({"run_id": 2, "event": {"big": 10}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let job = server
        .wait_for("/v1/namespaces/ns/jobs/large", 60, |j| {
            j["status"]["run_id"] == 2 && j["status"]["phase"] == "Succeeded"
        })
        .await;
    assert_eq!(job["status"]["result"], json!({"blob": "x".repeat(10)}), "{job}");
    assert!(job["status"].get("result_bytes").is_none(), "{job}");
}
