//! Invocation records: written in batches by a background task, off the
//! request path. The buffer is bounded; when the database is slow or down,
//! records beyond it are dropped and counted, and writing resumes when it
//! is back. Followers of a function's logs get records as they happen.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sless_api::{InvocationRecord, LogLine};
use tokio::sync::{broadcast, Notify};

use crate::driver::TriggerKind;
use crate::store::Store;

/// A record as it waits to be written. Thousands wait between two writes;
/// were their names and ids strings, each would hold heap blocks of the
/// serving thread that all come free at once after the write, and that
/// thread's next allocations would find them cold in cache (perf: 3x the
/// allocator's time per request with records on). So the text is kept
/// inline, and the record is made on the encoding thread.
pub struct Queued {
    pub namespace: Text,
    pub function: Text,
    pub request_id: Text,
    /// The id's parts: start time in microseconds and a random number.
    pub id: (u64, u32),
    pub started_at: DateTime<Utc>,
    pub version: u64,
    pub kind: TriggerKind,
    /// The HTTP status the call answered with.
    pub status: u16,
    pub duration_ms: f64,
    pub error: Option<String>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub cold_start: bool,
    pub logs: Vec<LogLine>,
    pub logs_truncated: bool,
}

impl Queued {
    /// The record's id: start time and random part in hex, so ids sort by start.
    pub fn id(&self) -> String {
        record_id(self.id)
    }

    /// The id written into `buf`, without an allocation.
    pub fn id_text<'b>(&self, buf: &'b mut [u8; 24]) -> &'b str {
        let (micros, random) = self.id;
        let (time, rest) = buf.split_at_mut(16);
        crate::invoker::write_hex(micros, time);
        crate::invoker::write_hex(u64::from(random), rest);
        std::str::from_utf8(buf).expect("hex digits")
    }

    /// The record, for followers and tests (the stored form is written
    /// straight from the queued one: [`crate::store::chunks::chunks_of`]).
    pub fn to_record(&self) -> InvocationRecord {
        InvocationRecord {
            id: self.id(),
            namespace: self.namespace.as_str().to_string(),
            function: self.function.as_str().to_string(),
            version: self.version,
            trigger: self.kind.as_str().to_string(),
            request_id: self.request_id.as_str().to_string(),
            started_at: self.started_at,
            duration_ms: self.duration_ms,
            status: status_label(self.kind, self.status, &mut [0; 3]).into_owned(),
            error: self.error.clone(),
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
            cold_start: self.cold_start,
            logs: self.logs.clone(),
            logs_truncated: self.logs_truncated,
        }
    }
}

/// The id of the record with `(start microseconds, random part)`.
pub fn record_id((micros, random): (u64, u32)) -> String {
    crate::invoker::hex_id(&[(micros, 16), (u64::from(random), 8)])
}

/// The status of a call as records and metrics show it: the HTTP status
/// for gateway calls, ok/error for the others; written into `digits` when
/// it is three of them (no allocation on the request path).
pub fn status_label(kind: TriggerKind, status: u16, digits: &mut [u8; 3]) -> Cow<'_, str> {
    match kind {
        TriggerKind::Http if (100..1000).contains(&status) => {
            *digits = [0, 1, 2].map(|i| b'0' + (status / 10u16.pow(2 - i) % 10) as u8);
            Cow::Borrowed(std::str::from_utf8(digits).expect("ASCII digits"))
        }
        TriggerKind::Http => Cow::Owned(status.to_string()),
        _ if status < 400 => Cow::Borrowed("ok"),
        _ => Cow::Borrowed("error"),
    }
}

/// Text kept inside its owner up to [`Text::INLINE`] bytes, which names
/// (63 at most) and request ids (64) always fit; longer text on the heap.
pub enum Text {
    Inline(u8, [u8; Text::INLINE]),
    Heap(String),
}

impl Text {
    pub const INLINE: usize = 64;

    pub fn new(text: &str) -> Text {
        if text.len() <= Self::INLINE {
            let mut bytes = [0; Self::INLINE];
            bytes[..text.len()].copy_from_slice(text.as_bytes());
            Text::Inline(text.len() as u8, bytes)
        } else {
            Text::Heap(text.to_string())
        }
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).expect("copied from a str")
    }

    /// The text's bytes, for comparing without checking them again.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Text::Inline(len, bytes) => &bytes[..usize::from(*len)],
            Text::Heap(text) => text.as_bytes(),
        }
    }
}

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
            limit: settings.buffer.max(1),
            arrived: Notify::new(),
            closed: AtomicBool::new(false),
        });
        let (follow, _) = broadcast::channel(1024);
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
        tokio::spawn(prune_loop(store, settings));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_keeps_short_text_inline_and_long_text_whole() {
        for text in ["", "a", "demo-namespace", &"r".repeat(Text::INLINE)] {
            let kept = Text::new(text);
            assert!(matches!(kept, Text::Inline(..)), "{text:?} fits inline");
            assert_eq!(kept.as_str(), text);
        }
        let long = "é".repeat(Text::INLINE);
        let kept = Text::new(&long);
        assert!(matches!(kept, Text::Heap(_)));
        assert_eq!(kept.as_str(), long);
    }

    #[test]
    fn status_labels_are_the_http_status_or_ok_and_error() {
        let label = |kind, status| status_label(kind, status, &mut [0; 3]).into_owned();
        assert_eq!(label(TriggerKind::Http, 200), "200");
        assert_eq!(label(TriggerKind::Http, 504), "504");
        assert_eq!(label(TriggerKind::Http, 42), "42");
        assert_eq!(label(TriggerKind::Http, 1000), "1000");
        assert_eq!(label(TriggerKind::Cron, 200), "ok");
        assert_eq!(label(TriggerKind::Job, 500), "error");
    }

    #[test]
    fn the_writer_takes_the_oldest_records_a_batch_at_a_time() {
        let pending = Pending {
            records: Mutex::new((0..5).map(|i| queued(i, 200)).collect()),
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

    fn queued(random: u32, status: u16) -> Queued {
        Queued {
            namespace: Text::new("demo"),
            function: Text::new("hello"),
            request_id: Text::new("req-1"),
            id: (0x0123_4567_89ab_cdef, random),
            started_at: crate::store::now(),
            version: 3,
            kind: TriggerKind::Amqp,
            status,
            duration_ms: 1.5,
            error: Some("crashed".into()),
            bytes_in: 1,
            bytes_out: 2,
            cold_start: true,
            logs: vec![LogLine {
                stream: "stderr".into(),
                text: "boom\n".into(),
            }],
            logs_truncated: true,
        }
    }

    #[test]
    fn a_queued_record_becomes_the_record_with_its_id() {
        let queued = queued(0xfe, 502);
        let id = queued.id();
        assert_eq!(id, "0123456789abcdef000000fe");
        assert_eq!(queued.id_text(&mut [0; 24]), id);
        let record = queued.to_record();
        assert_eq!(
            (record.id.as_str(), record.namespace.as_str(), record.function.as_str()),
            (id.as_str(), "demo", "hello")
        );
        assert_eq!((record.trigger.as_str(), record.status.as_str()), ("amqp", "error"));
        assert_eq!(
            (record.request_id.as_str(), record.error.as_deref()),
            ("req-1", Some("crashed"))
        );
        assert_eq!(
            (record.logs.len(), record.logs_truncated, record.cold_start),
            (1, true, true)
        );
    }
}
