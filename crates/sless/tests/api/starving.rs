//! Starving the server: schedules that never fire, responses too large to
//! hold, clients that never finish a request or never read the answer, and
//! more connections than the server keeps open (idle ones make room). Each is bounded, and the
//! server keeps serving everyone else.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::harness::{Backend, Server};

const SIZED: &[u8] = br#"
def handle(event, context):
    return {"statusCode": 200, "body": "x" * event["bytes"]}
"#;

async fn connect(server: &Server) -> TcpStream {
    TcpStream::connect(server.url.trim_start_matches("http://"))
        .await
        .unwrap()
}

/// Reads until the peer closes (or `secs` pass); returns the bytes read.
async fn read_to_close(stream: &mut TcpStream, secs: u64) -> Vec<u8> {
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(secs), async {
        let mut buf = vec![0; 64 * 1024];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    got
}

#[tokio::test]
async fn a_schedule_that_never_fires_is_refused() {
    let server = Server::start(Backend::Sqlite).await;
    server
        .deploy(
            "ns",
            "sized",
            json!({"runtime": "python3.11"}),
            &[("handler.py", SIZED)],
        )
        .await;
    for never in ["0 0 30 2 *", "0 0 31 6 *"] {
        let (status, body) = server
            .call(
                Method::POST,
                "/v1/namespaces/ns/triggers",
                Some(json!({"name": "never", "type": "cron", "function": "sized", "schedule": never})),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{never}: {body}");
        let error = body["error"].as_str().unwrap();
        assert!(error.contains("schedule") && error.contains("does not fire"), "{error}");
    }
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/triggers",
            Some(json!({"name": "leap", "type": "cron", "function": "sized", "schedule": "0 0 29 2 *"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(body["status"]["next_fire_at"].is_string(), "{body}");
}

#[tokio::test]
async fn a_response_over_the_limit_is_refused_where_it_is_made() {
    let server = Server::start_with(Backend::Sqlite, &[("SLESS_MAX_RESPONSE_BYTES", "1048576")]).await;
    for (runtime, file, code) in [
        ("python3.11", "handler.py", SIZED),
        (
            "nodejs20",
            "handler.js",
            &b"exports.handle = (e) => ({statusCode: 200, body: 'x'.repeat(e.bytes)});\n"[..],
        ),
    ] {
        let name = runtime.replace('.', "");
        server
            .deploy("ns", &name, json!({"runtime": runtime}), &[(file, code)])
            .await;
        let path = format!("/fn/ns/{name}");
        let (status, _, body) = server.invoke(Method::POST, &path, r#"{"bytes": 1000000}"#).await;
        assert_eq!((status, body.len()), (StatusCode::OK, 1_000_000), "{runtime}");
        let (status, _, body) = server.invoke(Method::POST, &path, r#"{"bytes": 5000000}"#).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{runtime}: {body}");
        assert!(body.contains("more than the limit of 1048576"), "{runtime}: {body}");
        // The instance lives on.
        let (status, _, _) = server.invoke(Method::POST, &path, r#"{"bytes": 10}"#).await;
        assert_eq!(status, StatusCode::OK, "{runtime}");
    }
}

/// A request's head is held whole while it is read, so it is bounded:
/// 64 KiB (431 beyond, however much of it one read brings), and a
/// connection's next head is counted from its own start.
#[tokio::test]
async fn a_request_head_past_64_kib_is_431() {
    let server = Server::start(Backend::Sqlite).await;
    let head = |size: usize| {
        format!(
            "GET /v1/namespaces/ns/functions HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
            "v".repeat(size)
        )
    };
    for (size, expected) in [(60 * 1024, "HTTP/1.1 401"), (80 * 1024, "HTTP/1.1 431")] {
        let mut stream = connect(&server).await;
        // The server may answer and close before it has read the rest.
        let _ = stream.write_all(head(size).as_bytes()).await;
        let mut answer = vec![0; 64];
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut answer))
            .await
            .expect("an answer")
            .unwrap_or(0);
        let answer = String::from_utf8_lossy(&answer[..n]);
        assert!(answer.starts_with(expected), "{size} bytes of header: {answer}");
    }
    // Two heads on one connection, each under the bound, the second after
    // the first's answer: each is counted from its own start.
    let mut stream = connect(&server).await;
    for _ in 0..2 {
        stream.write_all(head(40 * 1024).as_bytes()).await.unwrap();
        let mut answer = vec![0; 4096];
        let n = stream.read(&mut answer).await.unwrap();
        assert!(
            answer[..n].starts_with(b"HTTP/1.1 401"),
            "{}",
            String::from_utf8_lossy(&answer[..n])
        );
    }
}

#[tokio::test]
async fn slow_clients_are_timed_out() {
    let server = Server::start_with(
        Backend::Sqlite,
        &[
            ("SLESS_HEADER_TIMEOUT_SEC", "1"),
            ("SLESS_IDLE_CONNECTION_TIMEOUT_SEC", "2"),
            ("SLESS_BODY_TIMEOUT_SEC", "1"),
            ("SLESS_WRITE_TIMEOUT_SEC", "1"),
            ("SLESS_MAX_RESPONSE_BYTES", "67108864"),
        ],
    )
    .await;
    server
        .deploy(
            "ns",
            "sized",
            json!({"runtime": "python3.11"}),
            &[("handler.py", SIZED)],
        )
        .await;

    // A head that never ends: the connection is closed, unanswered, also
    // while bytes keep trickling in.
    let mut trickle = connect(&server).await;
    trickle.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
    let mut cut = false;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if trickle.write_all(b"x-slow: 1\r\n").await.is_err() {
            cut = true;
            break;
        }
    }
    let answer = read_to_close(&mut trickle, 5).await;
    assert!(cut || answer.is_empty() || !String::from_utf8_lossy(&answer).contains("200 OK"));
    assert!(cut, "a head trickling in for 10 s was still read");
    // A head that never ends: the connection is closed, unanswered.
    let mut slow_head = connect(&server).await;
    slow_head
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let answer = read_to_close(&mut slow_head, 20).await;
    assert!(
        !String::from_utf8_lossy(&answer).contains("200 OK"),
        "the head never ended"
    );
    // An idle kept-alive connection goes the same way.
    let mut idle = connect(&server).await;
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = read_to_close(&mut idle, 20).await;
    assert!(
        String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"),
        "answered, then closed"
    );

    // A body that never arrives: 400 naming the wait.
    let mut slow_body = connect(&server).await;
    slow_body
        .write_all(b"POST /fn/ns/sized HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"bytes\":")
        .await
        .unwrap();
    let answer = String::from_utf8_lossy(&read_to_close(&mut slow_body, 20).await).into_owned();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("did not arrive within 1s"), "{answer}");

    // A client that does not read a large answer: the server gives up on it.
    let mut reader = connect(&server).await;
    let body = r#"{"bytes": 40000000}"#;
    let request = format!(
        "POST /fn/ns/sized HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    reader.write_all(request.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let got = read_to_close(&mut reader, 20).await;
    assert!(
        got.len() < 40_000_000,
        "the whole answer was sent to a client that did not read"
    );

    // Everyone else is served meanwhile and after.
    let (status, _, body) = server.invoke(Method::POST, "/fn/ns/sized", r#"{"bytes": 5}"#).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "xxxxx"));
}

/// Starts a function's creation whose body never ends: a connection in
/// service (its handler reads the body) for as long as the body timeout.
async fn held_in_service(server: &Server, name: &str) -> (TcpStream, String) {
    let body = format!(r#"{{"name": "{name}", "runtime": "python3.11"}}"#);
    let mut stream = connect(server).await;
    let head = format!(
        "POST /v1/namespaces/ns/functions HTTP/1.1\r\nhost: sless\r\nauthorization: Bearer {}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{}",
        server.admin,
        body.len(),
        &body[..1]
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    (stream, body[1..].to_string())
}

/// A `GET /healthz` on a connection of its own, answered 200 and kept open.
async fn healthz_kept_alive(server: &Server) -> TcpStream {
    let mut stream = connect(server).await;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: sless\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
        .await
        .expect("answered")
        .unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    stream
}

#[tokio::test]
async fn connections_over_the_cap_get_a_503_and_the_server_raises_its_files_limit() {
    let server = Server::start_with(
        Backend::Sqlite,
        &[("SLESS_MAX_CONNECTIONS", "64"), ("SLESS_HEADER_TIMEOUT_SEC", "30")],
    )
    .await;
    // Every connection serving a request: none can make room.
    let mut held = Vec::new();
    for i in 0..64 {
        held.push(held_in_service(&server, &format!("held-{i}")).await);
    }
    let mut over = connect(&server).await;
    let answer = String::from_utf8_lossy(&read_to_close(&mut over, 10).await).into_owned();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("too many open connections"), "{answer}");
    drop(held);
    // Slots come back when connections close.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(response) = server.request(Method::GET, "/healthz", None).send().await {
            if response.status() == StatusCode::OK {
                break;
            }
        }
        assert!(std::time::Instant::now() < deadline, "slots never came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refused = server.metric("sless_connections_refused_total").await;
    assert!(refused.is_some_and(|n| n >= 1.0), "{refused:?}");

    let limits = std::fs::read_to_string(format!("/proc/{}/limits", server.pid())).unwrap();
    let files: Vec<&str> = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(files[3], files[4], "soft limit raised to the hard one: {limits}");
}

#[tokio::test]
async fn idle_connections_make_room_when_the_server_is_full() {
    let server = Server::start_with(
        Backend::Sqlite,
        &[("SLESS_MAX_CONNECTIONS", "64"), ("SLESS_HEADER_TIMEOUT_SEC", "30")],
    )
    .await;
    // The oldest connection serves a request (its body on the way)...
    let (mut serving, rest) = held_in_service(&server, "kept").await;
    // ...then come connections that hold a slot without a request in
    // service: 31 that never send a byte, 16 kept alive after an answer,
    // 16 with half a head.
    let mut silent = Vec::new();
    for _ in 0..31 {
        silent.push(connect(&server).await);
    }
    let mut kept_alive = Vec::new();
    for _ in 0..16 {
        kept_alive.push(healthz_kept_alive(&server).await);
    }
    let mut half_heads = Vec::new();
    for _ in 0..16 {
        let mut stream = connect(&server).await;
        stream.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
        half_heads.push(stream);
    }

    // The server is full, yet new callers are served: each closes the
    // connection idle longest, and keeps its own open after its answer.
    let mut callers = Vec::new();
    for _ in 0..40 {
        callers.push(healthz_kept_alive(&server).await);
    }
    // Idle longest went first: the silent ones, then those kept alive
    // (the harness's own pooled connections, older still, may have gone
    // before them); those sending half a head are newer, and stay. Which
    // kept-alive ones go is not fixed: one is idle from when its answer's
    // task lets it go, which under load can come a few milliseconds after
    // the next one's.
    for (i, stream) in silent.iter_mut().enumerate() {
        let mut byte = [0; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut byte)).await;
        assert!(
            matches!(read, Ok(Ok(0)) | Ok(Err(_))),
            "silent connection {i} was left open: {read:?}"
        );
    }
    let mut closed = 0;
    for stream in &mut kept_alive {
        let mut byte = [0; 1];
        let read = tokio::time::timeout(Duration::from_millis(200), stream.read(&mut byte)).await;
        if matches!(read, Ok(Ok(0)) | Ok(Err(_))) {
            closed += 1;
        }
    }
    assert!(closed >= 6, "{closed} of the 16 kept-alive connections were closed");
    for stream in &mut half_heads {
        let mut byte = [0; 1];
        let read = tokio::time::timeout(Duration::from_millis(100), stream.read(&mut byte)).await;
        assert!(read.is_err(), "a newer idle connection was closed first: {read:?}");
    }
    let reclaimed = server.metric("sless_connections_reclaimed_total").await;
    assert!(reclaimed.is_some_and(|n| n >= 40.0), "{reclaimed:?}");

    // The one in service was never closed: its body ends, it is answered.
    serving.write_all(rest.as_bytes()).await.unwrap();
    let mut buf = vec![0; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), serving.read(&mut buf))
        .await
        .expect("the request in service is answered")
        .unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
}

/// The server's peak resident memory in KiB (VmHWM).
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn an_upload_is_checked_in_bounded_memory_whatever_it_unpacks_to() {
    use std::io::Write;
    let server = Server::start(Backend::Sqlite).await;
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "big", "runtime": "python3.11"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // 160 MiB unpacked from a few MiB: a 16 KiB random block repeated,
    // which deflate shrinks about 30 times (under the bomb ratio).
    let block: Vec<u8> = (0..16 * 1024).map(|_| rand::random::<u8>()).collect();
    let entry: Vec<u8> = block.iter().copied().cycle().take(1 << 20).collect();
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    writer.start_file("handler.py", options).unwrap();
    writer
        .write_all(b"def handle(event, context):\n    return 1\n")
        .unwrap();
    for i in 0..160 {
        writer.start_file(format!("data/{i}.bin"), options).unwrap();
        writer.write_all(&entry).unwrap();
    }
    let zip = writer.finish().unwrap().into_inner();
    assert!(zip.len() < 16 << 20, "{} bytes", zip.len());
    let before = peak_rss_kib(server.pid());
    let (status, body) = server.upload("ns", "big", zip).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert!(body["status"]["message"].as_str().unwrap().contains("167772"), "{body}");
    let grown = peak_rss_kib(server.pid()).saturating_sub(before);
    assert!(
        grown < 96 * 1024,
        "checking the upload grew the server's peak memory by {grown} KiB"
    );
}

/// CONNECT is refused wherever it is aimed: a 2xx to it would make the
/// connection a tunnel (a handler's 200 at `/fn` used to end it, its body
/// unsent), and sless is no proxy. The connection serves on after it.
#[tokio::test]
async fn connect_is_405_and_the_connection_serves_on() {
    let server = Server::start(Backend::Sqlite).await;
    let code = b"def handle(event, context):\n    return {'statusCode': 200, 'body': 'hi ' + context.method}\n";
    server
        .deploy(
            "ns",
            "hi",
            serde_json::json!({"runtime": "python3.11"}),
            &[("handler.py", code)],
        )
        .await;
    for target in ["/fn/ns/hi", "127.0.0.1:22"] {
        let mut stream = connect(&server).await;
        let request = format!("CONNECT {target} HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\nGET /fn/ns/hi HTTP/1.1\r\nhost: x\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut seen = Vec::new();
        let mut chunk = vec![0; 4096];
        while !String::from_utf8_lossy(&seen).contains("hi GET") {
            let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
                .await
                .expect("both answers within 10 s")
                .unwrap();
            assert!(n > 0, "{target}: closed after {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&chunk[..n]);
        }
        let seen = String::from_utf8_lossy(&seen);
        assert!(seen.starts_with("HTTP/1.1 405"), "{target}: {seen}");
        assert!(seen.contains("CONNECT is not served"), "{target}: {seen}");
    }
}

/// A client that sends `Expect: 100-continue` (curl does for a body over
/// 1 MiB: `curl --data-binary @code.zip`) waits for `100 Continue`, then
/// sends the body. That body is a body, not the next request's head: it
/// used to be counted against the head's 64 KiB bound and refused.
#[tokio::test]
async fn a_body_sent_after_100_continue_is_read_whole() {
    let server = Server::start(Backend::Sqlite).await;
    let (status, created) = server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "big", "runtime": "python3.11"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    // 2 MiB that do not compress: a zip as curl would send it.
    let filler: Vec<u8> = (0..2 * 1024 * 1024).map(|_| rand::random::<u8>()).collect();
    let zip = super::harness::zip_of(&[
        ("handler.py", b"def handle(event, context):\n    return 'big'\n"),
        ("filler.bin", &filler),
    ]);
    let mut stream = connect(&server).await;
    let head = format!(
        "PUT /v1/namespaces/ns/functions/big/code HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\n\
         content-type: application/zip\r\ncontent-length: {}\r\nexpect: 100-continue\r\n\r\n",
        server.admin,
        zip.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut interim = vec![0; 25];
    tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut interim))
        .await
        .expect("100 Continue within 10 s")
        .unwrap();
    assert_eq!(interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    stream.write_all(&zip).await.unwrap();
    let mut answer = Vec::new();
    let mut chunk = vec![0; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut chunk))
            .await
            .expect("an answer within 30 s")
            .unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&chunk[..n]);
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
}

/// Unmounts (lazily) what a test mounted, however the test ends.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A full disk (the data dir on a small tmpfs that a file of the
/// operator's fills) refuses what would be stored with a 507 that says so,
/// naming no database, driver or path, to an API caller and to a public
/// caller's event alike; what needs no room goes on. Once there is room
/// again the same calls succeed, without a restart.
#[tokio::test]
async fn a_full_disk_is_a_507_that_says_so_until_there_is_room() {
    let mut server = Server::start(Backend::Sqlite).await;
    server.kill9();
    let data = server.data_dir.path().to_path_buf();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=48m", "sless-full-test"])
        .arg(&data)
        .status()
        .unwrap();
    assert!(mounted.success());
    let _unmount = Mounted(data.clone());
    server.spawn();
    server
        .deploy(
            "ns",
            "hello",
            json!({"runtime": "python3.11"}),
            &[("handler.py", b"def handle(event, context):\n    return 'hi'\n")],
        )
        .await;

    let filler = data.join("operator-filler");
    {
        use std::io::Write;
        let mut file = std::fs::File::create(&filler).unwrap();
        let chunk = vec![7u8; 64 * 1024];
        while file.write_all(&chunk).and_then(|()| file.sync_data()).is_ok() {}
    }
    let full = |what: &str, status: StatusCode, body: &str| {
        assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{what}: {body}");
        assert!(body.contains("storage is full"), "{what}: {body}");
        for secret in ["database", "sqlite", "No space", "os error", "/"] {
            assert!(!body.contains(secret), "{what} names {secret:?}: {body}");
        }
    };
    let secret = json!({"name": "s", "data": {"k": "v"}});
    let (status, body) = server
        .call(Method::POST, "/v1/namespaces/ns/secrets", Some(secret.clone()))
        .await;
    full("a secret", status, &body.to_string());
    let zip = super::harness::zip_of(&[("handler.py", b"def handle(event, context):\n    return 'v2'\n")]);
    let (status, body) = server.upload("ns", "hello", zip.clone()).await;
    full("an upload", status, &body.to_string());
    let response = server
        .request(Method::POST, "/fn/ns/hello", None)
        .header("x-sless-invocation-type", "Event")
        .body("{}")
        .send()
        .await
        .unwrap();
    let status = response.status();
    full("an event", status, &response.text().await.unwrap());
    let (status, _, body) = server.invoke(Method::GET, "/fn/ns/hello", "").await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, "\"hi\""),
        "a call needs no room"
    );

    std::fs::remove_file(&filler).unwrap();
    let (status, body) = server
        .call(Method::POST, "/v1/namespaces/ns/secrets", Some(secret))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = server.upload("ns", "hello", zip).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    server.kill9();
}
