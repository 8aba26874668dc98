//! Rollouts under load on the fake cluster (crates/sless-fake-cluster:
//! **a stand-in for the Kubernetes API server and kubelet**, whose pods
//! are real `sless instance` processes): callers keep calling through two
//! driver replicas while a new version is deployed, made the one called,
//! and the old one retired, as a server does when `$latest` moves on; or
//! while a version's pods roll to new secret values.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use sless_driver::{Deployment, Driver, VersionRef};
use sless_driver_k8s::KubeDriver;
use sless_fake_cluster::{key, FakeCluster};

use super::fake_cluster::{invoke, start, with_secrets};
use super::harness::eventually;

/// Callers at once, each alternating between the two replicas.
const CALLERS: usize = 8;

/// What the callers share with the test.
#[derive(Default)]
struct Load {
    /// The version called.
    current: AtomicU64,
    /// Per replica: the change is reported serving there.
    switched: [AtomicBool; 2],
    retired: AtomicBool,
    stop: AtomicBool,
    done: AtomicUsize,
}

/// One call as a caller saw it.
struct Call {
    called: u64,
    /// Started once its replica reported the change serving.
    after_switch: bool,
    /// The handler's answer, or why there was none.
    answer: Result<Value, String>,
    /// Started before the old version was retired and ended after.
    across_retire: bool,
}

/// Two replicas of the driver with callers on them.
struct Rollout {
    replicas: [Arc<KubeDriver>; 2],
    load: Arc<Load>,
    callers: Vec<tokio::task::JoinHandle<Vec<Call>>>,
}

impl Rollout {
    /// Deploys `first` on two replicas, wakes it, and starts the callers.
    async fn start(cluster: &FakeCluster, first: Deployment) -> Rollout {
        let replicas = [Arc::new(cluster.replica()), Arc::new(cluster.replica())];
        for replica in &replicas {
            replica.deploy(first.clone()).await.unwrap();
            invoke(replica, first.version, json!({})).await.unwrap();
        }
        let load = Arc::new(Load::default());
        load.current.store(first.version, Ordering::SeqCst);
        let callers = (0..CALLERS)
            .map(|_| tokio::spawn(caller(replicas.clone(), load.clone())))
            .collect();
        let rollout = Rollout {
            replicas,
            load,
            callers,
        };
        rollout.answered(2 * CALLERS).await;
        rollout
    }

    /// Waits until `n` more calls have been answered.
    async fn answered(&self, n: usize) {
        let target = self.load.done.load(Ordering::SeqCst) + n;
        eventually(Duration::from_secs(30), || async {
            match self.load.done.load(Ordering::SeqCst) {
                done if done >= target => Ok(()),
                done => Err(format!("{done} calls answered, waiting for {target}")),
            }
        })
        .await;
    }

    /// Stops the callers: every call they made.
    async fn stop(self) -> Vec<Call> {
        self.load.stop.store(true, Ordering::SeqCst);
        let mut calls = Vec::new();
        for caller in self.callers {
            calls.extend(caller.await.unwrap());
        }
        let failed: Vec<&String> = calls.iter().filter_map(|c| c.answer.as_ref().err()).collect();
        assert!(
            failed.is_empty(),
            "{} of {} calls failed: {failed:?}",
            failed.len(),
            calls.len()
        );
        assert!(calls.iter().any(|c| !c.after_switch) && calls.iter().any(|c| c.after_switch));
        calls
    }
}

/// Calls the version `load` names until told to stop, through the replicas in turn.
async fn caller(replicas: [Arc<KubeDriver>; 2], load: Arc<Load>) -> Vec<Call> {
    let mut calls = Vec::new();
    for turn in 0usize.. {
        if load.stop.load(Ordering::SeqCst) {
            break;
        }
        let replica = turn % 2;
        let after_switch = load.switched[replica].load(Ordering::SeqCst);
        let called = load.current.load(Ordering::SeqCst);
        let before_retire = !load.retired.load(Ordering::SeqCst);
        // The handler takes a little while, so calls are in flight when old pods go.
        let answer = invoke(&replicas[replica], called, json!({"sleep": 0.05}))
            .await
            .map_err(|e| e.to_string());
        calls.push(Call {
            called,
            after_switch,
            answer,
            across_retire: before_retire && load.retired.load(Ordering::SeqCst),
        });
        load.done.fetch_add(1, Ordering::SeqCst);
    }
    calls
}

#[tokio::test]
async fn a_new_version_rolls_out_under_load_with_no_failed_call_and_no_stale_answer() {
    let cluster = start().await;
    let rollout = Rollout::start(&cluster, cluster.version(1)).await;
    let [a, b] = rollout.replicas.clone();
    // The new version: deployed on both replicas (verified on one: it
    // returns once its pods are ready), then called, then the old one retired.
    a.deploy(Deployment {
        verify: true,
        ..cluster.version(2)
    })
    .await
    .unwrap();
    b.deploy(cluster.version(2)).await.unwrap();
    rollout.load.current.store(2, Ordering::SeqCst);
    for switched in &rollout.load.switched {
        switched.store(true, Ordering::SeqCst);
    }
    for replica in [&a, &b] {
        replica.retire(&VersionRef::new(key(), 1)).await.unwrap();
    }
    rollout.load.retired.store(true, Ordering::SeqCst);
    // Calls go on on the new version alone until the old pods, told to
    // stop, have answered what they had and ended.
    assert!(
        cluster.pids(1).is_empty(),
        "the old version's pods are out of its EndpointSlice"
    );
    eventually(Duration::from_secs(30), || async {
        match cluster.stopping() {
            0 => Ok(()),
            n => Err(format!("{n} old pods still draining")),
        }
    })
    .await;
    let calls = rollout.stop().await;
    for call in &calls {
        let which = &call.answer.as_ref().unwrap()["which"];
        assert_eq!(*which, format!("v{}", call.called), "an answer from the version called");
        if call.after_switch {
            assert_eq!(*which, "v2", "no stale answer once the new version serves");
        }
    }
    assert!(
        calls.iter().any(|c| c.called == 1 && c.across_retire),
        "some calls of the old version were in flight while it was retired"
    );
}

/// New secret values roll the version's pods (the old ones serve until the
/// new ones are ready, then drain): no call fails, and once a replica's
/// deploy has returned its calls see only the new value.
#[tokio::test]
async fn new_secret_values_roll_a_version_under_load_with_no_failed_call_and_no_stale_answer() {
    let cluster = start().await;
    let rollout = Rollout::start(&cluster, with_secrets(&cluster, "hunter2")).await;
    let [a, b] = rollout.replicas.clone();
    a.deploy(Deployment {
        verify: true,
        ..with_secrets(&cluster, "hunter3")
    })
    .await
    .unwrap();
    rollout.load.switched[0].store(true, Ordering::SeqCst);
    b.deploy(with_secrets(&cluster, "hunter3")).await.unwrap();
    rollout.load.switched[1].store(true, Ordering::SeqCst);
    rollout.answered(2 * CALLERS).await;
    let calls = rollout.stop().await;
    for call in calls.iter().filter(|c| c.after_switch) {
        assert_eq!(
            call.answer.as_ref().unwrap()["password"],
            "hunter3",
            "no stale answer once the replica serves the new values"
        );
    }
}
