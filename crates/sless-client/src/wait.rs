//! Waiting for background work to finish: a function's build, a job's run.
//! Both poll `GET` until the status says it is done: first within a few
//! milliseconds (a build without dependencies takes about ten), then less
//! and less often, up to the wait's interval.

use std::time::{Duration, Instant};

use sless_api::{Function, Job, Phase};

use crate::error::{Error, Result};
use crate::http::Client;

/// How to wait: the longest poll interval and the deadline.
#[derive(Debug, Clone, Copy)]
pub struct Wait {
    pub interval: Duration,
    pub timeout: Duration,
}

impl Wait {
    pub fn new(timeout: Duration) -> Wait {
        Wait {
            interval: Duration::from_millis(250),
            timeout,
        }
    }

    /// The pause after poll `n` (from 0): 5 ms doubling up to `interval`.
    fn pause(&self, n: u32) -> Duration {
        FIRST_POLL_PAUSE.saturating_mul(1 << n.min(16)).min(self.interval)
    }
}

/// The first pause between polls.
const FIRST_POLL_PAUSE: Duration = Duration::from_millis(5);

/// True once the build of `code_hash` has ended, Ready or Failed.
pub fn build_finished(function: &Function, code_hash: &str) -> bool {
    let status = &function.status;
    match status.phase {
        Phase::Ready => status.built_hash.as_deref() == Some(code_hash),
        Phase::Failed => status.code_hash.as_deref() == Some(code_hash),
        Phase::Pending | Phase::Building => false,
    }
}

/// True once run `run_id` (or a later one) of the job has finished.
pub fn run_finished(job: &Job, run_id: u64) -> bool {
    job.status.run_id >= run_id && job.status.phase.is_finished()
}

impl Client {
    /// Polls the function until the build of `code_hash` has ended and
    /// returns it: check `status.phase` for `Ready` or `Failed` (the build
    /// log's tail is then in `status.message`). `on_poll` sees every answer
    /// (for progress displays). A newer upload replacing `code_hash` while
    /// waiting is `Error::Superseded`.
    pub async fn wait_for_build(
        &self,
        ns: &str,
        name: &str,
        code_hash: &str,
        wait: Wait,
        mut on_poll: impl FnMut(&Function),
    ) -> Result<Function> {
        let deadline = Instant::now() + wait.timeout;
        let mut polls = 0u32;
        loop {
            let function = self.get_function(ns, name).await?;
            on_poll(&function);
            if build_finished(&function, code_hash) {
                return Ok(function);
            }
            if let Some(newer) = function.status.code_hash.as_deref() {
                if newer != code_hash {
                    return Err(Error::Superseded {
                        function: name.to_string(),
                        code_hash: code_hash.to_string(),
                        newer: newer.to_string(),
                    });
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: format!("the build of function {name:?}"),
                    secs: wait.timeout.as_secs(),
                });
            }
            tokio::time::sleep(wait.pause(polls)).await;
            polls = polls.saturating_add(1);
        }
    }

    /// Polls the job until run `run_id` (or a later one) has finished and
    /// returns it: `status.phase` is then `Succeeded`, `Failed` or `Skipped`.
    pub async fn wait_for_job(
        &self,
        ns: &str,
        name: &str,
        run_id: u64,
        wait: Wait,
        mut on_poll: impl FnMut(&Job),
    ) -> Result<Job> {
        let deadline = Instant::now() + wait.timeout;
        let mut polls = 0u32;
        loop {
            let job = self.get_job(ns, name).await?;
            on_poll(&job);
            if run_finished(&job, run_id) {
                return Ok(job);
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: format!("run {run_id} of job {name:?}"),
                    secs: wait.timeout.as_secs(),
                });
            }
            tokio::time::sleep(wait.pause(polls)).await;
            polls = polls.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_soon_then_less_often() {
        let wait = Wait::new(Duration::from_secs(60));
        let pauses: Vec<u64> = (0..8).map(|n| wait.pause(n).as_millis() as u64).collect();
        assert_eq!(pauses, [5, 10, 20, 40, 80, 160, 250, 250]);
        assert_eq!(wait.pause(u32::MAX), wait.interval);
    }
}
