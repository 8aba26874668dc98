//! A namespace's storage quota (`SLESS_NS_MAX_STORAGE_MB`): what the
//! versions its functions keep take, their artifacts (installed
//! dependencies included) and the archives they were built from. Each
//! piece is bounded on its own (`SLESS_MAX_BUILD_MB`, the upload limit,
//! `SLESS_KEEP_VERSIONS`), but a tenant holding old versions with aliases
//! across many functions could still claim terabytes, one build at a time.
//!
//! A build is checked once it is built, before its version goes live:
//! with the new version, after the prune it causes, the namespace must fit.
//! Artifacts count once per namespace however many of its functions share
//! them (they are one directory on disk), archives once per function and
//! code.

use std::collections::{HashMap, HashSet};

use sless_driver::{Fingerprint, FunctionKey};

use crate::error::Result;
use crate::store::Store;

/// A build about to become a version.
pub(super) struct NewVersion<'a> {
    pub key: &'a FunctionKey,
    pub code_hash: &'a str,
    pub artifact: &'a Fingerprint,
    pub artifact_bytes: u64,
    pub archive_bytes: u64,
}

/// Why `new` may not become a version of its namespace, whose quota is
/// `quota` bytes and whose functions keep their newest `keep` versions
/// (and those their aliases name); None when it fits.
pub(super) async fn over_quota(
    store: &dyn Store,
    new: &NewVersion<'_>,
    keep: usize,
    quota: u64,
) -> Result<Option<String>> {
    let namespace = &new.key.namespace;
    let sizes = store.version_sizes(namespace).await?;
    let pinned: HashSet<(String, u64)> = store
        .namespace_aliases(namespace)
        .await?
        .into_iter()
        .flat_map(|a| a.spec.versions().into_iter().map(move |v| (a.function.clone(), v)))
        .collect();
    let mut artifacts = HashMap::from([(new.artifact.as_str(), new.artifact_bytes)]);
    let mut archives = HashMap::from([((new.key.name.as_str(), new.code_hash), new.archive_bytes)]);
    let mut versions = 1;
    // The function's own older versions rank after the new one: those the
    // prune after it removes do not count.
    let mut older = 0;
    for size in &sizes {
        if size.function == new.key.name {
            older += 1;
            if older >= keep && !pinned.contains(&(size.function.clone(), size.version)) {
                continue;
            }
        }
        versions += 1;
        artifacts.entry(size.artifact.as_str()).or_insert(size.artifact_bytes);
        archives
            .entry((size.function.as_str(), size.code_hash.as_str()))
            .or_insert(size.archive_bytes);
    }
    let artifact_bytes: u64 = artifacts.values().sum();
    let archive_bytes: u64 = archives.values().sum();
    let total = artifact_bytes + archive_bytes;
    if total <= quota {
        return Ok(None);
    }
    Ok(Some(format!(
        "namespace {namespace} would keep {} of built code with this version ({}), over its quota of {} \
         (the server's SLESS_NS_MAX_STORAGE_MB): {versions} versions, {} of artifacts and {} of uploaded \
         archives. Delete versions (`sless versions NAME --rm N`) or functions it no longer needs, or aliases \
         that hold old versions, and deploy again",
        mib(total),
        mib(new.artifact_bytes + new.archive_bytes),
        mib(quota),
        mib(artifact_bytes),
        mib(archive_bytes),
    )))
}

/// `bytes` in MiB, for a message.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}
