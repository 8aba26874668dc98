//! Builds an uploaded archive into an artifact directory: unpack, then install
//! dependencies (`pip install --target .deps` for Python, `npm install
//! --omit=dev` for Node) inside the sandbox as an unprivileged user, within
//! the function's build timeout. Artifacts are content-addressed by code and
//! shim version, so a rebuild of the same code is free.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sless_api::Runtime;
use tokio::io::AsyncReadExt;

use super::cgroup::GroupLimits;
use super::confine::{Confinement, Scratch};
use super::launcher::Launcher;
use super::sandbox::{make_owned_dir, Limits, Spec};
use super::scrap::Scrap;
use sless_driver::{BuildError, BuildJob, Built, Fingerprint};

/// Lines of the build log kept for `status.message`.
const LOG_TAIL_LINES: usize = 20;

const BUILD_LIMITS: Limits = Limits {
    memory_bytes: 4 << 30,
    processes: 512,
    cpu_seconds: 3600,
    open_files: 4096,
    tmp_bytes: 1 << 30,
};

/// The control group of a build: its /tmp (pip's and npm's caches) counts
/// towards the memory.
const BUILD_GROUP: GroupLimits = GroupLimits {
    memory_bytes: 4 << 30,
    processes: 512,
    cpus: 1.0,
};

/// The start of the name of a server's [`Builder::retired_dir`], before its owner tag.
const RETIRED: &str = ".retired-";

pub struct Builder {
    pub artifacts_dir: PathBuf,
    launcher: Arc<Launcher>,
    python: String,
    npm: String,
    /// Added to each build's environment.
    env: Vec<(String, String)>,
    /// Most a build that installs writes into its directory.
    max_build_bytes: u64,
}

impl Builder {
    pub fn new(
        artifacts_dir: PathBuf,
        launcher: Arc<Launcher>,
        python: String,
        npm: String,
        env: Vec<(String, String)>,
        max_build_bytes: u64,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(&artifacts_dir)?;
        remove_leftovers(&artifacts_dir)?;
        Ok(Builder {
            artifacts_dir,
            launcher,
            python,
            npm,
            env,
            max_build_bytes,
        })
    }

    pub fn artifact_dir(&self, artifact: &Fingerprint) -> PathBuf {
        self.artifacts_dir.join(artifact.as_str())
    }

    /// Where this server puts removed artifacts that running instances
    /// still use (code_mount.rs); what a server that is gone left there is
    /// removed at start.
    pub fn retired_dir(&self) -> PathBuf {
        self.artifacts_dir.join(format!("{RETIRED}{}", super::owner::own_tag()))
    }

    pub async fn build(&self, job: BuildJob, artifact: Fingerprint) -> Result<Built, BuildError> {
        let dir = self.artifact_dir(&artifact);
        if dir.is_dir() {
            return built(artifact, dir, "same code built before; reusing the artifact".into()).await;
        }
        let uid = self.launcher.sandbox.allocate_uid();
        // Removed unless it becomes the artifact, however the build ends.
        let work = Scrap::new(
            self.artifacts_dir
                .join(format!(".build-{artifact}-{:08x}", rand::random::<u32>())),
        );
        make_owned_dir(work.path(), uid).map_err(|e| BuildError::Internal(format!("creating build dir: {e}")))?;
        let log = self.build_in(&job, work.path(), uid).await?;
        // The same code built at the same time by another function: its
        // artifact is this one.
        if let Err(e) = std::fs::rename(work.path(), &dir) {
            if !dir.is_dir() {
                return Err(BuildError::Internal(format!("saving artifact: {e}")));
            }
        }
        built(artifact, dir, tail(&log)).await
    }

    async fn build_in(&self, job: &BuildJob, work: &Path, uid: Option<u32>) -> Result<String, BuildError> {
        // Installing runs the code's own scripts (a package's setup.py,
        // npm's install scripts), which could write until the server's disk
        // is full: such a build runs in a sized tmpfs, copied to `work`
        // once the install has ended. One that installs nothing writes the
        // unpacked archive (bounded by the upload rules) and bytecode.
        let deadline = tokio::time::Instant::now() + job.timeout;
        let space = if installs(job) {
            self.launcher
                .build_space(uid, self.max_build_bytes)
                .map_err(BuildError::Internal)?
        } else {
            None
        };
        let dir = space.as_ref().map_or(work, |space| space.path.as_path());
        let archive = job.archive.clone();
        let target = dir.to_path_buf();
        let files = tokio::task::spawn_blocking(move || unpack(&archive, &target, uid))
            .await
            .map_err(|e| BuildError::Internal(e.to_string()))?
            .map_err(|e| BuildError::Failed {
                log_tail: format!("unpacking the archive: {e}"),
            })?;
        let mut log = format!("unpacked {files} files\n");
        let install = install_step(job.runtime, dir, &self.python, &self.npm);
        if install.is_none() {
            log.push_str("no dependencies to install\n");
        }
        let compile = compile_step(job.runtime, &self.python);
        if install.is_none() && compile.is_none() {
            if let Some(space) = space {
                self.copy_out(space, work, uid, deadline, job, &log).await?;
            }
            return Ok(log);
        }
        // A network namespace like an instance's: the package registries
        // are on the internet, the host and private ranges are not. A
        // build that installs nothing reaches nothing.
        let confinement = self
            .launcher
            .confine(uid, BUILD_GROUP, BUILD_LIMITS.tmp_bytes, install.is_some())
            .await
            .map_err(|e| BuildError::Internal(format!("confining the build: {e}")))?;
        // A build's CPU is its namespace's, as its instances' is.
        if let Some(group) = &confinement.cgroup {
            group
                .join_namespace(&job.key.namespace)
                .map_err(|e| BuildError::Internal(format!("confining the build: {e}")))?;
        }
        if let Some((program, args)) = install {
            let at = Steps {
                work: dir,
                confinement: &confinement,
                deadline,
                timeout: job.timeout,
            };
            let status = self.run_step(program, args, &at, &mut log).await?;
            if space.as_ref().is_some_and(Scratch::full) {
                log.push_str(&over_the_bound(self.max_build_bytes));
                if status.success() {
                    // Whatever it left out would be missed at run time.
                    return Err(BuildError::Failed { log_tail: tail(&log) });
                }
            }
            if !status.success() {
                return Err(BuildError::Failed {
                    log_tail: format!("{program} {}: {}", exit_text(status), tail(&log)),
                });
            }
        }
        if let Some(space) = space {
            self.copy_out(space, work, uid, deadline, job, &log).await?;
        }
        let at = Steps {
            work,
            confinement: &confinement,
            deadline,
            timeout: job.timeout,
        };
        if let Some((program, args)) = compile {
            let stopped = match self.compile_in_fork(&at, &mut log).await? {
                Some(stopped) => stopped,
                None => {
                    let status = self.run_step(program, args, &at, &mut log).await?;
                    (!status.success()).then(|| exit_text(status))
                }
            };
            compiled(stopped, &mut log);
        }
        Ok(log)
    }

    /// Copies the build's directory from its tmpfs to `work` on disk and
    /// unmounts the tmpfs.
    async fn copy_out(
        &self,
        space: Scratch,
        work: &Path,
        uid: Option<u32>,
        deadline: tokio::time::Instant,
        job: &BuildJob,
        log: &str,
    ) -> Result<(), BuildError> {
        copy_tree(&space.path, work, uid, deadline).await.map_err(|e| match e {
            None => BuildError::TimedOut {
                after: job.timeout,
                log_tail: tail(log),
            },
            Some(e) => BuildError::Internal(format!("copying the build to disk: {e}")),
        })
    }

    /// Runs the compile step (`PYTHON_COMPILE`) in a fork of the Python
    /// zygote, which has the interpreter started and `py_compile` imported:
    /// a Python build without dependencies took about 50 ms as a new
    /// `python3.11` behind bubblewrap, most of a deploy. How it stopped
    /// (None: it ran to its end); None, having run nothing, without the
    /// zygote or when its fork could not confine itself (the step then
    /// runs as a new interpreter).
    async fn compile_in_fork(&self, at: &Steps<'_>, log: &mut String) -> Result<Option<Option<String>>, BuildError> {
        let spec = self.step_spec(&self.python, vec![], at.work);
        let ran = self
            .launcher
            .run_python(&spec, at.confinement, BUILD_LIMITS, PYTHON_COMPILE);
        let ran = match tokio::time::timeout_at(at.deadline, ran).await {
            Err(_) => {
                return Err(BuildError::TimedOut {
                    after: at.timeout,
                    log_tail: tail(log),
                })
            }
            Ok(None) => return Ok(None),
            Ok(Some(Err(error))) => {
                tracing::warn!(%error, "compiling in a fork of the Python zygote failed; compiling with a new interpreter");
                return Ok(None);
            }
            Ok(Some(Ok(ran))) => ran,
        };
        tracing::debug!(exit = ?ran.exit, "a build step ran in a fork of the Python zygote");
        log.push_str(&String::from_utf8_lossy(&ran.output));
        Ok(Some(match ran.exit {
            Some(0) => None,
            Some(code) => Some(format!("exited with {code}")),
            None => Some("was killed".to_string()),
        }))
    }

    /// The sandbox of a build step running `program` in the code's directory.
    fn step_spec<'a>(&self, program: &'a str, args: Vec<&str>, work: &Path) -> Spec<'a> {
        Spec {
            program,
            args: args.into_iter().map(String::from).collect(),
            ro: vec![],
            rw: vec![(work.to_path_buf(), "/build".into())],
            chdir: self.launcher.sandbox.seen_path(work, "/build"),
            env: std::iter::once(("npm_config_cache".to_string(), "/tmp/.npm".to_string()))
                .chain(self.env.iter().cloned())
                .collect(),
            share_net: true,
        }
    }

    /// Runs one step of a build in the sandbox, in the code's directory,
    /// its output added to `log`; past the deadline the build has timed out.
    async fn run_step(
        &self,
        program: &str,
        args: Vec<&str>,
        at: &Steps<'_>,
        log: &mut String,
    ) -> Result<std::process::ExitStatus, BuildError> {
        let spec = self.step_spec(program, args, at.work);
        let mut child = self
            .launcher
            .sandbox
            .command(&spec, at.confinement, BUILD_LIMITS)
            .stdin(std::process::Stdio::null())
            .spawn()
            .map_err(|e| BuildError::Internal(format!("starting {program}: {e}")))?;
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let collect = async {
            let (out, err) = tokio::join!(read_tail(stdout), read_tail(stderr));
            let status = child.wait().await;
            (out, err, status)
        };
        match tokio::time::timeout_at(at.deadline, collect).await {
            Ok((out, err, status)) => {
                log.push_str(&String::from_utf8_lossy(&out));
                log.push_str(&String::from_utf8_lossy(&err));
                status.map_err(|e| BuildError::Internal(format!("waiting for {program}: {e}")))
            }
            Err(_) => Err(BuildError::TimedOut {
                after: at.timeout,
                log_tail: tail(log),
            }),
        }
    }
}

/// The build of `artifact`, kept in `dir`, measured.
async fn built(artifact: Fingerprint, dir: PathBuf, log_tail: String) -> Result<Built, BuildError> {
    let bytes = tokio::task::spawn_blocking(move || crate::artifacts::bytes_under(&dir))
        .await
        .map_err(|e| BuildError::Internal(e.to_string()))?
        .map_err(|e| BuildError::Internal(format!("measuring the artifact: {e}")))?;
    Ok(Built {
        artifact,
        digest: None,
        log_tail,
        bytes,
    })
}

/// Whether the build runs an install step (the code holds the runtime's
/// dependency file, `install_step`'s test, read from the archive).
fn installs(job: &BuildJob) -> bool {
    let file = match job.runtime {
        Runtime::Python311 => "requirements.txt",
        Runtime::Nodejs20 => "package.json",
    };
    zip::ZipArchive::new(std::io::Cursor::new(&job.archive[..]))
        .is_ok_and(|archive| archive.index_for_name(file).is_some())
}

/// Copies a build's directory `from` (a tmpfs) into `to` on disk, as the
/// build's uid (what the build left there is its code, symbolic links
/// copied as links: done as root, a link swapped in by a process the build
/// left behind could make it write anywhere). Err(None): past `deadline`.
async fn copy_tree(
    from: &Path,
    to: &Path,
    uid: Option<u32>,
    deadline: tokio::time::Instant,
) -> Result<(), Option<String>> {
    let mut copy = tokio::process::Command::new("cp");
    copy.arg("-a")
        .arg("--")
        .arg(from.join("."))
        .arg(to)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    if let Some(uid) = uid {
        copy.uid(uid).gid(uid);
    }
    let copied = copy.output();
    let output = tokio::time::timeout_at(deadline, copied)
        .await
        .map_err(|_| None)?
        .map_err(|e| Some(format!("running cp: {e}")))?;
    if output.status.success() {
        return Ok(());
    }
    let error = String::from_utf8_lossy(&output.stderr[..output.stderr.len().min(2000)]).into_owned();
    Err(Some(format!("cp {}: {}", exit_text(output.status), error.trim())))
}

/// Where a build's steps run, and until when.
struct Steps<'a> {
    work: &'a Path,
    confinement: &'a Confinement,
    deadline: tokio::time::Instant,
    /// The build's timeout, which the deadline ends.
    timeout: std::time::Duration,
}

/// Compiles the code's own Python modules to bytecode beside them
/// (`__pycache__`), so that an instance's import reads the bytecode instead
/// of compiling the source at every cold start: about 8 ms of CPU for a
/// module of 1 500 lines, against 0.2 ms to read it back. Not `.deps`, which
/// pip compiled as it installed. Unchecked hash-based files: the code of an
/// artifact never changes, and they stay valid whatever times a copy of the
/// artifact gives its files. A module that does not compile stays source
/// only and is named in the log (at most ten, each line cut at 300
/// characters; the last line, which the function's status shows, names the
/// first three): importing it fails as it would have, and a file that is
/// never imported (a script, Python 2 code) does not fail the build. Run
/// isolated (`-I`), so the code's own modules cannot stand in for the
/// standard library's.
pub(crate) const PYTHON_COMPILE: &str = r#"import os, py_compile
mode = py_compile.PycInvalidationMode.UNCHECKED_HASH
compiled, failed = 0, []
for root, dirs, files in os.walk("."):
    dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not (root == "." and d == ".deps"))
    for name in sorted(files):
        if name.endswith(".py"):
            path = os.path.join(root, name)[2:]
            try:
                py_compile.compile(path, doraise=True, invalidation_mode=mode)
                compiled += 1
            except Exception as exc:
                failed.append((path, " ".join(str(exc).split())))
for path, why in failed[:10]:
    print(f"not compiled: {path}: {why}"[:300])
summary = f"compiled {compiled} Python module{'' if compiled == 1 else 's'} to bytecode"
if failed:
    names = ", ".join(path for path, _ in failed[:3]) + (", ..." if len(failed) > 3 else "")
    summary += f"; not compiled (importing fails): {names}"[:200]
print(summary)
"#;

/// The step after the install, for Python: its modules compiled
/// (`PYTHON_COMPILE`). The same for the local builder and `sless instance build`.
pub(crate) fn compile_step(runtime: Runtime, python: &str) -> Option<(&str, Vec<&'static str>)> {
    (runtime == Runtime::Python311).then(|| (python, vec!["-I", "-c", PYTHON_COMPILE]))
}

/// Notes in the log how the compile step stopped (None: it ran to its
/// end; else how it ended, [`exit_text`]). It never fails a build: a
/// module it did not compile is compiled when imported, as before.
pub(crate) fn compiled(stopped: Option<String>, log: &mut String) {
    if let Some(how) = stopped {
        log.push_str(&format!(
            "compiling to bytecode stopped ({how}); the modules it did not compile are compiled when imported\n"
        ));
    }
}

/// The command that installs the dependencies of the code in `dir`, run
/// there (None: nothing to install). The same for the local builder and
/// `sless instance build`.
pub(crate) fn install_step<'a>(
    runtime: Runtime,
    dir: &Path,
    python: &'a str,
    npm: &'a str,
) -> Option<(&'a str, Vec<&'static str>)> {
    match runtime {
        Runtime::Python311 if dir.join("requirements.txt").is_file() => Some((
            python,
            vec![
                "-m",
                "pip",
                "install",
                "--no-input",
                "--disable-pip-version-check",
                "--no-cache-dir",
                "--break-system-packages",
                "--target",
                ".deps",
                "-r",
                "requirements.txt",
            ],
        )),
        Runtime::Nodejs20 if dir.join("package.json").is_file() => Some((
            npm,
            vec![
                "install",
                "--omit=dev",
                "--no-audit",
                "--no-fund",
                "--no-update-notifier",
            ],
        )),
        _ => None,
    }
}

/// The log's line for a build that wrote `max_bytes` into its directory.
pub(crate) fn over_the_bound(max_bytes: u64) -> String {
    format!(
        "the build wrote as much into the function's directory as it may: {} MiB (the server's SLESS_MAX_BUILD_MB)\n",
        max_bytes >> 20
    )
}

pub(crate) fn exit_text(status: std::process::ExitStatus) -> String {
    match status.code() {
        Some(code) => format!("exited with {code}"),
        None => "was killed".to_string(),
    }
}

/// The most bytes of a build step's stdout, and of its stderr, that a
/// build keeps (the last ones): the code's build decides how much a step
/// writes (a warning per line of a module, say), and only the log's tail
/// is kept.
const STEP_OUTPUT_BYTES: usize = 256 << 10;

/// Reads `from` to its end, keeping its last [`STEP_OUTPUT_BYTES`].
pub(crate) async fn read_tail(mut from: impl tokio::io::AsyncRead + Unpin) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = vec![0u8; 16 << 10];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => kept.extend_from_slice(&buf[..n]),
        }
        if kept.len() > 2 * STEP_OUTPUT_BYTES {
            kept.drain(..kept.len() - STEP_OUTPUT_BYTES);
        }
    }
    kept.drain(..kept.len().saturating_sub(STEP_OUTPUT_BYTES));
    kept
}

/// The last lines of a log.
pub fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

/// Unpacks a checked archive (the upload rules ran already) into `dir`.
pub(crate) fn unpack(zip_bytes: &[u8], dir: &Path, owner: Option<u32>) -> std::io::Result<usize> {
    let own = |path: &Path| match owner {
        Some(uid) => std::os::unix::fs::chown(path, Some(uid), Some(uid)),
        None => Ok(()),
    };
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip_bytes))?;
    let mut files = 0;
    for index in 0..archive.len() {
        let mut entry = archive.by_index(index)?;
        let Some(relative) = entry.enclosed_name() else {
            return Err(std::io::Error::other(format!(
                "entry {:?} escapes the directory",
                entry.name()
            )));
        };
        let path = dir.join(relative);
        if entry.is_dir() {
            make_dirs(dir, &path, &own)?;
            continue;
        }
        if let Some(parent) = path.parent() {
            make_dirs(dir, parent, &own)?;
        }
        // Streamed to disk: an entry never sits in memory whole.
        std::io::copy(&mut entry, &mut std::fs::File::create(&path)?)?;
        own(&path)?;
        files += 1;
    }
    Ok(files)
}

/// Creates `path` and its missing parents below `root`, each owned as `own` says.
fn make_dirs(root: &Path, path: &Path, own: &dyn Fn(&Path) -> std::io::Result<()>) -> std::io::Result<()> {
    if path == root || path.is_dir() {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        make_dirs(root, parent, own)?;
    }
    std::fs::create_dir(path)?;
    own(path)
}

/// Removes the leftovers of builds and fetches interrupted by a crash
/// from `artifacts_dir`.
fn remove_leftovers(artifacts_dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(artifacts_dir)?.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let retired_by_gone = name
            .strip_prefix(RETIRED)
            .is_some_and(|owner| super::owner::is_gone(owner) != Some(false));
        if [".build-", ".fetch-", ".pack-"].iter().any(|p| name.starts_with(p)) || retired_by_gone {
            // A fetch's tarball, or one being stored, is a file.
            let _ = std::fs::remove_dir_all(entry.path()).or_else(|_| std::fs::remove_file(entry.path()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a crash left of builds and fetches goes at the start (a
    /// fetch's directory and the tarball it was coming as, a tarball being
    /// stored); artifacts stay.
    #[test]
    fn a_crashs_leftovers_go_and_artifacts_stay() {
        let root = std::env::temp_dir().join(format!("sless-leftovers-{:016x}", rand::random::<u64>()));
        for dir in [".build-f00d-0000abcd", ".fetch-0000abcd", "f00d"] {
            std::fs::create_dir_all(root.join(dir).join("pkg")).unwrap();
        }
        std::fs::write(root.join(".fetch-0000abcd.tar.gz"), b"part of a tarball").unwrap();
        std::fs::write(root.join(".pack-0000abcd.tar.gz"), b"part of a tarball").unwrap();
        std::fs::write(root.join("f00d.sha256"), "0".repeat(64)).unwrap();
        remove_leftovers(&root).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(left, ["f00d", "f00d.sha256"]);
    }

    /// A build's directory is copied to disk as the build's uid, never as
    /// the server's root: a file the uid cannot read (as a link a process
    /// the build left behind swaps in could point at) is not copied.
    #[tokio::test]
    async fn a_build_is_copied_to_disk_as_its_own_uid() {
        use std::os::unix::fs::PermissionsExt;
        assert!(
            rustix::process::geteuid().is_root(),
            "copying as another uid needs root"
        );
        const UID: u32 = 65534;
        let root = std::env::temp_dir().join(format!("sless-copy-out-{:016x}", rand::random::<u64>()));
        let (from, to) = (root.join("space"), root.join("work"));
        make_owned_dir(&from, Some(UID)).unwrap();
        make_owned_dir(&to, Some(UID)).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(from.join("handler.py"), "def handle(e, c):\n    return 1\n").unwrap();
        std::os::unix::fs::chown(from.join("handler.py"), Some(UID), Some(UID)).unwrap();
        std::os::unix::fs::symlink("handler.py", from.join("link.py")).unwrap();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        copy_tree(&from, &to, Some(UID), deadline).await.unwrap();
        assert_eq!(
            std::fs::read_to_string(to.join("handler.py")).unwrap(),
            "def handle(e, c):\n    return 1\n"
        );
        assert!(
            std::fs::symlink_metadata(to.join("link.py")).unwrap().is_symlink(),
            "a link is copied as a link"
        );

        // Root's own file, which only root reads.
        std::fs::write(from.join("secret"), "root's").unwrap();
        std::fs::set_permissions(from.join("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
        let refused = copy_tree(&from, &to, Some(UID), deadline).await;
        assert!(
            matches!(&refused, Err(Some(e)) if e.contains("Permission denied")),
            "{refused:?}"
        );
        assert!(!to.join("secret").exists());
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// A step that writes without end costs the server a bounded buffer,
    /// and its log keeps the end of what it wrote.
    #[tokio::test]
    async fn a_step_s_output_is_kept_to_its_last_bytes() {
        let mut long = b"SyntaxWarning: \"is\" with a literal\n".repeat(100_000);
        long.extend_from_slice(b"compiled 1 Python module to bytecode\n");
        let kept = read_tail(long.as_slice()).await;
        assert_eq!(kept.len(), STEP_OUTPUT_BYTES);
        assert!(kept.ends_with(b"compiled 1 Python module to bytecode\n"));
        assert_eq!(read_tail(&b"short\n"[..]).await, b"short\n");
    }
}
