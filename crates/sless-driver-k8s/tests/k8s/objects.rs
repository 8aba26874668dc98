//! Snapshots of every object the driver applies, as YAML (`insta`; review
//! a change with `cargo insta review` or `INSTA_UPDATE=always`), and the
//! properties each must keep whatever its snapshot says.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::ByteString;
use sless_api::{FunctionSpec, Runtime};
use sless_driver::{FunctionKey, RunId};
use sless_driver::{SecretFile, SecretValues};
use sless_driver_k8s::objects::{self, BuildInput, CodeSource, ImageInput, InstanceInput, Owner, SecretMounts};
use sless_driver_k8s::{BuildMode, ImageBuild, KubeSettings};

pub fn settings() -> KubeSettings {
    KubeSettings {
        control_plane_namespace: "sless".into(),
        image_repo: "registry.example/sless".into(),
        image_tag: "0.1.0-abc123def456".into(),
        artifact_reader_secret: "sless-artifact-reader".into(),
        image_pull_secret: None,
        allowed_egress: vec!["10.96.40.0/24".into()],
        build: BuildMode::Artifact,
        image_build: None,
        build_env: Vec::new(),
        max_build_mb: 1024,
    }
}

/// A stand-in for the object store's signer (the real one is tested
/// against the S3 server in the `sless` crate's tests): URLs in the shape
/// of presigned ones, naming the method, key and expiry.
#[derive(Debug)]
pub struct FakeSigner;

#[async_trait::async_trait]
impl object_store::signer::Signer for FakeSigner {
    async fn signed_url(
        &self,
        method: object_store::signer::Method,
        path: &object_store::path::Path,
        expires_in: std::time::Duration,
    ) -> object_store::Result<object_store::signer::Url> {
        let url = format!(
            "http://s3.test/sless/{path}?X-Amz-Expires={}&X-Amz-Signature=for-{method}",
            expires_in.as_secs()
        );
        Ok(object_store::signer::Url::parse(&url).unwrap())
    }
}

pub fn signer() -> std::sync::Arc<dyn object_store::signer::Signer> {
    std::sync::Arc::new(FakeSigner)
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

/// Version 3 of the test function, without secrets.
fn version_3<'a>(spec: &'a FunctionSpec, code: &'a CodeSource) -> InstanceInput<'a> {
    static NONE: std::sync::LazyLock<SecretMounts> = std::sync::LazyLock::new(SecretMounts::default);
    version_3_with(spec, code, &NONE)
}

/// Version 3 of the test function, using `secrets`.
fn version_3_with<'a>(spec: &'a FunctionSpec, code: &'a CodeSource, secrets: &'a SecretMounts) -> InstanceInput<'a> {
    static KEY: std::sync::LazyLock<FunctionKey> = std::sync::LazyLock::new(key);
    InstanceInput {
        key: &KEY,
        version: 3,
        spec,
        code,
        secrets,
    }
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
    let input = version_3(&spec, &code);
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
        let input = version_3(&spec, code);
        objects::deployment(&settings(), input, Some(1), &owner()).spec.template
    };
    assert_ne!(template(&a), template(&b));
    assert_eq!(template(&a), template(&a));
}

fn secret_values() -> SecretValues {
    SecretValues {
        env: vec![("DB_PASSWORD".into(), "hunter2".into())],
        files: vec![SecretFile {
            secret: "tls".into(),
            key: "server.key".into(),
            value: b"-----BEGIN KEY-----".to_vec(),
        }],
    }
}

#[test]
fn a_functions_secret_holds_its_values_under_keys_the_pods_name() {
    let secret = objects::function_secret(&key(), &secret_values(), &owner());
    assert_eq!(secret.metadata.name.as_deref(), Some("fn-hello"));
    assert_eq!(secret.metadata.owner_references.as_ref().unwrap()[0].uid, owner().uid);
    let data = secret.data.as_ref().unwrap();
    assert_eq!(data["env.DB_PASSWORD"].0, b"hunter2");
    assert_eq!(data["file.tls.server.key"].0, b"-----BEGIN KEY-----");
    insta::assert_yaml_snapshot!(secret);
}

#[test]
fn a_version_with_secrets_gets_them_as_variables_and_read_only_files() {
    let spec = spec();
    let code = artifact();
    let mounts = SecretMounts::of(&key(), &secret_values(), "41");
    let input = version_3_with(&spec, &code, &mounts);
    let deployment = objects::deployment(&settings(), input, Some(1), &owner());
    let template = &deployment.spec.template;
    assert_eq!(
        template.metadata.as_ref().unwrap().annotations.as_ref().unwrap()["sless.dev/secrets-revision"],
        "41"
    );
    let pod = template.spec.as_ref().unwrap();
    assert_restricted(pod);
    let instance = &pod.containers[0];
    let env = instance.env.as_ref().unwrap();
    let secret_var = env.iter().find(|e| e.name == "SLESS_SECRET_ENV_DB_PASSWORD").unwrap();
    assert_eq!(secret_var.value, None, "no value in the Deployment");
    let from = secret_var.value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap();
    assert_eq!((from.name.as_str(), from.key.as_str()), ("fn-hello", "env.DB_PASSWORD"));
    let handler_env = env.iter().find(|e| e.name == "SLESS_INSTANCE_ENV").unwrap();
    assert!(handler_env
        .value
        .as_ref()
        .unwrap()
        .contains(r#""SLESS_SECRETS_DIR":"/secrets""#));
    let mount = instance
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.name == "secrets")
        .unwrap();
    assert_eq!((mount.mount_path.as_str(), mount.read_only), ("/secrets", Some(true)));
    let volume = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == "secrets")
        .unwrap();
    let source = volume.secret.as_ref().unwrap();
    assert_eq!(source.default_mode, Some(0o400));
    let item = &source.items.as_ref().unwrap()[0];
    assert_eq!(
        (item.key.as_str(), item.path.as_str(), item.mode),
        ("file.tls.server.key", "tls/server.key", Some(0o400))
    );
    // Only the instance sees them: the fetch holds the store's credentials alone.
    let fetch = &pod.init_containers.as_ref().unwrap()[0];
    assert!(fetch.env.as_ref().unwrap().iter().all(|e| e.value_from.is_none()));
    assert!(fetch
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .all(|m| m.name != "secrets"));
    insta::assert_yaml_snapshot!(deployment);
}

#[test]
fn new_secret_values_change_the_pod_template() {
    let spec = spec();
    let code = artifact();
    let template = |revision: &str| {
        let mounts = SecretMounts::of(&key(), &secret_values(), revision);
        let input = version_3_with(&spec, &code, &mounts);
        objects::deployment(&settings(), input, Some(1), &owner()).spec.template
    };
    assert_ne!(template("41"), template("42"));
    assert_eq!(template("41"), template("41"));
}

#[test]
fn an_image_pull_secret_is_on_every_pod_the_driver_makes() {
    let settings = KubeSettings {
        image_pull_secret: Some("sless-image-pull".into()),
        ..settings()
    };
    let spec = spec();
    let code = CodeSource::Image("registry.sless.svc:5000/sless-demo-hello:v3".into());
    let input = version_3(&spec, &code);
    let pulls = |pod: &PodSpec| {
        pod.image_pull_secrets
            .as_ref()
            .map(|secrets| secrets.iter().map(|s| s.name.clone()).collect::<Vec<_>>())
    };
    let deployment = objects::deployment(&settings, input, Some(1), &owner());
    assert_eq!(
        pulls(deployment.spec.template.spec.as_ref().unwrap()),
        Some(vec!["sless-image-pull".to_string()])
    );
    let run = objects::run_job(
        &settings,
        input,
        &RunId {
            namespace: "demo".into(),
            job: "nightly".into(),
            run: 1,
        },
        &owner(),
    );
    assert!(pulls(run.spec.unwrap().template.spec.as_ref().unwrap()).is_some());
    // Without one, none.
    let deployment = objects::deployment(&self::settings(), input, Some(1), &owner());
    assert_eq!(pulls(deployment.spec.template.spec.as_ref().unwrap()), None);
}

#[test]
fn deployment_of_an_image_mode_version() {
    let spec = spec();
    let code = CodeSource::Image("registry.sless.svc:5000/sless-demo-hello:v3".into());
    let input = version_3(&spec, &code);
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
    let input = version_3(&spec, &code);
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
        archive_url: "http://s3.example/sless/builds/cccc.zip?X-Amz-Signature=get",
        upload_url: "http://s3.example/sless/builds/cccc.tar.gz?X-Amz-Signature=put",
        timeout_sec: 120,
    };
    let settings = KubeSettings {
        build_env: vec![("npm_config_registry".into(), "http://npm-mirror.example/".into())],
        max_build_mb: 256,
        ..settings()
    };
    let job = objects::build_job(&settings, input, &owner());
    let spec = job.spec.as_ref().unwrap();
    let builder = &spec.template.spec.as_ref().unwrap().containers[0];
    let bound = builder.env.iter().flatten().find(|e| e.name == "SLESS_BUILD_MAX_MB");
    assert_eq!(
        bound.and_then(|e| e.value.as_deref()),
        Some("256"),
        "the server's SLESS_MAX_BUILD_MB bounds what the build keeps"
    );
    let tmp = spec
        .template
        .spec
        .as_ref()
        .unwrap()
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "tmp");
    let size = tmp
        .and_then(|v| v.empty_dir.as_ref())
        .and_then(|d| d.size_limit.as_ref());
    assert_eq!(
        size.map(|q| q.0.as_str()),
        Some("768Mi"),
        "the build's /tmp: its directory, as much again while installing, 256 MiB of caches"
    );
    let registry = builder.env.iter().flatten().find(|e| e.name == "npm_config_registry");
    assert_eq!(
        registry.and_then(|e| e.value.as_deref()),
        Some("http://npm-mirror.example/"),
        "the server's registry reaches the build"
    );
    assert!(
        builder.env_from.is_none(),
        "a build pod holds no object-store credentials, only its grant"
    );
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
    let input = version_3(&spec, &code);
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
    insta::assert_yaml_snapshot!(
        "secret",
        objects::copied_secret("demo", "sless-artifact-reader", None, data)
    );
}

/// A runtime's generic pods: the instance pod's restricted profile, no
/// init container and no object store credentials (the artifact comes as
/// a presigned URL with each specialization), the pool's token from its
/// Secret, memory for the largest function the pool takes, and a selector
/// a claimed pod leaves (its `sless.dev/warm` label changes).
#[test]
fn warm_pool_of_a_runtime() {
    let pool = objects::WarmPool {
        pods: 2,
        memory_mb: 256,
    };
    let deployment = objects::warm_deployment(&settings(), Runtime::Python311, pool);
    assert_eq!(deployment.metadata.namespace.as_deref(), Some(objects::WARM_NAMESPACE));
    assert_eq!(deployment.spec.replicas, Some(2));
    let selector = deployment.spec.selector.match_labels.as_ref().unwrap();
    assert_eq!(selector.get(objects::WARM_STATE).map(String::as_str), Some("generic"));
    let pod = deployment.spec.template.spec.as_ref().unwrap();
    assert_restricted(pod);
    assert!(pod.init_containers.is_none());
    let container = &pod.containers[0];
    assert_eq!(
        container.command.as_deref(),
        Some(&["sless".to_string(), "instance".into(), "generic".into()][..])
    );
    assert!(container.env_from.is_none(), "no store credentials");
    let token = container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == objects::WARM_TOKEN_KEY)
        .unwrap();
    assert!(token.value.is_none(), "the token comes from its Secret");
    let limits = container.resources.as_ref().unwrap().limits.as_ref().unwrap();
    assert_eq!(limits["memory"].0, format!("{}Mi", 256 + objects::OVERHEAD_MB));
    insta::assert_yaml_snapshot!(deployment);
}

#[test]
fn warm_namespace_policy_and_token() {
    let namespace = objects::warm_namespace();
    assert_eq!(
        namespace.metadata.labels.as_ref().unwrap()["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    insta::assert_yaml_snapshot!("warm_namespace", namespace);
    let policy = objects::warm_network_policy(&settings());
    assert_eq!(policy.metadata.namespace.as_deref(), Some(objects::WARM_NAMESPACE));
    assert_eq!(
        policy.spec.as_ref().unwrap().ingress,
        objects::network_policy(&settings(), "demo").spec.unwrap().ingress,
        "calls from the server's pods only, as in a function namespace"
    );
    insta::assert_yaml_snapshot!("warm_network_policy", policy);
    insta::assert_yaml_snapshot!("warm_token", objects::warm_token_secret("0123abcd"));
}
