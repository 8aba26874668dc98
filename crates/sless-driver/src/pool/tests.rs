//! The pool's own logic with a tiny instance type of the tests' (an id and
//! a concurrency) and a supply that records what it was asked for.

use std::sync::Mutex;

use super::*;
use crate::FunctionKey;

struct Slots {
    id: u32,
    concurrency: usize,
}

impl Instance for Slots {
    fn concurrency(&self) -> usize {
        self.concurrency
    }
}

/// Records every [`Supply::more`]; adds an instance on the `add_on`-th ask.
#[derive(Default)]
struct Recorder {
    asked: Mutex<Vec<Demand>>,
    patience: Option<Duration>,
    add_on: Option<(usize, Arc<InstancePool<Slots>>)>,
}

impl Supply for Recorder {
    fn patience(&self) -> Duration {
        self.patience.unwrap_or(Duration::from_secs(60))
    }

    async fn more(&self, demand: Demand) -> Result<(), InvokeError> {
        let asks = {
            let mut asked = self.asked.lock().unwrap();
            asked.push(demand);
            asked.len()
        };
        if let Some((on, pool)) = &self.add_on {
            if asks == *on {
                pool.change(|members| {
                    members.add(Slots { id: 99, concurrency: 1 });
                });
            }
        }
        Ok(())
    }

    fn recheck(&self) -> Option<Duration> {
        self.add_on.as_ref().map(|_| Duration::from_millis(5))
    }
}

fn pool_of(concurrencies: &[usize], max_queue: usize) -> Arc<InstancePool<Slots>> {
    let pool = InstancePool::new(VersionRef::new(FunctionKey::new("demo", "hello"), 1), max_queue);
    pool.change(|members| {
        for (id, &concurrency) in concurrencies.iter().enumerate() {
            members.add(Slots {
                id: id as u32,
                concurrency,
            });
        }
    });
    pool
}

async fn lease(pool: &Arc<InstancePool<Slots>>) -> Lease<Slots> {
    pool.acquire(&Recorder::default()).await.unwrap().0
}

/// Waits until `pool` has `n` calls waiting.
async fn until_waiting(pool: &InstancePool<Slots>, n: usize) {
    while pool.load().waiting < n {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn a_call_takes_the_least_loaded_instance_with_a_free_slot() {
    let pool = pool_of(&[2, 2, 1], 10);
    let first = lease(&pool).await;
    let second = lease(&pool).await;
    let third = lease(&pool).await;
    let mut ids = [first.id, second.id, third.id];
    ids.sort();
    assert_eq!(ids, [0, 1, 2], "one call on each before any takes a second");
    // Instance 2 is full (concurrency 1): the next two go to 0 and 1.
    let fourth = lease(&pool).await;
    let fifth = lease(&pool).await;
    let mut ids = [fourth.id, fifth.id];
    ids.sort();
    assert_eq!(ids, [0, 1]);
    let loads: Vec<usize> = pool.members().iter().map(|m| m.inflight()).collect();
    assert_eq!(loads, [2, 2, 1]);
    drop(first);
    assert_eq!(pool.members().iter().map(|m| m.inflight()).sum::<usize>(), 4);
}

#[tokio::test]
async fn a_waiting_call_takes_the_slot_freed_on_any_instance() {
    let pool = pool_of(&[1, 1], 10);
    let mut held = vec![lease(&pool).await, lease(&pool).await];
    // Whichever instance frees a slot, the waiting call gets it.
    for freed in [1, 0] {
        let waiter = tokio::spawn({
            let pool = pool.clone();
            async move { pool.acquire(&Recorder::default()).await.unwrap() }
        });
        until_waiting(&pool, 1).await;
        held.retain(|lease| lease.id != freed);
        let (lease, waited) = waiter.await.unwrap();
        assert_eq!(lease.id, freed);
        assert!(waited);
        assert_eq!(pool.load().waiting, 0);
        held.push(lease);
    }
}

#[tokio::test]
async fn calls_beyond_the_queue_are_refused() {
    let pool = pool_of(&[1], 1);
    let held = lease(&pool).await;
    let waiter = tokio::spawn({
        let pool = pool.clone();
        async move { pool.acquire(&Recorder::default()).await.map(|(l, _)| l.id) }
    });
    until_waiting(&pool, 1).await;
    let refused = pool.acquire(&Recorder::default()).await;
    assert!(matches!(refused, Err(InvokeError::QueueFull(_))), "{:?}", refused.err());
    drop(held);
    assert_eq!(waiter.await.unwrap().unwrap(), 0);
}

#[tokio::test]
async fn more_instances_are_asked_for_only_while_calls_wait() {
    let pool = pool_of(&[1], 10);
    let supply = Recorder::default();
    let (held, waited) = pool.acquire(&supply).await.unwrap();
    assert!(!waited);
    assert!(supply.asked.lock().unwrap().is_empty(), "a free slot asks for nothing");
    let waiting = Arc::new(Recorder::default());
    let waiter = tokio::spawn({
        let (pool, waiting) = (pool.clone(), waiting.clone());
        async move { pool.acquire(&*waiting).await.map(|(l, _)| l.id) }
    });
    until_waiting(&pool, 1).await;
    while waiting.asked.lock().unwrap().is_empty() {
        tokio::task::yield_now().await;
    }
    assert_eq!(waiting.asked.lock().unwrap()[0], Demand { waiting: 1, serving: 1 });
    drop(held);
    assert_eq!(waiter.await.unwrap().unwrap(), 0);
}

#[tokio::test]
async fn a_supply_that_polls_adds_the_instance_the_waiting_call_gets() {
    let pool = pool_of(&[], 10);
    let supply = Recorder {
        add_on: Some((3, pool.clone())),
        ..Recorder::default()
    };
    let (lease, waited) = pool.acquire(&supply).await.unwrap();
    assert_eq!(lease.id, 99);
    assert!(waited);
    let asked = supply.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 3, "asked again at each recheck until it came");
    assert!(asked.iter().all(|d| *d == Demand { waiting: 1, serving: 0 }));
}

#[tokio::test]
async fn a_switch_serves_from_the_new_instances_while_the_old_ones_drain() {
    let pool = pool_of(&[4], 10);
    let old_lease = lease(&pool).await;
    let old = pool.switch(vec![Slots { id: 7, concurrency: 4 }]);
    assert_eq!(old.len(), 1);
    assert_eq!(old[0].inflight(), 1, "the old instance still holds its call");
    assert_eq!(lease(&pool).await.id, 7, "new calls go to the new instance");
    let drained = tokio::spawn({
        let old = old[0].clone();
        async move {
            old.drained(Duration::from_secs(3600)).await;
            old.inflight()
        }
    });
    tokio::task::yield_now().await;
    assert!(!drained.is_finished(), "drained before its call ended");
    drop(old_lease);
    assert_eq!(drained.await.unwrap(), 0);
}

#[tokio::test]
async fn a_call_that_waits_past_its_patience_times_out() {
    let pool = pool_of(&[1], 10);
    let _held = lease(&pool).await;
    let supply = Recorder {
        patience: Some(Duration::from_millis(20)),
        ..Recorder::default()
    };
    let result = pool.acquire(&supply).await;
    assert!(
        matches!(result, Err(InvokeError::Timeout { after, queued: true, .. }) if after == Duration::from_millis(20)),
        "{:?}",
        result.err()
    );
    let said = result.err().unwrap().to_string();
    assert!(
        said.contains("had no free instance within 20ms") && said.contains("never reached the handler"),
        "a call that waited is not said to be one the handler did not answer: {said}"
    );
    assert_eq!(pool.load().waiting, 0, "it left the queue");
}

#[tokio::test]
async fn a_refusal_ends_the_waits_and_refuses_new_calls() {
    let pool = pool_of(&[1], 10);
    let _held = lease(&pool).await;
    let waiter = tokio::spawn({
        let pool = pool.clone();
        async move { pool.acquire(&Recorder::default()).await.map(|(l, _)| l.id) }
    });
    until_waiting(&pool, 1).await;
    pool.set_refusal(Some(Refusal::Disabled));
    let ended = waiter.await.unwrap();
    assert!(matches!(ended, Err(InvokeError::Disabled(_))), "{ended:?}");
    let refused = pool.acquire(&Recorder::default()).await;
    assert!(matches!(refused, Err(InvokeError::Disabled(_))));
    pool.set_refusal(Some(Refusal::NotDeployed));
    let refused = pool.acquire(&Recorder::default()).await;
    assert!(matches!(refused, Err(InvokeError::NotDeployed(_))));
}
