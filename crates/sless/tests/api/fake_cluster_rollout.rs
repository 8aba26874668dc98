//! A rollout under load on the fake cluster (crates/sless-fake-cluster:
//! **a stand-in for the Kubernetes API server and kubelet**, whose pods
//! are real `sless instance` processes): callers keep calling through two
//! driver replicas while a new version is deployed, made the one called,
//! and the old one retired, as a server does when `$latest` moves on.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sless_driver::{Driver, VersionRef};
use sless_driver_k8s::KubeDriver;
use sless_fake_cluster::key;

use super::fake_cluster::{invoke, start};

/// Callers at once, each alternating between the two replicas.
const CALLERS: usize = 8;

/// One call as a caller saw it.
struct Call {
    /// The version called, and whether the new one was serving already.
    called: u64,
    after_switch: bool,
    /// The version that answered, or why none did.
    answer: Result<String, String>,
    /// Started before the old version was retired and ended after.
    across_retire: bool,
}

/// Calls whatever version `current` names until `stop`, through `replicas` in turn.
async fn caller(
    replicas: [Arc<KubeDriver>; 2],
    current: Arc<AtomicU64>,
    switched: Arc<AtomicBool>,
    retired: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicUsize>,
) -> Vec<Call> {
    let mut calls = Vec::new();
    for turn in 0usize.. {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let after_switch = switched.load(Ordering::SeqCst);
        let called = current.load(Ordering::SeqCst);
        let before_retire = !retired.load(Ordering::SeqCst);
        // The handler takes a little while, so calls are in flight when the old version goes.
        let answer = invoke(&replicas[turn % 2], called, json!({"sleep": 0.05}))
            .await
            .map(|answer| answer["which"].as_str().unwrap_or_default().to_string())
            .map_err(|e| e.to_string());
        calls.push(Call {
            called,
            after_switch,
            answer,
            across_retire: before_retire && retired.load(Ordering::SeqCst),
        });
        done.fetch_add(1, Ordering::SeqCst);
    }
    calls
}

#[tokio::test]
async fn a_new_version_rolls_out_under_load_with_no_failed_call_and_no_stale_answer() {
    let cluster = start().await;
    let (a, b) = (Arc::new(cluster.replica()), Arc::new(cluster.replica()));
    // Version 1 serves, woken from zero, both replicas knowing its pod.
    for replica in [&a, &b] {
        replica.deploy(cluster.version(1)).await.unwrap();
        invoke(replica, 1, json!({})).await.unwrap();
    }
    let done = Arc::new(AtomicUsize::new(0));
    let current = Arc::new(AtomicU64::new(1));
    let [switched, retired, stop] = [(); 3].map(|()| Arc::new(AtomicBool::new(false)));
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            tokio::spawn(caller(
                [a.clone(), b.clone()],
                current.clone(),
                switched.clone(),
                retired.clone(),
                stop.clone(),
                done.clone(),
            ))
        })
        .collect();
    let served = |n: u64| cluster.pids(n).len();
    super::harness::eventually(Duration::from_secs(30), || async {
        match done.load(Ordering::SeqCst) {
            n if n >= 2 * CALLERS => Ok(()),
            n => Err(format!("{n} calls answered so far")),
        }
    })
    .await;
    // The new version: deployed on both replicas (verified on one: it
    // returns once its pods are ready), then called, then the old one retired.
    a.deploy(sless_driver::Deployment {
        verify: true,
        ..cluster.version(2)
    })
    .await
    .unwrap();
    b.deploy(cluster.version(2)).await.unwrap();
    current.store(2, Ordering::SeqCst);
    switched.store(true, Ordering::SeqCst);
    for replica in [&a, &b] {
        replica.retire(&VersionRef::new(key(), 1)).await.unwrap();
    }
    retired.store(true, Ordering::SeqCst);
    // Calls go on on the new version alone until the old pods, told to
    // stop, have answered what they had and ended.
    assert_eq!(served(1), 0, "the old version's pods are out of its EndpointSlice");
    super::harness::eventually(Duration::from_secs(30), || async {
        match cluster.stopping() {
            0 => Ok(()),
            n => Err(format!("{n} old pods still draining")),
        }
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    let mut calls = Vec::new();
    for caller in callers {
        calls.extend(caller.await.unwrap());
    }
    let failed: Vec<&String> = calls.iter().filter_map(|c| c.answer.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "{} of {} calls failed: {failed:?}",
        failed.len(),
        calls.len()
    );
    for call in &calls {
        let answer = call.answer.as_ref().unwrap();
        assert_eq!(
            *answer,
            format!("v{}", call.called),
            "an answer from the version called"
        );
        if call.after_switch {
            assert_eq!(answer, "v2", "no stale answer once the new version serves");
        }
    }
    let count = |check: fn(&Call) -> bool| calls.iter().filter(|c| check(c)).count();
    assert!(
        count(|c| !c.after_switch) > 0 && count(|c| c.after_switch) > 0,
        "calls on both sides of the switch"
    );
    assert!(
        count(|c| c.called == 1 && c.across_retire) > 0,
        "some calls of the old version were in flight while it was retired"
    );
}
