//! The gateway's side of one deployed version: its ready pods (from the
//! EndpointSlices of its Service) as the members of a shared
//! [`InstancePool`] (`sless_driver::pool`: least-loaded pick with the
//! per-pod concurrency, leases, the bounded wait), a connection per pod,
//! and what a waiting call asks of the cluster ([`Asker`]): with no pod
//! ready, the Deployment is scaled from zero (through the scale
//! subresource, idempotent across replicas) and the call waits for a pod
//! within the function's timeout; with every slot taken, one pod more, up
//! to `max_instances`, and the call takes the first slot freed on any pod.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sless_api::FunctionSpec;
use sless_driver::pool::{Demand, Instance, InstancePool, Refusal, Supply};
use sless_driver::{FunctionLoad, Invocation, InvocationResult, InvokeError, VersionRef};
use sless_driver_local::standalone::{Answer, Unanswered};
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
    /// How often this replica reports its calls under way and scales a
    /// version by every replica's (`autoscale`; None: never).
    pub scale_every: Option<Duration>,
    /// Generic pods per runtime a wake from zero may take (None: off).
    pub warm: Option<crate::objects::WarmPool>,
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
            scale_every: Some(Duration::from_secs(1)),
            warm: None,
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
    /// The warm pools a wake from zero may take a pod from.
    warm: Option<Arc<crate::warm::WarmPods>>,
    /// A warm pod specialized for this version: in `pods` while the
    /// version has no ready pod of its own.
    bridge: Mutex<Option<SocketAddr>>,
    /// The ready pods, with the calls each holds.
    pods: Arc<InstancePool<Pod>>,
    /// When and from which cache generation `pods` was last listed.
    listed: Mutex<Listed>,
    /// Calls under way on this replica, and when the last one was (ms since
    /// the epoch; the deploy counts as one), and what was reported of it.
    inflight: AtomicUsize,
    /// A scale-out of this version is being asked for.
    scaling_out: AtomicBool,
    last_call_ms: AtomicU64,
    reported_ms: AtomicU64,
    /// The calls under way this replica last reported (`autoscale`).
    reported_inflight: AtomicUsize,
}

#[derive(Default)]
struct Listed {
    at: Option<Instant>,
    /// The cache's generation the pods were taken at.
    generation: u64,
}

/// A ready pod: its address, its concurrency and its connection.
struct Pod {
    addr: SocketAddr,
    concurrency: usize,
    connection: tokio::sync::Mutex<Option<Arc<InstanceConnection>>>,
}

impl Instance for Pod {
    fn concurrency(&self) -> usize {
        self.concurrency
    }
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

/// What a waiting call asks of the cluster: a wake from zero (once), one
/// pod more when every slot is taken (once), and the ready pods looked at
/// again every `poll`.
struct Asker<'a> {
    serving: &'a Serving,
    cluster: &'a Cluster,
    settings: &'a ServingSettings,
    timeout: Duration,
    /// This call scaled the version from zero (a cold start).
    woke: AtomicBool,
    scaled_out: AtomicBool,
}

impl Supply for Asker<'_> {
    fn patience(&self) -> Duration {
        self.timeout
    }

    async fn more(&self, demand: Demand) -> Result<(), InvokeError> {
        let serving = self.serving;
        if demand.serving == 0 {
            if !self.woke.swap(true, Ordering::Relaxed) {
                return serving.wake(self.cluster, self.settings).await;
            }
            // Not ready yet: listed again, whatever the list's age.
            serving.listed.lock().unwrap().at = None;
        } else if !self.scaled_out.swap(true, Ordering::Relaxed) {
            serving.scale_out(self.cluster).await;
            return Ok(());
        }
        // A failed listing is a failed wait: the call waits on.
        let _ = serving.refresh(self.cluster, self.settings).await;
        Ok(())
    }

    fn recheck(&self) -> Option<Duration> {
        Some(self.settings.poll)
    }

    fn timed_out(&self, demand: Demand) -> Option<InvokeError> {
        (demand.serving == 0).then(|| InvokeError::StartFailed {
            key: self.serving.target.key.clone(),
            reason: format!("no pod became ready within {}s", self.timeout.as_secs()),
        })
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
        max_queue: usize,
    ) -> Serving {
        let serving = Serving {
            code,
            secrets,
            cache,
            warm: None,
            bridge: Mutex::new(None),
            namespace: names::function_namespace(&target.key.namespace),
            name: names::version_object(&target.key, target.version),
            pods: InstancePool::new(target.clone(), max_queue),
            target,
            spec,
            enabled: AtomicBool::new(enabled),
            listed: Mutex::new(Listed::default()),
            inflight: AtomicUsize::new(0),
            scaling_out: AtomicBool::new(false),
            last_call_ms: AtomicU64::new(now_ms()),
            reported_ms: AtomicU64::new(0),
            reported_inflight: AtomicUsize::new(0),
        };
        serving.set_enabled(enabled);
        serving
    }

    /// Lets a wake from zero take a generic pod of `warm`.
    pub fn with_warm(mut self, warm: Option<Arc<crate::warm::WarmPods>>) -> Serving {
        self.warm = warm;
        self
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

    /// Calls under way on this replica.
    pub fn inflight(&self) -> usize {
        self.inflight.load(Ordering::Relaxed)
    }

    pub fn reported_inflight(&self) -> usize {
        self.reported_inflight.load(Ordering::Relaxed)
    }

    pub fn set_reported_inflight(&self, calls: usize) {
        self.reported_inflight.store(calls, Ordering::Relaxed);
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// The Kubernetes namespace and the name of its Deployment.
    pub fn object(&self) -> (&str, &str) {
        (&self.namespace, &self.name)
    }

    /// Whether idleness takes this version to zero: autoscaled, no
    /// minimum, enabled.
    pub fn scales_to_zero(&self) -> bool {
        self.spec.replicas.is_none() && self.spec.min_instances == 0 && self.enabled.load(Ordering::Relaxed)
    }

    /// Takes calls (true) or refuses them, the waiting ones included.
    pub fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::Relaxed);
        let serves = enabled && self.spec.replicas != Some(0);
        self.pods.set_refusal((!serves).then_some(Refusal::Disabled));
    }

    /// Takes no more calls: the waiting ones (a wake from zero whose pod
    /// will never come, its Deployment deleted) end at once with
    /// [`InvokeError::NotDeployed`], which sends them to the version now
    /// served; the calls under way finish on their pods, which drain.
    pub fn retire(&self) {
        self.pods.set_refusal(Some(Refusal::NotDeployed));
    }

    pub fn load(&self) -> FunctionLoad {
        let load = self.pods.load();
        FunctionLoad {
            instances: load.serving,
            waiting: load.waiting,
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
        loop {
            if !self.enabled.load(Ordering::Relaxed) || self.spec.replicas == Some(0) {
                return Err(InvokeError::Disabled(key.clone()));
            }
            self.refresh(cluster, settings).await?;
            let asker = Asker {
                serving: self,
                cluster,
                settings,
                timeout: deadline.saturating_duration_since(Instant::now()),
                woke: AtomicBool::new(cold_start),
                scaled_out: AtomicBool::new(false),
            };
            let (pod, _) = self.pods.acquire(&asker).await?;
            cold_start = asker.woke.load(Ordering::Relaxed);
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

    /// The ready pods taken again from the watched cache when it has
    /// changed, else listed again when the list is old; an error only when
    /// they cannot be had and none are known.
    async fn refresh(&self, cluster: &Cluster, settings: &ServingSettings) -> Result<(), InvokeError> {
        let watched = self.cache.as_ref().map_or(0, |c| c.generation());
        let stale = {
            let listed = self.listed.lock().unwrap();
            if watched > 0 {
                listed.generation != watched || listed.at.is_none()
            } else {
                listed.at.is_none_or(|at| at.elapsed() >= settings.endpoints_ttl)
            }
        };
        if !stale {
            return Ok(());
        }
        let cached = self.cache.as_ref().and_then(|c| c.ready(&self.namespace, &self.name));
        let listed = match cached {
            Some(addresses) => Ok(addresses),
            None => crate::endpoints::ready(cluster, &self.namespace, &self.name).await,
        };
        match listed {
            Ok(addresses) => {
                self.replace_pods(addresses);
                *self.listed.lock().unwrap() = Listed {
                    at: Some(Instant::now()),
                    generation: watched,
                };
                Ok(())
            }
            Err(e) => {
                // Serve from the old list while the API server is away.
                tracing::warn!(function = %self.target, error = %e, "listing ready pods");
                if self.pods.load().serving == 0 {
                    return Err(InvokeError::StartFailed {
                        key: self.target.key.clone(),
                        reason: e.to_string(),
                    });
                }
                Ok(())
            }
        }
    }

    /// Keeps the pods still listed (with their connections and calls),
    /// drops the others and adds new ones.
    fn replace_pods(&self, addresses: Vec<SocketAddr>) {
        let concurrency = self.spec.concurrency.max(1) as usize;
        // The warm pod serves until the version has a pod of its own.
        let bridge = (*self.bridge.lock().unwrap()).filter(|_| addresses.is_empty());
        self.pods.change(|pods| {
            pods.remove_where(|p| !addresses.contains(&p.instance.addr) && Some(p.instance.addr) != bridge);
            for addr in addresses {
                if !pods.iter().any(|p| p.instance.addr == addr) {
                    pods.add(Pod {
                        addr,
                        concurrency,
                        connection: tokio::sync::Mutex::new(None),
                    });
                }
            }
        });
    }

    /// Drops a pod that failed until the next listing (or change in the
    /// cache) says it is ready.
    fn forget(&self, addr: SocketAddr) {
        {
            let mut bridge = self.bridge.lock().unwrap();
            if *bridge == Some(addr) {
                *bridge = None;
            }
        }
        self.pods.change(|pods| pods.remove_where(|p| p.instance.addr == addr));
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
        let ready = self.pods.load().serving;
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
            if scaled {
                self.take_warm_pod(settings).await;
            }
        }
        Ok(())
    }

    /// The waking call (and the next ones while the version has no pod
    /// of its own) goes to a generic pod specialized for this version,
    /// when one is ready (`warm`).
    async fn take_warm_pod(&self, settings: &ServingSettings) {
        let Some(warm) = &self.warm else { return };
        let taken = crate::warm::take_for(
            warm,
            &self.target,
            &self.spec,
            &self.code,
            &self.secrets,
            (&self.namespace, &self.name),
            settings.poll,
            settings.start_timeout,
        )
        .await;
        let Some(addr) = taken else { return };
        *self.bridge.lock().unwrap() = Some(addr);
        let concurrency = self.spec.concurrency.max(1) as usize;
        self.pods.change(|pods| {
            pods.add(Pod {
                addr,
                concurrency,
                connection: tokio::sync::Mutex::new(None),
            })
        });
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
        Ok(Ok(Answer::Unanswered(Unanswered::Timeout(_)))) | Err(()) => Err(InvokeError::Timeout {
            key,
            after: timeout,
            queued: false,
        }),
        Ok(Ok(Answer::Unanswered(Unanswered::BadAnswer(reason)))) => Err(InvokeError::BadAnswer { key, reason }),
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
