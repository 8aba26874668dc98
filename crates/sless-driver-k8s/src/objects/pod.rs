//! The pod of an instance (`sless instance`), shared by a version's
//! Deployment and a job run's Job: the restricted security context, the
//! fetch of the artifact by an init container (which alone holds the
//! object store's credentials), the function's secrets (variables and
//! files from its Secret), resources from `memory_mb`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvFromSource, EnvVar, HTTPGetAction,
    LocalObjectReference, PodSecurityContext, PodSpec, Probe, ResourceRequirements, SeccompProfile, SecretEnvSource,
    SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sless_api::FunctionSpec;
use sless_driver::FunctionKey;

use super::secrets::{SecretMounts, SECRETS_DIR};
use crate::settings::KubeSettings;

/// The port `sless instance` serves frames on.
pub const FRAME_PORT: u16 = 7070;
/// The port of its readiness endpoint (`GET /ready`).
pub const READY_PORT: u16 = 7071;
/// The uid and gid pods run as (nobody in the runtime images).
pub const RUN_AS: i64 = 65532;
/// Where the artifact is unpacked in the pod: a directory the fetch makes
/// on the `code` volume (mounted at [`CODE_MOUNT`]), or baked into the image.
pub const CODE_DIR: &str = "/code/app";
/// Where the `code` volume is mounted (artifact mode).
pub const CODE_MOUNT: &str = "/code";
/// Memory beyond `memory_mb` for the runtime and `sless instance` itself.
pub const OVERHEAD_MB: u32 = 64;

/// What an instance runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodeSource {
    /// An artifact tarball in the object store, checked against its sha256.
    Artifact { fingerprint: String, digest: String },
    /// An image with the artifact baked in at [`CODE_DIR`] (image mode).
    Image(String),
}

/// One version of a function as a pod runs it.
#[derive(Debug, Clone, Copy)]
pub struct InstanceInput<'a> {
    pub key: &'a FunctionKey,
    pub version: u64,
    pub spec: &'a FunctionSpec,
    pub code: &'a CodeSource,
    /// The function's secrets it uses (empty: none).
    pub secrets: &'a SecretMounts,
}

/// Serving many calls (a Deployment) or one (a job run, which exits after it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodMode {
    Serve,
    Once,
}

/// The pod spec of an instance.
pub fn instance_pod(settings: &KubeSettings, input: InstanceInput<'_>, mode: PodMode) -> PodSpec {
    let baked = matches!(input.code, CodeSource::Image(_));
    let (image, init_containers) = match input.code {
        CodeSource::Artifact { fingerprint, digest } => {
            let image = settings.runtime_image(input.spec.runtime);
            let fetch = Container {
                name: "fetch".into(),
                image: Some(image.clone()),
                command: Some(vec!["sless".into(), "instance".into(), "fetch".into()]),
                env: Some(vec![
                    env("SLESS_INSTANCE_ARTIFACT", fingerprint),
                    env("SLESS_INSTANCE_DIGEST", digest),
                    env("SLESS_INSTANCE_CODE_DIR", CODE_DIR),
                ]),
                env_from: Some(vec![EnvFromSource {
                    secret_ref: Some(SecretEnvSource {
                        name: settings.artifact_reader_secret.clone(),
                        optional: Some(false),
                    }),
                    ..EnvFromSource::default()
                }]),
                resources: Some(resources(256, 256)),
                security_context: Some(restricted_container()),
                volume_mounts: Some(vec![mount("code", CODE_MOUNT, false), mount("tmp", "/tmp", false)]),
                ..Container::default()
            };
            (image, Some(vec![fetch]))
        }
        CodeSource::Image(image) => (image.clone(), None),
    };
    let spec = input.spec;
    let mut handler_env = spec.env.clone();
    let secret_files = input.secrets.volume();
    if secret_files.is_some() {
        handler_env.insert("SLESS_SECRETS_DIR".into(), SECRETS_DIR.into());
    }
    let mut env_vars = vec![
        env("SLESS_INSTANCE_RUNTIME", spec.runtime.as_str()),
        env("SLESS_INSTANCE_ENTRYPOINT", &spec.entrypoint),
        env("SLESS_INSTANCE_NAMESPACE", &input.key.namespace),
        env("SLESS_INSTANCE_FUNCTION", &input.key.name),
        env("SLESS_INSTANCE_VERSION", &input.version.to_string()),
        env("SLESS_INSTANCE_CONCURRENCY", &spec.concurrency.to_string()),
        env("SLESS_INSTANCE_TIMEOUT_SEC", &spec.timeout_sec.to_string()),
        env("SLESS_INSTANCE_MEMORY_MB", &spec.memory_mb.to_string()),
        env(
            "SLESS_INSTANCE_ENV",
            &serde_json::to_string(&handler_env).expect("a map of strings"),
        ),
        env("SLESS_INSTANCE_CODE_DIR", CODE_DIR),
        env("SLESS_INSTANCE_LISTEN", &format!("0.0.0.0:{FRAME_PORT}")),
        env("SLESS_INSTANCE_READY_LISTEN", &format!("0.0.0.0:{READY_PORT}")),
        env("SLESS_INSTANCE_WORK_DIR", "/tmp/sless"),
    ];
    if mode == PodMode::Once {
        env_vars.push(env("SLESS_INSTANCE_ONCE", "true"));
    }
    env_vars.extend(input.secrets.env_vars());
    let mut volume_mounts = if baked {
        vec![mount("tmp", "/tmp", false)]
    } else {
        vec![mount("code", CODE_MOUNT, true), mount("tmp", "/tmp", false)]
    };
    let mut volumes = if baked {
        vec![empty_dir("tmp", Some(512))]
    } else {
        vec![empty_dir("code", None), empty_dir("tmp", Some(512))]
    };
    if let Some((volume, mount)) = secret_files {
        volumes.push(volume);
        volume_mounts.push(mount);
    }
    let instance = instance_container(image, "serve", env_vars, spec.memory_mb, volume_mounts);
    PodSpec {
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        security_context: Some(restricted_pod()),
        termination_grace_period_seconds: Some(i64::from(spec.timeout_sec) + 5),
        restart_policy: Some(if mode == PodMode::Once { "Never" } else { "Always" }.into()),
        init_containers,
        containers: vec![instance],
        volumes: Some(volumes),
        image_pull_secrets: image_pull_secrets(settings),
        ..PodSpec::default()
    }
}

/// The Secret pods pull images with, when one is configured (copied into
/// each function namespace).
/// The `instance` container of a pod running `sless instance
/// {subcommand}`: its frame and readiness ports, ready once `/ready`
/// answers, `memory_mb` requested (the limit leaves room for the
/// instance itself), the restricted context, and a failed start's last
/// log lines as its termination message (a handler that fails to load
/// ends the container with exit code 3 and its error last in the log:
/// the driver reads it from there).
pub fn instance_container(
    image: String,
    subcommand: &str,
    env_vars: Vec<EnvVar>,
    memory_mb: u32,
    volume_mounts: Vec<VolumeMount>,
) -> Container {
    Container {
        name: "instance".into(),
        image: Some(image),
        command: Some(vec!["sless".into(), "instance".into(), subcommand.into()]),
        env: Some(env_vars),
        ports: Some(vec![port("frames", FRAME_PORT), port("ready", READY_PORT)]),
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/ready".into()),
                port: IntOrString::Int(READY_PORT.into()),
                ..HTTPGetAction::default()
            }),
            period_seconds: Some(1),
            failure_threshold: Some(1),
            ..Probe::default()
        }),
        resources: Some(resources(memory_mb, memory_mb + OVERHEAD_MB)),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        security_context: Some(restricted_container()),
        volume_mounts: Some(volume_mounts),
        ..Container::default()
    }
}

pub fn image_pull_secrets(settings: &KubeSettings) -> Option<Vec<LocalObjectReference>> {
    settings
        .image_pull_secret
        .as_ref()
        .map(|name| vec![LocalObjectReference { name: name.clone() }])
}

/// The pod-level half of the "restricted" Pod Security Standard.
pub fn restricted_pod() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(RUN_AS),
        run_as_group: Some(RUN_AS),
        fs_group: Some(RUN_AS),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..SeccompProfile::default()
        }),
        ..PodSecurityContext::default()
    }
}

/// The container-level half: no privilege escalation, no capabilities, a
/// read-only root filesystem (writes go to the `tmp` volume).
pub fn restricted_container() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Capabilities::default()
        }),
        ..SecurityContext::default()
    }
}

pub fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}

pub fn mount(volume: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: volume.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

pub fn empty_dir(name: &str, size_limit_mb: Option<u32>) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: size_limit_mb.map(|mb| Quantity(format!("{mb}Mi"))),
            ..EmptyDirVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// Memory requested and limited in MiB; a tenth of a CPU requested, none limited.
pub fn resources(request_mb: u32, limit_mb: u32) -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".into(), Quantity("100m".into())),
            ("memory".into(), Quantity(format!("{request_mb}Mi"))),
        ])),
        limits: Some(BTreeMap::from([("memory".into(), Quantity(format!("{limit_mb}Mi")))])),
        ..ResourceRequirements::default()
    }
}

pub(super) fn port(name: &str, number: u16) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: number.into(),
        protocol: Some("TCP".into()),
        ..ContainerPort::default()
    }
}
