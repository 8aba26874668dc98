//! The Kubernetes driver's data path on this machine: `KubeDriver` →
//! EndpointSlices → frames over TCP → real `sless instance` processes on
//! 127.0.0.1 that fetch their artifact from the real S3 server.
//!
//! **The API server and the kubelet here are stand-ins** (there is no
//! cluster on the project's machines): `sless_fake_cluster`
//! (crates/sless-fake-cluster) answers the few API endpoints the driver
//! calls and runs each pod as a real `sless instance` process; its doc
//! comment says what it keeps and how. Everything else is real: the
//! driver, the instances, the builds, the shim, the S3 server.

use std::process::Command;
use std::time::Duration;

use object_store::ObjectStoreExt;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use sless_api::Runtime;
use sless_driver::{Deployment, Driver, InvokeError, VersionRef};
use sless_driver_k8s::KubeDriver;
use sless_fake_cluster::{key, FakeCluster, HANDLER};

use super::harness::{event_call, eventually, peak_memory};

/// The stand-in cluster, its pods running this build's `sless`.
pub(super) async fn start() -> FakeCluster {
    FakeCluster::start(env!("CARGO_BIN_EXE_sless")).await
}

/// Calls version `n` through `driver`: what the handler answered.
pub(super) async fn invoke(driver: &KubeDriver, n: u64, event: Value) -> Result<Value, InvokeError> {
    let result = driver
        .invoke(&VersionRef::new(key(), n), &event_call("req", event))
        .await?;
    assert_eq!(result.status, 200, "{}", String::from_utf8_lossy(&result.body));
    Ok(serde_json::from_slice(&result.body).unwrap())
}

#[tokio::test]
async fn two_replicas_scale_a_version_from_zero_and_a_real_instance_answers_both() {
    let cluster = start().await;
    let (a, b) = (cluster.replica(), cluster.replica());
    a.deploy(cluster.version(1)).await.unwrap();
    b.deploy(cluster.version(1)).await.unwrap();
    assert!(cluster.pids(1).is_empty(), "a version starts at zero");
    // The first call scales it to one pod and waits for it.
    let first = invoke(&a, 1, json!({})).await.unwrap();
    assert_eq!(first["which"], "v1");
    assert!(first["pid"].as_u64().is_some(), "{first}");
    let pids = cluster.pids(1);
    assert_eq!(pids.len(), 1);
    // A python handler's pid is the shim's, a child of the instance: the
    // other replica reaches the same pod.
    let second = invoke(&b, 1, json!({})).await.unwrap();
    assert_eq!(second["pid"], first["pid"]);
    assert_eq!(cluster.pids(1), pids, "one pod for both replicas");
}

#[tokio::test]
async fn a_new_version_serves_its_own_answers_beside_the_old_one() {
    let cluster = start().await;
    let driver = cluster.replica();
    driver.deploy(cluster.version(1)).await.unwrap();
    assert_eq!(invoke(&driver, 1, json!({})).await.unwrap()["which"], "v1");
    driver.deploy(cluster.version(2)).await.unwrap();
    let calls = (0..6).map(|i| {
        let n = 1 + i % 2;
        let driver = &driver;
        async move { (n, invoke(driver, n, json!({})).await.unwrap()) }
    });
    for (n, answer) in futures::future::join_all(calls).await {
        assert_eq!(answer["which"], format!("v{n}"), "no stale answer");
    }
    assert!(!cluster.pids(2).is_empty() && !cluster.pids(1).is_empty());
}

#[tokio::test]
async fn a_killed_pod_fails_its_call_then_its_restart_answers() {
    let cluster = start().await;
    let driver = cluster.replica();
    driver.deploy(cluster.version(1)).await.unwrap();
    let before = invoke(&driver, 1, json!({})).await.unwrap();
    let marks = tempfile::tempdir().unwrap();
    let mark = marks.path().join("in-the-handler");
    let in_flight = invoke(&driver, 1, json!({"mark": mark}));
    let kill = async {
        eventually(Duration::from_secs(20), || async {
            mark.exists()
                .then_some(())
                .ok_or_else(|| "the call has not reached the handler".to_string())
        })
        .await;
        let pid = cluster.pids(1)[0];
        Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap();
    };
    let (broken, ()) = tokio::join!(in_flight, kill);
    assert!(matches!(broken, Err(InvokeError::Crashed { .. })), "{broken:?}");
    // The kubelet starts it again; calls find it once it is ready.
    let after = eventually(Duration::from_secs(30), || async {
        invoke(&driver, 1, json!({})).await.map_err(|e| e.to_string())
    })
    .await;
    assert_ne!(after["pid"], before["pid"]);
}

/// An answer the gateway cannot send (more headers than any client takes)
/// is a bad answer, not a crash: the pod did nothing wrong and goes on.
#[tokio::test]
async fn an_answer_the_gateway_cannot_send_is_named_and_the_pod_goes_on() {
    let cluster = start().await;
    let driver = cluster.replica();
    driver.deploy(cluster.version(1)).await.unwrap();
    let before = invoke(&driver, 1, json!({})).await.unwrap();
    let refused = driver
        .invoke(&VersionRef::new(key(), 1), &event_call("req", json!({"many": true})))
        .await;
    match refused {
        Err(InvokeError::BadAnswer { reason, .. }) => assert!(reason.contains("more than 1000 headers"), "{reason}"),
        other => panic!("a bad answer, not {other:?}"),
    }
    let after = invoke(&driver, 1, json!({})).await.unwrap();
    assert_eq!(after["pid"], before["pid"], "the pod restarted");
}

/// A build as a Job: its pod (a real `sless instance build`, with the
/// Job's environment only) reads the archive and uploads the tarball
/// through its grant; the driver hashes the upload, stores it as the
/// artifact, and a version of it serves.
#[tokio::test]
async fn a_build_job_uploads_through_its_grant_and_what_the_server_accepted_serves() {
    let cluster = start().await;
    let driver = cluster.replica();
    let built = build(&driver, &[("handler.py", HANDLER.as_bytes())]).await.unwrap();
    let digest = built.digest.clone().unwrap();
    assert!(
        built.log_tail.contains("no dependencies to install"),
        "{}",
        built.log_tail
    );
    // The accepted artifact is what its digest says; the build's archive
    // and upload are gone.
    let stored = accepted(&cluster, &built.artifact, &digest).await;
    assert!(cluster.s3.keys("sless/artifacts").iter().any(|k| k.contains(&digest)));
    // What it takes (the storage quota's figure) is its tarball, whether
    // built now or found stored; the leader's sweep lists it.
    assert_eq!(built.bytes, stored.len() as u64);
    let again = build(&driver, &[("handler.py", HANDLER.as_bytes())]).await.unwrap();
    assert_eq!(
        (again.bytes, again.digest.as_deref()),
        (built.bytes, Some(digest.as_str()))
    );
    assert_eq!(driver.artifact_bytes(&built.artifact).await.unwrap(), Some(built.bytes));
    let listed = driver.stored_artifacts().await.unwrap();
    assert!(listed.iter().any(|(a, _)| *a == built.artifact), "{listed:?}");
    let version = Deployment {
        artifact: built.artifact,
        digest: Some(digest),
        ..cluster.version(1)
    };
    driver.deploy(version).await.unwrap();
    assert_eq!(invoke(&driver, 1, json!({})).await.unwrap()["which"], "v1");
}

/// What [`noisy_artifact`] adds to the handler: bytes that do not compress.
pub(super) const NOISE_BYTES: u64 = 96 << 20;

/// An artifact of the handler beside [`NOISE_BYTES`] of random bytes, stored
/// as a build stores it; returns it and its tarball's sha256.
pub(super) async fn noisy_artifact(cluster: &FakeCluster) -> (sless_driver::Fingerprint, String) {
    use std::io::Read;
    let code = tempfile::tempdir().unwrap();
    std::fs::write(code.path().join("handler.py"), HANDLER).unwrap();
    let mut noise = Vec::new();
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .take(NOISE_BYTES)
        .read_to_end(&mut noise)
        .unwrap();
    std::fs::write(code.path().join("noise.bin"), noise).unwrap();
    let fingerprint = "fedcba9876543210fedcba9876543210";
    let digest = cluster.store_artifact(fingerprint, code.path()).await;
    (sless_driver::Fingerprint::from_stored(fingerprint), digest)
}

/// Panics unless `noisy`, the peak memory of `pod` with the noise of
/// [`noisy_artifact`], is within half of that noise above `bare`, its peak
/// without: it never held the tarball whole.
pub(super) fn assert_never_whole(pod: &str, bare: u64, noisy: u64) {
    assert!(
        noisy < bare + NOISE_BYTES / 2,
        "{pod}'s peak was {} MiB with {} MiB of noise, {} MiB without",
        noisy >> 20,
        NOISE_BYTES >> 20,
        bare >> 20
    );
}

/// A pod fetches its artifact into its code volume as it comes, never
/// whole in memory: the fetch of a real pod is given 256 MiB, and an
/// artifact may be up to SLESS_MAX_BUILD_MB (1 GiB). Here 96 MiB that do
/// not compress: the instance's peak is above that of one with the bare
/// handler by a fraction of it.
#[tokio::test]
async fn a_pod_fetches_its_artifact_as_it_comes_never_whole_in_memory() {
    let cluster = start().await;
    let driver = cluster.replica();
    driver.deploy(cluster.version(1)).await.unwrap();
    let (artifact, digest) = noisy_artifact(&cluster).await;
    let noisy = Deployment {
        artifact,
        digest: Some(digest),
        ..cluster.version(2)
    };
    driver.deploy(noisy).await.unwrap();
    for n in [1, 2] {
        assert_eq!(invoke(&driver, n, json!({})).await.unwrap()["which"], format!("v{n}"));
    }
    let [bare, noisy] = [1, 2].map(|n| peak_memory(cluster.pids(n)[0]));
    assert_never_whole("the instance", bare, noisy);
}

/// A build pod packs its artifact into a file and streams it up, never
/// whole in memory (it has 1 GiB, and an artifact may be as large): with
/// 96 MiB that do not compress (written by npm's preinstall) its peak is a
/// fraction of that above a bare build's, and what the server accepted is
/// what the build hashed.
#[tokio::test]
async fn a_build_pod_streams_its_artifact_never_whole_in_memory() {
    let cluster = start().await;
    let driver = cluster.replica();
    let package = |script: &str| {
        format!(r#"{{"name": "noisy", "version": "1.0.0", "private": true, "scripts": {{"preinstall": "{script}"}}}}"#)
    };
    let handler: &[u8] = b"exports.handle = () => 'built';\n";
    let bare = package("true");
    build_as(
        Runtime::Nodejs20,
        &driver,
        &[("package.json", bare.as_bytes()), ("handler.js", handler)],
    )
    .await
    .unwrap();
    let bare = cluster.take_build_peak();
    let noisy = package(&format!("head -c {NOISE_BYTES} /dev/urandom > noise.bin"));
    let built = build_as(
        Runtime::Nodejs20,
        &driver,
        &[("package.json", noisy.as_bytes()), ("handler.js", handler)],
    )
    .await
    .unwrap();
    let noisy = cluster.take_build_peak();
    assert!(bare > 0, "the kubelet saw the build pods");
    assert_never_whole("the build pod", bare, noisy);
    assert!(
        built.bytes > NOISE_BYTES,
        "the noise is in the artifact: {}",
        built.bytes
    );
    accepted(&cluster, &built.artifact, &built.digest.unwrap()).await;
}

/// The tarball of `artifact` the server accepted, once its sha256 is
/// `digest` and nothing of its build is left under `builds/`.
async fn accepted(cluster: &FakeCluster, artifact: &sless_driver::Fingerprint, digest: &str) -> bytes::Bytes {
    let stored = cluster
        .store
        .get(&object_store::path::Path::from(format!(
            "artifacts/{artifact}/{digest}.tar.gz"
        )))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(hex::encode(Sha256::digest(&stored)), digest);
    assert_eq!(
        cluster.s3.keys("sless/builds"),
        Vec::<String>::new(),
        "nothing staged is left"
    );
    stored
}

/// Builds `files` through `driver`, for Python.
async fn build(driver: &KubeDriver, files: &[(&str, &[u8])]) -> Result<sless_driver::Built, sless_driver::BuildError> {
    build_as(Runtime::Python311, driver, files).await
}

/// Builds `files` through `driver` for `runtime`.
async fn build_as(
    runtime: Runtime,
    driver: &KubeDriver,
    files: &[(&str, &[u8])],
) -> Result<sless_driver::Built, sless_driver::BuildError> {
    let archive = super::harness::zip_of(files);
    driver
        .build(sless_driver::BuildJob {
            key: key(),
            runtime,
            code_hash: hex::encode(Sha256::digest(&archive)),
            archive: archive.into(),
            timeout: Duration::from_secs(120),
        })
        .await
}

#[tokio::test]
async fn a_failed_build_job_reports_its_log_tail_and_stores_nothing() {
    let cluster = start().await;
    let driver = cluster.replica();
    // A local requirement that is not there: pip fails without the network.
    let built = build(
        &driver,
        &[
            ("handler.py", HANDLER.as_bytes()),
            ("requirements.txt", b"./no-such-project\n"),
        ],
    )
    .await;
    let Err(sless_driver::BuildError::Failed { log_tail }) = built else {
        panic!("a failed build, not {built:?}")
    };
    assert!(log_tail.contains("no-such-project"), "{log_tail}");
    assert_eq!(cluster.s3.keys("sless/builds"), Vec::<String>::new());
    assert_eq!(
        cluster.s3.keys("sless/artifacts").len(),
        1,
        "only the prepared artifact"
    );
}

/// Version 1 with a secret variable `DB_PASSWORD` of `password` and a
/// secret file `tls/server.key`.
pub(super) fn with_secrets(cluster: &FakeCluster, password: &str) -> Deployment {
    Deployment {
        secrets: sless_driver::SecretValues {
            env: vec![("DB_PASSWORD".into(), password.into())],
            files: vec![sless_driver::SecretFile {
                secret: "tls".into(),
                key: "server.key".into(),
                value: b"-----BEGIN KEY-----".to_vec(),
            }],
        },
        ..cluster.version(1)
    }
}

/// The function's Secret, its secretKeyRefs and its read-only volume, as
/// the pods get them; new values roll the pods.
#[tokio::test]
async fn a_version_with_secrets_sees_them_and_new_values_roll_its_pods() {
    let cluster = start().await;
    let driver = cluster.replica();
    driver.deploy(with_secrets(&cluster, "hunter2")).await.unwrap();
    let answer = invoke(&driver, 1, json!({})).await.unwrap();
    assert_eq!(answer["password"], "hunter2");
    assert_eq!(answer["key"], "-----BEGIN KEY-----");
    assert_eq!(answer["mode"], 0o400);
    driver.deploy(with_secrets(&cluster, "hunter3")).await.unwrap();
    let answer = eventually(Duration::from_secs(30), || async {
        match invoke(&driver, 1, json!({})).await {
            Ok(answer) if answer["password"] == "hunter3" => Ok(answer),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_ne!(answer["pid"], json!(null));
}

#[tokio::test]
async fn a_version_nobody_calls_goes_back_to_zero_and_wakes_on_the_next_call() {
    let cluster = start().await;
    let idle = Some(Duration::from_millis(400));
    let (a, b) = (cluster.replica_idle(idle), cluster.replica_idle(idle));
    a.deploy(cluster.version(1)).await.unwrap();
    b.deploy(cluster.version(1)).await.unwrap();
    let first = invoke(&a, 1, json!({})).await.unwrap();
    invoke(&b, 1, json!({})).await.unwrap();
    assert_eq!(cluster.pids(1).len(), 1);
    // Neither replica calls: the version goes back to zero, its pod stops.
    eventually(Duration::from_secs(20), || async {
        let pids = cluster.pids(1);
        pids.is_empty()
            .then_some(())
            .ok_or_else(|| format!("still running: {pids:?}"))
    })
    .await;
    // The next call starts a pod again.
    let again = invoke(&b, 1, json!({})).await.unwrap();
    assert_ne!(again["pid"], first["pid"]);
}

/// A call waiting for a version's first pod ends as soon as the version
/// is retired (its Deployment deleted, no pod will come), with
/// `NotDeployed`, which sends a server's call on to the version it now
/// serves; it used to wait out the function's whole timeout.
#[tokio::test]
async fn a_call_waiting_for_a_retired_versions_first_pod_ends_at_once() {
    let cluster = start().await;
    let driver = cluster.replica();
    // An artifact that is not in the store: its pod never gets ready.
    let never_ready = Deployment {
        digest: Some("0".repeat(64)),
        ..cluster.version(1)
    };
    driver.deploy(never_ready).await.unwrap();
    let waiting = invoke(&driver, 1, json!({}));
    let retire = async {
        eventually(Duration::from_secs(20), || async {
            let waiting: usize = driver.stats().await.iter().map(|(_, load)| load.waiting).sum();
            (waiting == 1)
                .then_some(())
                .ok_or_else(|| "the call is not waiting yet".to_string())
        })
        .await;
        driver.retire(&VersionRef::new(key(), 1)).await.unwrap();
    };
    // Well inside the function's 60 s timeout.
    let (ended, ()) = tokio::time::timeout(Duration::from_secs(20), async { tokio::join!(waiting, retire) })
        .await
        .expect("the waiting call ended once its version was retired");
    assert!(matches!(ended, Err(InvokeError::NotDeployed(_))), "{ended:?}");
}

/// Scaling by load across replicas: two replicas each hold two calls on
/// a version whose pods take two at a time. Neither replica has a call
/// waiting for a slot (each counts only its own calls against the pod),
/// so no replica alone asks for a pod more: only the sum of their reports
/// on the Deployment, four calls over two per pod, gives the second pod.
#[tokio::test]
async fn the_calls_two_replicas_have_under_way_sum_to_the_pods_a_version_gets() {
    let cluster = start().await;
    let every = Duration::from_millis(100);
    let (a, b) = (cluster.replica_scaling(every), cluster.replica_scaling(every));
    let mut version = cluster.version(1);
    version.spec.concurrency = 2;
    version.spec.max_instances = 4;
    a.deploy(version.clone()).await.unwrap();
    b.deploy(version).await.unwrap();
    invoke(&a, 1, json!({})).await.unwrap();
    assert_eq!(cluster.pids(1).len(), 1, "one pod for a call");
    // The handler sleeps on the shim's one thread: the four calls take
    // turns on the pod for 12 s, two under way on each replica meanwhile.
    let slow = json!({"sleep": 3});
    let calls = [&a, &a, &b, &b].map(|replica| invoke(replica, 1, slow.clone()));
    let second_pod = eventually(Duration::from_secs(10), || async {
        let pids = cluster.pids(1);
        (pids.len() == 2)
            .then_some(())
            .ok_or_else(|| format!("{} pods for four calls, two per pod", pids.len()))
    });
    let (answers, ()) = tokio::join!(futures::future::join_all(calls), second_pod);
    for answer in answers {
        answer.unwrap();
    }
}

/// A build dropped while its Job runs (the server drops a build its
/// function no longer awaits) deletes the Job, and its pod stops with it;
/// it ran on to the Job's deadline (an hour here).
#[tokio::test]
async fn a_dropped_build_deletes_its_job_and_its_pod_stops() {
    use super::deploys::{build_killed, BuildGate};
    let gate = BuildGate::start().await;
    let cluster = start().await;
    let driver = cluster.replica();
    let archive = gate.code();
    let build = driver.build(sless_driver::BuildJob {
        key: key(),
        runtime: Runtime::Nodejs20,
        code_hash: hex::encode(Sha256::digest(&archive)),
        archive: archive.into(),
        timeout: Duration::from_secs(3600),
    });
    let held = tokio::select! {
        built = build => panic!("the gated build ended: {built:?}"),
        held = gate.reached() => held,
    };
    assert_eq!(cluster.jobs().len(), 1, "the build's Job runs");
    build_killed(held).await;
    eventually(Duration::from_secs(30), || async {
        match cluster.jobs().as_slice() {
            [] => Ok(()),
            jobs => Err(format!("the dropped build's Job stays: {jobs:?}")),
        }
    })
    .await;
}
