//! Serving what the store says: at start (`restore_all`), on a replica that
//! did not build a version (`follow`, driven by the reconciler), and on a
//! new leader whose shims differ from the ones an artifact was built with
//! (`rebuild_stale`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sless_api::{FunctionSpec, FunctionStatus, Phase};
use sless_driver::{Deployment, Fingerprint, FunctionKey};

use super::Deployer;
use crate::error::{Error, Result};
use crate::store::Kind;

/// The version a function should serve: the one rolling out, else the
/// serving one.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub version: u64,
    pub artifact: Fingerprint,
    pub digest: Option<String>,
}

impl Target {
    pub fn of(status: &FunctionStatus) -> Option<Target> {
        if let Some(rollout) = status.rollout.as_ref().filter(|r| r.version > status.version) {
            return Some(Target {
                version: rollout.version,
                artifact: Fingerprint::from_stored(rollout.artifact.clone()),
                digest: rollout.artifact_digest.clone(),
            });
        }
        let artifact = status.artifact.as_ref().filter(|_| status.version > 0)?;
        Some(Target {
            version: status.version,
            artifact: Fingerprint::from_stored(artifact.clone()),
            digest: status.artifact_digest.clone(),
        })
    }
}

impl Deployer {
    /// Deploys `target` with `spec` here. A spec change (`verify`) that does
    /// not load leaves the version serving as it was, as on the replica
    /// where it was made; a version that cannot be deployed within
    /// `timeout` stops being served here rather than serve the one before.
    pub async fn follow(
        &self,
        key: &FunctionKey,
        target: Target,
        spec: FunctionSpec,
        stored_spec: Value,
        verify: bool,
        timeout: Duration,
    ) {
        let version = target.version;
        if self.routes.latest(key).is_some_and(|latest| latest.version > version) {
            return; // a newer version serves here already; the store catches up
        }
        let deploy = async {
            let secrets = self
                .versions
                .secrets()
                .resolve(&key.namespace, &spec)
                .await
                .map_err(sless_driver::DriverError::Unavailable)?;
            self.driver
                .deploy(Deployment {
                    key: key.clone(),
                    version,
                    artifact: target.artifact,
                    digest: target.digest,
                    spec,
                    verify,
                    secrets,
                })
                .await
        };
        let error = match tokio::time::timeout(timeout, deploy).await {
            Ok(Ok(())) if !self.still_stored(key).await => {
                // Deleted while it deployed: the delete's removal may have
                // run before this deploy made its instances; nothing of it
                // may serve. (A delete after this look removes what follows.)
                self.remove(key).await;
                return;
            }
            Ok(Ok(())) => {
                tracing::info!(function = %key, version, "serving the version the store names");
                self.promote(key, version).await;
                self.cluster.deployed(key, version, stored_spec, false).await;
                return;
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("deploying took longer than {}s", timeout.as_secs()),
        };
        if verify {
            tracing::warn!(function = %key, version, %error, "new settings not applied on this replica");
            self.cluster.deployed(key, version, stored_spec, false).await;
            return;
        }
        tracing::warn!(function = %key, version, %error, "cannot serve the new version here; not serving the function until it can");
        self.remove(key).await;
        self.cluster.deployed(key, version, stored_spec, true).await;
    }

    /// Whether the function is in the store (an error reads as yes: the
    /// reconciler's next pass removes what a delete left here).
    pub(super) async fn still_stored(&self, key: &FunctionKey) -> bool {
        !matches!(
            self.store.get(Kind::Function, &key.namespace, &key.name).await,
            Ok(None)
        )
    }

    /// At start: record the serving versions an older server built, remove
    /// the artifacts here that no version uses (and on the leader, what the
    /// object store keeps that nothing uses, and measure the versions
    /// without sizes, those just recorded included), then serve every built
    /// version again (on a replica that never built it, its artifact is
    /// fetched).
    pub async fn restore_all(self: &Arc<Self>) -> Result<()> {
        let mut functions = Vec::new();
        for record in self.store.list_all(Kind::Function).await? {
            let key = FunctionKey::new(&record.namespace, &record.name);
            let Some((spec, status)) = decoded(&key, &record) else {
                continue;
            };
            let Some(target) = Target::of(&status) else { continue };
            self.record_served_version(&key, &status, &record.spec).await;
            functions.push((key, record, spec, target));
        }
        self.sweep().await;
        for (key, record, spec, target) in functions {
            if !self
                .driver
                .has_artifact(&target.artifact)
                .await
                .map_err(Error::internal)?
            {
                continue;
            }
            let version = target.version;
            let secrets = match self.versions.secrets().resolve(&key.namespace, &spec).await {
                Ok(secrets) => secrets,
                Err(e) => {
                    tracing::warn!(function = %key, error = %e, "not serving a function whose secrets cannot be read");
                    self.cluster.deployed(&key, version, record.spec, true).await;
                    continue;
                }
            };
            let deployment = Deployment {
                key: key.clone(),
                version,
                artifact: target.artifact,
                digest: target.digest,
                spec,
                verify: false,
                secrets,
            };
            let failed = match self.driver.deploy(deployment).await {
                Ok(()) => {
                    self.promote(&key, version).await;
                    false
                }
                Err(e) => {
                    tracing::warn!(function = %key, error = %e, "serving the built version again failed");
                    true
                }
            };
            self.cluster.deployed(&key, version, record.spec, failed).await;
        }
        Ok(())
    }

    /// Records the serving version of a function built before versions
    /// were recorded (an older server's); one recorded already stays.
    async fn record_served_version(&self, key: &FunctionKey, status: &FunctionStatus, spec: &Value) {
        let (Some(artifact), Some(built_hash), true) = (&status.artifact, &status.built_hash, status.version > 0)
        else {
            return;
        };
        let record = crate::store::VersionRecord {
            namespace: key.namespace.clone(),
            function: key.name.clone(),
            version: status.version,
            code_hash: built_hash.clone(),
            artifact: artifact.clone(),
            artifact_digest: status.artifact_digest.clone(),
            spec: spec.clone(),
            built_at: status.last_built_at.unwrap_or_else(crate::store::now),
            // Not known for an older server's build: the leader's sweep
            // measures it.
            artifact_bytes: 0,
            archive_bytes: 0,
        };
        if let Err(e) = self.store.put_version(&record).await {
            tracing::warn!(function = %key, error = %e, "recording the serving version failed");
        }
    }

    /// On becoming leader: rebuild what was built with other runtime shims
    /// than this server's (a new sless version rebuilds every function).
    pub async fn rebuild_stale(self: &Arc<Self>) -> Result<()> {
        for record in self.store.list_all(Kind::Function).await? {
            let key = FunctionKey::new(&record.namespace, &record.name);
            let Some((spec, status)) = decoded(&key, &record) else {
                continue;
            };
            let (Some(artifact), Some(built_hash)) = (&status.artifact, &status.built_hash) else {
                continue;
            };
            let current = self
                .driver
                .fingerprint(spec.runtime, built_hash)
                .await
                .map_err(Error::internal)?;
            let pending_upload = status.code_hash.as_deref() != Some(built_hash.as_str());
            if current.as_str() != artifact && !pending_upload && status.phase != Phase::Building {
                tracing::info!(function = %key, "runtime shim changed: rebuilding");
                self.start_rebuild(key, built_hash.clone());
            }
        }
        Ok(())
    }
}

/// A stored function's spec and status; one that does not read back is
/// reported and skipped, so it cannot keep the others from serving.
fn decoded(key: &FunctionKey, record: &crate::store::Record) -> Option<(FunctionSpec, FunctionStatus)> {
    let spec = serde_json::from_value::<FunctionSpec>(record.spec.clone());
    let status = serde_json::from_value::<FunctionStatus>(record.status.clone());
    match (spec, status) {
        (Ok(spec), Ok(status)) => Some((spec, status)),
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!(function = %key, error = %e, "not serving a stored function that cannot be read; delete it and create it again");
            None
        }
    }
}
