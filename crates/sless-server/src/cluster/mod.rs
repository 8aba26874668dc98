//! Several `sless server` replicas on one PostgreSQL: who leads
//! ([`leader`]), what replicas tell each other ([`membership`]), how each
//! converges on the store's state ([`reconcile`]), and whose turn it is to
//! change a namespace under its quotas ([`turns`]). On SQLite there is one
//! replica: it leads, and nothing here touches the database.
//!
//! **Invariant (no stale answer after Ready):** a new version is written
//! `Ready` only once every live replica has recorded that it serves it (or
//! refuses to serve anything older); a replica that has not reached the
//! store for [`FENCE_AFTER`] while other replicas were live answers `/fn`
//! with 503 until it has, and [`FENCE_AFTER`] is shorter than
//! [`membership::LIVENESS`], so a replica counted out of a rollout is
//! already refusing to serve. Back in touch after such a gap (an outage, a
//! stall), it goes on refusing until it serves what the store says (every
//! version Ready meanwhile): reaching the store again is not enough. A
//! replica that was alone keeps serving through a store outage: no rollout
//! can count it out without a store.

pub mod leader;
pub mod membership;
pub mod reconcile;
pub mod turns;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use sless_driver::FunctionKey;

pub use leader::Leadership;
use membership::Membership;

/// A replica that has not reached the store for this long refuses `/fn`.
pub const FENCE_AFTER: Duration = Duration::from_secs(2);
/// How long a new version waits for the other replicas at most; a live
/// replica answers well before (it deploys within [`reconcile::DEPLOY_TIMEOUT`]
/// or stops serving the function).
const ROLLOUT_TIMEOUT: Duration = Duration::from_secs(90);

/// What this replica's driver serves of one function.
#[derive(Debug, Clone, PartialEq)]
pub struct Served {
    pub version: u64,
    /// The spec it runs with, as stored.
    pub spec: Value,
    /// When the last deploy failed (the function is then not served here);
    /// the reconciler tries again later.
    pub failed_at: Option<Instant>,
    /// When it was deployed here (store time): what was deployed before a
    /// function of the same name was made belongs to the deleted one.
    pub deployed_at: chrono::DateTime<chrono::Utc>,
}

/// This replica's place among the others.
pub struct Cluster {
    pub leadership: Arc<Leadership>,
    membership: Option<Membership>,
    /// Namespace locks among replicas (None alone).
    namespace_locks: Option<turns::NamespaceLocks>,
    /// Milliseconds since `epoch` when the store last answered (`u64::MAX`
    /// before it first did).
    last_contact: AtomicU64,
    /// Back in touch after a gap longer than [`FENCE_AFTER`], but not yet
    /// serving what the store says: still fenced.
    catching_up: AtomicBool,
    /// Whether other replicas were live at the last heartbeat.
    peers: AtomicBool,
    epoch: Instant,
    served: Mutex<HashMap<FunctionKey, Served>>,
}

impl Cluster {
    /// The only replica (SQLite).
    pub fn single() -> Arc<Cluster> {
        Arc::new(Cluster {
            leadership: Leadership::always(),
            membership: None,
            namespace_locks: None,
            last_contact: AtomicU64::new(u64::MAX),
            catching_up: AtomicBool::new(false),
            peers: AtomicBool::new(false),
            epoch: Instant::now(),
            served: Default::default(),
        })
    }

    /// One of several replicas on the PostgreSQL at `url`; `address` is
    /// where this one listens (for operators reading `cluster_replicas`).
    pub async fn join(url: &str, address: &str) -> anyhow::Result<Arc<Cluster>> {
        let replica = format!("{}-{:08x}", hostname(), rand::random::<u32>());
        let membership = Membership::join(url, replica, address).await?;
        Ok(Arc::new(Cluster {
            leadership: Leadership::elect(url.to_string()).await,
            membership: Some(membership),
            namespace_locks: Some(turns::NamespaceLocks::new(url)?),
            last_contact: AtomicU64::new(u64::MAX),
            catching_up: AtomicBool::new(false),
            peers: AtomicBool::new(false),
            epoch: Instant::now(),
            served: Default::default(),
        }))
    }

    /// Whether replicas share state (and so this one follows the store).
    pub fn shared(&self) -> bool {
        self.membership.is_some()
    }

    pub fn is_leader(&self) -> bool {
        self.leadership.is_leader()
    }

    /// Waits for `namespace`'s lock among replicas, held until dropped; None
    /// alone, where the replica's own turn is all there is.
    pub async fn lock_namespace(&self, namespace: &str) -> sqlx::Result<Option<turns::NamespaceLock>> {
        match &self.namespace_locks {
            Some(locks) => locks.lock(namespace).await.map(Some),
            None => Ok(None),
        }
    }

    /// This replica's id ("single" alone).
    pub fn replica(&self) -> &str {
        self.membership.as_ref().map_or("single", |m| m.replica.as_str())
    }

    /// Notes that the store answered just now. After a gap that fenced
    /// this replica (a stall counts: the clock is monotonic and runs on
    /// while the process is stopped) it stays fenced, catching up, until
    /// [`Cluster::caught_up`]; that is noted before the contact, so no
    /// `/fn` call sees the contact without it.
    fn touch(&self) {
        let now = self.epoch.elapsed().as_millis() as u64;
        let before = self.last_contact.load(Ordering::SeqCst);
        if before != u64::MAX && now > before + FENCE_AFTER.as_millis() as u64 {
            self.catching_up.store(true, Ordering::SeqCst);
        }
        self.last_contact.store(now, Ordering::SeqCst);
    }

    /// Whether this replica is back in touch after a gap but may still
    /// serve versions older than the store's.
    fn catching_up(&self) -> bool {
        self.catching_up.load(Ordering::SeqCst)
    }

    /// This replica serves what the store said at a pass made after its
    /// last gap: `/fn` is answered again.
    fn caught_up(&self) {
        if self.catching_up.swap(false, Ordering::SeqCst) {
            tracing::info!("serving what the store says again after losing touch with it: /fn is answered again");
        }
    }

    /// Whether this replica must refuse `/fn`: it has lost touch with the
    /// store while other replicas were live, and may have been counted out
    /// of a rollout, or is back but not caught up yet. Three atomic reads
    /// (the contact before the catching up, which is set before it).
    pub fn fenced(&self) -> bool {
        let now = self.epoch.elapsed().as_millis() as u64;
        let last = self.last_contact.load(Ordering::SeqCst);
        let stale = last != u64::MAX && now > last + FENCE_AFTER.as_millis() as u64;
        self.peers.load(Ordering::Relaxed) && (stale || self.catching_up.load(Ordering::SeqCst))
    }

    /// What this replica serves of `key`.
    pub fn served(&self, key: &FunctionKey) -> Option<Served> {
        self.served.lock().unwrap().get(key).cloned()
    }

    /// Records a deploy of `version` with `spec` (or a failed one) and
    /// tells the other replicas.
    pub async fn deployed(&self, key: &FunctionKey, version: u64, spec: Value, failed: bool) {
        {
            let mut served = self.served.lock().unwrap();
            if served.get(key).is_some_and(|s| s.version > version) {
                return; // a newer version serves here already
            }
            let failed_at = failed.then(Instant::now);
            let deployed_at = crate::store::now();
            served.insert(
                key.clone(),
                Served {
                    version,
                    spec,
                    failed_at,
                    deployed_at,
                },
            );
        }
        if let Some(membership) = &self.membership {
            if let Err(e) = membership.serving(key, version).await {
                tracing::warn!(function = %key, version, error = %e, "recording the served version failed");
            }
        }
    }

    /// Forgets what every replica served of a deleted function.
    pub async fn forget_everywhere(&self, key: &FunctionKey) {
        if let Some(membership) = &self.membership {
            if let Err(e) = membership.forget_everywhere(key).await {
                tracing::warn!(function = %key, error = %e, "forgetting the served versions of a deleted function failed");
            }
        }
    }

    /// Forgets a function removed here.
    pub async fn removed(&self, key: &FunctionKey) {
        self.served.lock().unwrap().remove(key);
        if let Some(membership) = &self.membership {
            let _ = membership.forget(key).await;
        }
    }

    /// Functions this replica serves (for the reconciler's removals).
    fn served_keys(&self) -> Vec<FunctionKey> {
        self.served.lock().unwrap().keys().cloned().collect()
    }

    /// Waits until every live replica serves `version` of `key`; returns
    /// the replicas still lagging when the wait gave up.
    pub async fn wait_for_replicas(&self, key: &FunctionKey, version: u64) -> Result<(), Vec<String>> {
        let Some(membership) = &self.membership else {
            return Ok(());
        };
        let deadline = Instant::now() + ROLLOUT_TIMEOUT;
        loop {
            match membership.lagging(key, version).await {
                Ok(lagging) if lagging.is_empty() => return Ok(()),
                Ok(lagging) if Instant::now() > deadline => return Err(lagging),
                Ok(_) => {}
                Err(e) if Instant::now() > deadline => return Err(vec![e.to_string()]),
                Err(e) => tracing::warn!(function = %key, error = %e, "reading the replicas' versions failed"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops campaigning and, if leading, gives the lock up at once; the
    /// caller has stopped the leader's work.
    pub async fn resign(&self) {
        self.leadership.resign().await;
    }

    /// Leaves the replicas for good (shutdown).
    pub async fn leave(&self) {
        if let Some(membership) = &self.membership {
            membership.leave().await;
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "replica".into())
}
