//! The trigger runtime: fires cron schedules (once per tick across every
//! server on one database), consumes RabbitMQ queues, and turns a function
//! off when all its triggers are disabled. Cron ticks and consumers run on
//! the leader only; every replica gates its own functions.

mod amqp;
pub mod brokers;
pub mod schedule;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde_json::{json, Value};
use sless_api::{TriggerSpec, TriggerStatus, TriggerType};

use crate::cluster::Leadership;
use crate::invoker::{Invoker, Run};
use crate::store::{Kind, Record, Store};
use sless_driver::{FunctionKey, Invocation, TriggerKind};

use self::schedule::Schedule;

/// Keeps triggers running.
pub struct Triggers {
    store: Arc<dyn Store>,
    invoker: Arc<Invoker>,
    /// Functions whose http triggers are all disabled.
    http_blocked: RwLock<HashSet<FunctionKey>>,
    consumers: Mutex<HashMap<(String, String), amqp::Consumer>>,
    /// The spec each running consumer was started with.
    consumer_specs: Mutex<HashMap<(String, String), Value>>,
    /// Functions named by a trigger at the last convergence.
    gated: Mutex<HashSet<FunctionKey>>,
    leadership: Arc<Leadership>,
    /// The brokers amqp triggers may connect to.
    pub brokers: brokers::BrokerAllowList,
    /// The largest message an amqp trigger hands to its function.
    max_message_bytes: usize,
    /// Each cron trigger's next tick, computed once per fire (or spec
    /// change) on a blocking thread, not on every pass of the loop.
    due: Mutex<HashMap<(String, String), Due>>,
    /// Cron calls under way, which a shutdown lets finish (`drain`).
    cron_calls: Arc<AtomicUsize>,
    /// Cron triggers whose call of an earlier tick still runs here: their
    /// ticks are skipped meanwhile, so a call slower than its schedule
    /// does not pile calls up in the function's queue.
    cron_running: Arc<Mutex<HashSet<(String, String)>>>,
}

/// A cron trigger's call under way, in `Triggers::cron_running` until dropped.
struct Running {
    running: Arc<Mutex<HashSet<(String, String)>>>,
    trigger: (String, String),
}

impl Drop for Running {
    fn drop(&mut self) {
        self.running.lock().unwrap().remove(&self.trigger);
    }
}

/// One cron call under way, counted in `Triggers::cron_calls` until dropped.
struct CronCall(Arc<AtomicUsize>);

impl CronCall {
    fn start(calls: &Arc<AtomicUsize>) -> CronCall {
        calls.fetch_add(1, Ordering::SeqCst);
        CronCall(calls.clone())
    }
}

impl Drop for CronCall {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A cron trigger's next tick after `base`, for the spec it was computed from.
struct Due {
    spec: Value,
    base: chrono::DateTime<chrono::Utc>,
    at: Option<chrono::DateTime<chrono::Utc>>,
}

impl Triggers {
    /// Starts the cron loop and everything already configured.
    pub async fn start(
        store: Arc<dyn Store>,
        invoker: Arc<Invoker>,
        tick: Duration,
        leadership: Arc<Leadership>,
        brokers: brokers::BrokerAllowList,
        max_message_bytes: usize,
    ) -> anyhow::Result<Arc<Triggers>> {
        let triggers = Arc::new(Triggers {
            brokers,
            max_message_bytes,
            store,
            invoker,
            http_blocked: RwLock::new(HashSet::new()),
            consumers: Mutex::new(HashMap::new()),
            consumer_specs: Mutex::new(HashMap::new()),
            gated: Mutex::new(HashSet::new()),
            leadership,
            due: Mutex::new(HashMap::new()),
            cron_calls: Arc::new(AtomicUsize::new(0)),
            cron_running: Arc::new(Mutex::new(HashSet::new())),
        });
        let all = triggers.store.list_all(Kind::Trigger).await?;
        let mut functions = HashSet::new();
        for record in &all {
            let Some(spec) = spec_of(record) else { continue };
            functions.insert(FunctionKey::new(&record.namespace, spec.function));
            triggers.sync_consumer(record);
        }
        for key in functions {
            triggers.gate(&key).await?;
        }
        tokio::spawn(cron_loop(Arc::downgrade(&triggers), tick));
        Ok(triggers)
    }

    /// Whether `/fn` calls are refused because the function's http triggers are all disabled.
    pub fn http_blocked(&self, key: &FunctionKey) -> bool {
        self.http_blocked.read().unwrap().contains(key)
    }

    /// Applies a created, changed or deleted trigger (`record` None when
    /// deleted); `functions` are the functions it named before and after.
    pub async fn changed(
        &self,
        namespace: &str,
        name: &str,
        record: Option<&Record>,
        functions: &[String],
    ) -> crate::Result<()> {
        match record {
            Some(record) => self.sync_consumer(record),
            None => self.stop_consumer(&(namespace.to_string(), name.to_string())),
        }
        for function in functions {
            self.gate(&FunctionKey::new(namespace, function)).await?;
        }
        Ok(())
    }

    fn stop_consumer(&self, key: &(String, String)) {
        self.consumer_specs.lock().unwrap().remove(key);
        if let Some(consumer) = self.consumers.lock().unwrap().remove(key) {
            consumer.stop();
        }
    }

    /// Runs an enabled amqp trigger's consumer on the leader; stops it otherwise.
    fn sync_consumer(&self, record: &Record) {
        let key = (record.namespace.clone(), record.name.clone());
        let Some(spec) = spec_of(record) else { return };
        let mut consumers = self.consumers.lock().unwrap();
        if let Some(old) = consumers.remove(&key) {
            old.stop();
        }
        self.consumer_specs.lock().unwrap().remove(&key);
        if spec.kind == TriggerType::Amqp && spec.enabled && self.leadership.is_leader() {
            self.consumer_specs
                .lock()
                .unwrap()
                .insert(key.clone(), record.spec.clone());
            let consumer = amqp::Consumer::start(
                record.namespace.clone(),
                record.name.clone(),
                spec,
                self.invoker.clone(),
                self.store.clone(),
                self.brokers.clone(),
                self.max_message_bytes,
            );
            consumers.insert(key, consumer);
        }
    }

    /// A function with triggers, none enabled, takes no work and holds no
    /// instances; with http triggers, none enabled, `/fn` answers 503.
    async fn gate(&self, key: &FunctionKey) -> crate::Result<()> {
        let specs: Vec<TriggerSpec> = self
            .store
            .list(Kind::Trigger, &key.namespace)
            .await?
            .iter()
            .filter_map(spec_of)
            .filter(|s| s.function == key.name)
            .collect();
        let any_enabled = specs.iter().any(|s| s.enabled);
        let has_http = specs.iter().any(|s| s.kind == TriggerType::Http);
        let http_enabled = specs.iter().any(|s| s.kind == TriggerType::Http && s.enabled);
        if let Err(e) = self
            .invoker
            .driver
            .set_enabled(key, specs.is_empty() || any_enabled)
            .await
        {
            tracing::warn!(function = %key, error = %e, "turning a function on or off failed");
        }
        let mut blocked = self.http_blocked.write().unwrap();
        if has_http && !http_enabled {
            blocked.insert(key.clone());
        } else {
            blocked.remove(key);
        }
        Ok(())
    }

    /// Makes this replica match the stored triggers: every function gated
    /// as its triggers say and, on the leader, a consumer per enabled amqp
    /// trigger (restarted when its spec changed).
    pub async fn converge(&self, records: &[Record], leader: bool) {
        let mut named = HashSet::new();
        for record in records {
            if let Some(spec) = spec_of(record) {
                named.insert(FunctionKey::new(&record.namespace, spec.function));
            }
        }
        let before = std::mem::replace(&mut *self.gated.lock().unwrap(), named.clone());
        for key in named.union(&before) {
            if let Err(e) = self.gate(key).await {
                tracing::warn!(function = %key, error = %e, "gating a function failed");
            }
        }
        if !leader {
            self.stop_consumers();
            return;
        }
        let mut present = HashSet::new();
        for record in records {
            let key = (record.namespace.clone(), record.name.clone());
            let unchanged = self.consumer_specs.lock().unwrap().get(&key) == Some(&record.spec);
            let wanted = spec_of(record).is_some_and(|spec| spec.kind == TriggerType::Amqp && spec.enabled);
            if wanted {
                if !unchanged {
                    self.sync_consumer(record);
                }
                present.insert(key);
            }
        }
        let gone: Vec<_> = self
            .consumers
            .lock()
            .unwrap()
            .keys()
            .filter(|k| !present.contains(*k))
            .cloned()
            .collect();
        for key in gone {
            self.stop_consumer(&key);
        }
    }

    /// Stops every consumer (no longer leading, or shutting down).
    pub fn stop_consumers(&self) {
        self.consumer_specs.lock().unwrap().clear();
        for (_, consumer) in self.consumers.lock().unwrap().drain() {
            consumer.stop();
        }
    }

    /// Returns once the cron calls under way have ended. A shutdown waits
    /// for them within its grace period, as for calls over HTTP: this
    /// replica no longer leads by then, so no new tick fires here.
    pub async fn drain(&self) {
        while self.cron_calls.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn shutdown(&self) {
        self.stop_consumers();
    }
}

/// A stored trigger's spec; None (and a warning) when it does not read
/// back, so one bad record stops neither the start nor the cron loop.
pub fn spec_of(record: &Record) -> Option<TriggerSpec> {
    serde_json::from_value(record.spec.clone())
        .inspect_err(|e| {
            tracing::warn!(namespace = %record.namespace, trigger = %record.name, error = %e,
                "left out a stored trigger that cannot be read; delete it and create it again")
        })
        .ok()
}

/// Every `tick`: fire the cron triggers that are due. A tick is claimed by a
/// compare-and-set of the trigger's status, so among several servers on one
/// database exactly one fires it. Ticks missed while no server ran are not
/// replayed: a late trigger fires once and schedules from now.
async fn cron_loop(triggers: std::sync::Weak<Triggers>, tick: Duration) {
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        interval.tick().await;
        let Some(triggers) = triggers.upgrade() else { return };
        if !triggers.leadership.is_leader() {
            continue; // the leader fires; the compare-and-set below is the second guard
        }
        if let Err(e) = fire_due(&triggers).await {
            tracing::warn!(error = %e, "checking cron triggers failed");
        }
    }
}

async fn fire_due(triggers: &Arc<Triggers>) -> crate::Result<()> {
    let now = crate::store::now();
    let mut seen = HashSet::new();
    for record in triggers.store.list_all(Kind::Trigger).await? {
        let Some(spec) = spec_of(&record) else { continue };
        if spec.kind != TriggerType::Cron || !spec.enabled {
            continue;
        }
        let status: TriggerStatus = serde_json::from_value(record.status.clone()).unwrap_or_default();
        let base = status.last_fired_at.unwrap_or(record.created_at);
        let key = (record.namespace.clone(), record.name.clone());
        seen.insert(key.clone());
        let busy = triggers.cron_running.lock().unwrap().contains(&key);
        let cached = triggers
            .due
            .lock()
            .unwrap()
            .get(&key)
            .filter(|d| d.base == base && d.spec == record.spec)
            .map(|d| d.at);
        let due = match cached {
            Some(at) => at,
            None => {
                let at = next_tick(&spec, base).await;
                let due = Due {
                    spec: record.spec.clone(),
                    base,
                    at,
                };
                triggers.due.lock().unwrap().insert(key.clone(), due);
                at
            }
        };
        let Some(due) = due else { continue };
        if due > now {
            continue;
        }
        let mut claimed = status.clone();
        claimed.last_fired_at = Some(now);
        claimed.next_fire_at = next_tick(&spec, now).await;
        // A tick that comes while the call of an earlier one runs is
        // claimed and skipped, as a Kubernetes CronJob with
        // `concurrencyPolicy: Forbid` does.
        let count = if busy { &mut claimed.skipped } else { &mut claimed.fired };
        *count = Some(count.unwrap_or(0) + 1);
        let claimed_value = serde_json::to_value(&claimed).map_err(crate::Error::internal)?;
        if !triggers
            .store
            .swap_status(
                Kind::Trigger,
                &record.namespace,
                &record.name,
                &record.status,
                &claimed_value,
            )
            .await?
        {
            continue; // another server fired this tick
        }
        if busy {
            tracing::info!(namespace = %record.namespace, trigger = %record.name,
                "cron tick skipped: the trigger's call of an earlier tick still runs");
            continue;
        }
        triggers.cron_running.lock().unwrap().insert(key.clone());
        let running = Running {
            running: triggers.cron_running.clone(),
            trigger: key,
        };
        let triggers = triggers.clone();
        let call = CronCall::start(&triggers.cron_calls);
        tokio::spawn(async move {
            let (_call, _running) = (call, running);
            let key = FunctionKey::new(&record.namespace, &spec.function);
            let invocation = Invocation {
                kind: TriggerKind::Cron,
                request_id: format!("{:016x}", rand::random::<u64>()),
                method: String::new(),
                path: String::new(),
                query: String::new(),
                headers: Default::default(),
                body: Default::default(),
                event: Some(spec.event.clone().unwrap_or_else(|| json!({}))),
            };
            let error = match triggers.invoker.invoke(&key, invocation, Run::Serving).await {
                Ok(r) if r.status < 400 => None,
                Ok(r) => Some(crate::invoker::error_text(&r.body)),
                Err(e) => Some(e.to_string()),
            };
            if let Some(error) = &error {
                let error = crate::bounds::one_line(error);
                tracing::warn!(trigger = %record.name, function = %key, %error, "cron invocation failed");
            }
            record_outcome(&*triggers.store, &record.namespace, &record.name, error).await;
        });
    }
    triggers.due.lock().unwrap().retain(|key, _| seen.contains(key));
    Ok(())
}

/// A cron trigger's first tick after `after`, searched on a blocking thread
/// (a rare schedule's search takes milliseconds); None for a schedule that
/// does not parse (the API refuses those) or never fires.
async fn next_tick(spec: &TriggerSpec, after: chrono::DateTime<chrono::Utc>) -> Option<chrono::DateTime<chrono::Utc>> {
    let schedule = Schedule::parse(
        spec.schedule.as_deref().unwrap_or_default(),
        spec.timezone.as_deref().unwrap_or("UTC"),
    )
    .ok()?;
    tokio::task::spawn_blocking(move || schedule.next_after(after))
        .await
        .ok()
        .flatten()
}

/// Sets or clears `last_error` without losing a concurrent claim.
pub async fn record_outcome(store: &dyn Store, namespace: &str, name: &str, error: Option<String>) {
    let error = error.map(|e| crate::bounds::clip(e, crate::bounds::MAX_ERROR_BYTES));
    for _ in 0..5 {
        let Ok(Some(record)) = store.get(Kind::Trigger, namespace, name).await else {
            return;
        };
        let mut status: TriggerStatus = serde_json::from_value(record.status.clone()).unwrap_or_default();
        if status.last_error == error {
            return;
        }
        status.last_error = error.clone();
        let Ok(new) = serde_json::to_value(&status) else { return };
        if let Ok(true) = store
            .swap_status(Kind::Trigger, namespace, name, &record.status, &new)
            .await
        {
            return;
        }
    }
}

/// A trigger's initial status.
pub fn initial_status(spec: &TriggerSpec, namespace: &str, external_url: &str) -> Value {
    let mut status = TriggerStatus::default();
    match spec.kind {
        TriggerType::Http => status.url = Some(format!("{external_url}/fn/{namespace}/{}", spec.function)),
        TriggerType::Cron => {
            status.fired = Some(0);
            if let (Some(s), Some(tz)) = (&spec.schedule, &spec.timezone) {
                status.next_fire_at = Schedule::parse(s, tz)
                    .ok()
                    .and_then(|s| s.next_after(crate::store::now()));
            }
        }
        TriggerType::Amqp => {}
    }
    serde_json::to_value(status).expect("plain status")
}
