//! Invocation records: written in batches by a background task, off the
//! request path. The buffer is bounded; when the database is slow or down,
//! records beyond it are dropped and counted, and writing resumes when it
//! is back. Followers of a function's logs get records as they happen.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sless_api::InvocationRecord;
use tokio::sync::{broadcast, mpsc};

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
    /// At most this many records are kept.
    pub keep: i64,
    /// Off: nothing is recorded (for measuring the pipeline's cost).
    pub enabled: bool,
}

/// The invocation log's front: `record` never waits.
pub struct InvocationLog {
    tx: mpsc::Sender<InvocationRecord>,
    follow: broadcast::Sender<Arc<InvocationRecord>>,
    enabled: bool,
    pub dropped: AtomicU64,
    pub written: AtomicU64,
    pub write_errors: AtomicU64,
}

impl InvocationLog {
    pub fn start(store: Arc<dyn Store>, settings: LogSettings) -> Arc<InvocationLog> {
        let (tx, rx) = mpsc::channel(settings.buffer.max(1));
        let (follow, _) = broadcast::channel(1024);
        let log = Arc::new(InvocationLog {
            tx,
            follow,
            enabled: settings.enabled,
            dropped: AtomicU64::new(0),
            written: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
        });
        tokio::spawn(write_loop(Arc::downgrade(&log), store.clone(), rx, settings.clone()));
        tokio::spawn(prune_loop(store, settings));
        log
    }

    /// Queues a record for writing and shows it to followers.
    pub fn record(&self, record: InvocationRecord) {
        if !self.enabled {
            return;
        }
        if self.follow.receiver_count() > 0 {
            let _ = self.follow.send(Arc::new(record.clone()));
        }
        if self.tx.try_send(record).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records as they happen (a slow follower skips what it missed).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<InvocationRecord>> {
        self.follow.subscribe()
    }

    /// Records waiting to be written.
    pub fn backlog(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }
}

async fn write_loop(
    log: std::sync::Weak<InvocationLog>,
    store: Arc<dyn Store>,
    mut rx: mpsc::Receiver<InvocationRecord>,
    settings: LogSettings,
) {
    let mut batch = Vec::with_capacity(settings.batch);
    loop {
        if rx.recv_many(&mut batch, settings.batch).await == 0 {
            return;
        }
        // Let a batch fill for a moment under load.
        if batch.len() < settings.batch {
            tokio::time::sleep(settings.flush_interval).await;
            while batch.len() < settings.batch {
                match rx.try_recv() {
                    Ok(record) => batch.push(record),
                    Err(_) => break,
                }
            }
        }
        // Encoding and compressing is the CPU-heavy part: on a blocking
        // thread it leaves the threads serving requests alone (with one
        // serving thread it would otherwise take from every request).
        // The records are dropped back here, on the thread that allocated
        // them: freed on the blocking thread, their memory would come back
        // to the serving thread through the allocator's cross-thread path,
        // cold in another core's cache, and make its allocations slower.
        let written = batch.len() as u64;
        let encoded = tokio::task::spawn_blocking(move || {
            let chunks = crate::store::chunks::chunks_of(&batch);
            (chunks, batch)
        })
        .await;
        let chunks = match encoded {
            Ok((chunks, encoded)) => {
                batch = encoded;
                batch.clear();
                chunks
            }
            Err(e) => {
                tracing::error!(error = %e, records = written, "encoding invocation records failed; dropping them");
                if let Some(log) = log.upgrade() {
                    log.dropped.fetch_add(written, Ordering::Relaxed);
                }
                batch = Vec::with_capacity(settings.batch);
                continue;
            }
        };
        let mut backoff = Duration::from_millis(100);
        loop {
            match store.insert_chunks(&chunks).await {
                Ok(()) => {
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

async fn prune_loop(store: Arc<dyn Store>, settings: LogSettings) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    loop {
        tick.tick().await;
        let cutoff = crate::store::now() - chrono::Duration::from_std(settings.retention).unwrap_or_default();
        match store.prune_invocations(cutoff, settings.keep).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(deleted = n, "pruned old invocation records"),
            Err(e) => tracing::warn!(error = %e, "pruning invocation records failed"),
        }
    }
}
