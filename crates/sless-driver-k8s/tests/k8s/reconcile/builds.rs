//! Builds as Jobs: success, failure, timeout; the build pod's grant (two
//! presigned URLs, no credentials) and the server's check of what it
//! uploaded.

use sha2::{Digest, Sha256};

use super::*;

/// What the stand-in build pod uploads, and its sha256.
const TARBALL: &[u8] = b"a gzipped tarball";

fn tarball_digest() -> String {
    hex::encode(Sha256::digest(TARBALL))
}

fn build_job(archive: &[u8]) -> BuildJob {
    BuildJob {
        key: key(),
        runtime: Runtime::Python311,
        code_hash: "c0de".repeat(16),
        archive: Bytes::copy_from_slice(archive),
        timeout: Duration::from_secs(120),
    }
}

/// The build Job's name and the artifact it builds.
async fn build_names(s: &Scenario) -> (String, Fingerprint) {
    let artifact = s
        .driver
        .fingerprint(Runtime::Python311, &"c0de".repeat(16))
        .await
        .unwrap();
    (format!("build-hello-{}", &artifact.as_str()[..12]), artifact)
}

/// A build Job made (checked), then found running, then ended as `status` says.
async fn build_runs(api: &mut ApiServer, name: &str, artifact: &Fingerprint, ended: Value) {
    api.prepares_namespace_and_anchor().await;
    let made = api
        .expect("POST", &format!("{BATCH}/jobs"), 201, job(name, json!({})))
        .await;
    assert_eq!(made.body["metadata"]["name"], name);
    assert_eq!(made.body["spec"]["activeDeadlineSeconds"], 120);
    assert_eq!(made.body["metadata"]["ownerReferences"][0]["uid"], "uid-of-fn-hello");
    let container = &made.body["spec"]["template"]["spec"]["containers"][0];
    assert!(container.get("envFrom").is_none(), "no credentials: {container}");
    let env = |name: &str| {
        container["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .and_then(|e| e["value"].as_str())
            .unwrap_or_else(|| panic!("{name} in {container}"))
            .to_string()
    };
    // One presigned GET of the archive, one presigned PUT of the upload,
    // valid for the build's deadline and the pod's start allowance.
    let archive = env("SLESS_BUILD_ARCHIVE_URL");
    let upload = env("SLESS_BUILD_UPLOAD_URL");
    let code_hash = "c0de".repeat(16);
    assert!(
        archive.contains(&format!("/builds/{artifact}/{code_hash}.zip?")),
        "{archive}"
    );
    assert!(
        upload.contains(&format!("/builds/{artifact}/{code_hash}.tar.gz?")),
        "{upload}"
    );
    assert!(
        archive.ends_with("X-Amz-Expires=420&X-Amz-Signature=for-GET"),
        "{archive}"
    );
    assert!(
        upload.ends_with("X-Amz-Expires=420&X-Amz-Signature=for-PUT"),
        "{upload}"
    );
    api.expect(
        "GET",
        &format!("{BATCH}/jobs/{name}"),
        200,
        job(name, json!({"active": 1})),
    )
    .await;
    api.expect("GET", &format!("{BATCH}/jobs/{name}"), 200, job(name, ended))
        .await;
}

/// The steps of a build whose pod uploaded `uploaded` (if anything) and
/// reported `reported` as its sha256.
async fn build_succeeds(
    api: &mut ApiServer,
    store: &written::Written,
    names: (String, Fingerprint),
    uploaded: Option<&[u8]>,
    reported: &str,
) {
    let (name, artifact) = names;
    build_runs(
        api,
        &name,
        &artifact,
        json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}),
    )
    .await;
    if let Some(tarball) = uploaded {
        let upload = object_store::path::Path::from(format!("builds/{artifact}/{}.tar.gz", "c0de".repeat(16)));
        store
            .put(&upload, Bytes::copy_from_slice(tarball).into())
            .await
            .unwrap();
    }
    let pods = api
        .expect(
            "GET",
            &format!("{CORE}/pods"),
            200,
            pod_list(vec![ended_pod("build-pod", "build", 0, reported)]),
        )
        .await;
    assert!(
        pods.query.contains(&format!("batch.kubernetes.io%2Fjob-name%3D{name}")),
        "{}",
        pods.query
    );
    let log = api
        .expect(
            "GET",
            &format!("{CORE}/pods/build-pod/log"),
            200,
            json!("Successfully installed requests\n"),
        )
        .await;
    assert!(log.query.contains("tailLines=40"), "{}", log.query);
}

/// Every key left in the object store.
async fn stored(s: &Scenario) -> Vec<String> {
    let left: Vec<_> = futures::TryStreamExt::try_collect::<Vec<_>>(s.store.list(None))
        .await
        .unwrap();
    left.into_iter().map(|meta| meta.location.to_string()).collect()
}

#[tokio::test]
async fn a_build_runs_as_a_job_and_the_server_accepts_the_upload_it_hashed() {
    let mut s = scenario();
    let names = build_names(&s).await;
    let artifact = names.1.clone();
    let digest = tarball_digest();
    let (built, ()) = tokio::join!(
        s.driver.build(build_job(b"zip bytes")),
        build_succeeds(&mut s.api, &s.store, names, Some(TARBALL), &digest)
    );
    let built = built.unwrap();
    assert_eq!(built.artifact, artifact);
    assert_eq!(built.digest.as_deref(), Some(digest.as_str()));
    assert!(built.log_tail.contains("Successfully installed"));
    // The upload became the artifact; the archive and the staging key are gone.
    assert_eq!(stored(&s).await, [format!("artifacts/{artifact}/{digest}.tar.gz")]);
    let accepted = s
        .store
        .get(&object_store::path::Path::from(format!(
            "artifacts/{artifact}/{digest}.tar.gz"
        )))
        .await
        .unwrap();
    assert_eq!(accepted.bytes().await.unwrap(), TARBALL);
    // Its bytes were written once more than the build uploaded them: read,
    // hashed and kept in one pass, not copied aside and then renamed
    // (each a copy in S3).
    let code_hash = "c0de".repeat(16);
    let write = |key: String, how, bytes: usize| written::Write {
        key,
        how,
        bytes: bytes as u64,
    };
    assert_eq!(
        s.store.writes(),
        [
            write(format!("builds/{artifact}/{code_hash}.zip"), "put", b"zip bytes".len()),
            write(format!("builds/{artifact}/{code_hash}.tar.gz"), "put", TARBALL.len()),
            write(format!("artifacts/{artifact}/{digest}.tar.gz"), "part", TARBALL.len()),
        ]
    );
    // Once the artifact is stored, a build of the same code asks nothing.
    assert!(s.driver.has_artifact(&artifact).await.unwrap());
    let (again, ()) = tokio::join!(s.driver.build(build_job(b"zip bytes")), s.api.nothing_more());
    assert_eq!(again.unwrap().digest.as_deref(), Some(digest.as_str()));
    s.driver.remove_artifact(&artifact).await.unwrap();
    assert!(!s.driver.has_artifact(&artifact).await.unwrap());
}

#[tokio::test]
async fn an_upload_that_is_not_what_the_build_reported_is_refused() {
    let mut s = scenario();
    let (names, digest) = (build_names(&s).await, tarball_digest());
    let (built, ()) = tokio::join!(
        s.driver.build(build_job(b"zip bytes")),
        build_succeeds(&mut s.api, &s.store, names, Some(b"something else"), &digest)
    );
    let Err(BuildError::Failed { log_tail }) = built else {
        panic!("a refused build, not {built:?}")
    };
    assert!(
        log_tail.contains("refused") && log_tail.contains(&tarball_digest()),
        "{log_tail}"
    );
    assert_eq!(stored(&s).await, Vec::<String>::new(), "nothing accepted, nothing left");
}

/// An upload larger than a tarball of a build within SLESS_MAX_BUILD_MB
/// can be (`max_artifact_bytes`: twice it and 64 MiB) is refused by its
/// size, before it is copied or read, and goes.
#[tokio::test]
async fn an_upload_larger_than_any_build_makes_is_refused() {
    let mut s = scenario_of(
        sless_driver_k8s::KubeSettings {
            max_build_mb: 1,
            ..settings()
        },
        None,
    );
    let max = sless_driver_k8s::max_artifact_bytes(1);
    assert_eq!(max, 66 << 20);
    let too_big = vec![0u8; max as usize + 1];
    let (names, digest) = (build_names(&s).await, hex::encode(Sha256::digest(&too_big)));
    let (built, ()) = tokio::join!(
        s.driver.build(build_job(b"zip bytes")),
        build_succeeds(&mut s.api, &s.store, names, Some(&too_big), &digest)
    );
    let Err(BuildError::Failed { log_tail }) = built else {
        panic!("a refused build, not {built:?}")
    };
    assert!(
        log_tail.contains(&format!("{} bytes, over the {max} bytes accepted", max + 1))
            && log_tail.contains("SLESS_MAX_BUILD_MB"),
        "{log_tail}"
    );
    assert_eq!(stored(&s).await, Vec::<String>::new(), "nothing accepted, nothing left");
}

#[tokio::test]
async fn a_build_that_uploaded_nothing_fails() {
    let mut s = scenario();
    let (names, digest) = (build_names(&s).await, tarball_digest());
    let (built, ()) = tokio::join!(
        s.driver.build(build_job(b"zip bytes")),
        build_succeeds(&mut s.api, &s.store, names, None, &digest)
    );
    let Err(BuildError::Failed { log_tail }) = built else {
        panic!("a failed build, not {built:?}")
    };
    assert!(log_tail.contains("uploaded no artifact"), "{log_tail}");
    assert_eq!(stored(&s).await, Vec::<String>::new());
}

#[tokio::test]
async fn a_failed_build_reports_its_log_tail() {
    let mut s = scenario();
    let (name, artifact) = build_names(&s).await;
    let (built, ()) = tokio::join!(s.driver.build(build_job(b"zip bytes")), async {
        build_runs(
            &mut s.api,
            &name,
            &artifact,
            json!({"failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}),
        )
        .await;
        s.api
            .expect(
                "GET",
                &format!("{CORE}/pods"),
                200,
                pod_list(vec![ended_pod("build-pod", "build", 1, "pip failed")]),
            )
            .await;
        s.api
            .expect(
                "GET",
                &format!("{CORE}/pods/build-pod/log"),
                200,
                json!("ERROR: No matching distribution found for nosuchpkg\n"),
            )
            .await;
    });
    let Err(BuildError::Failed { log_tail }) = built else {
        panic!("a failed build, not {built:?}")
    };
    assert!(
        log_tail.contains("No matching distribution found for nosuchpkg"),
        "{log_tail}"
    );
}

#[tokio::test]
async fn a_build_past_its_deadline_times_out() {
    let mut s = scenario();
    let (name, artifact) = build_names(&s).await;
    let (built, ()) = tokio::join!(s.driver.build(build_job(b"zip bytes")), async {
        build_runs(
            &mut s.api,
            &name,
            &artifact,
            json!({"failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
                   "message": "Job was active longer than specified deadline"}]}),
        )
        .await;
        // Its pod was stopped and is gone.
        s.api
            .expect("GET", &format!("{CORE}/pods"), 200, pod_list(vec![]))
            .await;
    });
    let Err(BuildError::TimedOut { after, log_tail }) = built else {
        panic!("a timeout, not {built:?}")
    };
    assert_eq!(after, Duration::from_secs(120));
    assert!(log_tail.contains("longer than specified deadline"), "{log_tail}");
}
