//! Turns uploads into running versions: checks an uploaded archive (upload
//! rules, code-safety gate) and stores it, runs builds in the background,
//! reports `Building -> Ready | Failed` with the build log's tail, counts
//! versions, hands new versions and spec changes to the driver, and at start
//! brings every function back (rebuilding those whose shim version changed).
//!
//! **Invariant:** `Ready` is written only after the driver deployed the
//! version (its handler loaded); a version that cannot load is `Failed` and
//! the previous one keeps serving.

mod hints;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::{ObjectStore, ObjectStoreExt};
use sha2::{Digest, Sha256};
use sless_api::{FunctionSpec, FunctionStatus, Phase};
use sless_codecheck::{CodeValidator, SourceFile};
use sless_driver::{BuildJob, Deployment, Driver, DriverError, Fingerprint, FunctionKey, VersionRef};

use crate::archive::ArchiveRules;
use crate::blobs;
use crate::error::{Error, Result};
use crate::routes::Routes;
use crate::store::{Kind, Store};

/// Builds at once at most.
const CONCURRENT_BUILDS: usize = 2;

/// Uploads checked at once at most.
const CONCURRENT_CHECKS: usize = 2;

/// Uploads, builds and rollouts.
pub struct Deployer {
    store: Arc<dyn Store>,
    blobs: Arc<dyn ObjectStore>,
    driver: Arc<dyn Driver>,
    routes: Arc<Routes>,
    metrics: Arc<crate::metrics::Metrics>,
    archive_rules: ArchiveRules,
    code_check: Arc<dyn CodeValidator>,
    builds: tokio::sync::Semaphore,
    checks: tokio::sync::Semaphore,
}

impl Deployer {
    pub fn new(
        store: Arc<dyn Store>,
        blobs: Arc<dyn ObjectStore>,
        driver: Arc<dyn Driver>,
        routes: Arc<Routes>,
        metrics: Arc<crate::metrics::Metrics>,
        archive_rules: ArchiveRules,
        code_check: Arc<dyn CodeValidator>,
    ) -> Arc<Self> {
        Arc::new(Deployer {
            store,
            blobs,
            driver,
            routes,
            metrics,
            archive_rules,
            code_check,
            builds: tokio::sync::Semaphore::new(CONCURRENT_BUILDS),
            checks: tokio::sync::Semaphore::new(CONCURRENT_CHECKS),
        })
    }

    async fn load(&self, key: &FunctionKey) -> Result<Option<(FunctionSpec, FunctionStatus)>> {
        let Some(record) = self.store.get(Kind::Function, &key.namespace, &key.name).await? else {
            return Ok(None);
        };
        let spec = serde_json::from_value(record.spec).map_err(Error::internal)?;
        let status = serde_json::from_value(record.status).map_err(Error::internal)?;
        Ok(Some((spec, status)))
    }

    async fn save(&self, key: &FunctionKey, status: &FunctionStatus) -> Result<()> {
        let value = serde_json::to_value(status).map_err(Error::internal)?;
        self.store
            .update_status(Kind::Function, &key.namespace, &key.name, &value)
            .await
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
        let _checking = self.checks.acquire().await.map_err(Error::internal)?;
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
        self.blobs
            .put(&blobs::archive_key(&key.namespace, &key.name, &code_hash), zip.into())
            .await?;
        status.code_hash = Some(code_hash.clone());
        status.phase = Phase::Building;
        status.validation = Some(verdict.summary().to_string());
        status.message =
            format!("archive accepted ({file_count} files, {total_bytes} bytes unpacked); waiting for the build");
        self.save(key, &status).await?;
        tracing::info!(function = %key, %code_hash, "code archive stored");
        self.start_build(key.clone(), code_hash);
        Ok(status)
    }

    /// Starts building `code_hash` in the background.
    pub fn start_build(self: &Arc<Self>, key: FunctionKey, code_hash: String) {
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(e) = this.build(&key, &code_hash).await {
                tracing::error!(function = %key, error = %e, "build bookkeeping failed");
            }
        });
    }

    async fn build(&self, key: &FunctionKey, code_hash: &str) -> Result<()> {
        let _permit = self.builds.acquire().await.map_err(Error::internal)?;
        let Some((spec, _)) = self.load(key).await? else {
            return Ok(());
        };
        let archive = self
            .blobs
            .get(&blobs::archive_key(&key.namespace, &key.name, code_hash))
            .await?
            .bytes()
            .await?;
        tracing::info!(function = %key, %code_hash, "build started");
        let started = std::time::Instant::now();
        let result = self
            .driver
            .build(BuildJob {
                key: key.clone(),
                runtime: spec.runtime,
                code_hash: code_hash.to_string(),
                archive: archive.clone(),
                timeout: Duration::from_secs(u64::from(spec.build_timeout_sec)),
            })
            .await;
        // The function may have been deleted, re-uploaded or edited meanwhile.
        let Some((spec, mut status)) = self.load(key).await? else {
            return Ok(());
        };
        if status.code_hash.as_deref() != Some(code_hash) {
            tracing::info!(function = %key, "a newer upload superseded this build");
            return Ok(());
        }
        let built = match result {
            Ok(built) => built,
            Err(e) => {
                self.fail(key, &mut status, e.to_string()).await;
                return self.save(key, &status).await;
            }
        };
        let version = status.version + 1;
        let deployed = self
            .driver
            .deploy(Deployment {
                key: key.clone(),
                version,
                artifact: built.artifact.clone(),
                spec: spec.clone(),
                verify: true,
            })
            .await;
        match deployed {
            Ok(()) => {
                self.promote(key, version).await;
                status.phase = Phase::Ready;
                status.version = version;
                status.artifact = Some(built.artifact.to_string());
                status.built_hash = Some(code_hash.to_string());
                status.last_built_at = Some(crate::store::now());
                status.message = format!(
                    "version {version} ready (built in {:.1}s): {}",
                    started.elapsed().as_secs_f64(),
                    built.log_tail.lines().last().unwrap_or("")
                );
                tracing::info!(function = %key, version, ms = started.elapsed().as_millis() as u64, "build succeeded");
                self.metrics.builds_succeeded.fetch_add(1, Relaxed);
            }
            Err(e) => {
                let mut message = e.to_string();
                if let DriverError::LoadFailed(_) = e {
                    if let Some(hint) = hints::load_hint(spec.runtime, &spec.entrypoint, &entry_names(&archive)) {
                        message = format!("{hint}\n{message}");
                    }
                }
                self.fail(key, &mut status, message).await;
            }
        }
        self.save(key, &status).await
    }

    /// Makes a deployed version `$latest`, then retires the one before.
    async fn promote(&self, key: &FunctionKey, version: u64) {
        let before = self.routes.set_latest(key, version);
        if let Some(old) = before.filter(|old| *old != version) {
            if let Err(e) = self.driver.retire(&VersionRef::new(key.clone(), old)).await {
                tracing::warn!(function = %key, version = old, error = %e, "retiring the version before failed");
            }
        }
    }

    /// Marks a build failed; the serving version, if any, stays.
    async fn fail(&self, key: &FunctionKey, status: &mut FunctionStatus, message: String) {
        tracing::warn!(function = %key, error = %message, "build failed");
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
        let deployed = self
            .driver
            .deploy(Deployment {
                key: key.clone(),
                version: status.version,
                artifact: Fingerprint::from_stored(artifact.clone()),
                spec,
                verify: true,
            })
            .await;
        let settled = status.code_hash == status.built_hash;
        match deployed {
            Ok(()) if settled && status.phase == Phase::Failed => {
                status.phase = Phase::Ready;
                status.message = format!("version {} ready with the new settings", status.version);
            }
            Ok(()) => return Ok(()),
            Err(e) => {
                tracing::warn!(function = %key, error = %e, "new settings not applied");
                if settled {
                    status.phase = Phase::Failed;
                }
                status.message = format!(
                    "the new settings were not applied: {e}\n(version {} keeps serving with the previous settings)",
                    status.version
                );
            }
        }
        self.save(key, &status).await
    }

    /// Stops everything of a deleted function in the driver.
    pub async fn remove(&self, key: &FunctionKey) {
        self.routes.forget(key);
        if let Err(e) = self.driver.remove(key).await {
            tracing::warn!(function = %key, error = %e, "stopping a deleted function's instances failed");
        }
    }

    /// At start: serve every built version again, rebuild what the shim
    /// version change made stale, and resume builds a restart interrupted.
    pub async fn restore_all(self: &Arc<Self>) -> Result<()> {
        for record in self.store.list_all(Kind::Function).await? {
            let key = FunctionKey::new(&record.namespace, &record.name);
            let decoded = serde_json::from_value::<FunctionSpec>(record.spec)
                .and_then(|spec| Ok((spec, serde_json::from_value::<FunctionStatus>(record.status)?)));
            let (spec, status) = match decoded {
                Ok(decoded) => decoded,
                Err(e) => {
                    // One bad record does not keep the others from serving.
                    tracing::warn!(function = %key, error = %e, "not serving a stored function that cannot be read; delete it and create it again");
                    continue;
                }
            };
            if let (Some(artifact), Some(built_hash)) = (&status.artifact, &status.built_hash) {
                let artifact = Fingerprint::from_stored(artifact.clone());
                if self.driver.has_artifact(&artifact).await.map_err(Error::internal)? {
                    let deployment = Deployment {
                        key: key.clone(),
                        version: status.version,
                        artifact: artifact.clone(),
                        spec: spec.clone(),
                        verify: false,
                    };
                    match self.driver.deploy(deployment).await {
                        Ok(()) => self.promote(&key, status.version).await,
                        Err(e) => tracing::warn!(function = %key, error = %e, "serving the built version again failed"),
                    }
                }
                let current = self
                    .driver
                    .fingerprint(spec.runtime, built_hash)
                    .await
                    .map_err(Error::internal)?;
                let pending_upload = status.code_hash.as_deref() != Some(built_hash.as_str());
                if current != artifact && !pending_upload {
                    tracing::info!(function = %key, "runtime shim changed: rebuilding");
                    self.start_build(key.clone(), built_hash.clone());
                }
            }
            if let Some(code_hash) = &status.code_hash {
                if status.phase == Phase::Building {
                    tracing::info!(function = %key, "resuming a build interrupted by a restart");
                    self.start_build(key, code_hash.clone());
                }
            }
        }
        Ok(())
    }
}

/// The paths of a zip's entries (empty when it does not read as a zip).
fn entry_names(zip: &[u8]) -> Vec<String> {
    zip::ZipArchive::new(std::io::Cursor::new(zip))
        .map(|archive| archive.file_names().map(str::to_string).collect())
        .unwrap_or_default()
}
