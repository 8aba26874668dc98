//! The driver's reconcile scenarios, each a list of the API requests it
//! must make, in order, and nothing else. The API server is a stand-in
//! (`api_server.rs`: a mocked service behind a real `kube::Client`; no
//! cluster is available on this machine), the pods' `sless instance` is a
//! stand-in speaking the real frames on 127.0.0.1 (`fake_instance.rs`),
//! and the object store is in memory.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt};
use serde_json::{json, Value};
use sless_api::Runtime;
use sless_driver::{
    BuildError, BuildJob, Deployment, Driver, DriverError, Fingerprint, Invocation, InvocationResult, InvokeError,
    RunId, TriggerKind, VersionRef,
};
use sless_driver_k8s::{KubeDriver, ServingSettings};

use crate::api_server::{mocked, not_found, success, ApiServer};
use crate::fake_instance;
use crate::objects::{key, settings, spec};

const CORE: &str = "/api/v1/namespaces/sless-fn-demo";
const APPS: &str = "/apis/apps/v1/namespaces/sless-fn-demo";
const BATCH: &str = "/apis/batch/v1/namespaces/sless-fn-demo";
const DIGEST: &str = "5e1f0c2b8a9d4e3f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f";

struct Scenario {
    driver: KubeDriver,
    api: ApiServer,
    store: Arc<InMemory>,
}

fn scenario() -> Scenario {
    let (client, api) = mocked();
    let store = Arc::new(InMemory::new());
    let serving = ServingSettings {
        max_queue: 10,
        max_response_bytes: 1024 * 1024,
        poll: Duration::from_millis(10),
        endpoints_ttl: Duration::from_secs(3600),
        start_timeout: Duration::from_secs(2),
    };
    let driver = KubeDriver::new(client, settings(), serving, store.clone());
    Scenario { driver, api, store }
}

fn version(n: u64, verify: bool) -> Deployment {
    Deployment {
        key: key(),
        version: n,
        artifact: Fingerprint::from_stored("0123456789abcdef0123456789abcdef"),
        digest: Some(DIGEST.into()),
        spec: spec(),
        verify,
        secrets: Default::default(),
    }
}

fn target(n: u64) -> VersionRef {
    VersionRef::new(key(), n)
}

fn call(n: u64) -> Invocation {
    Invocation {
        kind: TriggerKind::Job,
        request_id: format!("req-{n}"),
        method: "POST".into(),
        path: String::new(),
        query: String::new(),
        headers: vec![],
        body: Bytes::new(),
        event: Some(json!({"n": n})),
    }
}

fn scale(name: &str, replicas: i32, resource_version: &str) -> Value {
    json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
           "metadata": {"name": name, "namespace": "sless-fn-demo", "resourceVersion": resource_version},
           "spec": {"replicas": replicas}, "status": {"replicas": replicas}})
}

/// The EndpointSlices of a Service whose ready pods are `ready`.
fn endpoints(ready: &[SocketAddr]) -> Value {
    let items: Vec<Value> = ready
        .iter()
        .map(|addr| {
            json!({"metadata": {"name": format!("slice-{}", addr.port())}, "addressType": "IPv4",
                   "endpoints": [{"addresses": [addr.ip().to_string()], "conditions": {"ready": true}}],
                   "ports": [{"name": "frames", "port": addr.port(), "protocol": "TCP"}]})
        })
        .collect();
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSliceList", "metadata": {}, "items": items})
}

fn deployment(name: &str, version: u64, replicas: i32, status: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": name, "namespace": "sless-fn-demo", "generation": 1,
                        "labels": {"sless.dev/version": version.to_string()}},
           "spec": {"replicas": replicas, "selector": {}, "template": {}},
           "status": status})
}

fn job(name: &str, status: Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": name, "namespace": "sless-fn-demo"},
           "spec": {"template": {}}, "status": status})
}

fn pod_list(pods: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": pods})
}

/// A pod whose container `container` ended with `exit_code` and `message`.
fn ended_pod(name: &str, container: &str, exit_code: i32, message: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "sless-fn-demo"},
           "spec": {"containers": [{"name": container}]},
           "status": {"phase": if exit_code == 0 { "Succeeded" } else { "Failed" },
                      "containerStatuses": [{"name": container, "image": "i", "imageID": "", "ready": false,
                                             "restartCount": 0,
                                             "state": {"terminated": {"exitCode": exit_code, "message": message}}}]}})
}

impl ApiServer {
    /// A function namespace made ready (the first object in it) and the
    /// function's anchor.
    async fn prepares_namespace_and_anchor(&mut self) {
        let namespace = self.apply("/api/v1/namespaces/sless-fn-demo").await;
        assert_eq!(
            namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
            "restricted"
        );
        self.apply("/apis/networking.k8s.io/v1/namespaces/sless-fn-demo/networkpolicies/sless-instances")
            .await;
        for secret in ["sless-artifact-reader", "sless-artifact-writer"] {
            self.expect(
                "GET",
                &format!("/api/v1/namespaces/sless/secrets/{secret}"),
                200,
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret, "namespace": "sless"},
                       "data": {"SLESS_BLOB_URL": "czM6Ly9zbGVzcw=="}}),
            )
            .await;
            let copy = self.apply(&format!("{CORE}/secrets/{secret}")).await;
            assert_eq!(copy["data"]["SLESS_BLOB_URL"], "czM6Ly9zbGVzcw==");
        }
        self.anchors().await;
    }

    async fn anchors(&mut self) {
        let anchor = self.apply(&format!("{CORE}/configmaps/fn-hello")).await;
        assert_eq!(anchor["metadata"]["labels"]["app.kubernetes.io/managed-by"], "sless");
    }

    /// A version's Deployment and Service applied, its scale read (at
    /// `replicas`); the applied Deployment.
    async fn applies_version(&mut self, version: u64, replicas: i32) -> Value {
        let name = format!("fn-hello-v{version}");
        let deployment = self.apply(&format!("{APPS}/deployments/{name}")).await;
        assert_eq!(deployment["metadata"]["ownerReferences"][0]["uid"], "uid-of-fn-hello");
        assert!(
            deployment["spec"].get("replicas").is_none(),
            "replicas belong to the scale subresource: {}",
            deployment["spec"]
        );
        let service = self.apply(&format!("{CORE}/services/{name}")).await;
        assert_eq!(service["spec"]["clusterIP"], "None");
        assert_eq!(service["metadata"]["ownerReferences"][0]["uid"], "uid-of-fn-hello");
        self.expect(
            "GET",
            &format!("{APPS}/deployments/{name}/scale"),
            200,
            scale(&name, replicas, "1"),
        )
        .await;
        deployment
    }

    /// The ready pods of version 1 listed.
    async fn lists_endpoints(&mut self, ready: &[SocketAddr]) {
        let seen = self
            .expect(
                "GET",
                "/apis/discovery.k8s.io/v1/namespaces/sless-fn-demo/endpointslices",
                200,
                endpoints(ready),
            )
            .await;
        assert!(
            seen.query.contains("kubernetes.io%2Fservice-name%3Dfn-hello-v1"),
            "{}",
            seen.query
        );
    }
}

async fn invoke(driver: &KubeDriver, version: u64, n: u64) -> Result<InvocationResult, InvokeError> {
    driver.invoke(&target(version), &call(n)).await
}

async fn set_enabled(driver: &KubeDriver, enabled: bool) -> Result<(), DriverError> {
    driver.set_enabled(&key(), enabled).await
}

async fn remove(driver: &KubeDriver) -> Result<(), DriverError> {
    driver.remove(&key()).await
}

/// Runs job `nightly` (run 4) once on version 1.
async fn run_once(driver: &KubeDriver) -> Result<InvocationResult, InvokeError> {
    driver.run_once(&target(1), &run_id(), &call(5)).await
}

/// Version 1 deployed by a fresh driver (every step of a first deploy).
async fn deployed(s: &mut Scenario) {
    let (deployed, ()) = tokio::join!(s.driver.deploy(version(1, false)), async {
        s.api.prepares_namespace_and_anchor().await;
        s.api.applies_version(1, 1).await;
    });
    deployed.unwrap();
}

#[tokio::test]
async fn a_first_deploy_prepares_the_namespace_then_serves_from_a_ready_pod() {
    let mut s = scenario();
    deployed(&mut s).await;
    let pod = fake_instance::start("demo", "hello", 1).await;
    let (result, ()) = tokio::join!(
        invoke(&s.driver, 1, 1),
        s.api.lists_endpoints(std::slice::from_ref(&pod))
    );
    let result = result.unwrap();
    assert_eq!(result.status, 200);
    assert_eq!(
        serde_json::from_slice::<Value>(&result.body).unwrap(),
        json!({"event": {"n": 1}})
    );
    assert_eq!(result.logs[0].text, "handled\n");
    assert!(!result.cold_start);
    assert_eq!(result.version, 1);
    // The list of ready pods is kept: the next call asks the API nothing.
    let (again, ()) = tokio::join!(invoke(&s.driver, 1, 2), s.api.nothing_more());
    assert_eq!(again.unwrap().status, 200);
    let stats = s.driver.stats().await;
    assert_eq!(stats.len(), 1);
    assert_eq!(stats[0].1.instances, 1);
}

#[tokio::test]
async fn a_new_version_applies_its_own_objects_and_waits_for_its_rollout() {
    let mut s = scenario();
    deployed(&mut s).await;
    let (deployed, ()) = tokio::join!(s.driver.deploy(version(2, true)), async {
        s.api.applies_version(2, 1).await;
        s.api
            .expect(
                "GET",
                &format!("{APPS}/deployments/fn-hello-v2"),
                200,
                deployment(
                    "fn-hello-v2",
                    2,
                    1,
                    json!({"observedGeneration": 1, "replicas": 1,
                    "updatedReplicas": 1, "readyReplicas": 1}),
                ),
            )
            .await;
        // Version 1 is left alone.
        s.api.nothing_more().await;
    });
    deployed.unwrap();
    let deployed: Vec<u64> = s.driver.stats().await.iter().map(|(t, _)| t.version).collect();
    assert_eq!(deployed, [1, 2]);
}

#[tokio::test]
async fn a_new_version_whose_handler_does_not_load_is_taken_away_again() {
    let mut s = scenario();
    deployed(&mut s).await;
    let (deployed, ()) = tokio::join!(s.driver.deploy(version(2, true)), async {
        s.api.applies_version(2, 1).await;
        s.api
            .expect(
                "GET",
                &format!("{APPS}/deployments/fn-hello-v2"),
                200,
                deployment(
                    "fn-hello-v2",
                    2,
                    1,
                    json!({"observedGeneration": 1, "replicas": 1,
                    "updatedReplicas": 1}),
                ),
            )
            .await;
        let pods = s
            .api
            .expect(
                "GET",
                &format!("{CORE}/pods"),
                200,
                pod_list(vec![ended_pod(
                    "fn-hello-v2-abc",
                    "instance",
                    3,
                    "ModuleNotFoundError: No module named 'handler'",
                )]),
            )
            .await;
        assert!(pods.query.contains("sless.dev%2Fversion%3D2"), "{}", pods.query);
        s.api
            .expect("DELETE", &format!("{APPS}/deployments/fn-hello-v2"), 200, success())
            .await;
        s.api
            .expect("DELETE", &format!("{CORE}/services/fn-hello-v2"), 200, success())
            .await;
    });
    let Err(DriverError::LoadFailed(error)) = deployed else {
        panic!("a load failure, not {deployed:?}")
    };
    assert!(error.contains("No module named 'handler'"), "{error}");
    let (missing, ()) = tokio::join!(invoke(&s.driver, 2, 1), s.api.nothing_more());
    assert!(matches!(missing, Err(InvokeError::NotDeployed(_))), "{missing:?}");
}

#[tokio::test]
async fn a_call_at_zero_scales_the_deployment_to_one_and_waits_for_its_pod() {
    let mut s = scenario();
    deployed(&mut s).await;
    let pod = fake_instance::start("demo", "hello", 1).await;
    let (result, ()) = tokio::join!(invoke(&s.driver, 1, 7), async {
        s.api.lists_endpoints(&[]).await;
        s.api
            .expect(
                "GET",
                &format!("{APPS}/deployments/fn-hello-v1/scale"),
                200,
                scale("fn-hello-v1", 0, "41"),
            )
            .await;
        // Only if nobody scaled it meanwhile (the scale's resource version).
        let scaled = s
            .api
            .expect(
                "PATCH",
                &format!("{APPS}/deployments/fn-hello-v1/scale"),
                200,
                scale("fn-hello-v1", 1, "42"),
            )
            .await;
        assert_eq!(
            scaled.body,
            json!({"metadata": {"resourceVersion": "41"}, "spec": {"replicas": 1}})
        );
        assert_eq!(scaled.content_type, "application/merge-patch+json");
        // Not ready yet, then ready.
        s.api.lists_endpoints(&[]).await;
        s.api.lists_endpoints(&[pod]).await;
    });
    let result = result.unwrap();
    assert!(result.cold_start);
    assert_eq!(
        serde_json::from_slice::<Value>(&result.body).unwrap(),
        json!({"event": {"n": 7}})
    );
}

#[tokio::test]
async fn disabling_scales_every_version_to_zero_and_calls_get_disabled() {
    let mut s = scenario();
    deployed(&mut s).await;
    let (disabled, ()) = tokio::join!(set_enabled(&s.driver, false), async {
        // Every version in the cluster, also one this replica did not deploy.
        let listed = s
            .api
            .expect(
                "GET",
                &format!("{APPS}/deployments"),
                200,
                json!({"apiVersion": "apps/v1", "kind": "DeploymentList", "metadata": {}, "items": [
                    deployment("fn-hello-v1", 1, 1, json!({})),
                    deployment("fn-hello-v2", 2, 3, json!({})),
                ]}),
            )
            .await;
        assert!(
            listed.query.contains("sless.dev%2Ffunction%3Dhello"),
            "{}",
            listed.query
        );
        for name in ["fn-hello-v1", "fn-hello-v2"] {
            let scaled = s
                .api
                .expect(
                    "PATCH",
                    &format!("{APPS}/deployments/{name}/scale"),
                    200,
                    scale(name, 0, "9"),
                )
                .await;
            assert_eq!(scaled.body, json!({"spec": {"replicas": 0}}));
        }
    });
    disabled.unwrap();
    let (refused, ()) = tokio::join!(invoke(&s.driver, 1, 1), s.api.nothing_more());
    assert!(matches!(refused, Err(InvokeError::Disabled(_))), "{refused:?}");
    // Back on: nothing to scale (the first call wakes it), calls go through again.
    let (enabled, ()) = tokio::join!(set_enabled(&s.driver, true), async {
        s.api
            .expect(
                "GET",
                &format!("{APPS}/deployments"),
                200,
                json!({"apiVersion": "apps/v1", "kind": "DeploymentList", "metadata": {},
                       "items": [deployment("fn-hello-v1", 1, 0, json!({}))]}),
            )
            .await;
        s.api.nothing_more().await;
    });
    enabled.unwrap();
    let pod = fake_instance::start("demo", "hello", 1).await;
    let (result, ()) = tokio::join!(
        invoke(&s.driver, 1, 2),
        s.api.lists_endpoints(std::slice::from_ref(&pod))
    );
    assert_eq!(result.unwrap().status, 200);
}

#[tokio::test]
async fn deleting_a_function_deletes_its_anchor_and_with_it_everything_it_owns() {
    let mut s = scenario();
    deployed(&mut s).await;
    let (removed, ()) = tokio::join!(remove(&s.driver), async {
        let deleted = s
            .api
            .expect("DELETE", &format!("{CORE}/configmaps/fn-hello"), 200, success())
            .await;
        assert_eq!(deleted.body["propagationPolicy"], "Foreground");
    });
    removed.unwrap();
    let (missing, ()) = tokio::join!(invoke(&s.driver, 1, 1), s.api.nothing_more());
    assert!(matches!(missing, Err(InvokeError::NotDeployed(_))), "{missing:?}");
    assert!(s.driver.stats().await.is_empty());
    // Deployed again: a new anchor (the namespace is still prepared).
    let (again, ()) = tokio::join!(s.driver.deploy(version(3, false)), async {
        s.api.anchors().await;
        s.api.applies_version(3, 1).await;
    });
    again.unwrap();
}

fn build_job(archive: &[u8]) -> BuildJob {
    BuildJob {
        key: key(),
        runtime: Runtime::Python311,
        code_hash: "c0de".repeat(16),
        archive: Bytes::copy_from_slice(archive),
        timeout: Duration::from_secs(120),
    }
}

/// The build Job's name and the artifact it builds.
async fn build_names(s: &Scenario) -> (String, Fingerprint) {
    let artifact = s
        .driver
        .fingerprint(Runtime::Python311, &"c0de".repeat(16))
        .await
        .unwrap();
    (format!("build-hello-{}", &artifact.as_str()[..12]), artifact)
}

/// A build Job made (checked), then found running, then ended as `status` says.
async fn build_runs(api: &mut ApiServer, name: &str, ended: Value) {
    api.prepares_namespace_and_anchor().await;
    let made = api
        .expect("POST", &format!("{BATCH}/jobs"), 201, job(name, json!({})))
        .await;
    assert_eq!(made.body["metadata"]["name"], name);
    assert_eq!(made.body["spec"]["activeDeadlineSeconds"], 120);
    assert_eq!(made.body["metadata"]["ownerReferences"][0]["uid"], "uid-of-fn-hello");
    let env = &made.body["spec"]["template"]["spec"]["containers"][0]["env"];
    let archive = env
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "SLESS_BUILD_ARCHIVE")
        .unwrap();
    assert!(archive["value"].as_str().unwrap().starts_with("builds/"), "{archive}");
    api.expect(
        "GET",
        &format!("{BATCH}/jobs/{name}"),
        200,
        job(name, json!({"active": 1})),
    )
    .await;
    api.expect("GET", &format!("{BATCH}/jobs/{name}"), 200, job(name, ended))
        .await;
}

#[tokio::test]
async fn a_build_runs_as_a_job_and_its_pod_reports_the_artifact_digest() {
    let mut s = scenario();
    let (name, artifact) = build_names(&s).await;
    let (built, ()) = tokio::join!(s.driver.build(build_job(b"zip bytes")), async {
        build_runs(
            &mut s.api,
            &name,
            json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}),
        )
        .await;
        let pods = s
            .api
            .expect(
                "GET",
                &format!("{CORE}/pods"),
                200,
                pod_list(vec![ended_pod("build-pod", "build", 0, DIGEST)]),
            )
            .await;
        assert!(
            pods.query.contains(&format!("batch.kubernetes.io%2Fjob-name%3D{name}")),
            "{}",
            pods.query
        );
        let log = s
            .api
            .expect(
                "GET",
                &format!("{CORE}/pods/build-pod/log"),
                200,
                json!("Successfully installed requests\n"),
            )
            .await;
        assert!(log.query.contains("tailLines=40"), "{}", log.query);
    });
    let built = built.unwrap();
    assert_eq!(built.artifact, artifact);
    assert_eq!(built.digest.as_deref(), Some(DIGEST));
    assert!(built.log_tail.contains("Successfully installed"));
    // The archive waited in the object store for the Job only.
    let left: Vec<_> = futures::TryStreamExt::try_collect::<Vec<_>>(s.store.list(None))
        .await
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
    // Once the artifact is stored, a build of the same code asks nothing.
    let key = object_store::path::Path::from(format!("artifacts/{artifact}/{DIGEST}.tar.gz"));
    s.store.put(&key, Bytes::from_static(b"tarball").into()).await.unwrap();
    assert!(s.driver.has_artifact(&artifact).await.unwrap());
    let (again, ()) = tokio::join!(s.driver.build(build_job(b"zip bytes")), s.api.nothing_more());
    assert_eq!(again.unwrap().digest.as_deref(), Some(DIGEST));
    s.driver.remove_artifact(&artifact).await.unwrap();
    assert!(!s.driver.has_artifact(&artifact).await.unwrap());
}

#[tokio::test]
async fn a_failed_build_reports_its_log_tail() {
    let mut s = scenario();
    let (name, _) = build_names(&s).await;
    let (built, ()) = tokio::join!(s.driver.build(build_job(b"zip bytes")), async {
        build_runs(
            &mut s.api,
            &name,
            json!({"failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}),
        )
        .await;
        s.api
            .expect(
                "GET",
                &format!("{CORE}/pods"),
                200,
                pod_list(vec![ended_pod("build-pod", "build", 1, "pip failed")]),
            )
            .await;
        s.api
            .expect(
                "GET",
                &format!("{CORE}/pods/build-pod/log"),
                200,
                json!("ERROR: No matching distribution found for nosuchpkg\n"),
            )
            .await;
    });
    let Err(BuildError::Failed { log_tail }) = built else {
        panic!("a failed build, not {built:?}")
    };
    assert!(
        log_tail.contains("No matching distribution found for nosuchpkg"),
        "{log_tail}"
    );
}

#[tokio::test]
async fn a_build_past_its_deadline_times_out() {
    let mut s = scenario();
    let (name, _) = build_names(&s).await;
    let (built, ()) = tokio::join!(s.driver.build(build_job(b"zip bytes")), async {
        build_runs(
            &mut s.api,
            &name,
            json!({"failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
                   "message": "Job was active longer than specified deadline"}]}),
        )
        .await;
        // Its pod was stopped and is gone.
        s.api
            .expect("GET", &format!("{CORE}/pods"), 200, pod_list(vec![]))
            .await;
    });
    let Err(BuildError::TimedOut { after, log_tail }) = built else {
        panic!("a timeout, not {built:?}")
    };
    assert_eq!(after, Duration::from_secs(120));
    assert!(log_tail.contains("longer than specified deadline"), "{log_tail}");
}

fn run_id() -> RunId {
    RunId {
        namespace: "demo".into(),
        job: "nightly".into(),
        run: 4,
    }
}

/// A run's Job made (checked).
async fn run_job_made(api: &mut ApiServer) {
    let made = api
        .expect("POST", &format!("{BATCH}/jobs"), 201, job("run-nightly-4", json!({})))
        .await;
    assert_eq!(made.body["metadata"]["name"], "run-nightly-4");
    assert_eq!(made.body["metadata"]["labels"]["sless.dev/run"], "4");
    let env = made.body["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .clone();
    assert!(env
        .iter()
        .any(|e| e["name"] == "SLESS_INSTANCE_ONCE" && e["value"] == "true"));
}

#[tokio::test]
async fn a_job_run_is_a_kubernetes_job_whose_pod_is_invoked_once() {
    let mut s = scenario();
    deployed(&mut s).await;
    let pod = fake_instance::start("demo", "hello", 1).await;
    let (result, ()) = tokio::join!(run_once(&s.driver), async {
        run_job_made(&mut s.api).await;
        let pending = json!({"metadata": {"name": "run-pod", "namespace": "sless-fn-demo"},
                             "spec": {"containers": [{"name": "instance"}]}, "status": {"phase": "Pending"}});
        s.api
            .expect("GET", &format!("{CORE}/pods"), 200, pod_list(vec![pending]))
            .await;
        let ready = json!({"metadata": {"name": "run-pod", "namespace": "sless-fn-demo"},
                           "spec": {"containers": [{"name": "instance",
                                    "ports": [{"name": "frames", "containerPort": pod.port()}]}]},
                           "status": {"phase": "Running", "podIP": pod.ip().to_string(),
                                      "conditions": [{"type": "Ready", "status": "True"}]}});
        let listed = s
            .api
            .expect("GET", &format!("{CORE}/pods"), 200, pod_list(vec![ready]))
            .await;
        assert!(listed.query.contains("job-name%3Drun-nightly-4"), "{}", listed.query);
        // The answer is in: the Job goes.
        let deleted = s
            .api
            .expect("DELETE", &format!("{BATCH}/jobs/run-nightly-4"), 200, success())
            .await;
        assert_eq!(deleted.body["propagationPolicy"], "Background");
    });
    let result = result.unwrap();
    assert!(result.cold_start);
    assert_eq!(
        serde_json::from_slice::<Value>(&result.body).unwrap(),
        json!({"event": {"n": 5}})
    );
}

#[tokio::test]
async fn cancelling_a_run_deletes_its_job_and_returns_once_it_is_gone() {
    let mut s = scenario();
    deployed(&mut s).await;
    let (listed_tx, listed_rx) = tokio::sync::oneshot::channel();
    let driver = &s.driver;
    let api = &mut s.api;
    let (run, cancelled, ()) = tokio::join!(
        run_once(driver),
        async {
            listed_rx.await.unwrap();
            driver.cancel_run(&run_id()).await
        },
        async {
            run_job_made(api).await;
            // Its pod is still pending when the cancel comes.
            api.expect("GET", &format!("{CORE}/pods"), 200, pod_list(vec![])).await;
            listed_tx.send(()).unwrap();
            let deleted = api
                .expect("DELETE", &format!("{BATCH}/jobs/run-nightly-4"), 200, success())
                .await;
            assert_eq!(deleted.body["propagationPolicy"], "Foreground");
            api.expect(
                "GET",
                &format!("{BATCH}/jobs/run-nightly-4"),
                200,
                job("run-nightly-4", json!({})),
            )
            .await;
            api.expect("GET", &format!("{BATCH}/jobs/run-nightly-4"), 404, not_found())
                .await;
            api.nothing_more().await;
        }
    );
    cancelled.unwrap();
    assert!(
        matches!(&run, Err(InvokeError::Crashed { reason, .. }) if reason.contains("cancelled")),
        "{run:?}"
    );
}
