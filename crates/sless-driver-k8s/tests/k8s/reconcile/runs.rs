//! Job runs as Jobs: a run, and its cancel.

use super::*;

/// Runs job `nightly` (run 4) once on version 1.
async fn run_once(driver: &KubeDriver) -> Result<InvocationResult, InvokeError> {
    driver.run_once(&target(1), &run_id(), &call(5)).await
}

fn run_id() -> RunId {
    RunId {
        namespace: "demo".into(),
        job: "nightly".into(),
        run: 4,
    }
}

/// A run's Job made (checked).
async fn run_job_made(api: &mut ApiServer) {
    let made = api
        .expect("POST", &format!("{BATCH}/jobs"), 201, job("run-nightly-4", json!({})))
        .await;
    assert_eq!(made.body["metadata"]["name"], "run-nightly-4");
    assert_eq!(made.body["metadata"]["labels"]["sless.dev/run"], "4");
    let env = made.body["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .clone();
    assert!(env
        .iter()
        .any(|e| e["name"] == "SLESS_INSTANCE_ONCE" && e["value"] == "true"));
}

#[tokio::test]
async fn a_job_run_is_a_kubernetes_job_whose_pod_is_invoked_once() {
    let mut s = scenario();
    deployed(&mut s).await;
    let pod = fake_instance::start("demo", "hello", 1).await;
    let (result, ()) = tokio::join!(run_once(&s.driver), async {
        run_job_made(&mut s.api).await;
        let pending = json!({"metadata": {"name": "run-pod", "namespace": "sless-fn-demo"},
                             "spec": {"containers": [{"name": "instance"}]}, "status": {"phase": "Pending"}});
        s.api
            .expect("GET", &format!("{CORE}/pods"), 200, pod_list(vec![pending]))
            .await;
        let ready = json!({"metadata": {"name": "run-pod", "namespace": "sless-fn-demo"},
                           "spec": {"containers": [{"name": "instance",
                                    "ports": [{"name": "frames", "containerPort": pod.port()}]}]},
                           "status": {"phase": "Running", "podIP": pod.ip().to_string(),
                                      "conditions": [{"type": "Ready", "status": "True"}]}});
        let listed = s
            .api
            .expect("GET", &format!("{CORE}/pods"), 200, pod_list(vec![ready]))
            .await;
        assert!(listed.query.contains("job-name%3Drun-nightly-4"), "{}", listed.query);
        // The answer is in: the Job goes.
        let deleted = s
            .api
            .expect("DELETE", &format!("{BATCH}/jobs/run-nightly-4"), 200, success())
            .await;
        assert_eq!(deleted.body["propagationPolicy"], "Background");
    });
    let result = result.unwrap();
    assert!(result.cold_start);
    assert_eq!(
        serde_json::from_slice::<Value>(&result.body).unwrap(),
        json!({"event": {"n": 5}})
    );
}

#[tokio::test]
async fn cancelling_a_run_deletes_its_job_and_returns_once_it_is_gone() {
    let mut s = scenario();
    deployed(&mut s).await;
    let (listed_tx, listed_rx) = tokio::sync::oneshot::channel();
    let driver = &s.driver;
    let api = &mut s.api;
    let (run, cancelled, ()) = tokio::join!(
        run_once(driver),
        async {
            listed_rx.await.unwrap();
            driver.cancel_run(&run_id()).await
        },
        async {
            run_job_made(api).await;
            // Its pod is still pending when the cancel comes.
            api.expect("GET", &format!("{CORE}/pods"), 200, pod_list(vec![])).await;
            listed_tx.send(()).unwrap();
            let deleted = api
                .expect("DELETE", &format!("{BATCH}/jobs/run-nightly-4"), 200, success())
                .await;
            assert_eq!(deleted.body["propagationPolicy"], "Foreground");
            api.expect(
                "GET",
                &format!("{BATCH}/jobs/run-nightly-4"),
                200,
                job("run-nightly-4", json!({})),
            )
            .await;
            api.expect("GET", &format!("{BATCH}/jobs/run-nightly-4"), 404, not_found())
                .await;
            api.nothing_more().await;
        }
    );
    cancelled.unwrap();
    assert!(
        matches!(&run, Err(InvokeError::Crashed { reason, .. }) if reason.contains("cancelled")),
        "{run:?}"
    );
}
