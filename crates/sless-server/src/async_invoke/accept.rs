//! Group commit of accepted events: callers queue an event and wait; one
//! writer task stores everything queued so far in one transaction, then
//! answers them all. While a batch is written the next one gathers, so the
//! rate is bounded by rows per transaction, not transactions per second.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{oneshot, Notify};

use crate::error::{Error, Result};
use crate::store::events::{EventStore, NewEvent};

/// Events waiting for the writer at most (each holds its caller's body).
const MAX_WAITING: usize = 20_000;
/// Events per transaction at most.
const BATCH: usize = 5_000;

/// An event waiting to be stored, and where its outcome goes.
type Waiting = (NewEvent, oneshot::Sender<Result<(), NotStored>>);

/// Why a batch of events was not stored (the error itself is logged).
#[derive(Clone, Copy)]
enum NotStored {
    StorageFull,
    Failed,
}

pub struct Acceptor {
    waiting: Mutex<Vec<Waiting>>,
    arrived: Notify,
}

impl Acceptor {
    /// Starts the writer; `written` is told after each stored batch.
    pub fn start(store: Arc<dyn EventStore>, written: Arc<Notify>) -> Arc<Acceptor> {
        let acceptor = Arc::new(Acceptor {
            waiting: Mutex::new(Vec::new()),
            arrived: Notify::new(),
        });
        tokio::spawn(write_loop(acceptor.clone(), store, written));
        acceptor
    }

    /// Returns once `event` is durably stored.
    pub async fn store(&self, event: NewEvent) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        {
            let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
            if waiting.len() >= MAX_WAITING {
                return Err(Error::Unavailable {
                    message: "too many asynchronous events are waiting to be stored; try again".into(),
                    retry_after: Some(1),
                });
            }
            waiting.push((event, tx));
        }
        self.arrived.notify_one();
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(NotStored::StorageFull)) => Err(Error::StorageFull),
            // What failed is in the server's log: a public caller learns
            // nothing of the database.
            Ok(Err(NotStored::Failed)) => Err(Error::Unavailable {
                message: "the event could not be stored; try again".into(),
                retry_after: Some(1),
            }),
            Err(_) => Err(Error::Unavailable {
                message: "the server is stopping; try again".into(),
                retry_after: Some(1),
            }),
        }
    }

    fn take(&self) -> Vec<Waiting> {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        if waiting.len() <= BATCH {
            std::mem::take(&mut *waiting)
        } else {
            waiting.drain(..BATCH).collect()
        }
    }
}

async fn write_loop(acceptor: Arc<Acceptor>, store: Arc<dyn EventStore>, written: Arc<Notify>) {
    loop {
        let batch = acceptor.take();
        if batch.is_empty() {
            acceptor.arrived.notified().await;
            continue;
        }
        let (events, replies): (Vec<NewEvent>, Vec<_>) = batch.into_iter().unzip();
        let stored = store.insert(&events).await.map_err(|e| {
            tracing::warn!(error = %e, events = events.len(), "storing asynchronous events failed");
            match e {
                Error::StorageFull => NotStored::StorageFull,
                _ => NotStored::Failed,
            }
        });
        drop(events);
        for reply in replies {
            let _ = reply.send(stored);
        }
        if stored.is_ok() {
            written.notify_one();
        }
    }
}
