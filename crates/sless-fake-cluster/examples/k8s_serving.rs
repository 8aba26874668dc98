//! The Kubernetes driver's serving figures on this machine, each scenario
//! a function of its own (`--scenario NAME`, repeatable; default: all).
//! The cluster is the fake one (crates/sless-fake-cluster: **a stand-in
//! for the API server and kubelet**; its pods are real `sless instance`
//! processes on 127.0.0.1 that fetch their artifact from a real S3
//! server); everything on the data path is real.
//!
//! - `warm`: warm throughput through the driver's gateway → `sless
//!   instance` over TCP (one pod, already up) against the same handler on
//!   the local driver (one instance), same concurrency, rounds taking turns
//!   in the same run; median calls/s of each and their ratio, against the
//!   issue's target of 0.8. Also this process's CPU per call (the
//!   driver: what a server replica pays for a call, the handler's and
//!   the instance's processes not counted).
//!
//! ```sh
//! python3 bench/k8s_serving.py        # builds, then runs this in release
//! ```

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sless_driver::{Deployment, Driver, Invocation, VersionRef};
use sless_driver_k8s::ServingSettings;
use sless_fake_cluster::{key, FakeCluster, HANDLER};

/// What every scenario is given.
struct Args {
    sless: String,
    calls: usize,
    concurrency: usize,
    rounds: usize,
    scenarios: Vec<String>,
}

/// The issue's target for the ratio of warm throughputs (TCP / local).
const WARM_TARGET: f64 = 0.8;

fn args() -> Args {
    let mut args = Args {
        sless: String::new(),
        calls: 20_000,
        concurrency: 8,
        rounds: 5,
        scenarios: Vec::new(),
    };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let mut value = || given.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--sless" => args.sless = value(),
            "--calls" => args.calls = value().parse().expect("--calls N"),
            "--concurrency" => args.concurrency = value().parse().expect("--concurrency N"),
            "--rounds" => args.rounds = value().parse().expect("--rounds N"),
            "--scenario" => args.scenarios.push(value()),
            other => panic!("unknown argument {other}"),
        }
    }
    assert!(
        !args.sless.is_empty(),
        "usage: k8s_serving --sless PATH [--calls N] [--concurrency N] [--rounds N] [--scenario warm]"
    );
    args
}

#[tokio::main]
async fn main() {
    let args = args();
    let all = args.scenarios.is_empty();
    let wants = |name: &str| all || args.scenarios.iter().any(|s| s == name);
    if wants("warm") {
        warm(&args).await;
    }
}

/// Warm throughput, TCP to `sless instance` against the local driver.
async fn warm(args: &Args) {
    let cluster = FakeCluster::start(&args.sless).await;
    let kube: Arc<dyn Driver> = Arc::new(cluster.replica_with(ServingSettings {
        max_queue: 10_000,
        // The gateway's listing of ready pods, as without a watch.
        endpoints_ttl: Duration::from_secs(1),
        watch_endpoints: false,
        idle_timeout: None,
        scale_every: None,
        ..ServingSettings::default()
    }));
    let mut version = cluster.version(1);
    version.spec.concurrency = u32::try_from(args.concurrency).unwrap();
    version.spec.replicas = Some(1);
    version.verify = true;
    kube.deploy(version.clone()).await.unwrap();
    let work = tempfile::tempdir().unwrap();
    let local = local_driver(work.path(), &version).await;
    let target = VersionRef::new(key(), 1);
    let call = sless_driver::Invocation {
        kind: sless_driver::TriggerKind::Http,
        request_id: "bench".into(),
        method: "GET".into(),
        path: String::new(),
        query: String::new(),
        headers: vec![],
        body: bytes::Bytes::new(),
        event: None,
    };
    println!(
        "warm: {} calls per round, {} at a time, {} rounds each, taking turns",
        args.calls, args.concurrency, args.rounds
    );
    let (mut tcp, mut on_local) = (Vec::new(), Vec::new());
    let (mut tcp_cpu, mut local_cpu) = (Vec::new(), Vec::new());
    for round in 1..=args.rounds {
        let k = measure(&kube, &target, &call, args.calls, args.concurrency).await;
        let l = measure(&local, &target, &call, args.calls, args.concurrency).await;
        println!("  round {round}: TCP {k}; local {l}");
        tcp.push(k.rate);
        on_local.push(l.rate);
        tcp_cpu.push(k.driver_cpu_us);
        local_cpu.push(l.driver_cpu_us);
    }
    let (tcp, on_local) = (median(tcp), median(on_local));
    let (tcp_cpu, local_cpu) = (median(tcp_cpu), median(local_cpu));
    println!("warm TCP to sless instance: {tcp:.0} calls/s (median), driver CPU {tcp_cpu:.1} us/call");
    println!("warm local driver:          {on_local:.0} calls/s (median), driver CPU {local_cpu:.1} us/call");
    println!("warm ratio TCP/local: {:.2} (target >= {WARM_TARGET})", tcp / on_local);
    println!("driver CPU per call TCP/local: {:.2}", tcp_cpu / local_cpu);
}

/// This process's CPU time so far (user and system, every thread), in
/// microseconds; the kernel counts it in clock ticks.
fn own_cpu_us() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // The fields after the command, which is in parentheses.
    let after = &stat[stat.rfind(')').expect("a command in parentheses") + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    // utime and stime, the 14th and 15th fields (the 12th and 13th here).
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    // USER_HZ, what /proc counts in: 100 on every Linux this runs on.
    ticks * 1e6 / 100.0
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The same handler built and deployed on a local driver, pinned to one
/// instance (network isolation off: nothing here needs it).
async fn local_driver(dir: &std::path::Path, version: &Deployment) -> Arc<dyn Driver> {
    use sha2::Digest;
    let driver = sless_driver_local::LocalDriver::start(
        dir,
        sless_driver_local::LocalSettings {
            python: "/usr/bin/python3.11".into(),
            node: "/usr/bin/node".into(),
            npm: "/usr/bin/npm".into(),
            build_env: Vec::new(),
            max_build_bytes: 1 << 30,
            warm_per_runtime: 1,
            python_zygote: false,
            node_zygote: false,
            pool: sless_driver_local::PoolSettings {
                idle_timeout: Duration::from_secs(300),
                max_queue: 10_000,
                load_timeout: Duration::from_secs(30),
                max_response_bytes: 6 * 1024 * 1024,
            },
            isolation: sless_driver_local::IsolationSettings {
                network: false,
                private_egress: vec![],
            },
            namespace_limits: sless_driver_local::NamespaceLimits::NONE,
        },
        None,
    )
    .expect("the local driver");
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    zip.start_file("handler.py", zip::write::SimpleFileOptions::default())
        .unwrap();
    zip.write_all(HANDLER.as_bytes()).unwrap();
    let archive = zip.finish().unwrap().into_inner();
    let built = driver
        .build(sless_driver::BuildJob {
            key: key(),
            runtime: sless_api::Runtime::Python311,
            code_hash: hex::encode(sha2::Sha256::digest(&archive)),
            archive: archive.into(),
            timeout: Duration::from_secs(60),
        })
        .await
        .unwrap();
    driver
        .deploy(Deployment {
            artifact: built.artifact,
            digest: None,
            ..version.clone()
        })
        .await
        .unwrap();
    Arc::new(driver)
}

/// Calls per second and latency of `calls` warm calls, `concurrency` at a time.
struct Figures {
    rate: f64,
    p50: Duration,
    p99: Duration,
    /// This process's CPU per call.
    driver_cpu_us: f64,
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.0} calls/s, p50 {:?}, p99 {:?}, driver CPU {:.1} us/call",
            self.rate, self.p50, self.p99, self.driver_cpu_us
        )
    }
}

async fn measure(
    driver: &Arc<dyn Driver>,
    target: &VersionRef,
    call: &Invocation,
    calls: usize,
    concurrency: usize,
) -> Figures {
    // Warm: the instance up, connections open.
    for _ in 0..200 {
        let answer = driver.invoke(target, call).await.unwrap();
        assert_eq!(answer.status, 200, "{}", String::from_utf8_lossy(&answer.body));
    }
    let started = Instant::now();
    let cpu_before = own_cpu_us();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (driver, target, call) = (driver.clone(), target.clone(), call.clone());
            tokio::spawn(async move {
                let mut took = Vec::with_capacity(calls / concurrency);
                for _ in 0..calls / concurrency {
                    let one = Instant::now();
                    let answer = driver.invoke(&target, &call).await.unwrap();
                    assert_eq!(answer.status, 200);
                    took.push(one.elapsed());
                }
                took
            })
        })
        .collect();
    let mut took = Vec::new();
    for task in tasks {
        took.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed();
    let cpu = own_cpu_us() - cpu_before;
    took.sort();
    let at = |q: f64| took[((took.len() as f64 * q) as usize).min(took.len() - 1)];
    Figures {
        rate: took.len() as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
        driver_cpu_us: cpu / took.len() as f64,
    }
}
