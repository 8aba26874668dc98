//! Back to zero after the idle period, without a leader: every replica
//! reports when a version last had a call on it (an annotation on its
//! Deployment, at most every quarter of the idle period), and any replica
//! scales a version to zero once neither it nor the annotation has seen a
//! call for the idle period, conditional on the Deployment's
//! resourceVersion (two replicas scaling at once make one scale). Pinned
//! replicas, a minimum above zero and disabled functions are left alone.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams};
use sless_driver::{DriverError, VersionRef};

use crate::cluster::{unavailable, Cluster};
use crate::gateway::{now_ms, Serving};
use crate::names::{self, annotation};

/// Checks every deployed version every quarter of `idle`, for as long as
/// the process runs.
pub fn spawn(cluster: Arc<Cluster>, versions: Arc<RwLock<HashMap<VersionRef, Arc<Serving>>>>, idle: Duration) {
    let every = (idle / 4).max(Duration::from_millis(10));
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let serving: Vec<Arc<Serving>> = versions.read().unwrap().values().cloned().collect();
            for version in serving {
                if let Err(e) = reap(&cluster, &version, idle).await {
                    tracing::warn!(function = %version.target, error = %e, "scaling an idle version down");
                }
            }
        }
    });
}

/// Notes this replica's last call of `version` on its Deployment, unless
/// that was noted already. A wake from zero notes it before it scales:
/// another replica that read the Deployment before the note cannot scale
/// it to zero (its scale names a resourceVersion gone by), and one that
/// reads it after sees the call.
pub async fn report(cluster: &Cluster, version: &Serving) -> Result<u64, DriverError> {
    let namespace = names::function_namespace(&version.target.key.namespace);
    let name = names::version_object(&version.target.key, version.target.version);
    let last = version.last_call_ms();
    if last > version.reported_ms() {
        let patch = serde_json::json!({"metadata": {"annotations": {annotation::LAST_CALL: last.to_string()}}});
        cluster
            .api::<Deployment>(&namespace)
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| unavailable(&format!("reporting the last call of {name}"), e))?;
        version.set_reported_ms(last);
    }
    Ok(last)
}

/// Reports this replica's last call of `version`, and scales it to zero
/// when every replica has been idle on it for `idle`.
async fn reap(cluster: &Cluster, version: &Serving, idle: Duration) -> Result<(), DriverError> {
    let namespace = names::function_namespace(&version.target.key.namespace);
    let name = names::version_object(&version.target.key, version.target.version);
    let api = cluster.api::<Deployment>(&namespace);
    let last = report(cluster, version).await?;
    let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
    if !version.scales_to_zero() || now_ms().saturating_sub(last) < idle_ms {
        return Ok(());
    }
    // The other replicas' calls.
    let deployment = api
        .get(&name)
        .await
        .map_err(|e| unavailable(&format!("reading Deployment {name}"), e))?;
    let reported = deployment
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotation::LAST_CALL))
        .and_then(|ms| ms.parse::<u64>().ok())
        .unwrap_or(0);
    if now_ms().saturating_sub(last.max(reported)) < idle_ms || deployment.spec.replicas.unwrap_or(0) == 0 {
        return Ok(());
    }
    let scaled = cluster
        .scale(&namespace, &name, 0, deployment.metadata.resource_version.as_deref())
        .await?;
    tracing::info!(function = %version.target, idle_sec = idle.as_secs(), by_this_replica = scaled, "idle: scaled to zero");
    Ok(())
}
