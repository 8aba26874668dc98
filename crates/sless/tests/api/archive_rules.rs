//! Each upload rule refused with a crafted zip: a 400 naming the entry and
//! the rule, and nothing stored.

use std::io::Write;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::harness::{eventually, zip_of, Backend, Server};

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
    assert!(body["error"].as_str().unwrap().contains("10001"), "{body}");
    // Over the unpacked size (1 MiB here), with incompressible data.
    let zip = zip_of(&[
        ("a.bin", &random_bytes(700 * 1024)),
        ("b.bin", &random_bytes(700 * 1024)),
    ]);
    expect_refused(&server, zip, "max-unpacked-size", Some("b.bin")).await;
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
/// under way at most: a third is a 429 before its bytes are read, another
/// namespace's goes on, and an upload that ends gives its place back.
#[tokio::test]
async fn a_namespace_has_two_uploads_under_way_at_most() {
    use tokio::io::AsyncWriteExt;
    let server = Server::start(Backend::Sqlite).await;
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
    // Two uploads that send their head and a little of a 1 MB body, then
    // wait. One that came in while a probe below held a place was refused
    // (answered): it is sent again.
    let address = server.url.trim_start_matches("http://").to_string();
    let hold = || async {
        let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
        let head = format!(
            "PUT /v1/namespaces/ns/functions/fn1/code HTTP/1.1\r\nhost: {address}\r\n\
             authorization: Bearer {}\r\ncontent-type: application/zip\r\ncontent-length: 1000000\r\n\r\nPK",
            server.admin
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stream
    };
    let mut slow = vec![hold().await, hold().await];
    let zip = zip_of(&[("handler.py", b"def handle(e, c):\n    return 1\n")]);
    let mut refused = None;
    for _ in 0..200 {
        for stream in slow.iter_mut() {
            if !matches!(stream.try_read(&mut [0; 64]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock) {
                *stream = hold().await;
            }
        }
        match server.upload("ns", "fn1", zip.clone()).await {
            (StatusCode::TOO_MANY_REQUESTS, body) => {
                refused = Some(body);
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let refused = refused.expect("a third upload is refused within 10 s");
    assert!(
        refused["error"].as_str().unwrap().contains("2 code uploads under way"),
        "{refused}"
    );
    let (status, body) = server.upload("other", "fn1", zip.clone()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "another namespace goes on: {body}");
    drop(slow.pop());
    eventually(Duration::from_secs(10), || async {
        match server.upload("ns", "fn1", zip.clone()).await {
            (StatusCode::ACCEPTED, _) => Ok(()),
            (status, body) => Err(format!("an ended upload's place is not given back: {status} {body}")),
        }
    })
    .await;
}
