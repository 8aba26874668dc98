//! `Managed<R>`: the one implementation of Terraform's resource calls, for
//! every [`ApiResource`].

use async_trait::async_trait;
use sless_client::Client;
use tf_provider::schema::Schema;
use tf_provider::value::ValueEmpty;
use tf_provider::{AttributePath, Diagnostics, Resource};

use super::fields::settle;
use super::{plan, schema, settable, spec_of, validate, ApiResource, Key, Outcome, Written};
use crate::connection::Shared;
use crate::convert::{merge_diff, parse_child_import_id, parse_import_id};
use crate::diagnostics::{api_error, error};

/// The Terraform resource of an [`ApiResource`], talking to the provider's
/// connection.
#[derive(Debug, Clone)]
pub struct Managed<R> {
    kind: R,
    shared: Shared,
}

impl<R: ApiResource> Managed<R> {
    pub fn new(kind: R, shared: Shared) -> Managed<R> {
        Managed { kind, shared }
    }

    /// The answer of the call `doing` ("create") on `key`, or `None` after
    /// adding the diagnostic of its error.
    fn answer<T>(&self, diags: &mut Diagnostics, doing: &str, key: &Key, answer: sless_client::Result<T>) -> Option<T> {
        answer.map_err(|err| self.failed(diags, doing, key, &err)).ok()
    }

    /// Adds the diagnostic of a failed call `doing` ("create") on `key`.
    fn failed(&self, diags: &mut Diagnostics, doing: &str, key: &Key, err: &sless_client::Error) {
        let summary = format!("Cannot {doing} {} {key}", R::NOUN);
        api_error(diags, summary, err, &settable::<R>());
    }

    /// The state an apply leaves: after the kind's own work, the plan
    /// settled from the server, or the server's view of a partial apply.
    async fn finish(
        &self,
        diags: &mut Diagnostics,
        client: &Client,
        key: &Key,
        planned: R::State,
        written: Written<R::Api>,
    ) -> Option<R::State> {
        let api = match self.kind.after_write(diags, client, key, &planned, written).await {
            Outcome::AsPlanned(Some(api)) => api,
            Outcome::AsPlanned(None) => self.answer(diags, "read", key, R::get(client, key).await)?,
            Outcome::Partly(api) => return Some(R::from_api(&api, &planned)),
            Outcome::Failed => return None,
        };
        let server = R::from_api(&api, &planned);
        Some(settle(planned, &server))
    }
}

#[async_trait]
impl<R: ApiResource> Resource for Managed<R> {
    type State<'a> = R::State;
    type PrivateState<'a> = ValueEmpty;
    type ProviderMetaState<'a> = ValueEmpty;

    fn schema(&self, _diags: &mut Diagnostics) -> Option<Schema> {
        Some(schema::<R>())
    }

    async fn validate<'a>(&self, diags: &mut Diagnostics, config: Self::State<'a>) -> Option<()> {
        validate::<R>(diags, config);
        Some(())
    }

    async fn read<'a>(
        &self,
        diags: &mut Diagnostics,
        mut state: Self::State<'a>,
        private_state: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let client = self.shared.client(diags)?;
        let Some(key) = Key::of::<R>(&mut state) else {
            return Some((state, private_state));
        };
        match R::get(&client, &key).await {
            Ok(api) => Some((R::from_api(&api, &state), private_state)),
            Err(e) if e.is_not_found() => None,
            Err(e) => {
                self.failed(diags, "read", &key, &e);
                Some((state, private_state))
            }
        }
    }

    async fn plan_create<'a>(
        &self,
        diags: &mut Diagnostics,
        proposed_state: Self::State<'a>,
        config_state: Self::State<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let namespace = self.shared.namespace();
        let (planned, _) = plan(&self.kind, diags, None, config_state, proposed_state, &namespace);
        Some((planned, ValueEmpty::Null))
    }

    async fn plan_update<'a>(
        &self,
        diags: &mut Diagnostics,
        prior_state: Self::State<'a>,
        proposed_state: Self::State<'a>,
        config_state: Self::State<'a>,
        prior_private_state: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>, Vec<AttributePath>)> {
        let namespace = self.shared.namespace();
        let (planned, replace) = plan(
            &self.kind,
            diags,
            Some(&prior_state),
            config_state,
            proposed_state,
            &namespace,
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
        mut planned_state: Self::State<'a>,
        _config_state: Self::State<'a>,
        planned_private_state: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let client = self.shared.client(diags)?;
        let key = Key::of::<R>(&mut planned_state)?;
        let spec = spec_of::<R>(diags, &key, &planned_state)?;
        self.kind.before_create(diags, &planned_state).await?;
        let created = self.answer(diags, "create", &key, R::create(&client, &key, spec).await)?;
        let state = self
            .finish(diags, &client, &key, planned_state, Written::Created(created))
            .await?;
        Some((state, planned_private_state))
    }

    async fn update<'a>(
        &self,
        diags: &mut Diagnostics,
        prior_state: Self::State<'a>,
        mut planned_state: Self::State<'a>,
        _config_state: Self::State<'a>,
        planned_private_state: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<(Self::State<'a>, Self::PrivateState<'a>)> {
        let client = self.shared.client(diags)?;
        let key = Key::of::<R>(&mut planned_state)?;
        let errors = diags.errors.len();
        let patch = merge_diff(&R::spec_json(diags, &prior_state), &R::spec_json(diags, &planned_state));
        if diags.errors.len() > errors {
            return None;
        }
        let patched = match patch {
            Some(patch) => Some(self.answer(diags, "update", &key, R::patch(&client, &key, &patch).await)?),
            None => None,
        };
        let state = self
            .finish(diags, &client, &key, planned_state, Written::Updated(patched))
            .await?;
        Some((state, planned_private_state))
    }

    async fn destroy<'a>(
        &self,
        diags: &mut Diagnostics,
        mut prior_state: Self::State<'a>,
        _planned_private_state: Self::PrivateState<'a>,
        _meta: Self::ProviderMetaState<'a>,
    ) -> Option<()> {
        let client = self.shared.client(diags)?;
        let Some(key) = Key::of::<R>(&mut prior_state) else {
            return Some(());
        };
        match R::delete(&client, &key).await {
            Ok(()) => Some(()),
            Err(e) if e.is_not_found() => Some(()),
            Err(e) => {
                self.failed(diags, "delete", &key, &e);
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
        let parsed = match R::PARENT {
            None => parse_import_id(R::NOUN, &id, &self.shared.namespace()).map(|(ns, name)| (ns, None, name)),
            Some(parent) => parse_child_import_id(parent, R::NOUN, &id, &self.shared.namespace()),
        };
        let (namespace, parent, name) = match parsed {
            Ok(parts) => parts,
            Err(message) => {
                error(diags, format!("Invalid import ID {id:?}"), message, None);
                return None;
            }
        };
        let key = Key {
            namespace,
            name,
            parent,
        };
        let api = self.answer(diags, "import", &key, R::get(&client, &key).await)?;
        Some((R::from_api(&api, &R::State::default()), ValueEmpty::Null))
    }
}
