//! The execution backend seam: the [`Driver`] trait that builds code into
//! artifacts, runs versions of functions and invokes them, and the types
//! that cross it. The local driver (`sless-driver-local`, sandboxed
//! processes) is the embedded default; a Kubernetes driver implements the
//! same trait.
//!
//! **Architecture invariant:** nothing here names processes, pods, images,
//! pools or an HTTP framework. The server above the trait cannot tell which
//! driver runs; a driver below it knows nothing of the store or the API.

mod build;
mod deploy;
mod error;
mod invoke;
mod key;

use async_trait::async_trait;
use sless_api::Runtime;

pub use build::{BuildError, BuildJob, Built, Fingerprint};
pub use deploy::{Deployment, FunctionLoad};
pub use error::DriverError;
pub use invoke::{Invocation, InvocationResult, InvokeError, LogChunk, OutputStream, RunId, TriggerKind};
pub use key::FunctionKey;

/// The execution backend. Chosen once at start; nothing above it knows
/// which one runs. Every operation that can fail says so.
#[async_trait]
pub trait Driver: Send + Sync + 'static {
    /// Builds an archive into an artifact (dependencies installed); the
    /// artifact's identity is the returned fingerprint.
    async fn build(&self, job: BuildJob) -> Result<Built, BuildError>;
    /// The fingerprint a build of this code would have with this driver's
    /// runtime shims (a new shim version changes it: rebuild).
    async fn fingerprint(&self, runtime: Runtime, code_hash: &str) -> Result<Fingerprint, DriverError>;
    /// Whether an artifact built earlier is still there to deploy.
    async fn has_artifact(&self, artifact: &Fingerprint) -> Result<bool, DriverError>;
    /// Makes `deployment` the serving version; older instances drain. Also
    /// applies spec changes (scaling, env) to a running version. With
    /// `deployment.verify`, the handler is loaded once first and an error
    /// (the user's load error) leaves the previous version serving.
    async fn deploy(&self, deployment: Deployment) -> Result<(), DriverError>;
    /// Stops taking work (false) or resumes (true); false frees instances.
    async fn set_enabled(&self, key: &FunctionKey, enabled: bool) -> Result<(), DriverError>;
    /// Runs one invocation on the serving version.
    async fn invoke(&self, key: &FunctionKey, invocation: Invocation) -> Result<InvocationResult, InvokeError>;
    /// Runs one invocation in an instance of its own, stopped afterwards
    /// (jobs). Stopping it early is [`Driver::cancel_run`]'s work: a caller
    /// that gives up cancels explicitly and waits for it.
    async fn run_once(
        &self,
        key: &FunctionKey,
        run: &RunId,
        invocation: Invocation,
    ) -> Result<InvocationResult, InvokeError>;
    /// Stops a run started by [`Driver::run_once`] and returns once its
    /// instance is gone; a run that already ended is not an error.
    async fn cancel_run(&self, run: &RunId) -> Result<(), DriverError>;
    /// Instances and waiting requests per deployed function.
    async fn stats(&self) -> Vec<(FunctionKey, FunctionLoad)>;
    /// Stops everything of a deleted function.
    async fn remove(&self, key: &FunctionKey) -> Result<(), DriverError>;
    /// Stops every instance (server shutdown).
    async fn shutdown(&self);
}
