//! Per-namespace quotas: what one namespace may hold (functions, instances,
//! memory, triggers: 403 past them) and run at once (job runs: 429; builds wait for
//! the namespace's own build slots, so one namespace never holds all of
//! the server's). Every refusal names the quota and its setting.
//!
//! A check and the change it allows happen in the namespace's [`turn`]:
//! two requests cannot both pass a check that has room for one, on one
//! replica or on several sharing a PostgreSQL (the turn is then also a lock
//! in the database, [`crate::cluster::turns`]). The leader starts job runs
//! only within the quota, whichever replica accepted them.

use std::time::Duration;

use sless_api::{FunctionSpec, JobPhase, JobStatus};

use crate::cluster::turns::{NamespaceLock, TURN_WAIT};
use crate::error::{Error, Result};
use crate::state::{AppState, Gates, Place};
use crate::store::Kind;

/// A namespace's turn, ended by dropping it.
pub struct Turn {
    // Fields drop in order: the replicas' lock is let go before this
    // replica's next turn in the namespace may ask for it.
    _replicas: Option<NamespaceLock>,
    _here: Place,
}

/// Waits for the namespace's turn to check a quota and make the change it
/// allows: this replica's first, then (PostgreSQL) the replicas' lock, so a
/// replica waits in the database with one request per namespace at most.
/// Refused (503) when either is not had within [`TURN_WAIT`], or the
/// database cannot give the lock.
pub async fn turn(state: &AppState, ns: &str) -> Result<Turn> {
    let here = turn_here(&state.quota_turns, ns, TURN_WAIT).await?;
    let replicas = state
        .cluster
        .lock_namespace(ns)
        .await
        .map_err(|e| refused(ns, format_args!("taking its lock among replicas failed ({e})")))?;
    Ok(Turn {
        _replicas: replicas,
        _here: here,
    })
}

/// This replica's turn in `ns`, waited for `within` at most: a change that
/// hangs (a stuck store) holds up its namespace's others that long, and
/// no other namespace's.
async fn turn_here(turns: &Gates, ns: &str, within: Duration) -> Result<Place> {
    match tokio::time::timeout(within, turns.enter(ns)).await {
        Ok(Ok(place)) => Ok(place),
        Ok(Err(full)) => Err(refused(
            ns,
            format_args!("{} of its other changes wait on this replica", full.waiting),
        )),
        Err(_) => Err(refused(
            ns,
            format_args!("its other changes on this replica held its turn for over {within:?}"),
        )),
    }
}

/// The 503 of a turn not had in time.
fn refused(ns: &str, why: std::fmt::Arguments<'_>) -> Error {
    Error::Unavailable {
        message: format!("namespace {ns}'s quotas cannot be checked now: {why}; try again"),
        retry_after: Some(1),
    }
}

/// The instances a function may have at most.
fn instances(spec: &FunctionSpec) -> u64 {
    u64::from(spec.max_instances.max(spec.replicas.unwrap_or(0)))
}

/// Refuses a function (new, or `name` with new settings) that takes its
/// namespace past the functions, instances or memory quota.
pub async fn check_function(state: &AppState, ns: &str, name: &str, spec: &FunctionSpec, creating: bool) -> Result<()> {
    let config = &state.config;
    let others: Vec<FunctionSpec> = state
        .store
        .list(Kind::Function, ns)
        .await?
        .into_iter()
        .filter(|r| r.name != name)
        .filter_map(|r| serde_json::from_value(r.spec).ok())
        .collect();
    if creating && others.len() as u64 >= u64::from(config.ns_max_functions) {
        return Err(Error::Forbidden(format!(
            "namespace {ns} is at its quota of {} functions (the server's SLESS_NS_MAX_FUNCTIONS); delete one first",
            config.ns_max_functions
        )));
    }
    let total_instances: u64 = others.iter().map(instances).sum::<u64>() + instances(spec);
    if total_instances > u64::from(config.ns_max_instances) {
        return Err(Error::Forbidden(format!(
            "namespace {ns} would have up to {total_instances} instances, more than its quota of {} (the server's SLESS_NS_MAX_INSTANCES): lower max_instances",
            config.ns_max_instances
        )));
    }
    let memory = |s: &FunctionSpec| instances(s) * u64::from(s.memory_mb);
    let total_memory: u64 = others.iter().map(memory).sum::<u64>() + memory(spec);
    if total_memory > u64::from(config.ns_max_memory_mb) {
        return Err(Error::Forbidden(format!(
            "namespace {ns} would use up to {total_memory} MB (memory_mb x max_instances over its functions), more than its quota of {} MB (the server's SLESS_NS_MAX_MEMORY_MB): lower memory_mb or max_instances",
            config.ns_max_memory_mb
        )));
    }
    Ok(())
}

/// Refuses a new job while the namespace holds its quota of them.
pub async fn check_job(state: &AppState, ns: &str) -> Result<()> {
    let held = state.store.list(Kind::Job, ns).await?.len() as u64;
    let quota = u64::from(state.config.ns_max_jobs);
    if held >= quota {
        return Err(Error::Forbidden(format!(
            "namespace {ns} is at its quota of {quota} jobs (the server's SLESS_NS_MAX_JOBS); delete one first"
        )));
    }
    Ok(())
}

/// Refuses a new trigger while the namespace holds its quota of them.
pub async fn check_trigger(state: &AppState, ns: &str) -> Result<()> {
    let held = state.store.list(Kind::Trigger, ns).await?.len() as u64;
    let quota = u64::from(state.config.ns_max_triggers);
    if held >= quota {
        return Err(Error::Forbidden(format!(
            "namespace {ns} is at its quota of {quota} triggers (the server's SLESS_NS_MAX_TRIGGERS); delete one first"
        )));
    }
    Ok(())
}

/// Refuses a new run of job `job` while the namespace has its quota of
/// other runs going or waiting to start (as stored: any replica's).
pub async fn check_job_run(state: &AppState, ns: &str, job: &str) -> Result<()> {
    let running = state
        .store
        .list(Kind::Job, ns)
        .await?
        .into_iter()
        .filter(|r| r.name != job)
        .filter_map(|r| serde_json::from_value::<JobStatus>(r.status).ok())
        .filter(|status| matches!(status.phase, JobPhase::Pending | JobPhase::Running))
        .count();
    let quota = state.config.ns_max_job_runs as usize;
    if running >= quota {
        return Err(Error::TooManyRequests {
            message: format!(
                "namespace {ns} has {running} job runs under way, its quota (the server's SLESS_NS_MAX_JOB_RUNS); try again when one ends"
            ),
            retry_after: 5,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    /// A turn waits for the one before it in its namespace for its bound at
    /// most, then is refused (503, retry in a second); meanwhile another
    /// namespace's turn is had at once.
    #[tokio::test]
    async fn a_turn_is_refused_past_its_bound_and_holds_up_no_other_namespace() {
        let turns = Gates::new(1);
        let within = Duration::from_millis(200);
        let _held = turn_here(&turns, "a", within).await.unwrap();
        let asked = tokio::time::Instant::now();
        let waited = tokio::time::timeout(within * 10, turn_here(&turns, "a", within));
        let (waited, other) = tokio::join!(waited, async { turn_here(&turns, "b", within).now_or_never() });
        assert!(
            matches!(other, Some(Ok(_))),
            "namespace b's turn waited for namespace a's"
        );
        match waited.expect("the second turn waited without bound") {
            Err(Error::Unavailable {
                message,
                retry_after: Some(1),
            }) => assert!(
                message.starts_with("namespace a's quotas cannot be checked now"),
                "{message}"
            ),
            Err(e) => panic!("refused otherwise: {e}"),
            Ok(_) => panic!("had a turn namespace a's first turn still holds"),
        }
        assert!(asked.elapsed() >= within, "refused after {:?}", asked.elapsed());
    }
}
