//! The gateway's EndpointSlice cache: its watcher's list and watch are
//! answered by the stand-in API server (`api_server.rs`; no cluster on this
//! machine) as the real one would, and calls go where the watched slices
//! say, without asking the API server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use object_store::memory::InMemory;
use serde_json::{json, Value};
use sless_driver::{Deployment, Driver, Fingerprint, Invocation, TriggerKind, VersionRef};
use sless_driver_k8s::{KubeDriver, ServingSettings};

use crate::api_server::{mocked, respond};
use crate::fake_instance;
use crate::objects::{key, settings, signer, spec};

const SLICES: &str = "/apis/discovery.k8s.io/v1/endpointslices";

fn slice(name: &str, pod: SocketAddr, resource_version: &str) -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
           "metadata": {"name": name, "namespace": "sless-fn-demo", "resourceVersion": resource_version,
                        "labels": {"kubernetes.io/service-name": "fn-hello-v1",
                                   "app.kubernetes.io/managed-by": "sless", "sless.dev/component": "instance"}},
           "addressType": "IPv4",
           "endpoints": [{"addresses": [pod.ip().to_string()], "conditions": {"ready": true}}],
           "ports": [{"name": "frames", "port": pod.port(), "protocol": "TCP"}]})
}

fn call() -> Invocation {
    Invocation {
        kind: TriggerKind::Job,
        request_id: "req".into(),
        method: "POST".into(),
        path: String::new(),
        query: String::new(),
        headers: vec![],
        body: bytes::Bytes::new(),
        event: Some(json!({})),
    }
}

/// Which stand-in pod answered a call of version 1.
async fn answered_by(driver: &KubeDriver) -> String {
    let result = driver.invoke(&VersionRef::new(key(), 1), &call()).await.unwrap();
    let body: Value = serde_json::from_slice(&result.body).unwrap();
    body["pod"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn calls_go_to_the_pods_the_watched_endpoint_slices_name() {
    let (client, mut api) = mocked();
    let serving = ServingSettings {
        poll: Duration::from_millis(10),
        watch_endpoints: true,
        scale_every: None,
        idle_timeout: None,
        ..ServingSettings::default()
    };
    let driver = KubeDriver::new(client, settings(), serving, Arc::new(InMemory::new()), signer());
    let p = fake_instance::start_tagged("demo", "hello", 1, "p").await;
    let q = fake_instance::start_tagged("demo", "hello", 1, "q").await;
    // The watcher lists every sless Service's slices, then watches from there.
    let listed = api
        .expect(
            "GET",
            SLICES,
            200,
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSliceList",
                   "metadata": {"resourceVersion": "5"}, "items": [slice("a", p, "4")]}),
        )
        .await;
    assert!(
        listed
            .query
            .contains("labelSelector=app.kubernetes.io%2Fmanaged-by%3Dsless%2Csless.dev%2Fcomponent%3Dinstance"),
        "{}",
        listed.query
    );
    let (watch, watching) = api.hold("GET", SLICES).await;
    assert!(
        watch.query.contains("watch=true") && watch.query.contains("resourceVersion=5"),
        "{}",
        watch.query
    );
    // The version is deployed (first deploy: namespace, anchor, objects).
    let deployment = Deployment {
        key: key(),
        version: 1,
        artifact: Fingerprint::from_stored("0123456789abcdef0123456789abcdef"),
        digest: Some("f".repeat(64)),
        spec: spec(),
        verify: false,
        secrets: Default::default(),
    };
    let (deployed, ()) = tokio::join!(driver.deploy(deployment), async {
        api.prepares_namespace_and_anchor().await;
        api.applies_version(1, 1).await;
    });
    deployed.unwrap();
    // Served from the cache: no request for its endpoints.
    let (pod, ()) = tokio::join!(answered_by(&driver), api.nothing_more());
    assert_eq!(pod, "p");
    // Pod p goes, pod q comes: the watch says so.
    let events = [
        json!({"type": "DELETED", "object": slice("a", p, "6")}),
        json!({"type": "ADDED", "object": slice("b", q, "7")}),
    ];
    let lines: String = events.iter().map(|e| format!("{e}\n")).collect();
    respond(watching, 200, Value::String(lines));
    // The watch ended after them; the watcher watches again (events first).
    let (_rewatch, _open) = api.hold("GET", SLICES).await;
    let (pod, ()) = tokio::join!(answered_by(&driver), api.nothing_more());
    assert_eq!(pod, "q");
}
