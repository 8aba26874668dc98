//! One instance on its own, outside the local driver's pools: what
//! `sless instance` runs in a pod of the Kubernetes driver. The shim is
//! started as the local driver starts it ([`ShimProcess`], the same frames)
//! but without a sandbox of its own (the pod is the sandbox), loaded from
//! the artifact directory in place, and fed invocation frames by its
//! caller.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use sless_api::Runtime;

use crate::launcher::{NODE_FDS, NODE_SHIM, PYTHON_SHIM};
use crate::pool::StartFailure;
use crate::process::{Output, ShimProcess};

/// What to start and load.
#[derive(Debug, Clone)]
pub struct StandaloneSpec {
    pub runtime: Runtime,
    /// The interpreter of `runtime` (python3.11 or node).
    pub program: String,
    /// A writable directory for the shims' files.
    pub work_dir: PathBuf,
    /// The unpacked artifact (code and dependencies), loaded in place.
    pub code_dir: PathBuf,
    pub entrypoint: String,
    pub env: BTreeMap<String, String>,
    pub namespace: String,
    pub function: String,
    pub version: u64,
    pub concurrency: u32,
    /// The function's memory_mb, which its context reports (Lambda's
    /// `memory_limit_in_mb`); None: not known.
    pub memory_mb: Option<u32>,
    pub max_output_bytes: usize,
    pub load_timeout: Duration,
    /// The heap of a Node shim, MB ([`crate::launcher::node_heap_mb`]);
    /// None leaves V8 to size it from the pod's memory.
    pub node_heap_mb: Option<u32>,
    /// The shim serves the gateways' connections itself (a serving pod);
    /// `None`: the caller relays calls over the pipes.
    pub serve: Option<ServeSpec>,
}

/// What a shim that serves connections itself is given (PROTOCOL.md, "The
/// shim serves the connections itself").
#[derive(Debug, Clone)]
pub struct ServeSpec {
    /// The bound, listening socket: the shim gets a copy at its start.
    pub listener: Arc<std::os::fd::OwnedFd>,
    /// The HELLO each connection opens with.
    pub hello: serde_json::Value,
    /// A call not answered within this long ends the shim (exit 1).
    pub timeout: Duration,
}

/// The lowest descriptor a shim finds its listening socket on: above the
/// frame pipes Node's start-up shell moves to 3 and 4.
const SERVE_FD_MIN: i32 = 10;

/// A loaded shim serving one function.
pub struct Standalone {
    process: Arc<ShimProcess>,
}

/// A started shim that has not loaded a handler yet: a generic instance
/// waiting for the function it will serve (the Kubernetes driver's warm
/// pods), as the local driver's warm pool keeps one.
pub struct GenericShim {
    process: Arc<ShimProcess>,
    runtime: Runtime,
    /// The descriptor the shim was given its listening socket on, if any.
    serve_fd: Option<i32>,
}

impl GenericShim {
    /// Starts the shim of `spec.runtime` in `spec.work_dir` (its
    /// `code_dir` need not exist yet: LOAD moves the shim there).
    pub async fn spawn(spec: &StandaloneSpec) -> Result<GenericShim, String> {
        crate::frame::set_max_frame(spec.max_output_bytes);
        let shims = spec.work_dir.join("shims");
        std::fs::create_dir_all(&shims).map_err(|e| format!("creating {shims:?}: {e}"))?;
        let (file, text) = match spec.runtime {
            Runtime::Python311 => ("sless_shim.py", PYTHON_SHIM),
            Runtime::Nodejs20 => ("sless_shim.js", NODE_SHIM),
        };
        let shim = shims.join(file);
        std::fs::write(&shim, text).map_err(|e| format!("writing {shim:?}: {e}"))?;
        let mut command = match spec.runtime {
            Runtime::Python311 => {
                let mut command = tokio::process::Command::new(&spec.program);
                command.args(["-u", "-B"]).arg(&shim);
                command
            }
            // As the launcher starts it: the frame pipes on fds 3 and 4.
            Runtime::Nodejs20 => {
                let mut command = tokio::process::Command::new("/bin/sh");
                command.args(["-c", NODE_FDS, "sless-shim", &spec.program]);
                command.args(spec.node_heap_mb.map(crate::launcher::node_heap_flag));
                command.arg(&shim);
                command
            }
        };
        // The handler sees its own env only (from LOAD), not the instance's.
        command
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &spec.work_dir)
            .env("LANG", "C.UTF-8")
            .current_dir(&spec.work_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let (child, serve_fd) = spawn_with_listener(&mut command, spec)?;
        // The shim's slot is the work dir's, not the code: nothing is removed on drop.
        let slot = spec.work_dir.join("slot");
        let _ = std::fs::create_dir_all(&slot);
        // No confinement of its own: the pod is the sandbox.
        let confinement = crate::confine::Confinement::default();
        let process = ShimProcess::start(
            child,
            slot,
            confinement,
            format!("{}/{}", spec.namespace, spec.function),
        )
        .await?;
        Ok(GenericShim {
            process,
            runtime: spec.runtime,
            serve_fd,
        })
    }

    /// Loads the handler `spec` names from its `code_dir`; the user's load
    /// error is [`StartFailure::Load`]. The runtime must be the shim's.
    pub async fn load(self, spec: &StandaloneSpec) -> Result<Standalone, StartFailure> {
        if spec.runtime != self.runtime {
            self.process.kill();
            return Err(StartFailure::Start(format!(
                "a {} shim cannot load a {} function",
                self.runtime.as_str(),
                spec.runtime.as_str()
            )));
        }
        let code = spec.code_dir.display().to_string();
        let path = match spec.runtime {
            Runtime::Python311 => vec![format!("{code}/.deps"), code.clone()],
            Runtime::Nodejs20 => vec![format!("{code}/node_modules")],
        };
        let mut load = serde_json::json!({
            "code_dir": code,
            "path": path,
            "entrypoint": spec.entrypoint,
            "env": spec.env,
            "function": spec.function,
            "namespace": spec.namespace,
            "version": spec.version,
            "concurrency": spec.concurrency,
            "max_output_bytes": spec.max_output_bytes,
        });
        if let Some(memory_mb) = spec.memory_mb {
            load["memory_mb"] = memory_mb.into();
        }
        if let Some(serve) = &spec.serve {
            let Some(fd) = self.serve_fd else {
                self.process.kill();
                return Err(StartFailure::Start(
                    "the shim was started without a listening socket".into(),
                ));
            };
            load["serve"] = serde_json::json!({
                "fd": fd,
                "hello": serve.hello,
                "timeout_ms": u64::try_from(serve.timeout.as_millis()).unwrap_or(u64::MAX),
            });
        }
        if let Err(e) = self.process.load(&load, spec.load_timeout).await {
            self.process.kill();
            return Err(StartFailure::Load(e));
        }
        Ok(Standalone { process: self.process })
    }

    /// Resolves with the reason once the shim has died.
    pub fn died(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.process.died()
    }
}

impl Standalone {
    /// Starts the shim and loads the handler; the user's load error is
    /// [`StartFailure::Load`].
    pub async fn start(spec: &StandaloneSpec) -> Result<Standalone, StartFailure> {
        GenericShim::spawn(spec)
            .await
            .map_err(StartFailure::Start)?
            .load(spec)
            .await
    }

    /// Sends one INVOKE frame (its id is set here) and waits for the answer.
    pub async fn invoke(&self, frame: bytes::BytesMut) -> Result<Output, String> {
        self.process.invoke(frame).await
    }

    pub fn is_alive(&self) -> bool {
        self.process.is_alive()
    }

    /// How long since a shim that serves connections itself last said it
    /// is not held (KEEPALIVE, every second).
    pub fn silent_for(&self) -> Duration {
        self.process.silent_for()
    }

    /// Resolves with the reason once the shim has died.
    pub fn died(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.process.died()
    }

    /// Tells a shim that serves connections itself to exit once no call
    /// has been in flight for `quiet` (it goes on answering meanwhile).
    pub fn drain(&self, quiet: Duration) -> Result<(), String> {
        let quiet_ms = u64::try_from(quiet.as_millis()).unwrap_or(u64::MAX);
        let payload = serde_json::to_vec(&serde_json::json!({ "quiet_ms": quiet_ms })).expect("plain JSON");
        self.process
            .send(crate::frame::encode(crate::frame::kind::DRAIN, 0, &payload))
    }

    /// Stops the shim and waits for it to exit.
    pub async fn stop(&self) {
        self.process.stop().await
    }
}

/// Starts `command`, handing it a copy of `spec`'s listening socket if it
/// serves, on a descriptor of [`SERVE_FD_MIN`] or above (which it returns):
/// the copy is inheritable only for the spawn, and this process starts no
/// other child meanwhile.
fn spawn_with_listener(
    command: &mut tokio::process::Command,
    spec: &StandaloneSpec,
) -> Result<(tokio::process::Child, Option<i32>), String> {
    use std::os::fd::AsRawFd;
    let starting = || format!("starting {}", spec.program);
    let Some(serve) = &spec.serve else {
        let child = command.spawn().map_err(|e| format!("{}: {e}", starting()))?;
        return Ok((child, None));
    };
    let copy = rustix::io::fcntl_dupfd_cloexec(&*serve.listener, SERVE_FD_MIN)
        .map_err(|e| format!("copying the listening socket: {e}"))?;
    rustix::io::fcntl_setfd(&copy, rustix::io::FdFlags::empty())
        .map_err(|e| format!("handing over the listening socket: {e}"))?;
    let child = command.spawn().map_err(|e| format!("{}: {e}", starting()))?;
    // Dropping the copy closes it here; the child holds its own.
    Ok((child, Some(copy.as_raw_fd())))
}

/// Fetches the artifact `fingerprint` with tarball `digest` from `store`
/// into `dir`, checking the digest (what a pod's init container does).
pub async fn fetch_artifact(
    store: Arc<dyn object_store::ObjectStore>,
    dir: &Path,
    fingerprint: &str,
    digest: &str,
) -> Result<(), String> {
    crate::artifacts::SharedArtifacts::new(store)
        .fetch(dir, &sless_driver::Fingerprint::from_stored(fingerprint), digest)
        .await
}

/// Makes `dir` hold the artifact tarball that `chunks` bring after
/// checking that its sha256 is `digest` (a generic instance fetches it
/// from a presigned URL); it is never whole in memory.
pub async fn unpack_artifact<S, E>(chunks: S, dir: &Path, digest: &str) -> Result<(), String>
where
    S: futures::Stream<Item = Result<bytes::Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    crate::artifacts::unpack_checked(chunks, dir, digest).await
}

/// The frames answering invocation `id` over TCP (`sless instance` to a
/// gateway): the handler's LOG frames, then OUTPUT, whose head also says
/// whether the logs were cut (`logs_truncated`).
pub fn answer_frames(id: u32, output: &Output) -> bytes::Bytes {
    use crate::frame::{encode, encode_with_head, kind, set_id};
    /// The headers as a JSON object, in their order.
    struct Headers<'a>(&'a [(String, String)]);
    impl serde::Serialize for Headers<'_> {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.collect_map(self.0.iter().map(|(k, v)| (k, v)))
        }
    }
    #[derive(serde::Serialize)]
    struct Head<'a> {
        status: u16,
        headers: Headers<'a>,
        logs_truncated: bool,
    }
    let mut out = bytes::BytesMut::new();
    for chunk in &output.logs {
        let stream = match chunk.stream {
            sless_driver::OutputStream::Stdout => 1u8,
            sless_driver::OutputStream::Stderr => 2u8,
        };
        let mut payload = Vec::with_capacity(1 + chunk.text.len());
        payload.push(stream);
        payload.extend_from_slice(chunk.text.as_bytes());
        out.extend_from_slice(&encode(kind::LOG, id, &payload));
    }
    let head = Head {
        status: output.status,
        headers: Headers(&output.headers),
        logs_truncated: output.logs_truncated,
    };
    let mut frame = encode_with_head(kind::OUTPUT, &head, &output.body);
    set_id(&mut frame, id);
    out.extend_from_slice(&frame);
    out.freeze()
}

/// Why an invocation sent over TCP has no answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "error", content = "reason", rename_all = "lowercase")]
pub enum Unanswered {
    /// The function's timeout passed; the instance restarts.
    Timeout(String),
    /// The shim died while handling it; the instance restarts.
    Crashed(String),
    /// The handler ran to its end, but its answer is one the gateway
    /// cannot send (more than [`crate::process::MAX_RESPONSE_HEADERS`]
    /// headers, a malformed output frame); the instance goes on.
    #[serde(rename = "bad_answer")]
    BadAnswer(String),
}

impl Unanswered {
    /// Why an invocation that failed for `reason` (the instance's
    /// `invoke` error) has no answer.
    pub fn of_failure(reason: String) -> Unanswered {
        if reason.starts_with(crate::process::BAD_OUTPUT) {
            Unanswered::BadAnswer(reason)
        } else {
            Unanswered::Crashed(reason)
        }
    }

    /// Whether the instance restarts after it.
    pub fn restarts(&self) -> bool {
        !matches!(self, Unanswered::BadAnswer(_))
    }
}

/// The ERROR frame of invocation `id`.
pub fn error_frame(id: u32, why: &Unanswered) -> bytes::Bytes {
    crate::frame::encode(
        crate::frame::kind::ERROR,
        id,
        &serde_json::to_vec(why).expect("plain JSON"),
    )
}

/// What a gateway reads back for one invocation over TCP.
#[derive(Debug)]
pub enum Answer {
    Output(Output),
    Unanswered(Unanswered),
}

/// Collects the answer of one invocation from the frames a gateway reads:
/// LOG frames accumulate (up to [`crate::process::LOG_CAP_BYTES`], as the
/// local driver keeps them), OUTPUT or ERROR completes it (`Some`; an
/// OUTPUT whose head cannot be sent on is [`Unanswered::BadAnswer`]).
#[derive(Debug, Default)]
pub struct AnswerReader {
    logs: crate::process::CappedLogs,
}

impl AnswerReader {
    pub fn push(&mut self, frame: crate::frame::Frame) -> Result<Option<Answer>, String> {
        use crate::frame::kind;
        match frame.kind {
            kind::LOG => {
                if let Some((stream, text)) = crate::process::log_payload(&frame.payload) {
                    self.logs.push(stream, text);
                }
                Ok(None)
            }
            kind::OUTPUT => {
                // A whole frame whose head the gateway cannot take (more
                // than 1000 headers, say): this call's answer is bad, the
                // connection and the instance are fine.
                let (head, body) = match crate::process::parse_output(frame.payload) {
                    Ok(parsed) => parsed,
                    Err(e) => {
                        let reason = format!("{}: {e}", crate::process::BAD_OUTPUT);
                        return Ok(Some(Answer::Unanswered(Unanswered::BadAnswer(reason))));
                    }
                };
                let logs = std::mem::take(&mut self.logs);
                Ok(Some(Answer::Output(Output {
                    status: head.status,
                    headers: head.headers,
                    body,
                    logs_truncated: head.logs_truncated || logs.truncated(),
                    logs: logs.into_logs(),
                })))
            }
            kind::ERROR => serde_json::from_slice(&frame.payload)
                .map(|why| Some(Answer::Unanswered(why)))
                .map_err(|e| format!("bad error frame: {e}")),
            other => Err(format!("unexpected frame {:?} from an instance", other as char)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sless_driver::{LogChunk, OutputStream};

    async fn read_back(bytes: bytes::Bytes) -> Answer {
        let mut reader = &bytes[..];
        let mut answer = AnswerReader::default();
        loop {
            let frame = crate::frame::read(&mut reader).await.unwrap().unwrap();
            if let Some(done) = answer.push(frame).unwrap() {
                return done;
            }
        }
    }

    #[tokio::test]
    async fn an_answer_round_trips_with_its_logs_and_headers_in_order() {
        let output = Output {
            status: 201,
            headers: vec![("x-b".into(), "2".into()), ("content-type".into(), "text/plain".into())],
            body: bytes::Bytes::from_static(b"made"),
            logs: vec![
                LogChunk {
                    stream: OutputStream::Stdout,
                    text: "out\n".into(),
                },
                LogChunk {
                    stream: OutputStream::Stderr,
                    text: "err\n".into(),
                },
            ],
            logs_truncated: true,
        };
        let Answer::Output(got) = read_back(answer_frames(7, &output)).await else {
            panic!("an output")
        };
        assert_eq!(got.status, 201);
        assert_eq!(got.headers, output.headers);
        assert_eq!(&got.body[..], b"made");
        assert_eq!(got.logs, output.logs);
        assert!(got.logs_truncated);
    }

    /// A Python function whose `handler.py` is `source`, in a work dir of
    /// its own named after `test` (removed by the test).
    fn python_spec(test: &str, source: &str) -> StandaloneSpec {
        let dir = std::env::temp_dir().join(format!("sless-{test}-{}", std::process::id()));
        let code = dir.join("code");
        std::fs::create_dir_all(&code).unwrap();
        std::fs::write(code.join("handler.py"), source).unwrap();
        StandaloneSpec {
            runtime: Runtime::Python311,
            program: "/usr/bin/python3.11".into(),
            work_dir: dir,
            code_dir: code,
            entrypoint: "handler.handle".into(),
            env: BTreeMap::new(),
            namespace: "ns".into(),
            function: "f".into(),
            version: 1,
            concurrency: 1,
            memory_mb: None,
            max_output_bytes: 1 << 20,
            load_timeout: Duration::from_secs(30),
            node_heap_mb: None,
            serve: None,
        }
    }

    /// `answered_once` (what a loaded instance's warm-pool refill waits
    /// for) resolves at the first answer, not before, and at once after.
    #[tokio::test]
    async fn a_shim_has_answered_once_only_from_its_first_answer_on() {
        let spec = python_spec("answered-once", "def handle(event, context):\n    return 1\n");
        let instance = Standalone::start(&spec).await.unwrap_or_else(|e| panic!("{e}"));
        let process = instance.process.clone();
        let waiting = tokio::spawn(async move { process.answered_once().await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "answered before any call");
        let header = serde_json::json!({"request_id": "r", "kind": "http", "method": "GET", "path": "",
            "query": "", "headers": {}});
        let invoke = crate::frame::encode_with_head(crate::frame::kind::INVOKE, &header, b"");
        let output = instance.invoke(invoke).await.unwrap();
        assert_eq!(&output.body[..], b"1");
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken by the first answer")
            .unwrap();
        tokio::time::timeout(Duration::from_secs(1), instance.process.answered_once())
            .await
            .expect("at once after it");
        instance.process.kill();
        let _ = std::fs::remove_dir_all(&spec.work_dir);
    }

    /// A handler's load error (its READY frame) is kept up to the cap of a
    /// call's output, 64 KiB, cut on a character boundary and marked: the
    /// shim cuts it at 64 Ki characters, which may be twice as many bytes.
    #[tokio::test]
    async fn a_load_error_is_kept_cut_to_64_kib() {
        let spec = python_spec("load-error", "raise RuntimeError('\\u00e9' * 40000)\n");
        let Some(StartFailure::Load(error)) = Standalone::start(&spec).await.err() else {
            panic!("the handler's import raises")
        };
        let _ = std::fs::remove_dir_all(&spec.work_dir);
        assert!(
            error.len() <= crate::process::LOG_CAP_BYTES,
            "{} bytes kept",
            error.len()
        );
        let head: String = error.chars().take(300).collect();
        assert!(error.contains("RuntimeError: \u{e9}\u{e9}"), "{head}");
        assert!(error.ends_with("\u{e9} [... cut]"), "not cut, or not marked: {head}");
    }

    /// A shim that serves its connections itself sends all of a call's
    /// output: the gateway keeps what the local driver would and says so.
    #[tokio::test]
    async fn a_gateway_keeps_at_most_the_cap_of_a_calls_output() {
        use crate::frame::{encode, encode_with_head, kind, set_id};
        let mut frames = bytes::BytesMut::new();
        let line = format!("{}\n", "x".repeat(999));
        for _ in 0..100 {
            let mut payload = vec![1u8];
            payload.extend_from_slice(line.as_bytes());
            frames.extend_from_slice(&encode(kind::LOG, 3, &payload));
        }
        let mut output = encode_with_head(kind::OUTPUT, &serde_json::json!({"status": 200, "headers": {}}), b"ok");
        set_id(&mut output, 3);
        frames.extend_from_slice(&output);
        let Answer::Output(got) = read_back(frames.freeze()).await else {
            panic!("an output")
        };
        assert!(got.logs_truncated, "100 000 bytes of output are more than the cap");
        let kept: usize = got.logs.iter().map(|chunk| chunk.text.len()).sum();
        assert!(kept <= crate::process::LOG_CAP_BYTES + 100, "kept {kept} bytes");
        assert!(got.logs.last().unwrap().text.contains("output capped"));
        assert_eq!(&got.body[..], b"ok");
    }

    #[tokio::test]
    async fn an_error_round_trips() {
        let why = Unanswered::Timeout("no answer within 3s".into());
        let Answer::Unanswered(got) = read_back(error_frame(9, &why)).await else {
            panic!("an error")
        };
        assert_eq!(got, why);
    }
}
