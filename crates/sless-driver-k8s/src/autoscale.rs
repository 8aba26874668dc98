//! Scaling by load across replicas: each replica reports the calls it has
//! under way on a version as an annotation of its own on the version's
//! Deployment (`sless.dev/inflight-{replica}: "{calls}@{ms since epoch}"`,
//! removed once it is back to none), and a replica with calls under way
//! sets the Deployment's replicas to `ceil(sum of fresh reports /
//! concurrency)`, within `[min_instances, max_instances]`, conditional on
//! the resourceVersion it read. A report older than [`REPORT_TTL`] is a
//! dead replica's and counts for nothing. Pinned replicas are left alone,
//! a disabled function goes to zero; back to zero after the idle period is
//! `idle`'s work, and a call at zero wakes the version itself (it never
//! waits for this pass).
//!
//! No leader: the decision is a function of the Deployment as read (the
//! reports and the scale), and the scale is written only if the
//! Deployment is still at that resourceVersion, so a decision made from
//! reports that another replica has since changed is refused (and made
//! again at the next pass), and two replicas deciding from the same read
//! decide the same and write once. A leader would save requests, not
//! change the outcome.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams};
use sless_api::FunctionSpec;
use sless_driver::DriverError;

use crate::cluster::{unavailable, Cluster};
use crate::gateway::{now_ms, Serving};

/// The prefix of the in-flight reports' annotations.
pub const INFLIGHT_PREFIX: &str = "sless.dev/inflight-";

/// How old a report may be before it is taken for a dead replica's.
pub const REPORT_TTL: Duration = Duration::from_secs(30);

/// Runs a pass for every deployed version every `every`, for as long as
/// the process runs, under a name for this replica made at random.
pub fn spawn(
    cluster: Arc<Cluster>,
    versions: Arc<RwLock<HashMap<sless_driver::VersionRef, Arc<Serving>>>>,
    every: Duration,
) {
    let replica = replica_name();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let serving: Vec<Arc<Serving>> = versions.read().unwrap().values().cloned().collect();
            for version in serving {
                if let Err(e) = pass(&cluster, &replica, &version).await {
                    tracing::warn!(function = %version.target, error = %e, "scaling a version by load");
                }
            }
        }
    });
}

/// A name no other replica has (16 hex digits of a random hash): reports
/// are keyed by it, and a restarted replica is a new one (its old report
/// expires).
fn replica_name() -> String {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    format!("{:016x}", hasher.finish())
}

/// The replicas a version should have for the calls the live replicas
/// report; `None`: leave them (pinned, or no call under way anywhere).
pub fn desired(spec: &FunctionSpec, enabled: bool, reports: &BTreeMap<String, String>, now_ms: u64) -> Option<i32> {
    if !enabled {
        return Some(0);
    }
    if spec.replicas.is_some() {
        return None;
    }
    let ttl = u64::try_from(REPORT_TTL.as_millis()).unwrap_or(u64::MAX);
    let calls: u64 = reports
        .iter()
        .filter(|(key, _)| key.starts_with(INFLIGHT_PREFIX))
        .filter_map(|(_, value)| {
            let (calls, at) = value.split_once('@')?;
            let at: u64 = at.parse().ok()?;
            (now_ms.saturating_sub(at) < ttl).then(|| calls.parse::<u64>().ok())?
        })
        .sum();
    if calls == 0 {
        return None;
    }
    let wanted = calls.div_ceil(u64::from(spec.concurrency.max(1)));
    let floor = u64::from(spec.min_instances).max(1);
    let ceiling = u64::from(spec.max_instances).max(floor);
    Some(i32::try_from(wanted.clamp(floor, ceiling)).unwrap_or(i32::MAX))
}

/// One pass for `version` on this replica (`replica`: its name in the
/// reports): its report brought up to date, and the scale set from every
/// live replica's while this one has calls under way.
pub async fn pass(cluster: &Cluster, replica: &str, version: &Serving) -> Result<(), DriverError> {
    let calls = version.inflight();
    let reported = version.reported_inflight();
    if calls == 0 && reported == 0 {
        return Ok(());
    }
    let (namespace, name) = version.object();
    let api = cluster.api::<Deployment>(namespace);
    let key = format!("{INFLIGHT_PREFIX}{replica}");
    let value = (calls > 0).then(|| format!("{calls}@{}", now_ms()));
    let patch = serde_json::json!({"metadata": {"annotations": {key: value}}});
    let reported = api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| unavailable(&format!("reporting the calls under way on {name}"), e))?;
    version.set_reported_inflight(calls);
    if calls == 0 {
        return Ok(());
    }
    let reports = reported.metadata.annotations.clone().unwrap_or_default();
    let Some(wanted) = desired(&version.spec, version.enabled(), &reports, now_ms()) else {
        return Ok(());
    };
    let current = reported.spec.replicas.unwrap_or(0);
    if wanted != current {
        let scaled = cluster
            .scale(namespace, name, wanted, reported.metadata.resource_version.as_deref())
            .await?;
        tracing::info!(function = %version.target, from = current, to = wanted, by_this_replica = scaled, "scaled by load");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(concurrency: u32, min: u32, max: u32, replicas: Option<u32>) -> FunctionSpec {
        serde_json::from_value(serde_json::json!({
            "runtime": "python3.11", "concurrency": concurrency, "min_instances": min,
            "max_instances": max, "replicas": replicas,
        }))
        .unwrap()
    }

    fn reports(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    const NOW: u64 = 1_000_000_000;

    #[test]
    fn the_calls_of_live_replicas_over_the_concurrency() {
        let both = reports(&[
            ("sless.dev/inflight-a", "3@1000000000"),
            ("sless.dev/inflight-b", "2@999999000"),
            ("sless.dev/last-call", "5@1000000000"),
        ]);
        assert_eq!(desired(&spec(2, 0, 10, None), true, &both, NOW), Some(3));
        assert_eq!(desired(&spec(2, 0, 2, None), true, &both, NOW), Some(2), "capped");
        assert_eq!(
            desired(&spec(10, 4, 10, None), true, &both, NOW),
            Some(4),
            "at least the minimum"
        );
    }

    #[test]
    fn pinned_is_left_alone_and_disabled_is_zero() {
        let busy = reports(&[("sless.dev/inflight-a", "30@1000000000")]);
        assert_eq!(desired(&spec(2, 0, 10, Some(2)), true, &busy, NOW), None);
        assert_eq!(desired(&spec(2, 0, 10, None), false, &busy, NOW), Some(0));
    }

    #[test]
    fn stale_or_unreadable_reports_and_no_calls_leave_the_scale() {
        let stale = reports(&[
            ("sless.dev/inflight-a", "30@900000000"),
            ("sless.dev/inflight-b", "x@y"),
        ]);
        assert_eq!(desired(&spec(2, 0, 10, None), true, &stale, NOW), None);
        assert_eq!(desired(&spec(2, 0, 10, None), true, &reports(&[]), NOW), None);
    }
}
