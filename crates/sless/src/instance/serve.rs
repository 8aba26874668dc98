//! `sless instance serve`: the shim loaded, frames over TCP. Each
//! connection opens with a HELLO naming the function and version (a
//! gateway checks it is talking to the version it wants), then carries
//! INVOKE frames in and LOG + OUTPUT (or ERROR) frames out, multiplexed by
//! the gateway's ids. A timeout or a crash answers ERROR and ends the
//! process (the pod restarts it), as the local driver stops such an
//! instance; with `once`, the process ends after its one answer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sless_driver_local::frame::{self, kind};
use sless_driver_local::standalone::{answer_frames, error_frame, Standalone, StandaloneSpec, Unanswered};
use sless_driver_local::StartFailure;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::InstanceConfig;

/// Exit code when the handler did not load (the user's error).
pub const LOAD_FAILED: i32 = 3;

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
    let spec = StandaloneSpec {
        runtime,
        program: match runtime {
            sless_api::Runtime::Python311 => config.python.clone(),
            sless_api::Runtime::Nodejs20 => config.node.clone(),
        },
        work_dir: config.work_dir.clone(),
        code_dir: config.code_dir.clone(),
        entrypoint: config.entrypoint.clone(),
        env: config.env()?,
        namespace: config.namespace.clone(),
        function: config.function.clone(),
        version: config.version,
        concurrency: config.concurrency,
        max_output_bytes: config.max_response_bytes,
        load_timeout: Duration::from_secs(30),
    };
    let instance = match Standalone::start(&spec).await {
        Ok(instance) => Arc::new(instance),
        Err(StartFailure::Load(error)) => {
            tracing::error!("the handler failed to load: {error}");
            return Ok(LOAD_FAILED);
        }
        Err(StartFailure::Start(error)) => anyhow::bail!("the instance could not start: {error}"),
    };
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| anyhow::anyhow!("SLESS_INSTANCE_LISTEN {}: {e}", config.listen))?;
    ready.store(true, Ordering::SeqCst);
    tracing::info!(listen = %config.listen, function = %config.function, version = config.version, "instance ready");
    let hello = frame::encode(
        kind::HELLO,
        0,
        &serde_json::to_vec(&serde_json::json!({
            "runtime": runtime.as_str(),
            "namespace": config.namespace,
            "function": config.function,
            "version": config.version,
            "concurrency": config.concurrency,
        }))?,
    );
    let settings = Arc::new(Connection {
        instance: instance.clone(),
        timeout: Duration::from_secs(config.timeout_sec.max(1).into()),
        once: config.once,
        hello,
    });
    let (exit_tx, mut exit_rx) = mpsc::channel::<i32>(1);
    let mut died = instance.died();
    let code = loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    tokio::spawn(settings.clone().serve(stream, exit_tx.clone()));
                }
            }
            Some(code) = exit_rx.recv() => break code,
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
}

impl Connection {
    async fn serve(self: Arc<Self>, stream: TcpStream, exit: mpsc::Sender<i32>) {
        let _ = stream.set_nodelay(true);
        let (read, mut write) = stream.into_split();
        let (out, mut outbox) = mpsc::unbounded_channel::<Out>();
        tokio::spawn(async move {
            while let Some(next) = outbox.recv().await {
                match next {
                    Out::Frames(bytes) => {
                        if write.write_all(&bytes).await.is_err() {
                            return;
                        }
                    }
                    Out::Exit(code) => {
                        let _ = write.flush().await;
                        let _ = exit.send(code).await;
                        return;
                    }
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
            tokio::spawn(async move {
                let id = f.id;
                let invoke = BytesMut::from(&frame::encode(kind::INVOKE, 0, &f.payload)[..]);
                let (frames, exit) = match tokio::time::timeout(this.timeout, this.instance.invoke(invoke)).await {
                    Ok(Ok(output)) => (answer_frames(id, &output), this.once.then_some(0)),
                    Ok(Err(reason)) => (error_frame(id, &Unanswered::Crashed(reason)), Some(1)),
                    Err(_) => {
                        let reason = format!("no answer within {}s; the instance restarts", this.timeout.as_secs());
                        (error_frame(id, &Unanswered::Timeout(reason)), Some(1))
                    }
                };
                let _ = out.send(Out::Frames(frames));
                if let Some(code) = exit {
                    let _ = out.send(Out::Exit(code));
                }
            });
        }
    }
}
