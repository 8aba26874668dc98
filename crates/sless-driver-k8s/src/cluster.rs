//! The driver's calls to the API server, each one request: server-side
//! apply (field manager [`MANAGER`]), deletes that do not mind a missing
//! object, the scale subresource, and the one-time preparation of a
//! function namespace and a function's anchor.
//!
//! What was prepared is remembered ([`Prepared`]): the namespace, its
//! NetworkPolicy and Secret copies once per namespace, the anchor once per
//! function, so a new version costs two applies. A call that finds a
//! remembered object gone forgets it (see [`Cluster::forget`]).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde::Serialize;
use sless_driver::{DriverError, FunctionKey};

use crate::names::{self, MANAGER};
use crate::objects::{self, Owner};
use crate::settings::KubeSettings;

/// The API server as the driver uses it.
pub struct Cluster {
    pub client: Client,
    pub settings: KubeSettings,
    prepared: Mutex<Prepared>,
}

/// What this replica has made sure of already.
#[derive(Default)]
struct Prepared {
    namespaces: HashSet<String>,
    anchors: HashMap<FunctionKey, Owner>,
}

impl Cluster {
    pub fn new(client: Client, settings: KubeSettings) -> Cluster {
        Cluster {
            client,
            settings,
            prepared: Mutex::new(Prepared::default()),
        }
    }

    /// The API of `K` in `namespace`.
    pub fn api<K>(&self, namespace: &str) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Server-side apply of `object` (forced: sless owns its fields).
    pub async fn apply<K>(&self, api: &Api<K>, object: &K) -> Result<K, DriverError>
    where
        K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
        <K as Resource>::DynamicType: Default,
    {
        let name = object.meta().name.clone().unwrap_or_default();
        api.patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(object))
            .await
            .map_err(|e| unavailable(&format!("applying {} {name}", K::kind(&Default::default())), e))
    }

    /// Deletes `name`; one already gone is not an error.
    pub async fn delete<K>(&self, api: &Api<K>, name: &str, params: &DeleteParams) -> Result<(), DriverError>
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
        <K as Resource>::DynamicType: Default,
    {
        match api.delete(name, params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
            Err(e) => Err(unavailable(
                &format!("deleting {} {name}", K::kind(&Default::default())),
                e,
            )),
        }
    }

    /// The namespace of `key`'s functions made ready for its pods (once),
    /// and the anchor that owns the function's objects.
    pub async fn prepare(&self, key: &FunctionKey) -> Result<Owner, DriverError> {
        let namespace = names::function_namespace(&key.namespace);
        let known = {
            let prepared = self.prepared.lock().unwrap();
            (
                prepared.namespaces.contains(&namespace),
                prepared.anchors.get(key).cloned(),
            )
        };
        if let (true, Some(owner)) = &known {
            return Ok(owner.clone());
        }
        if !known.0 {
            self.prepare_namespace(&key.namespace).await?;
            self.prepared.lock().unwrap().namespaces.insert(namespace.clone());
        }
        let anchor = self
            .apply(&self.api::<ConfigMap>(&namespace), &objects::anchor(key))
            .await?;
        let owner = Owner {
            name: names::anchor(key),
            uid: anchor
                .metadata
                .uid
                .ok_or_else(|| DriverError::Internal(format!("the anchor of {key} came back without a uid")))?,
        };
        self.prepared.lock().unwrap().anchors.insert(key.clone(), owner.clone());
        Ok(owner)
    }

    /// The namespace, its NetworkPolicy and copies of the control plane's
    /// Secrets its pods use: the artifact store's read-only credentials
    /// (build Jobs get no credentials, only their grant) and the image pull
    /// Secret when there is one.
    async fn prepare_namespace(&self, namespace: &str) -> Result<(), DriverError> {
        let target = names::function_namespace(namespace);
        self.apply(
            &Api::<Namespace>::all(self.client.clone()),
            &objects::function_namespace(namespace),
        )
        .await?;
        self.apply(
            &self.api::<NetworkPolicy>(&target),
            &objects::network_policy(&self.settings, namespace),
        )
        .await?;
        let copied = std::iter::once(&self.settings.artifact_reader_secret).chain(&self.settings.image_pull_secret);
        for secret in copied {
            let source = self
                .api::<Secret>(&self.settings.control_plane_namespace)
                .get(secret)
                .await
                .map_err(|e| {
                    unavailable(
                        &format!("reading Secret {secret} in {}", self.settings.control_plane_namespace),
                        e,
                    )
                })?;
            let copy = objects::copied_secret(namespace, secret, source.type_, source.data.unwrap_or_default());
            self.apply(&self.api::<Secret>(&target), &copy).await?;
        }
        Ok(())
    }

    /// Forgets what was prepared for `key` (its anchor is gone, or an
    /// apply found its namespace gone): the next call prepares again.
    pub fn forget(&self, key: &FunctionKey, namespace_too: bool) {
        let mut prepared = self.prepared.lock().unwrap();
        prepared.anchors.remove(key);
        if namespace_too {
            prepared.namespaces.remove(&names::function_namespace(&key.namespace));
        }
    }

    /// Replicas of a Deployment now, and the version of its scale.
    pub async fn replicas(&self, namespace: &str, name: &str) -> Result<(i32, Option<String>), DriverError> {
        let scale = self
            .api::<Deployment>(namespace)
            .get_scale(name)
            .await
            .map_err(|e| unavailable(&format!("reading the scale of {name}"), e))?;
        Ok((
            scale.spec.and_then(|s| s.replicas).unwrap_or(0),
            scale.metadata.resource_version,
        ))
    }

    /// Sets a Deployment's replicas through the scale subresource. With
    /// `expected`, only if the scale is still at that resource version
    /// (another replica scaling at the same time wins; `Ok(false)`).
    pub async fn scale(
        &self,
        namespace: &str,
        name: &str,
        replicas: i32,
        expected: Option<&str>,
    ) -> Result<bool, DriverError> {
        let mut patch = serde_json::json!({"spec": {"replicas": replicas}});
        if let Some(version) = expected {
            patch["metadata"] = serde_json::json!({"resourceVersion": version});
        }
        match self
            .api::<Deployment>(namespace)
            .patch_scale(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.is_conflict() => Ok(false),
            Err(e) => Err(unavailable(&format!("scaling {name} to {replicas}"), e)),
        }
    }
}

/// An API call that failed, as the driver reports it.
pub fn unavailable(what: &str, error: kube::Error) -> DriverError {
    DriverError::Unavailable(format!("Kubernetes API: {what}: {error}"))
}

/// Whether an API error says the object is not there.
pub fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.is_not_found())
}
