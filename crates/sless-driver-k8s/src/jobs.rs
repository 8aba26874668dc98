//! What builds and job runs share: a Job made once (or found, when another
//! replica made it first), its pod, how it ended, its log's tail, and its
//! deletion.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, LogParams, PostParams};
use sless_driver::DriverError;

use crate::cluster::{is_not_found, unavailable, Cluster};

/// The label the Job controller puts on a Job's pods.
pub const JOB_NAME: &str = "batch.kubernetes.io/job-name";

/// Lines of a failed pod's log kept for the status message.
pub const LOG_TAIL_LINES: i64 = 40;

/// How a Job ended, if it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    Running,
    Succeeded,
    /// Failed; `deadline` when its active deadline ran out.
    Failed {
        deadline: bool,
        message: String,
    },
}

/// Makes `job`; a Job of that name made before (by this replica or
/// another) is returned instead, with `false`.
pub async fn create(cluster: &Cluster, job: &Job) -> Result<(Job, bool), DriverError> {
    let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
    let name = job.metadata.name.as_deref().unwrap_or_default();
    let api = cluster.api::<Job>(namespace);
    match api.create(&PostParams::default(), job).await {
        Ok(made) => Ok((made, true)),
        Err(kube::Error::Api(status)) if status.is_already_exists() => api
            .get(name)
            .await
            .map(|found| (found, false))
            .map_err(|e| unavailable(&format!("reading Job {name}"), e)),
        Err(e) => Err(unavailable(&format!("creating Job {name}"), e)),
    }
}

/// Deletes Job `name` and its pods (in the background).
pub async fn delete(cluster: &Cluster, namespace: &str, name: &str) -> Result<(), DriverError> {
    cluster
        .delete(&cluster.api::<Job>(namespace), name, &DeleteParams::background())
        .await
}

/// Reads a Job again; `None` when it is gone.
pub async fn get(cluster: &Cluster, namespace: &str, name: &str) -> Result<Option<Job>, DriverError> {
    match cluster.api::<Job>(namespace).get(name).await {
        Ok(job) => Ok(Some(job)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(unavailable(&format!("reading Job {name}"), e)),
    }
}

/// How `job` ended, from its conditions.
pub fn ended(job: &Job) -> Ended {
    let status = job.status.as_ref();
    let condition = |kind: &str| {
        status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .find(|c| c.type_ == kind && c.status == "True")
    };
    if condition("Complete").is_some() || status.and_then(|s| s.succeeded).unwrap_or(0) > 0 {
        return Ended::Succeeded;
    }
    match condition("Failed") {
        Some(failed) => Ended::Failed {
            deadline: failed.reason.as_deref() == Some("DeadlineExceeded"),
            message: failed.message.clone().unwrap_or_default(),
        },
        None => Ended::Running,
    }
}

/// The pods of Job `name` (one, as sless's Jobs run once).
pub async fn pods(cluster: &Cluster, namespace: &str, name: &str) -> Result<Vec<Pod>, DriverError> {
    cluster
        .api::<Pod>(namespace)
        .list(&ListParams::default().labels(&format!("{JOB_NAME}={name}")))
        .await
        .map(|list| list.items)
        .map_err(|e| unavailable(&format!("listing the pods of Job {name}"), e))
}

/// The termination message of the first container of `pod` that ended.
pub fn termination_message(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .container_statuses
        .iter()
        .flatten()
        .find_map(|s| s.state.as_ref()?.terminated.as_ref()?.message.clone())
}

/// The last lines of `pod`'s log (empty when it cannot be read any more).
pub async fn log_tail(cluster: &Cluster, pod: &Pod) -> String {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let params = LogParams {
        tail_lines: Some(LOG_TAIL_LINES),
        ..LogParams::default()
    };
    match cluster.api::<Pod>(namespace).logs(name, &params).await {
        Ok(text) => text,
        Err(e) => {
            tracing::warn!(pod = %name, error = %e, "reading a pod's log");
            String::new()
        }
    }
}
