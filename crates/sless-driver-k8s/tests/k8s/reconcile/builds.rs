//! Builds as Jobs: success, failure, timeout.

use super::*;

fn build_job(archive: &[u8]) -> BuildJob {
    BuildJob {
        key: key(),
        runtime: Runtime::Python311,
        code_hash: "c0de".repeat(16),
        archive: Bytes::copy_from_slice(archive),
        timeout: Duration::from_secs(120),
    }
}

/// The build Job's name and the artifact it builds.
async fn build_names(s: &Scenario) -> (String, Fingerprint) {
    let artifact = s
        .driver
        .fingerprint(Runtime::Python311, &"c0de".repeat(16))
        .await
        .unwrap();
    (format!("build-hello-{}", &artifact.as_str()[..12]), artifact)
}

/// A build Job made (checked), then found running, then ended as `status` says.
async fn build_runs(api: &mut ApiServer, name: &str, ended: Value) {
    api.prepares_namespace_and_anchor().await;
    let made = api
        .expect("POST", &format!("{BATCH}/jobs"), 201, job(name, json!({})))
        .await;
    assert_eq!(made.body["metadata"]["name"], name);
    assert_eq!(made.body["spec"]["activeDeadlineSeconds"], 120);
    assert_eq!(made.body["metadata"]["ownerReferences"][0]["uid"], "uid-of-fn-hello");
    let env = &made.body["spec"]["template"]["spec"]["containers"][0]["env"];
    let archive = env
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "SLESS_BUILD_ARCHIVE")
        .unwrap();
    assert!(archive["value"].as_str().unwrap().starts_with("builds/"), "{archive}");
    api.expect(
        "GET",
        &format!("{BATCH}/jobs/{name}"),
        200,
        job(name, json!({"active": 1})),
    )
    .await;
    api.expect("GET", &format!("{BATCH}/jobs/{name}"), 200, job(name, ended))
        .await;
}

#[tokio::test]
async fn a_build_runs_as_a_job_and_its_pod_reports_the_artifact_digest() {
    let mut s = scenario();
    let (name, artifact) = build_names(&s).await;
    let (built, ()) = tokio::join!(s.driver.build(build_job(b"zip bytes")), async {
        build_runs(
            &mut s.api,
            &name,
            json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}),
        )
        .await;
        let pods = s
            .api
            .expect(
                "GET",
                &format!("{CORE}/pods"),
                200,
                pod_list(vec![ended_pod("build-pod", "build", 0, DIGEST)]),
            )
            .await;
        assert!(
            pods.query.contains(&format!("batch.kubernetes.io%2Fjob-name%3D{name}")),
            "{}",
            pods.query
        );
        let log = s
            .api
            .expect(
                "GET",
                &format!("{CORE}/pods/build-pod/log"),
                200,
                json!("Successfully installed requests\n"),
            )
            .await;
        assert!(log.query.contains("tailLines=40"), "{}", log.query);
    });
    let built = built.unwrap();
    assert_eq!(built.artifact, artifact);
    assert_eq!(built.digest.as_deref(), Some(DIGEST));
    assert!(built.log_tail.contains("Successfully installed"));
    // The archive waited in the object store for the Job only.
    let left: Vec<_> = futures::TryStreamExt::try_collect::<Vec<_>>(s.store.list(None))
        .await
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
    // Once the artifact is stored, a build of the same code asks nothing.
    let key = object_store::path::Path::from(format!("artifacts/{artifact}/{DIGEST}.tar.gz"));
    s.store.put(&key, Bytes::from_static(b"tarball").into()).await.unwrap();
    assert!(s.driver.has_artifact(&artifact).await.unwrap());
    let (again, ()) = tokio::join!(s.driver.build(build_job(b"zip bytes")), s.api.nothing_more());
    assert_eq!(again.unwrap().digest.as_deref(), Some(DIGEST));
    s.driver.remove_artifact(&artifact).await.unwrap();
    assert!(!s.driver.has_artifact(&artifact).await.unwrap());
}

#[tokio::test]
async fn a_failed_build_reports_its_log_tail() {
    let mut s = scenario();
    let (name, _) = build_names(&s).await;
    let (built, ()) = tokio::join!(s.driver.build(build_job(b"zip bytes")), async {
        build_runs(
            &mut s.api,
            &name,
            json!({"failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}),
        )
        .await;
        s.api
            .expect(
                "GET",
                &format!("{CORE}/pods"),
                200,
                pod_list(vec![ended_pod("build-pod", "build", 1, "pip failed")]),
            )
            .await;
        s.api
            .expect(
                "GET",
                &format!("{CORE}/pods/build-pod/log"),
                200,
                json!("ERROR: No matching distribution found for nosuchpkg\n"),
            )
            .await;
    });
    let Err(BuildError::Failed { log_tail }) = built else {
        panic!("a failed build, not {built:?}")
    };
    assert!(
        log_tail.contains("No matching distribution found for nosuchpkg"),
        "{log_tail}"
    );
}

#[tokio::test]
async fn a_build_past_its_deadline_times_out() {
    let mut s = scenario();
    let (name, _) = build_names(&s).await;
    let (built, ()) = tokio::join!(s.driver.build(build_job(b"zip bytes")), async {
        build_runs(
            &mut s.api,
            &name,
            json!({"failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
                   "message": "Job was active longer than specified deadline"}]}),
        )
        .await;
        // Its pod was stopped and is gone.
        s.api
            .expect("GET", &format!("{CORE}/pods"), 200, pod_list(vec![]))
            .await;
    });
    let Err(BuildError::TimedOut { after, log_tail }) = built else {
        panic!("a timeout, not {built:?}")
    };
    assert_eq!(after, Duration::from_secs(120));
    assert!(log_tail.contains("longer than specified deadline"), "{log_tail}");
}
