//! Warm pods on the fake cluster (its stand-in API server and kubelet;
//! the rest real: the driver, `sless instance generic` processes, the S3
//! server the specialized pods fetch from through a presigned URL): a
//! function at zero takes a ready generic pod and its first call answers
//! from it, the pool refills, another function's cold call takes another
//! generic pod, a function with more memory than the pool's takes the
//! normal path.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};
use sless_driver::{Deployment, Driver, FunctionKey, VersionRef};
use sless_driver_k8s::objects::WarmPool;
use sless_driver_k8s::KubeDriver;
use sless_fake_cluster::FakeCluster;

use super::fake_cluster::{assert_never_whole, noisy_artifact, start};
use super::harness::{event_call, eventually, peak_memory};

const POOL: WarmPool = WarmPool {
    pods: 2,
    memory_mb: 256,
};

/// Version 1 of demo/`name`, asking for `memory_mb`.
fn function(cluster: &FakeCluster, name: &str, memory_mb: u32) -> Deployment {
    let mut deployment = cluster.version(1);
    deployment.key = FunctionKey::new("demo", name);
    deployment.spec.memory_mb = memory_mb;
    deployment
}

async fn call(driver: &KubeDriver, name: &str) -> Value {
    let result = driver
        .invoke(
            &VersionRef::new(FunctionKey::new("demo", name), 1),
            &event_call("req", json!({})),
        )
        .await
        .unwrap();
    assert_eq!(result.status, 200, "{}", String::from_utf8_lossy(&result.body));
    assert!(result.cold_start);
    serde_json::from_slice(&result.body).unwrap()
}

/// The pool's ready generic pods, once it has all of them.
async fn full_pool(cluster: &FakeCluster) -> BTreeSet<u32> {
    full_pool_of(cluster, POOL.pods as usize).await
}

/// The ready generic pods, once there are `pods`.
async fn full_pool_of(cluster: &FakeCluster, pods: usize) -> BTreeSet<u32> {
    eventually(Duration::from_secs(60), || async {
        let pids: BTreeSet<u32> = cluster.generic_pids().into_iter().collect();
        if pids.len() == pods {
            Ok(pids)
        } else {
            Err(format!("{} generic pods ready", pids.len()))
        }
    })
    .await
}

/// The instance that answered: the handler's parent (a Python shim is
/// the instance's child).
fn instance_of(answer: &Value) -> u32 {
    answer["ppid"].as_u64().unwrap() as u32
}

#[tokio::test]
async fn a_cold_function_takes_a_generic_pod_and_the_pool_refills() {
    let cluster = start().await;
    // As on a real cluster, a function's own pod is not ready at once, so
    // the first calls are the warm pods' to answer, however busy the machine.
    cluster.set_function_pod_start(Duration::from_secs(2));
    let driver = cluster.replica_warm(POOL);
    driver.deploy(function(&cluster, "hello", 128)).await.unwrap();
    driver.deploy(function(&cluster, "other", 256)).await.unwrap();
    driver.deploy(function(&cluster, "large", 512)).await.unwrap();
    let generic = full_pool(&cluster).await;

    let first = call(&driver, "hello").await;
    assert!(
        generic.contains(&instance_of(&first)),
        "the first call answered from a generic pod: {first} not in {generic:?}"
    );
    assert_eq!(first["which"], "v1", "with the function's environment");
    let refilled = full_pool(&cluster).await;
    assert!(
        !refilled.contains(&instance_of(&first)),
        "the claimed pod left the pool and another took its place: {refilled:?}"
    );

    let second = call(&driver, "other").await;
    assert!(
        refilled.contains(&instance_of(&second)),
        "another function's cold call took another generic pod: {second} not in {refilled:?}"
    );
    assert_ne!(instance_of(&second), instance_of(&first));

    let pool_before = full_pool(&cluster).await;
    let claimed_before = cluster.claimed_pids().len();
    let large = call(&driver, "large").await;
    assert!(
        !pool_before.contains(&instance_of(&large)) && !generic.contains(&instance_of(&large)),
        "above the pool's memory: its own pod answered"
    );
    assert!(cluster.claimed_pids().len() <= claimed_before, "no pod claimed for it");

    // Once the function's own pod is ready, the claimed pod is deleted and
    // calls go to the function's own pod.
    eventually(Duration::from_secs(60), || async {
        let claimed = cluster.claimed_pids();
        if claimed.contains(&instance_of(&first)) {
            Err(format!("still claimed: {claimed:?}"))
        } else {
            Ok(())
        }
    })
    .await;
}

/// A generic pod fetches the artifact of the function that claims it as
/// it comes (from its presigned URL), never whole in memory.
#[tokio::test]
async fn a_generic_pod_fetches_its_artifact_as_it_comes() {
    let cluster = start().await;
    cluster.set_function_pod_start(Duration::from_secs(60));
    let driver = cluster.replica_warm(POOL);
    let (artifact, digest) = noisy_artifact(&cluster).await;
    driver
        .deploy(Deployment {
            artifact,
            digest: Some(digest),
            ..function(&cluster, "noisy", 128)
        })
        .await
        .unwrap();
    let generic = full_pool(&cluster).await;
    let before: std::collections::BTreeMap<u32, u64> = generic.iter().map(|&pid| (pid, peak_memory(pid))).collect();
    let answer = call(&driver, "noisy").await;
    let instance = instance_of(&answer);
    assert!(generic.contains(&instance), "{answer} not from {generic:?}");
    assert_never_whole("the generic pod", before[&instance], peak_memory(instance));
}

/// A claimed pod left by a replica that died before deleting it (its
/// claim ten minutes old) is deleted by the next replica's sweep; a claim
/// younger than the start timeout is left to the replica that made it.
#[tokio::test]
async fn a_claimed_pod_a_dead_replica_left_is_deleted_and_a_fresh_claim_is_kept() {
    let cluster = start().await;
    let first = cluster.replica_warm(POOL);
    first.deploy(function(&cluster, "hello", 128)).await.unwrap();
    full_pool(&cluster).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let abandoned = cluster.leave_claimed(now - 600_000).expect("a generic pod to claim");
    full_pool(&cluster).await;
    let fresh = cluster.leave_claimed(now).expect("another generic pod to claim");
    assert_eq!(cluster.claimed_pids().len(), 2);

    // A replica sweeps when it starts.
    let _second = cluster.replica_warm(POOL);
    eventually(Duration::from_secs(30), || async {
        let claimed = cluster.claimed_pids();
        if claimed.contains(&abandoned) {
            Err(format!("the abandoned claim is still there: {claimed:?}"))
        } else {
            Ok(())
        }
    })
    .await;
    // The sweep's pass is over by now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(cluster.claimed_pids(), vec![fresh], "the fresh claim is kept");
}

/// Two replicas wake two functions at once from a pool of one generic
/// pod. A claim is conditional on the pod's resourceVersion, so no pod is
/// given to both: each call answers from an instance of its own, the
/// generic pod for (at least) one of them; the replica whose claim is
/// refused takes the normal path.
#[tokio::test]
async fn two_replicas_racing_for_one_generic_pod_never_share_it() {
    const ONE: WarmPool = WarmPool {
        pods: 1,
        memory_mb: 256,
    };
    let cluster = start().await;
    cluster.set_function_pod_start(Duration::from_secs(2));
    let (a, b) = (cluster.replica_warm(ONE), cluster.replica_warm(ONE));
    a.deploy(function(&cluster, "first", 128)).await.unwrap();
    b.deploy(function(&cluster, "second", 128)).await.unwrap();
    let generic = full_pool_of(&cluster, 1).await;
    let (first, second) = tokio::join!(call(&a, "first"), call(&b, "second"));
    assert_ne!(
        instance_of(&first),
        instance_of(&second),
        "two functions answered from one pod: {first} {second}"
    );
    let from_pool = [&first, &second]
        .into_iter()
        .filter(|answer| generic.contains(&instance_of(answer)))
        .count();
    assert!(
        from_pool >= 1,
        "one of them took the generic pod: {generic:?} {first} {second}"
    );
}
