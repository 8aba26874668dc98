//! Where the ready pods of a version are: the EndpointSlices of its
//! headless Service (ready endpoints only, the port named `frames`).
//! Listed on demand, when the watching cache ([`crate::endpoint_cache`])
//! is off or has not listed everything yet.

use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::ListParams;
use sless_driver::DriverError;

use crate::cluster::{unavailable, Cluster};

/// The label EndpointSlices carry naming their Service.
pub(crate) const SERVICE_NAME: &str = "kubernetes.io/service-name";

/// The addresses of the ready pods behind Service `service`, sorted.
pub async fn ready(cluster: &Cluster, namespace: &str, service: &str) -> Result<Vec<SocketAddr>, DriverError> {
    let slices = cluster
        .api::<EndpointSlice>(namespace)
        .list(&ListParams::default().labels(&format!("{SERVICE_NAME}={service}")))
        .await
        .map_err(|e| unavailable(&format!("listing the endpoints of {service}"), e))?;
    let mut addresses: Vec<SocketAddr> = slices.items.iter().flat_map(ready_in).collect();
    addresses.sort();
    addresses.dedup();
    Ok(addresses)
}

/// The ready addresses of one slice (a missing `ready` condition means ready).
pub(crate) fn ready_in(slice: &EndpointSlice) -> Vec<SocketAddr> {
    let Some(port) = slice
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("frames"))
        .and_then(|p| p.port)
        .and_then(|p| u16::try_from(p).ok())
    else {
        return Vec::new();
    };
    slice
        .endpoints
        .iter()
        .flatten()
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .filter_map(|e| e.addresses.first()?.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, port))
        .collect()
}
