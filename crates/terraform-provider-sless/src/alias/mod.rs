//! `sless_alias`: a name that sends a function's calls
//! (`/fn/{ns}/{function}@{name}`) to one of its versions, optionally with a
//! share to a second one. Moving it (`version`, `weights`) is an in-place
//! update; a new `function` or `name` replaces it.

mod plan;
mod state;

use async_trait::async_trait;
use serde_json::Value as Json;
use sless_api::{Alias, AliasSpec};
use sless_client::Client;
use tf_provider::Diagnostics;

pub use state::AliasState;

use crate::resource::fields::Field;
use crate::resource::{ApiResource, Identity, Key};

/// The `sless_alias` resource.
#[derive(Debug, Clone, Default)]
pub struct AliasResource;

/// The function an alias key lives under (always set for aliases).
fn function(key: &Key) -> &str {
    key.parent.as_deref().unwrap_or_default()
}

#[async_trait]
impl ApiResource for AliasResource {
    type State = AliasState;
    type Spec = AliasSpec;
    type Api = Alias;

    const NOUN: &'static str = "alias";
    const PARENT: Option<&'static str> = Some("function");
    const DESCRIPTION: &'static str =
        "A name for one of a function's versions (/fn/{ns}/{function}@{name}), optionally sending a share of calls to a second version.";

    fn fields() -> Vec<Field> {
        state::fields()
    }

    fn identity(state: &mut AliasState) -> Identity<'_> {
        Identity {
            id: &mut state.id,
            namespace: &mut state.namespace,
            name: &mut state.name,
            parent: Some(&mut state.function),
        }
    }

    fn validate(diags: &mut Diagnostics, config: &AliasState) {
        plan::validate(diags, config);
    }

    fn plan(&self, _: &mut Diagnostics, prior: Option<&AliasState>, _config: &AliasState, planned: &mut AliasState) {
        if prior.is_none_or(|p| p.function != planned.function || p.name != planned.name) {
            planned.url = tf_provider::value::Value::Unknown;
        }
        plan::plan(planned);
    }

    fn spec_json(diags: &mut Diagnostics, state: &AliasState) -> Json {
        state::spec_json(diags, state)
    }

    fn from_api(alias: &Alias, previous: &AliasState) -> AliasState {
        state::from_api(alias, previous)
    }

    async fn get(client: &Client, key: &Key) -> sless_client::Result<Alias> {
        client.get_alias(&key.namespace, function(key), &key.name).await
    }

    async fn create(client: &Client, key: &Key, spec: AliasSpec) -> sless_client::Result<Alias> {
        client.put_alias(&key.namespace, function(key), &key.name, &spec).await
    }

    async fn patch(client: &Client, key: &Key, patch: &Json) -> sless_client::Result<Alias> {
        client
            .patch_alias(&key.namespace, function(key), &key.name, patch)
            .await
    }

    async fn delete(client: &Client, key: &Key) -> sless_client::Result<()> {
        client.delete_alias(&key.namespace, function(key), &key.name).await
    }
}
