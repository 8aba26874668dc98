//! `sless_trigger`: an http route, a cron schedule or a RabbitMQ queue that
//! fires a function; `enabled` and the settings change in place, a new
//! `type` replaces it.

mod plan;
mod state;

#[cfg(test)]
mod tests;

use async_trait::async_trait;
use serde_json::Value as Json;
use sless_api::{Trigger, TriggerCreate, TriggerSpec};
use sless_client::Client;
use tf_provider::Diagnostics;

pub use state::TriggerState;

use crate::resource::fields::Field;
use crate::resource::{ApiResource, Identity, Key};

/// The `sless_trigger` resource.
#[derive(Debug, Clone, Default)]
pub struct TriggerResource;

#[async_trait]
impl ApiResource for TriggerResource {
    type State = TriggerState;
    type Spec = TriggerSpec;
    type Api = Trigger;

    const NOUN: &'static str = "trigger";
    const DESCRIPTION: &'static str =
        "What fires a function besides a direct call: an HTTP route, a cron schedule or a RabbitMQ queue.";

    fn fields() -> Vec<Field> {
        state::fields()
    }

    fn identity(state: &mut TriggerState) -> Identity<'_> {
        Identity {
            id: &mut state.id,
            namespace: &mut state.namespace,
            name: &mut state.name,
            parent: None,
        }
    }

    fn validate(diags: &mut Diagnostics, config: &TriggerState) {
        plan::validate(diags, config);
    }

    fn plan(
        &self,
        _: &mut Diagnostics,
        prior: Option<&TriggerState>,
        config: &TriggerState,
        planned: &mut TriggerState,
    ) {
        plan::plan(prior, config, planned);
    }

    fn spec_json(diags: &mut Diagnostics, state: &TriggerState) -> Json {
        state::spec_json(diags, state)
    }

    fn from_api(trigger: &Trigger, previous: &TriggerState) -> TriggerState {
        state::from_api(trigger, previous)
    }

    async fn get(client: &Client, key: &Key) -> sless_client::Result<Trigger> {
        client.get_trigger(&key.namespace, &key.name).await
    }

    async fn create(client: &Client, key: &Key, spec: TriggerSpec) -> sless_client::Result<Trigger> {
        let name = key.name.clone();
        client
            .create_trigger(&key.namespace, &TriggerCreate { name, spec })
            .await
    }

    async fn patch(client: &Client, key: &Key, patch: &Json) -> sless_client::Result<Trigger> {
        client.patch_trigger(&key.namespace, &key.name, patch).await
    }

    async fn delete(client: &Client, key: &Key) -> sless_client::Result<()> {
        client.delete_trigger(&key.namespace, &key.name).await
    }
}
