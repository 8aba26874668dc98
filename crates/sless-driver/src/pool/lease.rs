//! A pool's instance with the calls it holds ([`Member`]), the claim of
//! one call on it ([`Lease`]), and the guards that count a call as waiting
//! or as registered for wake-ups while it is.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Instance, InstancePool};

/// An instance in a pool: the calls under way on it and when it last
/// finished one.
pub struct Member<I> {
    pub instance: I,
    inflight: AtomicUsize,
    last_used: Mutex<Instant>,
}

impl<I> Member<I> {
    pub(super) fn new(instance: I) -> Arc<Member<I>> {
        Arc::new(Member {
            instance,
            inflight: AtomicUsize::new(0),
            last_used: Mutex::new(Instant::now()),
        })
    }

    /// Calls under way on it.
    pub fn inflight(&self) -> usize {
        self.inflight.load(Ordering::SeqCst)
    }

    /// How long since it last finished a call (or joined the pool).
    pub fn idle_for(&self) -> Duration {
        self.last_used.lock().unwrap().elapsed()
    }

    pub(super) fn take_slot(&self) {
        self.inflight.fetch_add(1, Ordering::SeqCst);
    }

    /// Waits until it holds no call, or `limit` has passed (an instance
    /// taken out of its pool finishes what it holds before it stops).
    pub async fn drained(&self, limit: Duration) {
        let until = Instant::now() + limit;
        while self.inflight() > 0 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A claim on one slot of an instance; released on drop, which wakes the
/// pool's waiting calls when there are any.
pub struct Lease<I: Instance> {
    member: Arc<Member<I>>,
    pool: Arc<InstancePool<I>>,
}

impl<I: Instance> Lease<I> {
    /// A lease on a slot already taken (under the pool's lock).
    pub(super) fn new(member: Arc<Member<I>>, pool: Arc<InstancePool<I>>) -> Lease<I> {
        Lease { member, pool }
    }

    pub fn member(&self) -> &Arc<Member<I>> {
        &self.member
    }

    pub fn pool(&self) -> &Arc<InstancePool<I>> {
        &self.pool
    }
}

impl<I: Instance> std::ops::Deref for Lease<I> {
    type Target = I;

    fn deref(&self) -> &I {
        &self.member.instance
    }
}

impl<I: Instance> Drop for Lease<I> {
    fn drop(&mut self) {
        *self.member.last_used.lock().unwrap() = Instant::now();
        // SeqCst with the load of `sleepers` (and the slow path's increment
        // of it before it reads `inflight`): either this sees the sleeper or
        // the sleeper sees the freed slot.
        self.member.inflight.fetch_sub(1, Ordering::SeqCst);
        if self.pool.sleepers.load(Ordering::SeqCst) > 0 {
            self.pool.changed.notify_waiters();
        }
    }
}

/// Counts a call in the slow path until it leaves it.
pub(super) struct Sleeper<'a>(pub &'a AtomicUsize);

impl Drop for Sleeper<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts a call in the wait queue until it leaves it.
pub(super) struct Queued<'a, I: Instance>(pub &'a InstancePool<I>);

impl<I: Instance> Drop for Queued<'_, I> {
    fn drop(&mut self) {
        self.0.state.lock().unwrap().waiting -= 1;
    }
}
