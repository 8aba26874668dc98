//! The stand-in kubelet: a Deployment's pods as real `sless instance`
//! processes, each on a loopback address of its own (started with the applied template's
//! environment, restarted when they die, probed on `/ready` as the
//! readiness probe does); a build Job's pod as `sless instance build`, a
//! run Job's as a one-shot `sless instance` (it ends after one answer).
//! A pod's end kills its whole process group, as a container's end takes
//! everything in it (the handler's shim too).

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cluster::Cluster;

/// An instance pod: `sless instance` in a process group of its own, its
/// IP, frame and readiness ports, and whether its readiness probe passed.
pub(crate) struct Pod {
    pub(crate) child: Child,
    /// A loopback address of its own, as a pod has its own IP: a port it
    /// was given cannot be taken meanwhile by anything else on the machine
    /// (other tests' connections, on 127.0.0.1).
    pub(crate) ip: Ipv4Addr,
    pub(crate) frames: u16,
    pub(crate) ready_port: u16,
    pub(crate) ready: bool,
    /// Its readiness probe fails until then, whatever `/ready` says.
    unready_until: Instant,
    _dir: tempfile::TempDir,
}

impl Pod {
    /// Sends SIGTERM to the pod's main process, as the kubelet does to
    /// stop a container: it has `grace` to end before SIGKILL.
    pub(crate) fn terminate(self, grace: Duration) -> Terminating {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        Terminating {
            pod: self,
            deadline: Instant::now() + grace,
        }
    }

    /// The exit code once it has ended.
    pub(crate) fn ended(&mut self) -> Option<i32> {
        self.child.try_wait().unwrap().map(|status| status.code().unwrap_or(-1))
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a pod of a Deployment gets: the instance's environment (values,
/// and those of secretKeyRefs) and the files of its Secret volume.
#[derive(Default, Clone)]
pub(crate) struct PodTemplate {
    /// The applied template as sent: a new one rolls the pods.
    pub(crate) text: String,
    /// A warm pool's generic pod (`sless instance generic`: no function,
    /// no object store credentials) rather than a function's.
    pub(crate) generic: bool,
    pub(crate) env: Vec<(String, String)>,
    /// Where the Secret volume is mounted, and its files: path, bytes, mode.
    pub(crate) mount: Option<String>,
    pub(crate) files: Vec<(String, Vec<u8>, u32)>,
    /// How long a pod being stopped has after SIGTERM before SIGKILL.
    pub(crate) grace: Duration,
}

/// A Deployment as the stand-in keeps it.
#[derive(Default)]
pub(crate) struct Workload {
    pub(crate) template: PodTemplate,
    pub(crate) replicas: i32,
    pub(crate) resource_version: u64,
    pub(crate) pods: Vec<Pod>,
    /// Pods of the previous template, still serving until the current
    /// ones are ready (a rollout starts new pods before it stops old ones).
    pub(crate) old: Vec<Pod>,
    /// The annotations replicas report on it (`sless.dev/last-call`, the
    /// in-flight calls of each, `sless.dev/inflight-{replica}`).
    pub(crate) annotations: std::collections::BTreeMap<String, String>,
}

/// A pod told to stop: out of every EndpointSlice, killed at `deadline`
/// if it has not ended by then.
pub(crate) struct Terminating {
    pod: Pod,
    deadline: Instant,
}

/// A build Job's one pod: `sless instance build` with the Job's environment.
pub(crate) struct BuildPod {
    pub(crate) child: Child,
    pub(crate) dir: tempfile::TempDir,
}

impl BuildPod {
    /// The exit code once it has ended.
    pub(crate) fn ended(&mut self) -> Option<i32> {
        self.child.try_wait().unwrap().map(|status| status.code().unwrap_or(-1))
    }

    pub(crate) fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(file)).unwrap_or_default()
    }
}

/// A Job's one pod.
pub(crate) enum JobPod {
    Build(BuildPod),
    /// A run's instance: ready once its handler loaded, ends after one answer.
    Run(Pod),
}

impl JobPod {
    /// The exit code once it has ended.
    pub(crate) fn ended(&mut self) -> Option<i32> {
        match self {
            JobPod::Build(pod) => pod.ended(),
            JobPod::Run(pod) => pod.ended(),
        }
    }

    /// The pid of its process.
    pub(crate) fn pid(&self) -> u32 {
        match self {
            JobPod::Build(pod) => pod.child.id(),
            JobPod::Run(pod) => pod.child.id(),
        }
    }
}

impl Drop for BuildPod {
    fn drop(&mut self) {
        // The whole group: its pip or npm, and what their scripts started.
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A random loopback address outside 127.0.0.0/16 (where tests' own
/// servers listen).
fn pod_ip() -> Ipv4Addr {
    let mut random = std::collections::hash_map::RandomState::new().build_hasher();
    random.write_u32(std::process::id());
    let [a, b, c, ..] = random.finish().to_le_bytes();
    Ipv4Addr::new(127, a.max(1), b, c.clamp(1, 254))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Cluster {
    pub(crate) fn start_pod(&self, template: &PodTemplate) -> Pod {
        let dir = tempfile::tempdir().unwrap();
        let (ip, frames, ready_port) = (pod_ip(), free_port(), free_port());
        let mut cmd = Command::new(&self.sless);
        cmd.arg("instance")
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin");
        if template.generic {
            cmd.arg("generic");
        } else {
            // The init container's fetch, in the same process: the
            // artifact reader Secret's credentials.
            cmd.envs(self.s3_env.iter().map(|(k, v)| (k, v)));
        }
        let mut env = template.env.clone();
        // The Secret volume, "mounted" in the pod's directory: the files
        // with their modes, and the handler's SLESS_SECRETS_DIR pointed there.
        if let Some(mount) = &template.mount {
            let root = dir.path().join("secrets");
            for (path, bytes, mode) in &template.files {
                let file = root.join(path);
                std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                std::fs::write(&file, bytes).unwrap();
                std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(*mode)).unwrap();
            }
            for (name, value) in &mut env {
                if name == "SLESS_INSTANCE_ENV" {
                    let mut handler: BTreeMap<String, String> = serde_json::from_str(value).unwrap();
                    if handler.get("SLESS_SECRETS_DIR") == Some(mount) {
                        handler.insert("SLESS_SECRETS_DIR".into(), root.display().to_string());
                    }
                    *value = serde_json::to_string(&handler).unwrap();
                }
            }
        }
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        cmd.env("SLESS_INSTANCE_CODE_DIR", dir.path().join("code/app"))
            .env("SLESS_INSTANCE_WORK_DIR", dir.path().join("tmp"))
            .env("SLESS_INSTANCE_LISTEN", format!("{ip}:{frames}"))
            .env("SLESS_INSTANCE_READY_LISTEN", format!("{ip}:{ready_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        std::fs::create_dir_all(dir.path().join("code")).unwrap();
        let starting = if template.generic {
            Duration::ZERO
        } else {
            *self.function_pod_start.lock().unwrap()
        };
        Pod {
            child: cmd.spawn().expect("start sless instance"),
            ip,
            frames,
            ready_port,
            ready: false,
            unready_until: Instant::now() + starting,
            _dir: dir,
        }
    }

    /// Runs a Job's pod: a build or a run, by its container's command.
    pub(crate) fn start_job(&self, job: &Value) -> JobPod {
        let command = &job["spec"]["template"]["spec"]["containers"][0]["command"];
        if *command == json!(["sless", "instance", "build"]) {
            JobPod::Build(self.start_build(job))
        } else {
            assert_eq!(*command, json!(["sless", "instance", "serve"]), "{job}");
            JobPod::Run(self.start_pod(&self.pod_template(job)))
        }
    }

    /// Runs a build Job's pod: its container's environment and nothing of
    /// this machine's (no object-store credentials: the Job has its grant).
    fn start_build(&self, job: &Value) -> BuildPod {
        let dir = tempfile::tempdir().unwrap();
        let container = &job["spec"]["template"]["spec"]["containers"][0];
        let env = container["env"].as_array().cloned().unwrap_or_default();
        let mut cmd = Command::new(&self.sless);
        cmd.args(["instance", "build"])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin");
        for var in &env {
            cmd.env(var["name"].as_str().unwrap(), var["value"].as_str().unwrap());
        }
        cmd.env("SLESS_INSTANCE_WORK_DIR", dir.path().join("tmp"))
            .env("SLESS_BUILD_TERMINATION_LOG", dir.path().join("termination-log"))
            .stdout(std::fs::File::create(dir.path().join("stdout")).unwrap())
            .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap())
            .process_group(0);
        BuildPod {
            child: cmd.spawn().expect("start sless instance build"),
            dir,
        }
    }

    /// The kubelet's pass: dead pods restarted (not ready until they say
    /// so), pods started or stopped to the replicas wanted, old pods of a
    /// rollout stopped once the new ones are all ready, stopped pods
    /// removed when they end or their grace period is over.
    pub(crate) fn reconcile(&self) {
        let mut stopping = Vec::new();
        {
            let mut workloads = self.workloads.lock().unwrap();
            for workload in workloads.values_mut() {
                for pod in &mut workload.pods {
                    if pod.child.try_wait().unwrap().is_some() {
                        *pod = self.start_pod(&workload.template);
                    }
                }
                let wanted = usize::try_from(workload.replicas).unwrap_or(0);
                let grace = workload.template.grace;
                stopping.extend(
                    workload
                        .pods
                        .drain(wanted.min(workload.pods.len())..)
                        .map(|p| p.terminate(grace)),
                );
                while workload.pods.len() < wanted {
                    let pod = self.start_pod(&workload.template);
                    workload.pods.push(pod);
                }
                if workload.pods.iter().all(|p| p.ready) {
                    stopping.extend(workload.old.drain(..).map(|p| p.terminate(grace)));
                }
            }
        }
        for job in self.jobs.lock().unwrap().values_mut() {
            if let JobPod::Build(pod) = job {
                if let Some(peak) = peak_memory(pod.child.id()) {
                    let mut most = self.build_peak.lock().unwrap();
                    *most = (*most).max(peak);
                }
            }
        }
        let mut terminating = self.terminating.lock().unwrap();
        terminating.extend(stopping);
        terminating.retain_mut(|t| t.pod.ended().is_none() && Instant::now() < t.deadline);
    }

    /// Probes every pod's `/ready`, as the kubelet's readiness probe.
    pub(crate) async fn probe(&self) {
        let ports: Vec<(String, usize, (Ipv4Addr, u16))> = {
            let workloads = self.workloads.lock().unwrap();
            workloads
                .iter()
                .flat_map(|(name, w)| {
                    w.pods
                        .iter()
                        .enumerate()
                        .map(move |(i, p)| (name.clone(), i, (p.ip, p.ready_port)))
                })
                .collect()
        };
        for (name, index, port) in ports {
            let ready = ready(port).await;
            if let Some(pod) = self
                .workloads
                .lock()
                .unwrap()
                .get_mut(&name)
                .and_then(|w| w.pods.get_mut(index))
            {
                if (pod.ip, pod.ready_port) == port {
                    pod.ready = ready && Instant::now() >= pod.unready_until;
                }
            }
        }
        let runs: Vec<(String, (Ipv4Addr, u16))> = {
            let jobs = self.jobs.lock().unwrap();
            jobs.iter()
                .filter_map(|(name, job)| match job {
                    JobPod::Run(pod) => Some((name.clone(), (pod.ip, pod.ready_port))),
                    JobPod::Build(_) => None,
                })
                .collect()
        };
        for (name, port) in runs {
            let ready = ready(port).await;
            if let Some(JobPod::Run(pod)) = self.jobs.lock().unwrap().get_mut(&name) {
                if (pod.ip, pod.ready_port) == port {
                    pod.ready = ready;
                }
            }
        }
    }
}

/// The most memory process `pid` has had resident (its VmHWM), in bytes,
/// while it runs.
pub fn peak_memory(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib << 10)
}

async fn ready(port: (Ipv4Addr, u16)) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let check = async {
        let mut stream = tokio::net::TcpStream::connect(port).await.ok()?;
        stream.write_all(b"GET /ready HTTP/1.1\r\nhost: x\r\n\r\n").await.ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).await.ok()?;
        Some(text.starts_with("HTTP/1.1 200"))
    };
    tokio::time::timeout(Duration::from_millis(500), check)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}
