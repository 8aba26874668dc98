//! The Kubernetes driver's data path on this machine: `KubeDriver` →
//! EndpointSlices → frames over TCP → real `sless instance` processes on
//! 127.0.0.1 that fetch their artifact from the real S3 server.
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
//! else. Everything else is real: the driver, the instances, the builds,
//! the shim, the S3 server.

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

/// Answers with its pid, the version's `WHICH`, its secrets when it has
/// any, and, asked to, sleeps after leaving a mark (so a test can kill it
/// mid-call).
const HANDLER: &str = r#"
import os, time
def handle(event, context):
    if isinstance(event, dict) and event.get("mark"):
        open(event["mark"], "w").close()
        time.sleep(30)
    answer = {"pid": os.getpid(), "which": os.environ.get("WHICH")}
    if os.environ.get("SLESS_SECRETS_DIR"):
        path = os.path.join(os.environ["SLESS_SECRETS_DIR"], "tls", "server.key")
        answer["key"] = open(path).read()
        answer["mode"] = os.stat(path).st_mode & 0o777
        answer["password"] = os.environ.get("DB_PASSWORD")
    return answer
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

/// What a pod of a Deployment gets: the instance's environment (values,
/// and those of secretKeyRefs) and the files of its Secret volume.
#[derive(Default, Clone)]
struct PodTemplate {
    /// The applied template as sent: a new one rolls the pods.
    text: String,
    env: Vec<(String, String)>,
    /// Where the Secret volume is mounted, and its files: path, bytes, mode.
    mount: Option<String>,
    files: Vec<(String, Vec<u8>, u32)>,
}

/// A Deployment as the stand-in keeps it.
#[derive(Default)]
struct Workload {
    template: PodTemplate,
    replicas: i32,
    resource_version: u64,
    pods: Vec<Pod>,
    /// The `sless.dev/last-call` annotation replicas report.
    last_call: Option<String>,
}

/// A build Job's one pod: `sless instance build` with the Job's environment.
struct BuildPod {
    child: Child,
    dir: tempfile::TempDir,
}

impl BuildPod {
    /// The exit code once it has ended.
    fn ended(&mut self) -> Option<i32> {
        self.child.try_wait().unwrap().map(|status| status.code().unwrap_or(-1))
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(file)).unwrap_or_default()
    }
}

impl Drop for BuildPod {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An applied Secret: its resourceVersion (bumped when the data changes)
/// and its data.
type StoredSecret = (u64, BTreeMap<String, Vec<u8>>);

/// The stand-in cluster's state, shared by every replica's client.
struct Cluster {
    sless: String,
    s3_env: Vec<(String, String)>,
    workloads: Mutex<BTreeMap<String, Workload>>,
    jobs: Mutex<BTreeMap<String, BuildPod>>,
    /// Applied Secrets by name.
    secrets: Mutex<BTreeMap<String, StoredSecret>>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Cluster {
    fn start_pod(&self, template: &PodTemplate) -> Pod {
        let dir = tempfile::tempdir().unwrap();
        let (frames, ready_port) = (free_port(), free_port());
        let mut cmd = Command::new(&self.sless);
        cmd.arg("instance")
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin");
        let mut env = template.env.clone();
        // The Secret volume, "mounted" in the pod's directory: the files
        // with their modes, and the handler's SLESS_SECRETS_DIR pointed there.
        if let Some(mount) = &template.mount {
            let root = dir.path().join("secrets");
            for (path, bytes, mode) in &template.files {
                let file = root.join(path);
                std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                std::fs::write(&file, bytes).unwrap();
                std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(*mode)).unwrap();
            }
            for (name, value) in &mut env {
                if name == "SLESS_INSTANCE_ENV" {
                    let mut handler: BTreeMap<String, String> = serde_json::from_str(value).unwrap();
                    if handler.get("SLESS_SECRETS_DIR") == Some(mount) {
                        handler.insert("SLESS_SECRETS_DIR".into(), root.display().to_string());
                    }
                    *value = serde_json::to_string(&handler).unwrap();
                }
            }
        }
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

    /// Runs a build Job's pod: its container's environment and nothing of
    /// this machine's (no object-store credentials: the Job has its grant).
    fn start_build(&self, job: &Value) -> BuildPod {
        let dir = tempfile::tempdir().unwrap();
        let container = &job["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["command"], json!(["sless", "instance", "build"]), "{job}");
        let env = container["env"].as_array().cloned().unwrap_or_default();
        let mut cmd = Command::new(&self.sless);
        cmd.args(["instance", "build"])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin");
        for var in &env {
            cmd.env(var["name"].as_str().unwrap(), var["value"].as_str().unwrap());
        }
        cmd.env("SLESS_INSTANCE_WORK_DIR", dir.path().join("tmp"))
            .env("SLESS_BUILD_TERMINATION_LOG", dir.path().join("termination-log"))
            .stdout(std::fs::File::create(dir.path().join("stdout")).unwrap())
            .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap());
        BuildPod {
            child: cmd.spawn().expect("start sless instance build"),
            dir,
        }
    }

    /// A Job as the API server shows it: its status from its pod's end.
    fn job_status(pod: &mut BuildPod) -> Value {
        match pod.ended() {
            None => json!({"active": 1}),
            Some(0) => json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}),
            Some(_) => json!({"failed": 1, "conditions": [{"type": "Failed", "status": "True",
                                                            "reason": "BackoffLimitExceeded"}]}),
        }
    }

    /// The Job's pod: its termination message is the termination log, or
    /// (`FallbackToLogsOnError`) the end of its output when it failed.
    fn job_pod(name: &str, pod: &mut BuildPod) -> Value {
        let state = match pod.ended() {
            None => json!({"running": {}}),
            Some(code) => {
                let message = if code == 0 {
                    pod.read("termination-log")
                } else {
                    pod.read("stderr")
                };
                json!({"terminated": {"exitCode": code, "message": message}})
            }
        };
        json!({"metadata": {"name": format!("{name}-pod"), "namespace": "sless-fn-demo"},
               "spec": {"containers": [{"name": "build"}]},
               "status": {"containerStatuses": [{"name": "build", "image": "i", "imageID": "", "ready": false,
                                                 "restartCount": 0, "state": state}]}})
    }

    /// What pods of an applied Deployment get: the instance container's
    /// variables (values, and secretKeyRefs looked up in the applied
    /// Secrets), the fetch's artifact and digest, and the files of a
    /// Secret volume the instance mounts.
    fn pod_template(&self, deployment: &Value) -> PodTemplate {
        let pod = &deployment["spec"]["template"]["spec"];
        let instance = &pod["containers"][0];
        let secrets = self.secrets.lock().unwrap();
        let lookup =
            |name: &Value, key: &Value| -> Vec<u8> { secrets[name.as_str().unwrap()].1[key.as_str().unwrap()].clone() };
        let fetch = pod["initContainers"][0]["env"].as_array().cloned().unwrap_or_default();
        let env = instance["env"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .chain(fetch.iter())
            .filter_map(|e| {
                let value = match (&e["value"], &e["valueFrom"]["secretKeyRef"]) {
                    (Value::String(value), _) => value.clone(),
                    (_, from @ Value::Object(_)) => String::from_utf8(lookup(&from["name"], &from["key"])).unwrap(),
                    _ => return None,
                };
                Some((e["name"].as_str()?.to_string(), value))
            })
            .filter(|(name, _)| name != "SLESS_INSTANCE_CODE_DIR")
            .collect();
        let mut template = PodTemplate {
            text: deployment["spec"]["template"].to_string(),
            env,
            ..PodTemplate::default()
        };
        for volume in pod["volumes"].as_array().into_iter().flatten() {
            let source = &volume["secret"];
            if source.is_null() {
                continue;
            }
            let mount = instance["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|m| m["name"] == volume["name"])
                .expect("a Secret volume the instance mounts");
            template.mount = Some(mount["mountPath"].as_str().unwrap().to_string());
            for item in source["items"].as_array().into_iter().flatten() {
                let mode = item["mode"]
                    .as_u64()
                    .or(source["defaultMode"].as_u64())
                    .unwrap_or(0o644);
                template.files.push((
                    item["path"].as_str().unwrap().to_string(),
                    lookup(&source["secretName"], &item["key"]),
                    u32::try_from(mode).unwrap(),
                ));
            }
        }
        template
    }

    /// The kubelet's pass: dead pods restarted (not ready until they say
    /// so), pods started or stopped to the replicas wanted.
    fn reconcile(&self) {
        let mut workloads = self.workloads.lock().unwrap();
        for workload in workloads.values_mut() {
            for pod in &mut workload.pods {
                if pod.child.try_wait().unwrap().is_some() {
                    *pod = self.start_pod(&workload.template);
                }
            }
            let wanted = usize::try_from(workload.replicas).unwrap_or(0);
            workload.pods.truncate(wanted);
            while workload.pods.len() < wanted {
                let pod = self.start_pod(&workload.template);
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
            "POST" if path.ends_with("/jobs") => {
                let mut job: Value = serde_json::from_slice(body).unwrap();
                let name = job["metadata"]["name"].as_str().unwrap().to_string();
                let mut jobs = self.jobs.lock().unwrap();
                if jobs.contains_key(&name) {
                    return (409, status(409, "AlreadyExists"));
                }
                let mut pod = self.start_build(&job);
                job["metadata"]["uid"] = json!(format!("uid-of-{name}"));
                job["status"] = Self::job_status(&mut pod);
                jobs.insert(name, pod);
                (201, job)
            }
            // The idle scaler: a replica's last call noted on the
            // Deployment (a merge patch, not an apply), and read back.
            "PATCH" if path.contains("/deployments/") && !query.contains("fieldManager") => {
                let patch: Value = serde_json::from_slice(body).unwrap();
                let mut workloads = self.workloads.lock().unwrap();
                let Some(workload) = workloads.get_mut(&name) else {
                    return (404, status(404, "NotFound"));
                };
                if let Some(ms) = patch["metadata"]["annotations"]["sless.dev/last-call"].as_str() {
                    workload.last_call = Some(ms.to_string());
                    // A change of the object: a new resourceVersion.
                    workload.resource_version += 1;
                }
                (200, deployment_of(&name, workload))
            }
            "GET" if path.contains("/deployments/") => match self.workloads.lock().unwrap().get(&name) {
                Some(workload) => (200, deployment_of(&name, workload)),
                None => (404, status(404, "NotFound")),
            },
            "GET" if path.contains("/jobs/") => match self.jobs.lock().unwrap().get_mut(&name) {
                Some(pod) => (
                    200,
                    json!({"apiVersion": "batch/v1", "kind": "Job",
                           "metadata": {"name": name, "namespace": "sless-fn-demo"},
                           "status": Self::job_status(pod)}),
                ),
                None => (404, status(404, "NotFound")),
            },
            "DELETE" if path.contains("/jobs/") => {
                self.jobs.lock().unwrap().remove(&name);
                (
                    200,
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
                )
            }
            "GET" if path.ends_with("/pods") => {
                let query = query.replace("%2F", "/").replace("%3D", "=");
                let job = query
                    .split('&')
                    .find_map(|p| p.strip_prefix("labelSelector=batch.kubernetes.io/job-name="))
                    .unwrap_or_default()
                    .to_string();
                let items: Vec<Value> = self
                    .jobs
                    .lock()
                    .unwrap()
                    .get_mut(&job)
                    .map(|pod| Self::job_pod(&job, pod))
                    .into_iter()
                    .collect();
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}),
                )
            }
            "GET" if path.ends_with("/log") => {
                let pod = path.trim_end_matches("/log").rsplit('/').next().unwrap();
                let job = pod.trim_end_matches("-pod");
                match self.jobs.lock().unwrap().get(job) {
                    Some(pod) => (200, Value::String(pod.read("stdout") + &pod.read("stderr"))),
                    None => (404, status(404, "NotFound")),
                }
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
                    let template = self.pod_template(&object);
                    let mut workloads = self.workloads.lock().unwrap();
                    let workload = workloads.entry(name).or_default();
                    if workload.template.text != template.text {
                        workload.template = template;
                        workload.pods.clear();
                    }
                    drop(workloads);
                    self.reconcile();
                } else if path.contains("/secrets/") {
                    let data: BTreeMap<String, Vec<u8>> = object["data"]
                        .as_object()
                        .into_iter()
                        .flatten()
                        .map(|(key, value)| (key.clone(), base64_decode(value)))
                        .collect();
                    let mut secrets = self.secrets.lock().unwrap();
                    let stored = secrets.entry(name).or_insert((0, BTreeMap::new()));
                    if stored.1 != data {
                        *stored = (stored.0 + 1, data);
                    }
                    object["metadata"]["resourceVersion"] = json!(stored.0.to_string());
                }
                (200, object)
            }
            _ => (404, status(404, "NotFound")),
        }
    }
}

/// A Deployment as the API server shows it: replicas, the last call
/// reported, and the resourceVersion a conditional scale names.
fn deployment_of(name: &str, workload: &Workload) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": name, "namespace": "sless-fn-demo",
                        "resourceVersion": workload.resource_version.to_string(),
                        "annotations": {"sless.dev/last-call": workload.last_call.clone().unwrap_or_default()}},
           "spec": {"replicas": workload.replicas, "selector": {}, "template": {}}})
}

fn base64_decode(value: &Value) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(value.as_str().unwrap())
        .unwrap()
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
    store: Arc<dyn object_store::ObjectStore>,
    s3: S3Server,
    kubelet: tokio::task::JoinHandle<()>,
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        self.kubelet.abort();
        self.cluster.workloads.lock().unwrap().clear();
        self.cluster.jobs.lock().unwrap().clear();
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
            jobs: Mutex::new(BTreeMap::new()),
            secrets: Mutex::new(BTreeMap::new()),
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
    fn replica(&self) -> KubeDriver {
        self.replica_idle(None)
    }

    /// A replica that scales a version back to zero after `idle` without calls.
    fn replica_idle(&self, idle: Option<Duration>) -> KubeDriver {
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
        };
        let serving = ServingSettings {
            max_queue: 10,
            max_response_bytes: 1024 * 1024,
            poll: Duration::from_millis(20),
            endpoints_ttl: Duration::from_millis(100),
            start_timeout: Duration::from_secs(30),
            watch_endpoints: false,
            idle_timeout: idle,
        };
        // The object store the server uses, and its signer for build grants.
        let store = self.store.clone();
        let signer = sless_server::blobs::signer(&self.s3.blob_settings()).unwrap();
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

/// A build as a Job: its pod (a real `sless instance build`, with the
/// Job's environment only) reads the archive and uploads the tarball
/// through its grant; the driver hashes the upload, stores it as the
/// artifact, and a version of it serves.
#[tokio::test]
async fn a_build_job_uploads_through_its_grant_and_what_the_server_accepted_serves() {
    let cluster = FakeCluster::start().await;
    let driver = cluster.replica();
    let built = build(&driver, &[("handler.py", HANDLER.as_bytes())]).await.unwrap();
    let digest = built.digest.clone().unwrap();
    assert!(
        built.log_tail.contains("no dependencies to install"),
        "{}",
        built.log_tail
    );
    // The accepted artifact is what its digest says; the build's archive
    // and upload are gone.
    let stored = cluster
        .store
        .get(&object_store::path::Path::from(format!(
            "artifacts/{}/{digest}.tar.gz",
            built.artifact
        )))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(hex::encode(Sha256::digest(&stored)), digest);
    assert_eq!(cluster.s3.keys("sless/builds"), Vec::<String>::new());
    assert!(cluster.s3.keys("sless/artifacts").iter().any(|k| k.contains(&digest)));
    let version = Deployment {
        artifact: built.artifact,
        digest: Some(digest),
        ..cluster.version(1)
    };
    driver.deploy(version).await.unwrap();
    assert_eq!(invoke(&driver, 1, json!({})).await.unwrap()["which"], "v1");
}

/// Builds `files` through `driver`.
async fn build(driver: &KubeDriver, files: &[(&str, &[u8])]) -> Result<sless_driver::Built, sless_driver::BuildError> {
    let archive = super::harness::zip_of(files);
    driver
        .build(sless_driver::BuildJob {
            key: key(),
            runtime: sless_api::Runtime::Python311,
            code_hash: hex::encode(Sha256::digest(&archive)),
            archive: archive.into(),
            timeout: Duration::from_secs(120),
        })
        .await
}

#[tokio::test]
async fn a_failed_build_job_reports_its_log_tail_and_stores_nothing() {
    let cluster = FakeCluster::start().await;
    let driver = cluster.replica();
    // A local requirement that is not there: pip fails without the network.
    let built = build(
        &driver,
        &[
            ("handler.py", HANDLER.as_bytes()),
            ("requirements.txt", b"./no-such-project\n"),
        ],
    )
    .await;
    let Err(sless_driver::BuildError::Failed { log_tail }) = built else {
        panic!("a failed build, not {built:?}")
    };
    assert!(log_tail.contains("no-such-project"), "{log_tail}");
    assert_eq!(cluster.s3.keys("sless/builds"), Vec::<String>::new());
    assert_eq!(
        cluster.s3.keys("sless/artifacts").len(),
        1,
        "only the prepared artifact"
    );
}

/// Version 1 with a secret variable `DB_PASSWORD` of `password` and a
/// secret file `tls/server.key`.
fn with_secrets(cluster: &FakeCluster, password: &str) -> Deployment {
    Deployment {
        secrets: sless_driver::SecretValues {
            env: vec![("DB_PASSWORD".into(), password.into())],
            files: vec![sless_driver::SecretFile {
                secret: "tls".into(),
                key: "server.key".into(),
                value: b"-----BEGIN KEY-----".to_vec(),
            }],
        },
        ..cluster.version(1)
    }
}

/// The function's Secret, its secretKeyRefs and its read-only volume, as
/// the pods get them; new values roll the pods.
#[tokio::test]
async fn a_version_with_secrets_sees_them_and_new_values_roll_its_pods() {
    let cluster = FakeCluster::start().await;
    let driver = cluster.replica();
    driver.deploy(with_secrets(&cluster, "hunter2")).await.unwrap();
    let answer = invoke(&driver, 1, json!({})).await.unwrap();
    assert_eq!(answer["password"], "hunter2");
    assert_eq!(answer["key"], "-----BEGIN KEY-----");
    assert_eq!(answer["mode"], 0o400);
    driver.deploy(with_secrets(&cluster, "hunter3")).await.unwrap();
    let answer = eventually(Duration::from_secs(30), || async {
        match invoke(&driver, 1, json!({})).await {
            Ok(answer) if answer["password"] == "hunter3" => Ok(answer),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_ne!(answer["pid"], json!(null));
}

#[tokio::test]
async fn a_version_nobody_calls_goes_back_to_zero_and_wakes_on_the_next_call() {
    let cluster = FakeCluster::start().await;
    let idle = Some(Duration::from_millis(400));
    let (a, b) = (cluster.replica_idle(idle), cluster.replica_idle(idle));
    a.deploy(cluster.version(1)).await.unwrap();
    b.deploy(cluster.version(1)).await.unwrap();
    let first = invoke(&a, 1, json!({})).await.unwrap();
    invoke(&b, 1, json!({})).await.unwrap();
    assert_eq!(cluster.pids(1).len(), 1);
    // Neither replica calls: the version goes back to zero, its pod stops.
    eventually(Duration::from_secs(20), || async {
        let pids = cluster.pids(1);
        pids.is_empty()
            .then_some(())
            .ok_or_else(|| format!("still running: {pids:?}"))
    })
    .await;
    // The next call starts a pod again.
    let again = invoke(&b, 1, json!({})).await.unwrap();
    assert_ne!(again["pid"], first["pid"]);
}
