//! `sless_function`: create, read, update in place (spec changes and new
//! code), replace on name/namespace/runtime, delete, import.

mod plan;
mod state;

#[cfg(test)]
mod tests;

use async_trait::async_trait;
use sless_api::{Function, FunctionCreate, Phase};
use sless_client::Client;
use tf_provider::schema::Schema;
use tf_provider::value::{Value, ValueEmpty};
use tf_provider::{AttributePath, Diagnostics, Resource};

pub use state::FunctionState;

use crate::code::{file_sha256, read_archive, upload_and_build};
use crate::connection::Shared;
use crate::convert::{merge_diff, parse_import_id, settle};
use crate::diagnostics::{api_error, error};
use state::{from_api, spec_json, spec_of, FIELDS};

/// The `sless_function` resource.
#[derive(Debug, Clone)]
pub struct FunctionResource {
    shared: Shared,
}

impl FunctionResource {
    pub fn new(shared: Shared) -> FunctionResource {
        FunctionResource { shared }
    }
}

/// Reads the zip, checks it is the one planned, uploads it and waits for the
/// build. Returns the function as the server then reports it (None when the
/// upload never happened); errors are in `diags`.
async fn deploy_code(
    diags: &mut Diagnostics,
    client: &Client,
    planned: &FunctionState,
    namespace: &str,
    name: &str,
) -> Option<Function> {
    let filename = planned.filename.as_deref_option().unwrap_or_default();
    let archive = match read_archive(filename).await {
        Ok(archive) => archive,
        Err(message) => {
            error(diags, "Cannot read the function's code", message, Some("filename"));
            return None;
        }
    };
    if let Some(planned_hash) = planned.code_hash.as_ref_option() {
        if !planned_hash.eq_ignore_ascii_case(&archive.sha256) {
            error(
                diags,
                "The zip is not the one planned",
                format!(
                    "{filename:?} has sha256 {} but code_hash is {planned_hash}: set code_hash = filesha256({filename:?}), \
                     and plan again if the file changed after planning.",
                    archive.sha256
                ),
                Some("code_hash"),
            );
            return None;
        }
    }
    let hash = archive.sha256.clone();
    let timeout = planned.build_timeout_sec.as_ref_option().copied().unwrap_or(300);
    let timeout = u32::try_from(timeout).unwrap_or(300);
    let label = format!("{namespace}/{name}");
    match upload_and_build(client, namespace, name, archive, timeout).await {
        Ok(function) if function.status.phase == Phase::Failed => {
            let serving = match function.status.version {
                0 => String::new(),
                n => format!("\n\nVersion {n} keeps serving."),
            };
            error(
                diags,
                format!("The build of function {label} failed"),
                format!(
                    "sless could not build {filename:?} (code_hash {hash}). The build log ends with:\n\n{}{serving}",
                    function.status.message.trim_end()
                ),
                Some("filename"),
            );
            Some(function)
        }
        Ok(function) => Some(function),
        Err(e) => {
            api_error(diags, format!("Cannot deploy the code of function {label}"), &e, FIELDS);
            client.get_function(namespace, name).await.ok()
        }
    }
}

/// The state after a failed apply step: the server's view, with the
/// practitioner's filename.
fn partial(function: &Function, planned: &FunctionState) -> FunctionState {
    from_api(function, planned.filename.clone())
}

/// The state after a successful apply: the plan, with its unknowns filled in
/// from the server.
fn settled(mut planned: FunctionState, function: &Function) -> FunctionState {
    let server = from_api(function, planned.filename.clone());
    settle(&mut planned.code_hash, server.code_hash);
    settle(&mut planned.phase, server.phase);
    settle(&mut planned.version, server.version);
    settle(&mut planned.url, server.url);
    settle(&mut planned.id, server.id);
    settle(&mut planned.namespace, server.namespace);
    planned
}

#[async_trait]
impl Resource for FunctionResource {
    type State<'a> = FunctionState;
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
        match client.get_function(namespace, name).await {
            Ok(function) => Some((from_api(&function, state.filename.clone()), private_state)),
            Err(e) if e.is_not_found() => None,
            Err(e) => {
                api_error(diags, format!("Cannot read function {}", state.label()), &e, FIELDS);
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
        check_planned_hash(diags, &config_state);
        let namespace = self.shared.namespace();
        let (planned, _) = plan::plan(None, &config_state, proposed_state, &namespace, &file_sha256);
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
        check_planned_hash(diags, &config_state);
        let namespace = self.shared.namespace();
        let (planned, replace) = plan::plan(
            Some(&prior_state),
            &config_state,
            proposed_state,
            &namespace,
            &file_sha256,
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
        // Fail on a missing zip before anything exists on the server.
        if let Err(message) = read_archive(planned_state.filename.as_deref_option().unwrap_or_default()).await {
            error(diags, "Cannot read the function's code", message, Some("filename"));
            return None;
        }
        let create = FunctionCreate {
            name: name.clone(),
            spec,
        };
        let created = match client.create_function(&namespace, &create).await {
            Ok(function) => function,
            Err(e) => {
                api_error(diags, format!("Cannot create function {namespace}/{name}"), &e, FIELDS);
                return None;
            }
        };
        let errors = diags.errors.len();
        let deployed = deploy_code(diags, &client, &planned_state, &namespace, &name).await;
        let function = deployed.unwrap_or(created);
        if diags.errors.len() > errors {
            // It exists but is not what was planned: Terraform taints it.
            return Some((partial(&function, &planned_state), planned_private_state));
        }
        Some((settled(planned_state, &function), planned_private_state))
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
        let label = format!("{namespace}/{name}");
        let errors = diags.errors.len();
        let patch = merge_diff(&spec_json(diags, &prior_state), &spec_json(diags, &planned_state));
        if diags.errors.len() > errors {
            return None;
        }
        let mut latest = None;
        if let Some(patch) = patch {
            match client.patch_function(&namespace, &name, &patch).await {
                Ok(function) => latest = Some(function),
                Err(e) => {
                    api_error(diags, format!("Cannot update function {label}"), &e, FIELDS);
                    return None;
                }
            }
        }
        // The plan leaves `version` unknown exactly when new code goes up.
        if planned_state.version.is_unknown() {
            let deployed = deploy_code(diags, &client, &planned_state, &namespace, &name).await;
            if diags.errors.len() > errors {
                return deployed
                    .or(latest)
                    .map(|function| (partial(&function, &planned_state), planned_private_state));
            }
            latest = deployed;
        }
        let function = match latest {
            Some(function) => function,
            None => match client.get_function(&namespace, &name).await {
                Ok(function) => function,
                Err(e) => {
                    api_error(diags, format!("Cannot read function {label}"), &e, FIELDS);
                    return None;
                }
            },
        };
        Some((settled(planned_state, &function), planned_private_state))
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
        // Orphan: the triggers and jobs naming it are Terraform's to delete
        // (it orders them first when they reference the function) or to
        // keep (a function replaced for a new runtime keeps its triggers).
        match client.delete_function_orphan(namespace, name).await {
            Ok(()) => Some(()),
            Err(e) if e.is_not_found() => Some(()),
            Err(e) => {
                api_error(
                    diags,
                    format!("Cannot delete function {}", prior_state.label()),
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
        let (namespace, name) = match parse_import_id("function", &id, &self.shared.namespace()) {
            Ok(parts) => parts,
            Err(message) => {
                error(diags, format!("Invalid import ID {id:?}"), message, None);
                return None;
            }
        };
        match client.get_function(&namespace, &name).await {
            Ok(function) => Some((from_api(&function, Value::Null), ValueEmpty::Null)),
            Err(e) => {
                api_error(diags, format!("Cannot import function {namespace}/{name}"), &e, FIELDS);
                None
            }
        }
    }
}

/// A `code_hash` that is not the sha256 of `filename` as it is now cannot
/// converge: say so while planning rather than after creating things.
fn check_planned_hash(diags: &mut Diagnostics, config: &FunctionState) {
    let (Some(filename), Some(hash)) = (config.filename.as_ref_option(), config.code_hash.as_ref_option()) else {
        return;
    };
    if !crate::code::is_sha256_hex(hash) {
        return; // `validate` has said what is wrong with it
    }
    if let Some(actual) = file_sha256(filename) {
        if !actual.eq_ignore_ascii_case(hash) {
            error(
                diags,
                "code_hash does not match filename",
                format!(
                    "{filename:?} has sha256 {actual} but code_hash is {hash}: set code_hash = filesha256({filename:?})."
                ),
                Some("code_hash"),
            );
        }
    }
}
