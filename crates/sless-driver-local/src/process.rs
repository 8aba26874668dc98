//! One running shim process: started warm and generic, then loaded with one
//! function's code, then serving many invocations multiplexed by id over its
//! stdin/stdout frames.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, BufReader};
use tokio::process::Child;
use tokio::sync::{mpsc, oneshot};

use super::confine::Confinement;
use super::frame::{self, kind};
use super::log_budget::{LogBudget, Verdict};
use super::zygote::Forked;
use sless_api::text::{clip, log_line, one_line};
use sless_driver::{LogChunk, OutputStream};

static NEXT_PROCESS: AtomicU64 = AtomicU64::new(1);

/// The shim's answer to one invocation.
#[derive(Debug)]
pub struct Output {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    pub logs: Vec<LogChunk>,
    pub logs_truncated: bool,
}

#[derive(Deserialize)]
pub(crate) struct OutputHead {
    pub(crate) status: u16,
    #[serde(default, deserialize_with = "header_pairs")]
    pub(crate) headers: Vec<(String, String)>,
    /// Set by `sless instance` over TCP only (see `standalone`).
    #[serde(default)]
    pub(crate) logs_truncated: bool,
}

/// Most headers an answer may have: an HTTP response's header map holds
/// at most some 24 000 names (more panics), and no client takes that many.
pub const MAX_RESPONSE_HEADERS: usize = 1000;

/// How the error of an answer that cannot be sent on begins (see
/// [`ShimProcess::invoke`]): the handler answered, and did not crash.
pub const BAD_OUTPUT: &str = "bad output frame";

/// The head's `headers` object as pairs, in the order sent (at most
/// [`MAX_RESPONSE_HEADERS`]): a name's value is a string, or a list of
/// them for a header sent once per value (`Set-Cookie`).
fn header_pairs<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<(String, String)>, D::Error> {
    use serde::de::{DeserializeSeed, Error};

    fn push<E: Error>(pairs: &mut Vec<(String, String)>, name: &str, value: String) -> Result<(), E> {
        if pairs.len() == MAX_RESPONSE_HEADERS {
            return Err(E::custom(format!(
                "the answer has more than {MAX_RESPONSE_HEADERS} headers"
            )));
        }
        pairs.push((name.to_string(), value));
        Ok(())
    }

    /// One name's value (or values), pushed as they are read.
    struct Values<'a> {
        name: String,
        pairs: &'a mut Vec<(String, String)>,
    }
    impl<'de> DeserializeSeed<'de> for Values<'_> {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
            deserializer.deserialize_any(self)
        }
    }
    impl<'de> serde::de::Visitor<'de> for Values<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a header value: a string, or a list of strings")
        }
        fn visit_str<E: Error>(self, value: &str) -> Result<(), E> {
            push(self.pairs, &self.name, value.to_string())
        }
        fn visit_string<E: Error>(self, value: String) -> Result<(), E> {
            push(self.pairs, &self.name, value)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while let Some(value) = seq.next_element::<String>()? {
                push(self.pairs, &self.name, value)?;
            }
            Ok(())
        }
    }

    struct Pairs;
    impl<'de> serde::de::Visitor<'de> for Pairs {
        type Value = Vec<(String, String)>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object of header names to strings or lists of strings")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(2).min(MAX_RESPONSE_HEADERS));
            while let Some(name) = map.next_key::<String>()? {
                map.next_value_seed(Values {
                    name,
                    pairs: &mut pairs,
                })?;
            }
            Ok(pairs)
        }
    }
    deserializer.deserialize_map(Pairs)
}

#[derive(Deserialize)]
struct ReadyMsg {
    ok: bool,
    #[serde(default)]
    error: String,
}

struct Pending {
    reply: oneshot::Sender<Result<Output, String>>,
    logs: CappedLogs,
}

/// Most bytes of handler output kept per invocation; the rest is dropped and noted.
pub const LOG_CAP_BYTES: usize = 64 * 1024;

/// What a chunk of output costs against [`LOG_CAP_BYTES`] beside its text:
/// a handler alternating streams a byte at a time (or sending empty LOG
/// frames) makes a chunk per write, and each is held and stored.
const LOG_CHUNK_COST: usize = 32;

/// One invocation's handler output, kept up to [`LOG_CAP_BYTES`]: what
/// goes past it is dropped, and a note says so. Output to the stream of the
/// chunk before is added to that chunk.
#[derive(Debug, Default)]
pub struct CappedLogs {
    logs: Vec<LogChunk>,
    bytes: usize,
}

impl CappedLogs {
    /// Keeps what of `text` fits (cut at a character boundary).
    pub fn push(&mut self, stream: OutputStream, mut text: String) {
        if self.truncated() || text.is_empty() {
            return;
        }
        let last = self.logs.last_mut().filter(|last| last.stream == stream);
        if last.is_none() {
            self.bytes = (self.bytes + LOG_CHUNK_COST).min(LOG_CAP_BYTES);
        }
        let room = LOG_CAP_BYTES - self.bytes;
        if text.len() > room {
            let mut cut = room;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push('\n');
            self.bytes = LOG_CAP_BYTES;
        } else {
            self.bytes += text.len();
        }
        match self.logs.last_mut().filter(|last| last.stream == stream) {
            Some(last) => last.text.push_str(&text),
            None => self.logs.push(LogChunk { stream, text }),
        }
        if self.truncated() {
            self.logs.push(LogChunk {
                stream: OutputStream::Stderr,
                text: format!("[sless: output capped at {LOG_CAP_BYTES} bytes]\n"),
            });
        }
    }

    /// Whether output was dropped (the cap is reached).
    pub fn truncated(&self) -> bool {
        self.bytes >= LOG_CAP_BYTES
    }

    pub fn into_logs(self) -> Vec<LogChunk> {
        self.logs
    }
}

/// A LOG frame's payload as its stream and text.
pub(crate) fn log_payload(payload: &[u8]) -> Option<(OutputStream, String)> {
    let (stream, text) = payload.split_first()?;
    let stream = if *stream == 1 {
        OutputStream::Stdout
    } else {
        OutputStream::Stderr
    };
    Some((stream, String::from_utf8_lossy(text).into_owned()))
}

type ReadySlot = Mutex<Option<oneshot::Sender<Result<(), String>>>>;

/// A running shim.
pub struct ShimProcess {
    pub id: u64,
    /// Host pid of the outermost process (chrt, then prlimit, then bwrap:
    /// one pid; or the zygote's fork).
    pub pid: u32,
    /// The slot directory its code is linked into.
    pub slot: PathBuf,
    /// Its control group, network namespace and /tmp (undone when dropped).
    pub confinement: Confinement,
    /// Frames for the writer task, which owns stdin.
    outbox: mpsc::UnboundedSender<Bytes>,
    pending: Mutex<HashMap<u32, Pending>>,
    /// What its handler printed from its LOAD to its first call (its
    /// import, as Lambda's INIT): that call's output starts with it, so it
    /// reaches the function's log. None outside that time.
    init_logs: Mutex<Option<CappedLogs>>,
    ready: ReadySlot,
    next_id: AtomicU32,
    alive: AtomicBool,
    /// Set by its first answer, which wakes [`ShimProcess::answered_once`].
    answered: AtomicBool,
    /// A frame of a kind the protocol has not was logged.
    unexpected_frame: AtomicBool,
    first_answer: tokio::sync::Notify,
    /// When it was taken over, and its last KEEPALIVE, in ms after that.
    taken_over: std::time::Instant,
    heard_ms: AtomicU64,
    handle: Mutex<Option<Handle>>,
    death: tokio::sync::watch::Sender<Option<String>>,
    /// The heap node was started with (MB; 0: not a Node shim).
    js_heap_mb: AtomicU32,
    /// Set when its stderr says V8 ran out of heap ([`JS_HEAP_EXHAUSTED`]).
    heap_exhausted: Arc<AtomicBool>,
    /// How much of its output outside calls reaches the server's log.
    log_budget: Arc<LogBudget>,
    /// The artifact mounted at its `/code`, kept while it runs (dropped
    /// after the process is killed: the fields go after `drop`).
    artifact: Mutex<Option<super::code_mount::ArtifactHold>>,
    /// Its share of its namespace's room, given back once it is dead.
    claim: Mutex<Option<super::room::Claim>>,
}

/// What node writes to stderr when V8 cannot grow its heap further, just
/// before it aborts ("FATAL ERROR: Reached heap limit Allocation failed -
/// JavaScript heap out of memory").
const JS_HEAP_EXHAUSTED: &str = "JavaScript heap out of memory";

impl ShimProcess {
    /// Takes over a spawned child and waits for its HELLO frame.
    pub async fn start(
        mut child: Child,
        slot: PathBuf,
        confinement: Confinement,
        label: String,
    ) -> Result<Arc<ShimProcess>, String> {
        let pid = child.id().ok_or("process exited at once")?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let stderr = child.stderr.take().ok_or("no stderr")?;
        let stdio = Stdio { stdin, stdout, stderr };
        Self::take_over(pid, Handle::Child(child), stdio, slot, confinement, label).await
    }

    /// Takes over a fork of the zygote and waits for its HELLO frame.
    pub async fn start_forked(
        forked: Forked,
        slot: PathBuf,
        confinement: Confinement,
        label: String,
    ) -> Result<Arc<ShimProcess>, String> {
        // A pidfd: the pid is the zygote's child, which the kernel reaps, so
        // after its end the number may name another process; the pidfd never does.
        let pidfd = rustix::process::Pid::from_raw(forked.pid as i32)
            .ok_or("the zygote named pid 0")
            .and_then(|pid| {
                rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
                    .map_err(|_| "the fork ended before it could be watched")
            })?;
        let stdio = Stdio {
            stdin: forked.stdin,
            stdout: forked.stdout,
            stderr: forked.stderr,
        };
        Self::take_over(forked.pid, Handle::Forked(pidfd), stdio, slot, confinement, label).await
    }

    async fn take_over<W, R, E>(
        pid: u32,
        handle: Handle,
        stdio: Stdio<W, R, E>,
        slot: PathBuf,
        confinement: Confinement,
        label: String,
    ) -> Result<Arc<ShimProcess>, String>
    where
        W: AsyncWrite + Unpin + Send + 'static,
        R: AsyncRead + Unpin + Send + 'static,
        E: AsyncRead + Unpin + Send + 'static,
    {
        let Stdio {
            stdin,
            mut stdout,
            stderr,
        } = stdio;
        let (death, _) = tokio::sync::watch::channel(None);
        let (outbox, frames) = mpsc::unbounded_channel();
        let process = Arc::new(ShimProcess {
            id: NEXT_PROCESS.fetch_add(1, Ordering::Relaxed),
            pid,
            slot,
            confinement,
            outbox,
            pending: Mutex::new(HashMap::new()),
            init_logs: Mutex::new(None),
            ready: Mutex::new(None),
            next_id: AtomicU32::new(1),
            alive: AtomicBool::new(true),
            answered: AtomicBool::new(false),
            unexpected_frame: AtomicBool::new(false),
            first_answer: tokio::sync::Notify::new(),
            taken_over: std::time::Instant::now(),
            heard_ms: AtomicU64::new(0),
            handle: Mutex::new(Some(handle)),
            death,
            js_heap_mb: AtomicU32::new(0),
            heap_exhausted: Arc::new(AtomicBool::new(false)),
            log_budget: Arc::default(),
            artifact: Mutex::new(None),
            claim: Mutex::new(None),
        });
        let instance = process.id;
        tokio::spawn(frame::write_queued(stdin, frames));
        tokio::spawn(copy_stderr(
            stderr,
            instance,
            label,
            process.heap_exhausted.clone(),
            process.log_budget.clone(),
        ));
        let hello = match tokio::time::timeout(Duration::from_secs(20), frame::read(&mut stdout)).await {
            Ok(Ok(Some(f))) if f.kind == kind::HELLO => f,
            Ok(Ok(Some(f))) => return Err(format!("shim sent frame {:?} before hello", f.kind as char)),
            Ok(Ok(None)) => return Err(process.exit_reason("shim exited before saying hello")),
            Ok(Err(e)) => return Err(format!("reading shim hello: {e}")),
            Err(_) => {
                process.kill();
                return Err("shim did not say hello within 20 s".into());
            }
        };
        tracing::debug!(instance, hello = %String::from_utf8_lossy(&hello.payload), "shim started");
        let reader = process.clone();
        tokio::spawn(async move { reader.read_loop(BufReader::with_capacity(READ_BUFFER, stdout)).await });
        Ok(process)
    }

    /// Its memory limit in bytes if the kernel killed it (or a process of
    /// its sandbox) for going over it; only asked of an instance that ended
    /// on its own.
    fn out_of_memory(&self) -> Option<u64> {
        if !self.is_alive() {
            return None; // stopped by the server
        }
        self.confinement.cgroup.as_ref()?.out_of_memory()
    }

    /// Records the heap a Node shim was started with, for the message of
    /// its death if V8 runs out of it.
    pub fn set_js_heap_mb(&self, mb: u32) {
        self.js_heap_mb.store(mb, Ordering::Relaxed);
    }

    fn exit_reason(&self, what: &str) -> String {
        let status = match self.handle.lock().unwrap().as_mut() {
            Some(Handle::Child(child)) => child.try_wait().ok().flatten(),
            _ => None,
        };
        match status {
            Some(status) => format!("{what} ({status})"),
            None => what.to_string(),
        }
    }

    async fn read_loop<R: AsyncRead + Unpin>(self: Arc<Self>, mut stdout: BufReader<R>) {
        let reason = loop {
            match frame::read(&mut stdout).await {
                Ok(Some(f)) => self.dispatch(f),
                Ok(None) => break "instance exited".to_string(),
                Err(e) => break format!("instance protocol error: {e}"),
            }
        };
        // Give the exit status a moment to be known for the message.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let reason = match self.out_of_memory() {
            Some(limit) => format!(
                "instance ran out of memory: the kernel killed it at its limit of {} MB (the function's memory_mb)",
                limit >> 20
            ),
            None if self.heap_exhausted.load(Ordering::Relaxed) => format!(
                "instance ran out of memory: its JavaScript heap reached its limit of {} MB \
                 (three quarters of the function's memory_mb, rounded down to a power of two)",
                self.js_heap_mb.load(Ordering::Relaxed)
            ),
            None => self.exit_reason(&reason),
        };
        self.mark_dead(reason);
    }

    fn dispatch(&self, f: frame::Frame) {
        match f.kind {
            kind::OUTPUT => {
                let Some(pending) = self.pending.lock().unwrap().remove(&f.id) else {
                    return;
                };
                let logs_truncated = pending.logs.truncated();
                let result = parse_output(f.payload).map(|(head, body)| Output {
                    status: head.status,
                    headers: head.headers,
                    body,
                    logs: pending.logs.into_logs(),
                    logs_truncated,
                });
                let _ = pending.reply.send(result.map_err(|e| format!("{BAD_OUTPUT}: {e}")));
                if !self.answered.load(Ordering::Relaxed) {
                    self.answered.store(true, Ordering::Release);
                    self.first_answer.notify_waiters();
                }
            }
            kind::LOG => {
                let Some((stream, text)) = log_payload(&f.payload) else {
                    return;
                };
                match self.pending.lock().unwrap().get_mut(&f.id) {
                    Some(p) => p.logs.push(stream, text),
                    None => {
                        // Output of no call (the handler's import, a thread of its)
                        // goes to the server's log, one line of it at most, within
                        // its budget; before the first call, to that call's output too.
                        if let Some(init) = self.init_logs.lock().unwrap().as_mut() {
                            init.push(stream, text.clone());
                        }
                        let line = log_line(text.trim_end());
                        if logs_within(&self.log_budget, self.id, line.len()) {
                            tracing::info!(target: "sless::function", instance = self.id, "{line}")
                        }
                    }
                }
            }
            kind::READY => {
                let result = serde_json::from_slice::<ReadyMsg>(&f.payload)
                    .map_err(|e| format!("bad ready frame: {e}"))
                    .and_then(|m| {
                        if m.ok {
                            Ok(())
                        } else {
                            Err(clip(m.error, LOG_CAP_BYTES))
                        }
                    });
                if let Some(tx) = self.ready.lock().unwrap().take() {
                    let _ = tx.send(result);
                }
            }
            kind::KEEPALIVE => {
                let now = u64::try_from(self.taken_over.elapsed().as_millis()).unwrap_or(u64::MAX);
                self.heard_ms.store(now, Ordering::Relaxed);
            }
            // Said once: a handler can send such frames without end.
            other if !self.unexpected_frame.swap(true, Ordering::Relaxed) => {
                tracing::warn!(instance = self.id, kind = %(other as char), "unexpected frame from shim (later ones are not logged)")
            }
            _ => {}
        }
    }

    fn mark_dead(&self, reason: String) {
        if !self.alive.swap(false, Ordering::SeqCst) {
            return;
        }
        let pending: Vec<_> = self.pending.lock().unwrap().drain().collect();
        for (_, p) in pending {
            let _ = p.reply.send(Err(reason.clone()));
        }
        if let Some(tx) = self.ready.lock().unwrap().take() {
            let _ = tx.send(Err(reason.clone()));
        }
        let _ = self.death.send(Some(reason));
        self.claim.lock().unwrap().take();
    }

    /// Resolves once the instance has answered a call (at once if it has).
    pub async fn answered_once(&self) {
        let notified = self.first_answer.notified();
        tokio::pin!(notified);
        // Registered before the check, so an answer in between still wakes it.
        notified.as_mut().enable();
        if !self.answered.load(Ordering::Acquire) {
            notified.await;
        }
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// How long since its last KEEPALIVE (or since it was taken over).
    pub fn silent_for(&self) -> Duration {
        let heard = Duration::from_millis(self.heard_ms.load(Ordering::Relaxed));
        self.taken_over.elapsed().saturating_sub(heard)
    }

    /// Resolves when the process has died, with the reason.
    pub fn died(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.death.subscribe()
    }

    /// Queues a frame for the writer task. A write that fails means the
    /// process is gone, which its reader notices and reports.
    pub(crate) fn send(&self, frame: Bytes) -> Result<(), String> {
        self.outbox
            .send(frame)
            .map_err(|_| "instance is not running".to_string())
    }

    /// Sends LOAD and waits for READY.
    pub async fn load(&self, load: &serde_json::Value, timeout: Duration) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        *self.ready.lock().unwrap() = Some(tx);
        *self.init_logs.lock().unwrap() = Some(CappedLogs::default());
        let payload = serde_json::to_vec(load).map_err(|e| e.to_string())?;
        self.send(frame::encode(kind::LOAD, 0, &payload))?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err("instance went away while loading".into()),
            Err(_) => Err(format!("loading the handler took longer than {}s", timeout.as_secs())),
        }
    }

    /// Sends one invocation and waits for its output (no timeout here: the
    /// caller owns the deadline and kills the process when it passes).
    pub async fn invoke(&self, mut frame: bytes::BytesMut) -> Result<Output, String> {
        if !self.is_alive() {
            return Err("instance is not running".into());
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let logs = self.init_logs.lock().unwrap().take().unwrap_or_default();
        self.pending.lock().unwrap().insert(id, Pending { reply: tx, logs });
        frame::set_id(&mut frame, id);
        if let Err(e) = self.send(frame.freeze()) {
            self.pending.lock().unwrap().remove(&id);
            return Err(e);
        }
        rx.await.unwrap_or_else(|_| Err("instance went away".into()))
    }

    /// Kills the process and waits until it has exited.
    pub async fn stop(&self) {
        let handle = self.handle.lock().unwrap().take();
        self.mark_dead("instance stopped".into());
        match handle {
            Some(Handle::Child(mut child)) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
            Some(Handle::Forked(pidfd)) => {
                let _ = rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL);
                // A pidfd turns readable when its process has ended.
                let _ = tokio::task::spawn_blocking(move || {
                    use rustix::event::{poll, PollFd, PollFlags, Timespec};
                    let limit = Timespec { tv_sec: 5, tv_nsec: 0 };
                    poll(&mut [PollFd::new(&pidfd, PollFlags::IN)], Some(&limit))
                })
                .await;
            }
            None => {}
        }
    }

    /// Kills the process tree; in-flight invocations fail.
    pub fn kill(&self) {
        if let Some(handle) = self.handle.lock().unwrap().as_mut() {
            handle.kill();
        }
        self.mark_dead("instance stopped".into());
    }
}

impl ShimProcess {
    /// A pidfd of a fork of the zygote (none for a sandbox of its own, or
    /// once killed): the way into its namespaces.
    pub fn pidfd(&self) -> Option<OwnedFd> {
        match self.handle.lock().unwrap().as_ref() {
            Some(Handle::Forked(pidfd)) => pidfd.try_clone().ok(),
            _ => None,
        }
    }

    /// Holds `claim` until it is dead (at once if it is).
    pub fn hold_claim(&self, claim: super::room::Claim) {
        let mut held = self.claim.lock().unwrap();
        if self.is_alive() {
            *held = Some(claim);
        }
    }

    /// Keeps the artifact mounted at its `/code` for as long as it runs.
    pub fn hold_artifact(&self, hold: super::code_mount::ArtifactHold) {
        *self.artifact.lock().unwrap() = Some(hold);
    }
}

impl Drop for ShimProcess {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.get_mut().unwrap().as_mut() {
            handle.kill();
        }
        let _ = std::fs::remove_dir_all(&self.slot);
        // Secret files kept beside the slot (no scratch tmpfs of its own).
        let _ = std::fs::remove_dir_all(self.slot.with_extension("secrets"));
    }
}

/// How the server holds a shim process.
enum Handle {
    /// Its own child (a sandbox it started).
    Child(Child),
    /// A fork of the zygote (pid 1 of its pid namespace: killing it ends
    /// everything the instance started).
    Forked(OwnedFd),
}

impl Handle {
    fn kill(&mut self) {
        match self {
            Handle::Child(child) => {
                let _ = child.start_kill();
            }
            Handle::Forked(pidfd) => {
                let _ = rustix::process::pidfd_send_signal(&*pidfd, rustix::process::Signal::KILL);
            }
        }
    }
}

/// The three standard streams of a shim, from the server's side.
struct Stdio<W, R, E> {
    stdin: W,
    stdout: R,
    stderr: E,
}

/// Longest line of an instance's stderr that reaches the server's log: the
/// rest of a longer line is dropped, so output without newlines (raw writes
/// to fd 1 or 2, which the shims cannot capture) holds at most this much
/// memory per instance.
pub const STDERR_LINE_CAP: usize = 16 * 1024;

/// Copies an instance's stderr to the server's log line by line, and
/// notes V8's last words when it runs out of heap.
async fn copy_stderr<E: AsyncRead + Unpin>(
    mut stderr: E,
    instance: u64,
    label: String,
    heap_exhausted: Arc<AtomicBool>,
    budget: Arc<LogBudget>,
) {
    let emit = |line: &str| {
        if line.contains(JS_HEAP_EXHAUSTED) {
            heap_exhausted.store(true, Ordering::Relaxed);
        }
        if logs_within(&budget, instance, line.len()) {
            tracing::info!(target: "sless::function", instance, function = %label, "{}", one_line(line))
        }
    };
    let mut lines = LineCutter::default();
    let mut chunk = vec![0; 16 * 1024];
    loop {
        match stderr.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => lines.push(&chunk[..n], &emit),
        }
    }
    lines.finish(&emit);
}

/// Whether a line of an instance's output outside calls goes to the
/// server's log; when it does after lines were dropped, says so first.
fn logs_within(budget: &LogBudget, instance: u64, len: usize) -> bool {
    match budget.admit(len) {
        Verdict::Drop => false,
        Verdict::Log { dropped_before: 0 } => true,
        Verdict::Log { dropped_before } => {
            tracing::warn!(
                target: "sless::function",
                instance,
                dropped = dropped_before,
                "{dropped_before} lines of this instance's output outside calls were not logged: over its budget of the server's log"
            );
            true
        }
    }
}

/// Splits bytes into lines of at most [`STDERR_LINE_CAP`] bytes: a longer
/// line goes out when it reaches the cap, marked, and its rest is dropped
/// up to its newline.
#[derive(Default)]
struct LineCutter {
    line: Vec<u8>,
    /// The current line was cut: drop bytes until its newline.
    dropping: bool,
}

impl LineCutter {
    fn push(&mut self, mut bytes: &[u8], emit: &impl Fn(&str)) {
        while let Some(end) = bytes.iter().position(|&b| b == b'\n') {
            self.take(&bytes[..end], emit);
            if !self.dropping {
                self.emit(emit, "");
            }
            self.dropping = false;
            bytes = &bytes[end + 1..];
        }
        self.take(bytes, emit);
    }

    fn take(&mut self, part: &[u8], emit: &impl Fn(&str)) {
        if self.dropping {
            return;
        }
        let room = STDERR_LINE_CAP - self.line.len();
        if part.len() < room {
            self.line.extend_from_slice(part);
        } else {
            self.line.extend_from_slice(&part[..room]);
            self.emit(emit, &format!(" [sless: line cut at {STDERR_LINE_CAP} bytes]"));
            self.dropping = true;
        }
    }

    fn emit(&mut self, emit: &impl Fn(&str), note: &str) {
        let line = self.line.strip_suffix(b"\r").unwrap_or(&self.line);
        emit(&format!("{}{note}", String::from_utf8_lossy(line)));
        self.line.clear();
    }

    /// The last line, when the stream ended without a newline.
    fn finish(mut self, emit: &impl Fn(&str)) {
        if !self.line.is_empty() {
            self.emit(emit, "");
        }
    }
}

/// Bytes read from a shim at once: many small frames arrive together under load.
const READ_BUFFER: usize = 64 * 1024;

pub(crate) fn parse_output(payload: Bytes) -> std::io::Result<(OutputHead, Bytes)> {
    let (head, body) = frame::split_head(payload)?;
    let head: OutputHead =
        serde_json::from_slice(&head).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    Ok((head, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(head: &str, body: &[u8]) -> Bytes {
        let mut p = (head.len() as u32).to_be_bytes().to_vec();
        p.extend_from_slice(head.as_bytes());
        p.extend_from_slice(body);
        Bytes::from(p)
    }

    fn cut(chunks: &[&[u8]]) -> Vec<String> {
        let seen = std::cell::RefCell::new(Vec::new());
        let emit = |line: &str| seen.borrow_mut().push(line.to_string());
        let mut lines = LineCutter::default();
        for chunk in chunks {
            lines.push(chunk, &emit);
        }
        lines.finish(&emit);
        seen.into_inner()
    }

    #[test]
    fn stderr_lines_are_split_and_cut_at_the_cap() {
        assert_eq!(cut(&[b"a\nb", b"c\r\n", b"\ntail"]), ["a", "bc", "", "tail"]);
        let long = vec![b'x'; STDERR_LINE_CAP * 3];
        let lines = cut(&[&long, &long, b"\nnext\n"]);
        assert_eq!(
            lines.len(),
            2,
            "{:?}",
            lines.iter().map(String::len).collect::<Vec<_>>()
        );
        assert!(lines[0].starts_with(&"x".repeat(STDERR_LINE_CAP)));
        assert!(
            lines[0].ends_with("[sless: line cut at 16384 bytes]"),
            "{}",
            &lines[0][STDERR_LINE_CAP..]
        );
        assert_eq!(lines[1], "next");
        // A line of exactly the cap is cut too (the marker says so); one under is whole.
        let under = vec![b'y'; STDERR_LINE_CAP - 1];
        assert_eq!(cut(&[&under, b"\n"]), [String::from_utf8(under).unwrap()]);
    }

    /// V8's last words mark the instance (its record then says its heap ran
    /// out); any other stderr does not.
    #[tokio::test]
    async fn v8_running_out_of_heap_marks_the_instance() {
        let said = |stderr: &'static [u8]| async move {
            let exhausted = Arc::new(AtomicBool::new(false));
            copy_stderr(stderr, 1, "ns/f".into(), exhausted.clone(), Arc::default()).await;
            exhausted.load(Ordering::Relaxed)
        };
        let fatal = b"<--- Last few GCs --->\n\nFATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory\n";
        assert!(said(fatal).await);
        assert!(!said(b"RangeError: Invalid array length\nexited\n").await);
    }

    #[test]
    fn output_headers_keep_their_order_and_may_be_absent() {
        let (head, body) = parse_output(payload(
            r#"{"status":201,"headers":{"x-b":"2","content-type":"text/plain","x-a":"1"}}"#,
            b"hi",
        ))
        .unwrap();
        assert_eq!(head.status, 201);
        let names: Vec<_> = head.headers.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(names, ["x-b=2", "content-type=text/plain", "x-a=1"]);
        assert_eq!(&body[..], b"hi");
        let (head, _) = parse_output(payload(r#"{"status":200}"#, b"")).unwrap();
        assert!(head.headers.is_empty());
        assert!(parse_output(payload(r#"{"status":200,"headers":{"a":1}}"#, b"")).is_err());
        // A list is a header per value (Set-Cookie), in order; only strings.
        let (head, _) = parse_output(payload(
            r#"{"status":200,"headers":{"set-cookie":["a=1","b=2"],"x":"y","x-m":[]}}"#,
            b"",
        ))
        .unwrap();
        let names: Vec<_> = head.headers.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(names, ["set-cookie=a=1", "set-cookie=b=2", "x=y"]);
        for bad in [r#"["a",1]"#, r#"[["a"]]"#, r#"{"a":"b"}"#, "null"] {
            let head = format!(r#"{{"status":200,"headers":{{"x":{bad}}}}}"#);
            assert!(parse_output(payload(&head, b"")).is_err(), "{bad}");
        }
    }

    /// An HTTP response's header map panics past some 24 000 names.
    #[test]
    fn an_answer_has_at_most_1000_headers() {
        let head = |n: usize| {
            let headers: serde_json::Map<String, serde_json::Value> =
                (0..n).map(|i| (format!("x{i}"), "".into())).collect();
            serde_json::json!({"status": 200, "headers": headers}).to_string()
        };
        let (kept, _) = parse_output(payload(&head(MAX_RESPONSE_HEADERS), b"")).unwrap();
        assert_eq!(kept.headers.len(), MAX_RESPONSE_HEADERS);
        // Values of a list count one each.
        let values: Vec<String> = (0..=MAX_RESPONSE_HEADERS).map(|i| format!("c{i}=1")).collect();
        let listed = serde_json::json!({"status": 200, "headers": {"set-cookie": values}}).to_string();
        let error = parse_output(payload(&listed, b"")).err().unwrap().to_string();
        assert!(error.contains("more than 1000 headers"), "{error}");
        let error = parse_output(payload(&head(30_000), b"")).err().unwrap();
        assert!(error.to_string().contains("more than 1000 headers"), "{error}");
    }

    /// Output is kept per stream in chunks, each charged against the cap
    /// beside its text: empty writes, or a stream switched at every byte,
    /// cannot make chunks without end.
    #[test]
    fn handler_output_is_merged_by_stream_and_its_chunks_count() {
        let mut logs = CappedLogs::default();
        logs.push(OutputStream::Stdout, "a\n".into());
        logs.push(OutputStream::Stdout, "b\n".into());
        logs.push(OutputStream::Stderr, "c".into());
        logs.push(OutputStream::Stdout, String::new());
        logs.push(OutputStream::Stderr, "d\n".into());
        let kept: Vec<_> = logs.into_logs().into_iter().map(|c| (c.stream, c.text)).collect();
        assert_eq!(
            kept,
            [
                (OutputStream::Stdout, "a\nb\n".to_string()),
                (OutputStream::Stderr, "cd\n".to_string())
            ]
        );

        let mut empty = CappedLogs::default();
        for _ in 0..1_000_000 {
            empty.push(OutputStream::Stdout, String::new());
        }
        assert!(empty.into_logs().is_empty());

        let mut switching = CappedLogs::default();
        for i in 0..1_000_000 {
            let stream = if i % 2 == 0 {
                OutputStream::Stdout
            } else {
                OutputStream::Stderr
            };
            switching.push(stream, "x".into());
        }
        assert!(switching.truncated());
        assert!(switching.into_logs().len() <= LOG_CAP_BYTES / LOG_CHUNK_COST + 1);
    }
}
