//! The accept loop in front of the application: at most `max_connections`
//! open at once (beyond it the connection idle longest is closed to make
//! room, or, when every one is serving a request, the new one gets a 503
//! and is closed, so descriptors stay for the instances), a request's head within
//! `header_timeout` of its first byte, a kept-alive connection idle between
//! requests for `idle_timeout` at most (longer than clients keep pooled
//! connections, so a client never sends on a connection the server is
//! closing), request bodies within `body_timeout`, and a response write that
//! makes no progress for `write_timeout` (a client that stopped reading)
//! closes the connection.
//! On shutdown it stops accepting, lets each connection finish the request
//! it serves, and returns when all are closed.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use axum::body::Body;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::time::Sleep;
use tower::Service;

/// What a connection may take.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub body_timeout: Duration,
    pub write_timeout: Duration,
}

/// Connections open and refused, for `/metrics`.
#[derive(Debug, Default)]
pub struct ConnectionStats {
    pub open: AtomicU64,
    pub refused: AtomicU64,
    /// Idle connections closed to make room for new ones.
    pub reclaimed: AtomicU64,
}

/// Serves `app` on `listener` until `shutdown` resolves, then drains.
pub async fn serve<S>(
    listener: TcpListener,
    app: S,
    limits: Limits,
    stats: Arc<ConnectionStats>,
    shutdown: impl Future<Output = ()>,
) where
    S: Service<axum::extract::Request, Response = axum::response::Response, Error = std::convert::Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let open = Arc::new(Open::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    let mut accept_errors = 0u64;
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, mostly: wait for some to come back.
                    if accept_errors.is_multiple_of(100) {
                        tracing::warn!(error = %e, "accepting a connection failed");
                    }
                    accept_errors += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            app: app.clone(),
            limits: limits.clone(),
            stats: stats.clone(),
            stop: stop_rx.clone(),
            accepted_at: open.now(),
            open: open.clone(),
        };
        match slots.clone().try_acquire_owned() {
            Ok(slot) => {
                tokio::spawn(connection.serve(stream, slot));
            }
            // Full: the connection idle longest makes room (as nginx
            // reuses its kept-alive ones), unless every one is serving a
            // request.
            Err(_) if open.close_idlest() => {
                stats.reclaimed.fetch_add(1, Ordering::Relaxed);
                let slots = slots.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(RECLAIM_WAIT, slots.acquire_owned()).await {
                        Ok(Ok(slot)) => connection.serve(stream, slot).await,
                        _ => {
                            connection.stats.refused.fetch_add(1, Ordering::Relaxed);
                            refuse(stream).await
                        }
                    }
                });
            }
            Err(_) => {
                stats.refused.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(refuse(stream));
            }
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every slot back means every connection closed.
    let _ = slots.acquire_many(limits.max_connections as u32).await;
}

/// How long a connection over the limit waits for the slot of the idle
/// one it closed (it comes back as soon as that connection's task runs).
const RECLAIM_WAIT: Duration = Duration::from_secs(1);

/// What serving one connection needs.
struct Connection<S> {
    app: S,
    limits: Limits,
    stats: Arc<ConnectionStats>,
    stop: watch::Receiver<bool>,
    open: Arc<Open>,
    /// When it was accepted ([`Open::now`]): what its idle time counts
    /// from, however late its task first runs.
    accepted_at: u64,
}

impl<S> Connection<S>
where
    S: Service<axum::extract::Request, Response = axum::response::Response, Error = std::convert::Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    /// Serves requests on `stream` until it closes, is closed for being
    /// idle longest when the server is full, or the server stops.
    async fn serve(self, stream: TcpStream, slot: tokio::sync::OwnedSemaphorePermit) {
        let Connection {
            app,
            limits,
            stats,
            mut stop,
            open,
            accepted_at,
        } = self;
        stats.open.fetch_add(1, Ordering::Relaxed);
        let (id, this) = open.add(accepted_at);
        let in_service = this.clone();
        let body_timeout = limits.body_timeout;
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let request = request.map(|body| Body::new(TimedBody::new(body, body_timeout)));
            // In service from its head until its answer's body is dropped
            // (sent, or the connection gone).
            let serving = Serving::start(in_service.clone());
            let answer = app.clone().call(request);
            async move {
                let response = answer.await?;
                Ok::<_, std::convert::Infallible>(response.map(|body| {
                    Body::new(ServedBody {
                        body,
                        _serving: serving,
                    })
                }))
            }
        });
        let io = TokioIo::new(TimedWrites::new(stream, limits.write_timeout, limits.header_timeout));
        // hyper's head timer runs from when it waits for a head, so
        // it is the idle timeout; the head's own deadline runs from its
        // first byte (`TimedWrites`).
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.idle_timeout)
            .max_buf_size(MAX_HEAD_BYTES)
            .serve_connection(io, service);
        tokio::pin!(connection);
        loop {
            tokio::select! {
                _ = connection.as_mut() => break,
                _ = async { stop.wait_for(|stop| *stop).await.is_ok() } => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                    break;
                }
                _ = this.close.notified() => {
                    // Requests start and end only as the connection is
                    // polled, here: none in service now means none is
                    // lost (a head half read is dropped with it).
                    if !this.in_service.load(Ordering::Relaxed) {
                        break;
                    }
                    this.closing.store(false, Ordering::Relaxed);
                }
            }
        }
        open.remove(id);
        stats.open.fetch_sub(1, Ordering::Relaxed);
        drop(slot);
    }
}

/// The connections open, so that the one idle longest can be closed when
/// a new one finds every slot taken.
struct Open {
    epoch: std::time::Instant,
    next: AtomicU64,
    conns: std::sync::Mutex<std::collections::HashMap<u64, Arc<OpenConnection>>>,
}

impl Default for Open {
    fn default() -> Self {
        Open {
            epoch: std::time::Instant::now(),
            next: AtomicU64::new(0),
            conns: Default::default(),
        }
    }
}

/// One open connection as [`Open`] sees it.
struct OpenConnection {
    open: Arc<Open>,
    /// A request is between its head and the end of its answer (HTTP/1
    /// serves one at a time).
    in_service: AtomicBool,
    /// Milliseconds after `Open::epoch` since when none has been.
    idle_since: AtomicU64,
    /// Asked to close and not yet found busy.
    closing: AtomicBool,
    close: tokio::sync::Notify,
}

impl Open {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Registers a connection accepted at `accepted_at`: idle since then
    /// (a burst of accepts spawns tasks that run in no set order, and the
    /// one accepted first is the one idle longest).
    fn add(self: &Arc<Self>, accepted_at: u64) -> (u64, Arc<OpenConnection>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let connection = Arc::new(OpenConnection {
            open: self.clone(),
            in_service: AtomicBool::new(false),
            idle_since: AtomicU64::new(accepted_at),
            closing: AtomicBool::new(false),
            close: tokio::sync::Notify::new(),
        });
        self.conns.lock().unwrap().insert(id, connection.clone());
        (id, connection)
    }

    fn remove(&self, id: u64) {
        self.conns.lock().unwrap().remove(&id);
    }

    /// Asks the connection without a request in service for longest to
    /// close: one kept alive between requests, one that never sent a whole
    /// head. False when every connection is serving a request.
    fn close_idlest(&self) -> bool {
        let conns = self.conns.lock().unwrap();
        let idlest = conns
            .values()
            .filter(|c| !c.in_service.load(Ordering::Relaxed) && !c.closing.load(Ordering::Relaxed))
            .min_by_key(|c| c.idle_since.load(Ordering::Relaxed));
        let Some(idlest) = idlest else {
            return false;
        };
        idlest.closing.store(true, Ordering::Relaxed);
        idlest.close.notify_one();
        true
    }
}

/// Marks its connection in service while it lives.
struct Serving(Arc<OpenConnection>);

impl Serving {
    fn start(connection: Arc<OpenConnection>) -> Serving {
        connection.in_service.store(true, Ordering::Relaxed);
        Serving(connection)
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.idle_since.store(self.0.open.now(), Ordering::Relaxed);
        self.0.in_service.store(false, Ordering::Relaxed);
    }
}

/// An answer's body, holding its connection in service until dropped.
struct ServedBody {
    body: Body,
    _serving: Serving,
}

impl HttpBody for ServedBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The longest request head (request line and headers): hyper answers 431
/// once its buffer holds this much of an unfinished head, and
/// `TimedWrites` reads no further into a head than this, so the buffer
/// reaches the bound exactly (hyper checks it only between reads, which
/// grow, so an 80 KiB head read in one go passed a 64 KiB bound). Its own
/// default, about 400 KiB, let every open connection hold that much; nginx
/// takes 32 KiB of headers by default.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Answers a connection over the limit with a 503 and closes it.
async fn refuse(mut stream: TcpStream) {
    const ANSWER: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
        retry-after: 1\r\nconnection: close\r\ncontent-length: 53\r\n\r\n\
        {\"error\":\"the server has too many open connections\"}\n";
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(ANSWER)).await;
}

/// A stream whose writes fail once one has made no progress for `timeout`,
/// whose reads fail when a request's head has not ended (`\r\n\r\n`)
/// within `head_timeout` of its first byte, and which reads no more than
/// [`MAX_HEAD_BYTES`] into a head.
pub struct TimedWrites<T> {
    io: T,
    timeout: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
    head_timeout: Duration,
    head: Head,
}

/// Where the connection is in reading a request's head.
enum Head {
    /// Waiting for a request (the first byte after an answer starts one).
    Idle,
    /// Reading one: its deadline, how many of `\r\n\r\n` were just seen,
    /// and how many bytes of it were read.
    Reading(Pin<Box<Sleep>>, usize, usize),
    /// The head ended; the next write (the answer) makes the connection idle.
    Done,
}

impl<T> TimedWrites<T> {
    pub fn new(io: T, timeout: Duration, head_timeout: Duration) -> Self {
        TimedWrites {
            io,
            timeout,
            stalled: None,
            head_timeout,
            head: Head::Idle,
        }
    }

    /// Follows the bytes read through a request's head.
    fn saw(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if let Head::Idle = self.head {
            self.head = Head::Reading(Box::pin(tokio::time::sleep(self.head_timeout)), 0, 0);
        }
        if let Head::Reading(_, matched, read) = &mut self.head {
            const END: &[u8] = b"\r\n\r\n";
            for &b in bytes {
                *read += 1;
                *matched = if b == END[*matched] {
                    *matched + 1
                } else if b == b'\r' {
                    1
                } else {
                    0
                };
                if *matched == END.len() {
                    self.head = Head::Done;
                    return;
                }
            }
        }
    }

    /// An answer is going out: the next byte read starts the next head.
    /// Not so for an interim answer (`100 Continue`, sent when a request
    /// with `Expect: 100-continue` starts reading its body): what the client
    /// sends next is that body, which was being counted as a head, refused
    /// past 64 KiB.
    fn answering(&mut self, first: &[u8]) {
        if let Head::Done = self.head {
            if !is_interim(first) {
                self.head = Head::Idle;
            }
        }
    }

    /// Passes a write's outcome on; a pending one arms (or checks) the timer.
    fn watch<R>(&mut self, cx: &mut Context<'_>, poll: Poll<std::io::Result<R>>) -> Poll<std::io::Result<R>> {
        match poll {
            Poll::Ready(result) => {
                self.stalled = None;
                Poll::Ready(result)
            }
            Poll::Pending => {
                let timeout = self.timeout;
                let stalled = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                match stalled.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the client did not read the response",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TimedWrites<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        // Close to the head's bound, a read stops at it (else as asked).
        let room = match &self.head {
            Head::Idle => MAX_HEAD_BYTES,
            Head::Reading(_, _, read) => MAX_HEAD_BYTES.saturating_sub(*read),
            Head::Done => usize::MAX,
        };
        if room == 0 {
            // hyper answers 431 before; a read of nothing would be the end.
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the request's head is longer than the server takes",
            )));
        }
        let read = if room < buf.remaining() {
            let mut capped = ReadBuf::new(buf.initialize_unfilled_to(room));
            let read = Pin::new(&mut self.io).poll_read(cx, &mut capped);
            let n = capped.filled().len();
            buf.advance(n);
            read
        } else {
            Pin::new(&mut self.io).poll_read(cx, buf)
        };
        match read {
            Poll::Ready(Ok(())) => {
                let this = &mut *self;
                this.saw(&buf.filled()[before..]);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                if let Head::Reading(deadline, _, _) = &mut self.head {
                    if deadline.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "the request's head did not end in time",
                        )));
                    }
                }
                Poll::Pending
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TimedWrites<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.answering(buf);
        let poll = Pin::new(&mut self.io).poll_write(cx, buf);
        self.watch(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.answering(bufs.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| &b[..]));
        let poll = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.watch(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let poll = Pin::new(&mut self.io).poll_flush(cx);
        self.watch(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let poll = Pin::new(&mut self.io).poll_shutdown(cx);
        self.watch(cx, poll)
    }
}

/// Whether a write starts an interim (1xx) answer's status line.
fn is_interim(write: &[u8]) -> bool {
    write.len() >= 10 && write.starts_with(b"HTTP/1.") && write[8] == b' ' && write[9] == b'1'
}

/// A request body that must arrive whole within a deadline, counted from
/// when it is first read.
pub struct TimedBody {
    body: Incoming,
    timeout: Duration,
    deadline: Option<Pin<Box<Sleep>>>,
}

impl TimedBody {
    pub fn new(body: Incoming, timeout: Duration) -> Self {
        TimedBody {
            body,
            timeout,
            deadline: None,
        }
    }
}

impl HttpBody for TimedBody {
    type Data = bytes::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let timeout = self.timeout;
        let deadline = self
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        ready!(deadline.as_mut().poll(cx));
        Poll::Ready(Some(Err(format!(
            "the request body did not arrive within {}s",
            timeout.as_secs()
        )
        .into())))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Raises this process's soft limit on open files to its hard limit (a
/// busy server holds a connection and an instance's pipes per call) and
/// returns the limit in force.
pub fn raise_open_files_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            tracing::warn!(error = %e, "could not raise the open files limit");
        }
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The connection accepted first is closed first, though its task
    /// registered it after a later one's (tasks spawned in a burst run in
    /// no set order).
    #[test]
    fn the_connection_accepted_first_is_the_idlest() {
        let open = Arc::new(Open::default());
        let first_accepted = open.now();
        std::thread::sleep(Duration::from_millis(5));
        let (_, later) = open.add(open.now());
        std::thread::sleep(Duration::from_millis(5));
        let (_, first) = open.add(first_accepted);
        assert!(open.close_idlest());
        assert!(first.closing.load(Ordering::Relaxed), "the later one was closed first");
        assert!(!later.closing.load(Ordering::Relaxed));
    }
}
