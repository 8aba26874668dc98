//! The NetworkPolicy of a function namespace: its pods take calls only from
//! the sless server's pods, and reach DNS, the public internet and the
//! private addresses the operator allows (the object store) — not the
//! control plane, its database or anything else in the cluster.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::pod::{FRAME_PORT, READY_PORT};
use crate::names::{self, label};
use crate::settings::KubeSettings;

/// Private, shared, link-local (cloud metadata) and loopback ranges: a
/// pod's egress to them is refused unless allowed by CIDR.
pub const PRIVATE_RANGES: [&str; 6] = [
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "169.254.0.0/16",
    "127.0.0.0/8",
];

/// The label the sless server's pods carry (deploy/k8s).
pub const SERVER_LABEL: (&str, &str) = ("app.kubernetes.io/name", "sless-server");

/// The policy of the function namespace of `namespace`.
pub fn network_policy(settings: &KubeSettings, namespace: &str) -> NetworkPolicy {
    let labels = |pairs: &[(&str, &str)]| -> Option<BTreeMap<String, String>> {
        Some(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    };
    let selector = |pairs: &[(&str, &str)]| LabelSelector {
        match_labels: labels(pairs),
        ..LabelSelector::default()
    };
    let tcp = |port: u16| NetworkPolicyPort {
        protocol: Some("TCP".into()),
        port: Some(IntOrString::Int(port.into())),
        ..NetworkPolicyPort::default()
    };
    let gateways = NetworkPolicyIngressRule {
        from: Some(vec![NetworkPolicyPeer {
            namespace_selector: Some(selector(&[(
                "kubernetes.io/metadata.name",
                &settings.control_plane_namespace,
            )])),
            pod_selector: Some(selector(&[SERVER_LABEL])),
            ..NetworkPolicyPeer::default()
        }]),
        ports: Some(vec![tcp(FRAME_PORT), tcp(READY_PORT)]),
    };
    let dns = NetworkPolicyEgressRule {
        to: Some(vec![NetworkPolicyPeer {
            namespace_selector: Some(selector(&[("kubernetes.io/metadata.name", "kube-system")])),
            pod_selector: Some(selector(&[("k8s-app", "kube-dns")])),
            ..NetworkPolicyPeer::default()
        }]),
        ports: Some(vec![
            NetworkPolicyPort {
                protocol: Some("UDP".into()),
                port: Some(IntOrString::Int(53)),
                ..NetworkPolicyPort::default()
            },
            tcp(53),
        ]),
    };
    let internet = NetworkPolicyEgressRule {
        to: Some(vec![NetworkPolicyPeer {
            ip_block: Some(IPBlock {
                cidr: "0.0.0.0/0".into(),
                except: Some(PRIVATE_RANGES.iter().map(|r| r.to_string()).collect()),
            }),
            ..NetworkPolicyPeer::default()
        }]),
        ports: None,
    };
    let mut egress = vec![dns, internet];
    if !settings.allowed_egress.is_empty() {
        egress.push(NetworkPolicyEgressRule {
            to: Some(
                settings
                    .allowed_egress
                    .iter()
                    .map(|cidr| NetworkPolicyPeer {
                        ip_block: Some(IPBlock {
                            cidr: cidr.clone(),
                            except: None,
                        }),
                        ..NetworkPolicyPeer::default()
                    })
                    .collect(),
            ),
            ports: None,
        });
    }
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(names::NETWORK_POLICY.into()),
            namespace: Some(names::function_namespace(namespace)),
            labels: labels(&[(label::MANAGED_BY, "sless"), (label::NAMESPACE, namespace)]),
            ..ObjectMeta::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(selector(&[(label::MANAGED_BY, "sless")])),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(vec![gateways]),
            egress: Some(egress),
        }),
    }
}
