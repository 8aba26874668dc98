//! Image mode (`SLESS_K8S_BUILD=image`): before a version serves, a kaniko
//! Job in the control plane's namespace bakes its artifact into
//! `{registry}/sless-{ns}-{name}:v{version}` and pushes it; its pods run
//! that image. The Job is named after the version, so replicas deploying
//! the same version share one.

use std::time::Duration;

use sless_driver::{Deployment, DriverError};
use tokio::time::Instant;

use crate::cluster::Cluster;
use crate::jobs::{self, Ended};
use crate::names;
use crate::objects::{self, ImageInput, START_ALLOWANCE_SEC};

/// The image of `deployment`, built and pushed (once) from the artifact
/// with tarball `digest`.
pub async fn ensure(
    cluster: &Cluster,
    poll: Duration,
    deployment: &Deployment,
    digest: &str,
) -> Result<String, DriverError> {
    let image_build = cluster
        .settings
        .image_build
        .as_ref()
        .ok_or_else(|| DriverError::Internal("image mode without a registry".into()))?;
    let key = &deployment.key;
    let image = names::function_image(&image_build.registry, key, deployment.version);
    let input = ImageInput {
        key,
        version: deployment.version,
        runtime: deployment.spec.runtime,
        artifact: deployment.artifact.as_str(),
        digest,
        timeout_sec: deployment.spec.build_timeout_sec,
    };
    let job = objects::image_job(&cluster.settings, image_build, input);
    let namespace = &cluster.settings.control_plane_namespace;
    let name = names::image_job(key, deployment.version);
    let give_up = Instant::now()
        + Duration::from_secs(u64::from(deployment.spec.build_timeout_sec) + u64::from(START_ALLOWANCE_SEC));
    let mut current = loop {
        let (found, made) = jobs::create(cluster, &job).await?;
        // A failed build of the same image left from before: build again.
        if made || !matches!(jobs::ended(&found), Ended::Failed { .. }) {
            break found;
        }
        if Instant::now() >= give_up {
            return Err(DriverError::Unavailable(format!(
                "the failed image Job {name} is not going away"
            )));
        }
        jobs::delete(cluster, namespace, &name).await?;
        tokio::time::sleep(poll).await;
    };
    loop {
        match jobs::ended(&current) {
            Ended::Succeeded => return Ok(image),
            Ended::Failed { message, .. } => {
                let pods = jobs::pods(cluster, namespace, &name).await.unwrap_or_default();
                let tail = match pods.first() {
                    Some(pod) => jobs::termination_message(pod).unwrap_or(message),
                    None => message,
                };
                return Err(DriverError::Unavailable(format!(
                    "building the image {image} failed: {tail}"
                )));
            }
            Ended::Running if Instant::now() >= give_up => {
                return Err(DriverError::Unavailable(format!(
                    "the image {image} was not built in time"
                )))
            }
            Ended::Running => {}
        }
        tokio::time::sleep(poll).await;
        current = jobs::get(cluster, namespace, &name)
            .await?
            .ok_or_else(|| DriverError::Unavailable(format!("the image Job {name} was deleted while it ran")))?;
    }
}

/// Deletes the image Jobs of a function (they are not owned by its anchor:
/// an owner cannot be in another namespace).
pub async fn forget(cluster: &Cluster, key: &sless_driver::FunctionKey) -> Result<(), DriverError> {
    use k8s_openapi::api::batch::v1::Job;
    use kube::api::ListParams;
    let namespace = &cluster.settings.control_plane_namespace;
    let selector = format!(
        "{}={},{}={},{}=image-build",
        names::label::NAMESPACE,
        key.namespace,
        names::label::FUNCTION,
        key.name,
        names::label::COMPONENT
    );
    let listed = cluster
        .api::<Job>(namespace)
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| crate::cluster::unavailable(&format!("listing the image Jobs of {key}"), e))?;
    for job in listed.items {
        if let Some(name) = job.metadata.name.as_deref() {
            jobs::delete(cluster, namespace, name).await?;
        }
    }
    Ok(())
}
