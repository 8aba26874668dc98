//! The Kubernetes driver's data path on this machine: `KubeDriver` →
//! EndpointSlices → frames over TCP → real `sless instance` processes on
//! 127.0.0.1 that fetch their artifact from the real S3 server.
//!
//! **The API server and the kubelet here are stand-ins** (there is no
//! cluster on the project's machines): a test-only stand-in for the few
//! API endpoints the driver calls while serving (applies, Deployments'
//! scale, EndpointSlices, the artifact reader Secret), whose "kubelet"
//! starts one `sless instance` per replica of a Deployment, with the
//! instance container's environment from the applied pod template,
//! restarts it when it dies, and lists it in the Deployment's
//! EndpointSlice once its `/ready` answers. Everything else is real: the
//! driver, the instances, the shim, the S3 server.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use kube::client::Body;
use object_store::ObjectStoreExt;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use sless_driver::{Deployment, Driver, Fingerprint, FunctionKey, InvokeError, VersionRef};
use sless_driver_k8s::{BuildMode, KubeDriver, KubeSettings, ServingSettings};

use super::harness::{event_call, eventually, S3Server};

const FINGERPRINT: &str = "0123456789abcdef0123456789abcdef";

/// Answers with its pid, the version's `WHICH`, and, asked to, sleeps
/// after leaving a mark (so a test can kill it mid-call).
const HANDLER: &str = r#"
import os, time
def handle(event, context):
    if isinstance(event, dict) and event.get("mark"):
        open(event["mark"], "w").close()
        time.sleep(30)
    return {"pid": os.getpid(), "which": os.environ.get("WHICH")}
"#;

/// One pod: a `sless instance` process and its ports.
struct Pod {
    child: Child,
    frames: u16,
    ready_port: u16,
    ready: bool,
    _dir: tempfile::TempDir,
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Deployment as the stand-in keeps it.
#[derive(Default)]
struct Workload {
    /// The instance's environment from the pod template (values only).
    env: Vec<(String, String)>,
    replicas: i32,
    resource_version: u64,
    pods: Vec<Pod>,
}

/// The stand-in cluster's state, shared by every replica's client.
struct Cluster {
    sless: String,
    s3_env: Vec<(String, String)>,
    workloads: Mutex<BTreeMap<String, Workload>>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Cluster {
    fn start_pod(&self, env: &[(String, String)]) -> Pod {
        let dir = tempfile::tempdir().unwrap();
        let (frames, ready_port) = (free_port(), free_port());
        let mut cmd = Command::new(&self.sless);
        cmd.arg("instance")
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin");
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        cmd.envs(self.s3_env.iter().map(|(k, v)| (k, v)))
            .env("SLESS_INSTANCE_CODE_DIR", dir.path().join("code/app"))
            .env("SLESS_INSTANCE_WORK_DIR", dir.path().join("tmp"))
            .env("SLESS_INSTANCE_LISTEN", format!("127.0.0.1:{frames}"))
            .env("SLESS_INSTANCE_READY_LISTEN", format!("127.0.0.1:{ready_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        std::fs::create_dir_all(dir.path().join("code")).unwrap();
        Pod {
            child: cmd.spawn().expect("start sless instance"),
            frames,
            ready_port,
            ready: false,
            _dir: dir,
        }
    }

    /// The kubelet's pass: dead pods restarted (not ready until they say
    /// so), pods started or stopped to the replicas wanted.
    fn reconcile(&self) {
        let mut workloads = self.workloads.lock().unwrap();
        for workload in workloads.values_mut() {
            for pod in &mut workload.pods {
                if pod.child.try_wait().unwrap().is_some() {
                    *pod = self.start_pod(&workload.env);
                }
            }
            let wanted = usize::try_from(workload.replicas).unwrap_or(0);
            workload.pods.truncate(wanted);
            while workload.pods.len() < wanted {
                let pod = self.start_pod(&workload.env);
                workload.pods.push(pod);
            }
        }
    }

    /// Probes every pod's `/ready`, as the kubelet's readiness probe.
    async fn probe(&self) {
        let ports: Vec<(String, usize, u16)> = {
            let workloads = self.workloads.lock().unwrap();
            workloads
                .iter()
                .flat_map(|(name, w)| {
                    w.pods
                        .iter()
                        .enumerate()
                        .map(move |(i, p)| (name.clone(), i, p.ready_port))
                })
                .collect()
        };
        for (name, index, port) in ports {
            let ready = ready(port).await;
            if let Some(pod) = self
                .workloads
                .lock()
                .unwrap()
                .get_mut(&name)
                .and_then(|w| w.pods.get_mut(index))
            {
                if pod.ready_port == port {
                    pod.ready = ready;
                }
            }
        }
    }

    /// The answer to one API request: status and body.
    fn answer(&self, method: &str, path: &str, query: &str, body: &[u8]) -> (u16, Value) {
        let name = path.rsplit('/').next().unwrap_or_default().to_string();
        let scale_of = |workload: &Workload, name: &str| {
            json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
                   "metadata": {"name": name, "resourceVersion": workload.resource_version.to_string()},
                   "spec": {"replicas": workload.replicas}, "status": {"replicas": workload.replicas}})
        };
        match method {
            "GET" if path.ends_with("/scale") => {
                let deployment = path.trim_end_matches("/scale").rsplit('/').next().unwrap();
                let workloads = self.workloads.lock().unwrap();
                match workloads.get(deployment) {
                    Some(workload) => (200, scale_of(workload, deployment)),
                    None => (404, status(404, "NotFound")),
                }
            }
            "PATCH" if path.ends_with("/scale") => {
                let deployment = path.trim_end_matches("/scale").rsplit('/').next().unwrap();
                let patch: Value = serde_json::from_slice(body).unwrap();
                let answer = {
                    let mut workloads = self.workloads.lock().unwrap();
                    let Some(workload) = workloads.get_mut(deployment) else {
                        return (404, status(404, "NotFound"));
                    };
                    if let Some(expected) = patch["metadata"]["resourceVersion"].as_str() {
                        if expected != workload.resource_version.to_string() {
                            return (409, status(409, "Conflict"));
                        }
                    }
                    workload.replicas = patch["spec"]["replicas"].as_i64().unwrap() as i32;
                    workload.resource_version += 1;
                    scale_of(workload, deployment)
                };
                self.reconcile();
                (200, answer)
            }
            "GET" if path.ends_with("/endpointslices") => {
                let query = query.replace("%2F", "/").replace("%3D", "=");
                let service = query
                    .split('&')
                    .find_map(|p| p.strip_prefix("labelSelector=kubernetes.io/service-name="))
                    .unwrap_or_default()
                    .to_string();
                let workloads = self.workloads.lock().unwrap();
                let items: Vec<Value> = workloads
                    .get(&service)
                    .map(|w| w.pods.iter().filter(|p| p.ready).collect::<Vec<_>>())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|pod| {
                        json!({"metadata": {"name": format!("{service}-{}", pod.frames)}, "addressType": "IPv4",
                               "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
                               "ports": [{"name": "frames", "port": pod.frames, "protocol": "TCP"}]})
                    })
                    .collect();
                (
                    200,
                    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSliceList", "metadata": {}, "items": items}),
                )
            }
            "GET" if path == "/api/v1/namespaces/sless/secrets/sless-artifact-reader" => (
                200,
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "sless"}, "data": {}}),
            ),
            // Server-side applies: kept as sent (a Deployment's template
            // becomes its pods' environment; a changed one rolls them).
            "PATCH" => {
                let mut object: Value = serde_json::from_slice(body).unwrap();
                object["metadata"]["uid"] = json!(format!("uid-of-{name}"));
                if path.contains("/deployments/") {
                    let env = instance_env(&object);
                    let mut workloads = self.workloads.lock().unwrap();
                    let workload = workloads.entry(name).or_default();
                    if workload.env != env {
                        workload.env = env;
                        workload.pods.clear();
                    }
                    drop(workloads);
                    self.reconcile();
                }
                (200, object)
            }
            _ => (404, status(404, "NotFound")),
        }
    }
}

/// The instance's environment in an applied Deployment: the instance
/// container's variables with values, and the fetch's artifact and digest.
fn instance_env(deployment: &Value) -> Vec<(String, String)> {
    let pod = &deployment["spec"]["template"]["spec"];
    let instance = pod["containers"][0]["env"].as_array().cloned().unwrap_or_default();
    let fetch = pod["initContainers"][0]["env"].as_array().cloned().unwrap_or_default();
    instance
        .iter()
        .chain(fetch.iter())
        .filter_map(|e| Some((e["name"].as_str()?.to_string(), e["value"].as_str()?.to_string())))
        .filter(|(name, _)| name != "SLESS_INSTANCE_CODE_DIR")
        .collect()
}

fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "reason": reason, "code": code, "message": reason})
}

async fn ready(port: u16) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let check = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        stream.write_all(b"GET /ready HTTP/1.1\r\nhost: x\r\n\r\n").await.ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).await.ok()?;
        Some(text.starts_with("HTTP/1.1 200"))
    };
    tokio::time::timeout(Duration::from_millis(500), check)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// The stand-in cluster, its S3 server and the artifact of [`HANDLER`].
struct FakeCluster {
    cluster: Arc<Cluster>,
    digest: String,
    _s3: S3Server,
    kubelet: tokio::task::JoinHandle<()>,
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        self.kubelet.abort();
        self.cluster.workloads.lock().unwrap().clear();
    }
}

impl FakeCluster {
    async fn start() -> FakeCluster {
        let s3 = S3Server::start().await;
        // What the artifact reader Secret gives a pod.
        let s3_env = s3.env();
        // The artifact as a build stores it.
        let code = tempfile::tempdir().unwrap();
        std::fs::write(code.path().join("handler.py"), HANDLER).unwrap();
        let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()));
        tar.append_dir_all(".", code.path()).unwrap();
        let tarball = tar.into_inner().unwrap().finish().unwrap();
        let digest = hex::encode(Sha256::digest(&tarball));
        let store = sless_server::blobs::open(&s3.blob_settings()).await.unwrap();
        store
            .put(
                &object_store::path::Path::from(format!("artifacts/{FINGERPRINT}/{digest}.tar.gz")),
                tarball.into(),
            )
            .await
            .unwrap();
        let cluster = Arc::new(Cluster {
            sless: env!("CARGO_BIN_EXE_sless").to_string(),
            s3_env,
            workloads: Mutex::new(BTreeMap::new()),
        });
        let kubelet = tokio::spawn({
            let cluster = cluster.clone();
            async move {
                loop {
                    cluster.reconcile();
                    cluster.probe().await;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        });
        FakeCluster {
            cluster,
            digest,
            _s3: s3,
            kubelet,
        }
    }

    /// A replica's driver, its API requests answered by this cluster.
    fn replica(&self) -> KubeDriver {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let cluster = self.cluster.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let method = request.method().to_string();
                let path = request.uri().path().to_string();
                let query = request.uri().query().unwrap_or_default().to_string();
                let body = request.into_body().collect_bytes().await.unwrap();
                let (code, answer) = cluster.answer(&method, &path, &query, &body);
                send.send_response(
                    Response::builder()
                        .status(code)
                        .body(Body::from(answer.to_string().into_bytes()))
                        .unwrap(),
                );
            }
        });
        let settings = KubeSettings {
            control_plane_namespace: "sless".into(),
            image_repo: "registry.example/sless".into(),
            image_tag: "0.1.0-test".into(),
            artifact_reader_secret: "sless-artifact-reader".into(),
            image_pull_secret: None,
            allowed_egress: vec![],
            build: BuildMode::Artifact,
            image_build: None,
        };
        let serving = ServingSettings {
            max_queue: 10,
            max_response_bytes: 1024 * 1024,
            poll: Duration::from_millis(20),
            endpoints_ttl: Duration::from_millis(100),
            start_timeout: Duration::from_secs(30),
            watch_endpoints: false,
            idle_timeout: None,
        };
        let store = Arc::new(object_store::memory::InMemory::new());
        let signer = sless_server::blobs::signer(&sless_server::blobs::BlobSettings {
            url: "s3://unused".into(),
            s3_endpoint: Some("http://127.0.0.1:9".into()),
            s3_region: "us-east-1".into(),
            s3_access_key_id: Some("k".into()),
            s3_secret_access_key: Some("s".into()),
            s3_path_style: true,
        })
        .unwrap();
        KubeDriver::new(kube::Client::new(service, "default"), settings, serving, store, signer)
    }

    /// Version `n` of demo/hello, whose handler sees `WHICH=v{n}`.
    fn version(&self, n: u64) -> Deployment {
        let spec = serde_json::from_value(json!({"runtime": "python3.11", "env": {"WHICH": format!("v{n}")},
                                                 "timeout_sec": 60, "concurrency": 4}))
        .unwrap();
        Deployment {
            key: key(),
            version: n,
            artifact: Fingerprint::from_stored(FINGERPRINT),
            digest: Some(self.digest.clone()),
            spec,
            verify: false,
            secrets: Default::default(),
        }
    }

    /// The pids of the running pods of version `n`.
    fn pids(&self, n: u64) -> Vec<u32> {
        let workloads = self.cluster.workloads.lock().unwrap();
        workloads
            .get(&format!("fn-hello-v{n}"))
            .map(|w| w.pods.iter().map(|p| p.child.id()).collect())
            .unwrap_or_default()
    }
}

fn key() -> FunctionKey {
    FunctionKey::new("demo", "hello")
}

/// Calls version `n` through `driver`: what the handler answered.
async fn invoke(driver: &KubeDriver, n: u64, event: Value) -> Result<Value, InvokeError> {
    let result = driver
        .invoke(&VersionRef::new(key(), n), &event_call("req", event))
        .await?;
    assert_eq!(result.status, 200, "{}", String::from_utf8_lossy(&result.body));
    Ok(serde_json::from_slice(&result.body).unwrap())
}

#[tokio::test]
async fn two_replicas_scale_a_version_from_zero_and_a_real_instance_answers_both() {
    let cluster = FakeCluster::start().await;
    let (a, b) = (cluster.replica(), cluster.replica());
    a.deploy(cluster.version(1)).await.unwrap();
    b.deploy(cluster.version(1)).await.unwrap();
    assert!(cluster.pids(1).is_empty(), "a version starts at zero");
    // The first call scales it to one pod and waits for it.
    let first = invoke(&a, 1, json!({})).await.unwrap();
    assert_eq!(first["which"], "v1");
    assert!(first["pid"].as_u64().is_some(), "{first}");
    let pids = cluster.pids(1);
    assert_eq!(pids.len(), 1);
    // A python handler's pid is the shim's, a child of the instance: the
    // other replica reaches the same pod.
    let second = invoke(&b, 1, json!({})).await.unwrap();
    assert_eq!(second["pid"], first["pid"]);
    assert_eq!(cluster.pids(1), pids, "one pod for both replicas");
}

#[tokio::test]
async fn a_new_version_serves_its_own_answers_beside_the_old_one() {
    let cluster = FakeCluster::start().await;
    let driver = cluster.replica();
    driver.deploy(cluster.version(1)).await.unwrap();
    assert_eq!(invoke(&driver, 1, json!({})).await.unwrap()["which"], "v1");
    driver.deploy(cluster.version(2)).await.unwrap();
    let calls = (0..6).map(|i| {
        let n = 1 + i % 2;
        let driver = &driver;
        async move { (n, invoke(driver, n, json!({})).await.unwrap()) }
    });
    for (n, answer) in futures::future::join_all(calls).await {
        assert_eq!(answer["which"], format!("v{n}"), "no stale answer");
    }
    assert!(!cluster.pids(2).is_empty() && !cluster.pids(1).is_empty());
}

#[tokio::test]
async fn a_killed_pod_fails_its_call_then_its_restart_answers() {
    let cluster = FakeCluster::start().await;
    let driver = cluster.replica();
    driver.deploy(cluster.version(1)).await.unwrap();
    let before = invoke(&driver, 1, json!({})).await.unwrap();
    let marks = tempfile::tempdir().unwrap();
    let mark = marks.path().join("in-the-handler");
    let in_flight = invoke(&driver, 1, json!({"mark": mark}));
    let kill = async {
        eventually(Duration::from_secs(20), || async {
            mark.exists()
                .then_some(())
                .ok_or_else(|| "the call has not reached the handler".to_string())
        })
        .await;
        let pid = cluster.pids(1)[0];
        Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap();
    };
    let (broken, ()) = tokio::join!(in_flight, kill);
    assert!(matches!(broken, Err(InvokeError::Crashed { .. })), "{broken:?}");
    // The kubelet starts it again; calls find it once it is ready.
    let after = eventually(Duration::from_secs(30), || async {
        invoke(&driver, 1, json!({})).await.map_err(|e| e.to_string())
    })
    .await;
    assert_ne!(after["pid"], before["pid"]);
}
