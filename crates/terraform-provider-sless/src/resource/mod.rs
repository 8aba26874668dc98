//! What the provider's resources share, written once: a resource is a REST
//! collection of the sless API (`/v1/namespaces/{ns}/{kind}s/{name}`), and
//! [`ApiResource`] is what differs from one to the next. [`Managed`] turns
//! an `ApiResource` into a Terraform resource: read, plan, create, update,
//! delete and import, the `namespace/name` ID, error diagnostics, and which
//! changes replace (from the attribute table, see [`fields`]).
//!
//! # How to add a resource
//!
//! Say `sless_widget`, over `/v1/namespaces/{ns}/widgets`. Write
//! `src/widget/`:
//! - `state.rs`: `WidgetState`, one `Value<_>` per attribute (serde names =
//!   attribute names, including `id`, `name`, `namespace`); `fields()`, the
//!   table of every other attribute, each made with [`fields::replaces`],
//!   [`fields::updates`] or [`fields::reported`] (so each one says what a
//!   change does; the unit tests fail for a state field without a row);
//!   `spec_json` (the known spec attributes as the API's JSON) and
//!   `from_api` (the server's object as a state).
//! - `plan.rs`: `validate` (what can be checked without the server) and
//!   `plan` (the server's defaults, computed values left unknown when an
//!   apply will change them), pure functions with unit tests.
//! - `mod.rs`: `impl ApiResource for WidgetResource`: the nouns, the four
//!   REST calls through `sless-client`, and `after_write` only if an apply
//!   does more than the create or patch (functions build code, jobs wait
//!   for their run).
//!
//! Then register it in `provider.rs`, add `check_table::<WidgetResource>()`
//! to `protocol_tests.rs`, and cover it in the acceptance tests. Everything
//! else (IDs, import, read-after-delete, patches as merge diffs, settling
//! unknowns, error messages) comes from here. `trigger/` is the smallest
//! model; `function/` and `job/` show the hooks.

pub mod fields;
mod managed;

use std::fmt;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value as Json;
use sless_client::Client;
use tf_provider::schema::Schema;
use tf_provider::value::Value;
use tf_provider::Diagnostics;

pub use managed::Managed;

use crate::convert::{check_name, resource_id};
use crate::diagnostics::{error, guess_attribute};
use fields::Field;

/// One kind of sless object as a Terraform resource: what differs between
/// kinds. Associated functions are pure or one REST call; the methods that
/// take `&self` are the hooks a kind may refine.
#[async_trait]
pub trait ApiResource: Send + Sync + 'static {
    /// The resource as Terraform holds it (`FunctionState`).
    type State: Serialize + DeserializeOwned + Default + Clone + Send + Sync + 'static;
    /// The spec the API creates it from (`FunctionSpec`).
    type Spec: DeserializeOwned + Send;
    /// The object the API answers with (`Function`).
    type Api: Send + Sync;

    /// The API's noun: in messages, import IDs and name checks.
    const NOUN: &'static str;
    /// The noun of the object this one lives under (`function` for an
    /// alias), if any: its key, ID and import ID then read
    /// `namespace/parent/name`, and [`Identity::parent`] names the attribute.
    const PARENT: Option<&'static str> = None;
    /// The resource's one-line description in the schema.
    const DESCRIPTION: &'static str;

    /// Every attribute but `id`, `name` and `namespace` (which
    /// [`fields::identity`] adds), in the order plans report replacements.
    fn fields() -> Vec<Field>;

    /// The state's `id`, `namespace` and `name`.
    fn identity(state: &mut Self::State) -> Identity<'_>;

    /// Checks a configuration without the server, past the names (checked
    /// already); errors go on the attribute.
    fn validate(diags: &mut Diagnostics, config: &Self::State);

    /// The rest of a plan, after `namespace` and `id`: the server's
    /// defaults for unset attributes and the computed values an apply will
    /// change (left unknown). `prior` is `None` for a create.
    fn plan(
        &self,
        diags: &mut Diagnostics,
        prior: Option<&Self::State>,
        config: &Self::State,
        planned: &mut Self::State,
    );

    /// The spec attributes that are known and set, as the API's JSON.
    fn spec_json(diags: &mut Diagnostics, state: &Self::State) -> Json;

    /// The state of an object as the server reports it; `previous` gives
    /// what the server does not keep (a zip's filename, a JSON string's
    /// formatting).
    fn from_api(api: &Self::Api, previous: &Self::State) -> Self::State;

    async fn get(client: &Client, key: &Key) -> sless_client::Result<Self::Api>;
    async fn create(client: &Client, key: &Key, spec: Self::Spec) -> sless_client::Result<Self::Api>;
    /// Applies a JSON merge patch of the spec.
    async fn patch(client: &Client, key: &Key, patch: &Json) -> sless_client::Result<Self::Api>;
    async fn delete(client: &Client, key: &Key) -> sless_client::Result<()>;

    /// Checks before a create that would otherwise leave a resource that
    /// cannot become what was planned (errors in `diags`, `None` to stop).
    async fn before_create(&self, _diags: &mut Diagnostics, _planned: &Self::State) -> Option<()> {
        Some(())
    }

    /// What an apply does after the create or patch, and what it came to.
    /// By default nothing: the object is as planned.
    async fn after_write(
        &self,
        _diags: &mut Diagnostics,
        _client: &Client,
        _key: &Key,
        _planned: &Self::State,
        written: Written<Self::Api>,
    ) -> Outcome<Self::Api> {
        Outcome::AsPlanned(written.latest())
    }
}

/// The attributes every resource has. (Mutable, so that one accessor per
/// resource serves plans, which set `id` and `namespace`, and reads.)
pub struct Identity<'a> {
    pub id: &'a mut Value<String>,
    pub namespace: &'a mut Value<String>,
    pub name: &'a mut Value<String>,
    /// The parent's name, for a resource with [`ApiResource::PARENT`].
    pub parent: Option<&'a mut Value<String>>,
}

/// Where an object is on the server; displayed as `namespace/name` (or
/// `namespace/parent/name`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    pub namespace: String,
    pub name: String,
    /// The object it lives under (an alias's function).
    pub parent: Option<String>,
}

impl Key {
    /// The key of a state whose namespace and name are known.
    pub fn of<R: ApiResource>(state: &mut R::State) -> Option<Key> {
        let identity = R::identity(state);
        let parent = match identity.parent {
            Some(parent) => Some(parent.as_ref_option()?.clone()),
            None => None,
        };
        Some(Key {
            namespace: identity.namespace.as_ref_option()?.clone(),
            name: identity.name.as_ref_option()?.clone(),
            parent,
        })
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.parent {
            Some(parent) => write!(f, "{}/{parent}/{}", self.namespace, self.name),
            None => write!(f, "{}/{}", self.namespace, self.name),
        }
    }
}

/// What an apply wrote through the API.
pub enum Written<A> {
    /// The create's answer.
    Created(A),
    /// The patch's answer; `None` when the spec did not change.
    Updated(Option<A>),
}

impl<A> Written<A> {
    /// The object as the API last answered, if it did.
    pub fn latest(self) -> Option<A> {
        match self {
            Written::Created(api) => Some(api),
            Written::Updated(api) => api,
        }
    }
}

/// What an apply came to.
pub enum Outcome<A> {
    /// As planned: the state is the plan with its unknowns taken from this
    /// object (read from the server when `None`).
    AsPlanned(Option<A>),
    /// It exists but is not what was planned (the errors are in the
    /// diagnostics): the state is what the server reports, and Terraform
    /// taints a resource it was creating.
    Partly(A),
    /// Nothing to record (the errors are in the diagnostics).
    Failed,
}

/// Every attribute of `R`, identity first.
pub fn all_fields<R: ApiResource>() -> Vec<Field> {
    let mut all = fields::identity(R::NOUN);
    all.extend(R::fields());
    all
}

/// The schema of `R`.
pub fn schema<R: ApiResource>() -> Schema {
    fields::schema_of(R::DESCRIPTION, &all_fields::<R>())
}

/// The attributes of `R` a server message may name.
pub fn settable<R: ApiResource>() -> Vec<&'static str> {
    fields::settable(&all_fields::<R>())
}

/// Checks a configuration without the server.
pub fn validate<R: ApiResource>(diags: &mut Diagnostics, mut config: R::State) {
    let identity = R::identity(&mut config);
    check_name(diags, R::NOUN, identity.name, "name");
    check_name(diags, "namespace", identity.namespace, "namespace");
    R::validate(diags, &config);
}

/// The planned state of a create (`prior` is `None`) or an update from
/// Terraform's proposal, and the attributes whose change replaces it.
pub fn plan<R: ApiResource>(
    kind: &R,
    diags: &mut Diagnostics,
    prior: Option<&R::State>,
    mut config: R::State,
    proposed: R::State,
    default_namespace: &Value<String>,
) -> (R::State, Vec<&'static str>) {
    let namespace_unset = R::identity(&mut config).namespace.is_null();
    let mut planned = proposed;
    let identity = R::identity(&mut planned);
    if namespace_unset {
        *identity.namespace = default_namespace.clone();
    }
    *identity.id = match identity.parent {
        Some(parent) => resource_id(identity.namespace, &resource_id(parent, identity.name)),
        None => resource_id(identity.namespace, identity.name),
    };
    kind.plan(diags, prior, &config, &mut planned);
    let replace = match prior {
        None => Vec::new(),
        Some(prior) => fields::replacements(&all_fields::<R>(), prior, &planned),
    };
    (planned, replace)
}

/// The whole spec of a planned state (every value known).
pub fn spec_of<R: ApiResource>(diags: &mut Diagnostics, key: &Key, state: &R::State) -> Option<R::Spec> {
    let errors = diags.errors.len();
    let json = R::spec_json(diags, state);
    if diags.errors.len() > errors {
        return None;
    }
    match serde_json::from_value(json) {
        Ok(spec) => Some(spec),
        Err(e) => {
            let attribute = guess_attribute(&e.to_string(), &settable::<R>());
            error(diags, format!("Invalid {} {key}", R::NOUN), e.to_string(), attribute);
            None
        }
    }
}
