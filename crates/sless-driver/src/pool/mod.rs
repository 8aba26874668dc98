//! The instances of one deployed version as every driver serves them: the
//! set of serving instances with the calls each holds, the pick of the
//! least-loaded one with a free slot, a lease per call (released on drop),
//! the bounded wait for a free slot (`QueueFull` beyond `max_queue`, a
//! timeout past the deadline), a request for more instances while calls
//! wait, and the switch to new instances while the old ones drain.
//!
//! What an instance is and how one more is had is the driver's: a local
//! process started from a warm interpreter, or a pod of a Deployment scaled
//! up. A driver gives its instance type ([`Instance`]) and, per call, what
//! to do while the call waits ([`Supply`]); it keeps the supervision of its
//! instances (starting, stopping, noticing deaths) to itself and changes the
//! set through [`InstancePool::change`].
//!
//! **Invariant:** a call that finds a free slot takes the state lock once
//! and touches atomics; it never registers for wake-ups. A released slot
//! wakes waiting calls only when there are any, and wakes all of them: a
//! waiting call takes a free slot of any instance, not of one it chose.

mod lease;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::{InvokeError, VersionRef};

pub use lease::{Lease, Member};
use lease::{Queued, Sleeper};

/// One instance of a version: a process, a pod.
pub trait Instance: Send + Sync + 'static {
    /// How many calls it takes at once.
    fn concurrency(&self) -> usize;
    /// Whether it can take a call; a dead one is passed over until its
    /// driver takes it out of the pool.
    fn is_alive(&self) -> bool {
        true
    }
}

/// Calls waiting for a slot and instances serving, as a [`Supply`] sees
/// them when it is asked for more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Demand {
    /// Calls waiting for a free slot, the asking one included.
    pub waiting: usize,
    /// Instances in the pool (free or not).
    pub serving: usize,
}

/// What a waiting call asks of its driver: one value per call (so that it
/// can remember what it asked for already).
pub trait Supply: Send + Sync {
    /// How long a call may wait for a slot.
    fn patience(&self) -> Duration;
    /// A call found no free slot (again: after every wake-up). The driver
    /// asks for more instances as it does, if `demand` warrants it; an
    /// error ends the call with it.
    fn more(&self, demand: Demand) -> impl Future<Output = Result<(), InvokeError>> + Send;
    /// How long a waiting call sleeps at most before it asks [`Supply::more`]
    /// again unwoken (a driver whose instances appear by polling); `None`:
    /// only a change of the pool wakes it.
    fn recheck(&self) -> Option<Duration> {
        None
    }
    /// The error of a call whose wait ran out (`None`: a timeout).
    fn timed_out(&self, _demand: Demand) -> Option<InvokeError> {
        None
    }
}

/// Why a pool takes no calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The version is not (or no longer) deployed.
    NotDeployed,
    /// The function is turned off, or pinned at zero instances.
    Disabled,
}

/// The instances of one deployed version.
pub struct InstancePool<I> {
    target: VersionRef,
    max_queue: usize,
    state: Mutex<State<I>>,
    /// Any change that may free a slot or end a wait.
    changed: Notify,
    /// Calls in [`InstancePool::acquire`]'s slow path, which wait on
    /// `changed`: a lease wakes them only when there are any.
    sleepers: AtomicUsize,
}

struct State<I> {
    members: Vec<Arc<Member<I>>>,
    refusal: Option<Refusal>,
    waiting: usize,
}

impl<I: Instance> InstancePool<I> {
    /// An empty pool of `target` that holds up to `max_queue` waiting calls.
    pub fn new(target: VersionRef, max_queue: usize) -> Arc<Self> {
        Arc::new(InstancePool {
            target,
            max_queue,
            state: Mutex::new(State {
                members: Vec::new(),
                refusal: None,
                waiting: 0,
            }),
            changed: Notify::new(),
            sleepers: AtomicUsize::new(0),
        })
    }

    pub fn target(&self) -> &VersionRef {
        &self.target
    }

    /// A lease on the least-loaded instance with a free slot, waiting for
    /// one (and asking `supply` for more) when there is none; also whether
    /// the call had to wait.
    pub async fn acquire<S: Supply>(self: &Arc<Self>, supply: &S) -> Result<(Lease<I>, bool), InvokeError> {
        // The common case, a free slot, without registering for wake-ups.
        {
            let st = self.state.lock().unwrap();
            if st.refusal.is_none() {
                if let Some(member) = least_loaded(&st.members) {
                    return Ok((Lease::new(member, self.clone()), false));
                }
            }
        }
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        let _sleeper = Sleeper(&self.sleepers);
        self.wait(supply).await
    }

    /// The slow path: registered for wake-ups (by `_sleeper`), asks for
    /// more and waits until a slot is free, the pool refuses, or the
    /// deadline passes.
    async fn wait<S: Supply>(self: &Arc<Self>, supply: &S) -> Result<(Lease<I>, bool), InvokeError> {
        let mut queued: Option<Queued<'_, I>> = None;
        // Whether a pick found no free slot (a slot freed since the fast
        // path's look is no wait).
        let mut waited = false;
        let deadline = tokio::time::Instant::now() + supply.patience();
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let demand = {
                let mut st = self.state.lock().unwrap();
                self.admit(&st)?;
                if let Some(member) = least_loaded(&st.members) {
                    drop(st);
                    return Ok((Lease::new(member, self.clone()), waited));
                }
                waited = true;
                if queued.is_none() {
                    if st.waiting >= self.max_queue {
                        return Err(InvokeError::QueueFull(self.target.key.clone()));
                    }
                    st.waiting += 1;
                    queued = Some(Queued(self));
                }
                Demand {
                    waiting: st.waiting,
                    serving: st.members.len(),
                }
            };
            supply.more(demand).await?;
            let wake = match supply.recheck() {
                Some(every) => deadline.min(tokio::time::Instant::now() + every),
                None => deadline,
            };
            let woken = tokio::time::timeout_at(wake, notified).await.is_ok();
            if !woken && tokio::time::Instant::now() >= deadline {
                return Err(self.timed_out(supply));
            }
        }
    }

    fn admit(&self, st: &State<I>) -> Result<(), InvokeError> {
        match st.refusal {
            None => Ok(()),
            Some(Refusal::NotDeployed) => Err(InvokeError::NotDeployed(self.target.clone())),
            Some(Refusal::Disabled) => Err(InvokeError::Disabled(self.target.key.clone())),
        }
    }

    fn timed_out<S: Supply>(&self, supply: &S) -> InvokeError {
        let demand = {
            let st = self.state.lock().unwrap();
            Demand {
                waiting: st.waiting,
                serving: st.members.len(),
            }
        };
        supply.timed_out(demand).unwrap_or_else(|| InvokeError::Timeout {
            key: self.target.key.clone(),
            after: supply.patience(),
            queued: true,
        })
    }

    /// Takes calls again (`None`) or refuses them; waiting calls get the
    /// refusal at once.
    pub fn set_refusal(&self, refusal: Option<Refusal>) {
        self.state.lock().unwrap().refusal = refusal;
        self.changed.notify_waiters();
    }

    /// Changes the set of serving instances under the pool's lock (add
    /// one, drop dead ones, take idle ones out) and wakes the waiting calls
    /// if it did change.
    pub fn change<R>(&self, edit: impl FnOnce(&mut Members<'_, I>) -> R) -> R {
        let (result, changed) = {
            let mut st = self.state.lock().unwrap();
            let mut members = Members {
                members: &mut st.members,
                changed: false,
            };
            let result = edit(&mut members);
            (result, members.changed)
        };
        if changed {
            self.changed.notify_waiters();
        }
        result
    }

    /// Wakes the waiting calls to look again (something their supply
    /// goes by changed: a start failed).
    pub fn wake_waiters(&self) {
        self.changed.notify_waiters();
    }

    /// Makes `instances` the serving ones (a new generation); the old ones
    /// are returned to be drained ([`Member::drained`]) and stopped.
    pub fn switch(&self, instances: Vec<I>) -> Vec<Arc<Member<I>>> {
        self.change(|members| members.replace(instances.into_iter().map(Member::new).collect()))
    }

    /// The serving instances now.
    pub fn members(&self) -> Vec<Arc<Member<I>>> {
        self.state.lock().unwrap().members.clone()
    }

    /// Instances serving and calls waiting.
    pub fn load(&self) -> Demand {
        let st = self.state.lock().unwrap();
        Demand {
            waiting: st.waiting,
            serving: st.members.len(),
        }
    }
}

/// The serving instances, as [`InstancePool::change`] edits them.
pub struct Members<'a, I> {
    members: &'a mut Vec<Arc<Member<I>>>,
    changed: bool,
}

impl<I: Instance> Members<'_, I> {
    /// Adds a serving instance.
    pub fn add(&mut self, instance: I) -> Arc<Member<I>> {
        let member = Member::new(instance);
        self.members.push(member.clone());
        self.changed = true;
        member
    }

    /// Takes out the instances `remove` picks (it sees them in order) and
    /// returns them.
    pub fn remove_where(&mut self, mut remove: impl FnMut(&Member<I>) -> bool) -> Vec<Arc<Member<I>>> {
        let mut removed = Vec::new();
        self.members.retain(|member| {
            if remove(member) {
                removed.push(member.clone());
                false
            } else {
                true
            }
        });
        self.changed |= !removed.is_empty();
        removed
    }

    /// Replaces every instance; the old ones are returned.
    pub fn replace(&mut self, members: Vec<Arc<Member<I>>>) -> Vec<Arc<Member<I>>> {
        self.changed = true;
        std::mem::replace(self.members, members)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Member<I>>> {
        self.members.iter()
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

/// The live instance holding the fewest calls, if it has a free slot; its
/// slot is taken (the caller wraps it in a lease).
fn least_loaded<I: Instance>(members: &[Arc<Member<I>>]) -> Option<Arc<Member<I>>> {
    let member = members
        .iter()
        .filter(|m| m.instance.is_alive() && m.inflight() < m.instance.concurrency().max(1))
        .min_by_key(|m| m.inflight())?;
    member.take_slot();
    Some(member.clone())
}
