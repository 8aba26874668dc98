//! The OpenAPI document, generated from the handlers' annotations.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{functions, system, tokens};

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
        super::gateway::invoke,
    ),
    components(schemas(
        sless_api::Function,
        sless_api::FunctionCreate,
        sless_api::FunctionSpec,
        sless_api::FunctionStatus,
        sless_api::Phase,
        sless_api::Runtime,
        sless_api::Token,
        sless_api::TokenCreate,
        sless_api::TokenCreated,
        sless_api::ErrorBody,
        sless_api::InvocationPage,
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
    )),
    modifiers(&BearerAuth),
)]
pub struct ApiDoc;

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
