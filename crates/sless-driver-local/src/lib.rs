//! The local driver, the embedded default: builds in a sandboxed directory,
//! instances as sandboxed runtime processes on this machine, each loaded
//! from a warm generic interpreter. With an object store for artifacts
//! (replicas sharing state), built artifacts are stored there and fetched by
//! the replicas that did not build them.

mod artifacts;
mod builder;
mod cgroup;
mod code_mount;
mod confine;
pub mod frame;
mod launcher;
mod log_budget;
mod netlink;
mod network;
mod owner;
mod pasta;
mod pool;
mod process;
mod room;
mod sandbox;
mod scrap;
pub mod standalone;
pub mod standalone_build;
mod warm;
mod zygote;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use sless_api::Runtime;
use sless_driver::{
    BuildError, BuildJob, Built, Deployment, Driver, DriverError, Fingerprint, FunctionKey, FunctionLoad, Invocation,
    InvocationResult, InvokeError, RunId, VersionRef,
};

pub use confine::IsolationSettings;
pub use launcher::{node_heap_for, shim_version};
pub use network::PrivateEgress;
pub use pool::{PoolSettings, StartFailure};
pub use process::Output;
pub use room::NamespaceLimits;

use self::artifacts::SharedArtifacts;
use self::builder::Builder;
use self::launcher::Launcher;
use self::pool::{FunctionPool, Generation};
use self::process::ShimProcess;
use self::room::Room;
use self::warm::WarmPools;

/// Removes what servers that are gone left on this machine and in
/// `data_dir`: their sandboxes' scratch mounts and slots, their network
/// namespaces and pasta processes. A server does this when it starts; a
/// test harness that kills servers does it after.
pub fn remove_leftovers(data_dir: &Path) {
    launcher::remove_stale_slots(&data_dir.join("slots"));
    network::remove_stale();
}

/// Settings of the local driver.
#[derive(Debug, Clone)]
pub struct LocalSettings {
    pub python: String,
    pub node: String,
    pub npm: String,
    /// Added to the environment of every build (a package index or
    /// registry other than pip's and npm's defaults).
    pub build_env: Vec<(String, String)>,
    /// Most a build writes into its function's directory (see `builder`).
    pub max_build_bytes: u64,
    pub warm_per_runtime: usize,
    /// Fork Python instances from a zygote (see `zygote`).
    pub python_zygote: bool,
    /// Fork Node instances from a zygote per heap size (needs the Python one).
    pub node_zygote: bool,
    pub pool: PoolSettings,
    pub isolation: IsolationSettings,
    /// What one namespace runs at once, every version, draining instances
    /// and job runs included (`room`).
    pub namespace_limits: NamespaceLimits,
}

pub struct LocalDriver {
    launcher: Arc<Launcher>,
    builder: Builder,
    warm: WarmPools,
    /// What each namespace runs.
    room: Arc<Room>,
    /// One pool per deployed version.
    pools: RwLock<HashMap<VersionRef, Arc<FunctionPool>>>,
    /// Functions turned off before (or after) they were deployed.
    disabled: RwLock<HashSet<FunctionKey>>,
    /// The instances of running job runs, for `cancel_run`.
    runs: Mutex<HashMap<RunId, Arc<ShimProcess>>>,
    /// Where artifacts are shared with other replicas, if they are.
    shared: Option<SharedArtifacts>,
    settings: LocalSettings,
}

impl LocalDriver {
    /// Starts the driver; with `shared_artifacts`, built artifacts are stored
    /// in that object store and fetched from it where they are missing.
    pub fn start(
        data_dir: &Path,
        settings: LocalSettings,
        shared_artifacts: Option<Arc<dyn object_store::ObjectStore>>,
    ) -> anyhow::Result<LocalDriver> {
        frame::set_max_frame(settings.pool.max_response_bytes);
        let launcher = Arc::new(Launcher::new(
            data_dir,
            settings.python.clone(),
            settings.node.clone(),
            &settings.isolation,
            settings.python_zygote,
            settings.node_zygote,
        )?);
        let builder = Builder::new(
            data_dir.join("artifacts"),
            launcher.clone(),
            settings.python.clone(),
            settings.npm.clone(),
            settings.build_env.clone(),
            settings.max_build_bytes,
        )?;
        let warm = WarmPools::start(settings.warm_per_runtime, launcher.clone());
        tracing::info!(
            sandbox = if launcher.sandbox.isolated() { "bubblewrap" } else { "rlimits only" },
            shim_version = %shim_version(),
            "local driver started"
        );
        Ok(LocalDriver {
            launcher,
            builder,
            warm,
            room: Room::new(settings.namespace_limits),
            pools: RwLock::new(HashMap::new()),
            disabled: RwLock::new(Default::default()),
            runs: Mutex::new(HashMap::new()),
            shared: shared_artifacts.map(SharedArtifacts::new),
            settings,
        })
    }

    fn pool(&self, target: &VersionRef) -> Result<Arc<FunctionPool>, InvokeError> {
        let pool = self.pools.read().unwrap().get(target).cloned();
        pool.ok_or_else(|| InvokeError::NotDeployed(target.clone()))
    }

    /// The version's pool, made on its first deploy.
    fn pool_for(&self, deployment: &Deployment) -> Arc<FunctionPool> {
        let mut pools = self.pools.write().unwrap();
        pools
            .entry(deployment.version_ref())
            .or_insert_with(|| {
                let pool = FunctionPool::new(
                    deployment.version_ref(),
                    self.launcher.clone(),
                    self.warm
                        .for_function(deployment.spec.runtime, deployment.spec.memory_mb),
                    self.room.clone(),
                    self.settings.pool.clone(),
                );
                if self.disabled.read().unwrap().contains(&deployment.key) {
                    pool.set_enabled(false);
                }
                pool
            })
            .clone()
    }
}

#[async_trait]
impl Driver for LocalDriver {
    async fn build(&self, job: BuildJob) -> Result<Built, BuildError> {
        let artifact = Fingerprint::of(job.runtime, &shim_version(), &job.code_hash);
        let mut built = self.builder.build(job, artifact).await?;
        if let Some(shared) = &self.shared {
            let dir = self.builder.artifact_dir(&built.artifact);
            built.digest = Some(
                shared
                    .publish(&dir, &built.artifact)
                    .await
                    .map_err(BuildError::Internal)?,
            );
        }
        Ok(built)
    }

    async fn fingerprint(&self, runtime: Runtime, code_hash: &str) -> Result<Fingerprint, DriverError> {
        Ok(Fingerprint::of(runtime, &shim_version(), code_hash))
    }

    async fn has_artifact(&self, artifact: &Fingerprint) -> Result<bool, DriverError> {
        if self.builder.artifact_dir(artifact).is_dir() {
            return Ok(true);
        }
        match &self.shared {
            Some(shared) => shared.exists(artifact).await.map_err(DriverError::Unavailable),
            None => Ok(false),
        }
    }

    async fn remove_artifact(&self, artifact: &Fingerprint) -> Result<(), DriverError> {
        self.remove_local_copy(artifact).await?;
        match &self.shared {
            Some(shared) => shared.remove(artifact).await,
            None => Ok(()),
        }
    }

    async fn artifact_bytes(&self, artifact: &Fingerprint) -> Result<Option<u64>, DriverError> {
        let dir = self.builder.artifact_dir(artifact);
        if !dir.is_dir() {
            return Ok(None);
        }
        tokio::task::spawn_blocking(move || artifacts::bytes_under(&dir))
            .await
            .map_err(|e| DriverError::Internal(e.to_string()))?
            .map(Some)
            .map_err(|e| DriverError::Internal(format!("measuring artifact {artifact}: {e}")))
    }

    async fn stored_artifacts(&self) -> Result<Vec<(Fingerprint, std::time::SystemTime)>, DriverError> {
        match &self.shared {
            Some(shared) => shared.stored().await,
            None => Ok(Vec::new()),
        }
    }

    async fn remove_local_copy(&self, artifact: &Fingerprint) -> Result<(), DriverError> {
        let dir = self.builder.artifact_dir(artifact);
        // The digest beside it goes too (a later build stores its own
        // tarball).
        let _ = tokio::fs::remove_file(format!("{}.sha256", dir.display())).await;
        // Instances that mounted it keep it until they end (code_mount.rs);
        // those it was linked into hold hard links of their own.
        let failed = |e: std::io::Error| DriverError::Internal(format!("removing artifact {artifact}: {e}"));
        match self.launcher.holds.retire(&dir, &self.builder.retired_dir()) {
            Ok(Some(aside)) => tokio::fs::remove_dir_all(&aside).await.map_err(failed),
            Ok(None) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(failed(e)),
        }
    }

    async fn local_artifacts(&self) -> Result<Vec<Fingerprint>, DriverError> {
        let dir = self.builder.artifacts_dir.clone();
        let failed = move |e: std::io::Error| DriverError::Internal(format!("listing {}: {e}", dir.display()));
        let mut found = Vec::new();
        let mut entries = tokio::fs::read_dir(&self.builder.artifacts_dir)
            .await
            .map_err(&failed)?;
        while let Some(entry) = entries.next_entry().await.map_err(&failed)? {
            // Hidden: builds, fetches and retired artifacts (the builder's own).
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if !name.starts_with('.') && entry.file_type().await.map_err(&failed)?.is_dir() {
                found.push(Fingerprint::from_stored(name));
            }
        }
        Ok(found)
    }

    async fn deploy(&self, deployment: Deployment) -> Result<(), DriverError> {
        let dir = self.builder.artifact_dir(&deployment.artifact);
        if !dir.is_dir() {
            match (&self.shared, &deployment.digest) {
                (Some(shared), Some(digest)) => shared
                    .fetch(&dir, &deployment.artifact, digest)
                    .await
                    .map_err(DriverError::Unavailable)?,
                _ => {
                    return Err(DriverError::Unavailable(format!(
                        "artifact {} is not on this machine and was not shared",
                        deployment.artifact
                    )))
                }
            }
        }
        let pool = self.pool_for(&deployment);
        let generation = Generation {
            version: deployment.version,
            artifact_dir: self.builder.artifact_dir(&deployment.artifact),
            spec: deployment.spec,
            secrets: deployment.secrets,
        };
        let loaded = if deployment.verify {
            match pool.preload(&generation).await {
                Ok(process) => Some(process),
                Err(StartFailure::Load(error)) => return Err(DriverError::LoadFailed(error)),
                Err(StartFailure::Start(error)) => return Err(DriverError::Unavailable(error)),
            }
        } else {
            None
        };
        pool.set_generation(generation, loaded);
        Ok(())
    }

    async fn retire(&self, version: &VersionRef) -> Result<(), DriverError> {
        let retired = self.pools.write().unwrap().remove(version);
        if let Some(pool) = retired {
            pool.retire();
        }
        Ok(())
    }

    async fn set_enabled(&self, key: &FunctionKey, enabled: bool) -> Result<(), DriverError> {
        {
            let mut disabled = self.disabled.write().unwrap();
            if enabled {
                disabled.remove(key);
            } else {
                disabled.insert(key.clone());
            }
        }
        let pools: Vec<_> = self
            .pools
            .read()
            .unwrap()
            .iter()
            .filter(|(target, _)| &target.key == key)
            .map(|(_, pool)| pool.clone())
            .collect();
        for pool in pools {
            pool.set_enabled(enabled);
        }
        Ok(())
    }

    async fn invoke(&self, target: &VersionRef, invocation: &Invocation) -> Result<InvocationResult, InvokeError> {
        let pool = self.pool(target)?;
        let (lease, cold_start) = pool.acquire().await?;
        let frame = invocation_frame(invocation, lease.generation.spec.timeout_sec);
        let version = lease.generation.version;
        let output = pool.run(&lease, frame).await?;
        Ok(result(output, cold_start, version))
    }

    async fn run_once(
        &self,
        target: &VersionRef,
        run: &RunId,
        invocation: &Invocation,
    ) -> Result<InvocationResult, InvokeError> {
        let pool = self.pool(target)?;
        let (process, generation) = pool.dedicated().await?;
        // Stops the instance however the run ends; `cancel_run` stops it early.
        struct Registered<'a>(&'a LocalDriver, &'a RunId, Arc<ShimProcess>);
        impl Drop for Registered<'_> {
            fn drop(&mut self) {
                self.0.runs.lock().unwrap().remove(self.1);
                self.2.kill();
            }
        }
        self.runs.lock().unwrap().insert(run.clone(), process.clone());
        let _registered = Registered(self, run, process.clone());
        let frame = invocation_frame(invocation, generation.spec.timeout_sec);
        let output = pool::run_dedicated(&process, &generation, frame, &target.key).await?;
        Ok(result(output, true, generation.version))
    }

    async fn cancel_run(&self, run: &RunId) -> Result<(), DriverError> {
        let process = self.runs.lock().unwrap().remove(run);
        if let Some(process) = process {
            process.stop().await;
        }
        Ok(())
    }

    async fn stats(&self) -> Vec<(VersionRef, FunctionLoad)> {
        let pools = self.pools.read().unwrap();
        let mut counts: Vec<_> = pools.iter().map(|(k, p)| (k.clone(), p.stats())).collect();
        counts.sort_by(|a, b| a.0.cmp(&b.0));
        counts
    }

    async fn remove(&self, key: &FunctionKey) -> Result<(), DriverError> {
        let removed: Vec<_> = {
            let mut pools = self.pools.write().unwrap();
            let versions: Vec<_> = pools.keys().filter(|target| &target.key == key).cloned().collect();
            versions.iter().filter_map(|target| pools.remove(target)).collect()
        };
        // As a retired version's: the calls under way finish, then the
        // instances stop; calls from now on find no version.
        for pool in removed {
            pool.retire();
        }
        Ok(())
    }

    async fn shutdown(&self) {
        self.warm.stop();
        let pools: Vec<_> = self.pools.write().unwrap().drain().map(|(_, p)| p).collect();
        for pool in pools {
            pool.stop_now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Whatever an instance still held (a request in flight past the
        // grace period) is undone now: nothing stays mounted or named.
        self.launcher.release();
    }
}

fn result(output: Output, cold_start: bool, version: u64) -> InvocationResult {
    InvocationResult {
        status: output.status,
        headers: output.headers,
        body: output.body,
        logs: output.logs,
        logs_truncated: output.logs_truncated,
        cold_start,
        version,
    }
}

/// The INVOKE frame (runtimes/PROTOCOL.md), its id still to be set; a zero
/// timeout leaves the deadline to the pool's own timeout.
pub fn invocation_frame(invocation: &Invocation, timeout_sec: u32) -> bytes::BytesMut {
    /// Serializes the headers as a JSON object.
    struct Headers<'a>(&'a [(String, String)]);
    impl serde::Serialize for Headers<'_> {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.collect_map(self.0.iter().map(|(k, v)| (k, v)))
        }
    }
    /// Empty fields are left out: the shims read them as empty, and every
    /// key costs the shim a parse (a third of the head's decoding time in
    /// Python for a GET without path and query).
    #[derive(serde::Serialize)]
    struct Head<'a> {
        kind: &'a str,
        request_id: &'a str,
        method: &'a str,
        #[serde(skip_serializing_if = "str::is_empty")]
        path: &'a str,
        #[serde(skip_serializing_if = "str::is_empty")]
        query: &'a str,
        headers: Headers<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        event: &'a Option<serde_json::Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        deadline_ms: Option<i64>,
    }
    let head = Head {
        kind: invocation.kind.for_handler(),
        request_id: &invocation.request_id,
        method: &invocation.method,
        path: &invocation.path,
        query: &invocation.query,
        headers: Headers(&invocation.headers),
        event: &invocation.event,
        deadline_ms: (timeout_sec > 0).then(|| chrono::Utc::now().timestamp_millis() + i64::from(timeout_sec) * 1000),
    };
    frame::encode_with_head(frame::kind::INVOKE, &head, &invocation.body)
}
