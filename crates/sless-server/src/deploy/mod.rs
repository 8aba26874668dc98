//! Turns uploads into running versions: checks an uploaded archive (upload
//! rules, code-safety gate) and stores it, runs builds in the background,
//! reports `Building -> Ready | Failed` with the build log's tail, counts
//! versions, hands new versions and spec changes to the driver, and at start
//! brings every function back (rebuilding those whose shim version changed).
//! With several replicas, builds run on the leader, and a built version
//! rolls out to the others (`follow`) before it is called Ready.
//!
//! **Invariant:** `Ready` is written only after the driver deployed the
//! version (its handler loaded) here and every other live replica serves
//! it; a version that cannot load is `Failed` and the previous one keeps
//! serving.

mod follow;
mod hints;
mod slots;
mod storage;
mod sweep;
mod unawaited;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::{ObjectStore, ObjectStoreExt};
use serde_json::Value;
use sha2::{Digest, Sha256};
use sless_api::{FunctionSpec, FunctionStatus, Phase};
use sless_codecheck::{CodeValidator, SourceFile};
use sless_driver::{BuildJob, Deployment, Driver, DriverError, Fingerprint, FunctionKey, VersionRef};

pub use self::follow::Target;
use crate::archive::ArchiveRules;
use crate::blobs;
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::routes::Routes;
use crate::store::{Kind, Recorded, Store, VersionRecord};
use crate::versions::Versions;

/// Builds at once at most.
const CONCURRENT_BUILDS: usize = 2;
/// After how long a running build says so in the function's status.
const BUILD_NOTICE_AFTER: Duration = Duration::from_secs(1);

/// Uploads checked at once at most.
const CONCURRENT_CHECKS: usize = 2;

/// Uploads, builds and rollouts.
pub struct Deployer {
    store: Arc<dyn Store>,
    blobs: Arc<dyn ObjectStore>,
    driver: Arc<dyn Driver>,
    routes: Arc<Routes>,
    versions: Arc<Versions>,
    metrics: Arc<crate::metrics::Metrics>,
    archive_rules: ArchiveRules,
    code_check: Arc<dyn CodeValidator>,
    builds: tokio::sync::Semaphore,
    /// How long a build holds one of `builds` before it moves to
    /// `long_builds` (if one is free) and its slot goes to the next.
    build_share: Duration,
    long_builds: tokio::sync::Semaphore,
    /// Build slots of each namespace (`SLESS_NS_MAX_BUILDS`), taken before
    /// one of `builds`: one namespace never holds them all.
    namespace_builds: std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Semaphore>>>,
    namespace_build_slots: usize,
    /// What one namespace's kept versions may take (`SLESS_NS_MAX_STORAGE_MB`).
    namespace_storage_bytes: u64,
    /// Builds that passed the storage check, until their versions are recorded.
    reservations: storage::Reservations,
    /// Uploads being checked.
    checking: tokio::sync::Semaphore,
    cluster: Arc<Cluster>,
    /// Builds under way here, by function and code hash (a build is
    /// started once however many times it is asked for), each with whether
    /// it was asked for again meanwhile: then it is looked at again once it
    /// ends, for an upload of the same code may have come after another
    /// (A, B, A again) while it was being stopped as superseded.
    building: std::sync::Mutex<std::collections::HashMap<(FunctionKey, String), bool>>,
}

/// The checks an upload passes before anything is stored.
pub struct UploadChecks {
    pub archive_rules: ArchiveRules,
    pub code_check: Arc<dyn CodeValidator>,
    /// Builds one namespace runs at once.
    pub namespace_builds: usize,
    /// How long a build holds one of the server's build slots.
    pub build_share: Duration,
    /// Builds past their share running at once at most.
    pub long_builds: usize,
    /// What one namespace's kept versions may take, in bytes.
    pub namespace_storage_bytes: u64,
}

impl Deployer {
    pub fn new(
        store: Arc<dyn Store>,
        blobs: Arc<dyn ObjectStore>,
        driver: Arc<dyn Driver>,
        versions: Arc<Versions>,
        metrics: Arc<crate::metrics::Metrics>,
        checks: UploadChecks,
        cluster: Arc<Cluster>,
    ) -> Arc<Self> {
        Arc::new(Deployer {
            store,
            blobs,
            driver,
            routes: versions.routes().clone(),
            versions,
            metrics,
            archive_rules: checks.archive_rules,
            code_check: checks.code_check,
            builds: tokio::sync::Semaphore::new(CONCURRENT_BUILDS),
            build_share: checks.build_share,
            long_builds: tokio::sync::Semaphore::new(checks.long_builds),
            namespace_builds: Default::default(),
            namespace_build_slots: checks.namespace_builds.max(1),
            namespace_storage_bytes: checks.namespace_storage_bytes,
            reservations: Default::default(),
            checking: tokio::sync::Semaphore::new(CONCURRENT_CHECKS),
            cluster,
            building: Default::default(),
        })
    }

    /// The versions besides `$latest` on this replica.
    pub fn versions(&self) -> &Arc<Versions> {
        &self.versions
    }

    async fn load(&self, key: &FunctionKey) -> Result<Option<(FunctionSpec, FunctionStatus)>> {
        Ok(self.load_stored(key).await?.map(|(spec, status, _)| (spec, status)))
    }

    /// [`Deployer::load`], with the status as stored (what a
    /// compare-and-set of it compares with).
    async fn load_stored(&self, key: &FunctionKey) -> Result<Option<(FunctionSpec, FunctionStatus, Value)>> {
        let Some(record) = self.store.get(Kind::Function, &key.namespace, &key.name).await? else {
            return Ok(None);
        };
        let spec = serde_json::from_value(record.spec).map_err(Error::internal)?;
        let status = serde_json::from_value(record.status.clone()).map_err(Error::internal)?;
        Ok(Some((spec, status, record.status)))
    }

    /// Writes a function's status; returns it as stored.
    async fn save(&self, key: &FunctionKey, status: &FunctionStatus) -> Result<Value> {
        let value = serde_json::to_value(status).map_err(Error::internal)?;
        self.store
            .update_status(Kind::Function, &key.namespace, &key.name, &value)
            .await?;
        Ok(value)
    }

    /// Accepts an uploaded zip: the upload rules and the code-safety gate
    /// run before anything is written; then the archive is stored under its
    /// sha256, the function goes to `Building` and the build starts in the
    /// background. Returns the status as it was saved (`Building`: the
    /// build may be done before the caller reads the function again).
    pub async fn upload(self: &Arc<Self>, key: &FunctionKey, zip: Bytes) -> Result<FunctionStatus> {
        let Some((_, mut status)) = self.load(key).await? else {
            return Err(Error::NotFound(format!(
                "function {:?} not found in namespace {:?}",
                key.name, key.namespace
            )));
        };
        // Archives are checked a few at a time: with the code check on, a
        // check holds the unpacked files until the verdict.
        let _checking = self.checking.acquire().await.map_err(Error::internal)?;
        let rules = self.archive_rules.clone();
        let checked_zip = zip.clone();
        let unpacked = tokio::task::spawn_blocking(move || rules.check(&checked_zip))
            .await
            .map_err(Error::internal)??;
        let (file_count, total_bytes) = (unpacked.files.len(), unpacked.total_bytes);
        let files: Vec<_> = if self.archive_rules.keep_contents {
            unpacked
                .files
                .into_iter()
                .map(|f| SourceFile::new(f.path, f.contents))
                .collect()
        } else {
            Vec::new()
        };
        let verdict = self.code_check.check(&files).await.inspect_err(|e| {
            tracing::warn!(function = %key, error = %e, "upload refused by the code check");
        })?;
        let code_hash = hex::encode(Sha256::digest(&zip));
        // The code `$latest` serves, uploaded again (a redeploy with nothing
        // changed): no build, and no new version that would push a kept
        // one out. Spec edits apply to `$latest` without one.
        if status.phase == Phase::Ready && status.code_hash.as_deref() == Some(code_hash.as_str()) {
            tracing::info!(function = %key, %code_hash, version = status.version, "upload of the code the function serves: nothing to build");
            return Ok(status);
        }
        self.blobs
            .put(
                &blobs::archive_key(&key.namespace, &key.name, &code_hash),
                zip.clone().into(),
            )
            .await?;
        status.code_hash = Some(code_hash.clone());
        status.phase = Phase::Building;
        status.validation = Some(verdict.summary().to_string());
        status.message =
            format!("archive accepted ({file_count} files, {total_bytes} bytes unpacked); waiting for the build");
        self.save(key, &status).await?;
        tracing::info!(function = %key, %code_hash, "code archive stored");
        // Builds run on the leader; another replica's sees the function
        // `Building` within a reconcile period.
        if self.cluster.is_leader() {
            self.spawn_build(key.clone(), code_hash, false, Some(zip));
        }
        Ok(status)
    }

    /// Starts building `code_hash`, the upload a function is `Building`, in
    /// the background, unless that build is under way here already or the
    /// function no longer waits for it when the build starts (a reconcile
    /// pass that read the function before its build ended must not build
    /// the same code again as a new version).
    pub fn start_build(self: &Arc<Self>, key: FunctionKey, code_hash: String) {
        self.spawn_build(key, code_hash, false, None);
    }

    /// Builds `code_hash`, the code a function serves, again (its artifact
    /// is stale): a new version of the same code.
    pub fn start_rebuild(self: &Arc<Self>, key: FunctionKey, code_hash: String) {
        self.spawn_build(key, code_hash, true, None);
    }

    /// Builds in the background; `archive` is the code when the caller has
    /// it at hand (an upload), else it is read from the code store.
    fn spawn_build(self: &Arc<Self>, key: FunctionKey, code_hash: String, rebuild: bool, archive: Option<Bytes>) {
        let job = (key, code_hash);
        {
            let mut building = self.building.lock().unwrap();
            if let Some(again) = building.get_mut(&job) {
                *again = true;
                return;
            }
            building.insert(job.clone(), false);
        }
        let this = self.clone();
        tokio::spawn(async move {
            let (key, code_hash) = &job;
            // Old versions are pruned once the new one is Ready and the
            // build slots are free: the next deploy does not wait for it.
            let pruned = match this.build(key, code_hash, rebuild, archive).await {
                Ok(Some((version, current_code))) => this.versions.prune(key, version, current_code.as_deref()).await,
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = pruned {
                tracing::error!(function = %key, error = %e, "build bookkeeping failed");
            }
            let again = this.building.lock().unwrap().remove(&job) == Some(true);
            if again {
                // Skipped at once unless the function awaits this code.
                let (key, code_hash) = job;
                this.spawn_build(key, code_hash, false, None);
            }
        });
    }

    /// Builds, checks and deploys `code_hash`; returns the version it made
    /// and the function's code then, when there are versions to prune.
    async fn build(
        &self,
        key: &FunctionKey,
        code_hash: &str,
        rebuild: bool,
        archive: Option<Bytes>,
    ) -> Result<Option<(u64, Option<String>)>> {
        let (_own_permit, slot) = self.build_slot(key, code_hash).await?;
        // Held to the end: a short build's slot, or a long build's.
        let slot = std::sync::Mutex::new(slot);
        let Some((spec, status)) = self.load(key).await? else {
            return Ok(None);
        };
        let awaited = status.phase == Phase::Building && status.code_hash.as_deref() == Some(code_hash);
        if !rebuild && !awaited {
            tracing::debug!(function = %key, %code_hash, "build no longer awaited: skipped");
            return Ok(None);
        }
        let archive = match archive {
            Some(archive) => archive,
            None => {
                self.blobs
                    .get(&blobs::archive_key(&key.namespace, &key.name, code_hash))
                    .await?
                    .bytes()
                    .await?
            }
        };
        tracing::info!(function = %key, %code_hash, "build started");
        let started = std::time::Instant::now();
        let started_at = crate::store::now();
        let build = self.driver.build(BuildJob {
            key: key.clone(),
            runtime: spec.runtime,
            code_hash: code_hash.to_string(),
            archive: archive.clone(),
            timeout: Duration::from_secs(u64::from(spec.build_timeout_sec)),
        });
        // A build that takes a while (dependencies to install) says so in
        // the status; a quick one writes nothing more. One past its share
        // gives its slot to the next build.
        let aside = async {
            tokio::time::sleep(BUILD_NOTICE_AFTER).await;
            self.note_build_running(key, code_hash, spec.runtime, started_at).await;
            self.run_on_as_long(key, &slot).await;
        };
        // A build its function no longer awaits is dropped (`unawaited`),
        // its processes with it, and its slots go to the next build.
        let ended = tokio::select! {
            result = build => Ok(result),
            why = self.unawaited(key, code_hash) => Err(why),
            () = aside => unreachable!("runs until the build ends"),
        };
        let result = match ended {
            Ok(result) => result,
            Err(why) => {
                self.stopped(key, code_hash, spec.runtime, why).await;
                return Ok(None);
            }
        };
        let build_ms = started.elapsed().as_secs_f64() * 1000.0;
        // The function may have been deleted, re-uploaded or edited meanwhile.
        // What such a build made is removed: nothing else ever would.
        let Some((spec, mut status, mut stored)) = self.load_stored(key).await? else {
            if let Ok(built) = &result {
                self.made_no_version(key, code_hash, Some(&built.artifact)).await;
            }
            return Ok(None);
        };
        if status.code_hash.as_deref() != Some(code_hash) {
            tracing::info!(function = %key, "a newer upload superseded this build");
            if let Ok(built) = &result {
                self.made_no_version(key, code_hash, Some(&built.artifact)).await;
            }
            return Ok(None);
        }
        if self.deposed(key, code_hash) {
            return Ok(None);
        }
        let built = match result {
            Ok(built) => built,
            Err(e) => return self.refuse(key, code_hash, None, &mut status, e.to_string()).await,
        };
        let version = status.version + 1;
        let new = storage::NewVersion {
            key: key.clone(),
            code_hash: code_hash.to_string(),
            artifact: built.artifact.clone(),
            artifact_bytes: built.bytes,
            archive_bytes: archive.len() as u64,
        };
        let keep = self.versions.keep();
        // Held until the version is recorded (or the build makes none).
        let reserved = match self
            .reservations
            .reserve(&*self.store, new, keep, self.namespace_storage_bytes)
            .await?
        {
            Ok(reserved) => reserved,
            Err(over) => {
                return self
                    .refuse(key, code_hash, Some(&built.artifact), &mut status, over)
                    .await
            }
        };
        let secrets = match self.versions.secrets().resolve(&key.namespace, &spec).await {
            Ok(secrets) => secrets,
            Err(e) => {
                let message = format!("the function cannot start: {e}");
                return self
                    .refuse(key, code_hash, Some(&built.artifact), &mut status, message)
                    .await;
            }
        };
        let checking = std::time::Instant::now();
        let deployed = self
            .driver
            .deploy(Deployment {
                secrets,
                key: key.clone(),
                version,
                artifact: built.artifact.clone(),
                digest: built.digest.clone(),
                spec: spec.clone(),
                verify: true,
            })
            .await;
        if let Err(e) = deployed {
            let mut message = e.to_string();
            if let DriverError::LoadFailed(_) = e {
                if let Some(hint) = hints::load_hint(spec.runtime, &spec.entrypoint, &entry_names(&archive)) {
                    message = format!("{hint}\n{message}");
                }
            }
            return self
                .refuse(key, code_hash, Some(&built.artifact), &mut status, message)
                .await;
        }
        let check_ms = checking.elapsed().as_secs_f64() * 1000.0;
        let checked = std::time::Instant::now();
        self.promote(key, version).await;
        let spec_value = serde_json::to_value(&spec).map_err(Error::internal)?;
        self.cluster.deployed(key, version, spec_value.clone(), false).await;
        let rollout = sless_api::Rollout {
            version,
            artifact: built.artifact.to_string(),
            artifact_digest: built.digest.clone(),
            built_hash: code_hash.to_string(),
        };
        if self.cluster.shared() {
            if self.deposed(key, code_hash) {
                return Ok(None);
            }
            // The other replicas deploy the version from `rollout`; it is
            // Ready once they all serve it. Written over the status as read
            // after the build: an upload that came since (checking this
            // version's load takes a while) keeps its code and phase, and
            // gets the rollout. Saved blindly, it was lost.
            let mut tries = 0;
            loop {
                status.rollout = Some(rollout.clone());
                if status.code_hash.as_deref() == Some(code_hash) {
                    status.message = format!("version {version} built; rolling out to every replica");
                }
                let value = serde_json::to_value(&status).map_err(Error::internal)?;
                let (namespace, name) = (&key.namespace, &key.name);
                if self
                    .store
                    .swap_status(Kind::Function, namespace, name, &stored, &value)
                    .await?
                {
                    stored = value;
                    break;
                }
                tries += 1;
                match self.load_stored(key).await? {
                    Some((_, now, now_stored)) if now.version < version && tries <= 10 => {
                        (status, stored) = (now, now_stored);
                    }
                    _ => {
                        self.made_no_version(key, code_hash, Some(&built.artifact)).await;
                        return Ok(None);
                    }
                }
            }
            if let Err(lagging) = self.cluster.wait_for_replicas(key, version).await {
                tracing::warn!(function = %key, version, ?lagging, "replicas did not confirm the new version in time");
            }
        }
        let ready = |status: &mut FunctionStatus| {
            status.phase = Phase::Ready;
            status.message = format!(
                "version {version} ready (built in {:.1}s): {}",
                started.elapsed().as_secs_f64(),
                built.log_tail.lines().last().unwrap_or("")
            );
        };
        let record = |status: &FunctionStatus| VersionRecord {
            namespace: key.namespace.clone(),
            function: key.name.clone(),
            version,
            code_hash: code_hash.to_string(),
            artifact: rollout.artifact.clone(),
            artifact_digest: rollout.artifact_digest.clone(),
            spec: spec_value.clone(),
            built_at: status.last_built_at.unwrap_or_else(crate::store::now),
            artifact_bytes: built.bytes,
            archive_bytes: archive.len() as u64,
        };
        // The version is recorded with its Ready, in one transaction that
        // also finds this replica still leading (its fence): from then on
        // it can be called by number and named by aliases. Usually the
        // status is as read after the build.
        promote_status(&mut status, &rollout);
        if status.code_hash.as_deref() == Some(code_hash) {
            ready(&mut status);
        }
        let recording = std::time::Instant::now();
        let rollout_ms = (recording - checked).as_secs_f64() * 1000.0;
        if self.deposed(key, code_hash) {
            return Ok(None);
        }
        // A storage check waits while the version goes from reserved to recorded.
        let reserved = reserved.recording().await;
        let fence = self.cluster.leadership.fence();
        let mut tries = 0;
        loop {
            let value = serde_json::to_value(&status).map_err(Error::internal)?;
            match self
                .store
                .record_version(&record(&status), &stored, &value, fence)
                .await?
            {
                Recorded::Done => break,
                Recorded::Fenced => {
                    // Another replica took the lead since this one built;
                    // it builds the upload itself (its archive stays).
                    tracing::warn!(function = %key, %code_hash, version,
                        "another replica leads now: this build makes no version, the new leader builds the upload");
                    return Ok(None);
                }
                Recorded::Moved => {}
            }
            // The status moved meanwhile (a new upload, a note of a spec
            // edit): the version is recorded all the same, Ready only if
            // the function still waits for this code.
            tries += 1;
            let Some((_, mut now, now_stored)) = self.load_stored(key).await? else {
                self.made_no_version(key, code_hash, Some(&built.artifact)).await;
                return Ok(None);
            };
            if now.version >= version || tries > 10 {
                self.made_no_version(key, code_hash, Some(&built.artifact)).await;
                return Ok(None); // promoted meanwhile
            }
            promote_status(&mut now, &rollout);
            if now.code_hash.as_deref() == Some(code_hash) {
                ready(&mut now);
            }
            (status, stored) = (now, now_stored);
        }
        drop(reserved);
        // Where a deploy's time goes: the build, the load check, the
        // promotion and rollout after it, the store transaction that
        // makes it Ready, and (the rest of `ms`) the reads between them.
        let record_ms = recording.elapsed().as_secs_f64() * 1000.0;
        tracing::info!(function = %key, version, ms = started.elapsed().as_secs_f64() * 1000.0, build_ms, check_ms,
            rollout_ms, record_ms, "build succeeded");
        self.metrics.builds_succeeded.fetch_add(1, Relaxed);
        let prune = version as usize > self.versions.keep();
        Ok(prune.then_some((version, status.code_hash)))
    }

    /// Whether this replica no longer leads, so that its build of
    /// `code_hash` must make no version: builds are the leader's, and the
    /// one that took over builds the upload itself (were both to go on,
    /// one upload would make two versions). What the build made is left
    /// to the artifact sweep (the new leader may be reusing it), and the
    /// archive stays: the new leader's build reads it. The store's fence
    /// ([`Store::record_version`]) makes it sure; this spares the work and
    /// the writes before it.
    fn deposed(&self, key: &FunctionKey, code_hash: &str) -> bool {
        let deposed = !self.cluster.is_leader();
        if deposed {
            tracing::warn!(function = %key, %code_hash,
                "this replica no longer leads: its build makes no version, the new leader builds the upload");
        }
        deposed
    }

    /// Makes a deployed version `$latest`, then retires the one before
    /// (unless an alias still points at it).
    async fn promote(&self, key: &FunctionKey, version: u64) {
        let before = self.routes.set_latest(key, version);
        if let Some(old) = before.filter(|old| *old != version) {
            self.versions.demoted(VersionRef::new(key.clone(), old)).await;
        }
    }

    /// Ends a build of `code_hash` that makes no version (`artifact`: what
    /// it built, if anything): what it left is removed, and the function's
    /// status says why, as failed.
    async fn refuse(
        &self,
        key: &FunctionKey,
        code_hash: &str,
        artifact: Option<&Fingerprint>,
        status: &mut FunctionStatus,
        message: String,
    ) -> Result<Option<(u64, Option<String>)>> {
        self.made_no_version(key, code_hash, artifact).await;
        self.fail(key, status, message).await;
        self.save(key, status).await?;
        Ok(None)
    }

    /// Marks a build failed; the serving version, if any, stays.
    async fn fail(&self, key: &FunctionKey, status: &mut FunctionStatus, message: String) {
        tracing::warn!(function = %key, error = %sless_api::text::log_line(&message), "build failed");
        status.phase = Phase::Failed;
        status.message = if status.version > 0 {
            format!("{message}\n(version {} keeps serving)", status.version)
        } else {
            message
        };
        self.metrics.builds_failed.fetch_add(1, Relaxed);
    }

    /// Applies an edited spec to the running version, if there is one. New
    /// settings whose handler does not load (an env it needs at import,
    /// say) leave the version serving as it was, and the status says so.
    pub async fn apply_spec(&self, key: &FunctionKey) -> Result<()> {
        let Some((spec, mut status)) = self.load(key).await? else {
            return Ok(());
        };
        let (Some(artifact), true) = (&status.artifact, status.version > 0) else {
            return Ok(());
        };
        let spec_value = serde_json::to_value(&spec).map_err(Error::internal)?;
        let deployed = match self.versions.secrets().resolve(&key.namespace, &spec).await {
            Ok(secrets) => {
                self.driver
                    .deploy(Deployment {
                        key: key.clone(),
                        version: status.version,
                        artifact: Fingerprint::from_stored(artifact.clone()),
                        digest: status.artifact_digest.clone(),
                        spec,
                        verify: true,
                        secrets,
                    })
                    .await
            }
            Err(e) => Err(DriverError::Unavailable(e)),
        };
        if deployed.is_ok() && !self.still_stored(key).await {
            // Deleted while the settings loaded: the delete's removal may
            // have run before this deploy made its instances, which no
            // route names and nothing would stop. (A delete after this
            // look removes what follows.)
            self.remove(key).await;
            return Ok(());
        }
        if deployed.is_ok() {
            // The newest version runs with the function's spec; its record follows.
            self.store
                .set_version_spec(&key.namespace, &key.name, status.version, &spec_value)
                .await?;
            self.cluster.deployed(key, status.version, spec_value, false).await;
        }
        let settled = status.code_hash == status.built_hash;
        match deployed {
            Ok(()) if settled && status.phase == Phase::Failed => {
                status.phase = Phase::Ready;
                status.message = format!("version {} ready with the new settings", status.version);
            }
            Ok(()) => return Ok(()),
            Err(e) => {
                tracing::warn!(function = %key, error = %sless_api::text::log_line(&e.to_string()), "new settings not applied");
                if settled {
                    status.phase = Phase::Failed;
                }
                status.message = format!(
                    "the new settings were not applied: {e}\n(version {} keeps serving with the previous settings)",
                    status.version
                );
            }
        }
        self.save(key, &status).await.map(drop)
    }

    /// Stops everything of a deleted function in the driver.
    pub async fn remove(&self, key: &FunctionKey) {
        self.routes.forget(key);
        self.versions.forget(key);
        if let Err(e) = self.driver.remove(key).await {
            tracing::warn!(function = %key, error = %e, "stopping a deleted function's instances failed");
        }
        self.cluster.removed(key).await;
    }

    /// Removes the artifacts of a deleted function's versions (`built`,
    /// their records forgotten) that no other function's version uses.
    pub async fn discard_versions(&self, key: &FunctionKey, built: &[VersionRecord]) {
        let mut seen = std::collections::HashSet::new();
        for version in built.iter().filter(|v| seen.insert(v.artifact.as_str())) {
            let artifact = Fingerprint::from_stored(version.artifact.clone());
            self.discard_artifact(key, &version.code_hash, &artifact).await;
        }
    }

    /// What a build of `code_hash` that made no version leaves is removed:
    /// its artifact (when it made one, [`Deployer::discard_artifact`]) and
    /// the uploaded archive, unless a version of the function was built
    /// from the same code (pruning decides then). Nothing else would ever
    /// remove them: a failed upload's archive stayed as long as its
    /// function, each up to `SLESS_MAX_UPLOAD_BYTES`.
    async fn made_no_version(&self, key: &FunctionKey, code_hash: &str, artifact: Option<&Fingerprint>) {
        if let Some(artifact) = artifact {
            self.discard_artifact(key, code_hash, artifact).await;
        }
        match self.store.versions(&key.namespace, &key.name).await {
            Ok(versions) if versions.iter().any(|v| v.code_hash == code_hash) => return,
            Ok(_) => {}
            Err(e) => {
                return tracing::warn!(function = %key, error = %e, "cannot tell whether a version uses an archive")
            }
        }
        let archive = blobs::archive_key(&key.namespace, &key.name, code_hash);
        match self.blobs.delete(&archive).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => {
                tracing::warn!(function = %key, %code_hash, error = %e, "removing an archive no version uses failed")
            }
        }
    }

    /// Removes `artifact` (this machine's copy, and on the leader its
    /// tarballs: [`Versions::remove_artifact`]), built from `code_hash`
    /// for `key` and named by no version of it, unless a version of another function uses it or
    /// another function's build of the same code is under way here
    /// (artifacts are shared by every function built from the same code
    /// with the same shims). A build whose version never went live (its
    /// handler did not load, a newer upload superseded it, the function was
    /// deleted meanwhile) and a deleted function's versions leave their
    /// artifacts to this: nothing else would ever remove them, and a
    /// tenant could fill the server's disk deploying code that fails.
    async fn discard_artifact(&self, key: &FunctionKey, code_hash: &str, artifact: &Fingerprint) {
        let used = self.store.artifact_in_use(artifact.as_str()).await;
        // Looked at last, just before the removal: a build starting here
        // reuses an artifact of its code that is on disk.
        let building = || {
            self.building
                .lock()
                .unwrap()
                .keys()
                .any(|(other, hash)| hash == code_hash && other != key)
        };
        let removed = match used {
            Ok(true) => return,
            Ok(false) if building() => return,
            Ok(false) => self.versions.remove_artifact(artifact).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match removed {
            Ok(()) => tracing::info!(function = %key, %artifact, "artifact no version uses removed"),
            Err(e) => {
                tracing::warn!(function = %key, %artifact, error = %e, "removing an artifact no version uses failed")
            }
        }
    }
}

/// Makes `rollout` the serving version of `status`.
fn promote_status(status: &mut FunctionStatus, rollout: &sless_api::Rollout) {
    status.version = rollout.version;
    status.artifact = Some(rollout.artifact.clone());
    status.artifact_digest = rollout.artifact_digest.clone();
    status.built_hash = Some(rollout.built_hash.clone());
    status.last_built_at = Some(crate::store::now());
    if status.rollout.as_ref().is_some_and(|r| r.version <= rollout.version) {
        status.rollout = None;
    }
}

/// The paths of a zip's entries (empty when it does not read as a zip).
fn entry_names(zip: &[u8]) -> Vec<String> {
    zip::ZipArchive::new(std::io::Cursor::new(zip))
        .map(|archive| archive.file_names().map(str::to_string).collect())
        .unwrap_or_default()
}
