//! What a generic pod is told when the driver gives it a function: the
//! body of `POST /specialize` on its readiness port, sent with the pool's
//! token as `Authorization: Bearer`. It carries what a function pod gets
//! from its template, except the object store's credentials (a presigned
//! GET of the one artifact instead) and the function's secrets (functions
//! with secrets never take a generic pod).

use std::collections::BTreeMap;

/// The path generic pods take specializations on (readiness port).
pub const SPECIALIZE_PATH: &str = "/specialize";
/// What `GET /ready` answers while a pod is generic (`ready` once loaded).
pub const GENERIC_READY: &str = "generic";
/// Largest specialization body a generic pod reads.
pub const MAX_SPECIALIZATION_BYTES: usize = 64 * 1024;

/// One function version for a generic pod to load and serve from then on.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Specialization {
    pub namespace: String,
    pub function: String,
    pub version: u64,
    /// Must be the pod's own runtime.
    pub runtime: String,
    pub entrypoint: String,
    /// A presigned GET of the artifact tarball, valid for a minute.
    pub artifact_url: String,
    /// The sha256 the tarball must have.
    pub digest: String,
    pub concurrency: u32,
    pub timeout_sec: u32,
    /// Must fit the pod's memory (the pool's largest).
    pub memory_mb: u32,
    pub env: BTreeMap<String, String>,
}

/// The URL is a credential while it lasts: never printed.
impl std::fmt::Debug for Specialization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Specialization")
            .field("namespace", &self.namespace)
            .field("function", &self.function)
            .field("version", &self.version)
            .field("runtime", &self.runtime)
            .finish_non_exhaustive()
    }
}
