//! `sless instance build` for real on this machine, as a build Job runs it:
//! the archive read from a file:// object store and checked, the artifact
//! stored content-addressed, its sha256 written as the termination message;
//! a failed install's error on stderr and exit code 1.

use std::path::Path;
use std::process::{Command, Output};

use sha2::{Digest, Sha256};

use super::harness::zip_of;

const FINGERPRINT: &str = "00112233445566778899aabbccddeeff";

/// Runs a build of `files` with a store in `store`; `code_hash` overrides
/// the archive's real sha256.
fn build(store: &Path, files: &[(&str, &[u8])], code_hash: Option<&str>) -> Output {
    let zip = zip_of(files);
    let hash = code_hash.map_or_else(|| hex::encode(Sha256::digest(&zip)), str::to_string);
    let archive = format!("builds/{FINGERPRINT}/{hash}.zip");
    std::fs::create_dir_all(store.join(format!("builds/{FINGERPRINT}"))).unwrap();
    std::fs::write(store.join(&archive), &zip).unwrap();
    let pod = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_sless"))
        .args(["instance", "build"])
        .env("SLESS_BLOB_URL", format!("file://{}", store.display()))
        .env("SLESS_BUILD_RUNTIME", "python3.11")
        .env("SLESS_BUILD_ARCHIVE", &archive)
        .env("SLESS_BUILD_CODE_HASH", &hash)
        .env("SLESS_BUILD_ARTIFACT", FINGERPRINT)
        .env("SLESS_BUILD_TERMINATION_LOG", store.join("termination-log"))
        .env("SLESS_INSTANCE_WORK_DIR", pod.path())
        .output()
        .unwrap()
}

#[test]
fn a_build_stores_the_artifact_and_reports_its_digest() {
    let store = tempfile::tempdir().unwrap();
    let out = build(
        store.path(),
        &[("handler.py", b"def handle(event, context):\n    return 'hi'\n")],
        None,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let digest = std::fs::read_to_string(store.path().join("termination-log")).unwrap();
    assert_eq!(digest.len(), 64, "{digest}");
    let tarball = std::fs::read(store.path().join(format!("artifacts/{FINGERPRINT}/{digest}.tar.gz")))
        .expect("the artifact under its digest");
    assert_eq!(hex::encode(Sha256::digest(&tarball)), digest);
    assert!(String::from_utf8_lossy(&out.stdout).contains("no dependencies to install"));
}

#[test]
fn a_failed_install_says_why_and_exits_1() {
    let store = tempfile::tempdir().unwrap();
    // A local requirement that is not there: pip fails without the network.
    let out = build(
        store.path(),
        &[
            ("handler.py", b"def handle(event, context):\n    return 'hi'\n"),
            ("requirements.txt", b"./no-such-project\n"),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no-such-project"), "{stderr}");
    assert!(!store.path().join("artifacts").exists());
}

#[test]
fn an_archive_that_is_not_the_uploaded_one_is_refused() {
    let store = tempfile::tempdir().unwrap();
    let out = build(store.path(), &[("handler.py", b"x = 1\n")], Some(&"ab".repeat(32)));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("has sha256"), "{stderr}");
}
