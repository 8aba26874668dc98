//! Warm calls through the Kubernetes driver's data path on this machine:
//! `KubeDriver::invoke` → frames over TCP → a real `sless instance serve`
//! (python3.11) on 127.0.0.1. The API server is a stand-in (no cluster
//! here) that answers the deploy and the one listing of ready pods; after
//! that the calls touch no API. In the same run, the same handler on the
//! local driver (one instance, the same concurrency, its sandbox as this
//! machine allows, network isolation off), for the ratio. Prints calls per
//! second and latency percentiles of both.
//!
//! ```sh
//! cargo build -p sless && cargo run -p sless-driver-k8s --example tcp_invoke -- target/debug/sless [CALLS] [CONCURRENCY]
//! ```

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Request, Response};
use kube::client::Body;
use serde_json::{json, Value};
use sless_driver::{Deployment, Driver, Fingerprint, FunctionKey, Invocation, TriggerKind, VersionRef};
use sless_driver_k8s::{BuildMode, KubeDriver, KubeSettings, ServingSettings};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn ready(port: u16) -> bool {
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.write_all(b"GET /ready HTTP/1.1\r\nhost: x\r\n\r\n");
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    text.starts_with("HTTP/1.1 200")
}

/// Answers whatever the driver asks while deploying and listing pods.
async fn stand_in(mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>, frames: u16) {
    while let Some((request, send)) = handle.next_request().await {
        let path = request.uri().path().to_string();
        let body = request.into_body().collect_bytes().await.unwrap();
        let answer = if path.ends_with("/scale") {
            json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "x", "resourceVersion": "1"},
                   "spec": {"replicas": 1}, "status": {"replicas": 1}})
        } else if path.ends_with("/endpointslices") {
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSliceList", "metadata": {}, "items": [
                {"metadata": {"name": "s"}, "addressType": "IPv4",
                 "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
                 "ports": [{"name": "frames", "port": frames}]}]})
        } else if path.contains("/secrets/") && body.is_empty() {
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {}})
        } else {
            let mut object: Value = serde_json::from_slice(&body).unwrap();
            object["metadata"]["uid"] = json!("uid");
            object
        };
        send.send_response(Response::new(Body::from(answer.to_string().into_bytes())));
    }
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let sless = args
        .next()
        .expect("usage: tcp_invoke SLESS_BINARY [CALLS] [CONCURRENCY]");
    let calls: usize = args.next().map_or(20_000, |n| n.parse().unwrap());
    let concurrency: usize = args.next().map_or(8, |n| n.parse().unwrap());

    let dir = std::env::temp_dir().join(format!("sless-tcp-invoke-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("code")).unwrap();
    std::fs::write(
        dir.join("code/handler.py"),
        "def handle(event, context):\n    return {'ok': True}\n",
    )
    .unwrap();
    let (frames, ready_port) = (free_port(), free_port());
    let mut instance = std::process::Command::new(&sless)
        .args(["instance", "serve"])
        .env("SLESS_INSTANCE_CODE_DIR", dir.join("code"))
        .env("SLESS_INSTANCE_WORK_DIR", dir.join("work"))
        .env("SLESS_INSTANCE_RUNTIME", "python3.11")
        .env("SLESS_INSTANCE_NAMESPACE", "demo")
        .env("SLESS_INSTANCE_FUNCTION", "hello")
        .env("SLESS_INSTANCE_VERSION", "1")
        .env("SLESS_INSTANCE_CONCURRENCY", concurrency.to_string())
        .env("SLESS_INSTANCE_LISTEN", format!("127.0.0.1:{frames}"))
        .env("SLESS_INSTANCE_READY_LISTEN", format!("127.0.0.1:{ready_port}"))
        .spawn()
        .expect("start sless instance serve");
    let started = Instant::now();
    while !ready(ready_port) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the instance was not ready"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    tokio::spawn(stand_in(handle, frames));
    let settings = KubeSettings {
        control_plane_namespace: "sless".into(),
        image_repo: "registry.example/sless".into(),
        image_tag: "bench".into(),
        artifact_reader_secret: "r".into(),
        image_pull_secret: None,
        allowed_egress: vec![],
        build: BuildMode::Artifact,
        image_build: None,
        build_env: Vec::new(),
    };
    let serving = ServingSettings {
        endpoints_ttl: Duration::from_secs(3600),
        watch_endpoints: false,
        scale_every: None,
        idle_timeout: None,
        ..ServingSettings::default()
    };
    let store = Arc::new(object_store::memory::InMemory::new());
    let driver: Arc<dyn Driver> = Arc::new(KubeDriver::new(
        kube::Client::new(service, "default"),
        settings,
        serving,
        store,
        Arc::new(NoSigner),
    ));
    let key = FunctionKey::new("demo", "hello");
    let mut spec: sless_api::FunctionSpec = serde_json::from_value(json!({"runtime": "python3.11"})).unwrap();
    spec.concurrency = u32::try_from(concurrency).unwrap();
    driver
        .deploy(Deployment {
            key: key.clone(),
            version: 1,
            artifact: Fingerprint::from_stored("0123456789abcdef0123456789abcdef"),
            digest: Some("0".repeat(64)),
            spec,
            verify: false,
            secrets: Default::default(),
        })
        .await
        .unwrap();
    let target = VersionRef::new(key, 1);
    let call = Invocation {
        kind: TriggerKind::Http,
        request_id: "bench".into(),
        method: "GET".into(),
        path: String::new(),
        query: String::new(),
        headers: vec![],
        body: bytes::Bytes::new(),
        event: None,
    };
    let tcp = measure(driver, &target, &call, calls, concurrency).await;
    println!("kubernetes driver, TCP to sless instance: {tcp}");
    let local = local_driver(&dir, concurrency).await;
    let on_local = measure(local, &target, &call, calls, concurrency).await;
    println!("local driver:                             {on_local}");
    println!("ratio (TCP / local): {:.2}", tcp.rate / on_local.rate);
    let _ = instance.kill();
    let _ = instance.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The hello handler built and deployed on a local driver, pinned to one instance.
async fn local_driver(dir: &std::path::Path, concurrency: usize) -> Arc<dyn Driver> {
    use sha2::Digest;
    std::fs::create_dir_all(dir.join("local")).unwrap();
    let driver = sless_driver_local::LocalDriver::start(
        &dir.join("local"),
        sless_driver_local::LocalSettings {
            python: "/usr/bin/python3.11".into(),
            node: "/usr/bin/node".into(),
            npm: "/usr/bin/npm".into(),
            build_env: Vec::new(),
            warm_per_runtime: 1,
            python_zygote: false,
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
        },
        None,
    )
    .expect("the local driver");
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    zip.start_file("handler.py", zip::write::SimpleFileOptions::default())
        .unwrap();
    zip.write_all(b"def handle(event, context):\n    return {'ok': True}\n")
        .unwrap();
    let archive = zip.finish().unwrap().into_inner();
    let key = FunctionKey::new("demo", "hello");
    let built = driver
        .build(sless_driver::BuildJob {
            key: key.clone(),
            runtime: sless_api::Runtime::Python311,
            code_hash: hex::encode(sha2::Sha256::digest(&archive)),
            archive: archive.into(),
            timeout: Duration::from_secs(60),
        })
        .await
        .unwrap();
    let mut spec: sless_api::FunctionSpec = serde_json::from_value(json!({"runtime": "python3.11"})).unwrap();
    spec.concurrency = u32::try_from(concurrency).unwrap();
    spec.replicas = Some(1);
    driver
        .deploy(Deployment {
            key,
            version: 1,
            artifact: built.artifact,
            digest: None,
            spec,
            verify: true,
            secrets: Default::default(),
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
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.0} calls/s, p50 {:?}, p99 {:?}", self.rate, self.p50, self.p99)
    }
}

async fn measure(
    driver: Arc<dyn Driver>,
    target: &VersionRef,
    call: &Invocation,
    calls: usize,
    concurrency: usize,
) -> Figures {
    for _ in 0..200 {
        driver.invoke(target, call).await.unwrap();
    }
    let started = Instant::now();
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
    took.sort();
    let at = |q: f64| took[((took.len() as f64 * q) as usize).min(took.len() - 1)];
    Figures {
        rate: took.len() as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
    }
}

/// Nothing is built here, so no build grant is ever presigned.
#[derive(Debug)]
struct NoSigner;

#[async_trait::async_trait]
impl object_store::signer::Signer for NoSigner {
    async fn signed_url(
        &self,
        _: object_store::signer::Method,
        _: &object_store::path::Path,
        _: Duration,
    ) -> object_store::Result<object_store::signer::Url> {
        Err(object_store::Error::NotImplemented {
            operation: "presigning in a benchmark".into(),
            implementer: "NoSigner".into(),
        })
    }
}
