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
    pub spec: FunctionSpec,
    /// Load the handler once before this version serves, and refuse the
    /// deploy when it cannot load (nothing changes: versions already
    /// deployed, this one included, keep serving as they were). Off
    /// when serving again what was checked before (a restart).
    pub verify: bool,
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
