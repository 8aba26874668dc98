//! `sless instance build` for real on this machine, as a build Job runs it,
//! against the real S3 server (`s3s-fs`): with no object-store credentials,
//! only the build's grant (a presigned GET of its archive, a presigned PUT
//! of its staging key, as the Kubernetes driver makes them) it checks the
//! archive, builds, uploads the tarball and writes its sha256 as the
//! termination message; a failed install's error goes to stderr with exit
//! code 1. And the grant itself: it writes its one key and nothing else.

use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path as Key;
use object_store::signer::Signer;
use object_store::{ObjectStore, ObjectStoreExt};
use sha2::{Digest, Sha256};
use sless_driver_k8s::grants::{build_grant, BuildGrant};

use super::harness::{eventually, zip_of, S3Server};

const FINGERPRINT: &str = "00112233445566778899aabbccddeeff";

/// The S3 server, the server's view of its bucket (under the prefix
/// `sless`, as deployments use it) and what presigns for it.
struct Bucket {
    s3: S3Server,
    store: Arc<dyn ObjectStore>,
    signer: Arc<dyn Signer>,
}

async fn bucket() -> Bucket {
    let s3 = S3Server::start().await;
    let settings = s3.blob_settings();
    let store = sless_server::blobs::open(&settings).await.unwrap();
    let signer = sless_server::blobs::signer(&settings).unwrap();
    Bucket { s3, store, signer }
}

fn archive_key(code_hash: &str) -> String {
    format!("builds/{FINGERPRINT}/{code_hash}.zip")
}

fn upload_key(code_hash: &str) -> String {
    format!("builds/{FINGERPRINT}/{code_hash}.tar.gz")
}

/// A build's grant, as the driver makes it.
async fn grant(bucket: &Bucket, code_hash: &str, valid_for: Duration) -> BuildGrant {
    build_grant(
        &bucket.signer,
        &archive_key(code_hash),
        &upload_key(code_hash),
        valid_for,
    )
    .await
    .unwrap()
}

/// What a build run left: its output, the termination message, the code hash.
struct Run {
    out: std::process::Output,
    termination: Option<String>,
    code_hash: String,
}

/// Stores the archive of `files` and runs a build of it with nothing but
/// its grant; `code_hash` overrides the archive's real sha256.
async fn build(bucket: &Bucket, files: &[(&str, &[u8])], code_hash: Option<&str>) -> Run {
    build_with(bucket, files, code_hash, &[]).await
}

/// [`build`] with more environment (as the build Job's pod would have).
async fn build_with(bucket: &Bucket, files: &[(&str, &[u8])], code_hash: Option<&str>, env: &[(&str, &str)]) -> Run {
    let zip = zip_of(files);
    let code_hash = code_hash.map_or_else(|| hex::encode(Sha256::digest(&zip)), str::to_string);
    bucket
        .store
        .put(&Key::from(archive_key(&code_hash)), zip.into())
        .await
        .unwrap();
    let grant = grant(bucket, &code_hash, Duration::from_secs(300)).await;
    let pod = tempfile::tempdir().unwrap();
    let termination = pod.path().join("termination-log");
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_sless"));
    cmd.args(["instance", "build"])
        .env("SLESS_BUILD_RUNTIME", "python3.11")
        .env("SLESS_BUILD_ARCHIVE_URL", &grant.archive_url)
        .env("SLESS_BUILD_UPLOAD_URL", &grant.upload_url)
        .env("SLESS_BUILD_CODE_HASH", &code_hash)
        .env("SLESS_BUILD_ARTIFACT", FINGERPRINT)
        .env("SLESS_BUILD_TERMINATION_LOG", &termination)
        .env("SLESS_INSTANCE_WORK_DIR", pod.path().join("work"))
        .envs(env.iter().copied());
    // No credentials of any kind reach the build.
    for (name, _) in std::env::vars() {
        if name.starts_with("SLESS_S3_") || name.starts_with("AWS_") || name == "SLESS_BLOB_URL" {
            cmd.env_remove(name);
        }
    }
    let out = cmd.output().await.unwrap();
    Run {
        out,
        termination: std::fs::read_to_string(&termination).ok(),
        code_hash,
    }
}

async fn read(bucket: &Bucket, key: &str) -> Option<bytes::Bytes> {
    match bucket.store.get(&Key::from(key)).await {
        Ok(got) => Some(got.bytes().await.unwrap()),
        Err(object_store::Error::NotFound { .. }) => None,
        Err(e) => panic!("reading {key}: {e}"),
    }
}

#[tokio::test]
async fn a_build_with_only_its_grant_uploads_the_artifact_and_reports_its_digest() {
    let bucket = bucket().await;
    let run = build(
        &bucket,
        &[("handler.py", b"def handle(event, context):\n    return 'hi'\n")],
        None,
    )
    .await;
    assert!(run.out.status.success(), "{}", String::from_utf8_lossy(&run.out.stderr));
    let digest = run.termination.expect("the termination message");
    assert_eq!(digest.len(), 64, "{digest}");
    let tarball = read(&bucket, &upload_key(&run.code_hash))
        .await
        .expect("the tarball at the staging key");
    assert_eq!(hex::encode(Sha256::digest(&tarball)), digest);
    let stdout = String::from_utf8_lossy(&run.out.stdout);
    assert!(stdout.contains("no dependencies to install"), "{stdout}");
    assert!(stdout.contains("compiled 1 Python module to bytecode"), "{stdout}");
    // The handler's bytecode, compiled by the build, is in the artifact.
    let mut files = tar::Archive::new(flate2::read::GzDecoder::new(&tarball[..]));
    let names: Vec<String> = files
        .entries()
        .unwrap()
        .map(|entry| entry.unwrap().path().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .any(|name| name.ends_with("__pycache__/handler.cpython-311.pyc")),
        "{names:?}"
    );
    // The build wrote its staging key and nothing else: the server makes artifacts.
    assert!(bucket.s3.keys("sless/artifacts").is_empty());
}

#[tokio::test]
async fn a_failed_install_says_why_and_exits_1() {
    let bucket = bucket().await;
    // A local requirement that is not there: pip fails without the network.
    let run = build(
        &bucket,
        &[
            ("handler.py", b"def handle(event, context):\n    return 'hi'\n"),
            ("requirements.txt", b"./no-such-project\n"),
        ],
        None,
    )
    .await;
    assert_eq!(run.out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&run.out.stderr);
    assert!(stderr.contains("no-such-project"), "{stderr}");
    assert_eq!(read(&bucket, &upload_key(&run.code_hash)).await, None);
}

/// An install runs the tenant's code (npm's install script here), which
/// may write as much as it likes: a build Job keeps no more than the
/// server's `SLESS_MAX_BUILD_MB` (passed as `SLESS_BUILD_MAX_MB`), failing
/// as the local builder does, and uploads nothing; under it, it uploads.
#[tokio::test]
async fn a_build_that_writes_past_its_bound_fails_saying_so() {
    let bucket = bucket().await;
    let writes = |mib: u32| {
        format!(
            r#"{{"name": "fill", "version": "1.0.0", "scripts": {{"install": "node -e \"const fs = require('fs'); const mib = Buffer.alloc(1 << 20, 7); const fd = fs.openSync('made', 'w'); for (let i = 0; i < {mib}; i++) fs.writeSync(fd, mib)\""}}}}"#
        )
    };
    let handler: &[u8] = b"exports.handle = async () => 'hi';\n";
    let bound = [("SLESS_BUILD_RUNTIME", "nodejs20"), ("SLESS_BUILD_MAX_MB", "64")];
    let over = writes(80);
    let run = build_with(
        &bucket,
        &[("handler.js", handler), ("package.json", over.as_bytes())],
        None,
        &bound,
    )
    .await;
    assert_eq!(run.out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&run.out.stderr);
    assert!(
        stderr.contains("the build wrote as much into the function's directory as it may: 64 MiB"),
        "{stderr}"
    );
    assert_eq!(read(&bucket, &upload_key(&run.code_hash)).await, None);

    let under = writes(40);
    let run = build_with(
        &bucket,
        &[("handler.js", handler), ("package.json", under.as_bytes())],
        None,
        &bound,
    )
    .await;
    assert!(run.out.status.success(), "{}", String::from_utf8_lossy(&run.out.stderr));
    assert!(read(&bucket, &upload_key(&run.code_hash)).await.is_some());
}

/// The package index the server gives a build Job (SLESS_PIP_INDEX_URL)
/// is the one pip asks: here an empty local index, so the requirement is
/// not found there (and no registry on the internet is asked).
#[tokio::test]
async fn the_build_installs_from_the_index_it_is_given() {
    let bucket = bucket().await;
    let index = tempfile::tempdir().unwrap();
    let url = format!("file://{}", index.path().display());
    let run = build_with(
        &bucket,
        &[
            ("handler.py", b"def handle(event, context):\n    return 'hi'\n"),
            ("requirements.txt", b"only-on-pypi==1.0\n"),
        ],
        None,
        &[("PIP_INDEX_URL", url.as_str())],
    )
    .await;
    assert_eq!(run.out.status.code(), Some(1));
    let log = String::from_utf8_lossy(&run.out.stderr);
    assert!(log.contains(&format!("Looking in indexes: {url}")), "{log}");
    assert!(
        log.contains("No matching distribution found for only-on-pypi==1.0"),
        "{log}"
    );
}

#[tokio::test]
async fn an_archive_that_is_not_the_uploaded_one_is_refused() {
    let bucket = bucket().await;
    let run = build(&bucket, &[("handler.py", b"x = 1\n")], Some(&"ab".repeat(32))).await;
    assert!(!run.out.status.success());
    let stderr = String::from_utf8_lossy(&run.out.stderr);
    assert!(stderr.contains("has sha256"), "{stderr}");
    assert!(
        !stderr.contains("X-Amz-Signature"),
        "the grant is never printed: {stderr}"
    );
}

/// `url` with its key (the path after the bucket's prefix) replaced by `key`.
fn with_key(url: &str, from: &str, key: &str) -> String {
    assert!(url.contains(from), "{url}");
    url.replacen(from, key, 1)
}

#[tokio::test]
async fn a_build_grant_writes_its_one_key_and_nothing_else() {
    let bucket = bucket().await;
    let code_hash = "c0de".repeat(16);
    let other = "artifacts/ffffffffffffffffffffffffffffffff/victim.tar.gz";
    bucket
        .store
        .put(
            &Key::from(other),
            bytes::Bytes::from_static(b"another function's artifact").into(),
        )
        .await
        .unwrap();
    bucket
        .store
        .put(
            &Key::from(archive_key(&code_hash)),
            bytes::Bytes::from_static(b"the archive").into(),
        )
        .await
        .unwrap();
    let grant = grant(&bucket, &code_hash, Duration::from_secs(300)).await;
    let http = reqwest::Client::new();
    let status = |request: reqwest::RequestBuilder| async move { request.send().await.unwrap().status().as_u16() };

    // Its key: written.
    assert_eq!(status(http.put(&grant.upload_url).body("built")).await, 200);
    assert_eq!(read(&bucket, &upload_key(&code_hash)).await.unwrap(), "built");
    // The archive: read, not written nor deleted.
    assert_eq!(status(http.get(&grant.archive_url)).await, 200);
    assert_eq!(status(http.put(&grant.archive_url).body("evil")).await, 403);
    assert_eq!(status(http.delete(&grant.archive_url)).await, 403);
    assert_eq!(read(&bucket, &archive_key(&code_hash)).await.unwrap(), "the archive");
    // Another key with the same signature: refused, whatever the method.
    let upload_path = format!("sless/{}", upload_key(&code_hash));
    let elsewhere = with_key(&grant.upload_url, &upload_path, &format!("sless/{other}"));
    assert_eq!(status(http.put(&elsewhere).body("evil")).await, 403);
    assert_eq!(status(http.delete(&elsewhere)).await, 403);
    assert_eq!(status(http.get(&elsewhere)).await, 403);
    assert_eq!(read(&bucket, other).await.unwrap(), "another function's artifact");
    // Its own key otherwise than PUT: not read, not deleted.
    assert_eq!(status(http.get(&grant.upload_url)).await, 403);
    assert_eq!(status(http.delete(&grant.upload_url)).await, 403);
    // Nor the bucket listed.
    let listing = with_key(&grant.upload_url, &format!("/{upload_path}"), "");
    assert_eq!(status(http.get(&listing)).await, 403);
    assert_eq!(read(&bucket, &upload_key(&code_hash)).await.unwrap(), "built");
}

#[tokio::test]
async fn a_build_grant_ends_when_it_expires() {
    let bucket = bucket().await;
    let code_hash = "c0de".repeat(16);
    let grant = grant(&bucket, &code_hash, Duration::from_secs(1)).await;
    let http = reqwest::Client::new();
    let text = eventually(Duration::from_secs(10), || async {
        let answer = http.put(&grant.upload_url).body("late").send().await.unwrap();
        match answer.status().as_u16() {
            403 => Ok(answer.text().await.unwrap()),
            status => Err(format!("the PUT still answers {status}")),
        }
    })
    .await;
    assert!(text.contains("expired"), "{text}");
}
