//! The execution backend seam: the [`Driver`] trait that builds code into
//! artifacts, runs versions of functions and invokes them, and the types
//! that cross it. The local driver (`sless-driver-local`, sandboxed
//! processes) is the embedded default; a Kubernetes driver implements the
//! same trait.
//!
//! **Architecture invariant:** nothing here names processes, pods, images
//! or an HTTP framework. The server above the trait cannot tell which
//! driver runs; a driver below it knows nothing of the store or the API.
//! [`pool`] is the instance pool both drivers serve calls through, generic
//! over what an instance is.

mod build;
mod deploy;
mod error;
mod invoke;
mod key;
pub mod pool;
mod stored;

use async_trait::async_trait;
use sless_api::Runtime;

pub use build::{BuildError, BuildJob, Built, Fingerprint};
pub use deploy::{Deployment, FunctionLoad, SecretFile, SecretValues};
pub use error::DriverError;
pub use invoke::{Invocation, InvocationResult, InvokeError, LogChunk, OutputStream, RunId, TriggerKind};
pub use key::{FunctionKey, VersionRef};
pub use stored::{remove_stored_artifact, stored_artifacts};

/// The execution backend. Chosen once at start; nothing above it knows
/// which one runs. Every operation that can fail says so.
///
/// A function can have several versions deployed at once, each addressed by
/// a [`VersionRef`]: [`Driver::deploy`] adds one (or applies new settings to
/// one already running), [`Driver::retire`] stops one, and every invocation
/// names the version it is for. Which version a call should go to (the
/// newest build, an alias, a weighted split) is decided above the driver;
/// a driver never picks a version itself. A Kubernetes driver maps each
/// deployed version to a Deployment of its own; the local driver keeps an
/// instance pool per version.
#[async_trait]
pub trait Driver: Send + Sync + 'static {
    /// Builds an archive into an artifact (dependencies installed); the
    /// artifact's identity is the returned fingerprint. Dropped before it
    /// ends (its function no longer awaits it), a build stops: its
    /// processes (or its Job's pod) end at once and its work directories
    /// go.
    async fn build(&self, job: BuildJob) -> Result<Built, BuildError>;
    /// The fingerprint a build of this code would have with this driver's
    /// runtime shims (a new shim version changes it: rebuild).
    async fn fingerprint(&self, runtime: Runtime, code_hash: &str) -> Result<Fingerprint, DriverError>;
    /// Whether an artifact built earlier is still there to deploy.
    async fn has_artifact(&self, artifact: &Fingerprint) -> Result<bool, DriverError>;
    /// Deletes an artifact no version uses any more; one already gone is
    /// not an error. The caller makes sure no deployed version runs it.
    async fn remove_artifact(&self, artifact: &Fingerprint) -> Result<(), DriverError>;
    /// The artifacts this driver keeps on this machine (built or fetched
    /// here), which a server's start compares with the versions that use
    /// them; none for a driver that keeps its artifacts elsewhere.
    async fn local_artifacts(&self) -> Result<Vec<Fingerprint>, DriverError> {
        Ok(Vec::new())
    }
    /// Removes this machine's copy of an artifact no version uses (one of
    /// [`Driver::local_artifacts`]), leaving what other machines fetch it
    /// from; [`Driver::remove_artifact`] removes that too.
    async fn remove_local_copy(&self, _artifact: &Fingerprint) -> Result<(), DriverError> {
        Ok(())
    }
    /// What `artifact` takes where this driver keeps it ([`Built::bytes`]),
    /// if it is there: how versions recorded before sizes were get theirs.
    async fn artifact_bytes(&self, _artifact: &Fingerprint) -> Result<Option<u64>, DriverError> {
        Ok(None)
    }
    /// The artifacts this driver keeps in a shared object store (where
    /// replicas or pods fetch them), each with when it was last written
    /// there: what the leader compares with the versions that use them.
    /// None for a driver that keeps none there.
    async fn stored_artifacts(&self) -> Result<Vec<(Fingerprint, std::time::SystemTime)>, DriverError> {
        Ok(Vec::new())
    }
    /// Deploys version `deployment.version` of a function next to the
    /// versions already deployed, which keep serving. Deploying a version
    /// that runs already applies the new spec (scaling, env) to it: its
    /// instances are replaced and the old ones drain. With
    /// `deployment.verify`, the handler is loaded once first and an error
    /// (the user's load error) changes nothing. Once this returns, calls
    /// addressed to the version are served by the new spec only.
    async fn deploy(&self, deployment: Deployment) -> Result<(), DriverError>;
    /// Stops one version: calls addressed to it from now on get
    /// [`InvokeError::NotDeployed`]; calls it already holds finish, then its
    /// instances stop (scale to zero and forget the version). Retiring a
    /// version that is not deployed is not an error; the artifact stays.
    async fn retire(&self, version: &VersionRef) -> Result<(), DriverError>;
    /// Stops taking work (false) or resumes (true) for every version of the
    /// function; false frees instances. Also holds for versions deployed later.
    async fn set_enabled(&self, key: &FunctionKey, enabled: bool) -> Result<(), DriverError>;
    /// Runs one invocation on the instances of `target`;
    /// [`InvokeError::NotDeployed`] when that version is not deployed. The
    /// invocation is borrowed, so a caller can send it again elsewhere
    /// (the version it resolved was retired meanwhile, a retry).
    async fn invoke(&self, target: &VersionRef, invocation: &Invocation) -> Result<InvocationResult, InvokeError>;
    /// Runs one invocation of `target` in an instance of its own, stopped
    /// afterwards (jobs). Stopping it early is [`Driver::cancel_run`]'s
    /// work: a caller that gives up cancels explicitly and waits for it.
    async fn run_once(
        &self,
        target: &VersionRef,
        run: &RunId,
        invocation: &Invocation,
    ) -> Result<InvocationResult, InvokeError>;
    /// Stops a run started by [`Driver::run_once`] and returns once its
    /// instance is gone; a run that already ended is not an error.
    async fn cancel_run(&self, run: &RunId) -> Result<(), DriverError>;
    /// Instances and waiting requests per deployed version.
    async fn stats(&self) -> Vec<(VersionRef, FunctionLoad)>;
    /// Stops everything of a deleted function, every version: calls from
    /// now on get [`InvokeError::NotDeployed`], calls under way finish (as
    /// with [`Driver::retire`]), then the instances stop.
    async fn remove(&self, key: &FunctionKey) -> Result<(), DriverError>;
    /// Stops every instance (server shutdown).
    async fn shutdown(&self);
}
