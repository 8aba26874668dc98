//! [`KubeDriver`]: the [`Driver`] of the cluster shape on a `kube::Client`.
//! Every replica of `sless server` holds one; what they share lives in the
//! cluster (Deployments, their scale, Jobs) and the object store
//! (artifacts), so replicas applying the same version apply the same
//! objects, and a scale from zero by two replicas at once is one scale.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::Deployment as KubeDeployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::api::{DeleteParams, ListParams};
use kube::Client;
use object_store::signer::Signer;
use sless_api::Runtime;
use sless_driver::{
    BuildError, BuildJob, Built, Deployment, Driver, DriverError, Fingerprint, FunctionKey, FunctionLoad, Invocation,
    InvocationResult, InvokeError, RunId, SecretValues, VersionRef,
};

use crate::artifacts::Artifacts;
use crate::cluster::{unavailable, Cluster};
use crate::endpoint_cache::EndpointCache;
use crate::gateway::{Serving, ServingSettings};
use crate::names::{self, label};
use crate::objects::{self, CodeSource, InstanceInput, SecretMounts};
use crate::runs::Runs;
use crate::settings::{BuildMode, KubeSettings};

/// The Kubernetes driver.
pub struct KubeDriver {
    cluster: Arc<Cluster>,
    artifacts: Artifacts,
    /// Presigns the URLs of each build's grant.
    signer: Arc<dyn Signer>,
    serving: ServingSettings,
    /// Ready pods of every version, watched (unless turned off).
    endpoints: Option<Arc<EndpointCache>>,
    /// The versions this replica serves.
    versions: Arc<RwLock<HashMap<VersionRef, Arc<Serving>>>>,
    /// Functions turned off (before or after they were deployed).
    disabled: RwLock<HashSet<FunctionKey>>,
    runs: Runs,
    /// The warm pools (None: `SLESS_K8S_WARM_PODS=0`).
    warm: Option<Arc<crate::warm::WarmPods>>,
}

impl KubeDriver {
    /// A driver on `client`, with artifacts in `store`; `signer` presigns
    /// URLs for keys of `store` (the grants of build pods).
    pub fn new(
        client: Client,
        settings: KubeSettings,
        serving: ServingSettings,
        store: Arc<dyn object_store::ObjectStore>,
        signer: Arc<dyn Signer>,
    ) -> KubeDriver {
        sless_driver_local::frame::set_max_frame(serving.max_response_bytes);
        let endpoints = serving.watch_endpoints.then(|| EndpointCache::watch(client.clone()));
        let artifacts = Artifacts::new(store, settings.max_build_mb);
        let cluster = Arc::new(Cluster::new(client, settings));
        let versions = Arc::new(RwLock::new(HashMap::new()));
        if let Some(idle) = serving.idle_timeout {
            crate::idle::spawn(cluster.clone(), versions.clone(), idle);
        }
        if let Some(every) = serving.scale_every {
            crate::autoscale::spawn(cluster.clone(), versions.clone(), every);
        }
        let warm = serving
            .warm
            .filter(|pool| pool.pods > 0 && cluster.settings.build == crate::BuildMode::Artifact)
            .map(|pool| Arc::new(crate::warm::WarmPods::new(cluster.clone(), pool, signer.clone())));
        if let Some(warm) = &warm {
            crate::warm::spawn_sweeper(warm, serving.start_timeout);
        }
        KubeDriver {
            warm,
            endpoints,
            cluster,
            artifacts,
            signer,
            serving,
            versions,
            disabled: RwLock::new(HashSet::new()),
            runs: Runs::default(),
        }
    }

    /// A client from the kubeconfig (`KUBECONFIG`, `~/.kube/config`) or,
    /// in a pod, its service account; the error says which were tried.
    pub async fn infer_client() -> Result<Client, String> {
        let config = kube::Config::infer().await.map_err(|e| {
            format!(
                "SLESS_DRIVER=kubernetes needs a cluster: no kubeconfig (KUBECONFIG or ~/.kube/config) \
                 and no in-cluster service account ({e})"
            )
        })?;
        Client::try_from(config).map_err(|e| format!("SLESS_DRIVER=kubernetes: the Kubernetes client: {e}"))
    }

    /// Applies the function's Secret with the values `deployment` uses
    /// (none: nothing applied); what its pods are to mount of it.
    async fn apply_secrets(
        &self,
        deployment: &Deployment,
        owner: &objects::Owner,
    ) -> Result<SecretMounts, DriverError> {
        let key = &deployment.key;
        if deployment.secrets == SecretValues::default() {
            return Ok(SecretMounts::default());
        }
        let applied = self
            .cluster
            .apply(
                &self.cluster.api::<Secret>(&names::function_namespace(&key.namespace)),
                &objects::function_secret(key, &deployment.secrets, owner),
            )
            .await?;
        let revision = applied.metadata.resource_version.unwrap_or_default();
        Ok(SecretMounts::of(key, &deployment.secrets, &revision))
    }

    fn serving(&self, target: &VersionRef) -> Result<Arc<Serving>, InvokeError> {
        self.versions
            .read()
            .unwrap()
            .get(target)
            .cloned()
            .ok_or_else(|| InvokeError::NotDeployed(target.clone()))
    }

    /// The replicas a version should have now that it is (re)deployed:
    /// none when off, the pinned count, else at least its minimum (and one
    /// to verify on), keeping what the scaler has added.
    fn replicas(&self, deployment: &Deployment, current: i32) -> i32 {
        let spec = &deployment.spec;
        if self.disabled.read().unwrap().contains(&deployment.key) {
            return 0;
        }
        let floor = i32::try_from(spec.min_instances)
            .unwrap_or(i32::MAX)
            .max(i32::from(deployment.verify));
        match spec.replicas {
            Some(pinned) => i32::try_from(pinned).unwrap_or(i32::MAX),
            None => current.max(floor),
        }
    }
}

#[async_trait]
impl Driver for KubeDriver {
    async fn build(&self, job: BuildJob) -> Result<Built, BuildError> {
        let artifact = Fingerprint::of(job.runtime, &self.cluster.settings.image_tag, &job.code_hash);
        crate::builds::build(
            &self.cluster,
            &self.artifacts,
            &self.signer,
            self.serving.poll,
            job,
            artifact,
        )
        .await
    }

    /// The runtime image's tag names the shims (`{version}-{shim digest}`):
    /// a new one means a rebuild.
    async fn fingerprint(&self, runtime: Runtime, code_hash: &str) -> Result<Fingerprint, DriverError> {
        Ok(Fingerprint::of(runtime, &self.cluster.settings.image_tag, code_hash))
    }

    async fn has_artifact(&self, artifact: &Fingerprint) -> Result<bool, DriverError> {
        Ok(self.artifacts.digest(artifact).await?.is_some())
    }

    async fn remove_artifact(&self, artifact: &Fingerprint) -> Result<(), DriverError> {
        self.artifacts.remove(artifact).await
    }

    async fn artifact_bytes(&self, artifact: &Fingerprint) -> Result<Option<u64>, DriverError> {
        Ok(self.artifacts.digest(artifact).await?.map(|(_, bytes)| bytes))
    }

    async fn stored_artifacts(&self) -> Result<Vec<(Fingerprint, std::time::SystemTime)>, DriverError> {
        self.artifacts.stored().await
    }

    async fn deploy(&self, deployment: Deployment) -> Result<(), DriverError> {
        let key = &deployment.key;
        let digest = deployment.digest.clone().ok_or_else(|| {
            DriverError::Unavailable(format!(
                "artifact {} is not in the object store, where pods fetch it",
                deployment.artifact
            ))
        })?;
        let code = match self.cluster.settings.build {
            BuildMode::Artifact => CodeSource::Artifact {
                fingerprint: deployment.artifact.to_string(),
                digest,
            },
            BuildMode::Image => {
                CodeSource::Image(crate::images::ensure(&self.cluster, self.serving.poll, &deployment, &digest).await?)
            }
        };
        let owner = self.cluster.prepare(key).await?;
        let secrets = self.apply_secrets(&deployment, &owner).await?;
        let input = InstanceInput {
            key,
            version: deployment.version,
            spec: &deployment.spec,
            code: &code,
            secrets: &secrets,
        };
        let namespace = names::function_namespace(&key.namespace);
        let name = names::version_object(key, deployment.version);
        let target = deployment.version_ref();
        let before = self.versions.read().unwrap().get(&target).cloned();
        // Replicas are left out of the apply: the scale subresource owns them.
        self.cluster
            .apply(
                &self.cluster.api::<KubeDeployment>(&namespace),
                &objects::deployment(&self.cluster.settings, input, None, &owner),
            )
            .await?;
        self.cluster
            .apply(
                &self.cluster.api::<Service>(&namespace),
                &objects::service(input, &owner),
            )
            .await?;
        let (current, _) = self.cluster.replicas(&namespace, &name).await?;
        let wanted = self.replicas(&deployment, current);
        if wanted != current {
            self.cluster.scale(&namespace, &name, wanted, None).await?;
        }
        if deployment.verify && wanted > 0 {
            let waited = crate::rollout::wait(
                &self.cluster,
                key,
                deployment.version,
                self.serving.poll,
                self.serving.start_timeout,
            )
            .await;
            if let Err(e) = waited {
                // Nothing changes: a version that never served is taken
                // away again, one that did gets its spec back.
                match before {
                    None => {
                        let _ = self.retire(&target).await;
                    }
                    Some(before) => {
                        let previous = InstanceInput {
                            key,
                            version: deployment.version,
                            spec: &before.spec,
                            code: &before.code,
                            secrets: &before.secrets,
                        };
                        let restored = self
                            .cluster
                            .apply(
                                &self.cluster.api::<KubeDeployment>(&namespace),
                                &objects::deployment(&self.cluster.settings, previous, None, &owner),
                            )
                            .await;
                        if let Err(restore) = restored {
                            tracing::error!(function = %target, error = %restore, "restoring the spec that served");
                        }
                    }
                }
                return Err(e);
            }
        }
        let enabled = !self.disabled.read().unwrap().contains(key);
        let serving = Arc::new(
            Serving::new(
                target.clone(),
                deployment.spec,
                code,
                secrets,
                enabled,
                self.endpoints.clone(),
                self.serving.max_queue,
            )
            .with_warm(self.warm.clone()),
        );
        if let Some(warm) = self.warm.clone() {
            // The pool is there before this version's first cold start.
            let runtime = serving.spec.runtime;
            tokio::spawn(async move {
                if let Err(e) = warm.ensure(runtime).await {
                    tracing::warn!(error = %e, "applying the warm pool");
                }
            });
        }
        self.versions.write().unwrap().insert(target, serving);
        Ok(())
    }

    async fn retire(&self, version: &VersionRef) -> Result<(), DriverError> {
        if let Some(serving) = self.versions.write().unwrap().remove(version) {
            serving.retire();
        }
        let namespace = names::function_namespace(&version.key.namespace);
        let name = names::version_object(&version.key, version.version);
        self.cluster
            .delete(
                &self.cluster.api::<KubeDeployment>(&namespace),
                &name,
                &DeleteParams::background(),
            )
            .await?;
        self.cluster
            .delete(
                &self.cluster.api::<Service>(&namespace),
                &name,
                &DeleteParams::background(),
            )
            .await
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
        let serving: HashMap<u64, Arc<Serving>> = self
            .versions
            .read()
            .unwrap()
            .iter()
            .filter(|(target, _)| &target.key == key)
            .map(|(target, serving)| (target.version, serving.clone()))
            .collect();
        for version in serving.values() {
            version.set_enabled(enabled);
        }
        // Every version in the cluster, deployed by this replica or not.
        let namespace = names::function_namespace(&key.namespace);
        let selector = format!(
            "{}={},{}={},{}=instance",
            label::NAMESPACE,
            key.namespace,
            label::FUNCTION,
            key.name,
            label::COMPONENT
        );
        let deployments = self
            .cluster
            .api::<KubeDeployment>(&namespace)
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| unavailable(&format!("listing the Deployments of {key}"), e))?;
        for deployment in deployments.items {
            let Some(name) = deployment.metadata.name.as_deref() else {
                continue;
            };
            let version = deployment
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(label::VERSION))
                .and_then(|v| v.parse::<u64>().ok());
            let spec = version.and_then(|v| serving.get(&v)).map(|s| &s.spec);
            let current = deployment.spec.replicas.unwrap_or(0);
            // Back on: the pinned count, else at least the minimum (zero
            // wakes on the first call); what the scaler added stays.
            let wanted = match (enabled, spec) {
                (false, _) => 0,
                (true, Some(spec)) => match spec.replicas {
                    Some(pinned) => i32::try_from(pinned).unwrap_or(i32::MAX),
                    None => current.max(i32::try_from(spec.min_instances).unwrap_or(i32::MAX)),
                },
                // A version this replica does not serve: its own deploy scales it.
                (true, None) => current,
            };
            if wanted != current {
                self.cluster.scale(&namespace, name, wanted, None).await?;
            }
        }
        Ok(())
    }

    async fn invoke(&self, target: &VersionRef, invocation: &Invocation) -> Result<InvocationResult, InvokeError> {
        self.serving(target)?
            .invoke(&self.cluster, &self.serving, invocation)
            .await
    }

    async fn run_once(
        &self,
        target: &VersionRef,
        run: &RunId,
        invocation: &Invocation,
    ) -> Result<InvocationResult, InvokeError> {
        let serving = self.serving(target)?;
        self.runs
            .run_once(&self.cluster, self.serving.poll, &serving, run, invocation)
            .await
    }

    async fn cancel_run(&self, run: &RunId) -> Result<(), DriverError> {
        self.runs.cancel(&self.cluster, self.serving.poll, run).await
    }

    async fn stats(&self) -> Vec<(VersionRef, FunctionLoad)> {
        let versions = self.versions.read().unwrap();
        let mut loads: Vec<_> = versions.iter().map(|(t, s)| (t.clone(), s.load())).collect();
        loads.sort_by(|a, b| a.0.cmp(&b.0));
        loads
    }

    /// Deleting the anchor deletes everything it owns (Deployments,
    /// Services, build and run Jobs) through the garbage collector.
    async fn remove(&self, key: &FunctionKey) -> Result<(), DriverError> {
        self.versions.write().unwrap().retain(|target, serving| {
            let keep = &target.key != key;
            if !keep {
                serving.retire();
            }
            keep
        });
        self.disabled.write().unwrap().remove(key);
        let namespace = names::function_namespace(&key.namespace);
        self.cluster
            .delete(
                &self.cluster.api::<ConfigMap>(&namespace),
                &names::anchor(key),
                &DeleteParams::foreground(),
            )
            .await?;
        self.cluster.forget(key, false);
        if self.cluster.settings.build == BuildMode::Image {
            crate::images::forget(&self.cluster, key).await?;
        }
        Ok(())
    }

    /// Pods keep serving the other replicas: nothing in the cluster stops.
    async fn shutdown(&self) {
        self.versions.write().unwrap().clear();
    }
}
