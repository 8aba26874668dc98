//! Job runs on the fake cluster (crates/sless-fake-cluster: **a stand-in
//! for the Kubernetes API server and kubelet**, whose pods are real
//! `sless instance` processes): each run is a Kubernetes Job whose pod is
//! a one-shot instance the driver invokes once with the run's event; the
//! Job is deleted when the answer is in, or when the run is cancelled.

use std::time::Duration;

use serde_json::{json, Value};
use sless_driver::{Driver, InvocationResult, InvokeError, RunId, VersionRef};
use sless_driver_k8s::KubeDriver;
use sless_fake_cluster::key;

use super::fake_cluster::start;
use super::harness::{event_call, eventually};

fn run(n: u64) -> RunId {
    RunId {
        namespace: "demo".into(),
        job: "nightly".into(),
        run: n,
    }
}

/// Runs version 1 once as `run`, with `event`.
async fn run_once(driver: &KubeDriver, run: &RunId, event: Value) -> Result<InvocationResult, InvokeError> {
    driver
        .run_once(&VersionRef::new(key(), 1), run, &event_call("run", event))
        .await
}

/// The answer comes from a pod of the run's own (the version's Deployment
/// stays at zero), and the Job is gone once it is in.
#[tokio::test]
async fn a_job_run_answers_from_a_pod_of_its_own_and_its_job_is_deleted() {
    let cluster = start().await;
    let driver = cluster.replica();
    driver.deploy(cluster.version(1)).await.unwrap();
    let result = run_once(&driver, &run(1), json!({})).await.unwrap();
    assert_eq!(result.status, 200, "{}", String::from_utf8_lossy(&result.body));
    let answer: Value = serde_json::from_slice(&result.body).unwrap();
    assert_eq!(answer["which"], "v1");
    assert_eq!(result.version, 1);
    assert!(cluster.pids(1).is_empty(), "no serving pod was started for the run");
    assert_eq!(cluster.jobs(), vec![], "the run's Job is deleted after its answer");
}

/// A handler that raises: the run's result is the error, as on the local
/// driver (500, the exception in the body, the traceback in the logs).
#[tokio::test]
async fn a_job_run_whose_handler_raises_reports_the_error() {
    let cluster = start().await;
    let driver = cluster.replica();
    driver.deploy(cluster.version(1)).await.unwrap();
    let result = run_once(&driver, &run(2), json!({"raise": "the table is missing"}))
        .await
        .unwrap();
    assert_eq!(result.status, 500);
    let body: Value = serde_json::from_slice(&result.body).unwrap();
    assert_eq!(body["error"], "ValueError: the table is missing", "{body}");
    let logs: String = result.logs.iter().map(|chunk| chunk.text.as_str()).collect();
    assert!(logs.contains("Traceback"), "{logs}");
    assert_eq!(cluster.jobs(), vec![]);
}

/// Cancelling a run from another replica deletes its Job: its pod (the
/// handler's process too) is gone, the run's call ends without an answer.
#[tokio::test]
async fn cancelling_a_job_run_deletes_its_job_and_stops_its_pod() {
    let cluster = start().await;
    let (a, b) = (cluster.replica(), cluster.replica());
    a.deploy(cluster.version(1)).await.unwrap();
    let marks = tempfile::tempdir().unwrap();
    let mark = marks.path().join("in-the-handler");
    let cancelled = run(3);
    let running = run_once(&a, &cancelled, json!({"mark": mark}));
    tokio::pin!(running);
    let reached = eventually(Duration::from_secs(30), || async {
        let pid = std::fs::read_to_string(&mark).unwrap_or_default();
        pid.parse::<u32>()
            .map_err(|_| "the run has not reached its handler".to_string())
    });
    let handler = tokio::select! {
        ended = &mut running => panic!("the run ended before its handler was reached: {ended:?}"),
        handler = reached => handler,
    };
    let cancel = async {
        assert_eq!(cluster.jobs().len(), 1, "the run's Job is there while it runs");
        b.cancel_run(&cancelled).await.unwrap();
        assert_eq!(cluster.jobs(), vec![], "cancelled: its Job is gone");
    };
    let (ended, ()) = tokio::join!(running, cancel);
    assert!(matches!(ended, Err(InvokeError::Crashed { .. })), "{ended:?}");
    // The handler went with its pod (dead, or dead and not yet reaped).
    eventually(Duration::from_secs(10), || async {
        match std::fs::read_to_string(format!("/proc/{handler}/stat")) {
            Err(_) => Ok(()),
            Ok(stat)
                if stat
                    .rsplit(')')
                    .next()
                    .unwrap_or_default()
                    .trim_start()
                    .starts_with('Z') =>
            {
                Ok(())
            }
            Ok(stat) => Err(format!("the handler still runs: {stat}")),
        }
    })
    .await;
}
