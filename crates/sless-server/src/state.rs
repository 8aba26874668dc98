//! What every request handler shares.

use std::sync::Arc;

use object_store::ObjectStore;

use crate::config::Config;
use crate::deploy::Deployer;
use crate::store::Store;
use sless_codecheck::CheckMetrics;
use sless_driver::Driver;

/// Shared by every handler through axum's router state.
pub struct AppState {
    pub config: Config,
    pub store: Arc<dyn Store>,
    pub blobs: Arc<dyn ObjectStore>,
    pub check_metrics: Arc<CheckMetrics>,
    pub driver: Arc<dyn Driver>,
    pub invoker: Arc<crate::invoker::Invoker>,
    pub metrics: Arc<crate::metrics::Metrics>,
    pub deployer: Arc<Deployer>,
    /// Where `$latest` and the aliases send calls.
    pub routes: Arc<crate::routes::Routes>,
    /// Versions besides `$latest` on this replica.
    pub versions: Arc<crate::versions::Versions>,
    pub triggers: Arc<crate::triggers::Triggers>,
    pub jobs: Arc<crate::jobs::Jobs>,
    /// Asynchronous calls: accepted here, delivered by every replica.
    pub async_invocations: Arc<crate::async_invoke::AsyncInvocations>,
    /// This replica among the others: leadership, the `/fn` fence.
    pub cluster: Arc<crate::cluster::Cluster>,
    /// sha256 of the admin token.
    pub admin_hash: String,
    /// Seals and opens secret values.
    pub secrets: Arc<crate::secrets::Secrets>,
    /// Log streams open (`logs?follow=true`), per namespace.
    pub follows: Arc<Slots>,
    /// Reads of stored invocation records under way (a page, a log's
    /// history, stats) per namespace, each until its answer is sent.
    pub record_reads: Arc<Slots>,
    /// Calls through `/fn` under way, per namespace.
    pub calls: Arc<Slots>,
    /// `/v1` requests with a body (JSON) under way, per namespace, each
    /// until its handler answered: slow bodies take no more connections.
    pub api_bodies: Arc<Slots>,
    /// Code uploads under way (their bodies read and held), per namespace.
    pub uploads: Gates,
    /// Changes counted against a namespace's quotas, one at a time per
    /// namespace (see [`crate::quota::turn`]).
    pub quota_turns: Gates,
}

/// Counts what each namespace holds open, up to a number each: a slot is
/// taken or refused at once, and given back when its [`Slot`] drops.
pub struct Slots {
    most: usize,
    held: std::sync::Mutex<std::collections::HashMap<String, usize>>,
}

impl Slots {
    pub fn new(most: usize) -> Slots {
        Slots {
            most,
            held: Default::default(),
        }
    }

    /// A slot of `namespace`'s, or None when it holds all of its own.
    pub fn take(self: &Arc<Self>, namespace: &str) -> Option<Slot> {
        let mut held = self.held.lock().unwrap();
        let count = match held.get_mut(namespace) {
            Some(count) => count,
            None => held.entry(namespace.to_string()).or_default(),
        };
        if *count >= self.most {
            return None;
        }
        *count += 1;
        Some(Slot {
            slots: self.clone(),
            namespace: namespace.to_string(),
        })
    }

    pub fn most(&self) -> usize {
        self.most
    }
}

/// One slot of [`Slots`], held until dropped.
pub struct Slot {
    slots: Arc<Slots>,
    namespace: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.slots.held.lock().unwrap();
        if let Some(count) = held.get_mut(&self.namespace) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.namespace);
            }
        }
    }
}

/// Lets a few of each namespace's requests in at a time; the rest wait,
/// holding nothing but their connection, up to a number of them.
pub struct Gates {
    most: usize,
    most_waiting: usize,
    gates: std::sync::Mutex<std::collections::HashMap<String, std::sync::Weak<Gate>>>,
}

/// One namespace's places, and how many wait for one.
struct Gate {
    places: Arc<tokio::sync::Semaphore>,
    waiting: std::sync::atomic::AtomicUsize,
}

/// A place behind a gate, given back when dropped.
pub struct Place {
    _permit: tokio::sync::OwnedSemaphorePermit,
    _gate: Arc<Gate>,
}

/// As many requests as a gate lets wait already wait.
#[derive(Debug)]
pub struct GateFull {
    pub waiting: usize,
}

impl Gates {
    /// `most` places per namespace; any number may wait for one.
    pub fn new(most: usize) -> Gates {
        Gates {
            most,
            most_waiting: usize::MAX,
            gates: Default::default(),
        }
    }

    /// At most `waiting` requests per namespace wait for a place; more are
    /// refused at once.
    pub fn waiting_at_most(self, waiting: usize) -> Gates {
        Gates {
            most_waiting: waiting,
            ..self
        }
    }

    pub fn most(&self) -> usize {
        self.most
    }

    /// Waits for one of `namespace`'s places, or says at once that as many
    /// as may wait already do.
    pub async fn enter(&self, namespace: &str) -> Result<Place, GateFull> {
        use std::sync::atomic::Ordering;
        let gate = {
            let mut gates = self.gates.lock().unwrap();
            match gates.get(namespace).and_then(std::sync::Weak::upgrade) {
                Some(gate) => gate,
                None => {
                    gates.retain(|_, gate| gate.strong_count() > 0);
                    let gate = Arc::new(Gate {
                        places: Arc::new(tokio::sync::Semaphore::new(self.most)),
                        waiting: Default::default(),
                    });
                    gates.insert(namespace.to_string(), Arc::downgrade(&gate));
                    gate
                }
            }
        };
        if let Ok(permit) = gate.places.clone().try_acquire_owned() {
            return Ok(Place {
                _permit: permit,
                _gate: gate,
            });
        }
        let waiting = gate.waiting.fetch_add(1, Ordering::Relaxed);
        // Counted down however the wait ends (had, or its request dropped).
        struct Waits<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for Waits<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        let waits = Waits(&gate.waiting);
        if waiting >= self.most_waiting {
            return Err(GateFull { waiting });
        }
        let permit = gate
            .places
            .clone()
            .acquire_owned()
            .await
            .expect("a gate is never closed");
        drop(waits);
        Ok(Place {
            _permit: permit,
            _gate: gate,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    /// A gate lets `most` in, `most_waiting` wait, and refuses more at
    /// once; a wait given up (its request gone) is no longer counted.
    #[tokio::test]
    async fn a_gate_counts_those_waiting_until_they_stop() {
        let gates = Gates::new(1).waiting_at_most(1);
        let inside = gates.enter("a").now_or_never().expect("a free place is had at once");
        assert!(inside.is_ok());
        {
            let mut waiting = Box::pin(gates.enter("a"));
            assert!((&mut waiting).now_or_never().is_none(), "had a place that is taken");
            match gates.enter("a").now_or_never() {
                Some(Err(GateFull { waiting: 1 })) => {}
                other => panic!("a second waiter was not refused: {:?}", other.map(|r| r.is_ok())),
            }
            // Another namespace's places are its own.
            assert!(matches!(gates.enter("b").now_or_never(), Some(Ok(_))));
        }
        // The waiter above gave up: one may wait again, and has the place
        // once it is given back.
        let mut waiting = Box::pin(gates.enter("a"));
        assert!((&mut waiting).now_or_never().is_none());
        drop(inside);
        assert!(waiting.await.is_ok());
    }
}
