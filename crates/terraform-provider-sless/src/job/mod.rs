//! `sless_job`: one run of a function with a JSON event. Create waits for
//! the run; function, event and wait change in place; a new `run_id`
//! replaces the job, which is a new run.

mod plan;
mod state;

#[cfg(test)]
mod tests;

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value as Json;
use sless_api::{Job, JobCreate, JobPhase, JobSpec};
use sless_client::{Client, Wait};
use tf_provider::Diagnostics;

pub use state::JobState;

use crate::diagnostics::{api_error, error};
use crate::resource::fields::Field;
use crate::resource::{settable, ApiResource, Identity, Key, Outcome, Written};

/// Extra time to wait past the run's own limits (the wait for a ready
/// version and the function's timeout): covers start-up and polling.
const WAIT_MARGIN: Duration = Duration::from_secs(60);

/// The `sless_job` resource.
#[derive(Debug, Clone, Default)]
pub struct JobResource;

#[async_trait]
impl ApiResource for JobResource {
    type State = JobState;
    type Spec = JobSpec;
    type Api = Job;

    const NOUN: &'static str = "job";
    const DESCRIPTION: &'static str =
        "One run of a function with a JSON event. Apply waits for the run; a failed run is an apply error.";

    fn fields() -> Vec<Field> {
        state::fields()
    }

    fn identity(state: &mut JobState) -> Identity<'_> {
        Identity {
            id: &mut state.id,
            namespace: &mut state.namespace,
            name: &mut state.name,
            parent: None,
        }
    }

    fn validate(diags: &mut Diagnostics, config: &JobState) {
        plan::validate(diags, config);
    }

    fn plan(&self, _: &mut Diagnostics, prior: Option<&JobState>, config: &JobState, planned: &mut JobState) {
        plan::plan(prior, config, planned);
    }

    fn spec_json(diags: &mut Diagnostics, state: &JobState) -> Json {
        state::spec_json(diags, state)
    }

    fn from_api(job: &Job, previous: &JobState) -> JobState {
        state::from_api(job, previous)
    }

    async fn get(client: &Client, key: &Key) -> sless_client::Result<Job> {
        client.get_job(&key.namespace, &key.name).await
    }

    async fn create(client: &Client, key: &Key, spec: JobSpec) -> sless_client::Result<Job> {
        let name = key.name.clone();
        client.create_job(&key.namespace, &JobCreate { name, spec }).await
    }

    async fn patch(client: &Client, key: &Key, patch: &Json) -> sless_client::Result<Job> {
        client.patch_job(&key.namespace, &key.name, patch).await
    }

    async fn delete(client: &Client, key: &Key) -> sless_client::Result<()> {
        client.delete_job(&key.namespace, &key.name).await
    }

    /// A created job with a `run_id` runs: wait for the run's end; a run
    /// that failed or did not finish is an error, and the job is tainted.
    async fn after_write(
        &self,
        diags: &mut Diagnostics,
        client: &Client,
        key: &Key,
        _planned: &JobState,
        written: Written<Job>,
    ) -> Outcome<Job> {
        let created = match written {
            Written::Created(job) if job.spec.run_id > 0 => job,
            other => return Outcome::AsPlanned(other.latest()),
        };
        let job = match wait_for_run(client, &key.namespace, &created).await {
            Ok(job) => job,
            Err(e) => {
                let summary = format!("Run {} of job {key} did not finish", created.spec.run_id);
                api_error(diags, summary, &e, &settable::<Self>());
                let job = Self::get(client, key).await.unwrap_or(created);
                return Outcome::Partly(job);
            }
        };
        if job.status.phase == JobPhase::Failed {
            let why = job
                .status
                .error
                .as_deref()
                .unwrap_or("the handler failed without a message");
            error(
                diags,
                format!("Run {} of job {key} failed", job.spec.run_id),
                format!(
                    "The handler of function {:?} failed: {why}\n\nFix the function or the event, then apply again (the job is replaced and runs again).",
                    job.spec.function
                ),
                None,
            );
            // It exists but did not do what was planned: Terraform taints it.
            return Outcome::Partly(job);
        }
        Outcome::AsPlanned(Some(job))
    }
}

/// Waits for run `run_id` of the job to finish: as long as the run may
/// wait for a ready version plus the function's own time limit.
async fn wait_for_run(client: &Client, namespace: &str, job: &Job) -> sless_client::Result<Job> {
    let function_timeout = match client.get_function(namespace, &job.spec.function).await {
        Ok(function) => function.spec.timeout_sec,
        Err(_) => 3600,
    };
    let limit = Duration::from_secs(u64::from(job.spec.wait_timeout_sec) + u64::from(function_timeout));
    let wait = Wait::new(limit + WAIT_MARGIN);
    client
        .wait_for_job(namespace, &job.name, job.spec.run_id, wait, |_| {})
        .await
}
