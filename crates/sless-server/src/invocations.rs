//! Invocation records: written in batches by a background task, off the
//! request path. The buffer is bounded; when the database is slow or down,
//! records beyond it are dropped and counted, and writing resumes when it
//! is back. Followers of a function's logs get records as they happen.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sless_api::{InvocationRecord, LogLine};
use tokio::sync::{broadcast, mpsc};

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
        crate::invoker::hex_id(&[(self.id.0, 16), (u64::from(self.id.1), 8)])
    }

    /// The record, for followers (the queued one stays to be written).
    pub fn to_record(&self) -> InvocationRecord {
        self.record_with(self.error.clone(), self.logs.clone())
    }

    /// The record, taking the error and logs along.
    pub fn into_record(mut self) -> InvocationRecord {
        let (error, logs) = (self.error.take(), std::mem::take(&mut self.logs));
        self.record_with(error, logs)
    }

    fn record_with(&self, error: Option<String>, logs: Vec<LogLine>) -> InvocationRecord {
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
            error,
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
            cold_start: self.cold_start,
            logs,
            logs_truncated: self.logs_truncated,
        }
    }
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
        match self {
            Text::Inline(len, bytes) => std::str::from_utf8(&bytes[..usize::from(*len)]).expect("copied from a str"),
            Text::Heap(text) => text,
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
    tx: mpsc::Sender<Queued>,
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
    pub fn record(&self, record: Queued) {
        if !self.enabled {
            return;
        }
        if self.follow.receiver_count() > 0 {
            let _ = self.follow.send(Arc::new(record.to_record()));
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
    mut rx: mpsc::Receiver<Queued>,
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
        // Making the records, encoding and compressing them is the
        // CPU-heavy part: on a blocking thread it leaves the threads serving
        // requests alone (with one serving thread it would otherwise take
        // from every request). The records are made and dropped there, so
        // their memory never crosses threads.
        let written = batch.len() as u64;
        let encoded = tokio::task::spawn_blocking(move || {
            let records: Vec<InvocationRecord> = batch.drain(..).map(Queued::into_record).collect();
            (crate::store::chunks::chunks_of(&records), batch)
        })
        .await;
        let chunks = match encoded {
            Ok((chunks, emptied)) => {
                batch = emptied;
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
    fn a_queued_record_becomes_the_record_with_its_id() {
        let queued = Queued {
            namespace: Text::new("demo"),
            function: Text::new("hello"),
            request_id: Text::new("req-1"),
            id: (0x0123_4567_89ab_cdef, 0xfe),
            started_at: crate::store::now(),
            version: 3,
            kind: TriggerKind::Amqp,
            status: 502,
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
        };
        let id = queued.id();
        assert_eq!(id, "0123456789abcdef000000fe");
        let followed = queued.to_record();
        let written = queued.into_record();
        assert_eq!(
            serde_json::to_value(&followed).unwrap(),
            serde_json::to_value(&written).unwrap()
        );
        assert_eq!(
            (
                written.id.as_str(),
                written.namespace.as_str(),
                written.function.as_str()
            ),
            (id.as_str(), "demo", "hello")
        );
        assert_eq!((written.trigger.as_str(), written.status.as_str()), ("amqp", "error"));
        assert_eq!(
            (written.request_id.as_str(), written.error.as_deref()),
            ("req-1", Some("crashed"))
        );
        assert_eq!(
            (written.logs.len(), written.logs_truncated, written.cold_start),
            (1, true, true)
        );
    }
}
