//! The execution backend: builds code into artifacts, runs versions of
//! functions and invokes them. The local driver (sandboxed processes) is the
//! embedded default; a Kubernetes driver will implement the same trait.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::Value;
use sless_api::{FunctionSpec, Runtime};

/// Names a function across namespaces.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FunctionKey {
    pub namespace: String,
    pub name: String,
}

impl FunctionKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        FunctionKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for FunctionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One build: an uploaded archive to turn into a runnable artifact.
#[derive(Debug, Clone)]
pub struct BuildJob {
    pub key: FunctionKey,
    pub runtime: Runtime,
    pub code_hash: String,
    pub archive: Bytes,
    pub timeout: Duration,
}

/// A finished build.
#[derive(Debug, Clone)]
pub struct Built {
    /// Driver-specific id of the artifact (a directory, an image).
    pub artifact: String,
    /// The end of the build log.
    pub log_tail: String,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("build failed: {log_tail}")]
    Failed { log_tail: String },
    #[error("build timed out after {}s: {log_tail}", after.as_secs())]
    TimedOut { after: Duration, log_tail: String },
    #[error("build could not run: {0}")]
    Internal(String),
}

/// Load figures of one function.
#[derive(Debug, Clone, Copy, Default)]
pub struct PoolStats {
    pub instances: usize,
    pub waiting: usize,
}

/// A version of a function to run.
#[derive(Debug, Clone)]
pub struct Deployment {
    pub key: FunctionKey,
    pub version: u64,
    pub artifact: String,
    pub spec: FunctionSpec,
}

/// What fired an invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerKind {
    Http,
    Cron,
    Amqp,
    Job,
}

impl TriggerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TriggerKind::Http => "http",
            TriggerKind::Cron => "cron",
            TriggerKind::Amqp => "amqp",
            TriggerKind::Job => "job",
        }
    }
}

/// One call of a handler.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub kind: TriggerKind,
    pub request_id: String,
    pub method: String,
    /// The path after `/fn/{ns}/{name}`: empty or starting with `/`.
    pub path: String,
    pub query: String,
    /// The request's headers as received (names lowercase); empty for
    /// non-HTTP kinds.
    pub headers: axum::http::HeaderMap,
    pub body: Bytes,
    /// The event for non-HTTP kinds.
    pub event: Option<Value>,
}

/// A line the handler printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogChunk {
    pub stream: u8,
    pub text: String,
}

/// The handler's answer.
#[derive(Debug, Clone)]
pub struct InvocationResult {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    pub logs: Vec<LogChunk>,
    /// The handler printed more than the per-invocation cap.
    pub logs_truncated: bool,
    /// Whether this call waited for a new instance.
    pub cold_start: bool,
    pub version: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    #[error("function {0} has no ready version yet")]
    NotReady(FunctionKey),
    #[error("function {0} is disabled")]
    Disabled(FunctionKey),
    #[error("function {0} is at capacity: too many requests waiting")]
    QueueFull(FunctionKey),
    #[error("function {key} did not answer within {}s", after.as_secs())]
    Timeout { key: FunctionKey, after: Duration },
    #[error("function {key} crashed while handling the request: {reason}")]
    Crashed { key: FunctionKey, reason: String },
    #[error("function {key} could not start: {reason}")]
    StartFailed { key: FunctionKey, reason: String },
}

/// The execution backend. Chosen once at start; nothing above it knows
/// which one runs.
#[async_trait]
pub trait Driver: Send + Sync + 'static {
    /// Builds an archive into an artifact (dependencies installed).
    async fn build(&self, job: BuildJob) -> Result<Built, BuildError>;
    /// Whether an artifact built earlier is still there to deploy.
    async fn has_artifact(&self, artifact: &str) -> bool;
    /// The artifact id a build of this code would produce (includes the shim version).
    fn artifact_id(&self, runtime: Runtime, code_hash: &str) -> String;
    /// Makes `deployment` the serving version; older instances drain. Also
    /// applies spec changes (scaling, env) to a running version.
    async fn deploy(&self, deployment: Deployment);
    /// Stops taking work (false) or resumes (true); false frees instances.
    async fn set_enabled(&self, key: &FunctionKey, enabled: bool);
    /// Runs one invocation on the serving version.
    async fn invoke(&self, key: &FunctionKey, invocation: Invocation) -> Result<InvocationResult, InvokeError>;
    /// Runs one invocation in an instance of its own, stopped afterwards
    /// (jobs). Dropping the future stops the instance.
    async fn run_once(&self, key: &FunctionKey, invocation: Invocation) -> Result<InvocationResult, InvokeError>;
    /// Instances and waiting requests per deployed function.
    fn stats(&self) -> Vec<(FunctionKey, PoolStats)>;
    /// Stops everything of a deleted function.
    async fn remove(&self, key: &FunctionKey);
    /// Stops every instance (server shutdown).
    async fn shutdown(&self);
}
