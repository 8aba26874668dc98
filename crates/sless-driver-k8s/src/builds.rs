//! Builds as Jobs (artifact mode): the uploaded archive goes to the object
//! store, a Job on the runtime image installs the dependencies and uploads
//! the artifact tarball, whose sha256 is its container's termination
//! message. The Job's pod has no object-store credentials, only the
//! build's grant ([`crate::grants`]); the server hashes the upload before
//! it accepts it as the artifact. The Job's active deadline is the
//! function's `build_timeout_sec`; a failed build's log tail becomes the
//! error.
//!
//! The Job is named after the artifact, so two replicas (or two functions
//! with the same code) building the same thing share one Job; an artifact
//! already in the object store is not built again.

use std::sync::Arc;
use std::time::Duration;

use object_store::signer::Signer;

use k8s_openapi::api::batch::v1::Job;
use sless_driver::{BuildError, BuildJob, Built, Fingerprint};
use tokio::time::Instant;

use crate::artifacts::Artifacts;
use crate::cluster::Cluster;
use crate::grants::{build_grant, BuildGrant};
use crate::jobs::{self, Ended};
use crate::names;
use crate::objects::{self, BuildInput, START_ALLOWANCE_SEC};

/// Builds `job` into `artifact`, polling the Job every `poll`.
pub async fn build(
    cluster: &Cluster,
    artifacts: &Artifacts,
    signer: &Arc<dyn Signer>,
    poll: Duration,
    job: BuildJob,
    artifact: Fingerprint,
) -> Result<Built, BuildError> {
    let internal = |e: sless_driver::DriverError| BuildError::Internal(e.to_string());
    if let Some((digest, bytes)) = artifacts.digest(&artifact).await.map_err(internal)? {
        return Ok(Built {
            artifact,
            digest: Some(digest),
            log_tail: String::new(),
            bytes,
        });
    }
    let archive_key = Artifacts::archive_key(&artifact, &job.code_hash);
    artifacts
        .put_archive(&archive_key, job.archive.clone())
        .await
        .map_err(BuildError::Internal)?;
    let upload_key = Artifacts::upload_key(&artifact, &job.code_hash);
    // The grant lasts as long as the build may: its deadline and the
    // allowance for its pod to start.
    let valid_for = job.timeout + Duration::from_secs(START_ALLOWANCE_SEC.into());
    let built = match build_grant(signer, &archive_key, &upload_key, valid_for).await {
        Ok(grant) => match run(cluster, poll, &job, &artifact, &grant).await {
            Ok((reported, log_tail)) => artifacts
                .accept(&artifact, &upload_key, &reported)
                .await
                .map(|stored| (stored, log_tail)),
            Err(e) => Err(e),
        },
        Err(e) => Err(internal(e)),
    };
    artifacts.drop_archive(&archive_key).await;
    artifacts.drop_archive(&upload_key).await;
    let ((digest, bytes), log_tail) = built?;
    Ok(Built {
        artifact,
        digest: Some(digest),
        log_tail,
        bytes,
    })
}

/// Runs the build Job to its end: the artifact's digest (as the pod
/// reported it) and the log tail.
async fn run(
    cluster: &Cluster,
    poll: Duration,
    job: &BuildJob,
    artifact: &Fingerprint,
    grant: &BuildGrant,
) -> Result<(String, String), BuildError> {
    let internal = |e: sless_driver::DriverError| BuildError::Internal(e.to_string());
    let owner = cluster.prepare(&job.key).await.map_err(internal)?;
    let timeout_sec = u32::try_from(job.timeout.as_secs()).unwrap_or(u32::MAX).max(1);
    let object = objects::build_job(
        &cluster.settings,
        BuildInput {
            key: &job.key,
            runtime: job.runtime,
            code_hash: &job.code_hash,
            artifact: artifact.as_str(),
            archive_url: &grant.archive_url,
            upload_url: &grant.upload_url,
            timeout_sec,
        },
        &owner,
    );
    let namespace = names::function_namespace(&job.key.namespace);
    let name = names::build_job(&job.key, artifact.as_str());
    // The Job's own deadline ends it; this one is for a Job that never starts.
    let give_up = Instant::now() + job.timeout + Duration::from_secs(START_ALLOWANCE_SEC.into());
    let current = loop {
        let (job, made) = jobs::create(cluster, &object).await.map_err(internal)?;
        // A failed build of the same artifact left from before: build again.
        if made || !matches!(jobs::ended(&job), Ended::Failed { .. }) {
            break job;
        }
        if Instant::now() >= give_up {
            return Err(BuildError::Internal(format!(
                "the failed build Job {name} is not going away"
            )));
        }
        jobs::delete(cluster, &namespace, &name).await.map_err(internal)?;
        tokio::time::sleep(poll).await;
    };
    let mut running = RunningJob {
        jobs: cluster.api::<Job>(&namespace),
        name: name.clone(),
        followed: false,
    };
    let ended = follow(cluster, poll, job, &namespace, &name, current, give_up).await;
    running.followed = true;
    ended
}

/// Polls build Job `name` (`current` as last read) until it ends.
async fn follow(
    cluster: &Cluster,
    poll: Duration,
    job: &BuildJob,
    namespace: &str,
    name: &str,
    mut current: Job,
    give_up: Instant,
) -> Result<(String, String), BuildError> {
    let internal = |e: sless_driver::DriverError| BuildError::Internal(e.to_string());
    loop {
        match jobs::ended(&current) {
            Ended::Running if Instant::now() >= give_up => {
                return Err(BuildError::TimedOut {
                    after: job.timeout,
                    log_tail: format!("the build Job {name} did not finish"),
                })
            }
            Ended::Running => {}
            Ended::Succeeded => {
                let (digest, log_tail) = outcome(cluster, namespace, name, String::new()).await;
                return match digest.filter(|d| d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit())) {
                    Some(digest) => Ok((digest, log_tail)),
                    None => Err(BuildError::Internal(format!(
                        "the build Job {name} succeeded without reporting the artifact's sha256"
                    ))),
                };
            }
            Ended::Failed { deadline, message } => {
                let (_, log_tail) = outcome(cluster, namespace, name, message).await;
                return Err(if deadline {
                    BuildError::TimedOut {
                        after: job.timeout,
                        log_tail,
                    }
                } else {
                    BuildError::Failed { log_tail }
                });
            }
        }
        tokio::time::sleep(poll).await;
        current = jobs::get(cluster, namespace, name)
            .await
            .map_err(internal)?
            .ok_or_else(|| BuildError::Internal(format!("the build Job {name} was deleted while it ran")))?;
    }
}

/// A build Job under way, deleted (its pod with it) when dropped: the
/// server drops a build its function no longer awaits (deleted, or a newer
/// upload in its place), whose pod would otherwise run on to the Job's
/// deadline.
struct RunningJob {
    jobs: kube::Api<Job>,
    name: String,
    /// Followed to its end (or until it could not be read): left as it is.
    followed: bool,
}

impl Drop for RunningJob {
    fn drop(&mut self) {
        if self.followed {
            return;
        }
        let (jobs, name) = (self.jobs.clone(), std::mem::take(&mut self.name));
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            match jobs.delete(&name, &kube::api::DeleteParams::background()).await {
                Ok(_) => tracing::info!(job = %name, "build stopped: its Job is deleted"),
                Err(e) => tracing::warn!(job = %name, error = %e, "deleting a stopped build's Job failed"),
            }
        });
    }
}

/// The termination message of the Job's pod and its log's tail (else the
/// message, else `fallback`: a pod stopped at its deadline may be gone).
async fn outcome(cluster: &Cluster, namespace: &str, name: &str, fallback: String) -> (Option<String>, String) {
    let pods = match jobs::pods(cluster, namespace, name).await {
        Ok(pods) => pods,
        Err(e) => {
            tracing::warn!(job = %name, error = %e, "listing a build's pods");
            Vec::new()
        }
    };
    let Some(pod) = pods.first() else {
        return (None, fallback);
    };
    let message = jobs::termination_message(pod).map(|m| m.trim().to_string());
    let log = jobs::log_tail(cluster, pod).await;
    let tail = if !log.trim().is_empty() {
        log
    } else {
        message.clone().filter(|m| !m.is_empty()).unwrap_or(fallback)
    };
    (message, tail)
}
