//! Each replica converges on the store's state. Every [`POLL_PERIOD`] it
//! reads one number, the store's change counter (`cluster_revision`, bumped
//! by a trigger on `resources`), and when it moved reads the functions,
//! triggers and jobs and makes this replica match them: the version and
//! spec each function serves, which functions are turned off by their
//! triggers, and, on the leader, the work that must happen once (builds of
//! functions left `Building`, job runs asked for, amqp consumers). A
//! change made through this replica's own API is applied at once by its
//! handler; the loop brings the others along within a period.
//!
//! Polling one row rather than LISTEN/NOTIFY: a notification is lost while
//! a replica's listening connection is down, so polling would be needed
//! anyway; a one-row primary-key read four times a second costs the
//! database nothing, and it doubles as the replica's proof that it still
//! reaches the store (the `/fn` fence).
//!
//! On leadership changes the loop takes the leader's work over (job runs a
//! dead leader left `Pending`/`Running` end `Failed`, interrupted; builds
//! left `Building` resume; functions built with another shim rebuild) or
//! hands it back (this replica's job runs are stopped and end `Failed`,
//! interrupted; consumers stop).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use sless_api::{FunctionSpec, FunctionStatus, Phase};
use sless_driver::FunctionKey;

use super::Cluster;
use crate::deploy::{Deployer, Target};
use crate::jobs::Jobs;
use crate::store::{Kind, Store};
use crate::triggers::Triggers;

/// How often a replica reads the change counter.
pub const POLL_PERIOD: Duration = Duration::from_millis(250);
/// How often a replica writes its heartbeat.
const HEARTBEAT_PERIOD: Duration = Duration::from_millis(500);
/// A replica that cannot deploy a version in this time stops serving the
/// function (and says so), rather than serve the version before.
pub const DEPLOY_TIMEOUT: Duration = Duration::from_secs(60);
/// A failed deploy is tried again after this long.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// What the loop drives.
pub struct Parts {
    pub store: Arc<dyn Store>,
    pub deployer: Arc<Deployer>,
    pub triggers: Arc<Triggers>,
    pub jobs: Arc<Jobs>,
}

/// Where the loop is.
struct LoopState {
    /// Whether this replica led at the last step.
    led: bool,
    /// The change counter at the last complete pass.
    seen: Option<i64>,
    last_heartbeat: Option<tokio::time::Instant>,
}

/// The convergence loop of one replica.
pub struct Reconciler {
    cluster: Arc<Cluster>,
    parts: Parts,
    /// Functions with a deploy under way here.
    deploying: std::sync::Mutex<HashSet<FunctionKey>>,
    /// When each function seen was created: a function deleted and made
    /// again between two passes is another function.
    created: std::sync::Mutex<std::collections::HashMap<FunctionKey, chrono::DateTime<chrono::Utc>>>,
    /// For each function that uses secrets, when they last changed (as
    /// seen at the last pass): a change rolls the function here.
    secret_stamps: std::sync::Mutex<std::collections::HashMap<FunctionKey, String>>,
    stop: tokio::sync::Notify,
}

impl Reconciler {
    /// Takes the first step (so that at start a leader has taken over
    /// before the server answers), then runs the loop.
    pub async fn start(cluster: Arc<Cluster>, parts: Parts) -> Arc<Reconciler> {
        let reconciler = Arc::new(Reconciler {
            cluster,
            parts,
            deploying: Default::default(),
            created: Default::default(),
            secret_stamps: Default::default(),
            stop: tokio::sync::Notify::new(),
        });
        let mut state = LoopState {
            led: false,
            seen: None,
            last_heartbeat: None,
        };
        reconciler.step(&mut state).await;
        tokio::spawn(reconciler.clone().run(state));
        reconciler
    }

    /// Stops the loop and, if this replica leads, its leader's work; then
    /// gives the lock up. Returns once another replica may take over.
    pub async fn shutdown(&self) {
        self.stop.notify_one();
        if self.cluster.is_leader() {
            self.step_down().await;
        }
        self.cluster.resign().await;
    }

    async fn run(self: Arc<Self>, mut state: LoopState) {
        let mut leading = self.cluster.leadership.watch();
        let mut poll = tokio::time::interval(POLL_PERIOD);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = self.stop.notified() => return,
                _ = poll.tick() => {}
                _ = leading.changed() => {}
            }
            self.step(&mut state).await;
        }
    }

    /// Follows a change of leadership, then converges if the store changed.
    async fn step(self: &Arc<Self>, state: &mut LoopState) {
        let leader = self.cluster.is_leader();
        let mut force = false;
        if leader != state.led {
            state.led = leader;
            force = true;
            if leader {
                self.take_over().await;
            } else {
                self.step_down().await;
            }
        }
        let Some(membership) = &self.cluster.membership else {
            if force && leader {
                // The only replica: its handlers apply every change; the
                // leader's pass runs once, at start.
                let _ = self.pass(true).await;
            }
            return;
        };
        let revision = match membership.revision().await {
            Ok(revision) => revision,
            Err(e) => {
                tracing::warn!(error = %e, "reading the store's change counter failed");
                return;
            }
        };
        self.cluster.touch();
        if state.last_heartbeat.is_none_or(|at| at.elapsed() >= HEARTBEAT_PERIOD) {
            match membership.heartbeat(leader).await {
                Ok(peers) => {
                    state.last_heartbeat = Some(tokio::time::Instant::now());
                    self.cluster
                        .peers
                        .store(peers > 0, std::sync::atomic::Ordering::Relaxed);
                }
                Err(e) => tracing::warn!(error = %e, "writing the heartbeat failed"),
            }
            if leader {
                let _ = membership.sweep().await;
            }
        }
        // Back after a gap: a pass at every step until one finds this
        // replica serving what the store says (the versions made Ready
        // meanwhile deployed here), and fenced until then.
        let catching_up = self.cluster.catching_up();
        if force || catching_up || self.retry_due() || state.seen != Some(revision) {
            if let Some(current) = self.pass(leader).await {
                state.seen = Some(revision);
                if catching_up && current {
                    self.cluster.caught_up();
                }
            }
        }
    }

    /// Whether a failed deploy is due to be tried again.
    fn retry_due(&self) -> bool {
        let served = self.cluster.served.lock().unwrap();
        served
            .values()
            .any(|s| s.failed_at.is_some_and(|at| at.elapsed() >= RETRY_AFTER))
    }

    /// One convergence pass: None when the store could not be read (or
    /// was read before a trigger change this replica's handlers applied),
    /// else whether this replica served what the store says already (no
    /// deploy wanted or under way).
    async fn pass(self: &Arc<Self>, leader: bool) -> Option<bool> {
        let store = &self.parts.store;
        let triggers_read_from = self.parts.triggers.change_count();
        let (functions, triggers, jobs) =
            match tokio::try_join!(store.list_all(Kind::Function), store.list_all(Kind::Trigger), async {
                if leader {
                    store.list_all(Kind::Job).await
                } else {
                    Ok(Vec::new())
                }
            }) {
                Ok(lists) => lists,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the store to converge failed");
                    return None;
                }
            };
        // Aliases moved through another replica route here from now on,
        // and versions deleted through one stop serving here.
        if let Err(e) = self.parts.deployer.versions().converge().await {
            tracing::warn!(error = %e, "reading the aliases and versions failed");
            return None;
        }
        let mut current = true;
        if self.cluster.shared() {
            let secrets = match store.all_secrets().await {
                Ok(secrets) => secrets,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the secrets failed");
                    return None;
                }
            };
            let changed: SecretTimes = secrets
                .into_iter()
                .map(|s| ((s.namespace, s.name), s.updated_at))
                .collect();
            current = self.converge_functions(&functions, &changed).await;
        }
        // The store may have been slow to answer (a leader cut off from it
        // waits here for as long as it does not): the leader's work is done
        // only by a replica that still leads now.
        let leader = leader && self.cluster.is_leader();
        let triggers_settled = self
            .parts
            .triggers
            .converge(&triggers, leader, triggers_read_from)
            .await;
        if leader {
            self.parts.jobs.converge(&jobs).await;
            for record in &functions {
                let Ok(status) = serde_json::from_value::<FunctionStatus>(record.status.clone()) else {
                    continue;
                };
                if let (Phase::Building, Some(code_hash)) = (status.phase, status.code_hash) {
                    self.parts
                        .deployer
                        .start_build(FunctionKey::new(&record.namespace, &record.name), code_hash);
                }
            }
        }
        // A trigger left as a handler applied it after the read: the next
        // step passes again on a later read.
        triggers_settled.then_some(current)
    }

    /// Deploys what the store says each function serves, where this replica
    /// serves something else; removes deleted functions. Whether it served
    /// what the store says already (no deploy wanted or under way).
    async fn converge_functions(self: &Arc<Self>, functions: &[crate::store::Record], secrets: &SecretTimes) -> bool {
        let mut present = HashSet::new();
        let mut current = true;
        for record in functions {
            let key = FunctionKey::new(&record.namespace, &record.name);
            present.insert(key.clone());
            let before = self.created.lock().unwrap().insert(key.clone(), record.created_at);
            let older = self
                .cluster
                .served(&key)
                .is_some_and(|s| s.deployed_at < record.created_at);
            if before.is_some_and(|at| at != record.created_at) && older {
                // Deleted and made again: stop what the old one ran here
                // (not what was deployed here for the new one already).
                self.parts.deployer.remove(&key).await;
            }
            let Ok(status) = serde_json::from_value::<FunctionStatus>(record.status.clone()) else {
                continue;
            };
            let Some(target) = Target::of(&status) else { continue };
            let served = self.cluster.served(&key);
            let stamp = secret_stamp(&record.namespace, &record.spec, secrets);
            // First seen here: the values moved if a secret changed after
            // the deploy this replica serves (a change through another
            // replica before this replica's first pass over the function).
            let secrets_moved = match self.secret_stamps.lock().unwrap().get(&key) {
                Some(before) => Some(before) != stamp.as_ref(),
                None => served
                    .as_ref()
                    .is_some_and(|s| changed_since(&record.namespace, &record.spec, secrets, s.deployed_at)),
            };
            let wanted = match &served {
                None => true,
                Some(s) if s.version < target.version => true,
                Some(s) if s.version > target.version => false, // the store catches up
                Some(s) if s.failed_at.is_some_and(|at| at.elapsed() >= RETRY_AFTER) => true,
                Some(s) => s.failed_at.is_none() && (s.spec != record.spec || secrets_moved),
            };
            if !wanted {
                self.note_stamp(&key, stamp);
                continue;
            }
            current = false;
            if !self.deploying.lock().unwrap().insert(key.clone()) {
                continue; // seen again at a later pass
            }
            self.note_stamp(&key, stamp);
            // A new version was checked where it was built; a spec change
            // is checked here too, as where it was made (settings whose
            // handler does not load leave the version serving as it was).
            let verify = served.is_some_and(|s| s.version == target.version && s.failed_at.is_none());
            let Ok(spec) = serde_json::from_value::<FunctionSpec>(record.spec.clone()) else {
                self.deploying.lock().unwrap().remove(&key);
                continue;
            };
            let this = self.clone();
            let stored_spec = record.spec.clone();
            tokio::spawn(async move {
                this.parts
                    .deployer
                    .follow(&key, target, spec, stored_spec, verify, DEPLOY_TIMEOUT)
                    .await;
                this.deploying.lock().unwrap().remove(&key);
            });
        }
        for key in self.cluster.served_keys() {
            if !present.contains(&key) {
                self.parts.deployer.remove(&key).await;
            }
        }
        self.created.lock().unwrap().retain(|key, _| present.contains(key));
        self.secret_stamps
            .lock()
            .unwrap()
            .retain(|key, _| present.contains(key));
        current && self.deploying.lock().unwrap().is_empty()
    }

    fn note_stamp(&self, key: &FunctionKey, stamp: Option<String>) {
        let mut stamps = self.secret_stamps.lock().unwrap();
        match stamp {
            Some(stamp) => stamps.insert(key.clone(), stamp),
            None => stamps.remove(key),
        };
    }

    /// Becoming leader: finish what a dead leader left, then the leader's pass.
    async fn take_over(self: &Arc<Self>) {
        tracing::info!(replica = self.cluster.replica(), "taking over the leader's work");
        if let Err(e) = self.parts.jobs.take_over().await {
            tracing::warn!(error = %e, "finishing interrupted job runs failed");
        }
        if let Err(e) = self.parts.deployer.rebuild_stale().await {
            tracing::warn!(error = %e, "looking for artifacts of another shim version failed");
        }
    }

    /// No longer leading: stop this replica's runs and consumers.
    async fn step_down(&self) {
        tracing::info!(replica = self.cluster.replica(), "handing the leader's work back");
        self.parts.triggers.stop_consumers().await;
        self.parts.jobs.step_down().await;
    }
}

/// When each secret, by namespace and name, last changed.
type SecretTimes = std::collections::HashMap<(String, String), chrono::DateTime<chrono::Utc>>;

/// When the secrets a stored function spec uses last changed, as one
/// string (None when it uses none): a function whose stamp moved rolls
/// onto the new values.
fn secret_stamp(namespace: &str, spec: &serde_json::Value, secrets: &SecretTimes) -> Option<String> {
    let spec = serde_json::from_value::<FunctionSpec>(spec.clone()).ok()?;
    let names = spec.secret_names();
    if names.is_empty() {
        return None;
    }
    let parts: Vec<String> = names
        .into_iter()
        .map(|name| {
            let at = secrets.get(&(namespace.to_string(), name.to_string()));
            format!("{name}@{}", at.map_or("-".to_string(), |at| at.to_rfc3339()))
        })
        .collect();
    Some(parts.join(","))
}

/// Whether a secret the stored function spec uses changed after `at`.
fn changed_since(
    namespace: &str,
    spec: &serde_json::Value,
    secrets: &SecretTimes,
    at: chrono::DateTime<chrono::Utc>,
) -> bool {
    let Ok(spec) = serde_json::from_value::<FunctionSpec>(spec.clone()) else {
        return false;
    };
    let changed = spec.secret_names().into_iter().any(|name| {
        secrets
            .get(&(namespace.to_string(), name.to_string()))
            .is_some_and(|changed| *changed > at)
    });
    changed
}

#[cfg(test)]
mod tests {
    use chrono::{Duration, Utc};
    use serde_json::json;

    use super::{changed_since, secret_stamp, SecretTimes};

    fn uses_db() -> serde_json::Value {
        json!({"runtime": "python3.11", "env_from_secrets": [{"secret": "db", "key": "password", "env": "P"}]})
    }

    #[test]
    fn a_secret_changed_after_the_served_deploy_counts_as_moved() {
        let deployed = Utc::now();
        let mut secrets = SecretTimes::new();
        secrets.insert(("ns".into(), "db".into()), deployed - Duration::seconds(5));
        // Another tenant's secret of the same name changes: not this function's.
        secrets.insert(("other".into(), "db".into()), deployed + Duration::seconds(5));
        assert!(!changed_since("ns", &uses_db(), &secrets, deployed));
        secrets.insert(("ns".into(), "db".into()), deployed + Duration::seconds(1));
        assert!(changed_since("ns", &uses_db(), &secrets, deployed));
        let no_secrets = json!({"runtime": "python3.11"});
        assert!(!changed_since("ns", &no_secrets, &secrets, deployed));
    }

    #[test]
    fn the_stamp_moves_with_the_secrets_a_function_uses_only() {
        let at = Utc::now();
        let mut secrets = SecretTimes::new();
        secrets.insert(("ns".into(), "db".into()), at);
        let before = secret_stamp("ns", &uses_db(), &secrets);
        secrets.insert(("ns".into(), "unused".into()), at + Duration::seconds(1));
        assert_eq!(secret_stamp("ns", &uses_db(), &secrets), before);
        secrets.insert(("ns".into(), "db".into()), at + Duration::seconds(1));
        assert_ne!(secret_stamp("ns", &uses_db(), &secrets), before);
        assert_eq!(secret_stamp("ns", &json!({"runtime": "python3.11"}), &secrets), None);
    }
}
