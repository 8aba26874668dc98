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
    let kept = Kept {
        versions,
        artifact_bytes: artifacts.values().sum(),
        archive_bytes: archives.values().sum(),
    };
    let total = kept.artifact_bytes + kept.archive_bytes;
    Ok((total > quota).then(|| refusal(namespace, &kept, new.artifact_bytes + new.archive_bytes, quota)))
}

/// What a namespace would keep with a new version.
struct Kept {
    versions: usize,
    artifact_bytes: u64,
    archive_bytes: u64,
}

/// Why a version of `new_bytes` may not be kept: `kept` (with it) is over
/// `quota`.
fn refusal(namespace: &str, kept: &Kept, new_bytes: u64, quota: u64) -> String {
    let total = kept.artifact_bytes + kept.archive_bytes;
    // Just over the quota reads as the quota in MiB: then the bytes say it.
    let (total_text, quota_text) = match (mib(total), mib(quota)) {
        (over, at) if over == at => (format!("{over} ({total} bytes)"), format!("{at} ({quota} bytes)")),
        texts => texts,
    };
    format!(
        "namespace {namespace} would keep {total_text} of built code with this version ({}), over its quota of \
         {quota_text} (the server's SLESS_NS_MAX_STORAGE_MB): {} versions, {} of artifacts and {} of uploaded \
         archives. Delete versions (`sless versions NAME --rm N`) or functions it no longer needs, or aliases \
         that hold old versions, and deploy again",
        mib(new_bytes),
        kept.versions,
        mib(kept.artifact_bytes),
        mib(kept.archive_bytes),
    )
}

/// `bytes` in MiB, for a message.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_quota_and_bytes_where_mib_would_read_the_same() {
        let quota = 200 << 20;
        let kept = |total: u64| Kept {
            versions: 4,
            artifact_bytes: total - 1000,
            archive_bytes: 1000,
        };
        let just_over = refusal("t", &kept(quota + 2000), 50 << 20, quota);
        assert!(
            just_over.starts_with(
                "namespace t would keep 200.0 MiB (209717200 bytes) of built code with this version (50.0 MiB), \
                 over its quota of 200.0 MiB (209715200 bytes) (the server's SLESS_NS_MAX_STORAGE_MB): 4 versions"
            ),
            "{just_over}"
        );
        let well_over = refusal("t", &kept(quota * 2), 50 << 20, quota);
        assert!(
            well_over.contains("would keep 400.0 MiB of built code") && well_over.contains("quota of 200.0 MiB (the"),
            "{well_over}"
        );
    }
}
