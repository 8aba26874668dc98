//! Waiting for a version's Deployment to be rolled out (what a verified
//! deploy needs before it returns), or for its pod to say that the handler
//! did not load: `sless instance serve` exits with [`LOAD_FAILED`] and the
//! error last in its log, which is the container's termination message.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::ListParams;
use sless_driver::{DriverError, FunctionKey};
use tokio::time::Instant;

use crate::cluster::{unavailable, Cluster};
use crate::names::{self, label};

/// The exit code of `sless instance serve` when the handler did not load.
pub const LOAD_FAILED: i32 = 3;

/// Waits until every pod of the Deployment runs its current template and
/// is ready; a pod whose handler did not load is [`DriverError::LoadFailed`].
pub async fn wait(
    cluster: &Cluster,
    key: &FunctionKey,
    version: u64,
    poll: Duration,
    timeout: Duration,
) -> Result<(), DriverError> {
    let namespace = names::function_namespace(&key.namespace);
    let name = names::version_object(key, version);
    let give_up = Instant::now() + timeout;
    loop {
        let deployment = cluster
            .api::<Deployment>(&namespace)
            .get(&name)
            .await
            .map_err(|e| unavailable(&format!("reading Deployment {name}"), e))?;
        if rolled_out(&deployment) {
            return Ok(());
        }
        let selector = format!(
            "{}={},{}={},{}={version}",
            label::NAMESPACE,
            key.namespace,
            label::FUNCTION,
            key.name,
            label::VERSION
        );
        let pods = cluster
            .api::<Pod>(&namespace)
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| unavailable(&format!("listing the pods of {name}"), e))?;
        if let Some(error) = pods.items.iter().find_map(load_error) {
            return Err(DriverError::LoadFailed(error));
        }
        if Instant::now() >= give_up {
            return Err(DriverError::Unavailable(format!(
                "version {version} of {key} was not ready within {}s",
                timeout.as_secs()
            )));
        }
        tokio::time::sleep(poll).await;
    }
}

/// Whether the rollout is complete, by the rules `kubectl rollout status` uses.
fn rolled_out(deployment: &Deployment) -> bool {
    let Some(status) = &deployment.status else {
        return false;
    };
    let wanted = deployment.spec.replicas.unwrap_or(1);
    let generation = deployment.metadata.generation.unwrap_or(0);
    status.observed_generation.unwrap_or(0) >= generation
        && status.updated_replicas.unwrap_or(0) >= wanted
        && status.replicas.unwrap_or(0) == status.updated_replicas.unwrap_or(0)
        && status.ready_replicas.unwrap_or(0) >= wanted
}

/// The handler's load error, if the pod's instance ended with one.
fn load_error(pod: &Pod) -> Option<String> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses
        .iter()
        .filter(|s| s.name == "instance")
        .find_map(|s: &ContainerStatus| {
            [s.state.as_ref(), s.last_state.as_ref()]
                .into_iter()
                .flatten()
                .filter_map(|state| state.terminated.as_ref())
                .find(|t| t.exit_code == LOAD_FAILED)
                .map(|t| t.message.clone().unwrap_or_else(|| "the handler failed to load".into()))
        })
}
