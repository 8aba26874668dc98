//! Which version of a function a call goes to: the routing table above the
//! driver. The driver runs any number of versions of a function; this table
//! says which one is `$latest` (the newest Ready build, what the plain
//! `/fn/{ns}/{name}` URL calls).
//!
//! **Invariant:** the deployer moves `$latest` here after the driver has
//! deployed the new version and before `Ready` is written, so no call that
//! starts after `Ready` resolves to an older version.

use std::collections::HashMap;
use std::sync::RwLock;

use sless_driver::{FunctionKey, VersionRef};

/// The versions calls go to, per function.
#[derive(Default)]
pub struct Routes {
    latest: RwLock<HashMap<FunctionKey, u64>>,
}

impl Routes {
    /// The version the plain URL calls, if the function has a ready one.
    pub fn latest(&self, key: &FunctionKey) -> Option<VersionRef> {
        let version = *self.latest.read().unwrap().get(key)?;
        Some(VersionRef::new(key.clone(), version))
    }

    /// Makes `version` the function's `$latest`; returns the one before.
    pub fn set_latest(&self, key: &FunctionKey, version: u64) -> Option<u64> {
        self.latest.write().unwrap().insert(key.clone(), version)
    }

    /// Forgets a deleted function.
    pub fn forget(&self, key: &FunctionKey) {
        self.latest.write().unwrap().remove(key);
    }
}
