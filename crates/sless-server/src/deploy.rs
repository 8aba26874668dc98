//! Turns uploads into running versions: runs builds in the background,
//! reports `Building -> Ready | Failed` with the build log's tail, counts
//! versions, hands new versions and spec changes to the driver, and at start
//! brings every function back (rebuilding those whose shim version changed).

use std::sync::Arc;
use std::time::Duration;

use object_store::{ObjectStore, ObjectStoreExt};
use sless_api::{FunctionSpec, FunctionStatus, Phase};

use crate::blobs;
use crate::driver::{BuildJob, Deployment, Driver, FunctionKey};
use crate::error::{Error, Result};
use crate::store::{Kind, Store};

/// Builds and rollouts.
pub struct Deployer {
    store: Arc<dyn Store>,
    blobs: Arc<dyn ObjectStore>,
    pub driver: Arc<dyn Driver>,
    metrics: Arc<crate::metrics::Metrics>,
    builds: tokio::sync::Semaphore,
}

impl Deployer {
    pub fn new(
        store: Arc<dyn Store>,
        blobs: Arc<dyn ObjectStore>,
        driver: Arc<dyn Driver>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Arc<Self> {
        Arc::new(Deployer {
            store,
            blobs,
            driver,
            metrics,
            builds: tokio::sync::Semaphore::new(2),
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
                archive,
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
        match result {
            Ok(built) => {
                let version = status.version + 1;
                self.driver
                    .deploy(Deployment {
                        key: key.clone(),
                        version,
                        artifact: built.artifact.clone(),
                        spec,
                    })
                    .await;
                status.phase = Phase::Ready;
                status.version = version;
                status.artifact = Some(built.artifact);
                status.built_hash = Some(code_hash.to_string());
                status.last_built_at = Some(crate::store::now());
                status.message = format!(
                    "version {version} ready (built in {:.1}s): {}",
                    started.elapsed().as_secs_f64(),
                    built.log_tail.lines().last().unwrap_or("")
                );
                tracing::info!(function = %key, version, ms = started.elapsed().as_millis() as u64, "build succeeded");
                self.metrics
                    .builds_succeeded
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Err(e) => {
                status.phase = Phase::Failed;
                status.message = if status.version > 0 {
                    format!("{e}\n(version {} keeps serving)", status.version)
                } else {
                    e.to_string()
                };
                tracing::warn!(function = %key, error = %e, "build failed");
                self.metrics
                    .builds_failed
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        self.save(key, &status).await
    }

    /// Applies an edited spec to the running version, if there is one.
    pub async fn apply_spec(&self, key: &FunctionKey, spec: FunctionSpec, status: &FunctionStatus) {
        if let (Some(artifact), true) = (&status.artifact, status.version > 0) {
            self.driver
                .deploy(Deployment {
                    key: key.clone(),
                    version: status.version,
                    artifact: artifact.clone(),
                    spec,
                })
                .await;
        }
    }

    /// At start: serve every built version again, rebuild what the shim
    /// version change made stale, and resume builds a restart interrupted.
    pub async fn restore_all(self: &Arc<Self>) -> Result<()> {
        for record in self.store.list_all(Kind::Function).await? {
            let key = FunctionKey::new(&record.namespace, &record.name);
            let spec: FunctionSpec = serde_json::from_value(record.spec).map_err(Error::internal)?;
            let status: FunctionStatus = serde_json::from_value(record.status).map_err(Error::internal)?;
            if let (Some(artifact), Some(built_hash)) = (&status.artifact, &status.built_hash) {
                if self.driver.has_artifact(artifact).await {
                    self.apply_spec(&key, spec.clone(), &status).await;
                }
                let current = self.driver.artifact_id(spec.runtime, built_hash);
                let pending_upload = status.code_hash.as_deref() != Some(built_hash.as_str());
                if &current != artifact && !pending_upload {
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
