//! Work a server repeats for as long as the part that does it lives.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Runs `work` on `owner` every `period` (the first after one period),
/// until `owner` is dropped: the task holds it only while `work` runs.
pub(crate) fn every<T, F, Fut>(owner: &Arc<T>, period: Duration, work: F)
where
    T: Send + Sync + 'static,
    F: Fn(Arc<T>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let owner = Arc::downgrade(owner);
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(period);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            let Some(owner) = owner.upgrade() else { return };
            work(owner).await;
        }
    });
}
