//! How much of instances' output outside any call reaches the server's log:
//! raw writes to their stderr, and what a handler's own thread prints
//! between calls. A call's output goes to its invocation record, bounded
//! there; this output has no record, so without a budget one tenant's loop
//! printing to stderr writes tens of megabytes a second into the operator's
//! log (and costs the server a core to format it). Each instance has a
//! budget of its own, and all instances share the server's, so neither one
//! instance nor a tenant's hundreds fill the log; what is over budget is
//! dropped and counted, and the next line that fits says how much went.

use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::Instant;

/// An instance's budget: bytes a second, and the most it can save up.
const INSTANCE_RATE: f64 = 16.0 * 1024.0;
const INSTANCE_BURST: f64 = 64.0 * 1024.0;
/// All instances' together.
const SERVER_RATE: f64 = 256.0 * 1024.0;
const SERVER_BURST: f64 = 1024.0 * 1024.0;
/// What a line costs besides its text: the log line's own fields.
const LINE_COST: usize = 64;

static SERVER: LazyLock<Mutex<Bucket>> = LazyLock::new(|| Mutex::new(Bucket::new(SERVER_RATE, SERVER_BURST)));

/// A token bucket of bytes.
struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(rate: f64, burst: f64) -> Self {
        Self {
            rate,
            burst,
            tokens: burst,
            at: Instant::now(),
        }
    }

    fn refill(&mut self, now: Instant) {
        let saved = now.saturating_duration_since(self.at).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + saved).min(self.burst);
        self.at = now;
    }
}

/// One instance's share of the server's log.
pub struct LogBudget {
    own: Mutex<Dropping>,
}

struct Dropping {
    bucket: Bucket,
    /// Lines dropped since the last one logged.
    lines: u64,
}

/// What to do with a line of output.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// Log it, after saying that this many lines before it were dropped.
    Log {
        dropped_before: u64,
    },
    Drop,
}

impl Default for LogBudget {
    fn default() -> Self {
        Self::new(Bucket::new(INSTANCE_RATE, INSTANCE_BURST))
    }
}

impl LogBudget {
    fn new(bucket: Bucket) -> Self {
        Self {
            own: Mutex::new(Dropping { bucket, lines: 0 }),
        }
    }

    /// Whether a line of `len` bytes may be logged now.
    pub fn admit(&self, len: usize) -> Verdict {
        self.admit_within(len, &SERVER, Instant::now())
    }

    fn admit_within(&self, len: usize, server: &Mutex<Bucket>, now: Instant) -> Verdict {
        let cost = (len + LINE_COST) as f64;
        let mut own = self.own.lock().unwrap_or_else(PoisonError::into_inner);
        own.bucket.refill(now);
        if own.bucket.tokens >= cost {
            let mut server = server.lock().unwrap_or_else(PoisonError::into_inner);
            server.refill(now);
            if server.tokens >= cost {
                server.tokens -= cost;
                own.bucket.tokens -= cost;
                return Verdict::Log {
                    dropped_before: std::mem::take(&mut own.lines),
                };
            }
        }
        own.lines += 1;
        Verdict::Drop
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn budget(rate: f64, burst: f64) -> LogBudget {
        LogBudget::new(Bucket::new(rate, burst))
    }

    #[test]
    fn a_flood_gets_its_burst_then_its_rate_and_the_next_line_counts_what_went() {
        let server = Mutex::new(Bucket::new(1e9, 1e9));
        let own = budget(10_000.0, 20_000.0);
        let start = Instant::now();
        let logged = (0..1000)
            .filter(|_| own.admit_within(936, &server, start) != Verdict::Drop)
            .count();
        assert_eq!(logged, 20, "the burst: 20 lines of 1000 bytes with their cost");
        // A second later, ten more lines' worth; the first says 980 went.
        let later = start + Duration::from_secs(1);
        assert_eq!(
            own.admit_within(936, &server, later),
            Verdict::Log { dropped_before: 980 }
        );
        let more = (0..100)
            .filter(|_| own.admit_within(936, &server, later) != Verdict::Drop)
            .count();
        assert_eq!(more, 9);
    }

    #[test]
    fn instances_share_the_servers_budget() {
        let server = Mutex::new(Bucket::new(1.0, 10_000.0));
        let now = Instant::now();
        let (a, b) = (budget(1e9, 1e9), budget(1e9, 1e9));
        let logged = |who: &LogBudget| {
            (0..100)
                .filter(|_| who.admit_within(936, &server, now) != Verdict::Drop)
                .count()
        };
        assert_eq!(logged(&a) + logged(&b), 10, "ten lines of the server's budget in all");
    }
}
