//! Scaling by load across replicas: while this replica has calls under
//! way it reports them on the Deployment (an annotation of its own), and
//! sets the replicas from every live replica's report, conditional on the
//! resourceVersion the report's answer carried.

use super::*;
use crate::api_server::respond;

/// How often the scenarios' replica reports and scales.
const EVERY: Duration = Duration::from_millis(100);

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A replica scaling by load with version 1 deployed at `replicas` with
/// `concurrency` and `max_instances` (pinned to `replicas` if `pinned`).
async fn deployed_scaling(concurrency: u32, max_instances: u32, replicas: i32, pinned: bool) -> Scenario {
    let mut s = scenario_serving(
        settings(),
        ServingSettings {
            scale_every: Some(EVERY),
            ..serving_settings(None)
        },
    );
    let mut scaled = spec();
    scaled.concurrency = concurrency;
    scaled.max_instances = max_instances;
    scaled.replicas = pinned.then_some(replicas as u32);
    let deployment = Deployment {
        spec: scaled,
        ..version(1, false)
    };
    let (deployed, ()) = tokio::join!(s.driver.deploy(deployment), async {
        s.api.prepares_namespace_and_anchor().await;
        s.api.applies_version(1, replicas).await;
    });
    deployed.unwrap();
    s
}

/// One call under way for 400 ms while `api` plays the reports: the first
/// answered with `other` (another replica's report) beside this one's and
/// the Deployment at `replicas`, resourceVersion "20". Returns the scale
/// this replica then asked for (`None`: none), after the report that takes
/// this replica's back once its call is over.
async fn one_call_with(s: &mut Scenario, other: &str, replicas: i32) -> Option<Value> {
    let pod = fake_instance::start("demo", "hello", 1).await;
    let slow = Invocation {
        event: Some(json!({"sleep_ms": 400})),
        ..call(1)
    };
    let (driver, api) = (&s.driver, &mut s.api);
    let version = target(1);
    let (result, scaled) = tokio::join!(driver.invoke(&version, &slow), async {
        api.lists_endpoints(std::slice::from_ref(&pod)).await;
        let report = format!("{APPS}/deployments/fn-hello-v1");
        let scale_path = format!("{APPS}/deployments/fn-hello-v1/scale");
        let mut scaled = None;
        let mut replicas = replicas;
        loop {
            let (method, path, seen, send) = api.next("a report or a scale").await;
            assert_eq!(method, "PATCH", "{path}");
            assert_eq!(seen.content_type, "application/merge-patch+json");
            if path == scale_path {
                assert!(scaled.is_none(), "scaled twice: {}", seen.body);
                replicas = seen.body["spec"]["replicas"].as_i64().unwrap() as i32;
                respond(send, 200, scale("fn-hello-v1", replicas, "21"));
                scaled = Some(seen.body);
                continue;
            }
            assert_eq!(path, report);
            let annotations = seen.body["metadata"]["annotations"].as_object().unwrap().clone();
            assert_eq!(annotations.len(), 1, "one report, this replica's: {annotations:?}");
            let (mine, value) = annotations.iter().next().unwrap();
            assert!(mine.starts_with("sless.dev/inflight-"), "{mine}");
            if value.is_null() {
                // The call is over: the report is taken back, nothing scales.
                respond(send, 200, deployment("fn-hello-v1", 1, replicas, json!({})));
                return scaled;
            }
            let (calls, at) = value.as_str().unwrap().split_once('@').unwrap();
            assert_eq!(calls, "1");
            assert!(now_ms().abs_diff(at.parse().unwrap()) < 10_000, "{at}");
            let mut answer = deployment("fn-hello-v1", 1, replicas, json!({}));
            answer["metadata"]["resourceVersion"] = json!(if scaled.is_some() { "22" } else { "20" });
            answer["metadata"]["annotations"] = json!({mine: value, "sless.dev/inflight-other": other});
            respond(send, 200, answer);
        }
    });
    assert_eq!(result.unwrap().status, 200);
    scaled
}

#[tokio::test]
async fn the_calls_of_two_replicas_over_the_concurrency_give_the_replicas() {
    let mut s = deployed_scaling(2, 10, 1, false).await;
    // 1 call here, 4 on the other replica, 2 per pod: 3 pods.
    let other = format!("4@{}", now_ms());
    let scaled = one_call_with(&mut s, &other, 1).await;
    assert_eq!(
        scaled,
        Some(json!({"metadata": {"resourceVersion": "20"}, "spec": {"replicas": 3}}))
    );
}

#[tokio::test]
async fn scaling_by_load_stops_at_max_instances() {
    let mut s = deployed_scaling(2, 3, 1, false).await;
    let other = format!("40@{}", now_ms());
    let scaled = one_call_with(&mut s, &other, 1).await;
    assert_eq!(
        scaled,
        Some(json!({"metadata": {"resourceVersion": "20"}, "spec": {"replicas": 3}}))
    );
}

#[tokio::test]
async fn pinned_replicas_are_not_scaled_by_load() {
    let mut s = deployed_scaling(2, 10, 2, true).await;
    let other = format!("40@{}", now_ms());
    assert_eq!(one_call_with(&mut s, &other, 2).await, None);
}

#[tokio::test]
async fn the_stale_report_of_a_dead_replica_counts_for_nothing() {
    let mut s = deployed_scaling(2, 10, 1, false).await;
    // Reported a minute ago, never again: that replica is gone.
    let other = format!("40@{}", now_ms() - 60_000);
    assert_eq!(one_call_with(&mut s, &other, 1).await, None);
}

#[tokio::test]
async fn fewer_calls_than_pods_scale_the_version_down_to_what_they_need() {
    let mut s = deployed_scaling(2, 10, 5, false).await;
    // 1 call here, 2 there: 2 pods of the 5.
    let other = format!("2@{}", now_ms());
    let scaled = one_call_with(&mut s, &other, 5).await;
    assert_eq!(
        scaled,
        Some(json!({"metadata": {"resourceVersion": "20"}, "spec": {"replicas": 2}}))
    );
}
