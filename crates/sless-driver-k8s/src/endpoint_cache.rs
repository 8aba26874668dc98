//! The gateway's EndpointSlice cache: one watch (kube-runtime's watcher)
//! over the EndpointSlices of every sless Service in the cluster, indexed
//! by Service, so that a call finds the ready pods of its version without
//! asking the API server. Until the first full listing is in, the cache
//! answers nothing and callers list for themselves.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};

use crate::endpoints::{ready_in, SERVICE_NAME};

/// The EndpointSlices watched: those of the Services of function versions
/// (the EndpointSlice controller copies a Service's labels to its slices).
const SELECTOR: &str = "app.kubernetes.io/managed-by=sless,sless.dev/component=instance";

/// `(namespace, service)` → slice name → its ready addresses.
type Index = HashMap<(String, String), HashMap<String, Vec<SocketAddr>>>;

/// Ready pods by Service, kept up to date by a watch.
#[derive(Default)]
pub struct EndpointCache {
    index: RwLock<Index>,
    /// A listing in progress (between `Init` and `InitDone`).
    relisting: RwLock<Option<Index>>,
    /// Bumped on every change; 0 until the first listing is complete.
    generation: AtomicU64,
}

impl EndpointCache {
    /// A cache fed by a watch on `client`'s cluster, for as long as the process runs.
    pub fn watch(client: Client) -> Arc<EndpointCache> {
        let cache = Arc::new(EndpointCache::default());
        let fed = cache.clone();
        tokio::spawn(async move {
            let api = Api::<EndpointSlice>::all(client);
            let events = watcher::watcher(api, watcher::Config::default().labels(SELECTOR)).default_backoff();
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) => fed.apply(event),
                    Err(e) => tracing::warn!(error = %e, "watching EndpointSlices"),
                }
            }
        });
        cache
    }

    /// What has changed since: 0 until the cache has listed everything once.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The ready pods of `service` in `namespace`, sorted; `None` until
    /// the cache has listed everything once.
    pub fn ready(&self, namespace: &str, service: &str) -> Option<Vec<SocketAddr>> {
        if self.generation() == 0 {
            return None;
        }
        let index = self.index.read().unwrap();
        let mut addresses: Vec<SocketAddr> = index
            .get(&(namespace.to_string(), service.to_string()))
            .into_iter()
            .flat_map(|slices| slices.values().flatten().copied())
            .collect();
        addresses.sort();
        addresses.dedup();
        Some(addresses)
    }

    /// Takes one event of the watch.
    pub fn apply(&self, event: Event<EndpointSlice>) {
        match event {
            Event::Init => *self.relisting.write().unwrap() = Some(Index::default()),
            Event::InitApply(slice) => {
                if let Some(listing) = self.relisting.write().unwrap().as_mut() {
                    insert(listing, &slice);
                }
            }
            Event::InitDone => {
                if let Some(listing) = self.relisting.write().unwrap().take() {
                    *self.index.write().unwrap() = listing;
                    self.changed();
                }
            }
            Event::Apply(slice) => {
                insert(&mut self.index.write().unwrap(), &slice);
                self.changed();
            }
            Event::Delete(slice) => {
                if let Some(key) = key_of(&slice) {
                    let mut index = self.index.write().unwrap();
                    if let Some(slices) = index.get_mut(&key.0) {
                        slices.remove(&key.1);
                        if slices.is_empty() {
                            index.remove(&key.0);
                        }
                    }
                }
                self.changed();
            }
        }
    }

    fn changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// A slice's Service and its own name.
fn key_of(slice: &EndpointSlice) -> Option<((String, String), String)> {
    let namespace = slice.metadata.namespace.clone()?;
    let service = slice.metadata.labels.as_ref()?.get(SERVICE_NAME)?.clone();
    Some(((namespace, service), slice.metadata.name.clone()?))
}

fn insert(index: &mut Index, slice: &EndpointSlice) {
    let Some((service, name)) = key_of(slice) else {
        return;
    };
    index.entry(service).or_default().insert(name, ready_in(slice));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(name: &str, service: &str, ready: &[(&str, bool)], port: i32) -> EndpointSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "sless-fn-demo",
                         "labels": {"kubernetes.io/service-name": service}},
            "addressType": "IPv4",
            "endpoints": ready.iter().map(|(ip, ready)| serde_json::json!(
                {"addresses": [ip], "conditions": {"ready": ready}})).collect::<Vec<_>>(),
            "ports": [{"name": "frames", "port": port}]
        }))
        .unwrap()
    }

    fn ready(cache: &EndpointCache, service: &str) -> Option<Vec<String>> {
        cache
            .ready("sless-fn-demo", service)
            .map(|a| a.iter().map(|a| a.to_string()).collect())
    }

    #[test]
    fn the_cache_answers_once_listed_and_follows_changes_by_slice() {
        let cache = EndpointCache::default();
        cache.apply(Event::Init);
        cache.apply(Event::InitApply(slice(
            "a",
            "fn-hello-v1",
            &[("10.0.0.1", true), ("10.0.0.2", false)],
            7070,
        )));
        assert_eq!(ready(&cache, "fn-hello-v1"), None, "not listed yet");
        cache.apply(Event::InitDone);
        assert_eq!(ready(&cache, "fn-hello-v1").unwrap(), ["10.0.0.1:7070"]);
        assert_eq!(ready(&cache, "fn-hello-v2").unwrap(), Vec::<String>::new());
        let seen = cache.generation();
        // A second slice of the same Service adds to the first.
        cache.apply(Event::Apply(slice("b", "fn-hello-v1", &[("10.0.0.3", true)], 7070)));
        assert_eq!(
            ready(&cache, "fn-hello-v1").unwrap(),
            ["10.0.0.1:7070", "10.0.0.3:7070"]
        );
        assert!(cache.generation() > seen);
        cache.apply(Event::Delete(slice("a", "fn-hello-v1", &[], 7070)));
        assert_eq!(ready(&cache, "fn-hello-v1").unwrap(), ["10.0.0.3:7070"]);
        // A relisting replaces everything at its end.
        cache.apply(Event::Init);
        cache.apply(Event::InitApply(slice("c", "fn-hello-v2", &[("10.0.0.4", true)], 7070)));
        assert_eq!(ready(&cache, "fn-hello-v1").unwrap(), ["10.0.0.3:7070"]);
        cache.apply(Event::InitDone);
        assert_eq!(ready(&cache, "fn-hello-v1").unwrap(), Vec::<String>::new());
        assert_eq!(ready(&cache, "fn-hello-v2").unwrap(), ["10.0.0.4:7070"]);
    }
}
