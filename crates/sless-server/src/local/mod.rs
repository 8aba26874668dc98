//! The local driver, the embedded default: builds in a sandboxed directory,
//! instances as sandboxed runtime processes on this machine, each loaded
//! from a warm generic interpreter.

mod builder;
mod frame;
mod launcher;
mod pool;
mod process;
mod sandbox;
mod warm;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use sless_api::Runtime;

pub use launcher::shim_version;
pub use pool::PoolSettings;

use self::builder::Builder;
use self::launcher::Launcher;
use self::pool::{FunctionPool, Generation};
use self::warm::WarmPool;
use crate::driver::{
    BuildError, BuildJob, Built, Deployment, Driver, FunctionKey, Invocation, InvocationResult, InvokeError,
};

/// Settings of the local driver.
#[derive(Debug, Clone)]
pub struct LocalSettings {
    pub python: String,
    pub node: String,
    pub npm: String,
    pub warm_per_runtime: usize,
    pub pool: PoolSettings,
}

pub struct LocalDriver {
    launcher: Arc<Launcher>,
    builder: Builder,
    warm: HashMap<Runtime, Arc<WarmPool>>,
    pools: RwLock<HashMap<FunctionKey, Arc<FunctionPool>>>,
    /// Functions turned off before (or after) they were deployed.
    disabled: RwLock<std::collections::HashSet<FunctionKey>>,
    settings: LocalSettings,
}

impl LocalDriver {
    pub fn start(data_dir: &Path, settings: LocalSettings) -> anyhow::Result<LocalDriver> {
        let launcher = Arc::new(Launcher::new(data_dir, settings.python.clone(), settings.node.clone())?);
        let builder = Builder::new(
            data_dir.join("artifacts"),
            launcher.clone(),
            settings.python.clone(),
            settings.npm.clone(),
        )?;
        let warm = [Runtime::Python311, Runtime::Nodejs20]
            .into_iter()
            .map(|rt| (rt, WarmPool::start(rt, settings.warm_per_runtime, launcher.clone())))
            .collect();
        tracing::info!(
            sandbox = if launcher.sandbox.isolated() { "bubblewrap" } else { "rlimits only" },
            shim_version = %shim_version(),
            "local driver started"
        );
        Ok(LocalDriver {
            launcher,
            builder,
            warm,
            pools: RwLock::new(HashMap::new()),
            disabled: RwLock::new(Default::default()),
            settings,
        })
    }

    fn pool(&self, key: &FunctionKey) -> Option<Arc<FunctionPool>> {
        self.pools.read().unwrap().get(key).cloned()
    }
}

#[async_trait]
impl Driver for LocalDriver {
    async fn build(&self, job: BuildJob) -> Result<Built, BuildError> {
        let artifact = self.artifact_id(job.runtime, &job.code_hash);
        self.builder.build(job, artifact).await
    }

    async fn has_artifact(&self, artifact: &str) -> bool {
        self.builder.artifact_dir(artifact).is_dir()
    }

    fn artifact_id(&self, runtime: Runtime, code_hash: &str) -> String {
        use sha2::{Digest, Sha256};
        let digest = Sha256::new()
            .chain_update(runtime.as_str())
            .chain_update(code_hash)
            .chain_update(shim_version())
            .finalize();
        hex::encode(&digest[..16])
    }

    async fn deploy(&self, deployment: Deployment) {
        let pool = {
            let mut pools = self.pools.write().unwrap();
            pools
                .entry(deployment.key.clone())
                .or_insert_with(|| {
                    FunctionPool::new(
                        deployment.key.clone(),
                        self.launcher.clone(),
                        self.warm[&deployment.spec.runtime].clone(),
                        self.settings.pool.clone(),
                    )
                })
                .clone()
        };
        if self.disabled.read().unwrap().contains(&deployment.key) {
            pool.set_enabled(false);
        }
        pool.set_generation(Generation {
            version: deployment.version,
            artifact_dir: self.builder.artifact_dir(&deployment.artifact),
            spec: deployment.spec,
        });
    }

    async fn set_enabled(&self, key: &FunctionKey, enabled: bool) {
        {
            let mut disabled = self.disabled.write().unwrap();
            if enabled {
                disabled.remove(key);
            } else {
                disabled.insert(key.clone());
            }
        }
        if let Some(pool) = self.pool(key) {
            pool.set_enabled(enabled);
        }
    }

    async fn invoke(&self, key: &FunctionKey, invocation: Invocation) -> Result<InvocationResult, InvokeError> {
        let pool = self.pool(key).ok_or_else(|| InvokeError::NotReady(key.clone()))?;
        let (lease, cold_start) = pool.acquire().await?;
        let frame = invocation_frame(&invocation, lease.instance.generation.spec.timeout_sec);
        let version = lease.instance.generation.version;
        let output = pool::run(&lease, frame, key).await?;
        Ok(InvocationResult {
            status: output.status,
            headers: output.headers,
            body: output.body,
            logs: output.logs,
            logs_truncated: output.logs_truncated,
            cold_start,
            version,
        })
    }

    async fn run_once(&self, key: &FunctionKey, invocation: Invocation) -> Result<InvocationResult, InvokeError> {
        let pool = self.pool(key).ok_or_else(|| InvokeError::NotReady(key.clone()))?;
        let frame = invocation_frame(&invocation, pool.timeout_sec());
        let (output, version) = pool.run_once(frame).await?;
        Ok(InvocationResult {
            status: output.status,
            headers: output.headers,
            body: output.body,
            logs: output.logs,
            logs_truncated: output.logs_truncated,
            cold_start: true,
            version,
        })
    }

    fn stats(&self) -> Vec<(FunctionKey, crate::driver::PoolStats)> {
        let pools = self.pools.read().unwrap();
        let mut counts: Vec<_> = pools.iter().map(|(k, p)| (k.clone(), p.stats())).collect();
        counts.sort_by(|a, b| (&a.0.namespace, &a.0.name).cmp(&(&b.0.namespace, &b.0.name)));
        counts
    }

    async fn remove(&self, key: &FunctionKey) {
        if let Some(pool) = self.pools.write().unwrap().remove(key) {
            pool.remove();
        }
    }

    async fn shutdown(&self) {
        for warm in self.warm.values() {
            warm.stop();
        }
        let pools: Vec<_> = self.pools.write().unwrap().drain().map(|(_, p)| p).collect();
        for pool in pools {
            pool.remove();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The INVOKE frame (runtimes/PROTOCOL.md), its id still to be set; a zero
/// timeout leaves the deadline to the pool's own timeout.
fn invocation_frame(invocation: &Invocation, timeout_sec: u32) -> bytes::BytesMut {
    /// Serializes the headers as a JSON object of lowercase names, repeated
    /// ones joined with ", ", without copying the single ones.
    struct Headers<'a>(&'a axum::http::HeaderMap);
    impl serde::Serialize for Headers<'_> {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.collect_map(self.0.keys().map(|name| {
                let mut values = self
                    .0
                    .get_all(name)
                    .iter()
                    .map(|v| String::from_utf8_lossy(v.as_bytes()));
                let first = values.next().unwrap_or_default();
                let value = match values.next() {
                    None => first,
                    Some(second) => {
                        let mut joined = first.into_owned();
                        for v in std::iter::once(second).chain(values) {
                            joined.push_str(", ");
                            joined.push_str(&v);
                        }
                        joined.into()
                    }
                };
                (name.as_str(), value)
            }))
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
        kind: invocation.kind.as_str(),
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
