//! `sless instance serve`: the shim loaded, frames over TCP. Each
//! connection opens with a HELLO naming the function and version (a
//! gateway checks it is talking to the version it wants), then carries
//! INVOKE frames in and LOG + OUTPUT (or ERROR) frames out, multiplexed by
//! the gateway's ids.
//!
//! A serving pod's shim takes the connections itself (LOAD `serve`,
//! runtimes/PROTOCOL.md): a call's frames cross one process, not two, which
//! is what makes a pod's warm throughput close to the local driver's. This
//! process binds the port, hands the shim the socket and [`supervise`]s it:
//! readiness, the shim's end (a timeout or a crash: exit 1, the pod
//! restarts it), SIGTERM (the pod deleted or rolled: not ready any more,
//! calls in flight and those still sent by gateways that have not seen the
//! pod leave its endpoints are answered, and the shim ends after
//! [`DRAIN_QUIET`] without a call; the kubelet's grace period bounds it).
//!
//! A job's one run (`once`) is relayed instead ([`serve_loaded`]): this
//! process reads the frames, answers a timeout or a crash with ERROR and
//! ends after the one answer.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use sless_api::Runtime;
use sless_driver_local::frame::{self, kind};
use sless_driver_local::standalone::{answer_frames, error_frame, ServeSpec, Standalone, StandaloneSpec, Unanswered};
use sless_driver_local::StartFailure;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::InstanceConfig;

/// Exit code when the handler did not load (the user's error).
pub const LOAD_FAILED: i32 = 3;

/// Draining after SIGTERM ends once no call has been in flight for this
/// long: long enough for every gateway to see the pod leave its
/// EndpointSlice (a watch, or a listing kept for a second).
pub const DRAIN_QUIET: Duration = Duration::from_secs(2);

/// A serving shim sends KEEPALIVE every second; one silent for its
/// timeout plus this is held by a handler that its own timeout cannot stop
/// (C code holding Python's lock, a Node loop that never yields) and is
/// ended, so the pod restarts it.
pub const HELD_SLACK: Duration = Duration::from_secs(2);

/// Answers written to a gateway at once at most.
const WRITE_BATCH: usize = 64;

/// What a connection's writer does next.
enum Out {
    Frames(Bytes),
    /// Ends the process with this code once everything before is written.
    Exit(i32),
}

pub async fn run(config: &InstanceConfig) -> anyhow::Result<i32> {
    let runtime = config.runtime()?;
    let ready = Arc::new(AtomicBool::new(false));
    let ready_listener = TcpListener::bind(config.ready_listen)
        .await
        .map_err(|e| anyhow::anyhow!("SLESS_INSTANCE_READY_LISTEN {}: {e}", config.ready_listen))?;
    tokio::spawn(super::ready::serve(ready_listener, ready.clone()));
    let mut spec = standalone_spec(config, runtime, config.env()?);
    // A job's one run is relayed; a serving shim takes the connections itself.
    let frames = if config.once { None } else { Some(bind_frames(config)?) };
    if let Some(listener) = &frames {
        spec.serve = Some(serve_spec(config, runtime, listener));
    }
    let instance = match Standalone::start(&spec).await {
        Ok(instance) => Arc::new(instance),
        Err(StartFailure::Load(error)) => {
            tracing::error!("the handler failed to load: {error}");
            return Ok(LOAD_FAILED);
        }
        Err(StartFailure::Start(error)) => anyhow::bail!("the instance could not start: {error}"),
    };
    if frames.is_some() {
        return supervise(config, instance, ready).await;
    }
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| anyhow::anyhow!("SLESS_INSTANCE_LISTEN {}: {e}", config.listen))?;
    serve_loaded(config, instance, listener, ready).await
}

/// Binds the frame port for a shim that serves it itself: before the shim
/// starts, which gets a copy of the socket.
pub fn bind_frames(config: &InstanceConfig) -> anyhow::Result<Arc<OwnedFd>> {
    let listener = std::net::TcpListener::bind(config.listen)
        .map_err(|e| anyhow::anyhow!("SLESS_INSTANCE_LISTEN {}: {e}", config.listen))?;
    Ok(Arc::new(OwnedFd::from(listener)))
}

/// How the shim serves `listener`: the HELLO of `config`'s function, its timeout.
pub fn serve_spec(config: &InstanceConfig, runtime: Runtime, listener: &Arc<OwnedFd>) -> ServeSpec {
    ServeSpec {
        listener: listener.clone(),
        hello: hello(config, runtime),
        timeout: Duration::from_secs(config.timeout_sec.max(1).into()),
    }
}

/// What every connection opens with: the function and version served.
fn hello(config: &InstanceConfig, runtime: Runtime) -> serde_json::Value {
    serde_json::json!({
        "runtime": runtime.as_str(),
        "namespace": config.namespace,
        "function": config.function,
        "version": config.version,
        "concurrency": config.concurrency,
    })
}

/// Watches a loaded shim that serves the gateways itself until it ends:
/// readiness is on while it lives; SIGTERM (the pod deleted or rolled)
/// turns readiness off and tells the shim to drain, which it does by
/// exiting once no call has been in flight for [`DRAIN_QUIET`] (the
/// kubelet's grace period bounds it). A shim that ends otherwise (a
/// timeout, a crash), or is held past its timeout ([`HELD_SLACK`]), ends
/// the process with 1: the pod restarts it.
pub async fn supervise(
    config: &InstanceConfig,
    instance: Arc<Standalone>,
    ready: Arc<AtomicBool>,
) -> anyhow::Result<i32> {
    let mut died = instance.died();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let held_after = Duration::from_secs(config.timeout_sec.max(1).into()) + HELD_SLACK;
    let mut held_check = tokio::time::interval(Duration::from_secs(1));
    // Silence counts from here: a generic pod's shim says nothing while it
    // waits in its pool, however long.
    let watching = Instant::now();
    ready.store(true, Ordering::SeqCst);
    tracing::info!(listen = %config.listen, function = %config.function, version = config.version, "instance ready");
    let mut draining = false;
    let code = loop {
        tokio::select! {
            _ = held_check.tick() => {
                let silent = instance.silent_for().min(watching.elapsed());
                if silent >= held_after {
                    tracing::error!(
                        "the shim has been held for {}s, past the timeout: a handler that does not give the \
                         interpreter back (C code holding Python's lock, a Node loop that never yields); restarting",
                        silent.as_secs()
                    );
                    break 1;
                }
            }
            _ = terminate.recv(), if !draining => {
                tracing::info!("SIGTERM: draining");
                draining = true;
                ready.store(false, Ordering::SeqCst);
                if let Err(e) = instance.drain(DRAIN_QUIET) {
                    tracing::error!("telling the shim to drain: {e}");
                    break 1;
                }
            }
            _ = died.changed() => {
                let reason = died.borrow().clone().unwrap_or_default();
                if draining {
                    tracing::info!("drained: {reason}");
                    break 0;
                }
                tracing::error!("the shim died: {reason}");
                break 1;
            }
        }
    };
    ready.store(false, Ordering::SeqCst);
    instance.stop().await;
    Ok(code)
}

/// What the shim loads, from `config` (the handler's environment `env`).
pub fn standalone_spec(config: &InstanceConfig, runtime: Runtime, env: BTreeMap<String, String>) -> StandaloneSpec {
    StandaloneSpec {
        runtime,
        program: match runtime {
            Runtime::Python311 => config.python.clone(),
            Runtime::Nodejs20 => config.node.clone(),
        },
        work_dir: config.work_dir.clone(),
        code_dir: config.code_dir.clone(),
        entrypoint: config.entrypoint.clone(),
        env,
        namespace: config.namespace.clone(),
        function: config.function.clone(),
        version: config.version,
        concurrency: config.concurrency,
        memory_mb: config.memory_mb,
        max_output_bytes: config.max_response_bytes,
        load_timeout: Duration::from_secs(30),
        // V8 sizes its heap from the pod's memory, but takes 256 MB at least.
        node_heap_mb: config.memory_mb.map(sless_driver_local::node_heap_for),
        serve: None,
    }
}

/// Relays frames between `listener` and the loaded `instance` over its
/// pipes until it ends (a timeout, a crash, a job run's one answer);
/// readiness is on meanwhile. A job's one run is served so.
pub async fn serve_loaded(
    config: &InstanceConfig,
    instance: Arc<Standalone>,
    listener: TcpListener,
    ready: Arc<AtomicBool>,
) -> anyhow::Result<i32> {
    let runtime = config.runtime()?;
    ready.store(true, Ordering::SeqCst);
    tracing::info!(listen = %config.listen, function = %config.function, version = config.version, "instance ready");
    let hello = frame::encode(kind::HELLO, 0, &serde_json::to_vec(&hello(config, runtime))?);
    let settings = Arc::new(Connection {
        instance: instance.clone(),
        timeout: Duration::from_secs(config.timeout_sec.max(1).into()),
        once: config.once,
        hello,
        calls: Activity::default(),
    });
    let (exit_tx, mut exit_rx) = mpsc::channel::<i32>(1);
    let mut died = instance.died();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut draining = false;
    let mut drain_check = tokio::time::interval(Duration::from_millis(100));
    let code = loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    tokio::spawn(settings.clone().serve(stream, exit_tx.clone()));
                }
            }
            Some(code) = exit_rx.recv() => break code,
            _ = terminate.recv(), if !draining => {
                tracing::info!("SIGTERM: draining");
                draining = true;
                ready.store(false, Ordering::SeqCst);
            }
            _ = drain_check.tick(), if draining => {
                if settings.calls.quiet_for() >= DRAIN_QUIET {
                    break 0;
                }
            }
            _ = died.changed() => {
                let reason = died.borrow().clone().unwrap_or_default();
                tracing::error!("the shim died: {reason}");
                // The connections answer their calls ERROR; let that go out.
                tokio::time::sleep(Duration::from_millis(100)).await;
                break 1;
            }
        }
    };
    ready.store(false, Ordering::SeqCst);
    instance.stop().await;
    Ok(code)
}

struct Connection {
    instance: Arc<Standalone>,
    timeout: Duration,
    once: bool,
    hello: Bytes,
    calls: Activity,
}

/// Calls in flight and when the last one ended: what a drain waits on.
struct Activity {
    in_flight: AtomicUsize,
    /// Milliseconds after `since` when the last call ended.
    last_ms: AtomicU64,
    since: Instant,
}

impl Default for Activity {
    fn default() -> Activity {
        Activity {
            in_flight: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
            since: Instant::now(),
        }
    }
}

impl Activity {
    fn started(&self) {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
    }

    fn ended(&self) {
        let now = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(now, Ordering::SeqCst);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    /// How long no call has been in flight (zero while one is).
    fn quiet_for(&self) -> Duration {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return Duration::ZERO;
        }
        let last = Duration::from_millis(self.last_ms.load(Ordering::SeqCst));
        self.since.elapsed().saturating_sub(last)
    }
}

impl Connection {
    async fn serve(self: Arc<Self>, stream: TcpStream, exit: mpsc::Sender<i32>) {
        let _ = stream.set_nodelay(true);
        let (read, mut write) = stream.into_split();
        let (out, mut outbox) = mpsc::unbounded_channel::<Out>();
        // The writer: every answer waiting goes out in one write (under
        // load many per system call), up to an exit, after which nothing is.
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(WRITE_BATCH);
            let mut buf = Vec::new();
            while outbox.recv_many(&mut batch, WRITE_BATCH).await > 0 {
                buf.clear();
                let mut then_exit = None;
                for next in batch.drain(..) {
                    match next {
                        Out::Frames(bytes) => buf.extend_from_slice(&bytes),
                        Out::Exit(code) => {
                            then_exit = Some(code);
                            break;
                        }
                    }
                }
                if write.write_all(&buf).await.is_err() {
                    return;
                }
                if let Some(code) = then_exit {
                    let _ = write.flush().await;
                    let _ = exit.send(code).await;
                    return;
                }
            }
        });
        let _ = out.send(Out::Frames(self.hello.clone()));
        let mut reader = BufReader::with_capacity(64 * 1024, read);
        loop {
            let f = match frame::read(&mut reader).await {
                Ok(Some(f)) if f.kind == kind::INVOKE => f,
                Ok(Some(f)) => {
                    tracing::warn!(kind = %(f.kind as char), "unexpected frame from a gateway; closing");
                    return;
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "reading from a gateway");
                    return;
                }
            };
            let this = self.clone();
            let out = out.clone();
            this.calls.started();
            tokio::spawn(async move {
                let id = f.id;
                let invoke = BytesMut::from(&frame::encode(kind::INVOKE, 0, &f.payload)[..]);
                let (frames, exit) = match tokio::time::timeout(this.timeout, this.instance.invoke(invoke)).await {
                    Ok(Ok(output)) => (answer_frames(id, &output), this.once.then_some(0)),
                    Ok(Err(reason)) => {
                        let why = Unanswered::of_failure(reason);
                        let exit = if why.restarts() {
                            Some(1)
                        } else {
                            this.once.then_some(0)
                        };
                        (error_frame(id, &why), exit)
                    }
                    Err(_) => {
                        let reason = format!("no answer within {}s; the instance restarts", this.timeout.as_secs());
                        (error_frame(id, &Unanswered::Timeout(reason)), Some(1))
                    }
                };
                let _ = out.send(Out::Frames(frames));
                this.calls.ended();
                if let Some(code) = exit {
                    let _ = out.send(Out::Exit(code));
                }
            });
        }
    }
}
