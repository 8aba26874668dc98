//! The Job of one job run: its pod is an instance that the server invokes
//! once with the job's event, after which it exits.

use k8s_openapi::api::batch::v1::Job;
use sless_driver::RunId;

use super::build::one_shot;
use super::meta::{meta, version_labels, Owner};
use super::pod::{instance_pod, InstanceInput, PodMode};
use crate::names::{self, label};
use crate::settings::KubeSettings;

/// Time a run's pod gets beyond the function's timeout: scheduling, the
/// image pull, the artifact's fetch and the handler's load.
pub const START_ALLOWANCE_SEC: u32 = 300;

/// The Job of `run`, owned by the function.
pub fn run_job(settings: &KubeSettings, input: InstanceInput<'_>, run: &RunId, owner: &Owner) -> Job {
    let name = names::run_job(run);
    let namespace = names::function_namespace(&input.key.namespace);
    let mut labels = version_labels(input.key, input.version, "run");
    labels.insert(label::JOB.into(), run.job.clone());
    labels.insert(label::RUN.into(), run.run.to_string());
    Job {
        metadata: meta(&name, &namespace, labels.clone(), Some(owner)),
        spec: Some(one_shot(
            input.spec.timeout_sec + START_ALLOWANCE_SEC,
            labels,
            instance_pod(settings, input, PodMode::Once),
        )),
        ..Job::default()
    }
}
