//! The stand-in cluster's state, shared by every driver replica's client:
//! Deployments and their pods, Jobs and their pods, applied Secrets.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;

use crate::kubelet::{JobPod, Pod, PodTemplate, Terminating, Workload};

/// An applied Secret: its resourceVersion (bumped when the data changes)
/// and its data.
pub(crate) type StoredSecret = (u64, BTreeMap<String, Vec<u8>>);

/// The stand-in cluster's state, shared by every replica's client.
pub(crate) struct Cluster {
    pub(crate) sless: std::path::PathBuf,
    pub(crate) s3_env: Vec<(String, String)>,
    pub(crate) workloads: Mutex<BTreeMap<String, Workload>>,
    /// Jobs (builds and runs) by name, with their one pod.
    pub(crate) jobs: Mutex<BTreeMap<String, JobPod>>,
    /// Applied Secrets by name.
    pub(crate) secrets: Mutex<BTreeMap<String, StoredSecret>>,
    /// Pods told to stop (a deleted Deployment's, a rollout's old ones, a
    /// scale down's), until they end.
    pub(crate) terminating: Mutex<Vec<Terminating>>,
    /// Generic pods a driver claimed (relabelled out of their pool's
    /// Deployment, which replaced them), by name, with the labels and
    /// annotations of the claim.
    pub(crate) claimed: Mutex<BTreeMap<String, (Pod, Value)>>,
    /// How long a function's own pod stays unready after it starts, as a
    /// real cluster's scheduling and image pull keep it (zero unless a
    /// test sets it; generic pods are the ones a pool keeps started).
    pub(crate) function_pod_start: Mutex<Duration>,
    /// The most memory a build pod's process has had resident (VmHWM, as
    /// the kubelet's passes saw it while it ran), in bytes.
    pub(crate) build_peak: Mutex<u64>,
}

impl Cluster {
    /// What pods of an applied Deployment get: the instance container's
    /// variables (values, and secretKeyRefs looked up in the applied
    /// Secrets), the fetch's artifact and digest, and the files of a
    /// Secret volume the instance mounts.
    pub(crate) fn pod_template(&self, deployment: &Value) -> PodTemplate {
        let pod = &deployment["spec"]["template"]["spec"];
        let instance = &pod["containers"][0];
        let secrets = self.secrets.lock().unwrap();
        let lookup =
            |name: &Value, key: &Value| -> Vec<u8> { secrets[name.as_str().unwrap()].1[key.as_str().unwrap()].clone() };
        let fetch = pod["initContainers"][0]["env"].as_array().cloned().unwrap_or_default();
        let env = instance["env"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .chain(fetch.iter())
            .filter_map(|e| {
                let value = match (&e["value"], &e["valueFrom"]["secretKeyRef"]) {
                    (Value::String(value), _) => value.clone(),
                    (_, from @ Value::Object(_)) => String::from_utf8(lookup(&from["name"], &from["key"])).unwrap(),
                    _ => return None,
                };
                Some((e["name"].as_str()?.to_string(), value))
            })
            .filter(|(name, _)| name != "SLESS_INSTANCE_CODE_DIR")
            .collect();
        let mut template = PodTemplate {
            text: deployment["spec"]["template"].to_string(),
            generic: instance["command"] == serde_json::json!(["sless", "instance", "generic"]),
            grace: Duration::from_secs(pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(30)),
            env,
            ..PodTemplate::default()
        };
        for volume in pod["volumes"].as_array().into_iter().flatten() {
            let source = &volume["secret"];
            if source.is_null() {
                continue;
            }
            let mount = instance["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|m| m["name"] == volume["name"])
                .expect("a Secret volume the instance mounts");
            template.mount = Some(mount["mountPath"].as_str().unwrap().to_string());
            for item in source["items"].as_array().into_iter().flatten() {
                let mode = item["mode"]
                    .as_u64()
                    .or(source["defaultMode"].as_u64())
                    .unwrap_or(0o644);
                template.files.push((
                    item["path"].as_str().unwrap().to_string(),
                    lookup(&source["secretName"], &item["key"]),
                    u32::try_from(mode).unwrap(),
                ));
            }
        }
        template
    }
}
