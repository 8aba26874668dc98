//! Pre-started generic interpreters: a cold start takes one of these and
//! only loads the handler into it. One pool for Python; for Node one per
//! memory class in use, as V8 sizes its heap when node starts
//! ([`super::launcher::node_heap_mb`]).
//!
//! Shims are started by the pool's own tasks, never by a request: enough
//! to keep `target` ready, plus one for each cold start that found none.
//! A cold start that waits takes the first shim to become ready, whichever
//! start made it, so it never waits for a start it does not need (nor for
//! one that a refill began before it came). A shim taken from the ready
//! ones is replaced once it has loaded its handler, so that the new start
//! does not take CPU from the load a deploy or a call waits for (and,
//! while another shim is ready, once it has answered its first call:
//! `pool::load_instance`). At most
//! `parallel` starts run at once: each new interpreter costs its start-up
//! CPU, and on a busy machine starting everything at once would make the
//! first ready shim come last; forks of the Python zygote cost little CPU,
//! and more of them run at once.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sless_api::Runtime;
use tokio::sync::oneshot;

use super::launcher::{node_heap_mb, node_memory_class, Launcher, NodeStart};
use super::process::ShimProcess;

type Handoff = oneshot::Sender<Result<Arc<ShimProcess>, String>>;

/// The warm pools of a server: Python's, and Node's by memory class.
pub struct WarmPools {
    target: usize,
    launcher: Arc<Launcher>,
    python: Arc<WarmPool>,
    node: Mutex<HashMap<u32, Arc<WarmPool>>>,
}

impl WarmPools {
    /// Starts Python's pool and Node's for the default `memory_mb`; other
    /// Node classes start with the first function of theirs.
    pub fn start(target: usize, launcher: Arc<Launcher>) -> WarmPools {
        let pools = WarmPools {
            target,
            python: WarmPool::start(Runtime::Python311, target, launcher.clone(), None),
            launcher,
            node: Mutex::new(HashMap::new()),
        };
        pools.for_function(Runtime::Nodejs20, sless_api::default_memory_mb());
        pools
    }

    /// The pool a function of `runtime` and `memory_mb` takes its shims
    /// from. Node classes no function holds any more (and not the default)
    /// are stopped here, so their shims do not wait for nothing.
    pub fn for_function(&self, runtime: Runtime, memory_mb: u32) -> Arc<WarmPool> {
        if runtime == Runtime::Python311 {
            return self.python.clone();
        }
        let class = node_memory_class(memory_mb);
        let default = node_memory_class(sless_api::default_memory_mb());
        let mut node = self.node.lock().unwrap();
        node.retain(|&other, pool| {
            let held = other == default || other == class || Arc::strong_count(pool) > 1;
            if !held {
                pool.stop();
            }
            held
        });
        node.entry(class)
            .or_insert_with(|| WarmPool::start(runtime, self.target, self.launcher.clone(), Some(node_heap_mb(class))))
            .clone()
    }

    pub fn stop(&self) {
        self.python.stop();
        for pool in self.node.lock().unwrap().values() {
            pool.stop();
        }
    }
}

/// Warm shims of one runtime (and one Node memory class), refilled in the
/// background.
pub struct WarmPool {
    runtime: Runtime,
    /// The heap its Node shims start with.
    node_heap_mb: Option<u32>,
    /// How its Node shims start, once their snapshot is made (or failed);
    /// forgotten when a start from it fails, so the next one makes it again
    /// (node may have been upgraded under a running server, and a snapshot
    /// of another node is refused).
    node_start: tokio::sync::Mutex<Option<NodeStart>>,
    target: usize,
    parallel: usize,
    launcher: Arc<Launcher>,
    state: Mutex<WarmState>,
    stopped: AtomicBool,
}

#[derive(Default)]
struct WarmState {
    ready: VecDeque<Arc<ShimProcess>>,
    /// Cold starts waiting for a shim, oldest first.
    waiters: VecDeque<Handoff>,
    /// Starts under way.
    starting: usize,
    /// Failed starts in a row (the next start waits longer).
    failures: u32,
}

impl WarmPool {
    pub fn start(runtime: Runtime, target: usize, launcher: Arc<Launcher>, node_heap_mb: Option<u32>) -> Arc<WarmPool> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        // A fork of the zygote costs little CPU but waits, mostly for the
        // kernel (its move into its control groups waits for an RCU grace
        // period, which starts side by side share): many at once.
        let per_cpu = if launcher.forks(runtime) { 8 } else { 2 };
        let pool = Arc::new(WarmPool {
            runtime,
            node_heap_mb,
            node_start: tokio::sync::Mutex::new(None),
            target,
            parallel: (per_cpu * cpus).max(2),
            launcher,
            state: Mutex::new(WarmState::default()),
            stopped: AtomicBool::new(false),
        });
        pool.refill();
        pool
    }

    /// A warm shim: one that is ready, else the next one to become ready.
    /// The pool refills when the returned [`Refill`] drops: a shim taken
    /// from the ready ones is loaded before its replacement starts (and
    /// takes CPU from it); a waiter's shim is started at once.
    pub async fn take(self: &Arc<Self>) -> Result<(Arc<ShimProcess>, Refill), String> {
        let handed = {
            let mut st = self.state.lock().unwrap();
            st.ready.retain(|p| p.is_alive());
            match st.ready.pop_front() {
                Some(process) => Ok(process),
                None => {
                    let (tx, rx) = oneshot::channel();
                    st.waiters.push_back(tx);
                    Err(rx)
                }
            }
        };
        let refill = Refill(self.clone());
        match handed {
            Ok(process) => Ok((process, refill)),
            Err(rx) => {
                self.refill();
                tracing::debug!(runtime = %self.runtime, "no warm instance ready; waiting for the next");
                let process = rx.await.unwrap_or_else(|_| Err("the warm pool stopped".into()))?;
                Ok((process, refill))
            }
        }
    }

    /// Whether a shim is ready to be taken now.
    pub fn has_ready(&self) -> bool {
        self.state.lock().unwrap().ready.iter().any(|p| p.is_alive())
    }

    /// Begins the starts that the ready shims and the waiters call for.
    fn refill(self: &Arc<Self>) {
        if self.stopped.load(Ordering::SeqCst) {
            return;
        }
        let mut st = self.state.lock().unwrap();
        st.waiters.retain(|w| !w.is_closed());
        let wanted = (self.target + st.waiters.len()).saturating_sub(st.ready.len() + st.starting);
        let room = self.parallel.saturating_sub(st.starting);
        // Started while cold starts wait, a shim is most likely taken the
        // moment it says HELLO: it need not rehearse (ForkRequest::awaited).
        let awaited = !st.waiters.is_empty();
        for _ in 0..wanted.min(room) {
            st.starting += 1;
            tokio::spawn(self.clone().start_one(awaited));
        }
    }

    async fn start_one(self: Arc<Self>, awaited: bool) {
        let node = match self.node_heap_mb {
            Some(heap_mb) => Some(self.node_start(heap_mb).await),
            None => None,
        };
        let result = self.launcher.spawn_generic(self.runtime, awaited, node.as_ref()).await;
        if result.is_err() && node.is_some_and(|start| start.snapshot.is_some()) {
            *self.node_start.lock().await = None;
        }
        let backoff = {
            let mut st = self.state.lock().unwrap();
            match result {
                Ok(process) => {
                    st.failures = 0;
                    st.starting -= 1;
                    if self.stopped.load(Ordering::SeqCst) {
                        process.kill();
                    } else {
                        hand_over(&mut st, process);
                    }
                    None
                }
                Err(error) => {
                    st.failures += 1;
                    tracing::warn!(runtime = %self.runtime, %error, "starting a warm instance failed");
                    // The oldest waiter learns why (it would fail alike).
                    while let Some(waiter) = st.waiters.pop_front() {
                        if waiter.send(Err(error.clone())).is_ok() {
                            break;
                        }
                    }
                    Some(Duration::from_millis(100u64 << st.failures.min(7)))
                }
            }
        };
        if let Some(backoff) = backoff {
            // Still counted as starting: failures do not multiply starts.
            tokio::time::sleep(backoff).await;
            self.state.lock().unwrap().starting -= 1;
        }
        self.refill();
    }

    /// Its Node shims' start: from a snapshot of their heap, else (it
    /// could not be made) from the shim's file, each start paying for
    /// compiling node's own modules; forks of the Node zygote need none.
    /// Made by the first start that needs it while the others wait.
    async fn node_start(&self, heap_mb: u32) -> NodeStart {
        let mut start = self.node_start.lock().await;
        if start.is_none() {
            *start = Some(self.make_node_start(heap_mb).await);
        }
        start.clone().expect("made above")
    }

    async fn make_node_start(&self, heap_mb: u32) -> NodeStart {
        if self.launcher.forks(Runtime::Nodejs20) {
            return NodeStart {
                heap_mb,
                snapshot: None,
            };
        }
        let snapshot = self
            .launcher
            .node_snapshot(heap_mb)
            .await
            .inspect_err(
                |error| tracing::warn!(%error, "Node shims start without a snapshot (about 9 ms more CPU each)"),
            )
            .ok();
        NodeStart { heap_mb, snapshot }
    }

    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let mut st = self.state.lock().unwrap();
        for p in st.ready.drain(..) {
            p.kill();
        }
        st.waiters.clear();
    }
}

/// Refills its pool when dropped (see [`WarmPool::take`]).
pub struct Refill(Arc<WarmPool>);

impl Drop for Refill {
    fn drop(&mut self) {
        // Outside the runtime (a server shutting down) nothing refills.
        if tokio::runtime::Handle::try_current().is_ok() {
            self.0.refill();
        }
    }
}

/// Gives a new shim to the oldest waiter still waiting, else keeps it ready.
fn hand_over(st: &mut WarmState, mut process: Arc<ShimProcess>) {
    while let Some(waiter) = st.waiters.pop_front() {
        // A waiter that gave up hands the shim back.
        match waiter.send(Ok(process)) {
            Ok(()) => return,
            Err(returned) => match returned {
                Ok(back) => process = back,
                Err(_) => return,
            },
        }
    }
    st.ready.push_back(process);
}
