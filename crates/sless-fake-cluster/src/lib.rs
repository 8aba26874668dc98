//! The Kubernetes driver's data path on this machine: `KubeDriver` →
//! EndpointSlices → frames over TCP → real `sless instance` processes on
//! loopback addresses of their own (127.x.y.z, one a pod) that fetch their artifact from the real S3 server.
//!
//! **The API server and the kubelet here are stand-ins** (there is no
//! cluster on the project's machines): a test-only stand-in for the few
//! API endpoints the driver calls to build and serve (applies,
//! Deployments' scale, EndpointSlices, Jobs and their pods and logs, the
//! artifact reader Secret), whose "kubelet" starts one `sless instance`
//! per replica of a Deployment, with the instance container's environment
//! from the applied pod template, restarts it when it dies, and lists it in
//! the Deployment's EndpointSlice once its `/ready` answers (a Secret's
//! variables and volume are resolved and its files written into the pod's
//! own directory, where `SLESS_SECRETS_DIR` then points); a build Job's
//! pod is `sless instance build` with the Job's environment and nothing
//! else; a run Job's pod is a one-shot `sless instance` from the Job's pod
//! template, shown with its phase, readiness and frame port; a warm pool's
//! pods are `sless instance generic` without the object store's
//! credentials, listed by label, claimed by a label patch conditional on
//! their resourceVersion (the claimed pod leaves its Deployment, which
//! starts another) and deleted by name. Pods stop as
//! the kubelet stops them: out of the EndpointSlice, SIGTERM, SIGKILL
//! after the template's grace period; a changed template rolls (new pods
//! first, the old ones serve until those are ready). Everything
//! else is real: the driver, the instances, the builds, the shim, the S3
//! server. For tests and benches only (not published).

mod api;
mod cluster;
mod kubelet;
mod s3;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use kube::client::Body;
use object_store::ObjectStoreExt;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use sless_driver::{Deployment, Fingerprint, FunctionKey};
use sless_driver_k8s::{BuildMode, KubeDriver, KubeSettings, ServingSettings};

use crate::cluster::Cluster;
pub use crate::kubelet::peak_memory;
pub use crate::s3::{S3Server, S3_KEY, S3_SECRET};

/// The fingerprint of the artifact the cluster starts with.
pub const FINGERPRINT: &str = "0123456789abcdef0123456789abcdef";

/// Answers with its pid and its instance's (`ppid`), the version's `WHICH`, its secrets when it has
/// any; asked to, raises, takes its time, or sleeps after leaving a mark
/// holding its pid (so a test can kill or cancel it mid-call).
pub const HANDLER: &str = r#"
import os, time
def handle(event, context):
    if isinstance(event, dict) and event.get("sleep"):
        time.sleep(event["sleep"])
    if isinstance(event, dict) and event.get("raise"):
        raise ValueError(event["raise"])
    if isinstance(event, dict) and event.get("many"):
        return {"statusCode": 200, "headers": {f"x-{i}": "" for i in range(1001)}, "body": "ok"}
    if isinstance(event, dict) and event.get("mark"):
        with open(event["mark"], "w") as mark:
            mark.write(str(os.getpid()))
        time.sleep(30)
    answer = {"pid": os.getpid(), "ppid": os.getppid(), "which": os.environ.get("WHICH")}
    path = os.path.join(os.environ.get("SLESS_SECRETS_DIR", "/nonexistent"), "tls", "server.key")
    if os.path.exists(path):
        answer["key"] = open(path).read()
        answer["mode"] = os.stat(path).st_mode & 0o777
        answer["password"] = os.environ.get("DB_PASSWORD")
    return answer
"#;

/// The stand-in cluster, its S3 server and the artifact of [`HANDLER`].
pub struct FakeCluster {
    cluster: Arc<Cluster>,
    /// The sha256 of the prepared artifact of [`HANDLER`].
    pub digest: String,
    /// The object store a server of this cluster opens.
    pub store: Arc<dyn object_store::ObjectStore>,
    pub s3: S3Server,
    kubelet: tokio::task::JoinHandle<()>,
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        self.kubelet.abort();
        self.cluster.workloads.lock().unwrap().clear();
        self.cluster.jobs.lock().unwrap().clear();
        self.cluster.terminating.lock().unwrap().clear();
        self.cluster.claimed.lock().unwrap().clear();
    }
}

impl FakeCluster {
    /// Starts the S3 server, stores the artifact of [`HANDLER`] and runs
    /// the kubelet; `sless` is the binary pods run.
    pub async fn start(sless: impl Into<PathBuf>) -> FakeCluster {
        let s3 = S3Server::start().await;
        // What the artifact reader Secret gives a pod.
        let s3_env = s3.env();
        let store = sless_server::blobs::open(&s3.blob_settings()).await.unwrap();
        let code = tempfile::tempdir().unwrap();
        std::fs::write(code.path().join("handler.py"), HANDLER).unwrap();
        let digest = store_artifact(&*store, FINGERPRINT, code.path()).await;
        let cluster = Arc::new(Cluster {
            sless: sless.into(),
            s3_env,
            workloads: Mutex::new(BTreeMap::new()),
            jobs: Mutex::new(BTreeMap::new()),
            secrets: Mutex::new(BTreeMap::new()),
            terminating: Mutex::new(Vec::new()),
            claimed: Mutex::new(BTreeMap::new()),
            function_pod_start: Mutex::new(Duration::ZERO),
            build_peak: Mutex::new(0),
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
            store,
            s3,
            kubelet,
        }
    }

    /// A replica's driver, its API requests answered by this cluster.
    pub fn replica(&self) -> KubeDriver {
        self.replica_idle(None)
    }

    /// A replica that scales a version back to zero after `idle` without calls.
    pub fn replica_idle(&self, idle: Option<Duration>) -> KubeDriver {
        self.replica_with(ServingSettings {
            idle_timeout: idle,
            ..quick_serving()
        })
    }

    /// A replica whose wakes from zero take generic pods of `pool`.
    pub fn replica_warm(&self, pool: sless_driver_k8s::objects::WarmPool) -> KubeDriver {
        self.replica_with(ServingSettings {
            warm: Some(pool),
            ..quick_serving()
        })
    }

    /// A replica that reports its calls under way and scales by load
    /// every `every`.
    pub fn replica_scaling(&self, every: Duration) -> KubeDriver {
        self.replica_with(ServingSettings {
            scale_every: Some(every),
            ..quick_serving()
        })
    }

    /// A replica serving with `serving`.
    pub fn replica_with(&self, serving: ServingSettings) -> KubeDriver {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let cluster = self.cluster.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let method = request.method().to_string();
                let path = request.uri().path().to_string();
                let query = request.uri().query().unwrap_or_default().to_string();
                let body = request.into_body().collect_bytes().await.unwrap();
                let (code, answer) = cluster.answer(&method, &path, &query, &body);
                // A log is text; everything else JSON.
                let text = match answer {
                    Value::String(text) => text,
                    other => other.to_string(),
                };
                send.send_response(
                    Response::builder()
                        .status(code)
                        .body(Body::from(text.into_bytes()))
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
            build_env: Vec::new(),
            max_build_mb: 1024,
        };
        // The object store the server uses, and its signer for build grants.
        let store = self.store.clone();
        let signer = sless_server::blobs::signer(&self.s3.blob_settings()).unwrap();
        KubeDriver::new(kube::Client::new(service, "default"), settings, serving, store, signer)
    }

    /// Stores the files in `dir` as the artifact `fingerprint`, as a build
    /// does; returns its tarball's sha256.
    pub async fn store_artifact(&self, fingerprint: &str, dir: &std::path::Path) -> String {
        store_artifact(&*self.store, fingerprint, dir).await
    }

    /// Version `n` of demo/hello, whose handler sees `WHICH=v{n}`.
    pub fn version(&self, n: u64) -> Deployment {
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

    /// The Jobs in the cluster (builds and runs), with the pid of each one's pod.
    pub fn jobs(&self) -> Vec<(String, u32)> {
        let jobs = self.cluster.jobs.lock().unwrap();
        jobs.iter().map(|(name, pod)| (name.clone(), pod.pid())).collect()
    }

    /// Keeps every function pod started from now on unready for `start`
    /// (generic pods are not held): a real cluster takes seconds to
    /// schedule a pod and pull its image, where this one starts it in
    /// tens of milliseconds, which would let a function's own pod race the
    /// warm pod that a cold start takes.
    pub fn set_function_pod_start(&self, start: Duration) {
        *self.cluster.function_pod_start.lock().unwrap() = start;
    }

    /// The most memory a build pod's process had resident since the last
    /// call (its VmHWM, as the kubelet's passes saw it), in bytes.
    pub fn take_build_peak(&self) -> u64 {
        std::mem::take(&mut *self.cluster.build_peak.lock().unwrap())
    }

    /// The pids of the ready generic pods of every warm pool.
    pub fn generic_pids(&self) -> Vec<u32> {
        let workloads = self.cluster.workloads.lock().unwrap();
        workloads
            .iter()
            .filter(|(_, w)| w.template.generic)
            .flat_map(|(_, w)| w.pods.iter().filter(|p| p.ready).map(|p| p.child.id()))
            .collect()
    }

    /// The pids of the generic pods a driver claimed and has not deleted.
    pub fn claimed_pids(&self) -> Vec<u32> {
        self.cluster
            .claimed
            .lock()
            .unwrap()
            .values()
            .map(|(p, _)| p.child.id())
            .collect()
    }

    /// Claims a ready generic Python pod the way a driver replica does,
    /// dated `claimed_at_ms` (ms since the epoch), and never retires it:
    /// what a replica that died after its claim leaves. The pod's pid.
    pub fn leave_claimed(&self, claimed_at_ms: u64) -> Option<u32> {
        self.cluster.claim_one("python3.11", claimed_at_ms).map(|(_, pid)| pid)
    }

    /// How many pods have been told to stop and have not ended yet.
    pub fn stopping(&self) -> usize {
        self.cluster.terminating.lock().unwrap().len()
    }

    /// The pids of the running pods of version `n`.
    pub fn pids(&self, n: u64) -> Vec<u32> {
        let workloads = self.cluster.workloads.lock().unwrap();
        workloads
            .get(&format!("fn-hello-v{n}"))
            .map(|w| w.pods.iter().map(|p| p.child.id()).collect())
            .unwrap_or_default()
    }
}

/// What the test replicas serve with: small queues, quick polls and
/// listings, no watch, no scaler, no warm pods.
fn quick_serving() -> ServingSettings {
    ServingSettings {
        max_queue: 10,
        max_response_bytes: 1024 * 1024,
        poll: Duration::from_millis(20),
        endpoints_ttl: Duration::from_millis(100),
        start_timeout: Duration::from_secs(30),
        watch_endpoints: false,
        scale_every: None,
        idle_timeout: None,
        warm: None,
    }
}

/// The function every version here is of: demo/hello.
async fn store_artifact(store: &dyn object_store::ObjectStore, fingerprint: &str, dir: &std::path::Path) -> String {
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()));
    tar.append_dir_all(".", dir).unwrap();
    let tarball = tar.into_inner().unwrap().finish().unwrap();
    let digest = hex::encode(Sha256::digest(&tarball));
    store
        .put(
            &object_store::path::Path::from(format!("artifacts/{fingerprint}/{digest}.tar.gz")),
            tarball.into(),
        )
        .await
        .unwrap();
    digest
}

pub fn key() -> FunctionKey {
    FunctionKey::new("demo", "hello")
}
