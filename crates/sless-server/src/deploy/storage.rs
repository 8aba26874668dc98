//! A namespace's storage quota (`SLESS_NS_MAX_STORAGE_MB`): what the
//! versions its functions keep take, their artifacts (installed
//! dependencies included) and the archives they were built from. Each
//! piece is bounded on its own (`SLESS_MAX_BUILD_MB`, the upload limit,
//! `SLESS_KEEP_VERSIONS`), but a tenant holding old versions with aliases
//! across many functions could still claim terabytes, one build at a time.
//!
//! A build is checked once it is built, before its version goes live:
//! with the new version, after the prune it causes (and any prune of
//! another function not run yet), the namespace must fit.
//! Artifacts count once per namespace however many of its functions share
//! them (they are one directory on disk), archives once per function and
//! code.
//!
//! **Invariant:** a build that passed the check counts in every later
//! check of its namespace, as reserved ([`Reservations`]) from its check
//! until its version is recorded and as recorded after, never as both or
//! neither: two builds of a namespace at once cannot both pass a quota
//! with room for one. (Builds run on the leader; the reservations are its.)

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use sless_driver::{Fingerprint, FunctionKey};
use tokio::sync::OwnedMutexGuard;

use crate::error::Result;
use crate::store::Store;

/// A build about to become a version.
#[derive(Debug, Clone)]
pub(super) struct NewVersion {
    pub key: FunctionKey,
    pub code_hash: String,
    pub artifact: Fingerprint,
    pub artifact_bytes: u64,
    pub archive_bytes: u64,
}

/// The builds of each namespace that passed the storage check and whose
/// versions are not recorded yet (being deployed, rolled out).
#[derive(Default)]
pub(super) struct Reservations {
    namespaces: Mutex<HashMap<String, Arc<Ledger>>>,
    next_id: AtomicU64,
}

/// One namespace's reservations.
#[derive(Default)]
struct Ledger {
    /// Held by a check from its read of the store to its reservation, and
    /// while a version is recorded and its reservation let go.
    turn: Arc<tokio::sync::Mutex<()>>,
    pending: Mutex<Vec<(u64, NewVersion)>>,
}

/// Room held for a version until it is recorded, or until dropped (the
/// build made no version).
pub(super) struct Reservation {
    ledger: Arc<Ledger>,
    id: u64,
}

/// A reservation being turned into a recorded version: while it lives,
/// no check of the namespace runs; dropping it lets the reservation go,
/// then the turn.
pub(super) struct Recording {
    _reservation: Reservation,
    _turn: OwnedMutexGuard<()>,
}

impl Reservations {
    /// Checks `new` against its namespace's quota of `quota` bytes, counting
    /// the versions reserved there before it, its functions keeping their
    /// newest `keep` versions (and those their aliases name); reserves room
    /// for it when it fits, or says why it does not.
    pub async fn reserve(
        &self,
        store: &dyn Store,
        new: NewVersion,
        keep: usize,
        quota: u64,
    ) -> Result<std::result::Result<Reservation, String>> {
        let ledger = self
            .namespaces
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(new.key.namespace.clone())
            .or_default()
            .clone();
        let _turn = ledger.turn.clone().lock_owned().await;
        let reserved: Vec<NewVersion> = ledger.pending().iter().map(|(_, v)| v.clone()).collect();
        if let Some(over) = over_quota(store, &new, &reserved, keep, quota).await? {
            return Ok(Err(over));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        ledger.pending().push((id, new));
        Ok(Ok(Reservation { ledger, id }))
    }
}

impl Ledger {
    fn pending(&self) -> std::sync::MutexGuard<'_, Vec<(u64, NewVersion)>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Reservation {
    /// Waits for the namespace's turn to record the version.
    pub async fn recording(self) -> Recording {
        let turn = self.ledger.turn.clone().lock_owned().await;
        Recording {
            _reservation: self,
            _turn: turn,
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.ledger.pending().retain(|(id, _)| *id != self.id);
    }
}

/// Why `new` may not become a version of its namespace, with `reserved`
/// (versions of the namespace about to be recorded) kept too; None when
/// it fits. See [`Reservations::reserve`].
async fn over_quota(
    store: &dyn Store,
    new: &NewVersion,
    reserved: &[NewVersion],
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
    let (mut artifacts, mut archives) = (HashMap::new(), HashMap::new());
    // How many versions of each function rank before its recorded ones:
    // the new ones. Every function keeps its newest `keep` versions and
    // those its aliases name: the others go in the prune its new version
    // causes, or in the one its last build started, which may not have
    // run yet (it runs once the build's status is written).
    let mut ranked: HashMap<&str, usize> = HashMap::new();
    for v in reserved.iter().chain([new]) {
        *ranked.entry(v.key.name.as_str()).or_default() += 1;
        artifacts.entry(v.artifact.as_str()).or_insert(v.artifact_bytes);
        archives
            .entry((v.key.name.as_str(), v.code_hash.as_str()))
            .or_insert(v.archive_bytes);
    }
    let mut versions = reserved.len() + 1;
    for size in &sizes {
        let rank = ranked.entry(size.function.as_str()).or_default();
        *rank += 1;
        if *rank > keep && !pinned.contains(&(size.function.clone(), size.version)) {
            continue;
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
