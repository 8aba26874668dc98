//! `sless_job`: create (and wait for the run), read, update in place
//! (function, event, wait), replace on a new run_id (a new run), delete,
//! import.

mod plan;
mod state;

#[cfg(test)]
mod tests;

use std::time::Duration;

use async_trait::async_trait;
use sless_api::{Job, JobCreate, JobPhase};
use sless_client::{Client, Wait};
use tf_provider::schema::Schema;
use tf_provider::value::ValueEmpty;
use tf_provider::{AttributePath, Diagnostics, Resource};

pub use state::JobState;

use crate::connection::Shared;
use crate::convert::{merge_diff, parse_import_id, settle};
use crate::diagnostics::{api_error, error};
use state::{from_api, spec_json, spec_of, FIELDS};

/// Extra time to wait past the run's own limits (the wait for a ready
/// version and the function's timeout): covers start-up and polling.
const WAIT_MARGIN: Duration = Duration::from_secs(60);

/// The `sless_job` resource.
#[derive(Debug, Clone)]
pub struct JobResource {
    shared: Shared,
}

impl JobResource {
    pub fn new(shared: Shared) -> JobResource {
        JobResource { shared }
    }
}

/// The plan, with its unknowns filled in from the server.
fn settled(mut planned: JobState, job: &Job) -> JobState {
    let server = from_api(job, &planned);
    settle(&mut planned.phase, server.phase);
    settle(&mut planned.result, server.result);
    settle(&mut planned.error, server.error);
    settle(&mut planned.id, server.id);
    settle(&mut planned.namespace, server.namespace);
    planned
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

#[async_trait]
impl Resource for JobResource {
    type State<'a> = JobState;
    type PrivateState<'a> = ValueEmpty;
    type ProviderMetaState<'a> = ValueEmpty;

    fn schema(&self, _diags: &mut Diagnostics) -> Option<Schema> {
        Some(state::schema())
    }

    async fn validate<'a>(&self, diags: &mut Diagnostics, config: Self::State<'a>) -> Option<()> {
        plan::validate(diags, &config);
        Some(())
    }

    async fn read<'a>(
        &self,
        diags: &mut Diagnostics,
        state: Self::State<'a>,
        private_state: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let client = self.shared.client(diags)?;
        let (Some(namespace), Some(name)) = (state.namespace.as_ref_option(), state.name.as_ref_option()) else {
            return Some((state, private_state));
        };
        match client.get_job(namespace, name).await {
            Ok(job) => Some((from_api(&job, &state), private_state)),
            Err(e) if e.is_not_found() => None,
            Err(e) => {
                api_error(diags, format!("Cannot read job {}", state.label()), &e, FIELDS);
                Some((state, private_state))
            }
        }
    }

    async fn plan_create<'a>(
        &self,
        _diags: &mut Diagnostics,
        proposed_state: Self::State<'a>,
        config_state: Self::State<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let (planned, _) = plan::plan(None, &config_state, proposed_state, &self.shared.namespace());
        Some((planned, ValueEmpty::Null))
    }

    async fn plan_update<'a>(
        &self,
        _diags: &mut Diagnostics,
        prior_state: Self::State<'a>,
        proposed_state: Self::State<'a>,
        config_state: Self::State<'a>,
        prior_private_state: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>, Vec<AttributePath>)> {
        let (planned, replace) = plan::plan(
            Some(&prior_state),
            &config_state,
            proposed_state,
            &self.shared.namespace(),
        );
        let replace = replace.into_iter().map(AttributePath::new).collect();
        Some((planned, prior_private_state, replace))
    }

    async fn plan_destroy<'a>(
        &self,
        _diags: &mut Diagnostics,
        _prior_state: Self::State<'a>,
        prior_private_state: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<Self::PrivateState<'a>> {
        Some(prior_private_state)
    }

    async fn create<'a>(
        &self,
        diags: &mut Diagnostics,
        planned_state: Self::State<'a>,
        _config_state: Self::State<'a>,
        planned_private_state: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let client = self.shared.client(diags)?;
        let spec = spec_of(diags, &planned_state)?;
        let namespace = planned_state.namespace.as_ref_option()?.clone();
        let name = planned_state.name.as_ref_option()?.clone();
        let label = format!("{namespace}/{name}");
        let create = JobCreate {
            name: name.clone(),
            spec,
        };
        let created = match client.create_job(&namespace, &create).await {
            Ok(job) => job,
            Err(e) => {
                api_error(diags, format!("Cannot create job {label}"), &e, FIELDS);
                return None;
            }
        };
        if created.spec.run_id == 0 {
            return Some((settled(planned_state, &created), planned_private_state));
        }
        let job = match wait_for_run(&client, &namespace, &created).await {
            Ok(job) => job,
            Err(e) => {
                api_error(
                    diags,
                    format!("Run {} of job {label} did not finish", created.spec.run_id),
                    &e,
                    FIELDS,
                );
                let job = client.get_job(&namespace, &name).await.unwrap_or(created);
                return Some((from_api(&job, &planned_state), planned_private_state));
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
                format!("Run {} of job {label} failed", job.spec.run_id),
                format!(
                    "The handler of function {:?} failed: {why}\n\nFix the function or the event, then apply again (the job is replaced and runs again).",
                    job.spec.function
                ),
                None,
            );
            // It exists but did not do what was planned: Terraform taints it.
            return Some((from_api(&job, &planned_state), planned_private_state));
        }
        Some((settled(planned_state, &job), planned_private_state))
    }

    async fn update<'a>(
        &self,
        diags: &mut Diagnostics,
        prior_state: Self::State<'a>,
        planned_state: Self::State<'a>,
        _config_state: Self::State<'a>,
        planned_private_state: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let client = self.shared.client(diags)?;
        let namespace = planned_state.namespace.as_ref_option()?.clone();
        let name = planned_state.name.as_ref_option()?.clone();
        let errors = diags.errors.len();
        let patch = merge_diff(&spec_json(diags, &prior_state), &spec_json(diags, &planned_state));
        if diags.errors.len() > errors {
            return None;
        }
        let answer = match patch {
            Some(patch) => client.patch_job(&namespace, &name, &patch).await,
            None => client.get_job(&namespace, &name).await,
        };
        match answer {
            Ok(job) => Some((settled(planned_state, &job), planned_private_state)),
            Err(e) => {
                api_error(diags, format!("Cannot update job {namespace}/{name}"), &e, FIELDS);
                None
            }
        }
    }

    async fn destroy<'a>(
        &self,
        diags: &mut Diagnostics,
        prior_state: Self::State<'a>,
        _planned_private_state: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<()> {
        let client = self.shared.client(diags)?;
        let (Some(namespace), Some(name)) = (prior_state.namespace.as_ref_option(), prior_state.name.as_ref_option())
        else {
            return Some(());
        };
        match client.delete_job(namespace, name).await {
            Ok(()) => Some(()),
            Err(e) if e.is_not_found() => Some(()),
            Err(e) => {
                api_error(diags, format!("Cannot delete job {}", prior_state.label()), &e, FIELDS);
                None
            }
        }
    }

    async fn import<'a>(
        &self,
        diags: &mut Diagnostics,
        id: String,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let client = self.shared.client(diags)?;
        let (namespace, name) = match parse_import_id("job", &id, &self.shared.namespace()) {
            Ok(parts) => parts,
            Err(message) => {
                error(diags, format!("Invalid import ID {id:?}"), message, None);
                return None;
            }
        };
        match client.get_job(&namespace, &name).await {
            Ok(job) => Some((from_api(&job, &JobState::default()), ValueEmpty::Null)),
            Err(e) => {
                api_error(diags, format!("Cannot import job {namespace}/{name}"), &e, FIELDS);
                None
            }
        }
    }
}
