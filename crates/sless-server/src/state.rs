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
        let count = held.entry(namespace.to_string()).or_default();
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
/// holding nothing but their connection.
pub struct Gates {
    most: usize,
    gates: std::sync::Mutex<std::collections::HashMap<String, std::sync::Weak<tokio::sync::Semaphore>>>,
}

impl Gates {
    pub fn new(most: usize) -> Gates {
        Gates {
            most,
            gates: Default::default(),
        }
    }

    /// Waits for one of `namespace`'s places; it is given back when dropped.
    pub async fn enter(&self, namespace: &str) -> tokio::sync::OwnedSemaphorePermit {
        let gate = {
            let mut gates = self.gates.lock().unwrap();
            match gates.get(namespace).and_then(std::sync::Weak::upgrade) {
                Some(gate) => gate,
                None => {
                    gates.retain(|_, gate| gate.strong_count() > 0);
                    let gate = Arc::new(tokio::sync::Semaphore::new(self.most));
                    gates.insert(namespace.to_string(), Arc::downgrade(&gate));
                    gate
                }
            }
        };
        gate.acquire_owned().await.expect("a gate is never closed")
    }
}
