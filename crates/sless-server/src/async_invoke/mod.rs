//! Asynchronous invocation: `POST /fn/{ns}/{name}` with
//! `X-Sless-Invocation-Type: Event` (or `Prefer: respond-async`) stores the
//! event and answers 202; delivery runs later with retries and backoff,
//! and the outcome may go to a destination. Everything an event needs
//! lives in the store (`store/events`), so any replica delivers it, and a
//! crash loses none: `accept` (group commit), `deliver` (claims, attempts,
//! outcomes), `destinations` (the outcome record, RabbitMQ publishing).

mod accept;
mod deliver;
pub mod destinations;

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

pub use deliver::DeliverySettings;

use crate::error::{Error, Result};
use crate::invoker::Invoker;
use crate::store::events::{now_micros, Backlog, EventStore, NewEvent};
use crate::store::Store;
use sless_driver::FunctionKey;

/// How the asynchronous path is bounded and run.
#[derive(Debug, Clone)]
pub struct AsyncSettings {
    /// Events waiting per namespace at most (429 beyond).
    pub max_backlog: u64,
    /// What they hold at most, in bytes as stored (429 beyond).
    pub max_backlog_bytes: u64,
    pub delivery: DeliverySettings,
    /// Finished events are kept this long.
    pub retention: Duration,
    /// One server on its own database (SQLite): events it was running when
    /// it stopped are queued again at start.
    pub single: bool,
}

/// The asynchronous path's front: accepts events, reports the backlog.
pub struct AsyncInvocations {
    pub events: Arc<dyn EventStore>,
    acceptor: Arc<accept::Acceptor>,
    deliverer: Arc<deliver::Deliverer>,
    settings: AsyncSettings,
    /// The backlog as last counted (every second), and per namespace what
    /// this replica accepted since.
    backlog: Arc<Backlogs>,
    pub accepted: AtomicU64,
    pub refused: AtomicU64,
}

/// The backlog as last counted, kept an upper bound between counts: an
/// event counts from the moment it is accepted, and a count that runs
/// while events are being stored adds those (stored in time for it or not).
#[derive(Default)]
struct BacklogView {
    functions: Vec<Backlog>,
    /// Waiting events per namespace, as the bound sees them.
    namespaces: HashMap<String, Waiting>,
    /// Accepted, not yet stored.
    storing: HashMap<String, Waiting>,
    /// Accepted since the running count began (when one runs).
    since: Option<HashMap<String, Waiting>>,
}

/// The backlog's view and the bounds each namespace's waiting events
/// keep: the events accepted, and the outcomes stored for a destination
/// function (`deliver`), which the caller of the source event made too.
pub(crate) struct Backlogs {
    view: Mutex<BacklogView>,
    max_events: u64,
    max_bytes: u64,
}

impl Backlogs {
    /// Counts `event` in its namespace when it fits both bounds, until it
    /// is [`stored`](Self::stored) and counted from the store; otherwise
    /// says what is full.
    fn admit(&self, event: &NewEvent) -> Result<(), String> {
        let (namespace, this) = (event.namespace.as_str(), Waiting::of(event));
        let mut view = self.view.lock().unwrap_or_else(PoisonError::into_inner);
        let waiting = view.namespaces.entry(namespace.to_string()).or_default();
        if waiting.events >= self.max_events {
            return Err(format!(
                "{} asynchronous events waiting, the most the server's SLESS_ASYNC_MAX_BACKLOG allows",
                waiting.events
            ));
        }
        if waiting.bytes + this.bytes > self.max_bytes {
            let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
            return Err(format!(
                "{:.2} MiB of asynchronous events waiting, and this one ({:.2} MiB) would take it past the server's SLESS_ASYNC_MAX_BACKLOG_MB of {} MiB",
                mib(waiting.bytes),
                mib(this.bytes),
                self.max_bytes >> 20
            ));
        }
        *waiting += this;
        *view.storing.entry(namespace.to_string()).or_default() += this;
        if let Some(since) = &mut view.since {
            *since.entry(namespace.to_string()).or_default() += this;
        }
        Ok(())
    }

    /// `this` of `namespace`, admitted, is stored now (`written`), or will not be.
    fn stored(&self, namespace: &str, this: Waiting, written: bool) {
        let mut view = self.view.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = view.storing.get_mut(namespace) {
            *n -= this;
            if n.events == 0 {
                view.storing.remove(namespace);
            }
        }
        if !written {
            if let Some(n) = view.namespaces.get_mut(namespace) {
                *n -= this;
            }
        }
    }
}

/// Events waiting, and what they hold as stored.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Waiting {
    events: u64,
    bytes: u64,
}

impl Waiting {
    /// One event, with what the store's count measures of it.
    pub(super) fn of(event: &NewEvent) -> Waiting {
        Waiting {
            events: 1,
            bytes: (event.body.len() + event.headers.len() + event.path.len() + event.query.len()) as u64,
        }
    }
}

impl std::ops::AddAssign for Waiting {
    fn add_assign(&mut self, other: Waiting) {
        self.events += other.events;
        self.bytes += other.bytes;
    }
}

impl std::ops::SubAssign for Waiting {
    fn sub_assign(&mut self, other: Waiting) {
        self.events = self.events.saturating_sub(other.events);
        self.bytes = self.bytes.saturating_sub(other.bytes);
    }
}

impl AsyncInvocations {
    pub async fn start(
        events: Arc<dyn EventStore>,
        store: Arc<dyn Store>,
        invoker: Arc<Invoker>,
        publisher: destinations::Publisher,
        settings: AsyncSettings,
        cluster: Arc<crate::cluster::Cluster>,
    ) -> anyhow::Result<Arc<AsyncInvocations>> {
        let leading = cluster.leadership.watch();
        if settings.single {
            let released = events.release_all(now_micros()).await?;
            if released > 0 {
                tracing::info!(
                    events = released,
                    "asynchronous events left running at the last stop are queued again"
                );
            }
        }
        let written = Arc::new(Notify::new());
        let acceptor = accept::Acceptor::start(events.clone(), written.clone());
        let backlog = Arc::new(Backlogs {
            view: Mutex::new(BacklogView::default()),
            max_events: settings.max_backlog,
            max_bytes: settings.max_backlog_bytes,
        });
        let deliverer = deliver::Deliverer::start(
            events.clone(),
            store,
            invoker,
            publisher,
            settings.delivery.clone(),
            deliver::Shared {
                wake: written,
                backlog: backlog.clone(),
                cluster,
            },
        );
        let this = Arc::new(AsyncInvocations {
            events,
            acceptor,
            deliverer,
            settings,
            backlog,
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        });
        this.count_backlog().await;
        tokio::spawn(count_loop(Arc::downgrade(&this)));
        tokio::spawn(prune_loop(this.events.clone(), this.settings.retention, leading));
        Ok(this)
    }

    /// Stores `event` durably, or refuses it when its namespace's backlog
    /// is full. An event for a function that cannot run yet (off, or not
    /// built) is stored parked, so it costs no claim until it can.
    pub async fn accept(&self, mut event: NewEvent) -> Result<()> {
        let key = FunctionKey::new(&event.namespace, &event.function);
        event.parked_until = self.deliverer.parked_until(&key, &event).await;
        if let Err(full) = self.backlog.admit(&event) {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(Error::TooManyRequests {
                message: format!("namespace {:?} has {full}; try again later", event.namespace),
                retry_after: 5,
            });
        }
        let (namespace, this) = (event.namespace.clone(), Waiting::of(&event));
        let stored = self.acceptor.store(event).await;
        self.backlog.stored(&namespace, this, stored.is_ok());
        stored?;
        self.accepted.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Shutting down: claims no more events and waits until the attempts
    /// under way here have ended (see [`deliver::Deliverer::drain`]).
    pub async fn drain(&self) {
        self.deliverer.drain().await;
    }

    /// Shutting down, once the drain's time is up: queues again what is
    /// still being attempted here, not counted as an attempt.
    pub async fn hand_back(&self) {
        self.deliverer.hand_back().await;
    }

    /// Counts the backlog, then wakes the parked events of the functions
    /// in it that can run again.
    async fn count_backlog(&self) {
        let storing = {
            let mut backlog = self.backlog.view.lock().unwrap_or_else(PoisonError::into_inner);
            backlog.since = Some(HashMap::new());
            backlog.storing.clone()
        };
        let counted = self.events.backlog().await;
        let waiting: Vec<FunctionKey> = {
            let mut backlog = self.backlog.view.lock().unwrap_or_else(PoisonError::into_inner);
            let since = backlog.since.take().unwrap_or_default();
            match counted {
                Ok(functions) => {
                    let mut namespaces: HashMap<String, Waiting> = HashMap::new();
                    for b in &functions {
                        *namespaces.entry(b.namespace.clone()).or_default() += Waiting {
                            events: b.events,
                            bytes: b.bytes,
                        };
                    }
                    for (namespace, n) in storing.into_iter().chain(since) {
                        *namespaces.entry(namespace).or_default() += n;
                    }
                    let waiting = functions
                        .iter()
                        .map(|b| FunctionKey::new(&b.namespace, &b.function))
                        .collect();
                    backlog.functions = functions;
                    backlog.namespaces = namespaces;
                    waiting
                }
                Err(e) => {
                    tracing::warn!(error = %e, "counting asynchronous events failed");
                    Vec::new()
                }
            }
        };
        self.deliverer.wake_parked(waiting.into_iter()).await;
    }

    /// Appends the asynchronous path's series to `/metrics`.
    pub fn render(&self, out: &mut String) {
        let now = now_micros();
        let backlog = self.backlog.view.lock().unwrap_or_else(PoisonError::into_inner);
        let per_function = |out: &mut String, name: &str, help: &str, value: &dyn Fn(&Backlog) -> f64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for b in &backlog.functions {
                let _ = writeln!(
                    out,
                    "{name}{{namespace=\"{}\",function=\"{}\"}} {}",
                    b.namespace,
                    b.function,
                    value(b)
                );
            }
        };
        per_function(
            out,
            "sless_async_backlog",
            "Asynchronous events waiting (queued or running), by function.",
            &|b| b.events as f64,
        );
        per_function(
            out,
            "sless_async_backlog_bytes",
            "What the waiting asynchronous events hold as stored, by function.",
            &|b| b.bytes as f64,
        );
        per_function(
            out,
            "sless_async_oldest_event_age_seconds",
            "Age of the oldest waiting asynchronous event, by function.",
            &|b| (now - b.oldest).max(0) as f64 / 1e6,
        );
        drop(backlog);
        let stats = &self.deliverer.stats;
        out.push_str("# HELP sless_async_events_total Asynchronous events accepted and refused (backlog full), and attempts' outcomes on this replica.\n");
        out.push_str("# TYPE sless_async_events_total counter\n");
        for (outcome, n) in [
            ("accepted", self.accepted.load(Ordering::Relaxed)),
            ("refused", self.refused.load(Ordering::Relaxed)),
            ("succeeded", stats.succeeded.load(Ordering::Relaxed)),
            ("retried", stats.retried.load(Ordering::Relaxed)),
            ("failed", stats.failed.load(Ordering::Relaxed)),
            ("throttled", stats.throttled.load(Ordering::Relaxed)),
        ] {
            let _ = writeln!(out, "sless_async_events_total{{outcome=\"{outcome}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP sless_async_in_flight Asynchronous events held by this replica.\n# TYPE sless_async_in_flight gauge\nsless_async_in_flight {}",
            self.deliverer.in_flight()
        );
        let _ = writeln!(
            out,
            "# HELP sless_async_delivery_fenced 1 while this replica claims no asynchronous events: out of touch with the store, or back and not yet serving what it says.\n# TYPE sless_async_delivery_fenced gauge\nsless_async_delivery_fenced {}",
            u8::from(self.deliverer.fenced.load(Ordering::Relaxed))
        );
    }
}

/// A new event's id: its time in microseconds and a random part, in hex
/// (the shape of invocation record ids, so ids sort by time).
pub fn event_id(micros: i64) -> String {
    crate::record::record_id((micros.max(0) as u64, rand::random::<u32>()))
}

async fn count_loop(this: std::sync::Weak<AsyncInvocations>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let Some(this) = this.upgrade() else { return };
        this.count_backlog().await;
    }
}

/// Deletes finished events past retention (the leader's work).
async fn prune_loop(events: Arc<dyn EventStore>, retention: Duration, leading: tokio::sync::watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    loop {
        tick.tick().await;
        if !*leading.borrow() {
            continue;
        }
        let before = now_micros() - retention.as_micros() as i64;
        match events.prune(before).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(deleted = n, "pruned finished asynchronous events"),
            Err(e) => tracing::warn!(error = %e, "pruning asynchronous events failed"),
        }
    }
}
