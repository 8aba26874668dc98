//! The instances of one version of a function: scale from zero on demand,
//! per-instance concurrency, more instances while requests wait (up to the
//! maximum), a bounded wait queue (429 beyond it), idle scale-down, pinned
//! replicas, new settings whose instances replace the old ones (which
//! drain), and retirement (drain, then stop).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use serde_json::json;
use sless_api::FunctionSpec;
use tokio::sync::Notify;

use super::launcher::{link_small_tree, link_tree, Launcher};
use super::process::{Output, ShimProcess};
use super::warm::WarmPool;
use sless_driver::{FunctionKey, FunctionLoad, InvokeError, VersionRef};

/// Scaling settings shared by every function of this server.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    pub idle_timeout: Duration,
    pub max_queue: usize,
    pub load_timeout: Duration,
    /// Largest response body a handler may give; the shim is told in LOAD.
    pub max_response_bytes: usize,
}

/// One deployed version with its spec (a pool's version keeps its number;
/// new settings make a new generation of it).
pub struct Generation {
    pub version: u64,
    pub artifact_dir: PathBuf,
    pub spec: FunctionSpec,
    /// The secrets its instances get (env and files), held in memory only.
    pub secrets: sless_driver::SecretValues,
}

/// A loaded shim serving one generation.
pub struct Instance {
    pub process: Arc<ShimProcess>,
    pub generation: Arc<Generation>,
    inflight: AtomicUsize,
    last_used: Mutex<Instant>,
}

struct PoolState {
    generation: Option<Arc<Generation>>,
    enabled: bool,
    removed: bool,
    instances: Vec<Arc<Instance>>,
    starting: usize,
    waiting: usize,
    last_start_error: Option<(Instant, String)>,
}

/// The instances of one version of a function.
pub struct FunctionPool {
    key: FunctionKey,
    version: u64,
    launcher: Arc<Launcher>,
    warm: Arc<WarmPool>,
    settings: PoolSettings,
    state: Mutex<PoolState>,
    changed: Notify,
    /// Requests in `acquire`'s slow path, which wait on `changed`: a lease
    /// wakes them only when there are any.
    sleepers: AtomicUsize,
}

/// A claim on one slot of an instance's concurrency; released on drop.
pub struct Lease {
    pub instance: Arc<Instance>,
    pool: Arc<FunctionPool>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        *self.instance.last_used.lock().unwrap() = Instant::now();
        // SeqCst with the load of `sleepers` (and the slow path's increment
        // of it before reading `inflight`): either this sees the sleeper or
        // the sleeper sees the freed slot.
        self.instance.inflight.fetch_sub(1, Ordering::SeqCst);
        if self.pool.sleepers.load(Ordering::SeqCst) > 0 {
            self.pool.changed.notify_waiters();
        }
    }
}

/// Counts a request in `acquire`'s slow path until it leaves it.
struct Sleeper<'a>(&'a AtomicUsize);

impl Drop for Sleeper<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts a request in the wait queue until it leaves it.
struct Queued<'a>(&'a FunctionPool);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.state.lock().unwrap().waiting -= 1;
    }
}

impl FunctionPool {
    pub fn new(target: VersionRef, launcher: Arc<Launcher>, warm: Arc<WarmPool>, settings: PoolSettings) -> Arc<Self> {
        let pool = Arc::new(FunctionPool {
            key: target.key,
            version: target.version,
            launcher,
            warm,
            settings,
            state: Mutex::new(PoolState {
                generation: None,
                enabled: true,
                removed: false,
                instances: Vec::new(),
                starting: 0,
                waiting: 0,
                last_start_error: None,
            }),
            changed: Notify::new(),
            sleepers: AtomicUsize::new(0),
        });
        tokio::spawn(supervise(Arc::downgrade(&pool)));
        pool
    }

    /// Loads the handler of `generation` into a new instance (started as
    /// every serving instance is), which is then handed to
    /// [`FunctionPool::set_generation`] to serve: a version that cannot
    /// load never serves, and one that can costs one instance start.
    pub async fn preload(&self, generation: &Generation) -> Result<Arc<ShimProcess>, StartFailure> {
        load_instance(self, generation).await
    }

    /// Makes `generation` (this pool's version, perhaps with new settings)
    /// the serving one, with `loaded` (from [`FunctionPool::preload`]) as
    /// its first instance; the old instances drain and stop.
    ///
    /// The checked instance of a new version serves its first calls (a
    /// deploy is usually followed by a call); the idle reaper stops it
    /// like any other when none comes. New settings of a version keep it
    /// only when the function keeps instances warm anyway: otherwise the
    /// version stays at zero instances, as it was.
    pub fn set_generation(self: &Arc<Self>, generation: Generation, loaded: Option<Arc<ShimProcess>>) {
        let generation = Arc::new(generation);
        let old = {
            let mut st = self.state.lock().unwrap();
            let first = st.generation.is_none();
            st.generation = Some(generation.clone());
            st.last_start_error = None;
            let old = std::mem::take(&mut st.instances);
            if let Some(process) = loaded {
                let keep_min = generation.spec.replicas.unwrap_or(generation.spec.min_instances);
                let serves = generation.spec.replicas != Some(0);
                if st.enabled && !st.removed && serves && (first || keep_min > 0) {
                    st.instances.push(Arc::new(Instance {
                        process: process.clone(),
                        generation,
                        inflight: AtomicUsize::new(0),
                        last_used: Mutex::new(Instant::now()),
                    }));
                    tokio::spawn(watch_death(Arc::downgrade(self), process));
                } else {
                    process.kill();
                }
            }
            old
        };
        for instance in old {
            tokio::spawn(drain(instance));
        }
        self.changed.notify_waiters();
    }

    pub fn set_enabled(&self, enabled: bool) {
        let old = {
            let mut st = self.state.lock().unwrap();
            st.enabled = enabled;
            if enabled {
                Vec::new()
            } else {
                std::mem::take(&mut st.instances)
            }
        };
        for instance in old {
            tokio::spawn(drain(instance));
        }
        self.changed.notify_waiters();
    }

    /// Takes no new calls ([`InvokeError::NotDeployed`]); the instances
    /// finish what they hold, then stop.
    pub fn retire(&self) {
        let old = {
            let mut st = self.state.lock().unwrap();
            st.removed = true;
            std::mem::take(&mut st.instances)
        };
        for instance in old {
            tokio::spawn(drain(instance));
        }
        self.changed.notify_waiters();
    }

    /// Stops every instance at once (the function was deleted).
    pub fn remove(&self) {
        let old = {
            let mut st = self.state.lock().unwrap();
            st.removed = true;
            std::mem::take(&mut st.instances)
        };
        for instance in old {
            instance.process.kill();
        }
        self.changed.notify_waiters();
    }

    pub fn stats(&self) -> FunctionLoad {
        let st = self.state.lock().unwrap();
        FunctionLoad {
            instances: st.instances.len(),
            waiting: st.waiting,
        }
    }

    /// A fresh instance of the serving version that no other request
    /// shares (a job run), with the generation it loaded.
    pub async fn dedicated(&self) -> Result<(Arc<ShimProcess>, Arc<Generation>), InvokeError> {
        let generation = {
            let st = self.state.lock().unwrap();
            st.generation.clone().filter(|_| !st.removed)
        }
        .ok_or_else(|| self.not_deployed())?;
        let process = load_instance(self, &generation)
            .await
            .map_err(|failure| InvokeError::StartFailed {
                key: self.key.clone(),
                reason: failure.to_string(),
            })?;
        Ok((process, generation))
    }

    /// Waits for a free slot on an instance, starting instances as needed.
    /// Returns the lease and whether this request waited for a new instance.
    pub async fn acquire(self: &Arc<Self>) -> Result<(Lease, bool), InvokeError> {
        // The common case, a free slot, without registering for wake-ups.
        if let Some(instance) = self.free_instance(&self.state.lock().unwrap()) {
            instance.inflight.fetch_add(1, Ordering::SeqCst);
            return Ok((
                Lease {
                    instance,
                    pool: self.clone(),
                },
                false,
            ));
        }
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        let _sleeper = Sleeper(&self.sleepers);
        let mut queued: Option<Queued<'_>> = None;
        let mut cold = false;
        let mut deadline: Option<tokio::time::Instant> = None;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = self.state.lock().unwrap();
                let generation = match (&st.generation, st.removed) {
                    (_, true) | (None, _) => return Err(self.not_deployed()),
                    (Some(g), false) => g.clone(),
                };
                if !st.enabled || generation.spec.replicas == Some(0) {
                    return Err(InvokeError::Disabled(self.key.clone()));
                }
                let concurrency = generation.spec.concurrency.max(1) as usize;
                if let Some(instance) = least_busy(&st.instances, concurrency) {
                    instance.inflight.fetch_add(1, Ordering::SeqCst);
                    drop(st);
                    drop(queued);
                    return Ok((
                        Lease {
                            instance,
                            pool: self.clone(),
                        },
                        cold,
                    ));
                }
                cold = true;
                if st.instances.is_empty() && st.starting == 0 {
                    if let Some((at, error)) = &st.last_start_error {
                        if at.elapsed() < Duration::from_secs(2) {
                            return Err(InvokeError::StartFailed {
                                key: self.key.clone(),
                                reason: error.clone(),
                            });
                        }
                    }
                }
                let max = generation.spec.replicas.unwrap_or(generation.spec.max_instances) as usize;
                let live = st.instances.len() + st.starting;
                let demand = st.waiting + usize::from(queued.is_none());
                if live < max && st.starting * concurrency < demand {
                    st.starting += 1;
                    tokio::spawn(start_instance(self.clone(), generation.clone()));
                }
                if queued.is_none() {
                    if st.waiting >= self.settings.max_queue {
                        return Err(InvokeError::QueueFull(self.key.clone()));
                    }
                    st.waiting += 1;
                    queued = Some(Queued(self));
                    let wait = Duration::from_secs(u64::from(generation.spec.timeout_sec));
                    deadline = Some(tokio::time::Instant::now() + wait);
                }
            }
            if tokio::time::timeout_at(deadline.expect("set when queued"), notified)
                .await
                .is_err()
            {
                let spec_timeout = self
                    .state
                    .lock()
                    .unwrap()
                    .generation
                    .as_ref()
                    .map(|g| g.spec.timeout_sec);
                return Err(InvokeError::Timeout {
                    key: self.key.clone(),
                    after: Duration::from_secs(u64::from(spec_timeout.unwrap_or(0))),
                });
            }
        }
    }

    /// The least busy live instance with a free slot, when the function
    /// serves at all.
    fn free_instance(&self, st: &PoolState) -> Option<Arc<Instance>> {
        let generation = st.generation.as_ref().filter(|_| !st.removed && st.enabled)?;
        if generation.spec.replicas == Some(0) {
            return None;
        }
        least_busy(&st.instances, generation.spec.concurrency.max(1) as usize)
    }

    fn not_deployed(&self) -> InvokeError {
        InvokeError::NotDeployed(VersionRef::new(self.key.clone(), self.version))
    }

    /// Removes a dead or stopped instance.
    fn forget(&self, process_id: u64) {
        self.state
            .lock()
            .unwrap()
            .instances
            .retain(|i| i.process.id != process_id);
        self.changed.notify_waiters();
    }
}

fn least_busy(instances: &[Arc<Instance>], concurrency: usize) -> Option<Arc<Instance>> {
    instances
        .iter()
        .filter(|i| i.process.is_alive())
        .min_by_key(|i| i.inflight.load(Ordering::SeqCst))
        .filter(|i| i.inflight.load(Ordering::SeqCst) < concurrency)
        .cloned()
}

/// Runs one invocation on a leased instance with the function's timeout;
/// past it the instance is recycled.
pub async fn run(lease: &Lease, frame: bytes::BytesMut, key: &FunctionKey) -> Result<Output, InvokeError> {
    let instance = &lease.instance;
    let result = run_dedicated(&instance.process, &instance.generation, frame, key).await;
    if let Err(InvokeError::Timeout { .. }) = result {
        tracing::warn!(function = %key, instance = instance.process.id, "invocation timed out; recycling the instance");
        instance.process.kill();
        lease.pool.forget(instance.process.id);
    }
    result
}

/// Runs one invocation on `process` with the function's timeout (the
/// caller stops a process that timed out).
pub async fn run_dedicated(
    process: &ShimProcess,
    generation: &Generation,
    frame: bytes::BytesMut,
    key: &FunctionKey,
) -> Result<Output, InvokeError> {
    let timeout = Duration::from_secs(u64::from(generation.spec.timeout_sec));
    match tokio::time::timeout(timeout, process.invoke(frame)).await {
        Ok(Ok(output)) => Ok(output),
        Ok(Err(reason)) => Err(InvokeError::Crashed {
            key: key.clone(),
            reason,
        }),
        Err(_) => Err(InvokeError::Timeout {
            key: key.clone(),
            after: timeout,
        }),
    }
}

async fn start_instance(pool: Arc<FunctionPool>, generation: Arc<Generation>) {
    let started = Instant::now();
    let result = load_instance(&pool, &generation).await;
    let mut st = pool.state.lock().unwrap();
    st.starting -= 1;
    match result {
        Ok(process) => {
            let current = st.generation.as_ref().is_some_and(|g| Arc::ptr_eq(g, &generation));
            if current && st.enabled && !st.removed {
                tracing::info!(function = %pool.key, version = generation.version, instance = process.id,
                    ms = started.elapsed().as_secs_f64() * 1000.0, "instance started");
                let instance = Arc::new(Instance {
                    process: process.clone(),
                    generation,
                    inflight: AtomicUsize::new(0),
                    last_used: Mutex::new(Instant::now()),
                });
                st.instances.push(instance);
                st.last_start_error = None;
                tokio::spawn(watch_death(Arc::downgrade(&pool), process));
            } else {
                process.kill();
            }
        }
        Err(failure) => {
            let error = failure.to_string();
            tracing::warn!(function = %pool.key, %error, "instance failed to start");
            st.last_start_error = Some((Instant::now(), error));
        }
    }
    drop(st);
    pool.changed.notify_waiters();
}

/// Why an instance did not start.
#[derive(Debug)]
pub enum StartFailure {
    /// The handler did not load: the user's error (traceback of their code).
    Load(String),
    /// The instance itself could not start.
    Start(String),
}

impl std::fmt::Display for StartFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartFailure::Load(error) => write!(f, "loading the handler failed: {error}"),
            StartFailure::Start(error) => f.write_str(error),
        }
    }
}

async fn load_instance(pool: &FunctionPool, generation: &Generation) -> Result<Arc<ShimProcess>, StartFailure> {
    let runtime = generation.spec.runtime;
    let started = Instant::now();
    // The warm pool refills once this start is done (`_refill` drops).
    let (process, _refill) = pool.warm.take().await.map_err(StartFailure::Start)?;
    let taken = started.elapsed();
    let linking = |e: std::io::Error| StartFailure::Start(format!("linking code into the instance: {e}"));
    // A few files are linked here: a trip to the blocking threads costs
    // more than their links (a deploy waits for it).
    if !link_small_tree(&generation.artifact_dir, &process.slot).map_err(linking)? {
        let from = generation.artifact_dir.clone();
        let slot = process.slot.clone();
        tokio::task::spawn_blocking(move || link_tree(&from, &slot))
            .await
            .map_err(|e| StartFailure::Start(e.to_string()))?
            .map_err(linking)?;
    }
    if !generation.secrets.files.is_empty() {
        let files = generation.secrets.files.clone();
        let dir = super::launcher::secrets_dir(&process);
        let uid = process.confinement.uid;
        tokio::task::spawn_blocking(move || super::launcher::write_secret_files(&dir, uid, &files))
            .await
            .map_err(|e| StartFailure::Start(e.to_string()))?
            .map_err(|e| StartFailure::Start(format!("writing the secret files into the instance: {e}")))?;
    }
    let linked = started.elapsed();
    if let Err(e) = pool.launcher.fit(&process, &pool.key.namespace, &generation.spec).await {
        process.kill();
        return Err(StartFailure::Start(format!("confining the instance: {e}")));
    }
    let code = pool.launcher.code_path(&process);
    let path = match runtime {
        sless_api::Runtime::Python311 => vec![format!("{code}/.deps"), code.clone()],
        sless_api::Runtime::Nodejs20 => vec![format!("{code}/node_modules")],
    };
    let mut env = generation.spec.env.clone();
    env.extend(generation.secrets.env.iter().cloned());
    env.insert(
        "SLESS_SECRETS_DIR".into(),
        pool.launcher
            .sandbox
            .seen_path(&super::launcher::secrets_dir(&process), "/secrets"),
    );
    let load = json!({
        "code_dir": code,
        "path": path,
        "entrypoint": generation.spec.entrypoint,
        "env": env,
        "function": pool.key.name,
        "namespace": pool.key.namespace,
        "version": generation.version,
        "concurrency": generation.spec.concurrency,
        "max_output_bytes": pool.settings.max_response_bytes,
    });
    let fitted = started.elapsed();
    if let Err(e) = process.load(&load, pool.settings.load_timeout).await {
        process.kill();
        return Err(StartFailure::Load(e));
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    tracing::debug!(function = %pool.key, instance = process.id, take_ms = ms(taken), link_ms = ms(linked - taken),
        fit_ms = ms(fitted - linked), load_ms = ms(started.elapsed() - fitted), "handler loaded");
    Ok(process)
}

async fn watch_death(pool: Weak<FunctionPool>, process: Arc<ShimProcess>) {
    let mut died = process.died();
    let reason = loop {
        if let Some(reason) = died.borrow().clone() {
            break reason;
        }
        if died.changed().await.is_err() {
            break "instance gone".to_string();
        }
    };
    if let Some(pool) = pool.upgrade() {
        if reason != "instance stopped" {
            tracing::warn!(function = %pool.key, instance = process.id, %reason, "instance died; it will be replaced");
        }
        pool.forget(process.id);
    }
}

/// Lets in-flight invocations of an old instance finish, then stops it.
async fn drain(instance: Arc<Instance>) {
    let limit = Instant::now() + Duration::from_secs(u64::from(instance.generation.spec.timeout_sec) + 5);
    while instance.inflight.load(Ordering::Acquire) > 0 && Instant::now() < limit {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    instance.process.kill();
}

/// Every 200 ms: scale idle instances down, keep pinned and minimum counts.
async fn supervise(pool: Weak<FunctionPool>) {
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tick.tick().await;
        let Some(pool) = pool.upgrade() else { return };
        let mut st = pool.state.lock().unwrap();
        if st.removed {
            return;
        }
        let Some(generation) = st.generation.clone() else {
            continue;
        };
        st.instances.retain(|i| i.process.is_alive());
        let spec = &generation.spec;
        let keep_min = match spec.replicas {
            Some(n) => n as usize,
            None => spec.min_instances as usize,
        };
        let keep_min = if st.enabled { keep_min } else { 0 };
        let idle_timeout = pool.settings.idle_timeout;
        let mut count = st.instances.len();
        let mut stop = Vec::new();
        st.instances.retain(|i| {
            let idle = i.inflight.load(Ordering::Acquire) == 0;
            let surplus = match spec.replicas {
                Some(n) => count > n as usize,
                None => count > keep_min && i.last_used.lock().unwrap().elapsed() >= idle_timeout,
            };
            if idle && surplus {
                count -= 1;
                stop.push(i.clone());
                false
            } else {
                true
            }
        });
        let recent_failure = st
            .last_start_error
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < Duration::from_secs(2));
        let missing = keep_min.saturating_sub(st.instances.len() + st.starting);
        if st.enabled && !recent_failure {
            for _ in 0..missing {
                st.starting += 1;
                tokio::spawn(start_instance(pool.clone(), generation.clone()));
            }
        }
        drop(st);
        for instance in stop {
            tracing::info!(function = %pool.key, instance = instance.process.id, "stopping idle instance");
            instance.process.kill();
        }
    }
}
