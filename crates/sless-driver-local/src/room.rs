//! What each namespace runs on this server, bounded while it runs.
//!
//! The API's quotas bound what a namespace may *declare*: `max_instances`
//! and `memory_mb` × `max_instances` summed over its functions. What runs
//! can be more: the instances of an earlier version or of a deleted
//! function drain (they finish their calls, up to `timeout_sec` + 5 s),
//! versions called by number or alias serve beside `$latest`, and job runs
//! take instances of their own. A tenant that keeps calls hanging and
//! deploys again and again would otherwise hold instances without bound.
//! So every instance of a tenant's function holds a [`Claim`] on its
//! namespace's room from before it starts until it stops, and an instance
//! that would take the namespace past the same two quotas does not start,
//! unless stopping an instance of the namespace that has been idle a while
//! makes room for it (idle instances are a cache; calls under way are not).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// What one namespace may run at once on this server (the API's
/// per-namespace quotas: `SLESS_NS_MAX_INSTANCES`, `SLESS_NS_MAX_MEMORY_MB`).
#[derive(Debug, Clone, Copy)]
pub struct NamespaceLimits {
    pub instances: u32,
    pub memory_mb: u64,
}

impl NamespaceLimits {
    /// No bound (a server that runs one function, such as `sless instance`).
    pub const NONE: NamespaceLimits = NamespaceLimits {
        instances: u32::MAX,
        memory_mb: u64::MAX,
    };
}

/// What a namespace runs.
#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    instances: u32,
    memory_mb: u64,
}

/// What holds a namespace's instances and can give one up: a function's
/// pool, which stops an instance idle long enough not to be serving a
/// stream of calls.
pub trait Evict: Send + Sync {
    /// Stops one such instance; whether there was one.
    fn stop_one_idle(&self) -> bool;
}

/// The instances each namespace runs on this server.
pub struct Room {
    limits: NamespaceLimits,
    used: Mutex<HashMap<String, Usage>>,
    /// What may give room back, by namespace.
    holders: Mutex<HashMap<String, Vec<Weak<dyn Evict>>>>,
}

impl std::fmt::Debug for Room {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Room")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// One instance's share of its namespace's room, given back when dropped.
#[derive(Debug)]
pub struct Claim {
    room: Arc<Room>,
    namespace: String,
    memory_mb: u64,
}

impl Room {
    pub fn new(limits: NamespaceLimits) -> Arc<Room> {
        Arc::new(Room {
            limits,
            used: Mutex::new(HashMap::new()),
            holders: Mutex::new(HashMap::new()),
        })
    }

    /// `holder`'s idle instances may be stopped to make room in `namespace`.
    pub fn register(&self, namespace: &str, holder: Weak<dyn Evict>) {
        let mut holders = self.holders.lock().unwrap();
        let list = holders.entry(namespace.to_string()).or_default();
        list.retain(|h| h.strong_count() > 0);
        list.push(holder);
    }

    /// Room for one more instance of `memory_mb` in `namespace`, stopping
    /// idle ones of the namespace while that helps, or why there is none
    /// (in words for the namespace's callers).
    pub fn claim(self: &Arc<Self>, namespace: &str, memory_mb: u32) -> Result<Claim, String> {
        loop {
            match self.try_claim(namespace, memory_mb) {
                Ok(claim) => return Ok(claim),
                Err(full) if !self.stop_one_idle(namespace) => return Err(full),
                Err(_) => {}
            }
        }
    }

    /// Stops one idle instance of `namespace`; whether there was one.
    fn stop_one_idle(&self, namespace: &str) -> bool {
        let holders: Vec<Arc<dyn Evict>> = {
            let mut holders = self.holders.lock().unwrap();
            let Some(list) = holders.get_mut(namespace) else {
                return false;
            };
            list.retain(|h| h.strong_count() > 0);
            if list.is_empty() {
                holders.remove(namespace);
                return false;
            }
            list.iter().filter_map(Weak::upgrade).collect()
        };
        holders.iter().any(|holder| holder.stop_one_idle())
    }

    fn try_claim(self: &Arc<Self>, namespace: &str, memory_mb: u32) -> Result<Claim, String> {
        let memory_mb = u64::from(memory_mb);
        let mut used = self.used.lock().unwrap();
        let usage = used.get(namespace).copied().unwrap_or_default();
        if usage.instances >= self.limits.instances || usage.memory_mb + memory_mb > self.limits.memory_mb {
            return Err(format!(
                "namespace {namespace} runs as many instances as its quota allows ({} of {} instances, {} of {} MB), \
                 counting those still finishing calls of an earlier version or of a deleted function; retry when calls end",
                usage.instances, self.limits.instances, usage.memory_mb, self.limits.memory_mb
            ));
        }
        let entry = used.entry(namespace.to_string()).or_default();
        entry.instances += 1;
        entry.memory_mb += memory_mb;
        Ok(Claim {
            room: self.clone(),
            namespace: namespace.to_string(),
            memory_mb,
        })
    }

    /// The instances `namespace` runs here.
    #[cfg(test)]
    fn instances(&self, namespace: &str) -> u32 {
        self.used.lock().unwrap().get(namespace).map_or(0, |u| u.instances)
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut used = self.room.used.lock().unwrap();
        if let Some(usage) = used.get_mut(&self.namespace) {
            usage.instances -= 1;
            usage.memory_mb -= self.memory_mb;
            if usage.instances == 0 {
                used.remove(&self.namespace);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_runs_up_to_its_limits_and_gets_its_room_back() {
        let room = Room::new(NamespaceLimits {
            instances: 2,
            memory_mb: 384,
        });
        let first = room.claim("ns", 128).unwrap();
        let second = room.claim("ns", 128).unwrap();
        let refused = room.claim("ns", 128).unwrap_err();
        assert!(refused.contains("2 of 2 instances, 256 of 384 MB"), "{refused}");
        assert!(room.claim("other", 128).is_ok(), "another namespace has its own room");
        drop(first);
        assert_eq!(room.instances("ns"), 1);
        let big = room.claim("ns", 512).unwrap_err();
        assert!(
            big.contains("1 of 2 instances, 128 of 384 MB"),
            "memory bounds too: {big}"
        );
        let third = room.claim("ns", 256).unwrap();
        drop((second, third));
        assert_eq!(room.instances("ns"), 0);
        assert!(
            room.used.lock().unwrap().is_empty(),
            "nothing is kept for a namespace that runs nothing"
        );
    }

    /// Holds claims; gives one up when asked, if it has any idle.
    struct Holder {
        idle: Mutex<Vec<Claim>>,
    }

    impl Evict for Holder {
        fn stop_one_idle(&self) -> bool {
            self.idle.lock().unwrap().pop().is_some()
        }
    }

    #[test]
    fn idle_instances_of_the_namespace_make_room_and_busy_ones_do_not() {
        let room = Room::new(NamespaceLimits {
            instances: 3,
            memory_mb: 1024,
        });
        let busy = room.claim("ns", 128).unwrap();
        let holder = Arc::new(Holder {
            idle: Mutex::new(vec![room.claim("ns", 128).unwrap(), room.claim("ns", 128).unwrap()]),
        });
        let other = Arc::new(Holder {
            idle: Mutex::new(vec![room.claim("other", 128).unwrap()]),
        });
        room.register("ns", Arc::downgrade(&holder) as Weak<dyn Evict>);
        room.register("other", Arc::downgrade(&other) as Weak<dyn Evict>);

        let big = room.claim("ns", 256).expect("an idle instance stopped for it");
        assert_eq!(holder.idle.lock().unwrap().len(), 1);
        let next = room.claim("ns", 128).expect("the last idle one stopped for it");
        assert!(holder.idle.lock().unwrap().is_empty());
        let refused = room.claim("ns", 128).unwrap_err();
        assert!(refused.contains("3 of 3 instances, 512 of 1024 MB"), "{refused}");
        assert_eq!(
            other.idle.lock().unwrap().len(),
            1,
            "another namespace's are not stopped"
        );
        drop((busy, big, next));
    }
}
