//! `sless_trigger`: create, read, update in place (`enabled`, schedule, ...),
//! replace on name/namespace/type, delete, import.

mod plan;
mod state;

#[cfg(test)]
mod tests;

use async_trait::async_trait;
use sless_api::{Trigger, TriggerCreate};
use tf_provider::schema::Schema;
use tf_provider::value::ValueEmpty;
use tf_provider::{AttributePath, Diagnostics, Resource};

pub use state::TriggerState;

use crate::connection::Shared;
use crate::convert::{merge_diff, parse_import_id, settle};
use crate::diagnostics::{api_error, error};
use state::{from_api, spec_json, spec_of, FIELDS};

/// The `sless_trigger` resource.
#[derive(Debug, Clone)]
pub struct TriggerResource {
    shared: Shared,
}

impl TriggerResource {
    pub fn new(shared: Shared) -> TriggerResource {
        TriggerResource { shared }
    }
}

/// The plan, with its unknowns filled in from the server.
fn settled(mut planned: TriggerState, trigger: &Trigger) -> TriggerState {
    let server = from_api(trigger, &planned);
    settle(&mut planned.url, server.url);
    settle(&mut planned.timezone, server.timezone);
    settle(&mut planned.id, server.id);
    settle(&mut planned.namespace, server.namespace);
    planned
}

#[async_trait]
impl Resource for TriggerResource {
    type State<'a> = TriggerState;
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
        match client.get_trigger(namespace, name).await {
            Ok(trigger) => Some((from_api(&trigger, &state), private_state)),
            Err(e) if e.is_not_found() => None,
            Err(e) => {
                api_error(diags, format!("Cannot read trigger {}", state.label()), &e, FIELDS);
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
        let create = TriggerCreate {
            name: name.clone(),
            spec,
        };
        match client.create_trigger(&namespace, &create).await {
            Ok(trigger) => Some((settled(planned_state, &trigger), planned_private_state)),
            Err(e) => {
                api_error(diags, format!("Cannot create trigger {namespace}/{name}"), &e, FIELDS);
                None
            }
        }
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
            Some(patch) => client.patch_trigger(&namespace, &name, &patch).await,
            None => client.get_trigger(&namespace, &name).await,
        };
        match answer {
            Ok(trigger) => Some((settled(planned_state, &trigger), planned_private_state)),
            Err(e) => {
                api_error(diags, format!("Cannot update trigger {namespace}/{name}"), &e, FIELDS);
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
        match client.delete_trigger(namespace, name).await {
            Ok(()) => Some(()),
            Err(e) if e.is_not_found() => Some(()),
            Err(e) => {
                api_error(
                    diags,
                    format!("Cannot delete trigger {}", prior_state.label()),
                    &e,
                    FIELDS,
                );
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
        let (namespace, name) = match parse_import_id("trigger", &id, &self.shared.namespace()) {
            Ok(parts) => parts,
            Err(message) => {
                error(diags, format!("Invalid import ID {id:?}"), message, None);
                return None;
            }
        };
        match client.get_trigger(&namespace, &name).await {
            Ok(trigger) => Some((from_api(&trigger, &TriggerState::default()), ValueEmpty::Null)),
            Err(e) => {
                api_error(diags, format!("Cannot import trigger {namespace}/{name}"), &e, FIELDS);
                None
            }
        }
    }
}
