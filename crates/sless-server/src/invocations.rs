//! Invocation records: written in batches by a background task, off the
//! request path. The buffer is bounded in records and in bytes; when the
//! database is slow or down, records beyond it are dropped and counted,
//! and writing resumes when it is back. No namespace fills it: one holds
//! at most [`SHARE`] times what is free, so another's records still find
//! room while one floods. Followers of a function's logs get its records as they happen
//! ([`crate::live_log`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{oneshot, Notify};

use crate::live_log::{Follow, LiveLog};
use crate::record::Queued;
use crate::store::chunks::Chunk;
use crate::store::Store;

/// How records are buffered, written and kept.
#[derive(Debug, Clone)]
pub struct LogSettings {
    /// Records waiting to be written at most; more are dropped.
    pub buffer: usize,
    /// Bytes of records waiting to be written at most ([`held_bytes`]).
    pub buffer_bytes: usize,
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
    live: Arc<LiveLog>,
    enabled: bool,
    pub dropped: AtomicU64,
    pub written: AtomicU64,
    pub write_errors: AtomicU64,
    /// The write loop, awaited by `close`.
    writer: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// How much of what is free one namespace may hold: a lone flood takes
/// at most three quarters of the buffer (`SHARE / (1 + SHARE)`), and k
/// floods together leave the others at least `1 / (1 + SHARE * k)` of it
/// (a dynamic threshold, as switches share a packet buffer between ports).
const SHARE: usize = 3;

/// Records waiting to be written: a vector the serving threads push onto
/// under a lock that is all but never contended, and that the writer swaps
/// for the emptied vector of the batch before. The same two vectors' slots
/// serve batch after batch, warm in cache; a channel would allocate and
/// free a block of slots every few dozen records on the serving thread.
struct Pending {
    queue: Mutex<Queue>,
    /// Bytes of chunks written since the last prune, and the wake-up for an early one.
    written_bytes: AtomicU64,
    prune_now: Notify,
    /// Records waiting at most; more are dropped.
    limit: usize,
    /// Bytes of records waiting at most.
    limit_bytes: usize,
    /// Wakes the writer when a record arrives to an empty queue, or the log closes.
    arrived: Notify,
    closed: AtomicBool,
}

/// The waiting records, and what they hold in all and per namespace.
#[derive(Default)]
struct Queue {
    records: Vec<Queued>,
    bytes: usize,
    /// Namespaces with records waiting (removed at none).
    held: HashMap<Box<[u8]>, Held>,
}

#[derive(Default, Clone, Copy)]
struct Held {
    records: usize,
    bytes: usize,
}

/// What a waiting record holds in memory: itself and the text it owns
/// (a handler's output is up to 64 KiB per call).
fn held_bytes(record: &Queued) -> usize {
    let heap = |text: &crate::record::Text| match text {
        crate::record::Text::Heap(text) => text.len(),
        crate::record::Text::Inline(..) => 0,
    };
    std::mem::size_of::<Queued>()
        + heap(&record.namespace)
        + heap(&record.function)
        + heap(&record.request_id)
        + record.alias.as_ref().map_or(0, |a| a.len())
        + record.error.as_ref().map_or(0, String::len)
        + record
            .logs
            .iter()
            .map(|l| std::mem::size_of::<sless_api::LogLine>() + l.stream.len() + l.text.len())
            .sum::<usize>()
}

impl Queue {
    /// Takes `record` (of `bytes`) if the buffer, and its namespace's
    /// share of what is free, have room for it; else gives it back, to be
    /// dropped once the lock is released.
    fn admit(&mut self, record: Queued, bytes: usize, limit: usize, limit_bytes: usize) -> Option<Queued> {
        let free = limit.saturating_sub(self.records.len());
        let free_bytes = limit_bytes.saturating_sub(self.bytes);
        if free == 0 || bytes > free_bytes {
            return Some(record);
        }
        let key = record.namespace.as_bytes();
        let held = self.held.get(key).copied().unwrap_or_default();
        if held.records >= SHARE.saturating_mul(free) || held.bytes + bytes > SHARE.saturating_mul(free_bytes) {
            return Some(record);
        }
        match self.held.get_mut(key) {
            Some(held) => {
                held.records += 1;
                held.bytes += bytes;
            }
            None => {
                self.held.insert(key.into(), Held { records: 1, bytes });
            }
        }
        self.bytes += bytes;
        self.records.push(record);
        None
    }

    /// Counts `taken` as no longer waiting.
    fn release(&mut self, taken: &[Queued]) {
        for record in taken {
            let bytes = held_bytes(record);
            self.bytes -= bytes;
            let key = record.namespace.as_bytes();
            if let Some(held) = self.held.get_mut(key) {
                held.records -= 1;
                held.bytes -= bytes;
                if held.records == 0 {
                    self.held.remove(key);
                }
            }
        }
    }
}

impl Pending {
    fn new(limit: usize, limit_bytes: usize) -> Pending {
        Pending {
            queue: Mutex::default(),
            written_bytes: AtomicU64::new(0),
            prune_now: Notify::new(),
            limit: limit.max(1),
            limit_bytes: limit_bytes.max(1),
            arrived: Notify::new(),
            closed: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A panic while holding the lock cannot leave the queue half-changed.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Moves up to `most` of the oldest records into the empty `into`.
    fn take(&self, into: &mut Vec<Queued>, most: usize) {
        let mut queue = self.lock();
        if queue.records.len() <= most {
            std::mem::swap(&mut queue.records, into);
            queue.bytes = 0;
            queue.held.clear();
        } else {
            into.extend(queue.records.drain(..most));
            queue.release(into);
        }
    }
}

impl InvocationLog {
    pub fn start(store: Arc<dyn Store>, settings: LogSettings) -> Arc<InvocationLog> {
        let pending = Arc::new(Pending::new(settings.buffer, settings.buffer_bytes));
        let pending_for_prune = pending.clone();
        let log = Arc::new(InvocationLog {
            pending: pending.clone(),
            live: Arc::default(),
            enabled: settings.enabled,
            dropped: AtomicU64::new(0),
            written: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            writer: Mutex::new(None),
        });
        let writer = tokio::spawn(write_loop(
            Arc::downgrade(&log),
            pending,
            Encoder::start(),
            store.clone(),
            settings.clone(),
        ));
        *log.writer.lock().unwrap_or_else(PoisonError::into_inner) = Some(writer);
        tokio::spawn(prune_loop(store, settings, pending_for_prune));
        log
    }

    /// Queues a record for writing and shows it to followers.
    pub fn record(&self, record: Queued) {
        if !self.enabled {
            return;
        }
        self.live.send(&record);
        let bytes = held_bytes(&record);
        let mut queue = self.pending.lock();
        let refused = queue.admit(record, bytes, self.pending.limit, self.pending.limit_bytes);
        let first = queue.records.len() == 1;
        drop(queue);
        if refused.is_some() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if first {
            self.pending.arrived.notify_one();
        }
    }

    /// `namespace`'s `function`'s records as they happen (a slow follower
    /// skips what it missed; other functions' records never make it).
    pub fn subscribe(&self, namespace: &str, function: &str) -> Follow {
        self.live.follow(namespace, function)
    }

    /// Ends every follow (`logs?follow=true`): the server stops.
    pub fn end_follows(&self) {
        self.live.close();
    }

    /// Records waiting to be written.
    pub fn backlog(&self) -> usize {
        self.pending.lock().records.len()
    }

    /// Writes what is queued at once and returns once it is stored; what
    /// is queued later is not written. A shutdown calls it once the calls
    /// under way have ended (the caller bounds the wait), so their records
    /// are not lost with the process.
    pub async fn close(&self) {
        self.pending.closed.store(true, Ordering::Release);
        self.pending.arrived.notify_one();
        let writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(writer) = writer {
            let _ = writer.await;
        }
    }
}

impl Drop for InvocationLog {
    /// The writer writes what is still queued, then ends.
    fn drop(&mut self) {
        self.pending.closed.store(true, Ordering::Release);
        self.pending.arrived.notify_one();
    }
}

/// A batch to encode, and where its chunks and emptied records go back.
type Job = (Vec<Queued>, oneshot::Sender<(Option<Vec<Chunk>>, Vec<Queued>)>);

/// The thread that encodes and compresses batches into chunks, the
/// CPU-heavy part of recording, at a lower priority than serving
/// ([`ENCODER_NICE`]). Ends when the writer drops it.
struct Encoder {
    jobs: std::sync::mpsc::Sender<Job>,
}

/// The encoder's nice value. On a busy machine a batch woken at nice 0
/// took the serving thread's CPU mid-burst, and the requests it was
/// driving stalled meanwhile (the machine idled 13% of the time with
/// records on against 10% off). At nice 10 it runs in the gaps and still
/// gets about a tenth of a CPU against a busy thread, some thirty times
/// what encoding 100 000 records a second takes.
const ENCODER_NICE: i32 = 10;

impl Encoder {
    fn start() -> Encoder {
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new().name("sless-records".into()).spawn(move || {
            // Linux keeps a nice value per thread: this sets this thread's.
            if let Err(e) = rustix::process::setpriority_process(None, ENCODER_NICE) {
                tracing::debug!(error = %e, "the invocation records' encoder keeps its priority");
            }
            for (batch, done) in queue {
                let chunks =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| crate::store::chunks::chunks_of(&batch)));
                let _ = done.send((chunks.ok(), batch));
            }
        });
        if let Err(e) = spawned {
            // Batches sent to no thread come back unencoded and are counted as dropped.
            tracing::error!(error = %e, "starting the invocation records' encoder failed");
        }
        Encoder { jobs }
    }

    /// The batch's chunks (`None`: encoding failed), and its records back.
    async fn encode(&self, batch: Vec<Queued>) -> (Option<Vec<Chunk>>, Vec<Queued>) {
        let (done, result) = oneshot::channel();
        if let Err(std::sync::mpsc::SendError((batch, _))) = self.jobs.send((batch, done)) {
            return (None, batch);
        }
        result.await.unwrap_or_else(|_| (None, Vec::new()))
    }
}

async fn write_loop(
    log: std::sync::Weak<InvocationLog>,
    pending: Arc<Pending>,
    encoder: Encoder,
    store: Arc<dyn Store>,
    settings: LogSettings,
) {
    let mut batch: Vec<Queued> = Vec::new();
    loop {
        let waiting = pending.lock().records.len();
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
        // thread of its own it leaves the threads serving requests alone
        // (with one serving thread it would otherwise take from every
        // request). The records come back to be dropped here, on the thread
        // that made them, so their memory never crosses threads.
        let written = batch.len() as u64;
        let (chunks, mut records) = encoder.encode(std::mem::take(&mut batch)).await;
        records.clear();
        // A burst may have grown the vector far past a batch: give that back.
        records.shrink_to(settings.batch);
        batch = records;
        let Some(chunks) = chunks else {
            tracing::error!(records = written, "encoding invocation records failed; dropping them");
            if let Some(log) = log.upgrade() {
                log.dropped.fetch_add(written, Ordering::Relaxed);
            }
            continue;
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
    use sless_api::LogLine;
    use tokio::sync::broadcast;

    use super::*;

    #[test]
    fn the_writer_takes_the_oldest_records_a_batch_at_a_time() {
        let pending = Pending::new(10, usize::MAX);
        for i in 0..5 {
            let record = crate::record::sample(i, 200);
            let bytes = held_bytes(&record);
            assert!(pending.lock().admit(record, bytes, 10, usize::MAX).is_none());
        }
        let ids = |records: &[Queued]| records.iter().map(|r| r.id.1).collect::<Vec<_>>();
        let mut batch = Vec::new();
        pending.take(&mut batch, 3);
        assert_eq!(ids(&batch), [0, 1, 2]);
        batch.clear();
        pending.take(&mut batch, 3);
        assert_eq!(ids(&batch), [3, 4]);
        assert!(pending.lock().records.is_empty());
    }

    /// A log whose writer never runs: what is recorded stays queued.
    fn stalled_log(limit: usize, limit_bytes: usize) -> InvocationLog {
        InvocationLog {
            pending: Arc::new(Pending::new(limit, limit_bytes)),
            live: Arc::default(),
            enabled: true,
            dropped: AtomicU64::new(0),
            written: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            writer: Mutex::new(None),
        }
    }

    fn in_namespace(namespace: &str, random: u32, output: usize) -> Queued {
        let mut record = crate::record::sample(random, 200);
        record.namespace = crate::record::Text::new(namespace);
        record.logs = vec![LogLine {
            stream: "stdout".into(),
            text: "x".repeat(output),
        }];
        record
    }

    /// What each namespace has waiting, as the queue counts it and as its
    /// records add up.
    fn waiting(log: &InvocationLog, namespace: &str) -> (usize, usize) {
        let queue = log.pending.lock();
        let records: Vec<&Queued> = queue
            .records
            .iter()
            .filter(|r| r.namespace.as_str() == namespace)
            .collect();
        let held = queue.held.get(namespace.as_bytes()).copied().unwrap_or_default();
        assert_eq!(held.records, records.len());
        assert_eq!(held.bytes, records.iter().map(|r| held_bytes(r)).sum::<usize>());
        (held.records, held.bytes)
    }

    /// While the database is down, one namespace's flood takes three
    /// quarters of the buffer and no more: another's records still get in.
    #[test]
    fn a_flood_leaves_room_in_the_buffer_for_other_namespaces() {
        let log = stalled_log(100, usize::MAX);
        for i in 0..1000 {
            log.record(in_namespace("flood", i, 10));
        }
        assert_eq!(waiting(&log, "flood").0, 75);
        for i in 0..10 {
            log.record(in_namespace("quiet", i, 10));
        }
        assert_eq!(waiting(&log, "quiet").0, 10);
        // A second flood takes its share of what is left (o < 3 * (15 - o)),
        // and some is still free.
        for i in 0..1000 {
            log.record(in_namespace("other", i, 10));
        }
        assert_eq!(waiting(&log, "other").0, 12);
        assert_eq!(log.dropped.load(Ordering::Relaxed), (1000 - 75) + (1000 - 12));
        // Taking a batch counts its records as gone, namespace by namespace.
        let mut batch = Vec::new();
        log.pending.take(&mut batch, 80);
        assert_eq!(waiting(&log, "flood").0, 0);
        assert!(!log.pending.lock().held.contains_key(b"flood".as_slice()));
        assert_eq!(waiting(&log, "quiet").0, 5);
        let expected = waiting(&log, "quiet").1 + waiting(&log, "other").1;
        assert_eq!(log.pending.lock().bytes, expected);
        batch.clear();
        log.pending.take(&mut batch, 80);
        let queue = log.pending.lock();
        assert_eq!((queue.records.len(), queue.bytes, queue.held.len()), (0, 0, 0));
    }

    /// Records are bounded in bytes too: a handler's 64 KiB of output per
    /// call fills a byte budget long before the record count.
    #[test]
    fn a_flood_of_large_output_is_bounded_in_bytes() {
        let budget = 4 << 20;
        let log = stalled_log(100_000, budget);
        for i in 0..1000 {
            log.record(in_namespace("loud", i, 64 * 1024));
        }
        let (records, bytes) = waiting(&log, "loud");
        // Three quarters, give or take the last record let in.
        assert!(
            bytes <= budget * 3 / 4 + held_bytes(&in_namespace("loud", 0, 64 * 1024)),
            "{bytes}"
        );
        assert!(records > 30 && records < 50, "{records}");
        for i in 0..100 {
            log.record(in_namespace("quiet", i, 100));
        }
        assert_eq!(waiting(&log, "quiet").0, 100);
        assert!(log.pending.lock().bytes <= budget);
    }

    /// Small batches written at once, kept long: what these tests need.
    fn small_settings(leading: tokio::sync::watch::Receiver<bool>) -> LogSettings {
        LogSettings {
            buffer: 100,
            buffer_bytes: 1 << 30,
            batch: 10,
            flush_interval: Duration::from_millis(1),
            retention: Duration::from_secs(3600),
            keep: 1000,
            keep_per_function: 1000,
            max_bytes: 1 << 30,
            enabled: true,
            leading,
        }
    }

    /// Another namespace's flood, far past a channel's capacity, between
    /// two calls of a followed function: its follower, reading as the log
    /// handler does (skipping on `Lagged`), still gets both.
    #[tokio::test]
    async fn a_flood_in_another_namespace_makes_a_follower_skip_nothing() {
        let (store, dir) = crate::store::open_in_temp("follow").await;
        let (_leader, leading) = tokio::sync::watch::channel(true);
        let settings = small_settings(leading);
        let log = InvocationLog::start(store, settings);
        let record = |namespace: &str, function: &str, random| Queued {
            namespace: crate::record::Text::new(namespace),
            function: crate::record::Text::new(function),
            ..crate::record::sample(random, 200)
        };
        let mut follow = log.subscribe("a", "quiet");
        let mut flooding = log.subscribe("b", "noisy");
        log.record(record("a", "quiet", 0));
        for i in 1..=3000 {
            log.record(record("b", "noisy", i));
        }
        log.record(record("a", "quiet", 3001));
        let (mut got, mut foreign, mut lagged) = (Vec::new(), 0, 0);
        while let Ok(received) = tokio::time::timeout(Duration::from_millis(100), follow.recv()).await {
            match received {
                Ok(r) if (r.namespace.as_str(), r.function.as_str()) == ("a", "quiet") => got.push(r.id.clone()),
                Ok(_) => foreign += 1,
                Err(broadcast::error::RecvError::Lagged(n)) => lagged += n,
                Err(broadcast::error::RecvError::Closed) => break,
            }
        }
        let expected = [record("a", "quiet", 0).id(), record("a", "quiet", 3001).id()];
        assert_eq!(got, expected, "skipped {lagged} records");
        assert_eq!((foreign, lagged), (0, 0));
        // The flood's own follower fell behind: it skips, as ever.
        assert!(matches!(
            flooding.recv().await,
            Err(broadcast::error::RecvError::Lagged(_))
        ));
        drop((follow, flooding, log));
        // The writer may still be writing the last batch.
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The nice value of this process's thread named `name`, if there is one.
    fn nice_of_thread(name: &str) -> Option<i32> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .flatten()
            .find_map(|task| {
                let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
                let (head, rest) = stat.rsplit_once(')')?;
                (head.split_once('(')?.1 == name).then(|| rest.split_whitespace().nth(16)?.parse().ok())?
            })
    }

    #[tokio::test]
    async fn records_are_encoded_on_a_thread_below_the_serving_ones() {
        let (store, dir) = crate::store::open_in_temp("log").await;
        let (_leader, leading) = tokio::sync::watch::channel(true);
        let settings = small_settings(leading);
        let log = InvocationLog::start(store.clone(), settings);
        for i in 0..3 {
            log.record(crate::record::sample(i, 200));
        }
        for _ in 0..500 {
            if log.written.load(Ordering::Relaxed) == 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(log.written.load(Ordering::Relaxed), 3);
        assert_eq!(
            store
                .list_invocations("demo", "hello", None, 10, usize::MAX)
                .await
                .unwrap()
                .items
                .len(),
            3
        );
        assert_eq!(nice_of_thread("sless-records"), Some(ENCODER_NICE));
        // Dropping the log ends the writer, and the writer's end the encoder.
        drop(log);
        for _ in 0..500 {
            if nice_of_thread("sless-records").is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(nice_of_thread("sless-records"), None, "the encoder ended");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
