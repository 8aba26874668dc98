//! Versions besides `$latest` on this replica: a version called by number
//! or through an alias is deployed here on its first call (from its stored
//! record: artifact and spec), kept while an alias points at it or calls
//! come, and retired once neither holds ([`IDLE`]). After each build the
//! leader keeps the newest `SLESS_KEEP_VERSIONS` versions (and those an
//! alias points at) and deletes the records, artifacts and archives of the
//! others.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use object_store::{ObjectStore, ObjectStoreExt};
use sless_api::FunctionSpec;
use sless_driver::{Deployment, Driver, DriverError, Fingerprint, FunctionKey, VersionRef};

use crate::cluster::Leadership;
use crate::error::{Error, Result};
use crate::routes::{Routes, Split};
use crate::store::{Store, VersionRecord};

/// A version no alias points at is retired here after this long without a call.
pub const IDLE: Duration = Duration::from_secs(300);
/// How often idle versions are looked for.
pub const SWEEP_PERIOD: Duration = Duration::from_secs(30);

/// Versions of one function called by number (not `$latest`, no alias's)
/// deployed here at once.
pub const MAX_BY_NUMBER: usize = 2;
/// How long a version deployed for a call is kept for it at most (a call
/// that gave up on the way never comes), and a deploy waits for room.
pub const AWAITED_FOR: Duration = Duration::from_secs(5);

/// The versions deployed here besides `$latest`.
pub struct Versions {
    store: Arc<dyn Store>,
    blobs: Arc<dyn ObjectStore>,
    driver: Arc<dyn Driver>,
    routes: Arc<Routes>,
    /// Whether this replica leads: only the leader removes artifacts'
    /// tarballs from the object store ([`Versions::remove_artifact`]).
    leadership: Arc<Leadership>,
    /// The secrets a version's spec references, opened for its deploy.
    secrets: Arc<crate::secrets::Secrets>,
    /// How many versions of a function keep their artifacts.
    keep: usize,
    /// Deployed here besides `$latest`, with the time of the last call.
    extra: Mutex<HashMap<VersionRef, Instant>>,
    /// Versions deployed for a call that has not been answered yet, with
    /// the time of the deploy: not retired to make room (for
    /// [`AWAITED_FOR`] at most), or calls of several versions at once would
    /// each retire the version deployed for the one before, and all fail.
    awaited: Mutex<HashMap<VersionRef, Instant>>,
    /// Wakes deploys waiting for room when an awaited call is answered.
    answered: tokio::sync::Notify,
    /// On-demand deploys, one at a time per function (a burst of calls
    /// deploys once; one function's deploy holds up no other's).
    deploying: Mutex<HashMap<FunctionKey, std::sync::Weak<tokio::sync::Mutex<()>>>>,
}

/// The refusal of a version that cannot be started here: the caller reads
/// that, the server's log why (a driver's error names paths and parts of
/// the server).
fn cannot_start(target: &VersionRef, why: impl std::fmt::Display) -> Error {
    tracing::warn!(version = %target, error = %why, "cannot start a version");
    Error::Unavailable {
        message: format!(
            "version {} of function {} cannot be started here",
            target.version, target.key
        ),
        retry_after: Some(2),
    }
}

impl Versions {
    pub fn new(
        store: Arc<dyn Store>,
        blobs: Arc<dyn ObjectStore>,
        driver: Arc<dyn Driver>,
        routes: Arc<Routes>,
        leadership: Arc<Leadership>,
        secrets: Arc<crate::secrets::Secrets>,
        keep: usize,
    ) -> Arc<Versions> {
        Arc::new(Versions {
            store,
            blobs,
            driver,
            routes,
            leadership,
            secrets,
            keep: keep.max(1),
            extra: Default::default(),
            awaited: Default::default(),
            answered: tokio::sync::Notify::new(),
            deploying: Default::default(),
        })
    }

    /// The routing table this replica calls by.
    pub fn routes(&self) -> &Arc<Routes> {
        &self.routes
    }

    /// The secrets versions are deployed with.
    pub fn secrets(&self) -> &Arc<crate::secrets::Secrets> {
        &self.secrets
    }

    /// Follows the store (a replica's pass: at start, then whenever it
    /// changed): routes every alias as the store holds them and retires
    /// the versions deployed here that it no longer keeps.
    pub async fn converge(&self) -> Result<()> {
        self.route_aliases().await?;
        self.retire_removed().await
    }

    /// Routes every alias as the store holds them.
    async fn route_aliases(&self) -> Result<()> {
        let mut all: HashMap<FunctionKey, HashMap<String, Split>> = HashMap::new();
        for alias in self.store.all_aliases().await? {
            let Some(split) = Split::of(&alias.spec) else { continue };
            all.entry(FunctionKey::new(alias.namespace, alias.function))
                .or_default()
                .insert(alias.name, split);
        }
        self.routes.replace_aliases(all);
        Ok(())
    }

    /// Retires the versions deployed here besides `$latest` whose records
    /// are gone: deleted or pruned through another replica. A call by
    /// number reads nothing from the store while its version serves here,
    /// so such a version answered for as long as calls kept it from
    /// idling ([`IDLE`]); deletes bump the change counter the replicas
    /// follow, so this runs within a reconcile period of one.
    async fn retire_removed(&self) -> Result<()> {
        let deployed: Vec<VersionRef> = self.extra.lock().unwrap().keys().cloned().collect();
        for version in deployed {
            let key = &version.key;
            if self.routes.latest(key).as_ref() == Some(&version) {
                continue;
            }
            if self
                .store
                .version(&key.namespace, &key.name, version.version)
                .await?
                .is_none()
            {
                tracing::info!(%version, "retiring a version the store no longer keeps");
                self.retire(&version).await;
            }
        }
        Ok(())
    }

    /// Notes a call to `target` (not `$latest`): it keeps serving a while.
    pub fn used(&self, target: &VersionRef) {
        if let Some(at) = self.extra.lock().unwrap().get_mut(target) {
            *at = Instant::now();
        }
    }

    /// Notes that a call to `target` (not `$latest`) was answered, or
    /// failed: a version deployed for it may now make room for another.
    pub fn answered(&self, target: &VersionRef) {
        if self.awaited.lock().unwrap().remove(target).is_some() {
            self.answered.notify_waiters();
        }
    }

    /// Deploys `target` here from its stored record, unless it serves
    /// already; false when no such version is kept. An
    /// [`Error::Unavailable`] says why in words for the caller of `/fn`
    /// (their own function's name and this server's limits, no detail of
    /// the server's: that goes to its log).
    pub async fn ensure(&self, target: &VersionRef) -> Result<bool> {
        let key = &target.key;
        // Read before taking the lock (a deploy holds it): anyone may call
        // `/fn/{ns}/{name}@N` with any number.
        let record = self.store.version(&key.namespace, &key.name, target.version).await?;
        let lock = self.deploy_lock(key);
        let _one = lock.lock().await;
        let deployed = self.driver.stats().await.into_iter().any(|(v, _)| &v == target);
        let Some(record) = record else {
            // Deleted, though deployed here (by a call that read its
            // record first): it serves no more calls.
            if deployed {
                self.retire(target).await;
            }
            return Ok(false);
        };
        if deployed {
            self.extra
                .lock()
                .unwrap()
                .entry(target.clone())
                .or_insert_with(Instant::now);
            return Ok(true);
        }
        self.make_room_by_number(key).await?;
        let spec: FunctionSpec = serde_json::from_value(record.spec).map_err(Error::internal)?;
        let secrets = self
            .secrets
            .resolve(&key.namespace, &spec)
            .await
            .map_err(|e| cannot_start(target, e))?;
        self.driver
            .deploy(Deployment {
                secrets,
                key: key.clone(),
                version: target.version,
                artifact: Fingerprint::from_stored(record.artifact),
                digest: record.artifact_digest,
                spec,
                // Checked when it was built.
                verify: false,
            })
            .await
            .map_err(|e| cannot_start(target, e))?;
        tracing::info!(function = %key, version = target.version, "serving a version called by number or alias");
        self.extra.lock().unwrap().insert(target.clone(), Instant::now());
        self.awaited.lock().unwrap().insert(target.clone(), Instant::now());
        Ok(true)
    }

    /// Retires the version of `key` called by number least lately when it
    /// has [`MAX_BY_NUMBER`] such versions deployed here: anyone may call any
    /// kept version by number, and each serves up to its `max_instances`
    /// while the namespace's quotas count the function once. `$latest` and
    /// the versions an alias points at do not count; a retired version
    /// drains its calls and deploys again when called. A version deployed
    /// for a call not answered yet is not retired: while every one is, the
    /// deploy waits for an answer or for the first such hold to lapse
    /// ([`AWAITED_FOR`] after its deploy, so within as long as that), and
    /// the call is refused only if neither comes by then.
    async fn make_room_by_number(&self, key: &FunctionKey) -> Result<()> {
        let (latest, pinned) = (self.routes.latest(key), self.routes.pinned(key));
        let deadline = tokio::time::Instant::now() + AWAITED_FOR;
        loop {
            let answered = self.answered.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            // The version to retire, or when the first hold lapses.
            let (oldest, lapse) = {
                let extra = self.extra.lock().unwrap();
                let by_number: Vec<(&VersionRef, &Instant)> = extra
                    .iter()
                    .filter(|(v, _)| &v.key == key && latest.as_ref() != Some(*v) && !pinned.contains(&v.version))
                    .collect();
                if by_number.len() < MAX_BY_NUMBER {
                    return Ok(());
                }
                let awaited = self.awaited.lock().unwrap();
                let held_until = |v: &VersionRef| {
                    awaited
                        .get(v)
                        .map(|at| *at + AWAITED_FOR)
                        .filter(|until| *until > Instant::now())
                };
                let oldest = by_number
                    .iter()
                    .filter(|(v, _)| held_until(v).is_none())
                    .min_by_key(|(_, at)| **at)
                    .map(|(v, _)| (*v).clone());
                let lapse = by_number.iter().filter_map(|(v, _)| held_until(v)).min();
                (oldest, lapse)
            };
            if let Some(oldest) = oldest {
                tracing::info!(version = %oldest, "retiring the version called by number least lately, to serve another");
                self.retire(&oldest).await;
                return Ok(());
            }
            let wake = lapse.map_or(deadline, |at| deadline.min(at.into()));
            if tokio::time::timeout_at(wake, answered).await.is_err() && tokio::time::Instant::now() >= deadline {
                return Err(Error::Unavailable {
                    message: format!(
                        "function {key} serves {MAX_BY_NUMBER} versions called by number, each deployed for a call not answered yet; retry shortly"
                    ),
                    retry_after: Some(1),
                });
            }
        }
    }

    /// The lock of `key`'s on-demand deploys.
    fn deploy_lock(&self, key: &FunctionKey) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.deploying.lock().unwrap();
        if let Some(lock) = locks.get(key).and_then(std::sync::Weak::upgrade) {
            return lock;
        }
        locks.retain(|_, lock| lock.strong_count() > 0);
        let lock = Arc::default();
        locks.insert(key.clone(), Arc::downgrade(&lock));
        lock
    }

    /// `$latest` moved on from `old`: it keeps serving while an alias
    /// points at it (until idle), else it is retired at once.
    pub async fn demoted(&self, old: VersionRef) {
        if self.routes.pinned(&old.key).contains(&old.version) {
            self.extra.lock().unwrap().insert(old, Instant::now());
            return;
        }
        self.retire(&old).await;
    }

    async fn retire(&self, version: &VersionRef) {
        self.extra.lock().unwrap().remove(version);
        self.awaited.lock().unwrap().remove(version);
        if let Err(e) = self.driver.retire(version).await {
            tracing::warn!(%version, error = %e, "retiring a version failed");
        }
    }

    /// Forgets a deleted function's versions (the driver removed them).
    /// Retires the versions of `key` deployed here besides `$latest` (a
    /// secret they use changed): the next call deploys them again, with
    /// the secret's new values.
    pub async fn restart(&self, key: &FunctionKey) {
        let versions: Vec<VersionRef> = self
            .extra
            .lock()
            .unwrap()
            .keys()
            .filter(|v| &v.key == key)
            .cloned()
            .collect();
        for version in versions {
            self.retire(&version).await;
        }
    }

    pub fn forget(&self, key: &FunctionKey) {
        self.extra.lock().unwrap().retain(|v, _| &v.key != key);
        self.awaited.lock().unwrap().retain(|v, _| &v.key != key);
    }

    /// Retires the versions deployed here that no alias points at, that
    /// are not `$latest` and that nobody called for [`IDLE`].
    pub async fn sweep(&self) {
        let idle: Vec<VersionRef> = {
            let extra = self.extra.lock().unwrap();
            extra
                .iter()
                .filter(|(_, at)| at.elapsed() >= IDLE)
                .map(|(v, _)| v.clone())
                .collect()
        };
        for version in idle {
            let latest = self.routes.latest(&version.key).is_some_and(|l| l == version);
            if latest {
                self.extra.lock().unwrap().remove(&version);
            } else if !self.routes.pinned(&version.key).contains(&version.version) {
                tracing::info!(%version, "retiring an idle version");
                self.retire(&version).await;
            }
        }
    }

    /// Runs [`Versions::sweep`] every [`SWEEP_PERIOD`].
    pub fn start_sweeping(self: &Arc<Self>) {
        crate::periodic::every(self, SWEEP_PERIOD, |this| async move { this.sweep().await });
    }

    /// How many versions of a function keep their artifacts.
    pub fn keep(&self) -> usize {
        self.keep
    }

    /// Keeps the newest `keep` versions of a function, those its aliases
    /// point at and `current`; deletes the others' records, and their
    /// artifacts and archives where no kept version shares them.
    pub async fn prune(&self, key: &FunctionKey, current: u64, current_code: Option<&str>) -> Result<()> {
        let versions = self.store.versions(&key.namespace, &key.name).await?;
        if versions.len() <= self.keep {
            return Ok(());
        }
        let mut pinned: HashSet<u64> = self
            .store
            .aliases(&key.namespace, &key.name)
            .await?
            .iter()
            .flat_map(|a| a.spec.versions())
            .collect();
        pinned.insert(current);
        let (kept, gone): (Vec<_>, Vec<_>) = versions
            .into_iter()
            .enumerate()
            .partition(|(rank, v)| *rank < self.keep || pinned.contains(&v.version));
        let mut kept_code: HashSet<&str> = kept.iter().map(|(_, v)| v.code_hash.as_str()).collect();
        kept_code.extend(current_code);
        for (_, version) in &gone {
            self.drop_version(key, version, &kept_code).await?;
            tracing::info!(function = %key, version = version.version, keep = self.keep, "version no longer kept");
        }
        Ok(())
    }

    /// Deletes one version a user no longer wants (not the serving one,
    /// none an alias names: the caller checked, in the namespace's turn),
    /// as a prune would; `current_code` is the code the function waits
    /// for or serves, whose upload stays.
    pub async fn delete(&self, key: &FunctionKey, version: &VersionRecord, current_code: Option<&str>) -> Result<()> {
        let others = self.store.versions(&key.namespace, &key.name).await?;
        let mut kept_code: HashSet<&str> = others
            .iter()
            .filter(|v| v.version != version.version)
            .map(|v| v.code_hash.as_str())
            .collect();
        kept_code.extend(current_code);
        self.drop_version(key, version, &kept_code).await?;
        tracing::info!(function = %key, version = version.version, "version deleted");
        Ok(())
    }

    /// Deletes `version`'s record, retires it here (the other replicas
    /// follow, [`Versions::retire_removed`]) and removes its artifact
    /// unless another version uses it ([`Versions::remove_artifact`]), and
    /// its upload unless a version in `kept_code` was built from the same
    /// code.
    async fn drop_version(&self, key: &FunctionKey, version: &VersionRecord, kept_code: &HashSet<&str>) -> Result<()> {
        self.store
            .delete_version(&key.namespace, &key.name, version.version)
            .await?;
        self.retire(&VersionRef::new(key.clone(), version.version)).await;
        // Artifacts are shared by every version and function built from
        // the same code with the same shims.
        if !self.store.artifact_in_use(&version.artifact).await? {
            let artifact = Fingerprint::from_stored(version.artifact.clone());
            if let Err(e) = self.remove_artifact(&artifact).await {
                tracing::warn!(function = %key, version = version.version, error = %e, "removing an old artifact failed");
            }
        }
        if !kept_code.contains(version.code_hash.as_str()) {
            let archive = crate::blobs::archive_key(&key.namespace, &key.name, &version.code_hash);
            if let Err(e) = self.blobs.delete(&archive).await {
                tracing::warn!(function = %key, version = version.version, error = %e, "removing an old archive failed");
            }
        }
        Ok(())
    }

    /// Removes `artifact`, which no version uses: this machine's copy, and
    /// on the leader its tarballs in the object store too. Another replica
    /// leaves those to the leader's sweep (`Deployer::sweep`): it cannot
    /// see the builds under way on the leader, one of which may be reusing
    /// its copy of the artifact for a version not recorded yet, whose
    /// tarball would then be gone.
    pub async fn remove_artifact(&self, artifact: &Fingerprint) -> std::result::Result<(), DriverError> {
        if self.leadership.is_leader() {
            self.driver.remove_artifact(artifact).await
        } else {
            self.driver.remove_local_copy(artifact).await
        }
    }
}
