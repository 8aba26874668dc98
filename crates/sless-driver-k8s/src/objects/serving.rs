//! What serves one version: a Deployment of instance pods and a headless
//! Service whose EndpointSlices list the ready ones for the gateways.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::api::core::v1::{PodTemplateSpec, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::meta::{meta, version_labels, Owner};
use super::pod::{instance_pod, CodeSource, InstanceInput, PodMode, FRAME_PORT};
use crate::names::{self, annotation};
use crate::settings::KubeSettings;

/// The Deployment of one version, at `replicas` pods when given (the
/// driver leaves them out: the scale subresource owns them). The artifact's
/// fingerprint and digest are in the pod template, so a changed artifact
/// (a shim update), spec or secret value rolls the pods; a rollout starts new pods before
/// it stops old ones.
pub fn deployment(
    settings: &KubeSettings,
    input: InstanceInput<'_>,
    replicas: Option<i32>,
    owner: &Owner,
) -> Deployment {
    let name = names::version_object(input.key, input.version);
    let namespace = names::function_namespace(&input.key.namespace);
    let labels = version_labels(input.key, input.version, "instance");
    let mut annotations = BTreeMap::new();
    if !input.secrets.is_empty() {
        annotations.insert(annotation::SECRETS.to_string(), input.secrets.revision.clone());
    }
    match input.code {
        CodeSource::Artifact { fingerprint, digest } => {
            annotations.insert(annotation::ARTIFACT.to_string(), fingerprint.clone());
            annotations.insert(annotation::DIGEST.to_string(), digest.clone());
        }
        CodeSource::Image(image) => {
            annotations.insert(annotation::ARTIFACT.to_string(), image.clone());
        }
    }
    Deployment {
        metadata: meta(&name, &namespace, labels.clone(), Some(owner)),
        spec: DeploymentSpec {
            replicas,
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::Int(1)),
                    max_unavailable: Some(IntOrString::Int(0)),
                }),
            }),
            revision_history_limit: Some(2),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    annotations: Some(annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(instance_pod(settings, input, PodMode::Serve)),
            },
            ..DeploymentSpec::default()
        },
        ..Deployment::default()
    }
}

/// The headless Service of one version: no virtual IP, only the
/// EndpointSlices of its ready pods, which the gateways call directly.
pub fn service(input: InstanceInput<'_>, owner: &Owner) -> Service {
    let name = names::version_object(input.key, input.version);
    let namespace = names::function_namespace(&input.key.namespace);
    let labels = version_labels(input.key, input.version, "instance");
    Service {
        metadata: meta(&name, &namespace, labels.clone(), Some(owner)),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(labels),
            publish_not_ready_addresses: Some(false),
            ports: Some(vec![ServicePort {
                name: Some("frames".into()),
                port: FRAME_PORT.into(),
                target_port: Some(IntOrString::String("frames".into())),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}
