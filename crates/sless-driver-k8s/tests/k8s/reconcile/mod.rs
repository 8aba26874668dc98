//! The driver's reconcile scenarios, each a list of the API requests it
//! must make, in order, and nothing else. The API server is a stand-in
//! (`api_server.rs`: a mocked service behind a real `kube::Client`; no
//! cluster is available on this machine), the pods' `sless instance` is a
//! stand-in speaking the real frames on 127.0.0.1 (`fake_instance.rs`),
//! and the object store is in memory. Serving (`serving.rs`), scaling to
//! zero when idle (`idle.rs`), image mode (`images.rs`), builds (`builds.rs`) and job runs
//! (`runs.rs`) each have their file.

mod autoscale;
mod builds;
mod idle;
mod images;
mod runs;
mod serving;
mod written;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::{ObjectStore, ObjectStoreExt};
use serde_json::{json, Value};
use sless_api::Runtime;
use sless_driver::{
    BuildError, BuildJob, Deployment, Driver, DriverError, Fingerprint, Invocation, InvocationResult, InvokeError,
    RunId, SecretFile, SecretValues, TriggerKind, VersionRef,
};
use sless_driver_k8s::{KubeDriver, ServingSettings};

use crate::api_server::{mocked, not_found, success, ApiServer};
use crate::fake_instance;
use crate::objects::{key, settings, signer, spec};
use written::Written;

const CORE: &str = "/api/v1/namespaces/sless-fn-demo";
const APPS: &str = "/apis/apps/v1/namespaces/sless-fn-demo";
const BATCH: &str = "/apis/batch/v1/namespaces/sless-fn-demo";
const DIGEST: &str = "5e1f0c2b8a9d4e3f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f";

struct Scenario {
    driver: KubeDriver,
    api: ApiServer,
    store: Arc<Written>,
}

fn scenario() -> Scenario {
    scenario_with(None)
}

/// A scenario whose versions go back to zero after `idle_timeout`.
fn scenario_with(idle_timeout: Option<Duration>) -> Scenario {
    scenario_of(settings(), idle_timeout)
}

fn scenario_of(settings: sless_driver_k8s::KubeSettings, idle_timeout: Option<Duration>) -> Scenario {
    scenario_serving(settings, serving_settings(idle_timeout))
}

fn serving_settings(idle_timeout: Option<Duration>) -> ServingSettings {
    ServingSettings {
        max_queue: 10,
        max_response_bytes: 1024 * 1024,
        poll: Duration::from_millis(10),
        endpoints_ttl: Duration::from_secs(3600),
        start_timeout: Duration::from_secs(2),
        // Listed on demand and never scaled down for idleness: each
        // request is a step of the scenario.
        watch_endpoints: false,
        scale_every: None,
        idle_timeout,
        // Each request is a step of the scenario: no warm pool to ask.
        warm: None,
    }
}

fn scenario_serving(settings: sless_driver_k8s::KubeSettings, serving: ServingSettings) -> Scenario {
    let (client, api) = mocked();
    let store = Arc::new(Written::new());
    let driver = KubeDriver::new(client, settings, serving, store.clone(), signer());
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
    pub(crate) async fn prepares_namespace_and_anchor(&mut self) {
        let namespace = self.apply("/api/v1/namespaces/sless-fn-demo").await;
        assert_eq!(
            namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
            "restricted"
        );
        self.apply("/apis/networking.k8s.io/v1/namespaces/sless-fn-demo/networkpolicies/sless-instances")
            .await;
        // Only pods' read-only credentials: build pods have their grant.
        let secret = "sless-artifact-reader";
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
        self.anchors().await;
    }

    async fn anchors(&mut self) {
        let anchor = self.apply(&format!("{CORE}/configmaps/fn-hello")).await;
        assert_eq!(anchor["metadata"]["labels"]["app.kubernetes.io/managed-by"], "sless");
    }

    /// A version's Deployment and Service applied, its scale read (at
    /// `replicas`); the applied Deployment.
    pub(crate) async fn applies_version(&mut self, version: u64, replicas: i32) -> Value {
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

/// Version 1 deployed by a fresh driver (every step of a first deploy).
async fn deployed(s: &mut Scenario) {
    let (deployed, ()) = tokio::join!(s.driver.deploy(version(1, false)), async {
        s.api.prepares_namespace_and_anchor().await;
        s.api.applies_version(1, 1).await;
    });
    deployed.unwrap();
}
