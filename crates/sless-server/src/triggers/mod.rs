//! The trigger runtime: fires cron schedules (once per tick across every
//! server on one database), consumes RabbitMQ queues, and turns a function
//! off when all its triggers are disabled. Cron ticks and consumers run on
//! the leader only; every replica gates its own functions.

mod amqp;
pub mod brokers;
pub mod schedule;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde_json::{json, Value};
use sless_api::{TriggerSpec, TriggerStatus, TriggerType};

use crate::cluster::Leadership;
use crate::invoker::{Invoker, Run};
use crate::store::{Kind, Record, Store};
use sless_driver::{FunctionKey, TriggerKind};

use self::schedule::Schedule;

/// Keeps triggers running.
pub struct Triggers {
    store: Arc<dyn Store>,
    invoker: Arc<Invoker>,
    /// Functions whose http triggers are all disabled.
    http_blocked: RwLock<HashSet<FunctionKey>>,
    /// Held across a read of the store and its application (see
    /// `changed`, `converge`), so a change is never undone by an older
    /// read applied after it.
    consumers: tokio::sync::Mutex<Consumers>,
    /// Changes the handlers applied to `consumers`, counted.
    applied_changes: AtomicU64,
    /// Functions named by a trigger at the last convergence.
    gated: Mutex<HashSet<FunctionKey>>,
    leadership: Arc<Leadership>,
    /// The brokers amqp triggers may connect to.
    pub brokers: brokers::BrokerAllowList,
    /// How amqp triggers' consumers handle their messages.
    amqp: amqp::Handling,
    /// Each cron trigger's next tick, computed once per fire (or spec
    /// change) on a blocking thread, not on every pass of the loop.
    due: Mutex<HashMap<(String, String), Due>>,
    /// Calls under way from cron ticks and amqp messages, which a shutdown
    /// lets finish (`drain`).
    calls: Arc<AtomicUsize>,
    /// Cron triggers whose call of an earlier tick still runs here: their
    /// ticks are skipped meanwhile, so a call slower than its schedule
    /// does not pile calls up in the function's queue.
    cron_running: Arc<Mutex<HashSet<(String, String)>>>,
}

/// A cron trigger's call under way, in `Triggers::cron_running` until dropped.
struct CronRunning {
    running: Arc<Mutex<HashSet<(String, String)>>>,
    trigger: (String, String),
}

impl Drop for CronRunning {
    fn drop(&mut self) {
        self.running.lock().unwrap().remove(&self.trigger);
    }
}

/// The amqp consumers this replica runs, and which triggers its handlers
/// applied lately.
#[derive(Default)]
struct Consumers {
    /// By namespace and trigger name.
    running: HashMap<(String, String), Running>,
    /// The change count at which a handler last applied a trigger: a
    /// convergence pass whose snapshot of the store was read before that
    /// leaves the trigger as the handler left it. Kept while a pass may
    /// still hold such a snapshot.
    applied: HashMap<(String, String), u64>,
}

/// A running consumer and the spec it was started with.
struct Running {
    spec: Value,
    consumer: amqp::Consumer,
}

/// What `Triggers::applied_changes` counted when a convergence pass began
/// to read the store.
#[derive(Clone, Copy)]
pub struct ChangeCount(u64);

/// One trigger's call under way, counted in `Triggers::calls` until dropped.
struct TriggerCall(Arc<AtomicUsize>);

impl TriggerCall {
    fn start(calls: &Arc<AtomicUsize>) -> TriggerCall {
        calls.fetch_add(1, Ordering::SeqCst);
        TriggerCall(calls.clone())
    }
}

impl Drop for TriggerCall {
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
        retry_base: Duration,
    ) -> anyhow::Result<Arc<Triggers>> {
        let calls = Arc::new(AtomicUsize::new(0));
        let triggers = Arc::new(Triggers {
            brokers,
            amqp: amqp::Handling {
                max_message_bytes,
                retry_base,
                calls: calls.clone(),
            },
            store,
            invoker,
            http_blocked: RwLock::new(HashSet::new()),
            consumers: tokio::sync::Mutex::new(Consumers::default()),
            applied_changes: AtomicU64::new(0),
            gated: Mutex::new(HashSet::new()),
            leadership,
            due: Mutex::new(HashMap::new()),
            calls,
            cron_running: Arc::new(Mutex::new(HashSet::new())),
        });
        let all = triggers.store.list_all(Kind::Trigger).await?;
        let mut functions = HashSet::new();
        let mut consumers = triggers.consumers.lock().await;
        for record in &all {
            let Some(spec) = spec_of(record) else { continue };
            functions.insert(FunctionKey::new(&record.namespace, spec.function));
            let key = (record.namespace.clone(), record.name.clone());
            triggers.sync_consumer(&mut consumers.running, key, Some(record)).await;
        }
        drop(consumers);
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

    /// Applies a created, changed or deleted trigger; `functions` are the
    /// functions it named before and after. The consumer follows the
    /// trigger as the store holds it now, not as the caller last saw it:
    /// of two changes whose handlers get here out of order (or one made
    /// through another replica meanwhile), the later stored one wins.
    pub async fn changed(&self, namespace: &str, name: &str, functions: &[String]) -> crate::Result<()> {
        {
            let mut consumers = self.consumers.lock().await;
            let record = self.store.get(Kind::Trigger, namespace, name).await?;
            let key = (namespace.to_string(), name.to_string());
            self.sync_consumer(&mut consumers.running, key.clone(), record.as_ref())
                .await;
            let count = self.applied_changes.fetch_add(1, Ordering::SeqCst) + 1;
            consumers.applied.insert(key, count);
        }
        for function in functions {
            self.gate(&FunctionKey::new(namespace, function)).await?;
        }
        Ok(())
    }

    /// Runs an enabled amqp trigger's consumer on the leader, restarted
    /// when its spec changed; stops it otherwise (`record` None: deleted).
    /// The old consumer's connection is closed before the new one starts.
    async fn sync_consumer(
        &self,
        consumers: &mut HashMap<(String, String), Running>,
        key: (String, String),
        record: Option<&Record>,
    ) {
        let wanted = record
            .and_then(|record| Some((record, spec_of(record)?)))
            .filter(|(_, spec)| spec.kind == TriggerType::Amqp && spec.enabled && self.leadership.is_leader());
        let running = consumers.get(&key).map(|running| &running.spec);
        if running.is_some() && running == wanted.as_ref().map(|(record, _)| &record.spec) {
            return;
        }
        if let Some(old) = consumers.remove(&key) {
            old.consumer.stop().await;
        }
        if let Some((record, spec)) = wanted {
            let consumer = amqp::Consumer::start(
                record.namespace.clone(),
                record.name.clone(),
                spec,
                self.invoker.clone(),
                self.store.clone(),
                self.brokers.clone(),
                self.amqp.clone(),
            );
            let spec = record.spec.clone();
            consumers.insert(key, Running { spec, consumer });
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

    /// What to pass `converge` for a snapshot of the store read from now on.
    pub fn change_count(&self) -> ChangeCount {
        ChangeCount(self.applied_changes.load(Ordering::SeqCst))
    }

    /// Makes this replica match the stored triggers, `records`, read after
    /// `read_from` was taken: every function gated as its triggers say
    /// and, on the leader, a consumer per enabled amqp trigger (restarted
    /// when its spec changed). A trigger a handler applied since may be
    /// older in the snapshot (deleted but still in it, a patch not in it
    /// yet): its consumer stays as the handler left it. Whether every
    /// consumer follows the snapshot; false when one was left so (a pass
    /// on a snapshot read later settles it, as the snapshot may also hold
    /// a change made through another replica after the handler's read).
    pub async fn converge(&self, records: &[Record], leader: bool, read_from: ChangeCount) -> bool {
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
            self.stop_consumers().await;
            return true;
        }
        let mut consumers = self.consumers.lock().await;
        let Consumers { running, applied } = &mut *consumers;
        // Passes to come read the store after these changes.
        applied.retain(|_, count| *count > read_from.0);
        let mut present = HashSet::new();
        for record in records {
            let key = (record.namespace.clone(), record.name.clone());
            present.insert(key.clone());
            if !applied.contains_key(&key) {
                self.sync_consumer(running, key, Some(record)).await;
            }
        }
        let gone: Vec<_> = running
            .keys()
            .filter(|k| !present.contains(*k) && !applied.contains_key(*k))
            .cloned()
            .collect();
        for key in gone {
            self.sync_consumer(running, key, None).await;
        }
        applied.is_empty()
    }

    /// Stops every consumer (no longer leading, or shutting down) and
    /// returns once their connections are closed.
    pub async fn stop_consumers(&self) {
        let mut consumers = self.consumers.lock().await;
        let stopping = consumers.running.drain().map(|(_, running)| running.consumer.stop());
        futures::future::join_all(stopping).await;
    }

    /// Returns once the cron calls and amqp messages' calls under way have
    /// ended. A shutdown waits for them within its grace period, as for
    /// calls over HTTP: this replica no longer leads by then, so no new
    /// tick fires and no consumer takes a message here.
    pub async fn drain(&self) {
        while self.calls.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn shutdown(&self) {
        self.stop_consumers().await;
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
        let running = CronRunning {
            running: triggers.cron_running.clone(),
            trigger: key,
        };
        let triggers = triggers.clone();
        let call = TriggerCall::start(&triggers.calls);
        tokio::spawn(async move {
            let (_call, _running) = (call, running);
            let key = FunctionKey::new(&record.namespace, &spec.function);
            let event = spec.event.clone().unwrap_or_else(|| json!({}));
            let invocation = crate::invoker::event_call(TriggerKind::Cron, event);
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
