//! The stand-in API server: the answer to each request a `KubeDriver`
//! makes (applies, Deployments and their scale, EndpointSlices, Jobs,
//! their pods and logs, Secrets), from the cluster's state.

use std::collections::BTreeMap;

use std::time::Duration;

use serde_json::{json, Value};

use crate::cluster::Cluster;
use crate::kubelet::{BuildPod, JobPod, Pod, Workload};

impl Cluster {
    /// A Job as the API server shows it: its status from its pod's end.
    fn job_status(pod: &mut JobPod) -> Value {
        match pod.ended() {
            None => json!({"active": 1}),
            Some(0) => json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}),
            Some(_) => json!({"failed": 1, "conditions": [{"type": "Failed", "status": "True",
                                                            "reason": "BackoffLimitExceeded"}]}),
        }
    }

    /// The Job's pod as the API server shows it.
    fn job_pod(name: &str, pod: &mut JobPod) -> Value {
        match pod {
            JobPod::Build(pod) => Self::build_pod(name, pod),
            JobPod::Run(pod) => Self::run_pod(name, pod),
        }
    }

    /// A run's pod: its phase, its readiness, and where it serves frames
    /// (its IP and the port named `frames`, this pod's own).
    fn run_pod(name: &str, pod: &mut Pod) -> Value {
        let phase = match pod.ended() {
            None => "Running",
            Some(0) => "Succeeded",
            Some(_) => "Failed",
        };
        let ready = if pod.ready && phase == "Running" {
            "True"
        } else {
            "False"
        };
        json!({"metadata": {"name": format!("{name}-pod"), "namespace": "sless-fn-demo"},
               "spec": {"containers": [{"name": "instance",
                                        "ports": [{"name": "frames", "containerPort": pod.frames},
                                                  {"name": "ready", "containerPort": pod.ready_port}]}]},
               "status": {"phase": phase, "podIP": pod.ip.to_string(),
                          "conditions": [{"type": "Ready", "status": ready}]}})
    }

    /// A build's pod: its termination message is the termination log, or
    /// (`FallbackToLogsOnError`) the end of its output when it failed.
    fn build_pod(name: &str, pod: &mut BuildPod) -> Value {
        let state = match pod.ended() {
            None => json!({"running": {}}),
            Some(code) => {
                let message = if code == 0 {
                    pod.read("termination-log")
                } else {
                    pod.read("stderr")
                };
                json!({"terminated": {"exitCode": code, "message": message}})
            }
        };
        json!({"metadata": {"name": format!("{name}-pod"), "namespace": "sless-fn-demo"},
               "spec": {"containers": [{"name": "build"}]},
               "status": {"containerStatuses": [{"name": "build", "image": "i", "imageID": "", "ready": false,
                                                 "restartCount": 0, "state": state}]}})
    }

    /// The answer to one API request: status and body.
    pub(crate) fn answer(&self, method: &str, path: &str, query: &str, body: &[u8]) -> (u16, Value) {
        let name = path.rsplit('/').next().unwrap_or_default().to_string();
        let scale_of = |workload: &Workload, name: &str| {
            json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
                   "metadata": {"name": name, "resourceVersion": workload.resource_version.to_string()},
                   "spec": {"replicas": workload.replicas}, "status": {"replicas": workload.replicas}})
        };
        match method {
            "GET" if path.ends_with("/scale") => {
                let deployment = path.trim_end_matches("/scale").rsplit('/').next().unwrap();
                let workloads = self.workloads.lock().unwrap();
                match workloads.get(deployment) {
                    Some(workload) => (200, scale_of(workload, deployment)),
                    None => (404, status(404, "NotFound")),
                }
            }
            "PATCH" if path.ends_with("/scale") => {
                let deployment = path.trim_end_matches("/scale").rsplit('/').next().unwrap();
                let patch: Value = serde_json::from_slice(body).unwrap();
                let answer = {
                    let mut workloads = self.workloads.lock().unwrap();
                    let Some(workload) = workloads.get_mut(deployment) else {
                        return (404, status(404, "NotFound"));
                    };
                    if let Some(expected) = patch["metadata"]["resourceVersion"].as_str() {
                        if expected != workload.resource_version.to_string() {
                            return (409, status(409, "Conflict"));
                        }
                    }
                    workload.replicas = patch["spec"]["replicas"].as_i64().unwrap() as i32;
                    workload.resource_version += 1;
                    scale_of(workload, deployment)
                };
                self.reconcile();
                (200, answer)
            }
            "GET" if path.ends_with("/endpointslices") => {
                let query = query.replace("%2F", "/").replace("%3D", "=");
                let service = query
                    .split('&')
                    .find_map(|p| p.strip_prefix("labelSelector=kubernetes.io/service-name="))
                    .unwrap_or_default()
                    .to_string();
                let workloads = self.workloads.lock().unwrap();
                let items: Vec<Value> = workloads
                    .get(&service)
                    .map(|w| w.pods.iter().chain(&w.old).filter(|p| p.ready).collect::<Vec<_>>())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|pod| {
                        json!({"metadata": {"name": format!("{service}-{}", pod.frames)}, "addressType": "IPv4",
                               "endpoints": [{"addresses": [pod.ip.to_string()], "conditions": {"ready": true}}],
                               "ports": [{"name": "frames", "port": pod.frames, "protocol": "TCP"}]})
                    })
                    .collect();
                (
                    200,
                    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSliceList", "metadata": {}, "items": items}),
                )
            }
            "POST" if path.ends_with("/jobs") => {
                let mut job: Value = serde_json::from_slice(body).unwrap();
                let name = job["metadata"]["name"].as_str().unwrap().to_string();
                let mut jobs = self.jobs.lock().unwrap();
                if jobs.contains_key(&name) {
                    return (409, status(409, "AlreadyExists"));
                }
                let mut pod = self.start_job(&job);
                job["metadata"]["uid"] = json!(format!("uid-of-{name}"));
                job["status"] = Self::job_status(&mut pod);
                jobs.insert(name, pod);
                (201, job)
            }
            // The idle scaler's last call and the load scaler's calls
            // under way, noted on the Deployment (a merge patch of its
            // annotations, not an apply; null removes one), and read back.
            "PATCH" if path.contains("/deployments/") && !query.contains("fieldManager") => {
                let patch: Value = serde_json::from_slice(body).unwrap();
                let mut workloads = self.workloads.lock().unwrap();
                let Some(workload) = workloads.get_mut(&name) else {
                    return (404, status(404, "NotFound"));
                };
                let mut changed = false;
                for (key, value) in patch["metadata"]["annotations"].as_object().into_iter().flatten() {
                    let before = match value.as_str() {
                        Some(value) => workload.annotations.insert(key.clone(), value.to_string()),
                        None => workload.annotations.remove(key),
                    };
                    changed |= before.as_deref() != value.as_str();
                }
                if changed {
                    // A change of the object: a new resourceVersion.
                    workload.resource_version += 1;
                }
                (200, deployment_of(&name, workload))
            }
            "GET" if path.contains("/deployments/") => match self.workloads.lock().unwrap().get(&name) {
                Some(workload) => (200, deployment_of(&name, workload)),
                None => (404, status(404, "NotFound")),
            },
            "GET" if path.contains("/jobs/") => match self.jobs.lock().unwrap().get_mut(&name) {
                Some(pod) => (
                    200,
                    json!({"apiVersion": "batch/v1", "kind": "Job",
                           "metadata": {"name": name, "namespace": "sless-fn-demo"},
                           "status": Self::job_status(pod)}),
                ),
                None => (404, status(404, "NotFound")),
            },
            // A deleted Deployment's pods leave its EndpointSlice and are
            // told to stop (SIGTERM, SIGKILL after their grace period).
            "DELETE" if path.contains("/deployments/") => {
                let Some(workload) = self.workloads.lock().unwrap().remove(&name) else {
                    return (404, status(404, "NotFound"));
                };
                let grace = workload.template.grace;
                let Workload { pods, old, .. } = workload;
                let stopping = pods.into_iter().chain(old).map(|pod| pod.terminate(grace));
                self.terminating.lock().unwrap().extend(stopping);
                (
                    200,
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
                )
            }
            "DELETE" if path.contains("/jobs/") => {
                self.jobs.lock().unwrap().remove(&name);
                (
                    200,
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
                )
            }
            "GET" if path.ends_with("/pods") && query.contains("sless.dev%2Fwarm%3Dclaimed") => self.claimed_pods(),
            "GET" if path.ends_with("/pods") && query.contains("sless.dev%2Fwarm") => self.generic_pods(query),
            "PATCH" if path.contains("/pods/") && !query.contains("fieldManager") => self.claim(&name, body),
            "DELETE" if path.contains("/pods/") => {
                let grace = Duration::from_secs(30);
                match self.claimed.lock().unwrap().remove(&name) {
                    Some((pod, _)) => self.terminating.lock().unwrap().push(pod.terminate(grace)),
                    None => return (404, status(404, "NotFound")),
                }
                (
                    200,
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
                )
            }
            // The warm pool's token: made once, read back.
            "POST" if path.ends_with("/secrets") => {
                let mut object: Value = serde_json::from_slice(body).unwrap();
                let name = object["metadata"]["name"].as_str().unwrap().to_string();
                let mut secrets = self.secrets.lock().unwrap();
                if secrets.contains_key(&name) {
                    return (409, status(409, "AlreadyExists"));
                }
                let data: BTreeMap<String, Vec<u8>> = object["stringData"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(key, value)| (key.clone(), value.as_str().unwrap().as_bytes().to_vec()))
                    .collect();
                secrets.insert(name, (1, data));
                object["metadata"]["resourceVersion"] = json!("1");
                (201, object)
            }
            "GET" if path.starts_with("/api/v1/namespaces/sless-warm/secrets/") => {
                use base64::Engine;
                match self.secrets.lock().unwrap().get(&name) {
                    Some((version, data)) => {
                        let data: serde_json::Map<String, Value> = data
                            .iter()
                            .map(|(k, v)| (k.clone(), json!(base64::engine::general_purpose::STANDARD.encode(v))))
                            .collect();
                        (
                            200,
                            json!({"apiVersion": "v1", "kind": "Secret",
                                   "metadata": {"name": name, "namespace": "sless-warm",
                                                "resourceVersion": version.to_string()},
                                   "data": data}),
                        )
                    }
                    None => (404, status(404, "NotFound")),
                }
            }
            "GET" if path.ends_with("/pods") => {
                let query = query.replace("%2F", "/").replace("%3D", "=");
                let job = query
                    .split('&')
                    .find_map(|p| p.strip_prefix("labelSelector=batch.kubernetes.io/job-name="))
                    .unwrap_or_default()
                    .to_string();
                let items: Vec<Value> = self
                    .jobs
                    .lock()
                    .unwrap()
                    .get_mut(&job)
                    .map(|pod| Self::job_pod(&job, pod))
                    .into_iter()
                    .collect();
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}),
                )
            }
            "GET" if path.ends_with("/log") => {
                let pod = path.trim_end_matches("/log").rsplit('/').next().unwrap();
                let job = pod.trim_end_matches("-pod");
                match self.jobs.lock().unwrap().get(job) {
                    Some(JobPod::Build(pod)) => (200, Value::String(pod.read("stdout") + &pod.read("stderr"))),
                    // A run's instance logs nothing the driver reads.
                    Some(JobPod::Run(_)) => (200, Value::String(String::new())),
                    None => (404, status(404, "NotFound")),
                }
            }
            "GET" if path == "/api/v1/namespaces/sless/secrets/sless-artifact-reader" => (
                200,
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "sless"}, "data": {}}),
            ),
            // Server-side applies: kept as sent (a Deployment's template
            // becomes its pods' environment; a changed one rolls them).
            "PATCH" => {
                let mut object: Value = serde_json::from_slice(body).unwrap();
                object["metadata"]["uid"] = json!(format!("uid-of-{name}"));
                if path.contains("/deployments/") {
                    let template = self.pod_template(&object);
                    let mut workloads = self.workloads.lock().unwrap();
                    let workload = workloads.entry(name).or_default();
                    // Replicas in an apply are the Deployment's (the warm
                    // pools'); versions leave them to the scale subresource.
                    if let Some(replicas) = object["spec"]["replicas"].as_i64() {
                        workload.replicas = i32::try_from(replicas).unwrap();
                    }
                    if workload.template.text != template.text {
                        workload.template = template;
                        // Rolled: the old pods serve until the new ones are ready.
                        let old: Vec<_> = workload.pods.drain(..).collect();
                        workload.old.extend(old);
                    }
                    drop(workloads);
                    self.reconcile();
                } else if path.contains("/secrets/") {
                    let data: BTreeMap<String, Vec<u8>> = object["data"]
                        .as_object()
                        .into_iter()
                        .flatten()
                        .map(|(key, value)| (key.clone(), base64_decode(value)))
                        .collect();
                    let mut secrets = self.secrets.lock().unwrap();
                    let stored = secrets.entry(name).or_insert((0, BTreeMap::new()));
                    if stored.1 != data {
                        *stored = (stored.0 + 1, data);
                    }
                    object["metadata"]["resourceVersion"] = json!(stored.0.to_string());
                }
                (200, object)
            }
            _ => (404, status(404, "NotFound")),
        }
    }
}

impl Cluster {
    /// The ready generic pods of the pool the selector names (its
    /// runtime), as pods with their ports; each pod's resourceVersion is
    /// 1 until it is claimed.
    fn generic_pods(&self, query: &str) -> (u16, Value) {
        let query = query.replace("%2F", "/").replace("%3D", "=").replace("%2C", ",");
        let runtime = query
            .split(['&', ','])
            .find_map(|p| p.strip_prefix("sless.dev/warm-runtime="))
            .unwrap_or_default()
            .to_string();
        let deployment = format!("warm-{}", runtime.replace('.', ""));
        let workloads = self.workloads.lock().unwrap();
        let items: Vec<Value> = workloads
            .get(&deployment)
            .into_iter()
            .flat_map(|w| w.pods.iter())
            .map(|pod| {
                let ready = if pod.ready { "True" } else { "False" };
                json!({"metadata": {"name": format!("{deployment}-{}", pod.frames), "namespace": "sless-warm",
                                    "resourceVersion": "1",
                                    "labels": {"sless.dev/warm": "generic", "sless.dev/warm-runtime": runtime}},
                       "spec": {"containers": [{"name": "instance",
                                                "ports": [{"name": "frames", "containerPort": pod.frames},
                                                          {"name": "ready", "containerPort": pod.ready_port}]}]},
                       "status": {"phase": "Running", "podIP": pod.ip.to_string(),
                                  "conditions": [{"type": "Ready", "status": ready}]}})
            })
            .collect();
        (
            200,
            json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}),
        )
    }

    /// A claim: a merge patch of a generic pod's labels, conditional on
    /// its resourceVersion. The pod leaves its Deployment (whose next pass
    /// starts a replacement); a pod claimed already is a conflict.
    fn claim(&self, name: &str, body: &[u8]) -> (u16, Value) {
        let patch: Value = serde_json::from_slice(body).unwrap();
        if self.claimed.lock().unwrap().contains_key(name) {
            return (409, status(409, "Conflict"));
        }
        let (deployment, frames) = name.rsplit_once('-').unwrap();
        let frames: u16 = frames.parse().unwrap();
        let pod = {
            let mut workloads = self.workloads.lock().unwrap();
            let Some(workload) = workloads.get_mut(deployment) else {
                return (404, status(404, "NotFound"));
            };
            if patch["metadata"]["resourceVersion"].as_str() != Some("1") {
                return (409, status(409, "Conflict"));
            }
            let Some(index) = workload.pods.iter().position(|p| p.frames == frames) else {
                return (404, status(404, "NotFound"));
            };
            workload.pods.remove(index)
        };
        let claim = json!({"labels": patch["metadata"]["labels"].clone(),
                           "annotations": patch["metadata"]["annotations"].clone()});
        self.claimed
            .lock()
            .unwrap()
            .insert(name.to_string(), (pod, claim.clone()));
        self.reconcile();
        (
            200,
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": "sless-warm", "resourceVersion": "2",
                                "labels": claim["labels"], "annotations": claim["annotations"]}}),
        )
    }

    /// The claimed pods, with the labels and annotations of their claim.
    fn claimed_pods(&self) -> (u16, Value) {
        let claimed = self.claimed.lock().unwrap();
        let items: Vec<Value> = claimed
            .iter()
            .map(|(name, (pod, claim))| {
                json!({"metadata": {"name": name, "namespace": "sless-warm", "resourceVersion": "2",
                                    "labels": claim["labels"], "annotations": claim["annotations"]},
                       "status": {"phase": "Running", "podIP": pod.ip.to_string()}})
            })
            .collect();
        (
            200,
            json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}),
        )
    }

    /// Claims a ready generic pod of `runtime` as a driver does, its claim
    /// dated `claimed_at_ms`: the pod's name and pid.
    pub(crate) fn claim_one(&self, runtime: &str, claimed_at_ms: u64) -> Option<(String, u32)> {
        let deployment = format!("warm-{}", runtime.replace('.', ""));
        let (name, pid) = {
            let workloads = self.workloads.lock().unwrap();
            let pod = workloads.get(&deployment)?.pods.iter().find(|p| p.ready)?;
            (format!("{deployment}-{}", pod.frames), pod.child.id())
        };
        let patch = json!({"metadata": {"resourceVersion": "1",
                                        "labels": {"sless.dev/warm": "claimed", "sless.dev/claimed-for": "gone"},
                                        "annotations": {"sless.dev/claimed-at": claimed_at_ms.to_string()}}});
        let (code, _) = self.claim(&name, &serde_json::to_vec(&patch).unwrap());
        (code == 200).then_some((name, pid))
    }
}

/// A Deployment as the API server shows it: replicas, the last call
/// reported, the resourceVersion a conditional scale names, and its
/// rollout's status (pods of the current template, those of the previous
/// one still serving, how many of the current ones are ready).
fn deployment_of(name: &str, workload: &Workload) -> Value {
    let updated = workload.pods.len();
    let ready = workload.pods.iter().filter(|p| p.ready).count();
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": name, "namespace": "sless-fn-demo", "generation": 1,
                        "resourceVersion": workload.resource_version.to_string(),
                        "annotations": workload.annotations},
           "spec": {"replicas": workload.replicas, "selector": {}, "template": {}},
           "status": {"observedGeneration": 1, "replicas": updated + workload.old.len(),
                      "updatedReplicas": updated, "readyReplicas": ready}})
}

fn base64_decode(value: &Value) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(value.as_str().unwrap())
        .unwrap()
}

fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "reason": reason, "code": code, "message": reason})
}
