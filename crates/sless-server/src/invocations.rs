//! Invocation records: written in batches by a background task, off the
//! request path. The buffer is bounded; when the database is slow or down,
//! records beyond it are dropped and counted, and writing resumes when it
//! is back. Followers of a function's logs get records as they happen.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use sless_api::InvocationRecord;
use tokio::sync::{broadcast, Notify};

use crate::record::Queued;
use crate::store::Store;

/// How records are buffered, written and kept.
#[derive(Debug, Clone)]
pub struct LogSettings {
    /// Records waiting to be written at most; more are dropped.
    pub buffer: usize,
    /// Records per write at most.
    pub batch: usize,
    pub flush_interval: Duration,
    /// Records older than this are deleted.
    pub retention: Duration,
    /// At most this many records are kept per namespace.
    pub keep: i64,
    /// At most this many records are kept per function.
    pub keep_per_function: i64,
    /// At most this many bytes of stored records are kept per namespace;
    /// a prune runs early once a quarter of it has been written since the last.
    pub max_bytes: i64,
    /// Off: nothing is recorded (for measuring the pipeline's cost).
    pub enabled: bool,
    /// Whether this replica leads: only the leader prunes.
    pub leading: tokio::sync::watch::Receiver<bool>,
}

/// The invocation log's front: `record` never waits.
pub struct InvocationLog {
    pending: Arc<Pending>,
    follow: broadcast::Sender<Arc<InvocationRecord>>,
    enabled: bool,
    pub dropped: AtomicU64,
    pub written: AtomicU64,
    pub write_errors: AtomicU64,
}

/// Records waiting to be written: a vector the serving threads push onto
/// under a lock that is all but never contended, and that the writer swaps
/// for the emptied vector of the batch before. The same two vectors' slots
/// serve batch after batch, warm in cache; a channel would allocate and
/// free a block of slots every few dozen records on the serving thread.
struct Pending {
    records: Mutex<Vec<Queued>>,
    /// Bytes of chunks written since the last prune, and the wake-up for an early one.
    written_bytes: AtomicU64,
    prune_now: Notify,
    /// Records waiting at most; more are dropped.
    limit: usize,
    /// Wakes the writer when a record arrives to an empty queue, or the log closes.
    arrived: Notify,
    closed: AtomicBool,
}

impl Pending {
    fn lock(&self) -> MutexGuard<'_, Vec<Queued>> {
        // A panic while holding the lock cannot leave the vector half-changed.
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Moves up to `most` of the oldest records into the empty `into`.
    fn take(&self, into: &mut Vec<Queued>, most: usize) {
        let mut records = self.lock();
        if records.len() <= most {
            std::mem::swap(&mut *records, into);
        } else {
            into.extend(records.drain(..most));
        }
    }
}

impl InvocationLog {
    pub fn start(store: Arc<dyn Store>, settings: LogSettings) -> Arc<InvocationLog> {
        let pending = Arc::new(Pending {
            records: Mutex::new(Vec::new()),
            written_bytes: AtomicU64::new(0),
            prune_now: Notify::new(),
            limit: settings.buffer.max(1),
            arrived: Notify::new(),
            closed: AtomicBool::new(false),
        });
        let (follow, _) = broadcast::channel(1024);
        let pending_for_prune = pending.clone();
        let log = Arc::new(InvocationLog {
            pending: pending.clone(),
            follow,
            enabled: settings.enabled,
            dropped: AtomicU64::new(0),
            written: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
        });
        tokio::spawn(write_loop(
            Arc::downgrade(&log),
            pending,
            store.clone(),
            settings.clone(),
        ));
        tokio::spawn(prune_loop(store, settings, pending_for_prune));
        log
    }

    /// Queues a record for writing and shows it to followers.
    pub fn record(&self, record: Queued) {
        if !self.enabled {
            return;
        }
        if self.follow.receiver_count() > 0 {
            let _ = self.follow.send(Arc::new(record.to_record()));
        }
        let mut records = self.pending.lock();
        if records.len() >= self.pending.limit {
            drop(records);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        records.push(record);
        let first = records.len() == 1;
        drop(records);
        if first {
            self.pending.arrived.notify_one();
        }
    }

    /// Records as they happen (a slow follower skips what it missed).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<InvocationRecord>> {
        self.follow.subscribe()
    }

    /// Records waiting to be written.
    pub fn backlog(&self) -> usize {
        self.pending.lock().len()
    }
}

impl Drop for InvocationLog {
    /// The writer writes what is still queued, then ends.
    fn drop(&mut self) {
        self.pending.closed.store(true, Ordering::Release);
        self.pending.arrived.notify_one();
    }
}

async fn write_loop(
    log: std::sync::Weak<InvocationLog>,
    pending: Arc<Pending>,
    store: Arc<dyn Store>,
    settings: LogSettings,
) {
    let mut batch: Vec<Queued> = Vec::new();
    loop {
        let waiting = pending.lock().len();
        if waiting == 0 {
            if pending.closed.load(Ordering::Acquire) {
                return;
            }
            pending.arrived.notified().await;
            continue;
        }
        // Let a batch fill for a moment under load.
        if waiting < settings.batch && !pending.closed.load(Ordering::Acquire) {
            tokio::time::sleep(settings.flush_interval).await;
        }
        pending.take(&mut batch, settings.batch);
        // Encoding and compressing the records is the CPU-heavy part: on a
        // blocking thread it leaves the threads serving requests alone
        // (with one serving thread it would otherwise take from every
        // request). The records come back to be dropped here, on the thread
        // that made them, so their memory never crosses threads.
        let written = batch.len() as u64;
        let encoded = tokio::task::spawn_blocking(move || (crate::store::chunks::chunks_of(&batch), batch)).await;
        let chunks = match encoded {
            Ok((chunks, mut records)) => {
                records.clear();
                // A burst may have grown the vector far past a batch: give that back.
                records.shrink_to(settings.batch);
                batch = records;
                chunks
            }
            Err(e) => {
                tracing::error!(error = %e, records = written, "encoding invocation records failed; dropping them");
                if let Some(log) = log.upgrade() {
                    log.dropped.fetch_add(written, Ordering::Relaxed);
                }
                batch = Vec::new();
                continue;
            }
        };
        let mut backoff = Duration::from_millis(100);
        loop {
            match store.insert_chunks(&chunks).await {
                Ok(()) => {
                    let bytes: u64 = chunks.iter().map(|c| c.data.len() as u64).sum();
                    let since = pending.written_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
                    if since > settings.max_bytes.max(0) as u64 / 4 {
                        // Floods fill the disk faster than the minute between prunes.
                        pending.prune_now.notify_one();
                    }
                    if let Some(log) = log.upgrade() {
                        log.written.fetch_add(written, Ordering::Relaxed);
                    }
                    break;
                }
                Err(e) => {
                    let Some(log) = log.upgrade() else { return };
                    if log.write_errors.fetch_add(1, Ordering::Relaxed) % 20 == 0 {
                        tracing::warn!(error = %e, pending = written, "writing invocation records failed; retrying");
                    }
                    drop(log);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}

async fn prune_loop(store: Arc<dyn Store>, settings: LogSettings, pending: Arc<Pending>) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = pending.prune_now.notified() => {}
        }
        pending.written_bytes.store(0, Ordering::Relaxed);
        if !*settings.leading.borrow() {
            continue;
        }
        let cutoff = crate::store::now() - chrono::Duration::from_std(settings.retention).unwrap_or_default();
        match store
            .prune_invocations(cutoff, settings.keep, settings.keep_per_function, settings.max_bytes)
            .await
        {
            Ok(0) => {}
            Ok(n) => tracing::info!(deleted = n, "pruned old invocation records"),
            Err(e) => tracing::warn!(error = %e, "pruning invocation records failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_takes_the_oldest_records_a_batch_at_a_time() {
        let pending = Pending {
            records: Mutex::new((0..5).map(|i| crate::record::sample(i, 200)).collect()),
            written_bytes: AtomicU64::new(0),
            prune_now: Notify::new(),
            limit: 10,
            arrived: Notify::new(),
            closed: AtomicBool::new(false),
        };
        let ids = |records: &[Queued]| records.iter().map(|r| r.id.1).collect::<Vec<_>>();
        let mut batch = Vec::new();
        pending.take(&mut batch, 3);
        assert_eq!(ids(&batch), [0, 1, 2]);
        batch.clear();
        pending.take(&mut batch, 3);
        assert_eq!(ids(&batch), [3, 4]);
        assert!(pending.lock().is_empty());
    }
}
