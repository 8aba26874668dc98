//! What a deploy hands the driver, and the load figures it reports back.

use sless_api::FunctionSpec;

use crate::{Fingerprint, FunctionKey, VersionRef};

/// A version of a function to run. Deploying version 8 does not stop
/// version 7: both serve calls addressed to them until one is retired.
#[derive(Debug, Clone)]
pub struct Deployment {
    pub key: FunctionKey,
    pub version: u64,
    pub artifact: Fingerprint,
    /// The sha256 a fetched copy of the artifact must have (see
    /// [`crate::Built::digest`]); None when it was never shared.
    pub digest: Option<String>,
    pub spec: FunctionSpec,
    /// Load the handler once before this version serves, and refuse the
    /// deploy when it cannot load (nothing changes: versions already
    /// deployed, this one included, keep serving as they were). Off
    /// when serving again what was checked before (a restart).
    pub verify: bool,
    /// The values of the secrets the spec references, decrypted by the
    /// server for this deploy (the driver keeps them in memory only, and
    /// hands them to the instances).
    pub secrets: SecretValues,
}

/// The decrypted secrets a version's instances get: environment variables
/// and files (`/secrets/{secret}/{key}`). `Debug` shows names only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretValues {
    /// `(variable, value)`, set next to the spec's `env`.
    pub env: Vec<(String, String)>,
    pub files: Vec<SecretFile>,
}

/// One file of a mounted secret.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretFile {
    pub secret: String,
    pub key: String,
    pub value: Vec<u8>,
}

impl std::fmt::Debug for SecretValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let env: Vec<&str> = self.env.iter().map(|(name, _)| name.as_str()).collect();
        let files: Vec<String> = self.files.iter().map(|f| format!("{}/{}", f.secret, f.key)).collect();
        f.debug_struct("SecretValues")
            .field("env", &env)
            .field("files", &files)
            .finish()
    }
}

impl Deployment {
    /// The version this deployment runs.
    pub fn version_ref(&self) -> VersionRef {
        VersionRef::new(self.key.clone(), self.version)
    }
}

/// Load figures of one function.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FunctionLoad {
    /// Instances serving (or starting).
    pub instances: usize,
    /// Requests waiting for a free instance.
    pub waiting: usize,
}
