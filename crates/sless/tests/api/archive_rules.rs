//! Each upload rule refused with a crafted zip: a 400 naming the entry and
//! the rule, and nothing stored.

use std::io::Write;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::harness::{zip_of, Backend, Server};

crate::both_stores!(archive_rules_refuse_bad_zips, upload_size_limit_is_413);

fn zip_with(build: impl FnOnce(&mut zip::ZipWriter<std::io::Cursor<Vec<u8>>>)) -> Vec<u8> {
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    build(&mut writer);
    writer.finish().unwrap().into_inner()
}

fn deflated() -> zip::write::SimpleFileOptions {
    zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated)
}

fn random_bytes(n: usize) -> Vec<u8> {
    (0..n).map(|_| rand::random::<u8>()).collect()
}

async fn expect_refused(server: &Server, zip: Vec<u8>, rule: &str, entry: Option<&str>) -> Value {
    let (status, body) = server.upload("ns", "fn1", zip).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "rule {rule}: {body}");
    assert_eq!(body["rule"], rule, "{body}");
    if let Some(entry) = entry {
        assert_eq!(body["entry"], entry, "{body}");
        assert!(
            body["error"].as_str().unwrap().contains(entry),
            "message names the entry: {body}"
        );
    }
    body
}

async fn archive_rules_refuse_bad_zips(backend: Backend) {
    let server = Server::start_with(backend, &[("SLESS_MAX_UNPACKED_BYTES", "1048576")]).await;
    server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "fn1", "runtime": "python3.11"})),
        )
        .await;
    let ok = b"def handle(e, c):\n    return 1\n";

    // Zip slip.
    let zip = zip_of(&[("handler.py", ok), ("../evil.py", b"x")]);
    expect_refused(&server, zip, "no-parent-dirs", Some("../evil.py")).await;
    let zip = zip_of(&[("lib/../../evil.py", b"x")]);
    expect_refused(&server, zip, "no-parent-dirs", Some("lib/../../evil.py")).await;
    // Absolute path.
    let zip = zip_of(&[("/etc/cron.d/evil", b"x")]);
    expect_refused(&server, zip, "no-absolute-paths", Some("/etc/cron.d/evil")).await;
    // Symlink entry.
    let zip = zip_with(|w| {
        w.start_file("handler.py", deflated()).unwrap();
        w.write_all(ok).unwrap();
        w.add_symlink("link", "/etc/shadow", deflated()).unwrap();
    });
    expect_refused(&server, zip, "no-symlinks", Some("link")).await;
    // Bomb by ratio: 900 KiB of zeros deflate to about 1 KiB.
    let zip = zip_of(&[("zeros.bin", &vec![0u8; 900 * 1024])]);
    let body = expect_refused(&server, zip, "compression-ratio", Some("zeros.bin")).await;
    assert!(body["error"].as_str().unwrap().contains("zip bomb"), "{body}");
    // Too many entries (the default limit, 10,000).
    let zip = zip_with(|w| {
        for i in 0..10_001 {
            w.start_file(
                format!("f{i}.txt"),
                zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored),
            )
            .unwrap();
        }
    });
    let body = expect_refused(&server, zip, "max-entries", None).await;
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("10001") && error.contains("SLESS_MAX_ARCHIVE_ENTRIES"),
        "{body}"
    );
    // Over the unpacked size (1 MiB here), with incompressible data.
    let zip = zip_of(&[
        ("a.bin", &random_bytes(700 * 1024)),
        ("b.bin", &random_bytes(700 * 1024)),
    ]);
    let body = expect_refused(&server, zip, "max-unpacked-size", Some("b.bin")).await;
    assert!(
        body["error"].as_str().unwrap().contains("SLESS_MAX_UNPACKED_BYTES"),
        "{body}"
    );
    // Two entries for one path, and a file where a folder must be: one
    // would replace the other, or the build could not unpack it.
    let zip = zip_of(&[("handler.py", ok), ("./handler.py", b"X = 2\n")]);
    expect_refused(&server, zip, "unique-paths", Some("./handler.py")).await;
    let zip = zip_of(&[("handler.py", ok), ("lib", b"x"), ("lib/util.py", b"X = 1\n")]);
    expect_refused(&server, zip, "unique-paths", Some("lib/util.py")).await;
    // A name longer than a file system takes, and a path too long to make.
    let long_name = format!("{}.py", "n".repeat(300));
    let zip = zip_of(&[("handler.py", ok), (&long_name, b"x")]);
    let body = expect_refused(&server, zip, "path-length", Some(&long_name)).await;
    assert!(body["error"].as_str().unwrap().contains("303 bytes"), "{body}");
    let long_path = format!("{}x.py", "dir/".repeat(300));
    let zip = zip_of(&[("handler.py", ok), (&long_path, b"x")]);
    let body = expect_refused(&server, zip, "path-length", None).await;
    assert!(body["error"].as_str().unwrap().contains("1204 bytes"), "{body}");
    // Not a zip, and empty.
    expect_refused(&server, b"def handle(e, c): pass".to_vec(), "zip-format", None).await;
    let body = expect_refused(&server, Vec::new(), "not-empty", None).await;
    assert!(body["error"].as_str().unwrap().contains("empty"), "{body}");
    expect_refused(&server, zip_with(|_| {}), "not-empty", None).await;

    // Nothing refused was stored, and the function never left Pending.
    let (_, got) = server.call(Method::GET, "/v1/namespaces/ns/functions/fn1", None).await;
    assert_eq!(got["status"]["phase"], "Pending", "{got}");
    assert_eq!(got["status"]["code_hash"], Value::Null);
    assert!(!server.data_dir.path().join("blobs/archives/ns/fn1").exists());

    // A good archive with folders still passes.
    let zip = zip_of(&[
        ("handler.py", ok),
        ("lib/util.py", b"X = 1\n"),
        ("./data/x.json", b"{}"),
    ]);
    let (status, body) = server.upload("ns", "fn1", zip).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
}

async fn upload_size_limit_is_413(backend: Backend) {
    let server = Server::start_with(backend, &[("SLESS_MAX_UPLOAD_BYTES", "65536")]).await;
    server
        .call(
            Method::POST,
            "/v1/namespaces/ns/functions",
            Some(json!({"name": "fn1", "runtime": "python3.11"})),
        )
        .await;
    let zip = zip_of(&[("big.bin", &random_bytes(100 * 1024))]);
    let (status, body) = server.upload("ns", "fn1", zip).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("larger than the limit"),
        "{body}"
    );
    // JSON endpoints have their own (1 MiB) limit.
    let huge = json!({"name": "x", "runtime": "python3.11", "env": {"A": "x".repeat(2 * 1024 * 1024)}});
    let (status, _) = server
        .call(Method::POST, "/v1/namespaces/ns/functions", Some(huge))
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

/// A body is held whole until it is checked, so a namespace has two uploads
/// under way at most: a third waits, its body unread, while another
/// namespace's goes on. Seen through the body's timeout, which starts with
/// its reading: three uploads that send their head and stop, two answered
/// when their bodies time out, the third only once it had its turn and its
/// own body timed out too. Eight wait at most: the eleventh is refused at
/// once.
#[tokio::test]
async fn a_namespace_has_two_uploads_under_way_at_most() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = Server::start_with(Backend::Sqlite, &[("SLESS_BODY_TIMEOUT_SEC", "2")]).await;
    for ns in ["ns", "other"] {
        let (status, body) = server
            .call(
                Method::POST,
                &format!("/v1/namespaces/{ns}/functions"),
                Some(json!({"name": "fn1", "runtime": "python3.11"})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let address = server.url.trim_start_matches("http://").to_string();
    // An upload that sends its head and two bytes of its body, then stops.
    async fn stall(address: &str, admin: &str) -> tokio::net::TcpStream {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        let head = format!(
            "PUT /v1/namespaces/ns/functions/fn1/code HTTP/1.1\r\nhost: {address}\r\n\
             authorization: Bearer {admin}\r\ncontent-type: application/zip\r\ncontent-length: 1000000\r\n\r\nPK"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stream
    }
    let mut stalled = Vec::new();
    for _ in 0..3 {
        stalled.push(stall(&address, &server.admin).await);
    }
    // Seven more wait behind the third; the eleventh upload is refused.
    let mut queued = Vec::new();
    for _ in 0..7 {
        queued.push(stall(&address, &server.admin).await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut refused = stall(&address, &server.admin).await;
    let mut reply = vec![0; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), refused.read(&mut reply))
        .await
        .expect("the upload past those waiting waited too")
        .unwrap();
    let reply = String::from_utf8_lossy(&reply[..n]);
    assert!(reply.starts_with("HTTP/1.1 429"), "{reply}");
    assert!(
        reply.contains("namespace ns has 2 code uploads under way and 8 waiting"),
        "{reply}"
    );
    // Meanwhile another namespace's upload goes through.
    let zip = zip_of(&[("handler.py", b"def handle(e, c):\n    return 1\n")]);
    let (status, body) = server.upload("other", "fn1", zip).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    // Two answered (their bodies timed out), in some order.
    let mut answered = [false; 3];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while answered.iter().filter(|a| **a).count() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no upload's body timed out within 20 s"
        );
        for (i, stream) in stalled.iter_mut().enumerate() {
            if answered[i] {
                continue;
            }
            let mut reply = [0; 512];
            if let Ok(Ok(n @ 1..)) = tokio::time::timeout(Duration::from_millis(50), stream.read(&mut reply)).await {
                let reply = String::from_utf8_lossy(&reply[..n]);
                assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
                answered[i] = true;
            }
        }
    }
    // The third had not been read: its body's timeout runs from its turn.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let waiting = (0..3)
        .filter(|&i| !answered[i])
        .filter(|&i| matches!(stalled[i].try_read(&mut [0; 64]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock))
        .count();
    assert_eq!(waiting, 1, "the third upload was read along with the first two");
}
