//! Build Jobs. Artifact mode (the default): the runtime image runs
//! `sless instance build`, the same dependency install as the local
//! builder, and uploads the artifact tarball through the build's presigned
//! URL (the pod holds no credentials); its sha256 is the container's
//! termination message, and on failure the log's tail is (the function's
//! status message). Image mode: a kaniko Job in the control plane's
//! namespace (kaniko runs as root, which function namespaces refuse) bakes
//! the artifact into `{registry}/sless-{ns}-{name}:v{version}`.

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EnvFromSource, KeyToPath, PodSpec, PodTemplateSpec, SecretEnvSource, SecretVolumeSource, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sless_api::Runtime;
use sless_driver::FunctionKey;

use super::meta::{function_labels, meta, version_labels, Owner};
use super::pod::{
    empty_dir, env, image_pull_secrets, mount, resources, restricted_container, restricted_pod, CODE_DIR, RUN_AS,
};
use crate::names;
use crate::settings::{ImageBuild, KubeSettings};

/// Memory of a build pod in MiB (pip and npm want more than a handler).
pub const BUILD_MEMORY_MB: u32 = 1024;
/// How long a finished build Job stays for its logs to be read.
const FINISHED_TTL_SEC: i32 = 3600;

/// One artifact build.
#[derive(Debug, Clone, Copy)]
pub struct BuildInput<'a> {
    pub key: &'a FunctionKey,
    pub runtime: Runtime,
    /// sha256 of the uploaded zip.
    pub code_hash: &'a str,
    /// The fingerprint the artifact is stored under.
    pub artifact: &'a str,
    /// A presigned GET of the uploaded zip.
    pub archive_url: &'a str,
    /// A presigned PUT of the artifact tarball (the build's staging key).
    pub upload_url: &'a str,
    /// The function's `build_timeout_sec`: the Job's active deadline.
    pub timeout_sec: u32,
}

/// The Job of an artifact build, in the function's namespace.
pub fn build_job(settings: &KubeSettings, input: BuildInput<'_>, owner: &Owner) -> Job {
    let name = names::build_job(input.key, input.artifact);
    let namespace = names::function_namespace(&input.key.namespace);
    let labels = function_labels(input.key, "build");
    let builder = Container {
        name: "build".into(),
        image: Some(settings.runtime_image(input.runtime)),
        command: Some(vec!["sless".into(), "instance".into(), "build".into()]),
        env: Some(
            vec![
                env("SLESS_BUILD_RUNTIME", input.runtime.as_str()),
                env("SLESS_BUILD_ARCHIVE_URL", input.archive_url),
                env("SLESS_BUILD_UPLOAD_URL", input.upload_url),
                env("SLESS_BUILD_CODE_HASH", input.code_hash),
                env("SLESS_BUILD_ARTIFACT", input.artifact),
                env("SLESS_INSTANCE_WORK_DIR", "/tmp/sless"),
                env("SLESS_BUILD_MAX_MB", &settings.max_build_mb.to_string()),
            ]
            .into_iter()
            .chain(settings.build_env.iter().map(|(name, value)| env(name, value)))
            .collect(),
        ),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        resources: Some(resources(BUILD_MEMORY_MB, BUILD_MEMORY_MB)),
        security_context: Some(restricted_container()),
        volume_mounts: Some(vec![mount("tmp", "/tmp", false)]),
        ..Container::default()
    };
    Job {
        metadata: meta(&name, &namespace, labels.clone(), Some(owner)),
        spec: Some(one_shot(
            input.timeout_sec,
            labels,
            PodSpec {
                automount_service_account_token: Some(false),
                enable_service_links: Some(false),
                security_context: Some(restricted_pod()),
                restart_policy: Some("Never".into()),
                containers: vec![builder],
                volumes: Some(vec![empty_dir("tmp", Some(build_tmp_mb(settings.max_build_mb)))]),
                image_pull_secrets: image_pull_secrets(settings),
                ..PodSpec::default()
            },
        )),
        ..Job::default()
    }
}

/// The build pod's `/tmp` in MiB: the artifact's directory (which the
/// build checks against `max_build_mb` when the install ends), as much
/// again for what the installers download and unpack beside it while they
/// run, and room for their caches. The kubelet evicts a pod past it.
fn build_tmp_mb(max_build_mb: u32) -> u32 {
    max_build_mb.saturating_mul(2).saturating_add(256)
}

/// One image build (image mode).
#[derive(Debug, Clone, Copy)]
pub struct ImageInput<'a> {
    pub key: &'a FunctionKey,
    pub version: u64,
    pub runtime: Runtime,
    pub artifact: &'a str,
    pub digest: &'a str,
    pub timeout_sec: u32,
}

/// The Dockerfile of a function image: the runtime image with the
/// artifact at [`CODE_DIR`], owned by the uid pods run as.
pub fn dockerfile(settings: &KubeSettings, runtime: Runtime) -> String {
    format!(
        "FROM {}\nCOPY --chown={RUN_AS}:{RUN_AS} code/ {CODE_DIR}/\n",
        settings.runtime_image(runtime)
    )
}

/// The kaniko Job of image mode, in the control plane's namespace (not
/// owned: owners cannot be in another namespace; labelled, and deleted by
/// label with the function). An init container fetches and checks the
/// artifact and writes the Dockerfile; kaniko pushes with the credentials
/// of the docker-config Secret.
pub fn image_job(settings: &KubeSettings, image: &ImageBuild, input: ImageInput<'_>) -> Job {
    let name = names::image_job(input.key, input.version);
    let labels = version_labels(input.key, input.version, "image-build");
    let fetch = Container {
        name: "fetch".into(),
        image: Some(settings.runtime_image(input.runtime)),
        command: Some(vec!["sless".into(), "instance".into(), "fetch".into()]),
        env: Some(vec![
            env("SLESS_INSTANCE_ARTIFACT", input.artifact),
            env("SLESS_INSTANCE_DIGEST", input.digest),
            env("SLESS_INSTANCE_CODE_DIR", "/workspace/code"),
            env("SLESS_INSTANCE_DOCKERFILE", &dockerfile(settings, input.runtime)),
        ]),
        env_from: Some(vec![secret_env(&settings.artifact_reader_secret)]),
        resources: Some(resources(256, 256)),
        security_context: Some(restricted_container()),
        volume_mounts: Some(vec![
            mount("workspace", "/workspace", false),
            mount("tmp", "/tmp", false),
        ]),
        ..Container::default()
    };
    let mut args = vec![
        "--dockerfile=/workspace/Dockerfile".to_string(),
        "--context=dir:///workspace".to_string(),
        format!(
            "--destination={}",
            names::function_image(&image.registry, input.key, input.version)
        ),
        "--digest-file=/dev/termination-log".to_string(),
    ];
    if image.insecure_registry {
        args.push("--insecure".into());
        args.push("--skip-tls-verify".into());
    }
    let kaniko = Container {
        name: "kaniko".into(),
        image: Some(image.kaniko_image.clone()),
        args: Some(args),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        resources: Some(resources(BUILD_MEMORY_MB, BUILD_MEMORY_MB)),
        volume_mounts: Some(vec![
            mount("workspace", "/workspace", false),
            mount("docker-config", "/kaniko/.docker", true),
        ]),
        ..Container::default()
    };
    let docker_config = Volume {
        name: "docker-config".into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(image.docker_config_secret.clone()),
            items: Some(vec![KeyToPath {
                key: ".dockerconfigjson".into(),
                path: "config.json".into(),
                ..KeyToPath::default()
            }]),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    };
    Job {
        metadata: meta(&name, &settings.control_plane_namespace, labels.clone(), None),
        spec: Some(one_shot(
            input.timeout_sec,
            labels,
            PodSpec {
                automount_service_account_token: Some(false),
                enable_service_links: Some(false),
                restart_policy: Some("Never".into()),
                init_containers: Some(vec![fetch]),
                containers: vec![kaniko],
                image_pull_secrets: image_pull_secrets(settings),
                volumes: Some(vec![
                    empty_dir("workspace", Some(4096)),
                    empty_dir("tmp", Some(512)),
                    docker_config,
                ]),
                ..PodSpec::default()
            },
        )),
        ..Job::default()
    }
}

/// A Job that runs its pod once, for at most `deadline_sec`.
pub(super) fn one_shot(deadline_sec: u32, labels: std::collections::BTreeMap<String, String>, pod: PodSpec) -> JobSpec {
    JobSpec {
        backoff_limit: Some(0),
        active_deadline_seconds: Some(deadline_sec.into()),
        ttl_seconds_after_finished: Some(FINISHED_TTL_SEC),
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(labels),
                ..ObjectMeta::default()
            }),
            spec: Some(pod),
        },
        ..JobSpec::default()
    }
}

fn secret_env(name: &str) -> EnvFromSource {
    EnvFromSource {
        secret_ref: Some(SecretEnvSource {
            name: name.into(),
            optional: Some(false),
        }),
        ..EnvFromSource::default()
    }
}
