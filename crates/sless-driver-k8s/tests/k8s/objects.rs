//! Snapshots of every object the driver applies, as YAML (`insta`; review
//! a change with `cargo insta review` or `INSTA_UPDATE=always`), and the
//! properties each must keep whatever its snapshot says.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::ByteString;
use sless_api::{FunctionSpec, Runtime};
use sless_driver::{FunctionKey, RunId};
use sless_driver_k8s::objects::{self, BuildInput, CodeSource, ImageInput, InstanceInput, Owner};
use sless_driver_k8s::{BuildMode, ImageBuild, KubeSettings};

pub fn settings() -> KubeSettings {
    KubeSettings {
        control_plane_namespace: "sless".into(),
        image_repo: "registry.example/sless".into(),
        image_tag: "0.1.0-abc123def456".into(),
        artifact_reader_secret: "sless-artifact-reader".into(),
        artifact_writer_secret: "sless-artifact-writer".into(),
        allowed_egress: vec!["10.96.40.0/24".into()],
        build: BuildMode::Artifact,
        image_build: None,
    }
}

pub fn image_build(insecure: bool) -> ImageBuild {
    ImageBuild {
        registry: "registry.sless.svc:5000".into(),
        kaniko_image: "gcr.io/kaniko-project/executor:v1.23.2".into(),
        docker_config_secret: "sless-registry".into(),
        insecure_registry: insecure,
    }
}

pub fn spec() -> FunctionSpec {
    serde_json::from_value(serde_json::json!({
        "runtime": "python3.11",
        "env": {"GREETING": "hi"},
        "memory_mb": 128,
        "timeout_sec": 10,
        "concurrency": 4,
        "build_timeout_sec": 120
    }))
    .unwrap()
}

pub fn key() -> FunctionKey {
    FunctionKey::new("demo", "hello")
}

fn owner() -> Owner {
    Owner {
        name: "fn-hello".into(),
        uid: "7d3c6b1e-0000-4000-8000-000000000001".into(),
    }
}

fn artifact() -> CodeSource {
    CodeSource::Artifact {
        fingerprint: "0123456789abcdef0123456789abcdef".into(),
        digest: "f".repeat(64),
    }
}

/// Every pod sless makes for a function runs under the restricted profile.
fn assert_restricted(pod: &PodSpec) {
    assert_eq!(pod.automount_service_account_token, Some(false));
    let pod_security = pod.security_context.as_ref().unwrap();
    assert_eq!(pod_security.run_as_non_root, Some(true));
    assert_eq!(pod_security.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
    for container in pod.containers.iter().chain(pod.init_containers.iter().flatten()) {
        let security = container.security_context.as_ref().unwrap();
        assert_eq!(security.read_only_root_filesystem, Some(true), "{}", container.name);
        assert_eq!(security.allow_privilege_escalation, Some(false), "{}", container.name);
        assert_eq!(
            security.capabilities.as_ref().unwrap().drop.as_deref(),
            Some(&["ALL".to_string()][..])
        );
        assert!(container.image.as_deref().is_some_and(|i| !i.ends_with(":latest")));
    }
}

#[test]
fn deployment_of_a_version() {
    let spec = spec();
    let code = artifact();
    let input = InstanceInput {
        key: &key(),
        version: 3,
        spec: &spec,
        code: &code,
    };
    let deployment = objects::deployment(&settings(), input, Some(1), &owner());
    let pod = deployment.spec.template.spec.as_ref().unwrap();
    assert_restricted(pod);
    let limits = pod.containers[0].resources.as_ref().unwrap().limits.as_ref().unwrap();
    assert_eq!(limits["memory"].0, "192Mi");
    insta::assert_yaml_snapshot!(deployment);
}

#[test]
fn a_new_artifact_changes_the_pod_template() {
    let spec = spec();
    let (a, b) = (
        artifact(),
        CodeSource::Artifact {
            fingerprint: "other".into(),
            digest: "e".repeat(64),
        },
    );
    let template = |code: &CodeSource| {
        let input = InstanceInput {
            key: &key(),
            version: 3,
            spec: &spec,
            code,
        };
        objects::deployment(&settings(), input, Some(1), &owner()).spec.template
    };
    assert_ne!(template(&a), template(&b));
    assert_eq!(template(&a), template(&a));
}

#[test]
fn deployment_of_an_image_mode_version() {
    let spec = spec();
    let code = CodeSource::Image("registry.sless.svc:5000/sless-demo-hello:v3".into());
    let input = InstanceInput {
        key: &key(),
        version: 3,
        spec: &spec,
        code: &code,
    };
    let deployment = objects::deployment(&settings(), input, Some(2), &owner());
    let pod = deployment.spec.template.spec.as_ref().unwrap();
    assert_restricted(pod);
    assert!(
        pod.init_containers.is_none(),
        "the image holds the code: nothing to fetch"
    );
    insta::assert_yaml_snapshot!(deployment);
}

#[test]
fn headless_service_of_a_version() {
    let spec = spec();
    let code = artifact();
    let input = InstanceInput {
        key: &key(),
        version: 3,
        spec: &spec,
        code: &code,
    };
    let service = objects::service(input, &owner());
    assert_eq!(service.spec.as_ref().unwrap().cluster_ip.as_deref(), Some("None"));
    insta::assert_yaml_snapshot!(service);
}

#[test]
fn build_job() {
    let input = BuildInput {
        key: &key(),
        runtime: Runtime::Nodejs20,
        code_hash: &"c".repeat(64),
        artifact: "0123456789abcdef0123456789abcdef",
        archive_key: "builds/cccc.zip",
        timeout_sec: 120,
    };
    let job = objects::build_job(&settings(), input, &owner());
    let spec = job.spec.as_ref().unwrap();
    assert_eq!(
        spec.active_deadline_seconds,
        Some(120),
        "build_timeout_sec is the deadline"
    );
    assert_eq!(spec.backoff_limit, Some(0));
    assert_restricted(spec.template.spec.as_ref().unwrap());
    insta::assert_yaml_snapshot!(job);
}

#[test]
fn kaniko_job_of_image_mode() {
    let input = ImageInput {
        key: &key(),
        version: 3,
        runtime: Runtime::Python311,
        artifact: "0123456789abcdef0123456789abcdef",
        digest: &"f".repeat(64),
        timeout_sec: 120,
    };
    let secure = objects::image_job(&settings(), &image_build(false), input);
    let args = secure.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    assert!(args.contains(&"--destination=registry.sless.svc:5000/sless-demo-hello:v3".to_string()));
    assert!(!args.iter().any(|a| a.starts_with("--insecure")));
    let insecure = objects::image_job(&settings(), &image_build(true), input);
    insta::assert_yaml_snapshot!(insecure);
}

#[test]
fn job_run() {
    let spec = spec();
    let code = artifact();
    let input = InstanceInput {
        key: &key(),
        version: 3,
        spec: &spec,
        code: &code,
    };
    let run = RunId {
        namespace: "demo".into(),
        job: "nightly".into(),
        run: 7,
    };
    let job = objects::run_job(&settings(), input, &run, &owner());
    let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    assert_restricted(pod);
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    insta::assert_yaml_snapshot!(job);
}

#[test]
fn network_policy() {
    let policy = objects::network_policy(&settings(), "demo");
    let spec = policy.spec.as_ref().unwrap();
    // The internet rule refuses every private range (where the control
    // plane and its database are).
    let internet = spec.egress.as_ref().unwrap()[1].to.as_ref().unwrap()[0]
        .ip_block
        .as_ref()
        .unwrap();
    assert_eq!(internet.cidr, "0.0.0.0/0");
    for range in ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"] {
        assert!(
            internet.except.as_ref().unwrap().contains(&range.to_string()),
            "{range}"
        );
    }
    insta::assert_yaml_snapshot!(policy);
}

#[test]
fn namespace_anchor_and_secret() {
    insta::assert_yaml_snapshot!("namespace", objects::function_namespace("demo"));
    insta::assert_yaml_snapshot!("anchor", objects::anchor(&key()));
    let data = BTreeMap::from([("SLESS_BLOB_URL".to_string(), ByteString(b"s3://bucket".to_vec()))]);
    insta::assert_yaml_snapshot!("secret", objects::copied_secret("demo", "sless-artifact-reader", data));
}
