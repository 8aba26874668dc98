//! The warm pool's objects in the namespace [`WARM_NAMESPACE`]: the
//! namespace itself (Pod Security "restricted", the function namespaces'
//! NetworkPolicy: calls only from the server's pods), the pool's token
//! Secret, and per runtime a Deployment of generic pods (`sless instance
//! generic`) with the instance pod's security context, no init container
//! and no object store credentials, sized for the largest function the
//! pool takes.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    EnvVar, EnvVarSource, Namespace, PodSpec, PodTemplateSpec, Secret, SecretKeySelector,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use sless_api::Runtime;

use super::meta::meta;
use super::network::network_policy;
use super::pod::{
    empty_dir, env, image_pull_secrets, instance_container, mount, restricted_pod, CODE_DIR, CODE_MOUNT, FRAME_PORT,
    READY_PORT,
};
use crate::names::label;
use crate::settings::KubeSettings;

/// The namespace of every runtime's generic pods.
pub const WARM_NAMESPACE: &str = "sless-warm";
/// The Secret holding the pool's token, and its key (the variable name).
pub const WARM_TOKEN_SECRET: &str = "sless-warm-token";
pub const WARM_TOKEN_KEY: &str = "SLESS_INSTANCE_WARM_TOKEN";
/// `generic` on a pool's pods, `claimed` once the driver took one (which
/// takes it out of its Deployment's selector: the ReplicaSet replaces it).
pub const WARM_STATE: &str = "sless.dev/warm";
/// The runtime of a pool's pods.
pub const WARM_RUNTIME: &str = "sless.dev/warm-runtime";
/// On a claimed pod: `{function namespace}.{version object}` it serves.
pub const CLAIMED_FOR: &str = "sless.dev/claimed-for";
/// On a claimed pod: when it was claimed (ms since the epoch).
pub const CLAIMED_AT: &str = "sless.dev/claimed-at";

/// How many generic pods per runtime, and how much memory each has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WarmPool {
    pub pods: i32,
    /// The largest `memory_mb` of a function a generic pod takes.
    pub memory_mb: u32,
}

/// The Deployment of `runtime`'s generic pods.
pub fn warm_deployment_name(runtime: Runtime) -> String {
    format!("warm-{}", runtime.as_str().replace('.', ""))
}

/// The labels a generic pod of `runtime` carries (its Deployment's selector).
pub fn generic_labels(runtime: Runtime) -> BTreeMap<String, String> {
    BTreeMap::from([
        (label::MANAGED_BY.into(), "sless".into()),
        (label::COMPONENT.into(), "warm".into()),
        (WARM_RUNTIME.into(), runtime.as_str().into()),
        (WARM_STATE.into(), "generic".into()),
    ])
}

/// The warm namespace, under the "restricted" Pod Security Standard.
pub fn warm_namespace() -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(WARM_NAMESPACE.into()),
            labels: Some(BTreeMap::from([
                (label::MANAGED_BY.into(), "sless".into()),
                ("pod-security.kubernetes.io/enforce".into(), "restricted".into()),
            ])),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

/// The function namespaces' policy, in the warm namespace: generic and
/// claimed pods take calls (and specializations) from the server's pods
/// only, and reach no private address but those allowed (the object store).
pub fn warm_network_policy(settings: &KubeSettings) -> NetworkPolicy {
    let mut policy = network_policy(settings, "warm");
    policy.metadata.namespace = Some(WARM_NAMESPACE.into());
    policy.metadata.labels = Some(BTreeMap::from([(label::MANAGED_BY.into(), "sless".into())]));
    policy
}

/// The pool's token Secret (`token`: random, made once by whichever
/// replica comes first).
pub fn warm_token_secret(token: &str) -> Secret {
    Secret {
        metadata: meta(
            WARM_TOKEN_SECRET,
            WARM_NAMESPACE,
            BTreeMap::from([(label::MANAGED_BY.into(), "sless".into())]),
            None,
        ),
        string_data: Some(BTreeMap::from([(WARM_TOKEN_KEY.into(), token.into())])),
        type_: Some("Opaque".into()),
        ..Secret::default()
    }
}

/// `pool.pods` generic pods of `runtime`.
pub fn warm_deployment(settings: &KubeSettings, runtime: Runtime, pool: WarmPool) -> Deployment {
    let labels = generic_labels(runtime);
    let mut env_vars = vec![
        env("SLESS_INSTANCE_RUNTIME", runtime.as_str()),
        env("SLESS_INSTANCE_MEMORY_MB", &pool.memory_mb.to_string()),
        env("SLESS_INSTANCE_CODE_DIR", CODE_DIR),
        env("SLESS_INSTANCE_LISTEN", &format!("0.0.0.0:{FRAME_PORT}")),
        env("SLESS_INSTANCE_READY_LISTEN", &format!("0.0.0.0:{READY_PORT}")),
        env("SLESS_INSTANCE_WORK_DIR", "/tmp/sless"),
    ];
    env_vars.push(EnvVar {
        name: WARM_TOKEN_KEY.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: WARM_TOKEN_SECRET.into(),
                key: WARM_TOKEN_KEY.into(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    });
    // The instance unpacks the artifact itself: `code` is writable here.
    let instance = instance_container(
        settings.runtime_image(runtime),
        "generic",
        env_vars,
        pool.memory_mb,
        vec![mount("code", CODE_MOUNT, false), mount("tmp", "/tmp", false)],
    );
    let pod = PodSpec {
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        security_context: Some(restricted_pod()),
        termination_grace_period_seconds: Some(30),
        restart_policy: Some("Always".into()),
        containers: vec![instance],
        volumes: Some(vec![empty_dir("code", None), empty_dir("tmp", Some(512))]),
        image_pull_secrets: image_pull_secrets(settings),
        ..PodSpec::default()
    };
    Deployment {
        metadata: meta(&warm_deployment_name(runtime), WARM_NAMESPACE, labels.clone(), None),
        spec: DeploymentSpec {
            replicas: Some(pool.pods),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            revision_history_limit: Some(2),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..DeploymentSpec::default()
        },
        ..Deployment::default()
    }
}
