//! Starts shim processes in the sandbox and links a function's artifact into
//! an instance's slot (the directory it sees as /code).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sless_api::Runtime;

use super::cgroup::GroupLimits;
use super::code_mount::{ArtifactHolds, CodeMounter};
use super::confine::{unmount_all_under, Confinement, Confiner, IsolationSettings, Scratch};
use super::network::HubOf;
use super::process::ShimProcess;
use super::sandbox::{make_owned_dir, Limits, Sandbox, Spec};
use super::zygote::{ForkRequest, Ran, Zygote};

/// The shims, embedded in the binary and written out at start.
pub(crate) const PYTHON_SHIM: &str = include_str!("../../../runtimes/python/sless_shim.py");
pub(crate) const PYTHON_ZYGOTE: &str = include_str!("../../../runtimes/python/sless_zygote.py");
pub(crate) const NODE_SHIM: &str = include_str!("../../../runtimes/node/sless_shim.js");
pub(crate) const NODE_ZYGOTE: &str = include_str!("../../../runtimes/node/sless_zygote.js");
/// The Node zygote's native module (`runtimes/node/sless_fork.c`, built by build.rs).
pub(crate) const NODE_FORK: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sless_fork.node"));
/// The Python zygote's request loop (`runtimes/python/sless_loop.c`), built by build.rs.
const PYTHON_LOOP: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sless_loop.so"));
/// The module a Node shim started from a snapshot loads while it waits in
/// the pool, so that a handler's load finds the module loader compiled
/// (`warmUp` in the shim, which finds it beside the snapshot).
const NODE_WARM_MODULE: &str = "module.exports = 0;\n";
/// How the Node shim is started: frames on fds 3 (in) and 4 (out), stdin
/// on /dev/null and stdout on stderr, so no write to fd 1 can pass for a frame.
pub(crate) const NODE_FDS: &str = r#"exec 3<&0 4>&1 </dev/null 1>&2; exec "$@""#;

/// A Node shim started while a cold start waits for it is taken at its
/// HELLO and loaded at once: it rehearses (`warmUp` in the shim) only if
/// still idle after 250 ms, as a Python fork does (`REHEARSAL_DELAY_AWAITED`),
/// not after the usual 5 ms, when in a burst the rehearsal would run on
/// two CPUs beside the cold starts. The shim removes the variable from its
/// environment before it loads a handler.
fn node_warm_up_env(runtime: Runtime, awaited: bool) -> Vec<(String, String)> {
    match (runtime, awaited) {
        (Runtime::Nodejs20, true) => vec![("SLESS_WARM_UP_MS".into(), "250".into())],
        _ => vec![],
    }
}

/// Version of the embedded shims: a digest of their text and of what a
/// build runs after the install (it makes part of the artifact), so any
/// change rebuilds and rolls every function.
/// Writes the shims, the zygotes and their native parts into `shim_dir`.
pub(crate) fn write_shims(shim_dir: &Path) -> std::io::Result<()> {
    std::fs::write(shim_dir.join("sless_shim.py"), PYTHON_SHIM)?;
    std::fs::write(shim_dir.join("sless_shim.js"), NODE_SHIM)?;
    std::fs::write(shim_dir.join("sless_zygote.py"), PYTHON_ZYGOTE)?;
    std::fs::write(shim_dir.join("sless_warm.js"), NODE_WARM_MODULE)?;
    std::fs::write(shim_dir.join("sless_zygote.js"), NODE_ZYGOTE)?;
    write_replacing(&shim_dir.join("sless_fork.node"), NODE_FORK)?;
    write_replacing(&shim_dir.join("sless_loop.so"), PYTHON_LOOP)
}

pub fn shim_version() -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(PYTHON_SHIM)
        .chain_update(PYTHON_ZYGOTE)
        .chain_update(NODE_SHIM)
        .chain_update(super::builder::PYTHON_COMPILE)
        .finalize();
    hex::encode(&digest[..6])
}

/// Limits of a warm shim before it knows its function.
const WARM_LIMITS: Limits = Limits {
    memory_bytes: 1 << 30,
    processes: 128,
    cpu_seconds: 3600,
    open_files: 1024,
    tmp_bytes: 64 << 20,
};

/// The control group of a warm shim before it knows its function (its
/// memory limit is set to the function's at load).
const WARM_GROUP: GroupLimits = GroupLimits {
    memory_bytes: 1 << 30,
    processes: 128,
    cpus: 1.0,
};

/// The memory class of a Node function: its `memory_mb` rounded down to a
/// power of two (16 at least). V8 sizes its heap once, when node starts,
/// before a warm shim knows its function: so Node shims are started per
/// class, each with the heap of its class ([`node_heap_mb`]).
pub fn node_memory_class(memory_mb: u32) -> u32 {
    1 << (u32::BITS - 1 - memory_mb.max(16).leading_zeros())
}

/// The heap (MB, [`node_heap_flag`]) of a Node shim of memory class
/// `class`: three quarters of it. Left to itself V8 takes at least 256 MB,
/// or half the memory of the control group node starts in (the warm
/// shims' 1 GiB), whatever the function's `memory_mb`: a function of 128
/// or 256 MB holding a few tens of MB then lets garbage grow past its limit
/// and is killed by the kernel, and one of 4096 MB cannot hold 600 MB.
/// The flag costs node the code cache of its own modules (any V8 flag
/// does; about 9 ms of CPU per start), paid by the warm pool's starts.
pub fn node_heap_mb(class: u32) -> u32 {
    class / 4 * 3
}

/// node's option for a heap of `mb` MB in all, its young generation and
/// the rest (`--max-old-space-size` alone leaves the young generation as
/// large as for the warm group's 1 GiB: 144 MB of heap under 128 MB).
pub fn node_heap_flag(mb: u32) -> String {
    format!("--max-heap-size={mb}")
}

/// How a Node shim of one memory class starts: with its heap, and from a
/// startup snapshot of the shim taken with that heap when there is one
/// ([`Launcher::node_snapshot`]).
#[derive(Clone, Debug)]
pub struct NodeStart {
    pub heap_mb: u32,
    /// The snapshot's file in the shim directory.
    pub snapshot: Option<PathBuf>,
}

/// The heap of a Node shim of a function of `memory_mb`.
pub fn node_heap_for(memory_mb: u32) -> u32 {
    node_heap_mb(node_memory_class(memory_mb))
}

/// Files a build's directory may hold (`node_modules` trees run to tens of
/// thousands; each costs the build's memory some).
const BUILD_SPACE_INODES: u64 = 500_000;

/// Knows where runtimes, shims and slots are, and how to start a shim.
pub struct Launcher {
    pub sandbox: Sandbox,
    pub confiner: Confiner,
    shim_dir: PathBuf,
    slots_dir: PathBuf,
    python: String,
    node: String,
    /// Where sandboxes' scratch tmpfs are mounted.
    scratch_dir: PathBuf,
    /// Forks Python shims instead of starting interpreters, when on.
    zygote: Option<Zygote>,
    /// Fork Node shims, when on (with `zygote`): a zygote per heap size,
    /// made on the first start of a shim of that heap; none for a heap
    /// whose zygote's first fork failed (its shims start as new nodes).
    node_zygotes: Option<Mutex<HashMap<u32, Option<Arc<Zygote>>>>>,
    /// Mounts a fork's code into its view (with `zygote`; see code_mount.rs).
    code_mounter: Option<CodeMounter>,
    /// Whether a failed mount was logged (it falls back to links).
    mount_failed: std::sync::atomic::AtomicBool,
    /// The artifacts instances have mounted.
    pub holds: ArtifactHolds,
}

impl Launcher {
    pub fn new(
        data_dir: &Path,
        python: String,
        node: String,
        isolation: &IsolationSettings,
        python_zygote: bool,
        node_zygote: bool,
    ) -> anyhow::Result<Launcher> {
        // Canonical: every path a sandbox is given lies below it as named
        // (the zygote binds only the data dir itself of the host's tree).
        std::fs::create_dir_all(data_dir)?;
        let data_dir = &data_dir.canonicalize()?;
        let mut sandbox = Sandbox::detect()?;
        let confiner = Confiner::start(data_dir, isolation)?;
        sandbox.resolv_conf = confiner.resolv_conf().map(Path::to_path_buf);
        if sandbox.allocate_uid().is_some() {
            reachable_by_others(data_dir)?;
        }
        let shim_dir = data_dir.join("shims").join(shim_version());
        std::fs::create_dir_all(&shim_dir)?;
        set_mode(&data_dir.join("shims"), 0o755)?;
        set_mode(&shim_dir, 0o755)?;
        write_shims(&shim_dir)?;

        // Slots of this process only: several servers may share a data dir.
        let all_slots = data_dir.join("slots");
        std::fs::create_dir_all(&all_slots)?;
        set_mode(&all_slots, 0o711)?;
        remove_stale_slots(&all_slots);
        // Canonical: mount points are compared with /proc/self/mountinfo.
        let slots_dir = all_slots.canonicalize()?.join(super::owner::own_tag());
        std::fs::create_dir_all(&slots_dir)?;
        set_mode(&slots_dir, 0o711)?;
        // Scratch tmpfs mounts apart from the slots: one directory holds
        // every mount this server makes for its sandboxes.
        let scratch_dir = slots_dir.join("scratch");
        std::fs::create_dir_all(&scratch_dir)?;
        set_mode(&scratch_dir, 0o711)?;
        if confiner.mounts_tmpfs() {
            mount_scratch_root(&scratch_dir)?;
        }
        let zygote = match (python_zygote, sandbox.as_root()) {
            (true, true) => Some(Zygote::python(python.clone(), &shim_dir, data_dir)?),
            (true, false) => {
                tracing::warn!("SLESS_PYTHON_ZYGOTE needs a server running as root (it confines its forks itself): Python instances start as new interpreters");
                None
            }
            (false, _) => None,
        };
        let node_zygotes = (zygote.is_some() && node_zygote).then(Mutex::default);
        let code_mounter = match zygote.as_ref().map(|_| CodeMounter::start()) {
            Some(Ok(mounter)) => Some(mounter),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "instances get their code linked file by file: the code mounter did not start");
                None
            }
            None => None,
        };
        Ok(Launcher {
            sandbox,
            confiner,
            shim_dir,
            slots_dir,
            python,
            node,
            scratch_dir,
            zygote,
            node_zygotes,
            code_mounter,
            mount_failed: Default::default(),
            holds: ArtifactHolds::default(),
        })
    }

    /// Puts `artifact` at the instance's `/code`: mounted into a fork's
    /// view (a few system calls), else linked into its slot file by file.
    pub async fn place_code(&self, process: &ShimProcess, artifact: &Path) -> std::io::Result<()> {
        if let (Some(mounter), Some(pidfd)) = (&self.code_mounter, process.pidfd()) {
            let hold = self.holds.hold(artifact);
            match mounter.mount(artifact, pidfd).await {
                Ok(()) => {
                    process.hold_artifact(hold);
                    return Ok(());
                }
                // A slot on the fork's scratch tmpfs cannot hold links to
                // the artifact (another file system): the start fails.
                Err(e) if self.on_scratch(process) => {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!("mounting the code into the instance: {e}"),
                    ));
                }
                Err(e) if !self.mount_failed.swap(true, std::sync::atomic::Ordering::Relaxed) => {
                    tracing::warn!(error = %e, "mounting code into an instance failed; linking it (logged once)");
                }
                Err(_) => {}
            }
        }
        // A few files are linked here: a trip to the blocking threads costs
        // more than their links (a deploy waits for it).
        if !link_small_tree(artifact, &process.slot)? {
            let from = artifact.to_path_buf();
            let slot = process.slot.clone();
            tokio::task::spawn_blocking(move || link_tree(&from, &slot))
                .await
                .map_err(std::io::Error::other)??;
        }
        Ok(())
    }

    /// Whether shims of `runtime` are forks of a zygote that stay its
    /// interpreter, so a start costs little CPU. Without the Node zygote, a
    /// Node shim from the Python zygote runs a new node, as costly as one
    /// behind bubblewrap.
    pub fn forks(&self, runtime: Runtime) -> bool {
        match runtime {
            Runtime::Python311 => self.zygote.is_some(),
            Runtime::Nodejs20 => self.node_zygotes.is_some(),
        }
    }

    /// The Node zygote of shims whose heap is `heap_mb`, made on first use;
    /// none when Node shims are not forks, or that heap's zygote failed.
    fn node_zygote(&self, heap_mb: u32) -> Option<Arc<Zygote>> {
        let mut zygotes = self.node_zygotes.as_ref()?.lock().unwrap();
        zygotes
            .entry(heap_mb)
            .or_insert_with(|| {
                Zygote::node(&self.node, heap_mb, &self.shim_dir, self.shim_dir.parent()?.parent()?)
                    .inspect_err(|error| tracing::warn!(%error, "Node shims start as new nodes"))
                    .ok()
                    .map(Arc::new)
            })
            .clone()
    }

    /// A zygote's fork request for `spec`, its descriptors opened; `exec`:
    /// the program the fork becomes (see [`ForkRequest::exec`]).
    async fn fork_request(
        &self,
        spec: &Spec<'_>,
        confinement: &Confinement,
        awaited: bool,
        exec: Option<Vec<String>>,
    ) -> Result<ForkRequest, String> {
        let mut request = self.sandbox.fork_request(spec, confinement, WARM_LIMITS);
        request.awaited = awaited;
        request.exec = exec;
        tokio::task::spawn_blocking(move || request.open_descriptors())
            .await
            .map_err(|e| e.to_string())?
    }

    /// After `zygote`'s fork failed: a zygote process none of whose forks
    /// confined itself will not (its node lacks what a fork needs, say a
    /// node upgraded under the server, or the kernel refuses it), so its
    /// heap's shims start as new nodes from now on, this one too (true).
    fn node_zygote_failed(&self, heap_mb: u32, zygote: &Zygote, error: &str) -> bool {
        if zygote.has_forked() {
            return false;
        }
        tracing::warn!(%error, heap_mb, "the Node zygote cannot fork: Node shims start as new nodes");
        if let Some(zygotes) = &self.node_zygotes {
            zygotes.lock().unwrap().insert(heap_mb, None);
        }
        true
    }

    /// Starts a generic shim that waits for LOAD; `awaited`: a cold start
    /// waits for it (see [`ForkRequest::awaited`]); `node`: how a Node
    /// shim starts (its heap and snapshot).
    pub async fn spawn_generic(
        &self,
        runtime: Runtime,
        awaited: bool,
        node: Option<&NodeStart>,
    ) -> Result<Arc<ShimProcess>, String> {
        let node_heap_mb = node.map(|start| start.heap_mb);
        let uid = self.sandbox.allocate_uid();
        let id = format!("{:016x}", rand::random::<u64>());
        let shim = self.sandbox.seen_path(&self.shim_dir, "/sless/shim");
        let snapshot = node.and_then(|start| start.snapshot.as_ref()?.file_name()?.to_str());
        let mut node = vec![self.node.clone()];
        node.extend(node_heap_mb.map(node_heap_flag));
        match snapshot {
            Some(blob) => node.extend(["--snapshot-blob".to_string(), format!("{shim}/{blob}")]),
            None => node.push(format!("{shim}/sless_shim.js")),
        }
        let (program, args) = match runtime {
            Runtime::Python311 => (
                self.python.as_str(),
                vec!["-u".to_string(), "-B".to_string(), format!("{shim}/sless_shim.py")],
            ),
            // Node cannot move a descriptor itself: the shell puts the
            // frame pipes on fds 3 and 4 and stdout on stderr (PROTOCOL.md).
            Runtime::Nodejs20 => (
                "/bin/sh",
                ["-c", NODE_FDS, "sless-shim"]
                    .map(str::to_string)
                    .into_iter()
                    .chain(node.iter().cloned())
                    .collect(),
            ),
        };
        let started = std::time::Instant::now();
        let scratch = self.scratch_dir.join(format!("{id}.tmp"));
        let confinement = self
            .confiner
            .confine(uid, WARM_GROUP, scratch, WARM_LIMITS.tmp_bytes, None)
            .await?;
        let confined = started.elapsed();
        let slot = self.slot_for(&id, &confinement);
        make_owned_dir(&slot, uid).map_err(|e| format!("creating instance slot: {e}"))?;
        set_mode(&slot, 0o700).map_err(|e| format!("creating instance slot: {e}"))?;
        let code = self.sandbox.seen_path(&slot, "/code");
        // Empty until the instance loads a function that mounts secrets.
        let secrets = secrets_dir_of(&slot, &confinement);
        make_owned_dir(&secrets, uid).map_err(|e| format!("creating the instance's /secrets: {e}"))?;
        set_mode(&secrets, 0o500).map_err(|e| format!("creating the instance's /secrets: {e}"))?;
        let spec = Spec {
            program,
            args,
            ro: vec![
                (self.shim_dir.clone(), "/sless/shim".into()),
                (slot.clone(), "/code".into()),
                (secrets, "/secrets".into()),
            ],
            rw: vec![],
            chdir: code,
            env: node_warm_up_env(runtime, awaited),
            share_net: true,
        };
        let process = match &self.zygote {
            Some(zygote) => {
                // A Node shim without its zygote is a fork of the Python
                // zygote that confined itself, then runs node: no chain of
                // helpers (shell, nsenter, chrt, prlimit, bubblewrap,
                // shell), which cost about 11 ms of CPU.
                let exec = (runtime == Runtime::Nodejs20).then_some(node);
                let node_zygote = node_heap_mb.and_then(|mb| Some((mb, self.node_zygote(mb)?)));
                let forked = match node_zygote {
                    Some((heap_mb, node_zygote)) => {
                        let request = self.fork_request(&spec, &confinement, awaited, None).await?;
                        match node_zygote.fork(&request).await {
                            Ok(forked) => forked,
                            // This start goes as the next ones of its heap
                            // will, with a request of its own (the failed
                            // fork may have attached its mounts).
                            Err(error) if self.node_zygote_failed(heap_mb, &node_zygote, &error) => {
                                let request = self.fork_request(&spec, &confinement, awaited, exec).await?;
                                zygote.fork(&request).await?
                            }
                            Err(error) => return Err(error),
                        }
                    }
                    None => {
                        let request = self.fork_request(&spec, &confinement, awaited, exec).await?;
                        zygote.fork(&request).await?
                    }
                };
                ShimProcess::start_forked(forked, slot, confinement, runtime.to_string()).await
            }
            None => {
                let child = self
                    .sandbox
                    .command(&spec, &confinement, WARM_LIMITS)
                    .spawn()
                    .map_err(|e| format!("starting {program}: {e}"))?;
                ShimProcess::start(child, slot, confinement, runtime.to_string()).await
            }
        };
        if let (Ok(process), Some(mb)) = (&process, node_heap_mb) {
            process.set_js_heap_mb(mb);
        }
        tracing::debug!(
            %runtime,
            confine_ms = confined.as_secs_f64() * 1e3,
            total_ms = started.elapsed().as_secs_f64() * 1e3,
            "generic shim started"
        );
        process
    }

    /// Takes a startup snapshot of the Node shim whose heap is `heap_mb`
    /// (`node --build-snapshot-config`: the shim's top level, its modules loaded,
    /// stopped before `main`) into the shim directory, which sandboxes see
    /// at /sless/shim. Node started with a V8 flag (the heap's) rejects the
    /// code cache of its own modules and compiles them, about 9 ms of CPU
    /// per start; from the snapshot it finds them compiled. Taken without
    /// the code cache node would add for modules not yet loaded
    /// (`withoutCodeCache`): node reads a 1.6 MB blob instead of 4.3 MB,
    /// and a whole cold start costs about 5% less CPU and 2.7 MB less
    /// private memory (`bench/node_snapshot.py`). Made anew by
    /// each server (node may have changed), written under a new name and
    /// renamed, so a shim starting meanwhile reads a whole file. Runs our
    /// shim only, no function's code.
    pub async fn node_snapshot(&self, heap_mb: u32) -> Result<PathBuf, String> {
        let blob = self.shim_dir.join(format!("node-heap-{heap_mb}.blob"));
        let suffix = format!("{:016x}", rand::random::<u64>());
        let partial = blob.with_extension(&suffix);
        let config = blob.with_extension(format!("{suffix}.json"));
        let shim = self.shim_dir.join("sless_shim.js");
        let shim = shim
            .to_str()
            .ok_or_else(|| format!("the shim's path {} is not UTF-8", shim.display()))?;
        let builder = serde_json::json!({"builder": shim, "withoutCodeCache": true});
        std::fs::write(&config, builder.to_string()).map_err(|e| format!("writing {}: {e}", config.display()))?;
        let mut command = tokio::process::Command::new(&self.node);
        command
            .arg(node_heap_flag(heap_mb))
            .arg("--snapshot-blob")
            .arg(&partial)
            .arg("--build-snapshot-config")
            .arg(&config)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .current_dir(&self.shim_dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let built = tokio::time::timeout(std::time::Duration::from_secs(60), command.output()).await;
        let _ = std::fs::remove_file(&config);
        let failure = match built {
            Ok(Ok(output)) if output.status.success() => None,
            Ok(Ok(output)) => Some(format!(
                "{} {}",
                output.status,
                String::from_utf8_lossy(&output.stderr[output.stderr.len().saturating_sub(1024)..]).trim()
            )),
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some("it took more than 60 s".into()),
        };
        let renamed = match failure {
            None => set_mode(&partial, 0o644)
                .and_then(|()| std::fs::rename(&partial, &blob))
                .map_err(|e| e.to_string()),
            Some(failure) => Err(failure),
        };
        renamed.map(|()| blob).map_err(|e| {
            let _ = std::fs::remove_file(&partial);
            format!("node --build-snapshot of the shim (heap {heap_mb} MB): {e}")
        })
    }

    /// A confinement for a sandbox that is not a shim (a build); its
    /// scratch is mounted among this server's slots like an instance's.
    /// `internet`: its network namespace joins the builds' hub (package
    /// registries); else it has loopback only.
    pub async fn confine(
        &self,
        uid: Option<u32>,
        limits: GroupLimits,
        tmp_bytes: u64,
        internet: bool,
    ) -> Result<Confinement, String> {
        let scratch = self
            .scratch_dir
            .join(format!("build-{:016x}.tmp", rand::random::<u64>()));
        let hub = internet.then_some(HubOf::Builds);
        self.confiner.confine(uid, limits, scratch, tmp_bytes, hub).await
    }

    /// A tmpfs of `bytes` for a build's directory, among this server's
    /// slots, `uid`'s; None when the server mounts none (not root).
    pub fn build_space(&self, uid: Option<u32>, bytes: u64) -> Result<Option<Scratch>, String> {
        if !self.confiner.mounts_tmpfs() {
            return Ok(None);
        }
        let path = self
            .scratch_dir
            .join(format!("build-{:016x}.code", rand::random::<u64>()));
        // As the directory it is copied into (`cp -a` gives it this mode):
        // instances of other uids read an artifact.
        Scratch::mount_sized(path, uid, bytes, BUILD_SPACE_INODES, 0o755)
            .map(Some)
            .map_err(|e| format!("mounting the build's directory: {e}"))
    }

    /// Runs Python `source` in a fork of the Python zygote confined as
    /// `spec` (whose program it stands for) and `confinement` say, and
    /// waits for its end (see [`ForkRequest::run`]); None without the
    /// Python zygote.
    pub async fn run_python(
        &self,
        spec: &Spec<'_>,
        confinement: &Confinement,
        limits: Limits,
        source: &str,
    ) -> Option<Result<Ran, String>> {
        let zygote = self.zygote.as_ref()?;
        let mut request = self.sandbox.fork_request(spec, confinement, limits);
        request.run = Some(source.to_string());
        let ran = async {
            let request = tokio::task::spawn_blocking(move || request.open_descriptors())
                .await
                .map_err(|e| e.to_string())??;
            zygote.run(&request).await
        };
        Some(ran.await)
    }

    /// At shutdown: unmounts what is still mounted among this server's
    /// slots, removes them and its network namespaces.
    pub fn release(&self) {
        self.confiner.release();
        unmount_all_under(&self.slots_dir);
        let _ = std::fs::remove_dir_all(&self.slots_dir);
    }

    /// Fits a loaded shim's confinement to its function (memory, /tmp,
    /// network); an error means the instance must not serve.
    pub async fn fit(
        &self,
        process: &ShimProcess,
        namespace: &str,
        spec: &sless_api::FunctionSpec,
    ) -> Result<(), String> {
        let memory = u64::from(spec.memory_mb) << 20;
        let tmp = u64::from(spec.tmp_mb) << 20;
        if process.confinement.cgroup.is_none() {
            super::sandbox::limit_memory_tree(process.pid, memory)?;
        }
        self.confiner
            .fit(&process.confinement, namespace, memory, tmp, spec.network)
            .await
    }

    /// The empty directory an instance's code goes on (its view binds it
    /// read-only at `/code`). A fork's code is mounted on top of it in the
    /// fork's view, so its slot is a directory on the fork's own scratch
    /// tmpfs (which the fork gets as a detached copy, as its /tmp): making
    /// and removing one on the data dir's disk cost a cold start in a
    /// burst about 0.2 ms of CPU (ext4 allocating an inode), some 1.3% of
    /// the CPU of a steady stream of cold starts. Code linked file by file
    /// (bubblewrap sandboxes) needs a slot on the artifacts' file system.
    fn slot_for(&self, id: &str, confinement: &Confinement) -> PathBuf {
        match (&self.code_mounter, &confinement.scratch) {
            (Some(_), Some(scratch)) => scratch.path.join(SCRATCH_SLOT),
            _ => self.slots_dir.join(id),
        }
    }

    /// Whether `process`'s slot is on its scratch tmpfs ([`Launcher::slot_for`]).
    fn on_scratch(&self, process: &ShimProcess) -> bool {
        (process.confinement.scratch.as_ref()).is_some_and(|scratch| process.slot.starts_with(&scratch.path))
    }

    /// Where the process sees its code.
    pub fn code_path(&self, process: &ShimProcess) -> String {
        self.sandbox.seen_path(&process.slot, "/code")
    }
}

/// A fork's slot on its scratch tmpfs, beside `tmp` and `shm`.
const SCRATCH_SLOT: &str = "code";

/// Where an instance's secret files are kept on the host, seen as
/// `/secrets` inside: on its scratch tmpfs when the server mounts one (so
/// values never reach a disk), else next to its slot. Either goes with the
/// instance.
fn secrets_dir_of(slot: &Path, confinement: &Confinement) -> PathBuf {
    match &confinement.scratch {
        Some(scratch) => scratch.path.join("secrets"),
        None => slot.with_extension("secrets"),
    }
}

/// [`secrets_dir_of`] a started process.
pub fn secrets_dir(process: &ShimProcess) -> PathBuf {
    secrets_dir_of(&process.slot, &process.confinement)
}

/// Writes `/secrets/{secret}/{key}` into an instance's secrets directory:
/// directories 0500 and files 0400, owned by the instance's uid (when it
/// has one of its own), so only it reads them; the mount is read-only.
pub fn write_secret_files(dir: &Path, uid: Option<u32>, files: &[sless_driver::SecretFile]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    for file in files {
        let secret_dir = dir.join(&file.secret);
        if !secret_dir.is_dir() {
            make_owned_dir(&secret_dir, uid)?;
            set_mode(&secret_dir, 0o500)?;
        }
        let path = secret_dir.join(&file.key);
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o400)
            .open(&path)?;
        out.write_all(&file.value)?;
        if let Some(uid) = uid {
            std::os::unix::fs::chown(&path, Some(uid), Some(uid))?;
        }
    }
    Ok(())
}

/// Sandboxed processes run as other users: they must be able to walk down to
/// the data dir (they can list nothing in it: it is 0711 and holds private
/// files 0600).
fn reachable_by_others(data_dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = data_dir.canonicalize()?;
    set_mode(&dir, 0o711)?;
    for ancestor in dir.ancestors().skip(1) {
        let mode = std::fs::metadata(ancestor)?.permissions().mode();
        if mode & 0o001 == 0 {
            anyhow::bail!(
                "SLESS_DATA_DIR {}: sandboxed functions run as unprivileged users and cannot reach it because {} has mode {:o}; \
                 allow others to traverse it (chmod o+x {}) or choose a data dir elsewhere",
                data_dir.display(),
                ancestor.display(),
                mode & 0o777,
                ancestor.display()
            );
        }
    }
    Ok(())
}

/// Makes `dir`, where sandboxes' scratch tmpfs are mounted, a small tmpfs
/// of its own: their mount points then take no inode of the data dir's
/// file system (on ext4 without a journal a `mkdir` there is about 0.1 ms
/// of CPU, more in a burst of them, against 5 us here) and nothing of
/// them reaches a disk. Unmounted with the rest at shutdown, or at the
/// next start after a crash ([`remove_stale_slots`]).
fn mount_scratch_root(dir: &Path) -> anyhow::Result<()> {
    use rustix::mount::{mount, MountFlags};
    mount(
        "sless-scratch",
        dir,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        Some(c"mode=0711,size=64k"),
    )
    .map_err(|e| anyhow::anyhow!("mounting a tmpfs on {} for the sandboxes' scratch: {e}", dir.display()))
}

/// Removes slot directories (named by owner tag) of server processes that
/// are gone.
pub(crate) fn remove_stale_slots(all_slots: &Path) {
    let Ok(entries) = std::fs::read_dir(all_slots) else {
        return;
    };
    for entry in entries.flatten() {
        let alive = super::owner::is_gone(&entry.file_name().to_string_lossy()) == Some(false);
        if !alive {
            // Scratch tmpfs mounts of the dead server's sandboxes first.
            if let Ok(dir) = entry.path().canonicalize() {
                unmount_all_under(&dir);
            }
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Writes a shared library as a new file in place of `path`: a zygote of
/// another server on the same data dir may have the old one mapped, and
/// rewriting that file in place would pull its code from under it.
fn write_replacing(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut new = path.as_os_str().to_owned();
    new.push(format!(".new-{}", std::process::id()));
    std::fs::write(&new, bytes)?;
    std::fs::rename(&new, path)
}

fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Links `from` into `to` as [`link_tree`] does when it holds at most
/// [`SMALL_TREE_FILES`] files and no folders (a handler without
/// dependencies), cheaply enough to do on an async task; false, having
/// linked nothing, for any other tree.
pub fn link_small_tree(from: &Path, to: &Path) -> std::io::Result<bool> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        if !entry.file_type()?.is_file() || names.len() == SMALL_TREE_FILES {
            return Ok(false);
        }
        names.push(entry.file_name());
    }
    for name in names {
        std::fs::hard_link(from.join(&name), to.join(&name))?;
    }
    Ok(true)
}

/// Files that [`link_small_tree`] links at most.
const SMALL_TREE_FILES: usize = 16;

/// Mirrors `from` into `to` with hard links (directories made, symlinks
/// copied): fast, and the instance cannot change the artifact through it
/// because its slot is bound read-only.
pub fn link_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            std::fs::create_dir(&target)?;
            link_tree(&entry.path(), &target)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &target)?;
        } else {
            std::fs::hard_link(entry.path(), &target)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_shim_s_heap_is_three_quarters_of_its_memory_class() {
        let classes = [10, 16, 100, 128, 200, 256, 1000, 1024, 4096, 16384].map(node_memory_class);
        assert_eq!(classes, [16, 16, 64, 128, 128, 256, 512, 1024, 4096, 16384]);
        assert_eq!([128, 256, 4096].map(node_heap_mb), [96, 192, 3072]);
        assert_eq!(node_heap_for(300), 192);
    }

    #[test]
    fn a_library_written_again_leaves_whoever_holds_the_old_one_its_bytes() {
        use std::io::Read;
        let dir = std::env::temp_dir().join(format!("sless-write-replacing-{:016x}", rand::random::<u64>()));
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("sless_fork.node");
        write_replacing(&path, b"old library").unwrap();
        let mut held = std::fs::File::open(&path).unwrap();
        write_replacing(&path, b"new").unwrap();
        let mut text = String::new();
        held.read_to_string(&mut text).unwrap();
        assert_eq!(text, "old library");
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "no temporary file is left");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
