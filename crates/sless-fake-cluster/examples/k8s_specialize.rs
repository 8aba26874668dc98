//! Bench: a cold call's time on the Kubernetes driver with and without
//! warm pods, on the fake cluster (stand-in API server and kubelet; real
//! driver, real `sless instance` processes, real S3 server). Each round
//! deploys a new function at zero and times its first call from the
//! driver's `invoke` to the answer: with warm pods that is scale from
//! zero + claim + specialize (presigned fetch, sha256, unpack, LOAD) +
//! the call; without, it waits for the function's own pod. Prints p50 and
//! p99 of each and the warm p50's ratio to the 50 ms target.
//!
//! `cargo run --release -p sless-fake-cluster --example k8s_specialize -- SLESS_BINARY [ROUNDS]`

use std::time::{Duration, Instant};

use sless_driver::{Driver, FunctionKey, VersionRef};
use sless_driver_k8s::objects::WarmPool;
use sless_fake_cluster::FakeCluster;

const TARGET_MS: f64 = 50.0;
const POOL: WarmPool = WarmPool {
    pods: 2,
    memory_mb: 256,
};

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let sless = args.next().expect("the sless binary pods run");
    let rounds: usize = args.next().map_or(30, |n| n.parse().expect("a number of rounds"));
    let cluster = FakeCluster::start(sless).await;
    let warm = cold_calls(&cluster, Some(POOL), "warm", rounds).await;
    let plain = cold_calls(&cluster, None, "plain", rounds).await;
    let (w50, w99) = (percentile(&warm, 0.50), percentile(&warm, 0.99));
    let (p50, p99) = (percentile(&plain, 0.50), percentile(&plain, 0.99));
    println!("rounds: {rounds} (a new function at zero each)");
    println!("cold call, warm pod (claim -> specialize -> answer): p50 {w50:.1} ms  p99 {w99:.1} ms");
    println!("cold call, own pod (scale from zero -> pod ready -> answer): p50 {p50:.1} ms  p99 {p99:.1} ms");
    println!("warm p50 / 50 ms target: {:.2}", w50 / TARGET_MS);
    println!("own-pod p50 / warm p50: {:.1}x", p50 / w50);
}

/// The first call's time of `rounds` new functions, each once the pool is full.
async fn cold_calls(cluster: &FakeCluster, pool: Option<WarmPool>, prefix: &str, rounds: usize) -> Vec<f64> {
    let driver = match pool {
        Some(pool) => cluster.replica_warm(pool),
        None => cluster.replica(),
    };
    let mut times = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let key = FunctionKey::new("demo", format!("{prefix}{round}"));
        let mut deployment = cluster.version(1);
        deployment.key = key.clone();
        deployment.spec.memory_mb = 128;
        driver.deploy(deployment).await.unwrap();
        if pool.is_some() {
            let limit = Instant::now() + Duration::from_secs(60);
            while cluster.generic_pids().len() < POOL.pods as usize {
                assert!(Instant::now() < limit, "the pool did not refill");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let call = sless_driver::Invocation {
            kind: sless_driver::TriggerKind::Job,
            request_id: format!("bench-{round}"),
            method: "POST".into(),
            path: String::new(),
            query: String::new(),
            headers: vec![],
            body: Default::default(),
            event: Some(serde_json::json!({})),
        };
        let started = Instant::now();
        let result = driver.invoke(&VersionRef::new(key, 1), &call).await.unwrap();
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(result.status, 200);
    }
    times
}

fn percentile(times: &[f64], q: f64) -> f64 {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}
