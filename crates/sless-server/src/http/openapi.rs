//! The OpenAPI document, generated from the handlers' annotations.

use utoipa::openapi::path::{HttpMethod, ParameterBuilder, ParameterIn, PathItem};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::Required;
use utoipa::{Modify, OpenApi};

use super::{functions, system, tokens};
use crate::cluster::turns::TURN_WAIT;
use crate::versions::{AWAITED_FOR, MAX_BY_NUMBER};

#[derive(OpenApi)]
#[openapi(
    info(title = "sless", description = "Self-hosted Function-as-a-Service: REST API"),
    paths(
        system::healthz,
        system::openapi_json,
        system::metrics,
        tokens::create,
        tokens::list,
        tokens::delete,
        functions::list,
        functions::create,
        functions::get,
        functions::patch,
        functions::delete,
        functions::upload_code,
        super::invocations::list,
        super::async_invocations::list,
        super::async_invocations::get,
        super::triggers::list,
        super::triggers::create,
        super::triggers::get,
        super::triggers::patch,
        super::triggers::delete,
        super::jobs::list,
        super::jobs::create,
        super::jobs::get,
        super::jobs::patch,
        super::jobs::delete,
        super::invocations::logs,
        super::stats::stats,
        super::whoami::whoami,
        super::versions::list_versions,
        super::versions::get_version,
        super::versions::delete_version,
        super::versions::list_aliases,
        super::versions::get_alias,
        super::versions::put_alias,
        super::versions::patch_alias,
        super::versions::delete_alias,
        super::secrets::list,
        super::secrets::create,
        super::secrets::get,
        super::secrets::patch,
        super::secrets::delete,
        super::gateway::invoke,
    ),
    components(schemas(
        sless_api::Function,
        sless_api::FunctionCreate,
        sless_api::FunctionSpec,
        sless_api::FunctionStatus,
        sless_api::Rollout,
        sless_api::Phase,
        sless_api::Runtime,
        sless_api::Token,
        sless_api::TokenCreate,
        sless_api::TokenCreated,
        sless_api::ErrorBody,
        sless_api::InvocationPage,
        sless_api::AsyncSettings,
        sless_api::Destination,
        sless_api::DestinationType,
        sless_api::AsyncInvocation,
        sless_api::AsyncInvocationPage,
        sless_api::AsyncStatus,
        sless_api::AsyncAccepted,
        sless_api::Trigger,
        sless_api::TriggerCreate,
        sless_api::TriggerSpec,
        sless_api::TriggerStatus,
        sless_api::TriggerType,
        sless_api::Job,
        sless_api::JobCreate,
        sless_api::JobSpec,
        sless_api::JobStatus,
        sless_api::JobPhase,
        sless_api::InvocationRecord,
        sless_api::LogLine,
        sless_api::FunctionStats,
        sless_api::StatsPoint,
        sless_api::WhoAmI,
        sless_api::FunctionVersion,
        sless_api::Alias,
        sless_api::AliasSpec,
        sless_api::Secret,
        sless_api::SecretCreate,
        sless_api::SecretPatch,
        sless_api::SecretEnv,
        sless_api::SecretFiles,
    )),
    modifiers(&BearerAuth, &GatewayPaths),
)]
pub struct ApiDoc;

/// What a 503 of an operation that takes its namespace's quota turn
/// ([`crate::quota::turn`]) means: the create and patch of functions,
/// jobs and triggers, the create of secrets, the writes of aliases and the
/// delete of a version.
pub(super) fn quota_turn_refused() -> String {
    format!(
        "The namespace's quota turn was not had in time: another change in the namespace held it for over {}s (on this replica, or on PostgreSQL another replica), or its lock among replicas could not be taken. Nothing was changed; retry after the seconds Retry-After gives",
        TURN_WAIT.as_secs()
    )
}

/// What a 503 of the gateway means.
pub(super) fn invoke_unavailable() -> String {
    format!(
        "No ready version yet, no code, the only build failed, or disabled; or a version called by number or alias cannot be started here now, as when the function serves {MAX_BY_NUMBER} versions called by number, each deployed for a call still unanswered after {}s (the error says which). Retry-After, when given, says in how many seconds to retry",
        AWAITED_FOR.as_secs()
    )
}

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The gateway takes any method, with or without a path after the function
/// name; OpenAPI has no "any method", so the one annotated operation
/// (`gateway::invoke`, POST) is repeated for every method on both paths,
/// each with an operation id of its own.
struct GatewayPaths;

impl GatewayPaths {
    const BASE: &'static str = "/fn/{ns}/{name}";
    const REST: &'static str = "/fn/{ns}/{name}/{rest}";
    const METHODS: [(HttpMethod, &'static str); 7] = [
        (HttpMethod::Get, "get"),
        (HttpMethod::Post, "post"),
        (HttpMethod::Put, "put"),
        (HttpMethod::Patch, "patch"),
        (HttpMethod::Delete, "delete"),
        (HttpMethod::Head, "head"),
        (HttpMethod::Options, "options"),
    ];
}

impl Modify for GatewayPaths {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let paths = &mut openapi.paths.paths;
        let Some(invoke) = paths.remove(Self::BASE).and_then(|item| item.post) else {
            return;
        };
        let mut with_rest = invoke.clone();
        with_rest.parameters.get_or_insert_with(Vec::new).push(
            ParameterBuilder::new()
                .name("rest")
                .parameter_in(ParameterIn::Path)
                .required(Required::True)
                .description(Some(
                    "The rest of the path (may hold further `/`), passed to the handler as context.path",
                ))
                .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
                .build(),
        );
        for (path, operation, id) in [(Self::BASE, invoke, "invoke"), (Self::REST, with_rest, "invoke_path")] {
            let mut item = PathItem::default();
            for (method, name) in Self::METHODS {
                let mut operation = operation.clone();
                operation.operation_id = Some(format!("{id}_{name}"));
                item.merge_operations(PathItem::new(method, operation));
            }
            paths.insert(path.to_string(), item);
        }
    }
}
