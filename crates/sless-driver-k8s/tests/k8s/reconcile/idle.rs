//! Back to zero after the idle period: this replica reports its last call
//! on the Deployment, and scales the version to zero only once the
//! annotation (every replica's report) is as old as the idle period.

use super::*;

const IDLE: Duration = Duration::from_millis(300);

fn with_last_call(last_call_ms: u64, replicas: i32, resource_version: &str) -> Value {
    let mut deployment = deployment("fn-hello-v1", 1, replicas, json!({}));
    deployment["metadata"]["resourceVersion"] = json!(resource_version);
    deployment["metadata"]["annotations"] = json!({"sless.dev/last-call": last_call_ms.to_string()});
    deployment
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[tokio::test]
async fn an_idle_version_goes_to_zero_once_no_replica_has_had_a_call() {
    let mut s = scenario_with(Some(IDLE));
    deployed(&mut s).await;
    let api = &mut s.api;
    // This replica says when it last had a call (the deploy counts as one).
    let reported = api
        .expect(
            "PATCH",
            &format!("{APPS}/deployments/fn-hello-v1"),
            200,
            deployment("fn-hello-v1", 1, 1, json!({})),
        )
        .await;
    assert_eq!(reported.content_type, "application/merge-patch+json");
    let last_call: u64 = reported.body["metadata"]["annotations"]["sless.dev/last-call"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(now_ms().abs_diff(last_call) < 10_000, "{last_call}");
    // Idle here, but another replica had a call just now: it stays.
    api.expect(
        "GET",
        &format!("{APPS}/deployments/fn-hello-v1"),
        200,
        with_last_call(now_ms(), 1, "8"),
    )
    .await;
    // Idle everywhere: to zero, if nobody scaled it meanwhile.
    api.expect(
        "GET",
        &format!("{APPS}/deployments/fn-hello-v1"),
        200,
        with_last_call(last_call, 1, "9"),
    )
    .await;
    let scaled = api
        .expect(
            "PATCH",
            &format!("{APPS}/deployments/fn-hello-v1/scale"),
            200,
            scale("fn-hello-v1", 0, "10"),
        )
        .await;
    assert_eq!(
        scaled.body,
        json!({"metadata": {"resourceVersion": "9"}, "spec": {"replicas": 0}})
    );
    // At zero it stays there.
    api.expect(
        "GET",
        &format!("{APPS}/deployments/fn-hello-v1"),
        200,
        with_last_call(last_call, 0, "10"),
    )
    .await;
}

/// A call that wakes a version from zero is noted on the Deployment
/// before the scale: another replica's idle pass that read the Deployment
/// earlier cannot scale the new pod away (its scale names an older
/// resourceVersion), and one that reads it later sees the call.
#[tokio::test]
async fn a_wake_from_zero_notes_its_call_before_it_scales() {
    // Idle scaling on, but its pass far off: only the call's requests come.
    let mut s = scenario_with(Some(Duration::from_secs(3600)));
    deployed(&mut s).await;
    let pod = fake_instance::start("demo", "hello", 1).await;
    let (result, ()) = tokio::join!(invoke(&s.driver, 1, 7), async {
        s.api.lists_endpoints(&[]).await;
        let noted = s
            .api
            .expect(
                "PATCH",
                &format!("{APPS}/deployments/fn-hello-v1"),
                200,
                deployment("fn-hello-v1", 1, 0, json!({})),
            )
            .await;
        assert_eq!(noted.content_type, "application/merge-patch+json");
        let last_call: u64 = noted.body["metadata"]["annotations"]["sless.dev/last-call"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(now_ms().abs_diff(last_call) < 10_000, "{last_call}");
        s.api
            .expect(
                "GET",
                &format!("{APPS}/deployments/fn-hello-v1/scale"),
                200,
                scale("fn-hello-v1", 0, "41"),
            )
            .await;
        s.api
            .expect(
                "PATCH",
                &format!("{APPS}/deployments/fn-hello-v1/scale"),
                200,
                scale("fn-hello-v1", 1, "42"),
            )
            .await;
        s.api.lists_endpoints(&[pod]).await;
    });
    assert!(result.unwrap().cold_start);
}
