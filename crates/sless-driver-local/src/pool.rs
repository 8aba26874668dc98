//! The instances of one version of a function as local processes: the
//! supervision of the shared [`InstancePool`] (`sless_driver::pool`, which
//! owns the pick, the leases, the bounded wait and the generation switch).
//! Here: starting an instance from a warm interpreter when waiting calls
//! ask for one (up to the maximum), scale from zero, idle scale-down,
//! pinned and minimum counts, new settings whose instances replace the old
//! ones (which drain), noticing deaths, and retirement (drain, then stop).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use serde_json::json;
use sless_api::FunctionSpec;
use sless_driver::pool::{Demand, InstancePool, Member, Refusal, Supply};

use super::launcher::Launcher;
use super::process::{Output, ShimProcess};
use super::room::{Claim, Evict, Room};
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
}

impl sless_driver::pool::Instance for Instance {
    fn concurrency(&self) -> usize {
        self.generation.spec.concurrency as usize
    }

    fn is_alive(&self) -> bool {
        self.process.is_alive()
    }
}

/// A call's claim on a slot of an instance.
pub type Lease = sless_driver::pool::Lease<Instance>;

/// What the supervision knows beyond the serving instances.
struct Supervision {
    generation: Option<Arc<Generation>>,
    enabled: bool,
    removed: bool,
    /// Instances being started (not serving yet).
    starting: usize,
    last_start_error: Option<(Instant, String)>,
    /// The last instance a waiting call asked for did not start: its
    /// namespace was at its quota (why, for the caller).
    held_by_room: Option<String>,
}

impl Supervision {
    /// Whether (and why not) the version takes calls.
    fn refusal(&self) -> Option<Refusal> {
        match &self.generation {
            None => Some(Refusal::NotDeployed),
            Some(_) if self.removed => Some(Refusal::NotDeployed),
            Some(g) if !self.enabled || g.spec.replicas == Some(0) => Some(Refusal::Disabled),
            Some(_) => None,
        }
    }

    /// The last start failed less than two seconds ago: a call does not
    /// start another at once, it gets the failure.
    fn recent_failure(&self) -> Option<&str> {
        self.last_start_error
            .as_ref()
            .filter(|(at, _)| at.elapsed() < Duration::from_secs(2))
            .map(|(_, error)| error.as_str())
    }
}

/// The instances of one version of a function.
pub struct FunctionPool {
    key: FunctionKey,
    version: u64,
    launcher: Arc<Launcher>,
    warm: Arc<WarmPool>,
    /// What the function's namespace runs: every instance holds a claim.
    room: Arc<Room>,
    settings: PoolSettings,
    instances: Arc<InstancePool<Instance>>,
    /// Taken before the instances' lock when both are.
    state: Mutex<Supervision>,
}

/// A waiting call's supply: a new instance started when the calls waiting
/// need more slots than the starting ones will bring.
struct Starter<'a>(&'a Arc<FunctionPool>);

impl Supply for Starter<'_> {
    fn patience(&self) -> Duration {
        let st = self.0.state.lock().unwrap();
        Duration::from_secs(st.generation.as_ref().map_or(0, |g| g.spec.timeout_sec.into()))
    }

    async fn more(&self, demand: Demand) -> Result<(), InvokeError> {
        let pool = self.0;
        let mut st = pool.state.lock().unwrap();
        let Some(generation) = st.generation.clone() else {
            return Ok(());
        };
        if demand.serving == 0 && st.starting == 0 {
            if let Some(error) = st.recent_failure() {
                return Err(InvokeError::StartFailed {
                    key: pool.key.clone(),
                    reason: error.to_string(),
                });
            }
        }
        let concurrency = generation.spec.concurrency.max(1) as usize;
        let max = generation.spec.replicas.unwrap_or(generation.spec.max_instances) as usize;
        if demand.serving + st.starting < max && st.starting * concurrency < demand.waiting {
            st.held_by_room = None;
            match pool.claim(&generation) {
                Ok(claim) => {
                    st.starting += 1;
                    tokio::spawn(start_instance(pool.clone(), generation, claim));
                }
                // With no instance, nothing would serve the calls; else
                // they wait for the instances there are, and ask again.
                Err(full) if demand.serving == 0 && st.starting == 0 => return Err(pool.at_quota(full)),
                Err(full) => st.held_by_room = Some(full),
            }
        }
        Ok(())
    }

    /// Calls held back by the namespace's quota ask again: the room
    /// another function's instance frees wakes no call of this one.
    fn recheck(&self) -> Option<Duration> {
        let st = self.0.state.lock().unwrap();
        st.held_by_room.is_some().then_some(Duration::from_millis(500))
    }

    fn timed_out(&self, _demand: Demand) -> Option<InvokeError> {
        let st = self.0.state.lock().unwrap();
        st.held_by_room.clone().map(|full| self.0.at_quota(full))
    }
}

impl FunctionPool {
    pub fn new(
        target: VersionRef,
        launcher: Arc<Launcher>,
        warm: Arc<WarmPool>,
        room: Arc<Room>,
        settings: PoolSettings,
    ) -> Arc<Self> {
        let instances = InstancePool::new(target.clone(), settings.max_queue);
        let state = Supervision {
            generation: None,
            enabled: true,
            removed: false,
            starting: 0,
            last_start_error: None,
            held_by_room: None,
        };
        instances.set_refusal(state.refusal());
        let namespace = target.key.namespace.clone();
        let pool = Arc::new(FunctionPool {
            key: target.key,
            version: target.version,
            launcher,
            warm,
            room,
            settings,
            instances,
            state: Mutex::new(state),
        });
        tokio::spawn(supervise(Arc::downgrade(&pool)));
        pool.room.register(&namespace, Arc::downgrade(&pool) as Weak<dyn Evict>);
        pool
    }

    /// Loads the handler of `generation` into a new instance (started as
    /// every serving instance is), which is then handed to
    /// [`FunctionPool::set_generation`] to serve: a version that cannot
    /// load never serves, and one that can costs one instance start.
    pub async fn preload(&self, generation: &Generation) -> Result<Arc<ShimProcess>, StartFailure> {
        let claim = self
            .claim(generation)
            .map_err(|full| StartFailure::Start(format!("checking the version needs an instance: {full}")))?;
        load_instance(self, generation, claim).await
    }

    /// Room in the namespace for one more instance of `generation`, or why
    /// there is none.
    fn claim(&self, generation: &Generation) -> Result<Claim, String> {
        self.room.claim(&self.key.namespace, generation.spec.memory_mb)
    }

    fn at_quota(&self, reason: String) -> InvokeError {
        InvokeError::AtQuota {
            key: self.key.clone(),
            reason,
        }
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
            let mut serving = Vec::new();
            if let Some(process) = loaded {
                let keep_min = generation.spec.replicas.unwrap_or(generation.spec.min_instances);
                let serves = generation.spec.replicas != Some(0);
                if st.enabled && !st.removed && serves && (first || keep_min > 0) {
                    tokio::spawn(watch_death(Arc::downgrade(self), process.clone()));
                    serving.push(Instance { process, generation });
                } else {
                    process.kill();
                }
            }
            self.instances.set_refusal(st.refusal());
            self.instances.switch(serving)
        };
        for member in old {
            tokio::spawn(drain(member));
        }
    }

    pub fn set_enabled(&self, enabled: bool) {
        self.stop_serving(|st| st.enabled = enabled, !enabled);
    }

    /// Takes no new calls ([`InvokeError::NotDeployed`]); the instances
    /// finish what they hold, then stop.
    pub fn retire(&self) {
        self.stop_serving(|st| st.removed = true, true);
    }

    /// Applies `change`, then drains and stops every instance when `stop`.
    fn stop_serving(&self, change: impl FnOnce(&mut Supervision), stop: bool) {
        let old = {
            let mut st = self.state.lock().unwrap();
            change(&mut st);
            self.instances.set_refusal(st.refusal());
            if stop {
                self.instances.switch(Vec::new())
            } else {
                Vec::new()
            }
        };
        for member in old {
            tokio::spawn(drain(member));
        }
    }

    /// Stops every instance at once, whatever it is doing (the server
    /// stops).
    pub fn stop_now(&self) {
        let old = {
            let mut st = self.state.lock().unwrap();
            st.removed = true;
            self.instances.set_refusal(st.refusal());
            self.instances.switch(Vec::new())
        };
        for member in old {
            member.instance.process.kill();
        }
    }

    pub fn stats(&self) -> FunctionLoad {
        let load = self.instances.load();
        FunctionLoad {
            instances: load.serving,
            waiting: load.waiting,
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
        let claim = self.claim(&generation).map_err(|full| self.at_quota(full))?;
        let process = load_instance(self, &generation, claim)
            .await
            .map_err(|failure| InvokeError::StartFailed {
                key: self.key.clone(),
                reason: failure.to_string(),
            })?;
        Ok((process, generation))
    }

    /// Waits for a free slot on an instance, starting instances as needed.
    /// Returns the lease and whether this request waited for one.
    pub async fn acquire(self: &Arc<Self>) -> Result<(Lease, bool), InvokeError> {
        self.instances.acquire(&Starter(self)).await
    }

    /// Runs one invocation on a leased instance with the function's
    /// timeout; past it the instance is recycled.
    pub async fn run(&self, lease: &Lease, frame: bytes::BytesMut) -> Result<Output, InvokeError> {
        let result = run_dedicated(&lease.process, &lease.generation, frame, &self.key).await;
        if let Err(InvokeError::Timeout { .. }) = result {
            tracing::warn!(function = %self.key, instance = lease.process.id, "invocation timed out; recycling the instance");
            lease.process.kill();
            self.forget(lease.process.id);
        }
        result
    }

    fn not_deployed(&self) -> InvokeError {
        InvokeError::NotDeployed(VersionRef::new(self.key.clone(), self.version))
    }

    /// Removes a dead or stopped instance.
    fn forget(&self, process_id: u64) {
        self.instances
            .change(|members| members.remove_where(|m| m.instance.process.id == process_id));
    }
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
        Ok(Err(reason)) if reason.starts_with(crate::process::BAD_OUTPUT) => Err(InvokeError::BadAnswer {
            key: key.clone(),
            reason,
        }),
        Ok(Err(reason)) => Err(InvokeError::Crashed {
            key: key.clone(),
            reason,
        }),
        Err(_) => Err(InvokeError::Timeout {
            key: key.clone(),
            after: timeout,
            queued: false,
        }),
    }
}

async fn start_instance(pool: Arc<FunctionPool>, generation: Arc<Generation>, claim: Claim) {
    let started = Instant::now();
    let result = load_instance(&pool, &generation, claim).await;
    let mut st = pool.state.lock().unwrap();
    st.starting -= 1;
    match result {
        Ok(process) => {
            let current = st.generation.as_ref().is_some_and(|g| Arc::ptr_eq(g, &generation));
            if current && st.enabled && !st.removed {
                tracing::info!(function = %pool.key, version = generation.version, instance = process.id,
                    ms = started.elapsed().as_secs_f64() * 1000.0, "instance started");
                st.last_start_error = None;
                tokio::spawn(watch_death(Arc::downgrade(&pool), process.clone()));
                pool.instances
                    .change(|members| members.add(Instance { process, generation }));
            } else {
                // Started for settings that changed meanwhile (or a version
                // that stopped serving): the calls that counted on it ask
                // again, and start one of the serving generation.
                process.kill();
                pool.instances.wake_waiters();
            }
        }
        Err(failure) => {
            let error = failure.to_string();
            tracing::warn!(function = %pool.key, error = %sless_api::text::log_line(&error), "instance failed to start");
            st.last_start_error = Some((Instant::now(), error));
            // The waiting calls get the failure.
            pool.instances.wake_waiters();
        }
    }
}

/// How long an instance has been idle before another instance of its
/// namespace may stop it to have its room: one that serves a stream of
/// calls is idle for moments only, and stopping it would only move the
/// cold start to its function's next call.
const EVICTABLE_AFTER: Duration = Duration::from_secs(1);

impl Evict for FunctionPool {
    fn stop_one_idle(&self) -> bool {
        let mut found = false;
        let stopped = self.instances.change(|members| {
            members.remove_where(|m| {
                let stops = !found && m.inflight() == 0 && m.idle_for() >= EVICTABLE_AFTER;
                found |= stops;
                stops
            })
        });
        for member in &stopped {
            tracing::info!(function = %self.key, instance = member.instance.process.id,
                "stopping an idle instance to make room in its namespace");
            member.instance.process.kill();
        }
        found
    }
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

/// The longest a loaded instance holds back its warm pool's refill while
/// waiting for its first answer.
const REFILL_AFTER_LOAD: Duration = Duration::from_millis(50);

/// Starts an instance of `generation` that holds `claim` while it runs.
async fn load_instance(
    pool: &FunctionPool,
    generation: &Generation,
    claim: Claim,
) -> Result<Arc<ShimProcess>, StartFailure> {
    let runtime = generation.spec.runtime;
    let started = Instant::now();
    // The warm pool refills when `refill` drops: once this instance has
    // answered the call that waits for it (below), or on a failure here.
    let (process, refill) = pool.warm.take().await.map_err(StartFailure::Start)?;
    process.hold_claim(claim);
    let taken = started.elapsed();
    pool.launcher
        .place_code(&process, &generation.artifact_dir)
        .await
        .map_err(|e| StartFailure::Start(format!("putting the code into the instance: {e}")))?;
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
        "memory_mb": generation.spec.memory_mb,
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
    // A new start (a fork and its confinement: several ms of CPU on the
    // kernel's locks) would compete with the call that waited for this
    // one. While the pool still holds a ready shim for the next cold start,
    // the replacement starts after that call's answer (or REFILL_AFTER_LOAD
    // when none comes: a deploy's check); a pool run dry refills at once,
    // since the next cold start would wait for that start.
    if pool.warm.has_ready() {
        let first = process.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(REFILL_AFTER_LOAD, first.answered_once()).await;
            drop(refill);
        });
    }
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
async fn drain(member: Arc<Member<Instance>>) {
    let grace = Duration::from_secs(u64::from(member.instance.generation.spec.timeout_sec) + 5);
    member.drained(grace).await;
    member.instance.process.kill();
}

/// Every 200 ms: scale idle instances down, keep pinned and minimum counts.
async fn supervise(pool: Weak<FunctionPool>) {
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tick.tick().await;
        let Some(pool) = pool.upgrade() else { return };
        if !reap(&pool) {
            return;
        }
    }
}

/// One pass of [`supervise`]: idle surplus instances stopped, missing ones
/// started; false once the pool is removed.
fn reap(pool: &Arc<FunctionPool>) -> bool {
    let mut st = pool.state.lock().unwrap();
    if st.removed {
        return false;
    }
    let Some(generation) = st.generation.clone() else {
        return true;
    };
    let spec = &generation.spec;
    let keep_min = match (st.enabled, spec.replicas) {
        (false, _) => 0,
        (true, Some(n)) => n as usize,
        (true, None) => spec.min_instances as usize,
    };
    let idle_timeout = pool.settings.idle_timeout;
    let (stop, serving) = pool.instances.change(|members| {
        members.remove_where(|m| !m.instance.process.is_alive());
        let mut count = members.len();
        let stop = members.remove_where(|m| {
            let surplus = match spec.replicas {
                Some(n) => count > n as usize,
                None => count > keep_min && m.idle_for() >= idle_timeout,
            };
            let stops = m.inflight() == 0 && surplus;
            count -= usize::from(stops);
            stops
        });
        (stop, members.len())
    });
    let missing = keep_min.saturating_sub(serving + st.starting);
    if st.enabled && st.recent_failure().is_none() {
        for _ in 0..missing {
            // A namespace at its quota keeps fewer; a later pass tries again.
            let Ok(claim) = pool.claim(&generation) else { break };
            st.starting += 1;
            tokio::spawn(start_instance(pool.clone(), generation.clone(), claim));
        }
    }
    drop(st);
    for member in stop {
        tracing::info!(function = %pool.key, instance = member.instance.process.id, "stopping idle instance");
        member.instance.process.kill();
    }
    true
}
