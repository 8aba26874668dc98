//! What a driver operation other than a build or an invocation can fail with.

/// A failed deploy, enable, remove or lookup.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The handler could not be loaded (import error, missing entrypoint):
    /// the user's own error, with their traceback.
    #[error("the handler failed to load: {0}")]
    LoadFailed(String),
    /// The backend could not do it now (an API server away, no capacity).
    #[error("{0}")]
    Unavailable(String),
    /// Anything else: a bug or a broken host.
    #[error("{0}")]
    Internal(String),
}
