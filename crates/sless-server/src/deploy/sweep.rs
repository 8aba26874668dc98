//! What nothing uses goes: this machine's artifacts no version uses (every
//! server), and on the leader, what the object store keeps that no version
//! or function uses (uploads, artifacts' tarballs), once an hour old.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::ObjectStoreExt;
use sless_driver::{Fingerprint, FunctionKey};

use super::Deployer;
use crate::store::versions::ANY_CODE;

/// How old something in the object store is before a sweep may take it
/// for unused: an upload is stored before its function says it is
/// building it, and a build's tarball before its version is recorded.
pub(crate) const STORED_GRACE: Duration = Duration::from_secs(3600);

/// How old a key under `builds/` (a Kubernetes build Job's archive, its
/// upload, the copy of it being checked) is before it is a crash's
/// leftover: each goes when its build ends, and a build runs at most for
/// the widest `build_timeout_sec` any server accepts (2 h), after its
/// pod's start allowance (5 min).
pub(crate) const BUILD_LEFTOVER_AGE: Duration = Duration::from_secs(3 * 3600);

/// Which copies of an artifact a sweep removes.
#[derive(Debug, Clone, Copy)]
enum Copies {
    /// This machine's (every server's sweep).
    Local,
    /// Every copy, the object store's too (the leader's).
    All,
}

impl Deployer {
    /// One sweep: at start, then every `SLESS_ARTIFACT_SWEEP_SEC`.
    pub(crate) async fn sweep(&self) {
        self.sweep_artifacts().await;
        if self.cluster.is_leader() {
            self.sweep_store().await;
            self.measure_unsized().await;
        }
    }

    /// On the leader, prunes the functions that keep more versions than
    /// `SLESS_KEEP_VERSIONS` and that are not being built (whose build
    /// prunes when it ends): after an operator lowers it, a function never
    /// built again would otherwise keep them, on disk and in the store.
    /// Not at start, where nothing is pressing (the storage quota already
    /// counts only the versions kept): at each periodic sweep.
    async fn prune_past_keep(&self) {
        if !self.cluster.is_leader() {
            return;
        }
        let functions = match self.store.functions_past(self.versions.keep()).await {
            Ok(functions) => functions,
            Err(e) => return tracing::warn!(error = %e, "cannot read which functions keep too many versions"),
        };
        for (namespace, name) in functions {
            let key = FunctionKey::new(&namespace, &name);
            if self
                .building
                .lock()
                .unwrap()
                .keys()
                .any(|(building, _)| building == &key)
            {
                continue;
            }
            let pruned = match self.load(&key).await {
                Ok(Some((_, status))) => {
                    self.versions
                        .prune(&key, status.version, status.code_hash.as_deref())
                        .await
                }
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = pruned {
                tracing::warn!(function = %key, error = %e, "pruning versions past SLESS_KEEP_VERSIONS failed");
            }
        }
    }

    /// Gives the versions recorded before sizes were (0 bytes, which the
    /// storage quota would not count) what their artifact and upload take,
    /// where they are still there to measure.
    async fn measure_unsized(&self) {
        let versions = match self.store.unsized_versions().await {
            Ok(versions) => versions,
            Err(e) => return tracing::warn!(error = %e, "cannot read the versions without sizes"),
        };
        for mut version in versions {
            let artifact = Fingerprint::from_stored(version.artifact.clone());
            version.artifact_bytes = match self.driver.artifact_bytes(&artifact).await {
                Ok(bytes) => bytes.unwrap_or(0),
                Err(e) => {
                    tracing::warn!(%artifact, error = %e, "cannot measure an artifact");
                    continue;
                }
            };
            let archive = crate::blobs::archive_key(&version.namespace, &version.function, &version.code_hash);
            version.archive_bytes = match self.blobs.head(&archive).await {
                Ok(meta) => meta.size,
                Err(object_store::Error::NotFound { .. }) => 0,
                Err(e) => {
                    tracing::warn!(%archive, error = %e, "cannot measure an upload");
                    continue;
                }
            };
            if version.artifact_bytes + version.archive_bytes == 0 {
                continue;
            }
            if let Err(e) = self.store.set_version_bytes(&version).await {
                tracing::warn!(function = %version.function, version = version.version, error = %e, "recording a version's size failed");
            }
        }
    }

    /// Removes this machine's artifacts that no version uses and no build
    /// under way here makes: at start (a crash between a build and its
    /// record, or a server before this one, which kept failed builds' and
    /// deleted functions'), then every `SLESS_ARTIFACT_SWEEP_SEC` (with
    /// replicas, each keeps its copies of the versions the leader pruned
    /// and of deleted functions until then).
    async fn sweep_artifacts(&self) {
        match self.driver.local_artifacts().await {
            // This machine's copy only: the leader removes the shared one
            // when it prunes or discards, knowing the builds under way.
            Ok(artifacts) => self.remove_unused(artifacts, Copies::Local).await,
            Err(e) => tracing::warn!(error = %e, "cannot list the artifacts on this machine"),
        }
    }

    /// Removes the `copies` of each of `artifacts` that no version uses and
    /// no build under way here makes.
    async fn remove_unused(&self, artifacts: Vec<Fingerprint>, copies: Copies) {
        if artifacts.is_empty() {
            return;
        }
        // Which are used is known for all of them before any goes: a store
        // that cannot tell removes none.
        let used = match self.store.artifacts_in_use().await {
            Ok(used) => used,
            Err(e) => return tracing::warn!(error = %e, "cannot tell which artifacts versions use"),
        };
        for artifact in artifacts.into_iter().filter(|a| !used.contains(a.as_str())) {
            // Looked at last, just before the removal: a build starting
            // here reuses an artifact of its code that is on disk.
            if self.being_built(&artifact).await {
                continue;
            }
            let removed = match copies {
                Copies::Local => self.driver.remove_local_copy(&artifact).await,
                Copies::All => self.driver.remove_artifact(&artifact).await,
            };
            match removed {
                Ok(()) => tracing::info!(%artifact, ?copies, "artifact no version uses removed"),
                Err(e) => tracing::warn!(%artifact, ?copies, error = %e, "removing an artifact no version uses failed"),
            }
        }
    }

    /// Prunes past the kept number, then runs [`Deployer::sweep`], every `every`.
    pub fn start_sweeping(self: &Arc<Self>, every: Duration) {
        crate::periodic::every(self, every, |this| async move {
            this.prune_past_keep().await;
            this.sweep().await;
        });
    }

    /// Whether a build under way here is of the code `artifact` holds (an
    /// artifact is named by its runtime, the shims and the code; the
    /// builds under way are known by their code).
    async fn being_built(&self, artifact: &Fingerprint) -> bool {
        let codes: Vec<String> = self
            .building
            .lock()
            .unwrap()
            .keys()
            .map(|(_, code)| code.clone())
            .collect();
        for code in codes {
            for runtime in [sless_api::Runtime::Python311, sless_api::Runtime::Nodejs20] {
                if self
                    .driver
                    .fingerprint(runtime, &code)
                    .await
                    .is_ok_and(|f| f == *artifact)
                {
                    return true;
                }
            }
        }
        false
    }

    /// Removes, on the leader, what the object store has kept for over
    /// [`STORED_GRACE`] that nothing uses: uploads no version was built
    /// from and no function waits for, serves or rolls out, and the
    /// tarballs of artifacts no version uses and no build under way here
    /// makes. Servers before this one left both (a failed upload's
    /// archive; every tarball they ever published), and so does a crash
    /// between a write and its record.
    async fn sweep_store(&self) {
        let Some(cutoff) = SystemTime::now().checked_sub(STORED_GRACE) else {
            return;
        };
        if let Err(e) = self.sweep_archives(cutoff.into()).await {
            tracing::warn!(error = %e, "sweeping the uploads no version uses failed");
        }
        if let Err(e) = self.sweep_build_leftovers().await {
            tracing::warn!(error = %e, "sweeping what builds left in the object store failed");
        }
        let stored = match self.driver.stored_artifacts().await {
            Ok(stored) => stored,
            Err(e) => return tracing::warn!(error = %e, "cannot list the artifacts in the object store"),
        };
        let stale: Vec<Fingerprint> = stored
            .into_iter()
            .filter(|(_, written)| *written < cutoff)
            .map(|(artifact, _)| artifact)
            .collect();
        self.remove_unused(stale, Copies::All).await;
    }

    /// The keys under `prefix` written before `cutoff`.
    async fn written_before(
        &self,
        prefix: &str,
        cutoff: chrono::DateTime<chrono::Utc>,
    ) -> crate::error::Result<Vec<Path>> {
        let mut stale = Vec::new();
        let mut listing = self.blobs.list(Some(&Path::from(prefix)));
        while let Some(meta) = listing.try_next().await? {
            if meta.last_modified < cutoff {
                stale.push(meta.location);
            }
        }
        Ok(stale)
    }

    /// Deletes what builds left under `builds/` (a server that crashed
    /// while a build Job ran) once [`BUILD_LEFTOVER_AGE`] old: no build
    /// is still under way by then.
    async fn sweep_build_leftovers(&self) -> crate::error::Result<()> {
        let Some(cutoff) = SystemTime::now().checked_sub(BUILD_LEFTOVER_AGE) else {
            return Ok(());
        };
        for location in self.written_before("builds", cutoff.into()).await? {
            self.remove_stored(&location, "what a build left").await;
        }
        Ok(())
    }

    /// Deletes the uploads written before `cutoff` that no version was
    /// built from and no function's status names.
    async fn sweep_archives(&self, cutoff: chrono::DateTime<chrono::Utc>) -> crate::error::Result<()> {
        let stale = self.written_before("archives", cutoff).await?;
        if stale.is_empty() {
            return Ok(());
        }
        let used = self.store.codes_in_use().await?;
        let in_use = |ns: &str, function: &str, code: &str| {
            [code, ANY_CODE]
                .iter()
                .any(|code| used.contains(&(ns.to_string(), function.to_string(), code.to_string())))
        };
        for location in stale {
            // archives/{namespace}/{function}/{code_hash}.zip
            let parts: Vec<String> = location.parts().map(|p| p.as_ref().to_string()).collect();
            let [_, ns, function, file] = parts.as_slice() else {
                continue;
            };
            let Some(code) = file.strip_suffix(".zip") else {
                continue;
            };
            if in_use(ns, function, code) {
                continue;
            }
            self.remove_stored(&location, "an upload no version uses").await;
        }
        Ok(())
    }

    /// Deletes `location` from the object store, logging it as `what`.
    async fn remove_stored(&self, location: &Path, what: &str) {
        match self.blobs.delete(location).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => tracing::info!(%location, "{what}: removed"),
            Err(e) => tracing::warn!(%location, error = %e, "{what}: removing it failed"),
        }
    }
}
