//! Builds: an uploaded archive in, an artifact identified by its
//! fingerprint out.

use std::time::Duration;

use bytes::Bytes;
use sless_api::Runtime;

use crate::FunctionKey;

/// One build: an uploaded archive to turn into a runnable artifact.
#[derive(Debug, Clone)]
pub struct BuildJob {
    pub key: FunctionKey,
    pub runtime: Runtime,
    /// sha256 of the uploaded zip.
    pub code_hash: String,
    pub archive: Bytes,
    pub timeout: Duration,
}

/// The identity of a built artifact: a digest of the runtime, the runtime
/// shim's version and the code hash. Equal fingerprints are the same
/// artifact, so a rebuild of the same code with the same shims is free, and
/// a new shim version means a new fingerprint (and a rebuild).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// The fingerprint of `code_hash` built for `runtime` with shims of `shim_version`.
    pub fn of(runtime: Runtime, shim_version: &str, code_hash: &str) -> Fingerprint {
        use sha2::{Digest, Sha256};
        let digest = Sha256::new()
            .chain_update(runtime.as_str())
            .chain_update(code_hash)
            .chain_update(shim_version)
            .finalize();
        Fingerprint(hex::encode(&digest[..16]))
    }

    /// A fingerprint read back from the store.
    pub fn from_stored(text: impl Into<String>) -> Fingerprint {
        Fingerprint(text.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A finished build.
#[derive(Debug, Clone)]
pub struct Built {
    pub artifact: Fingerprint,
    /// sha256 of the artifact's tarball in the shared object store, where
    /// any replica (or pod) fetches and checks it; None when the artifact
    /// stays on the machine that built it (one replica).
    pub digest: Option<String>,
    /// The end of the build log.
    pub log_tail: String,
    /// What the artifact takes where it is kept: its files on the disk
    /// that built it (local), its tarball in the object store (Kubernetes).
    /// A namespace's versions are held to a sum of these.
    pub bytes: u64,
}

/// Why a build produced no artifact.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("build failed: {log_tail}")]
    Failed { log_tail: String },
    #[error("build timed out after {}s: {log_tail}", after.as_secs())]
    TimedOut { after: Duration, log_tail: String },
    #[error("build could not run: {0}")]
    Internal(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_changes_with_each_part() {
        let base = Fingerprint::of(Runtime::Python311, "shim1", "abc");
        assert_eq!(base, Fingerprint::of(Runtime::Python311, "shim1", "abc"));
        assert_ne!(base, Fingerprint::of(Runtime::Nodejs20, "shim1", "abc"));
        assert_ne!(base, Fingerprint::of(Runtime::Python311, "shim2", "abc"));
        assert_ne!(base, Fingerprint::of(Runtime::Python311, "shim1", "abd"));
        assert_eq!(base.as_str().len(), 32);
    }
}
