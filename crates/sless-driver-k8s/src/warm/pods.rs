//! Claiming and specializing a generic pod. A claim is a label patch
//! conditional on the pod's resourceVersion (two replicas cannot both get
//! one pod: the second patch is refused with 409); its new labels take it
//! out of its Deployment's selector, so the ReplicaSet makes a generic
//! pod in its place, as Fission's pool manager does. The claimed pod is
//! told its function (`POST /specialize` with the pool's token and a
//! presigned GET of the artifact, valid for a minute) and serves it for
//! good; it is deleted once the version's own pod is ready (or after the
//! start timeout), when calls go to the version's Service again.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use object_store::path::Path as Key;
use object_store::signer::{Method, Signer};
use sless_api::Runtime;
use sless_driver::{DriverError, Fingerprint};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::OnceCell;

use super::request::{Specialization, SPECIALIZE_PATH};
use crate::cluster::{unavailable, Cluster};
use crate::objects::{
    self, WarmPool, CLAIMED_AT, CLAIMED_FOR, FRAME_PORT, READY_PORT, WARM_NAMESPACE, WARM_RUNTIME, WARM_STATE,
    WARM_TOKEN_KEY, WARM_TOKEN_SECRET,
};

/// How long a specialization may take (fetch, unpack, import).
const SPECIALIZE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the presigned artifact URL lasts.
const URL_VALID_FOR: Duration = Duration::from_secs(60);
/// Largest answer read from a generic pod's endpoint.
const MAX_ANSWER_BYTES: u64 = 64 * 1024;

/// The warm pools as one replica uses them.
pub struct WarmPods {
    cluster: Arc<Cluster>,
    pool: WarmPool,
    signer: Arc<dyn Signer>,
    /// The runtimes whose pool this replica has applied.
    ensured: Mutex<HashSet<Runtime>>,
    token: OnceCell<String>,
}

/// A generic pod this replica claimed and specialized for one version.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub name: String,
    /// Its frame port.
    pub addr: SocketAddr,
    /// Its readiness port, where it takes its specialization.
    pub ready: SocketAddr,
}

/// What a version needs to take a generic pod.
pub struct Wanted<'a> {
    pub namespace: &'a str,
    pub function: &'a str,
    pub version: u64,
    /// `{function namespace}.{version object}`, the claim's label.
    pub claimed_for: String,
    pub spec: &'a sless_api::FunctionSpec,
    pub fingerprint: &'a str,
    pub digest: &'a str,
}

impl WarmPods {
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    pub fn new(cluster: Arc<Cluster>, pool: WarmPool, signer: Arc<dyn Signer>) -> WarmPods {
        WarmPods {
            cluster,
            pool,
            signer,
            ensured: Mutex::new(HashSet::new()),
            token: OnceCell::new(),
        }
    }

    /// Whether a version of this spec may take a generic pod: memory
    /// within the pool's (functions above take the normal path).
    pub fn fits(&self, spec: &sless_api::FunctionSpec) -> bool {
        spec.memory_mb <= self.pool.memory_mb
    }

    /// Applies the warm namespace, its policy, token and `runtime`'s
    /// generic Deployment, once per replica and runtime.
    pub async fn ensure(&self, runtime: Runtime) -> Result<(), DriverError> {
        if self.ensured.lock().unwrap().contains(&runtime) {
            return Ok(());
        }
        let cluster = &self.cluster;
        cluster
            .apply(
                &Api::<Namespace>::all(cluster.client.clone()),
                &objects::warm_namespace(),
            )
            .await?;
        cluster
            .apply(
                &cluster.api::<NetworkPolicy>(WARM_NAMESPACE),
                &objects::warm_network_policy(&cluster.settings),
            )
            .await?;
        self.token().await?;
        cluster
            .apply(
                &cluster.api::<Deployment>(WARM_NAMESPACE),
                &objects::warm_deployment(&cluster.settings, runtime, self.pool),
            )
            .await?;
        self.ensured.lock().unwrap().insert(runtime);
        Ok(())
    }

    /// The pool's token: the Secret's, made here with a random one when
    /// there is none (a replica that loses the race reads the winner's).
    async fn token(&self) -> Result<&String, DriverError> {
        self.token
            .get_or_try_init(|| async {
                let api = self.cluster.api::<Secret>(WARM_NAMESPACE);
                let fresh = objects::warm_token_secret(&random_token()?);
                match api.create(&PostParams::default(), &fresh).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 409 => {}
                    Err(e) => return Err(unavailable("making the warm pool's token", e)),
                }
                let secret = api
                    .get(WARM_TOKEN_SECRET)
                    .await
                    .map_err(|e| unavailable("reading the warm pool's token", e))?;
                let from_data = secret
                    .data
                    .as_ref()
                    .and_then(|d| d.get(WARM_TOKEN_KEY))
                    .and_then(|v| String::from_utf8(v.0.clone()).ok());
                let from_string = secret.string_data.as_ref().and_then(|d| d.get(WARM_TOKEN_KEY)).cloned();
                from_data
                    .or(from_string)
                    .ok_or_else(|| DriverError::Unavailable(format!("Secret {WARM_TOKEN_SECRET} has no token")))
            })
            .await
    }

    /// Claims a ready generic pod of `wanted`'s runtime and specializes it;
    /// `None` when none is ready (the caller takes the normal path). A pod
    /// that fails its specialization is deleted.
    pub async fn take(&self, wanted: &Wanted<'_>) -> Result<Option<Claimed>, DriverError> {
        let runtime = wanted.spec.runtime;
        self.ensure(runtime).await?;
        let token = self.token().await?.clone();
        let Some(claimed) = claim(&self.cluster, runtime, &wanted.claimed_for).await? else {
            return Ok(None);
        };
        let key = Key::from(format!(
            "artifacts/{}/{}.tar.gz",
            Fingerprint::from_stored(wanted.fingerprint),
            wanted.digest
        ));
        let url = self
            .signer
            .signed_url(Method::GET, &key, URL_VALID_FOR)
            .await
            .map_err(|e| DriverError::Unavailable(format!("presigning the artifact's URL: {e}")))?;
        let request = Specialization {
            namespace: wanted.namespace.into(),
            function: wanted.function.into(),
            version: wanted.version,
            runtime: runtime.as_str().into(),
            entrypoint: wanted.spec.entrypoint.clone(),
            artifact_url: url.to_string(),
            digest: wanted.digest.into(),
            concurrency: wanted.spec.concurrency.max(1),
            timeout_sec: wanted.spec.timeout_sec.max(1),
            memory_mb: wanted.spec.memory_mb,
            env: wanted.spec.env.clone().into_iter().collect::<BTreeMap<_, _>>(),
        };
        match specialize(claimed.ready, &token, &request).await {
            Ok(()) => Ok(Some(claimed)),
            Err(reason) => {
                tracing::warn!(pod = %claimed.name, %reason, "a generic pod did not take its function; deleting it");
                remove(&self.cluster, &claimed.name).await;
                Ok(None)
            }
        }
    }
}

/// Deletes a claimed pod (gone already is fine).
pub async fn remove(cluster: &Cluster, name: &str) {
    let api = cluster.api::<Pod>(WARM_NAMESPACE);
    if let Err(e) = cluster.delete(&api, name, &DeleteParams::default()).await {
        tracing::warn!(pod = name, error = %e, "deleting a claimed pod");
    }
}

/// Deletes the claimed pods whose claim is older than `limit`, and
/// says how many. The replica that claims a pod deletes it within the
/// start timeout, so one older than that was left by a replica that died
/// (or lost the API server) first; any replica may delete it (a pod gone
/// already is fine). A claimed pod without a claim time is not one of
/// ours as claimed (every claim writes both in one patch): it goes too.
pub async fn sweep(cluster: &Cluster, limit: Duration) -> Result<usize, DriverError> {
    let api = cluster.api::<Pod>(WARM_NAMESPACE);
    let pods = api
        .list(&ListParams::default().labels(&format!("{WARM_STATE}=claimed")))
        .await
        .map_err(|e| unavailable("listing claimed pods", e))?;
    let now = crate::gateway::now_ms();
    let limit_ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
    let mut removed = 0;
    let deleting = |p: &Pod| p.metadata.deletion_timestamp.is_some();
    for pod in pods
        .items
        .iter()
        .filter(|p| !deleting(p) && abandoned(p, now, limit_ms))
    {
        if let Some(name) = pod.metadata.name.as_deref() {
            tracing::info!(pod = name, "a claimed warm pod outlived its claim; deleting it");
            remove(cluster, name).await;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Claimed `limit_ms` or longer before `now_ms`, or at no known time.
fn abandoned(pod: &Pod, now_ms: u64, limit_ms: u64) -> bool {
    let claimed_at = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CLAIMED_AT))
        .and_then(|ms| ms.parse::<u64>().ok());
    claimed_at.is_none_or(|at| now_ms.saturating_sub(at) >= limit_ms)
}

/// Takes one ready generic pod of `runtime` out of its pool: a label
/// patch conditional on the resourceVersion it was listed at; a pod
/// another replica claimed first is skipped.
async fn claim(cluster: &Cluster, runtime: Runtime, claimed_for: &str) -> Result<Option<Claimed>, DriverError> {
    let api = cluster.api::<Pod>(WARM_NAMESPACE);
    let selector = format!("{WARM_STATE}=generic,{WARM_RUNTIME}={}", runtime.as_str());
    let pods = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| unavailable("listing generic pods", e))?;
    for pod in pods.items.iter().filter(|p| is_ready(p)) {
        let (Some(name), Some(version)) = (pod.metadata.name.as_deref(), pod.metadata.resource_version.as_deref())
        else {
            continue;
        };
        let Some(ip) = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|ip| ip.parse().ok())
        else {
            continue;
        };
        let patch = serde_json::json!({
            "metadata": {
                "resourceVersion": version,
                "labels": { WARM_STATE: "claimed", CLAIMED_FOR: claimed_for },
                "annotations": { CLAIMED_AT: crate::gateway::now_ms().to_string() },
            }
        });
        match api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {
                return Ok(Some(Claimed {
                    name: name.to_string(),
                    addr: SocketAddr::new(ip, port_of(pod, "frames", FRAME_PORT)),
                    ready: SocketAddr::new(ip, port_of(pod, "ready", READY_PORT)),
                }))
            }
            Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => continue,
            Err(e) => return Err(unavailable(&format!("claiming generic pod {name}"), e)),
        }
    }
    Ok(None)
}

/// The instance container's port called `name` (the pod builder's
/// constants unless the pod says otherwise).
fn port_of(pod: &Pod, name: &str, default: u16) -> u16 {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| p.name.as_deref() == Some(name))
        .and_then(|p| u16::try_from(p.container_port).ok())
        .unwrap_or(default)
}

/// Ready, not being deleted, with an address.
fn is_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod.status.as_ref().is_some_and(|s| {
            s.pod_ip.is_some()
                && s.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

/// `POST /specialize` to a generic pod's readiness port (one HTTP/1.1
/// request, `connection: close`); Ok on 200.
async fn specialize(ready: SocketAddr, token: &str, request: &Specialization) -> Result<(), String> {
    let body = serde_json::to_vec(request).map_err(|e| e.to_string())?;
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(ready).await.map_err(|e| e.to_string())?;
        let head = format!(
            "POST {SPECIALIZE_PATH} HTTP/1.1\r\nhost: {ready}\r\nauthorization: Bearer {token}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.map_err(|e| e.to_string())?;
        stream.write_all(&body).await.map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        stream
            .take(MAX_ANSWER_BYTES)
            .read_to_end(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(String::from_utf8_lossy(&answer).into_owned())
    };
    let answer = tokio::time::timeout(SPECIALIZE_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no answer within {}s", SPECIALIZE_TIMEOUT.as_secs()))??;
    let status = answer.split(' ').nth(1).unwrap_or("");
    if status == "200" {
        return Ok(());
    }
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").trim();
    Err(format!("the pod answered {status}: {body}"))
}

/// 32 random bytes in hex, from the kernel.
fn random_token() -> Result<String, DriverError> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| DriverError::Unavailable(format!("reading /dev/urandom: {e}")))?;
    Ok(hex::encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claimed(at: Option<&str>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some("warm-python311-1".into());
        if let Some(at) = at {
            pod.metadata.annotations = Some([(CLAIMED_AT.to_string(), at.to_string())].into());
        }
        pod
    }

    #[test]
    fn a_claim_is_abandoned_once_older_than_the_limit() {
        let limit = 90_000;
        let now = 1_000_000_000;
        assert!(!abandoned(&claimed(Some(&(now - 1_000).to_string())), now, limit));
        assert!(!abandoned(&claimed(Some(&(now - limit + 1).to_string())), now, limit));
        assert!(abandoned(&claimed(Some(&(now - limit).to_string())), now, limit));
        // A claim dated ahead of this replica's clock is not old.
        assert!(!abandoned(&claimed(Some(&(now + 5_000).to_string())), now, limit));
    }

    #[test]
    fn a_claim_without_a_time_is_abandoned() {
        assert!(abandoned(&claimed(None), 1, 90_000));
        assert!(abandoned(&claimed(Some("yesterday")), 1, 90_000));
    }
}
