//! A gateway's connection to one `sless instance` over TCP
//! (runtimes/PROTOCOL.md, "Over TCP"): the instance opens with a HELLO
//! naming its function and version, which is checked; then INVOKE frames go
//! out under ids of this connection and LOG + OUTPUT (or ERROR) frames come
//! back, several invocations at once.
//!
//! The frame codec and the answer reader are the local driver's
//! (`sless_driver_local::frame`, `standalone::AnswerReader`), not a copy.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sless_driver::VersionRef;
use sless_driver_local::frame::{self, kind};
use sless_driver_local::standalone::{Answer, AnswerReader};
use tokio::io::BufReader;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// How long a connect and its HELLO may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Invocations waiting for their answer, by id.
type Pending = Arc<Mutex<Option<HashMap<u32, (AnswerReader, oneshot::Sender<Answer>)>>>>;

/// One open connection to an instance.
pub struct InstanceConnection {
    /// Frames for the writer task, which owns the write half and sends
    /// what is queued in one write (many calls per system call under load).
    outbox: mpsc::UnboundedSender<Bytes>,
    /// `None` once the connection is closed.
    pending: Pending,
    next_id: AtomicU32,
    open: Arc<AtomicBool>,
}

/// Why an invocation sent on a connection has no answer.
#[derive(Debug)]
pub enum Lost {
    /// Nothing was sent: the caller may try another instance.
    NotSent(String),
    /// The connection broke while the invocation was out.
    Broken(String),
}

impl InstanceConnection {
    /// Connects to the instance at `addr` and checks that it serves `target`.
    pub async fn connect(addr: SocketAddr, target: &VersionRef) -> Result<InstanceConnection, String> {
        let opened = tokio::time::timeout(CONNECT_TIMEOUT, async {
            let mut stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
            let _ = stream.set_nodelay(true);
            let hello = frame::read(&mut stream)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("closed before its HELLO")?;
            Ok::<_, String>((stream, hello))
        })
        .await
        .map_err(|_| format!("no HELLO from {addr} within {}s", CONNECT_TIMEOUT.as_secs()))?
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
        let (stream, hello) = opened;
        if hello.kind != kind::HELLO {
            return Err(format!("{addr} opened with frame {:?}, not HELLO", hello.kind as char));
        }
        #[derive(serde::Deserialize)]
        struct Hello {
            namespace: String,
            function: String,
            version: u64,
        }
        let said: Hello = serde_json::from_slice(&hello.payload).map_err(|e| format!("HELLO from {addr}: {e}"))?;
        if said.namespace != target.key.namespace || said.function != target.key.name || said.version != target.version
        {
            return Err(format!(
                "{addr} serves {}/{}@{}, not {target}",
                said.namespace, said.function, said.version
            ));
        }
        let (read, write) = stream.into_split();
        let pending: Pending = Arc::new(Mutex::new(Some(HashMap::new())));
        let open = Arc::new(AtomicBool::new(true));
        tokio::spawn(read_answers(BufReader::new(read), pending.clone(), open.clone()));
        let (outbox, frames) = mpsc::unbounded_channel();
        let writing = open.clone();
        tokio::spawn(async move {
            frame::write_queued(write, frames).await;
            writing.store(false, Ordering::Relaxed);
        });
        Ok(InstanceConnection {
            outbox,
            pending,
            next_id: AtomicU32::new(1),
            open,
        })
    }

    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Relaxed)
    }

    /// Sends one INVOKE frame (its id is set here) and waits for its answer.
    pub async fn invoke(&self, mut invoke: BytesMut) -> Result<Answer, Lost> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed).max(1);
        frame::set_id(&mut invoke, id);
        let (tx, rx) = oneshot::channel();
        match self.pending.lock().unwrap().as_mut() {
            Some(pending) => pending.insert(id, (AnswerReader::default(), tx)),
            None => return Err(Lost::NotSent("the connection is closed".into())),
        };
        /// Forgets the invocation if the caller gives up waiting.
        struct Forget<'a>(&'a Pending, u32);
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                if let Some(pending) = self.0.lock().unwrap().as_mut() {
                    pending.remove(&self.1);
                }
            }
        }
        let _forget = Forget(&self.pending, id);
        if self.outbox.send(invoke.freeze()).is_err() {
            self.open.store(false, Ordering::Relaxed);
            return Err(Lost::NotSent("the connection is closed".into()));
        }
        rx.await
            .map_err(|_| Lost::Broken("the instance closed the connection".into()))
    }
}

/// Reads frames until the connection ends, completing invocations; at the
/// end every invocation still out is dropped (its caller sees [`Lost::Broken`]).
async fn read_answers(mut reader: BufReader<tokio::net::tcp::OwnedReadHalf>, pending: Pending, open: Arc<AtomicBool>) {
    loop {
        let f = match frame::read(&mut reader).await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(error = %e, "reading from an instance");
                break;
            }
        };
        let mut guard = pending.lock().unwrap();
        let Some(waiting) = guard.as_mut() else { break };
        let id = f.id;
        let Some((reader, _)) = waiting.get_mut(&id) else {
            // An answer nobody waits for any more (the caller gave up).
            continue;
        };
        match reader.push(f) {
            Ok(None) => {}
            Ok(Some(answer)) => {
                if let Some((_, tx)) = waiting.remove(&id) {
                    let _ = tx.send(answer);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "a bad frame from an instance; closing");
                break;
            }
        }
    }
    open.store(false, Ordering::Relaxed);
    pending.lock().unwrap().take();
}
