//! `SLESS_DRIVER=kubernetes` from the outside: what the server says when it
//! cannot have a cluster, and an end-to-end run against a real one.
//!
//! There is no Kubernetes API server on the project's machines, so the
//! end-to-end test is opt-in (see its doc); the driver's behaviour is
//! covered by the reconcile scenarios of `sless-driver-k8s`, against a
//! mocked API server.

use reqwest::{Method, StatusCode};
use serde_json::json;

use super::harness::{Backend, Server};

/// Starts `sless server` with the Kubernetes driver and `env` (no
/// kubeconfig, no service account unless `env` gives one); its stderr,
/// after checking that it refused to start.
fn refused_start(env: &[(&str, &str)]) -> String {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sless"));
    cmd.arg("server")
        .env("SLESS_DRIVER", "kubernetes")
        .env("SLESS_DATA_DIR", home.path().join("data"))
        .env("SLESS_LISTEN", "127.0.0.1:0")
        .env("HOME", home.path())
        .env("RUST_BACKTRACE", "0")
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT");
    for (name, value) in env {
        cmd.env(name, value);
    }
    let out = cmd.output().unwrap();
    assert!(!out.status.success(), "started with {env:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn without_a_cluster_the_kubernetes_driver_refuses_to_start_and_says_what_it_tried() {
    let err = refused_start(&[
        ("SLESS_K8S_IMAGE_REPO", "registry.example/sless"),
        ("SLESS_BLOB_URL", "s3://sless"),
    ]);
    assert!(err.contains("SLESS_DRIVER=kubernetes needs a cluster"), "{err}");
    assert!(err.contains("no kubeconfig") && err.contains("in-cluster"), "{err}");
}

#[test]
fn the_kubernetes_driver_names_the_settings_it_cannot_work_with() {
    let err = refused_start(&[("SLESS_BLOB_URL", "s3://sless")]);
    assert!(err.contains("SLESS_K8S_IMAGE_REPO"), "{err}");
    let err = refused_start(&[("SLESS_K8S_IMAGE_REPO", "registry.example/sless")]);
    assert!(err.contains("SLESS_BLOB_URL") && err.contains("s3://"), "{err}");
    let err = refused_start(&[
        ("SLESS_K8S_IMAGE_REPO", "registry.example/sless"),
        ("SLESS_BLOB_URL", "s3://sless"),
        ("SLESS_K8S_IMAGE_TAG", "latest"),
    ]);
    assert!(
        err.contains("SLESS_K8S_IMAGE_TAG") && err.contains("never latest"),
        "{err}"
    );
    let err = refused_start(&[
        ("SLESS_K8S_IMAGE_REPO", "registry.example/sless"),
        ("SLESS_BLOB_URL", "s3://sless"),
        ("SLESS_K8S_BUILD", "image"),
    ]);
    assert!(err.contains("SLESS_K8S_REGISTRY"), "{err}");
    let err = refused_start(&[
        ("SLESS_K8S_IMAGE_REPO", "registry.example/sless"),
        ("SLESS_BLOB_URL", "s3://sless"),
        ("SLESS_K8S_IMAGE_PULL_SECRET", "Not A Name"),
    ]);
    assert!(err.contains("SLESS_K8S_IMAGE_PULL_SECRET"), "{err}");
}

/// A function built, deployed and called on a real cluster. Opt-in, as the
/// project's machines have no cluster (and CI has none): it is ignored
/// unless asked for, and then it fails, never skips, when the cluster is
/// missing or broken. Needs `SLESS_E2E_KUBECONFIG` (a kind or k3d
/// cluster's kubeconfig) and, in the environment, what the server needs
/// to run there: `SLESS_K8S_IMAGE_REPO` (images pushed by
/// `deploy/images/build.sh`), `SLESS_BLOB_URL=s3://...` and `SLESS_S3_*`
/// reachable from this machine and from the pods, and the Secrets
/// `sless-artifact-reader` in `SLESS_K8S_NAMESPACE`
/// (`kubectl apply -k deploy/k8s/overlays/example` makes them). Run:
///
/// ```sh
/// SLESS_E2E_KUBECONFIG=~/.kube/kind SLESS_K8S_IMAGE_REPO=... SLESS_BLOB_URL=s3://sless SLESS_S3_ENDPOINT=... \
///   cargo nextest run -p sless --test api kubernetes --run-ignored ignored-only
/// ```
#[tokio::test]
#[ignore = "needs a Kubernetes cluster: set SLESS_E2E_KUBECONFIG and run with --run-ignored (README, Running on Kubernetes)"]
async fn a_function_builds_deploys_and_answers_on_a_real_cluster() {
    let kubeconfig = std::env::var("SLESS_E2E_KUBECONFIG")
        .expect("SLESS_E2E_KUBECONFIG: the kubeconfig of the cluster to run against");
    assert!(
        std::path::Path::new(&kubeconfig).is_file(),
        "SLESS_E2E_KUBECONFIG {kubeconfig:?}: no such file"
    );
    let server = Server::start_with(
        Backend::Sqlite,
        &[("SLESS_DRIVER", "kubernetes"), ("KUBECONFIG", &kubeconfig)],
    )
    .await;
    let namespace = format!("e2e{}", std::process::id());
    server
        .deploy(
            &namespace,
            "hello",
            json!({"runtime": "python3.11"}),
            &[(
                "handler.py",
                b"def handle(event, context):\n    return {'hello': event.get('name')}\n",
            )],
        )
        .await;
    let (status, _, body) = server
        .invoke(
            Method::POST,
            &format!("/fn/{namespace}/hello"),
            r#"{"name": "cluster"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap(),
        json!({"hello": "cluster"})
    );
    let (status, body) = server
        .call(
            Method::DELETE,
            &format!("/v1/namespaces/{namespace}/functions/hello"),
            None,
        )
        .await;
    assert!(status.is_success(), "{status} {body}");
}
