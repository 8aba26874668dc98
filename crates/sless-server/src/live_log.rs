//! Live logs: each followed function's invocation records as they happen,
//! for `logs?follow=true`. Every followed function has a broadcast channel
//! of its own, so a flood of calls in one namespace never makes the
//! followers of another's functions fall behind and skip their lines. A
//! channel lives while a follower holds it, so there are never more than
//! follow streams open (32 per namespace); with none open, a record costs
//! one relaxed atomic load. A stopping server ends every follow at once
//! ([`LiveLog::close`]): a live tail has nothing to drain, and one left
//! open held the shutdown for its whole grace period.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use sless_api::InvocationRecord;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, watch};

use crate::record::Queued;

/// Records of its function a follower may fall behind by before it skips.
const CAPACITY: usize = 1024;

type Sender = broadcast::Sender<Arc<InvocationRecord>>;

/// Namespace, then function: looked up by `&str` without allocating.
type Channels = HashMap<String, HashMap<String, Sender>>;

/// The channels of the functions being followed.
pub struct LiveLog {
    /// A function's channel is here while a [`Follow`] holds its receiver.
    channels: Mutex<Channels>,
    /// Follows open: with none, [`LiveLog::send`] returns after one load.
    open: AtomicUsize,
    /// True once the server stops: every follow ends.
    closed: watch::Sender<bool>,
}

impl Default for LiveLog {
    fn default() -> Self {
        LiveLog {
            channels: Mutex::default(),
            open: AtomicUsize::new(0),
            closed: watch::Sender::new(false),
        }
    }
}

impl LiveLog {
    fn lock(&self) -> MutexGuard<'_, Channels> {
        // A panic while holding the lock cannot leave the maps half-changed.
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The records of `namespace`'s `function` from now on.
    pub fn follow(self: &Arc<Self>, namespace: &str, function: &str) -> Follow {
        let mut channels = self.lock();
        let receiver = channels
            .entry(namespace.to_string())
            .or_default()
            .entry(function.to_string())
            .or_insert_with(|| broadcast::channel(CAPACITY).0)
            .subscribe();
        self.open.fetch_add(1, Ordering::Relaxed);
        Follow {
            live: self.clone(),
            namespace: namespace.to_string(),
            function: function.to_string(),
            receiver: Some(receiver),
            closed: self.closed.subscribe(),
        }
    }

    /// Ends every follow, open or opened from now on (the server stops).
    pub fn close(&self) {
        self.closed.send_replace(true);
    }

    /// Shows `record` to its function's followers, if it has any.
    #[inline]
    pub fn send(&self, record: &Queued) {
        if self.open.load(Ordering::Relaxed) > 0 {
            self.send_followed(record);
        }
    }

    fn send_followed(&self, record: &Queued) {
        let sender = self
            .lock()
            .get(record.namespace.as_str())
            .and_then(|functions| functions.get(record.function.as_str()))
            .cloned();
        // Converted outside the lock: it copies the record's output.
        if let Some(sender) = sender {
            let _ = sender.send(Arc::new(record.to_record()));
        }
    }

    /// Functions with a channel.
    #[cfg(test)]
    fn followed(&self) -> usize {
        self.lock().values().map(HashMap::len).sum()
    }
}

/// One follower of a function's records. Its function's channel goes with
/// the last of them.
pub struct Follow {
    live: Arc<LiveLog>,
    namespace: String,
    function: String,
    /// Taken only when dropped.
    receiver: Option<broadcast::Receiver<Arc<InvocationRecord>>>,
    /// The log's [`LiveLog::close`].
    closed: watch::Receiver<bool>,
}

impl Follow {
    /// The function's next record; `Lagged` when this follower fell more
    /// than [`CAPACITY`] of them behind (it then skipped the oldest).
    /// `Closed` once the log is closed.
    pub async fn recv(&mut self) -> Result<Arc<InvocationRecord>, RecvError> {
        let Some(receiver) = &mut self.receiver else {
            return Err(RecvError::Closed);
        };
        tokio::select! {
            biased;
            _ = self.closed.wait_for(|closed| *closed) => Err(RecvError::Closed),
            received = receiver.recv() => received,
        }
    }
}

impl Drop for Follow {
    fn drop(&mut self) {
        let mut channels = self.live.lock();
        // Dropped under the lock, so that of two last followers dropped at
        // once, the second sees the first gone and removes the channel.
        drop(self.receiver.take());
        self.live.open.fetch_sub(1, Ordering::Relaxed);
        let Some(functions) = channels.get_mut(&self.namespace) else {
            return;
        };
        if functions.get(&self.function).is_some_and(|s| s.receiver_count() == 0) {
            functions.remove(&self.function);
            if functions.is_empty() {
                channels.remove(&self.namespace);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Text;

    fn record(namespace: &str, function: &str, random: u32) -> Queued {
        Queued {
            namespace: Text::new(namespace),
            function: Text::new(function),
            ..crate::record::sample(random, 200)
        }
    }

    #[tokio::test]
    async fn a_follower_gets_its_functions_records_only() {
        let live = Arc::new(LiveLog::default());
        let mut follow = live.follow("a", "quiet");
        live.send(&record("a", "other", 1));
        live.send(&record("b", "quiet", 2));
        live.send(&record("a", "quiet", 3));
        let got = follow.recv().await.unwrap();
        assert_eq!((got.namespace.as_str(), got.function.as_str()), ("a", "quiet"));
        assert_eq!(got.id, record("a", "quiet", 3).id());
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), follow.recv())
                .await
                .is_err(),
            "nothing else"
        );
    }

    #[test]
    fn a_functions_channel_goes_with_its_last_follower() {
        let live = Arc::new(LiveLog::default());
        let first = live.follow("a", "quiet");
        let second = live.follow("a", "quiet");
        let other = live.follow("b", "noisy");
        assert_eq!((live.followed(), live.open.load(Ordering::Relaxed)), (2, 3));
        drop(first);
        assert_eq!(live.followed(), 2, "a follower of a/quiet is left");
        drop(second);
        drop(other);
        assert_eq!((live.followed(), live.open.load(Ordering::Relaxed)), (0, 0));
        assert!(live.lock().is_empty(), "no namespace left behind");
        // Unfollowed records cost nothing and leave nothing.
        live.send(&record("a", "quiet", 1));
        assert!(live.lock().is_empty());
    }
}
