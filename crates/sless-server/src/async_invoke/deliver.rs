//! Delivery: each replica claims due events a bounded page at a time (never
//! more than it has free delivery slots, so memory does not grow with the
//! backlog), runs each attempt through the invoker, and writes outcomes in
//! groups. Slots are shared fairly between namespaces: each free one goes
//! to the namespace with the fewest attempts under way, and no namespace
//! holds more than its share, so one tenant's backlog of slow events
//! cannot hold every slot while another's wait. A held event's lease is renewed while its attempt runs; a
//! replica that dies lets its leases run out and another takes the events
//! again (at-least-once).
//!
//! A replica fenced off the store ([`crate::cluster::Cluster::fenced`]: it
//! lost touch with it while other replicas were live, and may not serve
//! the version made Ready meanwhile yet) claims nothing until it is back
//! and serves what the store says, as it refuses `/fn` calls: an event
//! accepted after a version was Ready is delivered to that version or a
//! newer one. The other replicas deliver meanwhile.
//!
//! A replica shutting down claims nothing more and lets its attempts under
//! way finish within the grace period ([`Deliverer::drain`]); what is
//! still running then goes back to the queue, the attempt not counted
//! ([`Deliverer::hand_back`]), for the next replica or start to deliver.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sless_api::{AsyncSettings, AsyncStatus, DestinationType, FunctionSpec};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::destinations::{outcome, Condition, Publisher};
use crate::invoker::{Invoker, Run};
use crate::store::events::{now_micros, ClaimedEvent, EventStore, Finish, NewEvent};
use crate::store::{Kind, Store};
use sless_driver::{FunctionKey, Invocation, InvokeError, TriggerKind, VersionRef};

/// Events claimed in one statement at most.
const PAGE: usize = 256;
/// How often a replica looks for due events when nothing woke it.
const POLL: Duration = Duration::from_millis(250);
/// How long a function's spec is reused before it is read again.
const SPEC_TTL: Duration = Duration::from_secs(1);
/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// The wait before trying again an event whose function had no free
/// instance (not counted as an attempt).
const THROTTLE_BACKOFF: Duration = Duration::from_secs(1);
/// How often a function that can run has its parked events woken again
/// when nothing about it changed (an event parked by a race with the last
/// wake, or while its triggers had it disabled).
const REWAKE: Duration = Duration::from_secs(10);

/// An outcome event's headers.
const OUTCOME_HEADERS: &str = r#"[["content-type","application/json"]]"#;

/// What a function's parked events were woken for.
#[derive(Debug, PartialEq)]
enum Woke {
    /// It can run this version.
    Runs(VersionRef),
    /// It cannot run, and was made at this time: the events accepted
    /// before are a deleted function's.
    Predecessor(i64),
    /// It was deleted.
    Gone,
}

/// How delivery runs.
#[derive(Debug, Clone)]
pub struct DeliverySettings {
    /// Attempts in flight on this replica at most.
    pub concurrency: usize,
    /// Attempts in flight on this replica for one namespace at most.
    pub namespace_concurrency: usize,
    /// The wait after the first failed attempt; doubled after each further one.
    pub retry_base: Duration,
    /// How long a claim holds an event; renewed every third of it.
    pub lease: Duration,
    /// The most bytes an outcome record takes as JSON (the asynchronous
    /// event's limit): the request's body and the answer are cut to fit.
    pub max_outcome_bytes: usize,
}

/// Counters for `/metrics`.
#[derive(Default)]
pub struct DeliveryStats {
    pub succeeded: AtomicU64,
    pub retried: AtomicU64,
    pub failed: AtomicU64,
    pub throttled: AtomicU64,
}

/// A function as the deliverer reads it: its spec, and when it was made
/// (microseconds since the epoch), which tells the events sent to it from
/// those sent to a deleted function of the same name.
#[derive(Clone)]
struct Found {
    spec: FunctionSpec,
    created_at: i64,
}

pub struct Deliverer {
    events: Arc<dyn EventStore>,
    store: Arc<dyn Store>,
    invoker: Arc<Invoker>,
    publisher: Publisher,
    settings: DeliverySettings,
    slots: Arc<Semaphore>,
    /// Events this replica holds: id → claim.
    held: Mutex<HashMap<String, String>>,
    /// Attempts under way here, per namespace.
    busy: Mutex<HashMap<String, usize>>,
    /// Claim rounds so far: ties between namespaces go to each in turn.
    rounds: AtomicU64,
    /// Outcomes waiting to be written, and the writer's wake-up.
    finished: Mutex<Vec<Finish>>,
    finish_now: Notify,
    functions: Mutex<HashMap<FunctionKey, (Instant, Option<Found>)>>,
    /// What each function's parked events were last woken for, when, and
    /// whether that woke any.
    woken: Mutex<HashMap<FunctionKey, (Woke, Instant, bool)>>,
    /// Wakes the claim loop.
    wake: Arc<Notify>,
    /// This replica's prefix of claim tokens, and the count after it.
    token: String,
    claims: AtomicU64,
    pub stats: DeliveryStats,
    /// Bounds the outcomes stored for destination functions, as accepted events are.
    backlog: Arc<super::Backlogs>,
    /// The claim loop, awaited by `drain`.
    claiming: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Set by `hand_back`: outcomes are no longer written.
    handed_back: AtomicBool,
    cluster: Arc<crate::cluster::Cluster>,
    /// Whether the claim loop holds off, fenced (for `/metrics`).
    pub fenced: AtomicBool,
}

/// What the deliverer shares with the rest of the server.
pub struct Shared {
    /// Wakes the claim loop (an event stored).
    pub wake: Arc<Notify>,
    pub backlog: Arc<super::Backlogs>,
    /// Whether this replica is fenced off the store.
    pub cluster: Arc<crate::cluster::Cluster>,
}

impl Deliverer {
    pub fn start(
        events: Arc<dyn EventStore>,
        store: Arc<dyn Store>,
        invoker: Arc<Invoker>,
        publisher: Publisher,
        settings: DeliverySettings,
        shared: Shared,
    ) -> Arc<Deliverer> {
        let Shared { wake, backlog, cluster } = shared;
        let deliverer = Arc::new(Deliverer {
            events,
            store,
            invoker,
            publisher,
            slots: Arc::new(Semaphore::new(settings.concurrency.max(1))),
            settings,
            held: Mutex::new(HashMap::new()),
            busy: Mutex::new(HashMap::new()),
            rounds: AtomicU64::new(0),
            finished: Mutex::new(Vec::new()),
            finish_now: Notify::new(),
            functions: Mutex::new(HashMap::new()),
            woken: Mutex::new(HashMap::new()),
            wake: wake.clone(),
            token: crate::record::hex_id(&[(rand::random::<u64>(), 16)]),
            claims: AtomicU64::new(0),
            stats: DeliveryStats::default(),
            backlog,
            claiming: Mutex::new(None),
            handed_back: AtomicBool::new(false),
            cluster,
            fenced: AtomicBool::new(false),
        });
        let claiming = tokio::spawn(deliverer.clone().claim_loop(wake));
        *deliverer.claiming.lock().unwrap_or_else(PoisonError::into_inner) = Some(claiming);
        tokio::spawn(deliverer.clone().finish_loop());
        tokio::spawn(deliverer.clone().renew_loop());
        deliverer
    }

    /// Events being attempted or waiting for their outcome to be written here.
    pub fn in_flight(&self) -> usize {
        self.held.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Claims nothing more, and returns once every attempt under way here
    /// has ended and its outcome is written (the caller bounds the wait).
    pub async fn drain(&self) {
        self.slots.close();
        let claiming = self.claiming.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(claiming) = claiming {
            let _ = claiming.await;
        }
        while self.in_flight() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Gives back what is still held when the drain's time is up: outcomes
    /// already known are written, and events whose attempts are still
    /// running are queued again, due now, their attempt not counted (the
    /// instances are about to be stopped under them; what those stopped
    /// attempts return is not written).
    pub async fn hand_back(&self) {
        self.slots.close();
        self.handed_back.store(true, Ordering::SeqCst);
        let known = std::mem::take(&mut *self.finished.lock().unwrap_or_else(PoisonError::into_inner));
        if !known.is_empty() {
            if let Err(e) = self.events.finish(&known).await {
                tracing::warn!(error = %e, events = known.len(), "writing asynchronous outcomes at shutdown failed");
            }
        }
        let known: std::collections::HashSet<&str> = known.iter().map(|f| f.id.as_str()).collect();
        let running: Vec<(String, String)> = self
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(id, _)| !known.contains(id.as_str()))
            .map(|(id, claim)| (id.clone(), claim.clone()))
            .collect();
        if running.is_empty() {
            return;
        }
        let why = "the replica delivering it shut down during the attempt; not counted, delivered again";
        match self.events.release(&running, now_micros(), why).await {
            Ok(()) => tracing::info!(
                events = running.len(),
                "asynchronous events under way at shutdown queued again"
            ),
            Err(e) => {
                tracing::warn!(error = %e, events = running.len(), "queueing asynchronous events again at shutdown failed; their leases will run out")
            }
        }
    }

    async fn claim_loop(self: Arc<Self>, wake: Arc<Notify>) {
        loop {
            // Only as many events as there are free slots: the page, not
            // the backlog, is in memory. Closed by `drain`: claim no more.
            let Ok(first) = self.slots.clone().acquire_owned().await else {
                return;
            };
            // Fenced: this replica may still serve a version older than
            // one Ready; what it claimed would go there.
            let fenced = self.cluster.fenced();
            if self.fenced.swap(fenced, Ordering::Relaxed) != fenced {
                match fenced {
                    true => tracing::warn!("out of touch with the store: claiming no asynchronous events until this replica serves what it says"),
                    false => tracing::info!("claiming asynchronous events again"),
                }
            }
            if fenced {
                drop(first);
                let _ = tokio::time::timeout(POLL, wake.notified()).await;
                continue;
            }
            let mut slots = vec![first];
            while slots.len() < PAGE {
                match self.slots.clone().try_acquire_owned() {
                    Ok(slot) => slots.push(slot),
                    Err(_) => break,
                }
            }
            match self.claim_fairly(slots.len()).await {
                Ok(page) if page.is_empty() => {
                    drop(slots);
                    let _ = tokio::time::timeout(POLL, wake.notified()).await;
                }
                Ok(page) => {
                    let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
                    let mut busy = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
                    for event in &page {
                        held.insert(event.event.id.clone(), event.claim.clone());
                        *busy.entry(event.event.namespace.clone()).or_default() += 1;
                    }
                    drop((held, busy));
                    for (event, slot) in page.into_iter().zip(slots) {
                        tokio::spawn(self.clone().deliver(event, slot));
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "claiming asynchronous events failed; retrying");
                    drop(slots);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// Claims at most `free` due events. Each free slot goes to the
    /// namespace with the fewest attempts under way here (ties to each in
    /// turn), up to `namespace_concurrency`; a namespace with fewer due
    /// events than its slots gives the rest back to the others.
    async fn claim_fairly(&self, free: usize) -> crate::Result<Vec<ClaimedEvent>> {
        let now = now_micros();
        let lease_until = now + self.settings.lease.as_micros() as i64;
        let mut waiting = self.events.due_namespaces(now).await?;
        if !waiting.is_empty() {
            let turn = self.rounds.fetch_add(1, Ordering::Relaxed) as usize % waiting.len();
            waiting.rotate_left(turn);
        }
        let mut loads: Vec<(String, usize)> = {
            let busy = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
            waiting
                .into_iter()
                .map(|ns| {
                    let load = busy.get(&ns).copied().unwrap_or(0);
                    (ns, load)
                })
                .collect()
        };
        let mut page = Vec::new();
        let mut left = free;
        while left > 0 && !loads.is_empty() {
            let load_of: Vec<usize> = loads.iter().map(|(_, load)| *load).collect();
            let shares = share_out(&load_of, left, self.settings.namespace_concurrency);
            if shares.iter().all(|&share| share == 0) {
                break;
            }
            let mut still = Vec::new();
            for ((ns, load), share) in loads.into_iter().zip(shares) {
                if share == 0 {
                    still.push((ns, load));
                    continue;
                }
                let claim = format!("{}-{}", self.token, self.claims.fetch_add(1, Ordering::Relaxed));
                let taken = match self.events.claim(&ns, now, lease_until, share as i64, &claim).await {
                    Ok(taken) => taken,
                    // What is taken already is delivered; the rest waits for the next round.
                    Err(e) if !page.is_empty() => {
                        tracing::warn!(error = %e, namespace = %ns, "claiming asynchronous events failed; retrying");
                        return Ok(page);
                    }
                    Err(e) => return Err(e),
                };
                left -= taken.len();
                // A namespace that had fewer due events than its share is done.
                if taken.len() == share {
                    still.push((ns, load + share));
                }
                page.extend(taken);
            }
            loads = still;
        }
        Ok(page)
    }

    async fn deliver(self: Arc<Self>, event: ClaimedEvent, slot: OwnedSemaphorePermit) {
        let finish = self.attempt(&event).await;
        // The slot is free once the attempt is over; the event stays held
        // (its lease renewed) until its outcome is written.
        drop(slot);
        {
            let mut busy = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(load) = busy.get_mut(&event.event.namespace) {
                *load -= 1;
                if *load == 0 {
                    busy.remove(&event.event.namespace);
                }
            }
        }
        // Its namespace may have been at its share with slots free.
        self.wake.notify_one();
        self.finished
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(finish);
        self.finish_now.notify_one();
    }

    /// One attempt and what it leaves: succeeded, queued again, or failed.
    async fn attempt(&self, claimed: &ClaimedEvent) -> Finish {
        let event = &claimed.event;
        let key = FunctionKey::new(&event.namespace, &event.function);
        let now = now_micros();
        let mut finish = Finish {
            id: event.id.clone(),
            claim: claimed.claim.clone(),
            status: AsyncStatus::Failed,
            attempts: claimed.attempts,
            due_at: now,
            succeeded_attempt: None,
            last_error: None,
            last_status: None,
            destination_error: None,
            then: None,
            parked: false,
        };
        let spec = match self.function(&key).await {
            Ok(Some(found)) if found.created_at <= event.created_at => found.spec,
            Ok(Some(_)) => {
                // Deleted since, and made again: the event was not sent to
                // this function (its code and destinations are another's).
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                finish.attempts -= 1;
                finish.last_error = Some(format!(
                    "function {key} was deleted after the event was accepted; the function made since under its name does not take it"
                ));
                return finish;
            }
            Ok(None) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                finish.attempts -= 1;
                finish.last_error = Some(format!("function {key} no longer exists"));
                return finish;
            }
            Err(e) => {
                // Not the event's fault: try again without counting it.
                finish.status = AsyncStatus::Queued;
                finish.attempts -= 1;
                finish.due_at = now + THROTTLE_BACKOFF.as_micros() as i64;
                finish.last_error = Some(format!("reading the function failed: {e}"));
                return finish;
            }
        };
        let settings = spec.async_settings.clone().unwrap_or_default();
        let age = Duration::from_micros((now - event.created_at).max(0) as u64);
        if age > Duration::from_secs(settings.max_event_age_sec.into()) {
            finish.attempts -= 1;
            finish.last_error = Some(format!(
                "the event was not delivered within async.max_event_age_sec ({} s)",
                settings.max_event_age_sec
            ));
            self.stats.failed.fetch_add(1, Ordering::Relaxed);
            self.send_outcome(&mut finish, event, &settings, Condition::EventAgeExceeded, None)
                .await;
            return finish;
        }
        let result = self.invoker.invoke(&key, invocation(claimed), Run::Serving).await;
        let error = match result {
            Ok(answer) if answer.status < 400 => {
                finish.status = AsyncStatus::Succeeded;
                finish.succeeded_attempt = Some(claimed.attempts);
                finish.last_status = Some(answer.status);
                self.stats.succeeded.fetch_add(1, Ordering::Relaxed);
                let body = &answer.body[..answer.body.len().min(self.settings.max_outcome_bytes)];
                self.send_outcome(&mut finish, event, &settings, Condition::Success, Some(body))
                    .await;
                return finish;
            }
            Ok(answer) => {
                finish.last_status = Some(answer.status);
                crate::invoker::error_text(&answer.body)
            }
            Err(
                e @ (InvokeError::NotDeployed(_)
                | InvokeError::Disabled(_)
                | InvokeError::QueueFull(_)
                | InvokeError::AtQuota { .. }),
            ) => {
                // Nothing ran: not an attempt; the event's age limits these.
                self.stats.throttled.fetch_add(1, Ordering::Relaxed);
                finish.status = AsyncStatus::Queued;
                finish.attempts -= 1;
                finish.last_error = Some(crate::bounds::clip(e.to_string(), crate::bounds::MAX_ERROR_BYTES));
                if matches!(e, InvokeError::QueueFull(_) | InvokeError::AtQuota { .. }) {
                    finish.due_at = now + THROTTLE_BACKOFF.as_micros() as i64;
                } else {
                    // Off or not built: polling each event every second
                    // would rewrite the whole backlog every second. It
                    // waits until `wake_parked` sees the function able to
                    // run, or until it expires.
                    finish.parked = true;
                    finish.due_at = expiry(event, &settings).max(now + THROTTLE_BACKOFF.as_micros() as i64);
                }
                return finish;
            }
            Err(e) => {
                finish.last_status = Some(if matches!(e, InvokeError::Timeout { .. }) {
                    504
                } else {
                    502
                });
                crate::bounds::clip(e.to_string(), crate::bounds::MAX_ERROR_BYTES)
            }
        };
        finish.last_error = Some(error);
        if claimed.attempts > settings.retry_limit {
            self.stats.failed.fetch_add(1, Ordering::Relaxed);
            self.send_outcome(&mut finish, event, &settings, Condition::RetriesExhausted, None)
                .await;
        } else {
            self.stats.retried.fetch_add(1, Ordering::Relaxed);
            finish.status = AsyncStatus::Queued;
            finish.due_at = now + backoff(self.settings.retry_base, claimed.attempts).as_micros() as i64;
        }
        finish
    }

    /// Sends the outcome to the destination for `condition`, if there is
    /// one (and the event is not itself an outcome: those go nowhere, so
    /// destinations cannot loop).
    async fn send_outcome(
        &self,
        finish: &mut Finish,
        event: &NewEvent,
        settings: &AsyncSettings,
        condition: Condition,
        response: Option<&[u8]>,
    ) {
        let destination = match condition {
            Condition::Success => &settings.on_success,
            _ => &settings.on_failure,
        };
        let (Some(destination), None) = (destination, &event.source) else {
            return;
        };
        let record = outcome(
            event,
            condition,
            finish.attempts,
            finish.last_status,
            finish.last_error.as_deref(),
            response,
            self.settings.max_outcome_bytes,
        );
        let body = serde_json::to_vec(&record).expect("plain JSON");
        match destination.kind {
            DestinationType::Function => {
                let name = destination.function.clone().unwrap_or_default();
                let target = FunctionKey::new(&event.namespace, &name);
                match self.function(&target).await {
                    Ok(Some(_)) => {}
                    // Stored for no function, it would wait under its name
                    // (and go to whichever function is made under it later).
                    Ok(None) => {
                        finish.destination_error = Some(format!(
                            "the destination function {target} does not exist; the outcome was not sent"
                        ));
                        return;
                    }
                    Err(e) => {
                        finish.destination_error = Some(crate::bounds::clip(
                            format!("reading the destination function {target} failed: {e}"),
                            crate::bounds::MAX_ERROR_BYTES,
                        ));
                        return;
                    }
                }
                let created_at = now_micros();
                let then = NewEvent {
                    id: super::event_id(created_at),
                    namespace: event.namespace.clone(),
                    function: name,
                    request_id: event.request_id.clone(),
                    method: "POST".into(),
                    path: String::new(),
                    query: String::new(),
                    headers: OUTCOME_HEADERS.into(),
                    body: body.into(),
                    created_at,
                    source: Some(event.id.clone()),
                    parked_until: None,
                };
                // The source event's caller makes this one too: it counts in
                // the namespace's bounds as theirs would, until stored.
                if let Err(full) = self.backlog.admit(&then) {
                    finish.destination_error = Some(format!(
                        "the outcome was not sent to {target}: the namespace has {full}"
                    ));
                    return;
                }
                finish.then = Some(then);
            }
            DestinationType::Amqp => {
                let url = destination.broker_url.as_deref().unwrap_or_default();
                let queue = destination.queue.as_deref().unwrap_or_default();
                if let Err(e) = self.publisher.publish(url, queue, &body).await {
                    tracing::warn!(event = %event.id, error = %e, "sending an asynchronous event's outcome failed");
                    finish.destination_error = Some(crate::bounds::clip(e, crate::bounds::MAX_ERROR_BYTES));
                }
            }
        }
    }

    /// Until when an event for `key` accepted now waits parked: None when
    /// the function can run (or is gone: the attempt reports that).
    pub async fn parked_until(&self, key: &FunctionKey, event: &NewEvent) -> Option<i64> {
        let spec = self.function(key).await.ok()??.spec;
        if spec.replicas != Some(0) && self.invoker.routes.latest(key).is_some() {
            return None;
        }
        Some(expiry(event, &spec.async_settings.unwrap_or_default()))
    }

    /// Wakes the parked events of those of `functions` (the ones with a
    /// backlog) that are due an attempt: all of them when the function can
    /// run (on, with a ready version) or is gone (they fail, "no longer
    /// exists"); those accepted before it was made when it cannot run (a
    /// deleted function's, made again under its name: they fail too). Each
    /// is woken when that changes, and again every [`REWAKE`].
    pub async fn wake_parked(&self, functions: impl Iterator<Item = FunctionKey>) {
        for key in functions {
            let woke = match self.function(&key).await {
                Ok(Some(found)) => match self.invoker.routes.latest(&key) {
                    Some(version) if found.spec.replicas != Some(0) => Woke::Runs(version),
                    _ => Woke::Predecessor(found.created_at),
                },
                Ok(None) => Woke::Gone,
                Err(e) => {
                    tracing::warn!(function = %key, error = %e, "reading a function to wake its events failed");
                    continue;
                }
            };
            if let Some((last, at, any)) = self.woken.lock().unwrap_or_else(PoisonError::into_inner).get(&key) {
                // A function that cannot run has only its predecessor's
                // events to wake, and none come after it was made: once a
                // wake finds none, there are none (its own stay parked,
                // and cost no query each round).
                let settled = !*any && !matches!(woke, Woke::Runs(_));
                if *last == woke && (at.elapsed() < REWAKE || settled) {
                    continue;
                }
            }
            let before = match woke {
                Woke::Predecessor(created_at) => created_at,
                Woke::Runs(_) | Woke::Gone => i64::MAX,
            };
            match self.events.wake(&key.namespace, &key.name, before, now_micros()).await {
                Ok(woken) => {
                    if woken > 0 {
                        tracing::info!(function = %key, events = woken, "parked asynchronous events are due again");
                        self.wake.notify_one();
                    }
                    let mut memo = self.woken.lock().unwrap_or_else(PoisonError::into_inner);
                    if memo.len() > 10_000 {
                        memo.retain(|_, (_, at, _)| at.elapsed() < REWAKE);
                    }
                    memo.insert(key, (woke, Instant::now(), woken > 0));
                }
                Err(e) => tracing::warn!(function = %key, error = %e, "waking parked asynchronous events failed"),
            }
        }
    }

    /// The function, read at most once a second; None when it is gone.
    async fn function(&self, key: &FunctionKey) -> crate::Result<Option<Found>> {
        if let Some((read, found)) = self.functions.lock().unwrap_or_else(PoisonError::into_inner).get(key) {
            if read.elapsed() < SPEC_TTL {
                return Ok(found.clone());
            }
        }
        let found = match self.store.get(Kind::Function, &key.namespace, &key.name).await? {
            Some(record) => Some(Found {
                spec: serde_json::from_value(record.spec).map_err(crate::Error::internal)?,
                created_at: record.created_at.timestamp_micros(),
            }),
            None => None,
        };
        let mut functions = self.functions.lock().unwrap_or_else(PoisonError::into_inner);
        if functions.len() > 10_000 {
            functions.retain(|_, (read, _)| read.elapsed() < SPEC_TTL);
        }
        functions.insert(key.clone(), (Instant::now(), found.clone()));
        Ok(found)
    }

    /// Writes outcomes as they come, in groups; a failed write is retried
    /// (the events stay held and their leases renewed meanwhile).
    async fn finish_loop(self: Arc<Self>) {
        let mut backoff = Duration::from_millis(100);
        loop {
            if self.handed_back.load(Ordering::SeqCst) {
                return;
            }
            let batch = std::mem::take(&mut *self.finished.lock().unwrap_or_else(PoisonError::into_inner));
            if batch.is_empty() {
                self.finish_now.notified().await;
                continue;
            }
            match self.events.finish(&batch).await {
                Ok(()) => {
                    backoff = Duration::from_millis(100);
                    let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
                    for finish in &batch {
                        held.remove(&finish.id);
                        if let Some(then) = &finish.then {
                            self.backlog.stored(&then.namespace, super::Waiting::of(then), true);
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, events = batch.len(), "writing asynchronous outcomes failed; retrying");
                    self.finished
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .extend(batch);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    async fn renew_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.settings.lease / 3);
        loop {
            tick.tick().await;
            let held: Vec<(String, String)> = self
                .held
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .map(|(id, claim)| (id.clone(), claim.clone()))
                .collect();
            if held.is_empty() {
                continue;
            }
            let lease_until = now_micros() + self.settings.lease.as_micros() as i64;
            if let Err(e) = self.events.renew(&held, lease_until).await {
                tracing::warn!(error = %e, events = held.len(), "renewing leases of asynchronous events failed");
            }
        }
    }
}

/// Shares `free` slots between namespaces with `loads` attempts under way:
/// one at a time to the least loaded (the first of equals), none past `most`.
fn share_out(loads: &[usize], free: usize, most: usize) -> Vec<usize> {
    let mut shares = vec![0; loads.len()];
    let mut next: BinaryHeap<Reverse<(usize, usize)>> = loads
        .iter()
        .enumerate()
        .filter(|(_, &load)| load < most)
        .map(|(i, &load)| Reverse((load, i)))
        .collect();
    for _ in 0..free {
        let Some(Reverse((load, i))) = next.pop() else {
            break;
        };
        shares[i] += 1;
        if load + 1 < most {
            next.push(Reverse((load + 1, i)));
        }
    }
    shares
}

/// When `event` is too old to be attempted: just after its
/// `async.max_event_age_sec`.
fn expiry(event: &NewEvent, settings: &AsyncSettings) -> i64 {
    event.created_at + i64::from(settings.max_event_age_sec) * 1_000_000 + 1
}

/// The wait after failed attempt number `attempts` (1 = the first).
fn backoff(base: Duration, attempts: u32) -> Duration {
    base.saturating_mul(1 << attempts.saturating_sub(1).min(20))
        .min(MAX_BACKOFF)
}

/// The call a stored event makes: the request as it came, with the event's
/// id and the attempt's number in `x-sless-async-id` and `x-sless-attempt`.
fn invocation(claimed: &ClaimedEvent) -> Invocation {
    let event = &claimed.event;
    let mut headers: Vec<(String, String)> = serde_json::from_str(&event.headers).unwrap_or_default();
    headers.push(("x-sless-async-id".into(), event.id.clone()));
    headers.push(("x-sless-attempt".into(), claimed.attempts.to_string()));
    Invocation {
        kind: TriggerKind::Async,
        request_id: event.request_id.clone(),
        method: event.method.clone(),
        path: event.path.clone(),
        query: event.query.clone(),
        headers,
        body: event.body.clone(),
        event: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_base_up_to_five_minutes() {
        let base = Duration::from_secs(1);
        assert_eq!(backoff(base, 1), Duration::from_secs(1));
        assert_eq!(backoff(base, 2), Duration::from_secs(2));
        assert_eq!(backoff(base, 3), Duration::from_secs(4));
        assert_eq!(backoff(base, 12), MAX_BACKOFF);
        assert_eq!(backoff(base, u32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn free_slots_go_to_the_least_loaded_namespaces_up_to_their_share() {
        // The idle namespace gets slots before the busy one.
        assert_eq!(share_out(&[5, 0], 3, 32), vec![0, 3]);
        // Levels even out, then alternate, the first of equals first.
        assert_eq!(share_out(&[2, 0, 1], 6, 32), vec![1, 3, 2]);
        // None past its share, even with slots left over.
        assert_eq!(share_out(&[30, 0], 40, 32), vec![2, 32]);
        assert_eq!(share_out(&[32, 32], 10, 32), vec![0, 0]);
        assert_eq!(share_out(&[], 10, 32), Vec::<usize>::new());
    }
}
