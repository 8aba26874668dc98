//! The gateway's side of one deployed version: its ready pods (from the
//! EndpointSlices of its Service), a connection and a concurrency budget
//! per pod, and the invoke path: the least-loaded pod with a free slot
//! takes the call; with every slot taken the call waits (a bounded queue)
//! and asks for one more pod, up to `max_instances`;
//! with no pod ready, the Deployment is scaled from zero (through the scale
//! subresource, idempotent across replicas) and the call waits for a pod
//! within the function's timeout.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sless_api::FunctionSpec;
use sless_driver::{FunctionLoad, Invocation, InvocationResult, InvokeError, VersionRef};
use sless_driver_local::standalone::{Answer, Unanswered};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::cluster::Cluster;
use crate::connection::{InstanceConnection, Lost};
use crate::endpoint_cache::EndpointCache;
use crate::names;
use crate::objects::{CodeSource, SecretMounts};

/// How the gateway waits and queues.
#[derive(Debug, Clone)]
pub struct ServingSettings {
    /// Calls of one version that may wait for a free slot; more get 429.
    pub max_queue: usize,
    /// Largest response body a handler may give (frames above it are refused).
    pub max_response_bytes: usize,
    /// How often a wait asks the API server again (a pod becoming ready, a Job ending).
    pub poll: Duration,
    /// How long a list of ready pods is used before it is listed again.
    pub endpoints_ttl: Duration,
    /// How long a new version's pods may take to become ready (image pull,
    /// fetch, load) when a deploy verifies it.
    pub start_timeout: Duration,
    /// Scale a version to zero once no replica has had a call on it for
    /// this long (None: never).
    pub idle_timeout: Option<Duration>,
    /// Keep every ready pod in a cache fed by a watch of EndpointSlices
    /// (else list a version's pods when its list is older than `endpoints_ttl`).
    pub watch_endpoints: bool,
}

impl Default for ServingSettings {
    fn default() -> Self {
        ServingSettings {
            max_queue: 100,
            max_response_bytes: 6 * 1024 * 1024,
            poll: Duration::from_millis(250),
            endpoints_ttl: Duration::from_secs(1),
            start_timeout: Duration::from_secs(300),
            idle_timeout: Some(Duration::from_secs(300)),
            watch_endpoints: true,
        }
    }
}

/// Time an answer may take beyond the function's timeout (the instance
/// itself answers a timeout first).
pub(crate) const ANSWER_SLACK: Duration = Duration::from_secs(5);

/// One deployed version as this gateway serves it.
pub struct Serving {
    pub target: VersionRef,
    pub spec: FunctionSpec,
    /// What its pods run (a job run's pod runs the same).
    pub code: CodeSource,
    /// The secrets its pods mount (names; the values are in its Secret).
    pub secrets: SecretMounts,
    /// The Kubernetes namespace, and the name of its Deployment and Service.
    namespace: String,
    name: String,
    enabled: AtomicBool,
    /// The watched ready pods of every version, when there is a watch.
    cache: Option<Arc<EndpointCache>>,
    pods: Mutex<Pods>,
    waiting: AtomicUsize,
    /// Calls under way on this replica, and when the last one was (ms since
    /// the epoch; the deploy counts as one), and what was reported of it.
    inflight: AtomicUsize,
    /// A scale-out of this version is being asked for.
    scaling_out: AtomicBool,
    last_call_ms: AtomicU64,
    reported_ms: AtomicU64,
}

#[derive(Default)]
struct Pods {
    listed_at: Option<Instant>,
    /// The cache's generation `ready` was taken at.
    generation: u64,
    ready: Vec<Arc<Pod>>,
}

/// A ready pod: its address, its free slots and its connection.
struct Pod {
    addr: SocketAddr,
    slots: Arc<Semaphore>,
    connection: tokio::sync::Mutex<Option<Arc<InstanceConnection>>>,
}

impl Pod {
    /// The open connection to this pod, made if there is none.
    async fn connection(&self, target: &VersionRef) -> Result<Arc<InstanceConnection>, String> {
        let mut held = self.connection.lock().await;
        if let Some(open) = held.as_ref().filter(|c| c.is_open()) {
            return Ok(open.clone());
        }
        let fresh = Arc::new(InstanceConnection::connect(self.addr, target).await?);
        *held = Some(fresh.clone());
        Ok(fresh)
    }
}

impl Serving {
    pub fn new(
        target: VersionRef,
        spec: FunctionSpec,
        code: CodeSource,
        secrets: SecretMounts,
        enabled: bool,
        cache: Option<Arc<EndpointCache>>,
    ) -> Serving {
        Serving {
            code,
            secrets,
            cache,
            namespace: names::function_namespace(&target.key.namespace),
            name: names::version_object(&target.key, target.version),
            target,
            spec,
            enabled: AtomicBool::new(enabled),
            pods: Mutex::new(Pods::default()),
            waiting: AtomicUsize::new(0),
            inflight: AtomicUsize::new(0),
            scaling_out: AtomicBool::new(false),
            last_call_ms: AtomicU64::new(now_ms()),
            reported_ms: AtomicU64::new(0),
        }
    }

    /// When this replica last had a call on the version (now while one runs).
    pub fn last_call_ms(&self) -> u64 {
        if self.inflight.load(Ordering::Relaxed) > 0 {
            self.last_call_ms.store(now_ms(), Ordering::Relaxed);
        }
        self.last_call_ms.load(Ordering::Relaxed)
    }

    pub fn reported_ms(&self) -> u64 {
        self.reported_ms.load(Ordering::Relaxed)
    }

    pub fn set_reported_ms(&self, ms: u64) {
        self.reported_ms.store(ms, Ordering::Relaxed);
    }

    /// Whether idleness takes this version to zero: autoscaled, no
    /// minimum, enabled.
    pub fn scales_to_zero(&self) -> bool {
        self.spec.replicas.is_none() && self.spec.min_instances == 0 && self.enabled.load(Ordering::Relaxed)
    }

    pub fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::Relaxed);
    }

    pub fn load(&self) -> FunctionLoad {
        FunctionLoad {
            instances: self.pods.lock().unwrap().ready.len(),
            waiting: self.waiting.load(Ordering::Relaxed),
        }
    }

    /// Runs one invocation on a ready pod of this version.
    pub async fn invoke(
        &self,
        cluster: &Cluster,
        settings: &ServingSettings,
        invocation: &Invocation,
    ) -> Result<InvocationResult, InvokeError> {
        let key = &self.target.key;
        let timeout = Duration::from_secs(self.spec.timeout_sec.max(1).into());
        let deadline = Instant::now() + timeout;
        let frame = sless_driver_local::invocation_frame(invocation, self.spec.timeout_sec);
        /// Counts the call as under way until it ends, then as the last one.
        struct Active<'a>(&'a Serving);
        impl Drop for Active<'_> {
            fn drop(&mut self) {
                self.0.last_call_ms.store(now_ms(), Ordering::Relaxed);
                self.0.inflight.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.inflight.fetch_add(1, Ordering::Relaxed);
        let _active = Active(self);
        let mut cold_start = false;
        let mut woken = false;
        loop {
            if !self.enabled.load(Ordering::Relaxed) || self.spec.replicas == Some(0) {
                return Err(InvokeError::Disabled(key.clone()));
            }
            let Some(pod) = self.least_loaded(cluster, settings).await? else {
                if !woken {
                    woken = true;
                    cold_start = true;
                    self.wake(cluster, settings).await?;
                }
                if Instant::now() + settings.poll >= deadline {
                    return Err(InvokeError::StartFailed {
                        key: key.clone(),
                        reason: format!("no pod became ready within {}s", timeout.as_secs()),
                    });
                }
                tokio::time::sleep(settings.poll).await;
                self.pods.lock().unwrap().listed_at = None;
                continue;
            };
            let _slot = match pod.slots.clone().try_acquire_owned() {
                Ok(slot) => slot,
                Err(_) => {
                    if self.waiting.load(Ordering::Relaxed) >= settings.max_queue {
                        return Err(InvokeError::QueueFull(key.clone()));
                    }
                    self.waiting.fetch_add(1, Ordering::Relaxed);
                    self.scale_out(cluster).await;
                    let slot = tokio::time::timeout_at(deadline, pod.slots.clone().acquire_owned()).await;
                    self.waiting.fetch_sub(1, Ordering::Relaxed);
                    match slot {
                        Ok(Ok(slot)) => slot,
                        _ => {
                            return Err(InvokeError::Timeout {
                                key: key.clone(),
                                after: timeout,
                            })
                        }
                    }
                }
            };
            let connection = match pod.connection(&self.target).await {
                Ok(connection) => connection,
                Err(reason) => {
                    tracing::warn!(function = %self.target, pod = %pod.addr, %reason, "a listed pod did not take a connection");
                    self.forget(pod.addr);
                    continue;
                }
            };
            let answer = tokio::time::timeout_at(deadline + ANSWER_SLACK, connection.invoke(frame.clone())).await;
            return match answer {
                Ok(Err(Lost::NotSent(reason))) => {
                    tracing::warn!(function = %self.target, pod = %pod.addr, %reason, "an invocation could not be sent");
                    self.forget(pod.addr);
                    continue;
                }
                Ok(Err(Lost::Broken(_))) | Ok(Ok(Answer::Unanswered(Unanswered::Crashed(_)))) => {
                    self.forget(pod.addr);
                    answered(&self.target, timeout, cold_start, answer.map_err(|_| ()))
                }
                _ => answered(&self.target, timeout, cold_start, answer.map_err(|_| ())),
            };
        }
    }

    /// The ready pod with the most free slots, from the watched cache when
    /// it has changed, else listed again when the list is old; `None` when
    /// no pod is ready.
    async fn least_loaded(
        &self,
        cluster: &Cluster,
        settings: &ServingSettings,
    ) -> Result<Option<Arc<Pod>>, InvokeError> {
        let watched = self.cache.as_ref().map_or(0, |c| c.generation());
        let stale = {
            let pods = self.pods.lock().unwrap();
            if watched > 0 {
                pods.generation != watched
            } else {
                pods.listed_at.is_none_or(|at| at.elapsed() >= settings.endpoints_ttl)
            }
        };
        if stale {
            let cached = self.cache.as_ref().and_then(|c| c.ready(&self.namespace, &self.name));
            let listed = match cached {
                Some(addresses) => Ok(addresses),
                None => crate::endpoints::ready(cluster, &self.namespace, &self.name).await,
            };
            match listed {
                Ok(addresses) => self.replace_pods(addresses, watched),
                Err(e) => {
                    // Serve from the old list while the API server is away.
                    tracing::warn!(function = %self.target, error = %e, "listing ready pods");
                    if self.pods.lock().unwrap().ready.is_empty() {
                        return Err(InvokeError::StartFailed {
                            key: self.target.key.clone(),
                            reason: e.to_string(),
                        });
                    }
                }
            }
        }
        let pods = self.pods.lock().unwrap();
        Ok(pods.ready.iter().max_by_key(|p| p.slots.available_permits()).cloned())
    }

    /// Keeps the pods still listed (with their connections and slots) and adds new ones.
    fn replace_pods(&self, addresses: Vec<SocketAddr>, generation: u64) {
        let mut pods = self.pods.lock().unwrap();
        let old = std::mem::take(&mut pods.ready);
        pods.ready = addresses
            .into_iter()
            .map(|addr| {
                old.iter().find(|p| p.addr == addr).cloned().unwrap_or_else(|| {
                    Arc::new(Pod {
                        addr,
                        slots: Arc::new(Semaphore::new(self.spec.concurrency.max(1) as usize)),
                        connection: tokio::sync::Mutex::new(None),
                    })
                })
            })
            .collect();
        pods.listed_at = Some(Instant::now());
        pods.generation = generation;
    }

    /// Drops a pod that failed until the next listing (or change in the
    /// cache) says it is ready.
    fn forget(&self, addr: SocketAddr) {
        self.pods.lock().unwrap().ready.retain(|p| p.addr != addr);
    }

    /// One pod more, up to `max_instances`, when a call has to wait for a
    /// slot: unless one is on its way already (more replicas asked for
    /// than pods ready), another scale is under way here, or the scale
    /// changed since it was read (another replica scaled it). A failure
    /// only costs the waiting call its chance of a new pod.
    async fn scale_out(&self, cluster: &Cluster) {
        if self.spec.replicas.is_some() || self.scaling_out.swap(true, Ordering::AcqRel) {
            return;
        }
        let ready = self.pods.lock().unwrap().ready.len();
        let most = i32::try_from(self.spec.max_instances).unwrap_or(i32::MAX);
        let scaled = async {
            let (replicas, version) = cluster.replicas(&self.namespace, &self.name).await?;
            if replicas >= most || usize::try_from(replicas).unwrap_or(0) > ready {
                return Ok(None);
            }
            cluster
                .scale(&self.namespace, &self.name, replicas + 1, version.as_deref())
                .await
                .map(|done| done.then_some(replicas + 1))
        };
        match scaled.await {
            Ok(Some(replicas)) => tracing::info!(function = %self.target, replicas, "calls waiting: scaled out"),
            Ok(None) => {}
            Err(e) => tracing::warn!(function = %self.target, error = %e, "scaling out"),
        }
        self.scaling_out.store(false, Ordering::Release);
    }

    /// Scales the Deployment from zero to one pod, unless another replica
    /// (or the scaler) has scaled it already. With idle scaling on, the
    /// waiting call is noted on the Deployment first, so that no other
    /// replica's idle pass takes the new pod away before it answers.
    async fn wake(&self, cluster: &Cluster, settings: &ServingSettings) -> Result<(), InvokeError> {
        let start_failed = |e: sless_driver::DriverError| InvokeError::StartFailed {
            key: self.target.key.clone(),
            reason: e.to_string(),
        };
        if settings.idle_timeout.is_some() {
            crate::idle::report(cluster, self).await.map_err(start_failed)?;
        }
        let (replicas, version) = cluster
            .replicas(&self.namespace, &self.name)
            .await
            .map_err(start_failed)?;
        if replicas == 0 {
            let scaled = cluster
                .scale(&self.namespace, &self.name, 1, version.as_deref())
                .await
                .map_err(start_failed)?;
            tracing::info!(function = %self.target, by_this_replica = scaled, "scaled from zero");
        }
        Ok(())
    }
}

/// The result of an invocation from what came back (`Err` when nothing
/// came back in time).
pub(crate) fn answered(
    target: &VersionRef,
    timeout: Duration,
    cold_start: bool,
    answer: Result<Result<Answer, Lost>, ()>,
) -> Result<InvocationResult, InvokeError> {
    let key = target.key.clone();
    match answer {
        Ok(Ok(Answer::Output(output))) => Ok(InvocationResult {
            status: output.status,
            headers: output.headers,
            body: output.body,
            logs: output.logs,
            logs_truncated: output.logs_truncated,
            cold_start,
            version: target.version,
        }),
        Ok(Ok(Answer::Unanswered(Unanswered::Timeout(_)))) | Err(()) => {
            Err(InvokeError::Timeout { key, after: timeout })
        }
        Ok(Ok(Answer::Unanswered(Unanswered::Crashed(reason))))
        | Ok(Err(Lost::Broken(reason)))
        | Ok(Err(Lost::NotSent(reason))) => Err(InvokeError::Crashed { key, reason }),
    }
}

/// Milliseconds since the epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
