//! Warm pods, the fast path of a cold start: per runtime a Deployment of
//! generic pods (`sless instance generic`, the shim started, no function)
//! in the namespace `sless-warm`. A version woken from zero by this
//! replica claims one ready generic pod, tells it its function
//! (`POST /specialize`) and sends the waiting call straight to it, while
//! the version's own Deployment scales to one as before.

mod request;

pub use request::{Specialization, GENERIC_READY, MAX_SPECIALIZATION_BYTES, SPECIALIZE_PATH};
mod pods;

pub use pods::{sweep, Claimed, Wanted, WarmPods};

use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::objects::{CodeSource, SecretMounts};

/// A version woken from zero by this replica: a generic pod specialized
/// for it, whose frame port the waiting call goes to; `None` when the
/// version cannot take one (memory above the pool's, secrets, image
/// mode) or none is ready. The pod is deleted once the version's own pod
/// is ready, or after `start_timeout`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn take_for(
    warm: &Arc<WarmPods>,
    target: &sless_driver::VersionRef,
    spec: &sless_api::FunctionSpec,
    code: &CodeSource,
    secrets: &SecretMounts,
    (namespace, name): (&str, &str),
    poll: Duration,
    start_timeout: Duration,
) -> Option<SocketAddr> {
    let CodeSource::Artifact { fingerprint, digest } = code else {
        return None;
    };
    if !secrets.is_empty() || !warm.fits(spec) {
        return None;
    }
    let wanted = Wanted {
        namespace: &target.key.namespace,
        function: &target.key.name,
        version: target.version,
        claimed_for: format!("{namespace}.{name}"),
        spec,
        fingerprint,
        digest,
    };
    let started = Instant::now();
    let claimed = match warm.take(&wanted).await {
        Ok(Some(claimed)) => claimed,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(function = %target, error = %e, "taking a warm pod");
            return None;
        }
    };
    tracing::info!(
        function = %target,
        pod = %claimed.name,
        ms = started.elapsed().as_secs_f64() * 1000.0,
        "a warm pod took the cold start"
    );
    let addr = claimed.addr;
    tokio::spawn(retire(
        warm.clone(),
        claimed,
        (namespace.to_string(), name.to_string()),
        poll,
        start_timeout,
    ));
    Some(addr)
}

/// Deletes a claimed pod once the version's own pod is listed ready
/// (gateways then call that one; the claimed pod drains on SIGTERM), or
/// after `limit`.
async fn retire(
    warm: Arc<WarmPods>,
    claimed: Claimed,
    (namespace, name): (String, String),
    poll: Duration,
    limit: Duration,
) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        tokio::time::sleep(poll).await;
        if let Ok(ready) = crate::endpoints::ready(warm.cluster(), &namespace, &name).await {
            if ready.iter().any(|addr| *addr != claimed.addr) {
                break;
            }
        }
    }
    pods::remove(warm.cluster(), &claimed.name).await;
    tracing::info!(pod = %claimed.name, "a claimed warm pod retired");
}

/// How long past the start timeout a claimed pod is left to the replica
/// that claimed it.
const CLAIM_SLACK: Duration = Duration::from_secs(60);

/// Deletes the claimed pods that replicas which died left behind
/// ([`sweep`]): at start (a restarted replica's own), then every quarter
/// of the limit, at most every minute, for as long as the pools are used.
pub(crate) fn spawn_sweeper(warm: &Arc<WarmPods>, start_timeout: Duration) {
    let limit = start_timeout + CLAIM_SLACK;
    let every = (limit / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let warm: Weak<WarmPods> = Arc::downgrade(warm);
    tokio::spawn(async move {
        while let Some(pools) = warm.upgrade() {
            if let Err(e) = sweep(pools.cluster(), limit).await {
                tracing::warn!(error = %e, "sweeping claimed warm pods");
            }
            drop(pools);
            tokio::time::sleep(every).await;
        }
    });
}
