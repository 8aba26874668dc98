//! `sless instance` for real on 127.0.0.1: the artifact fetched from a
//! file:// object store and checked, the shim loaded, readiness only once
//! loaded, invocations over TCP with their captured output, and the ways
//! an instance ends (a timeout, one run, a handler that does not load, a
//! corrupt artifact).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use sless_driver::OutputStream;
use sless_driver_local::frame::{self, kind};
use sless_driver_local::standalone::{Answer, AnswerReader, Unanswered};

const HANDLER: &str = r#"
import time
def handle(event, context):
    print("hello from", context.function)
    if isinstance(event, dict) and event.get("sleep"):
        time.sleep(event["sleep"])
    if isinstance(event, dict) and event.get("many"):
        return {"statusCode": 200, "headers": {f"x-{i}": "" for i in range(1001)}, "body": "ok"}
    return {"statusCode": 201, "body": "made " + str(event.get("n") if isinstance(event, dict) else "")}
"#;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A store dir holding the artifact of `handler` as the driver stores it;
/// its fingerprint and digest.
fn store_with(store: &Path, file: &str, handler: &str) -> (String, String) {
    let code = tempfile::tempdir().unwrap();
    std::fs::write(code.path().join(file), handler).unwrap();
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()));
    tar.append_dir_all(".", code.path()).unwrap();
    let tarball = tar.into_inner().unwrap().finish().unwrap();
    let digest = hex::encode(Sha256::digest(&tarball));
    let fingerprint = "0123456789abcdef0123456789abcdef".to_string();
    let dir = store.join("artifacts").join(&fingerprint);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{digest}.tar.gz")), tarball).unwrap();
    (fingerprint, digest)
}

struct Instance {
    child: Child,
    frames: u16,
    ready: u16,
    _dirs: Vec<tempfile::TempDir>,
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `sless instance` on a fresh artifact of `handler`; with
/// `corrupt`, the stored tarball's bytes no longer match its digest.
fn start(handler: &str, extra: &[(&str, &str)], corrupt: bool) -> Instance {
    let store = tempfile::tempdir().unwrap();
    let pod = tempfile::tempdir().unwrap();
    let node = extra.contains(&("SLESS_INSTANCE_RUNTIME", "nodejs20"));
    let (fingerprint, digest) = store_with(store.path(), if node { "handler.js" } else { "handler.py" }, handler);
    if corrupt {
        let tarball = store.path().join(format!("artifacts/{fingerprint}/{digest}.tar.gz"));
        let mut bytes = std::fs::read(&tarball).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&tarball, bytes).unwrap();
    }
    let (frames, ready) = (free_port(), free_port());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sless"));
    cmd.arg("instance")
        .env("SLESS_BLOB_URL", format!("file://{}", store.path().display()))
        .env("SLESS_INSTANCE_ARTIFACT", &fingerprint)
        .env("SLESS_INSTANCE_DIGEST", &digest)
        .env("SLESS_INSTANCE_CODE_DIR", pod.path().join("code"))
        .env("SLESS_INSTANCE_WORK_DIR", pod.path().join("work"))
        .env("SLESS_INSTANCE_RUNTIME", "python3.11")
        .env("SLESS_INSTANCE_NAMESPACE", "demo")
        .env("SLESS_INSTANCE_FUNCTION", "hello")
        .env("SLESS_INSTANCE_VERSION", "4")
        .env("SLESS_INSTANCE_ENV", r#"{"GREETING":"hi"}"#)
        .env("SLESS_INSTANCE_LISTEN", format!("127.0.0.1:{frames}"))
        .env("SLESS_INSTANCE_READY_LISTEN", format!("127.0.0.1:{ready}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    Instance {
        child: cmd.spawn().unwrap(),
        frames,
        ready,
        _dirs: vec![store, pod],
    }
}

/// The readiness endpoint's status code, None when nothing listens.
fn readiness(port: u16) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.write_all(b"GET /ready HTTP/1.1\r\nhost: x\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    text.split(' ').nth(1)?.parse().ok()
}

impl Instance {
    fn wait_ready(&mut self) {
        let limit = Instant::now() + Duration::from_secs(30);
        while readiness(self.ready) != Some(200) {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("the instance exited ({status}) before it was ready: {}", self.stderr());
            }
            assert!(Instant::now() < limit, "not ready within 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stderr(&mut self) -> String {
        let mut text = String::new();
        if let Some(mut err) = self.child.stderr.take() {
            let _ = err.read_to_string(&mut text);
        }
        text
    }

    fn exit_code(&mut self) -> i32 {
        let limit = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(Instant::now() < limit, "the instance did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A gateway's side of one connection.
struct Gateway {
    stream: tokio::net::TcpStream,
    hello: serde_json::Value,
}

impl Gateway {
    async fn connect(port: u16) -> Gateway {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let hello = frame::read(&mut stream).await.unwrap().unwrap();
        assert_eq!(hello.kind, kind::HELLO);
        let hello = serde_json::from_slice(&hello.payload).unwrap();
        Gateway { stream, hello }
    }

    async fn invoke(&mut self, id: u32, event: serde_json::Value) -> Answer {
        use tokio::io::AsyncWriteExt;
        let invocation = super::harness::event_call(&format!("req-{id}"), event);
        let mut invoke = sless_driver_local::invocation_frame(&invocation, 0);
        frame::set_id(&mut invoke, id);
        self.stream.write_all(&invoke).await.unwrap();
        let mut answer = AnswerReader::default();
        loop {
            let f = frame::read(&mut self.stream)
                .await
                .unwrap()
                .expect("an answer before the end");
            assert_eq!(f.id, id);
            if let Some(done) = answer.push(f).unwrap() {
                return done;
            }
        }
    }
}

#[tokio::test]
async fn an_instance_fetches_loads_then_serves_frames_over_tcp() {
    let mut instance = start(HANDLER, &[], false);
    instance.wait_ready();
    let mut gateway = Gateway::connect(instance.frames).await;
    assert_eq!(gateway.hello["function"], "hello");
    assert_eq!(gateway.hello["version"], 4);
    for n in 1..=3 {
        let Answer::Output(output) = gateway.invoke(n, serde_json::json!({"n": n})).await else {
            panic!("an output")
        };
        assert_eq!(output.status, 201);
        assert_eq!(&output.body[..], format!("made {n}").as_bytes());
        assert_eq!(output.logs.len(), 1, "{:?}", output.logs);
        assert_eq!(output.logs[0].stream, OutputStream::Stdout);
        assert_eq!(output.logs[0].text, "hello from hello\n");
    }
    // A second gateway shares the instance.
    let mut other = Gateway::connect(instance.frames).await;
    assert!(matches!(
        other.invoke(9, serde_json::json!({})).await,
        Answer::Output(_)
    ));
    assert_eq!(readiness(instance.ready), Some(200));
}

/// Started as the launcher starts it (frame pipes on fds 3 and 4): a write
/// to fd 1 is not a frame.
#[tokio::test]
async fn a_node_instance_serves_and_its_stdout_is_not_the_frames() {
    let handler = "const fs = require('fs');\n\
        exports.handle = (event, context) => {\n\
          fs.writeSync(1, 'stray bytes on fd 1\\n');\n\
          console.log('hello from', context.function);\n\
          return { n: event.n };\n\
        };\n";
    let mut instance = start(handler, &[("SLESS_INSTANCE_RUNTIME", "nodejs20")], false);
    instance.wait_ready();
    let mut gateway = Gateway::connect(instance.frames).await;
    for n in 1..=2 {
        let Answer::Output(output) = gateway.invoke(n, serde_json::json!({"n": n})).await else {
            panic!("an output")
        };
        assert_eq!(output.status, 200);
        assert_eq!(&output.body[..], format!("{{\"n\":{n}}}").as_bytes());
        assert_eq!(output.logs[0].text, "hello from hello\n");
    }
}

/// An answer the gateway cannot send (more headers than any client takes)
/// is named so, and the instance, which did nothing wrong, goes on.
#[tokio::test]
async fn an_answer_the_gateway_cannot_send_is_named_and_the_instance_goes_on() {
    let mut instance = start(HANDLER, &[], false);
    instance.wait_ready();
    let mut gateway = Gateway::connect(instance.frames).await;
    match gateway.invoke(1, serde_json::json!({"many": true})).await {
        Answer::Unanswered(Unanswered::BadAnswer(reason)) => {
            assert!(reason.contains("more than 1000 headers"), "{reason}")
        }
        other => panic!("a bad answer, not {other:?}"),
    }
    let Answer::Output(output) = gateway.invoke(2, serde_json::json!({"n": 2})).await else {
        panic!("an output")
    };
    assert_eq!(&output.body[..], b"made 2");
    assert!(instance.child.try_wait().unwrap().is_none(), "the instance exited");
}

#[tokio::test]
async fn a_call_past_the_timeout_is_answered_timeout_and_the_instance_exits() {
    let mut instance = start(HANDLER, &[("SLESS_INSTANCE_TIMEOUT_SEC", "1")], false);
    instance.wait_ready();
    let mut gateway = Gateway::connect(instance.frames).await;
    let answer = gateway.invoke(1, serde_json::json!({"sleep": 30})).await;
    assert!(
        matches!(answer, Answer::Unanswered(Unanswered::Timeout(_))),
        "{answer:?}"
    );
    assert_eq!(instance.exit_code(), 1, "a timed-out instance restarts");
}

/// A handler that keeps the interpreter past its timeout (C code holding
/// Python's lock, a Node loop that never yields) stops the shim's own
/// timeout and its keepalive too: `sless instance` ends it (exit 1, the
/// pod restarts it) and the call's connection closes unanswered.
#[tokio::test]
async fn a_handler_holding_the_interpreter_past_the_timeout_ends_the_instance() {
    let python = "import ctypes\n\
        def handle(event, context):\n    ctypes.pythonapi.usleep(60_000_000)\n";
    let node = "exports.handle = () => { for (;;) {} };\n";
    for (runtime, handler) in [("python3.11", python), ("nodejs20", node)] {
        let settings = [("SLESS_INSTANCE_TIMEOUT_SEC", "1"), ("SLESS_INSTANCE_RUNTIME", runtime)];
        let mut instance = start(handler, &settings, false);
        instance.wait_ready();
        let mut gateway = Gateway::connect(instance.frames).await;
        let called = Instant::now();
        let invocation = super::harness::event_call("req-held", serde_json::json!({}));
        let mut invoke = sless_driver_local::invocation_frame(&invocation, 0);
        frame::set_id(&mut invoke, 1);
        tokio::io::AsyncWriteExt::write_all(&mut gateway.stream, &invoke)
            .await
            .unwrap();
        let end = tokio::time::timeout(Duration::from_secs(20), frame::read(&mut gateway.stream))
            .await
            .expect("the connection ends");
        assert!(
            matches!(end, Ok(None) | Err(_)),
            "{runtime}: closed unanswered, not {end:?}"
        );
        assert_eq!(instance.exit_code(), 1, "{runtime}: a held instance restarts");
        assert!(
            called.elapsed() < Duration::from_secs(15),
            "{runtime}: ended near its timeout"
        );
        assert!(instance.stderr().contains("held"), "{runtime}: says why");
    }
}

#[tokio::test]
async fn a_run_once_instance_exits_after_its_answer() {
    let mut instance = start(HANDLER, &[("SLESS_INSTANCE_ONCE", "true")], false);
    instance.wait_ready();
    let mut gateway = Gateway::connect(instance.frames).await;
    assert!(matches!(
        gateway.invoke(1, serde_json::json!({"n": 1})).await,
        Answer::Output(_)
    ));
    assert_eq!(instance.exit_code(), 0);
}

#[tokio::test]
async fn a_handler_that_does_not_load_is_never_ready() {
    let mut instance = start("import not_a_module\n", &[], false);
    assert_eq!(instance.exit_code(), 3);
    assert!(instance.stderr().contains("not_a_module"));
    assert_eq!(readiness(instance.ready), None);
}

#[tokio::test]
async fn a_corrupt_artifact_is_refused() {
    let mut instance = start(HANDLER, &[], true);
    assert_ne!(instance.exit_code(), 0);
    let stderr = instance.stderr();
    assert!(stderr.contains("is corrupt: its sha256 is"), "{stderr}");
    assert_eq!(readiness(instance.ready), None, "a corrupt artifact is never served");
}

/// What the Kubernetes driver's pod gives an instance of a function with
/// secrets: each secret variable as `SLESS_SECRET_ENV_{NAME}` (from the
/// function's Secret) and `SLESS_SECRETS_DIR` where its files are mounted.
/// The handler sees `{NAME}` and the files, not the carrier variables.
#[tokio::test]
async fn secret_variables_and_files_reach_the_handler_under_their_own_names() {
    let handler = r#"
import os
def handle(event, context):
    with open(os.path.join(os.environ["SLESS_SECRETS_DIR"], "tls", "server.key")) as f:
        key = f.read()
    carriers = sorted(k for k in os.environ if k.startswith("SLESS_SECRET_ENV_"))
    return {"password": os.environ.get("DB_PASSWORD"), "greeting": os.environ.get("GREETING"),
            "key": key, "carriers": carriers}
"#;
    let mounted = tempfile::tempdir().unwrap();
    std::fs::create_dir(mounted.path().join("tls")).unwrap();
    std::fs::write(mounted.path().join("tls/server.key"), "-----BEGIN KEY-----").unwrap();
    let env = serde_json::json!({"GREETING": "hi", "SLESS_SECRETS_DIR": mounted.path()}).to_string();
    let mut instance = start(
        handler,
        &[
            ("SLESS_INSTANCE_ENV", &env),
            ("SLESS_SECRET_ENV_DB_PASSWORD", "hunter2"),
        ],
        false,
    );
    instance.wait_ready();
    let mut gateway = Gateway::connect(instance.frames).await;
    let Answer::Output(output) = gateway.invoke(1, serde_json::json!({})).await else {
        panic!("an output")
    };
    let body: serde_json::Value = serde_json::from_slice(&output.body).unwrap();
    assert_eq!(
        body,
        serde_json::json!({"password": "hunter2", "greeting": "hi", "key": "-----BEGIN KEY-----", "carriers": []})
    );
}

/// Serves `body` to every GET on 127.0.0.1 (a presigned URL's stand-in:
/// what the instance sees is an HTTP GET of a tarball); its URL.
async fn serve_tarball(body: Vec<u8>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://{}/artifact.tar.gz?X-Signature=abc",
        listener.local_addr().unwrap()
    );
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(&body).await;
            });
        }
    });
    url
}

/// Starts `sless instance generic` (Python, 256 MiB, token `pool-token`).
fn start_generic() -> Instance {
    start_generic_of("python3.11")
}

/// Starts `sless instance generic` of `runtime` (256 MiB, token `pool-token`).
fn start_generic_of(runtime: &str) -> Instance {
    let pod = tempfile::tempdir().unwrap();
    let (frames, ready) = (free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_sless"))
        .args(["instance", "generic"])
        .env("SLESS_INSTANCE_CODE_DIR", pod.path().join("code"))
        .env("SLESS_INSTANCE_WORK_DIR", pod.path().join("work"))
        .env("SLESS_INSTANCE_RUNTIME", runtime)
        .env("SLESS_INSTANCE_MEMORY_MB", "256")
        .env("SLESS_INSTANCE_WARM_TOKEN", "pool-token")
        .env("SLESS_INSTANCE_LISTEN", format!("127.0.0.1:{frames}"))
        .env("SLESS_INSTANCE_READY_LISTEN", format!("127.0.0.1:{ready}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Instance {
        child,
        frames,
        ready,
        _dirs: vec![pod],
    }
}

/// The artifact of `HANDLER` as the driver stores it, served at a URL; its digest.
async fn served_artifact() -> (String, String) {
    let store = tempfile::tempdir().unwrap();
    let (fingerprint, digest) = store_with(store.path(), "handler.py", HANDLER);
    let tarball = std::fs::read(store.path().join(format!("artifacts/{fingerprint}/{digest}.tar.gz"))).unwrap();
    (serve_tarball(tarball).await, digest)
}

fn specialization(url: &str, digest: &str, memory_mb: u32) -> serde_json::Value {
    serde_json::json!({
        "namespace": "demo", "function": "hello", "version": 7, "runtime": "python3.11",
        "entrypoint": "handler.handle", "artifact_url": url, "digest": digest,
        "concurrency": 4, "timeout_sec": 10, "memory_mb": memory_mb, "env": {"GREETING": "hi"},
    })
}

async fn post_specialize(port: u16, token: &str, body: &serde_json::Value) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/specialize"))
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

async fn ready_text(port: u16) -> (u16, String) {
    let response = reqwest::get(format!("http://127.0.0.1:{port}/ready")).await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// A generic instance is ready as `generic` before it knows its function,
/// refuses a specialization without the pool's token or above its memory
/// (and stays generic), takes one, serves that function's frames from then
/// on, and refuses a second.
#[tokio::test]
async fn a_generic_instance_takes_one_specialization_then_serves_that_function() {
    let mut instance = start_generic();
    instance.wait_ready();
    assert_eq!(ready_text(instance.ready).await, (200, "generic".to_string()));
    // The frame port is bound from the start (the shim holds it), but
    // nothing is served on it before a function is loaded.
    let mut early = TcpStream::connect(("127.0.0.1", instance.frames)).unwrap();
    early.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let mut byte = [0u8; 1];
    assert!(
        matches!(early.read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut),
        "no frames before a function"
    );
    let (url, digest) = served_artifact().await;

    let (status, _) = post_specialize(instance.ready, "another-pool", &specialization(&url, &digest, 128)).await;
    assert_eq!(status, 401, "another pool's token");
    let (status, text) = post_specialize(instance.ready, "pool-token", &specialization(&url, &digest, 512)).await;
    assert_eq!(status, 400, "above the pod's memory: {text}");
    assert_eq!(ready_text(instance.ready).await, (200, "generic".to_string()));

    let (status, text) = post_specialize(instance.ready, "pool-token", &specialization(&url, &digest, 128)).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(ready_text(instance.ready).await, (200, "ready\n".to_string()));
    // Its code is read-only, as a function's own pods mount it.
    let code = instance._dirs[0].path().join("code");
    for path in [code.join("handler.py"), code.clone()] {
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o222, 0, "{} is writable: {mode:o}", path.display());
    }
    // The connection made before is served now, from its HELLO on.
    early.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut head = [0u8; 9];
    early.read_exact(&mut head).unwrap();
    assert_eq!(head[4], b'H', "the early connection's first frame");
    let mut gateway = Gateway::connect(instance.frames).await;
    assert_eq!(gateway.hello["function"], "hello");
    assert_eq!(gateway.hello["version"], 7);
    assert_eq!(gateway.hello["concurrency"], 4);
    let Answer::Output(output) = gateway.invoke(1, serde_json::json!({"n": 5})).await else {
        panic!("an output")
    };
    assert_eq!(output.status, 201);
    assert_eq!(&output.body[..], b"made 5");
    assert_eq!(output.logs[0].text, "hello from hello\n");

    let (status, _) = post_specialize(instance.ready, "pool-token", &specialization(&url, &digest, 128)).await;
    assert_eq!(status, 409, "a second specialization");
}

/// An artifact whose bytes are not its digest's is refused and the
/// instance ends (the driver deletes the pod); nothing is served.
#[tokio::test]
async fn a_generic_instance_refuses_an_artifact_that_is_not_its_digest() {
    let mut instance = start_generic();
    instance.wait_ready();
    let (url, _) = served_artifact().await;
    let wrong = "0".repeat(64);
    let (status, text) = post_specialize(instance.ready, "pool-token", &specialization(&url, &wrong, 128)).await;
    assert_eq!(status, 500);
    assert!(text.contains("is corrupt: its sha256 is"), "{text}");
    assert_eq!(instance.exit_code(), 1);
}

/// A Node generic instance (its shim started before it knows its
/// function) takes a Node function's artifact and serves it, the handler's
/// log and the function's environment included.
#[tokio::test]
async fn a_node_generic_instance_takes_a_node_function() {
    const NODE_HANDLER: &str = r#"
exports.handler = async (event, context) => {
  console.log("hello from", context.function);
  return { statusCode: 201, body: `${process.env.GREETING} ${event.n}` };
};
"#;
    let mut instance = start_generic_of("nodejs20");
    instance.wait_ready();
    assert_eq!(ready_text(instance.ready).await, (200, "generic".to_string()));
    let store = tempfile::tempdir().unwrap();
    let (fingerprint, digest) = store_with(store.path(), "handler.js", NODE_HANDLER);
    let tarball = std::fs::read(store.path().join(format!("artifacts/{fingerprint}/{digest}.tar.gz"))).unwrap();
    let url = serve_tarball(tarball).await;
    let mut request = specialization(&url, &digest, 128);
    request["runtime"] = "nodejs20".into();
    request["entrypoint"] = "handler.handler".into();
    // A pod waits in its pool far longer than a function's timeout, and
    // its shim says nothing meanwhile: that is not being held.
    request["timeout_sec"] = 1.into();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let (status, text) = post_specialize(instance.ready, "pool-token", &request).await;
    assert_eq!(status, 200, "{text}");
    let mut gateway = Gateway::connect(instance.frames).await;
    assert_eq!(gateway.hello["runtime"], "nodejs20");
    for n in [5, 6] {
        let Answer::Output(output) = gateway.invoke(n, serde_json::json!({"n": n})).await else {
            panic!("an output")
        };
        assert_eq!(output.status, 201);
        assert_eq!(&output.body[..], format!("hi {n}").as_bytes());
        assert_eq!(output.logs[0].text, "hello from hello\n");
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    assert!(instance.child.try_wait().unwrap().is_none(), "still serving");
}
