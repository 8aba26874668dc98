//! `sless_function`: a function and its code. Spec changes and new code
//! (a new `code_hash`) apply in place, and apply waits for the build; a new
//! runtime replaces it.

mod asynchronous;
mod deploy;
mod plan;
mod secrets;
mod state;

#[cfg(test)]
mod tests;

use async_trait::async_trait;
use serde_json::Value as Json;
use sless_api::{Function, FunctionCreate, FunctionSpec};
use sless_client::Client;
use tf_provider::Diagnostics;

pub use state::FunctionState;

use crate::code::{file_sha256, read_archive};
use crate::diagnostics::error;
use crate::resource::fields::Field;
use crate::resource::{ApiResource, Identity, Key, Outcome, Written};

/// The `sless_function` resource.
#[derive(Debug, Clone)]
pub struct FunctionResource {
    /// The sha256 of a file when it can be read while planning (a seam for
    /// the plan's unit tests).
    file_hash: fn(&str) -> Option<String>,
}

impl Default for FunctionResource {
    fn default() -> FunctionResource {
        FunctionResource { file_hash: file_sha256 }
    }
}

#[async_trait]
impl ApiResource for FunctionResource {
    type State = FunctionState;
    type Spec = FunctionSpec;
    type Api = Function;

    const NOUN: &'static str = "function";
    const DESCRIPTION: &'static str =
        "A function: its code (a zip) and how it runs. Create and update wait until the build is Ready.";

    fn fields() -> Vec<Field> {
        state::fields()
    }

    fn identity(state: &mut FunctionState) -> Identity<'_> {
        Identity {
            id: &mut state.id,
            namespace: &mut state.namespace,
            name: &mut state.name,
            parent: None,
        }
    }

    fn validate(diags: &mut Diagnostics, config: &FunctionState) {
        plan::validate(diags, config);
    }

    fn plan(
        &self,
        diags: &mut Diagnostics,
        prior: Option<&FunctionState>,
        config: &FunctionState,
        planned: &mut FunctionState,
    ) {
        plan::check_planned_hash(diags, config, self.file_hash);
        plan::plan(prior, config, planned, self.file_hash);
    }

    fn spec_json(diags: &mut Diagnostics, state: &FunctionState) -> Json {
        state::spec_json(diags, state)
    }

    fn from_api(function: &Function, previous: &FunctionState) -> FunctionState {
        state::from_api(function, previous)
    }

    async fn get(client: &Client, key: &Key) -> sless_client::Result<Function> {
        client.get_function(&key.namespace, &key.name).await
    }

    async fn create(client: &Client, key: &Key, spec: FunctionSpec) -> sless_client::Result<Function> {
        let name = key.name.clone();
        client
            .create_function(&key.namespace, &FunctionCreate { name, spec })
            .await
    }

    async fn patch(client: &Client, key: &Key, patch: &Json) -> sless_client::Result<Function> {
        client.patch_function(&key.namespace, &key.name, patch).await
    }

    /// Orphan: the triggers and jobs naming it are Terraform's to delete (it
    /// orders them first when they reference the function) or to keep (a
    /// function replaced for a new runtime keeps its triggers).
    async fn delete(client: &Client, key: &Key) -> sless_client::Result<()> {
        client.delete_function_orphan(&key.namespace, &key.name).await
    }

    /// Fails on a missing zip before anything exists on the server.
    async fn before_create(&self, diags: &mut Diagnostics, planned: &FunctionState) -> Option<()> {
        let filename = planned.filename.as_deref_option().unwrap_or_default();
        if let Err(message) = read_archive(filename).await {
            error(diags, "Cannot read the function's code", message, Some("filename"));
            return None;
        }
        Some(())
    }

    /// Uploads the code and waits for its build: always after a create,
    /// and after an update that plans new code. A failed build or upload is
    /// an error, and a created function is tainted.
    async fn after_write(
        &self,
        diags: &mut Diagnostics,
        client: &Client,
        key: &Key,
        planned: &FunctionState,
        written: Written<Function>,
    ) -> Outcome<Function> {
        // The plan leaves `version` unknown exactly when new code goes up.
        if matches!(written, Written::Updated(_)) && !planned.version.is_unknown() {
            return Outcome::AsPlanned(written.latest());
        }
        let errors = diags.errors.len();
        let deployed = deploy::deploy_code(diags, client, planned, key).await;
        match deployed.or(written.latest()) {
            Some(function) if diags.errors.len() > errors => Outcome::Partly(function),
            None if diags.errors.len() > errors => Outcome::Failed,
            latest => Outcome::AsPlanned(latest),
        }
    }
}
