//! Pre-started generic interpreters, one small pool per runtime: a cold start
//! takes one of these and only loads the handler into it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use sless_api::Runtime;
use tokio::sync::Notify;

use super::launcher::Launcher;
use super::process::ShimProcess;

/// Warm shims of one runtime, refilled in the background.
pub struct WarmPool {
    runtime: Runtime,
    target: usize,
    ready: Mutex<VecDeque<Arc<ShimProcess>>>,
    refill: Notify,
    stopped: std::sync::atomic::AtomicBool,
}

impl WarmPool {
    pub fn start(runtime: Runtime, target: usize, launcher: Arc<Launcher>) -> Arc<WarmPool> {
        let pool = Arc::new(WarmPool {
            runtime,
            target,
            ready: Mutex::new(VecDeque::new()),
            refill: Notify::new(),
            stopped: std::sync::atomic::AtomicBool::new(false),
        });
        let this = pool.clone();
        tokio::spawn(async move {
            let pool = this;
            let mut failures = 0u32;
            loop {
                if pool.stopped.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                let missing = {
                    let mut ready = pool.ready.lock().unwrap();
                    ready.retain(|p| p.is_alive());
                    pool.target.saturating_sub(ready.len())
                };
                if missing == 0 {
                    pool.refill.notified().await;
                    continue;
                }
                match launcher.spawn_generic(runtime).await {
                    Ok(process) => {
                        failures = 0;
                        pool.ready.lock().unwrap().push_back(process);
                    }
                    Err(e) => {
                        failures += 1;
                        tracing::warn!(runtime = %runtime, error = %e, "starting a warm instance failed");
                        let backoff = 100u64 << failures.min(7);
                        tokio::time::sleep(std::time::Duration::from_millis(backoff)).await;
                    }
                }
            }
        });
        pool
    }

    /// A warm shim if one is ready.
    pub fn take(&self) -> Option<Arc<ShimProcess>> {
        let process = {
            let mut ready = self.ready.lock().unwrap();
            loop {
                match ready.pop_front() {
                    Some(p) if p.is_alive() => break Some(p),
                    Some(_) => continue,
                    None => break None,
                }
            }
        };
        self.refill.notify_one();
        if process.is_none() {
            tracing::debug!(runtime = %self.runtime, "no warm instance ready");
        }
        process
    }

    pub fn stop(&self) {
        self.stopped.store(true, std::sync::atomic::Ordering::SeqCst);
        self.refill.notify_one();
        for p in self.ready.lock().unwrap().drain(..) {
            p.kill();
        }
    }
}
