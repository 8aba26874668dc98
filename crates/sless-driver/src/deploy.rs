//! What a deploy hands the driver, and the load figures it reports back.

use sless_api::FunctionSpec;

use crate::{Fingerprint, FunctionKey};

/// A version of a function to run.
#[derive(Debug, Clone)]
pub struct Deployment {
    pub key: FunctionKey,
    pub version: u64,
    pub artifact: Fingerprint,
    pub spec: FunctionSpec,
    /// Load the handler once before this version serves, and refuse the
    /// deploy (the previous version keeps serving) when it cannot load. Off
    /// when serving again what was checked before (a restart).
    pub verify: bool,
}

/// Load figures of one function.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FunctionLoad {
    /// Instances serving (or starting).
    pub instances: usize,
    /// Requests waiting for a free instance.
    pub waiting: usize,
}
