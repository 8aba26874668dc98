//! Job runs: a Kubernetes Job per run whose pod is a one-shot instance;
//! once it is ready the server sends it the run's invocation over TCP,
//! and the Job is deleted when the answer is in. Cancelling a run stops
//! the wait at once, deletes the Job (foreground: its pod first) and
//! returns when the Job is gone.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use sless_driver::{DriverError, Invocation, InvocationResult, InvokeError, RunId};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::cluster::Cluster;
use crate::connection::InstanceConnection;
use crate::gateway::{answered, Serving, ANSWER_SLACK};
use crate::jobs;
use crate::names;
use crate::objects::{self, InstanceInput, START_ALLOWANCE_SEC};

/// How long a cancel waits for the run's Job to be gone.
const CANCEL_WAIT: Duration = Duration::from_secs(120);

/// The runs this replica has under way, to stop them early.
#[derive(Default)]
pub struct Runs {
    active: Mutex<HashMap<RunId, watch::Sender<bool>>>,
}

impl Runs {
    /// Runs `invocation` once in a Job of its own.
    pub async fn run_once(
        &self,
        cluster: &Cluster,
        poll: Duration,
        serving: &Serving,
        run: &RunId,
        invocation: &Invocation,
    ) -> Result<InvocationResult, InvokeError> {
        let (cancel, mut cancelled) = watch::channel(false);
        self.active.lock().unwrap().insert(run.clone(), cancel);
        let outcome = tokio::select! {
            outcome = run_job(cluster, poll, serving, run, invocation) => Some(outcome),
            _ = cancelled.changed() => None,
        };
        self.active.lock().unwrap().remove(run);
        let Some(outcome) = outcome else {
            // `cancel_run` deletes the Job and waits for it.
            return Err(InvokeError::Crashed {
                key: serving.target.key.clone(),
                reason: "the run was cancelled".into(),
            });
        };
        let namespace = names::function_namespace(&run.namespace);
        if let Err(e) = jobs::delete(cluster, &namespace, &names::run_job(run)).await {
            tracing::warn!(%run, error = %e, "deleting a finished run's Job");
        }
        outcome
    }

    /// Stops `run` (on this replica or not) and returns once its Job is gone.
    pub async fn cancel(&self, cluster: &Cluster, poll: Duration, run: &RunId) -> Result<(), DriverError> {
        if let Some(cancel) = self.active.lock().unwrap().remove(run) {
            let _ = cancel.send(true);
        }
        let namespace = names::function_namespace(&run.namespace);
        let name = names::run_job(run);
        cluster
            .delete(
                &cluster.api::<k8s_openapi::api::batch::v1::Job>(&namespace),
                &name,
                &DeleteParams::foreground(),
            )
            .await?;
        let give_up = Instant::now() + CANCEL_WAIT;
        while jobs::get(cluster, &namespace, &name).await?.is_some() {
            if Instant::now() >= give_up {
                return Err(DriverError::Unavailable(format!(
                    "the Job {name} of run {run} was still there {}s after its deletion",
                    CANCEL_WAIT.as_secs()
                )));
            }
            tokio::time::sleep(poll).await;
        }
        Ok(())
    }
}

/// Makes the run's Job, waits for its pod and invokes it once.
async fn run_job(
    cluster: &Cluster,
    poll: Duration,
    serving: &Serving,
    run: &RunId,
    invocation: &Invocation,
) -> Result<InvocationResult, InvokeError> {
    let key = &serving.target.key;
    let start_failed = |reason: String| InvokeError::StartFailed {
        key: key.clone(),
        reason,
    };
    let owner = cluster.prepare(key).await.map_err(|e| start_failed(e.to_string()))?;
    let input = InstanceInput {
        key,
        version: serving.target.version,
        spec: &serving.spec,
        code: &serving.code,
        secrets: &serving.secrets,
    };
    let job = objects::run_job(&cluster.settings, input, run, &owner);
    jobs::create(cluster, &job)
        .await
        .map_err(|e| start_failed(e.to_string()))?;
    let namespace = names::function_namespace(&run.namespace);
    let name = names::run_job(run);
    let give_up = Instant::now() + Duration::from_secs(START_ALLOWANCE_SEC.into());
    let addr = loop {
        let pods = jobs::pods(cluster, &namespace, &name)
            .await
            .map_err(|e| start_failed(e.to_string()))?;
        if let Some(addr) = pods.iter().find_map(ready_address) {
            break addr;
        }
        if let Some(ended) = pods
            .iter()
            .find(|p| phase(p).is_some_and(|ph| ph == "Failed" || ph == "Succeeded"))
        {
            let reason = jobs::termination_message(ended).unwrap_or_else(|| "its pod ended before serving".into());
            return Err(start_failed(reason));
        }
        if Instant::now() >= give_up {
            return Err(start_failed(format!(
                "its pod was not ready within {START_ALLOWANCE_SEC}s"
            )));
        }
        tokio::time::sleep(poll).await;
    };
    let connection = InstanceConnection::connect(addr, &serving.target)
        .await
        .map_err(start_failed)?;
    let timeout = Duration::from_secs(serving.spec.timeout_sec.max(1).into());
    let frame = sless_driver_local::invocation_frame(invocation, serving.spec.timeout_sec);
    let answer = tokio::time::timeout(timeout + ANSWER_SLACK, connection.invoke(frame))
        .await
        .map_err(|_| ());
    answered(&serving.target, timeout, true, answer)
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

/// Where a ready pod serves frames: its IP and the port named `frames`.
fn ready_address(pod: &Pod) -> Option<SocketAddr> {
    let status = pod.status.as_ref()?;
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    if !ready {
        return None;
    }
    let ip: IpAddr = status.pod_ip.as_deref()?.parse().ok()?;
    let port = pod
        .spec
        .as_ref()?
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| p.name.as_deref() == Some("frames"))?
        .container_port;
    Some(SocketAddr::new(ip, u16::try_from(port).ok()?))
}
