//! Wire types of the sless REST API: what the server sends and accepts, shared
//! by the server, the CLI and the Terraform provider. No I/O lives here.

mod async_invocation;
mod error;
mod function;
mod invocation;
mod job;
mod names;
mod secret;
mod stats;
pub mod text;
mod token;
mod trigger;
mod version;

pub use async_invocation::{
    check_queue_name, AsyncAccepted, AsyncInvocation, AsyncInvocationPage, AsyncSettings, AsyncStatus, Destination,
    DestinationType, DEFAULT_MAX_EVENT_AGE_SEC, DEFAULT_RETRY_LIMIT, MAX_BROKER_URL_CHARS,
};
pub use error::{ErrorBody, NO_ROUTE};
pub use function::{
    default_memory_mb, Function, FunctionCreate, FunctionSpec, FunctionStatus, Network, Phase, Rollout, Runtime,
    SpecLimits,
};
pub use invocation::{is_record_id, InvocationPage, InvocationRecord, LogLine, LOGS_NEXT_BEFORE};
pub use job::{Job, JobCreate, JobPhase, JobSpec, JobStatus, MAX_JOB_EVENT_BYTES, MAX_JOB_RESULT_BYTES};
pub use names::{validate_name, NameError};
pub use secret::{
    validate_secret_key, validate_secret_value, Secret, SecretCreate, SecretEnv, SecretFiles, SecretPatch,
    MAX_SECRETS_PER_NAMESPACE, MAX_SECRET_KEYS, MAX_SECRET_KEY_CHARS, MAX_SECRET_REFS, MAX_SECRET_VALUE_CHARS,
    SECRET_KEY_PATTERN,
};
pub use stats::{FunctionStats, StatsPoint};
pub use token::{Token, TokenCreate, TokenCreated, WhoAmI, MAX_TOKEN_NAMESPACES, MAX_TOKEN_NAME_CHARS};
pub use trigger::{Trigger, TriggerCreate, TriggerSpec, TriggerStatus, TriggerType, MAX_CRON_EVENT_BYTES};
pub use version::{
    validate_alias_name, validate_new_alias_name, Alias, AliasSpec, FunctionVersion, RESERVED_ALIAS_NAMES,
};

/// A list response: `{"items": [...]}`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct List<T> {
    pub items: Vec<T>,
}
