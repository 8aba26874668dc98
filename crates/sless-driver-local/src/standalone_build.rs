//! One build on its own, outside the local driver: what `sless instance
//! build` runs in a build Job of the Kubernetes driver. The same unpacking
//! and dependency install as the local builder ([`crate::builder`]), run
//! without a sandbox of its own (the pod is the sandbox), then the
//! artifact packed as the local driver shares it: a gzipped tarball, which
//! the caller uploads (the pod holds no object-store credentials, only a
//! presigned URL for this one upload).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use sless_api::Runtime;
use sless_driver::{BuildError, Fingerprint};

use crate::builder::{compile_step, compiled, exit_text, install_step, over_the_bound, read_tail, tail, unpack};

/// Where pip and npm install from, passed on from the build's environment.
const INDEX_VARIABLES: [&str; 2] = ["PIP_INDEX_URL", "npm_config_registry"];

/// What to build.
#[derive(Debug, Clone)]
pub struct BuildSpec {
    pub runtime: Runtime,
    pub artifact: Fingerprint,
    pub python: String,
    pub npm: String,
    /// A writable directory; the artifact is made in it.
    pub work_dir: PathBuf,
    /// What the install may leave in the artifact's directory, in bytes
    /// (the server's `SLESS_MAX_BUILD_MB`); None: no bound but the pod's.
    pub max_bytes: Option<u64>,
}

/// A finished build: the artifact's tarball (a file in the work
/// directory), its sha256 and size, and the build log.
#[derive(Debug)]
pub struct Packed {
    pub tarball: PathBuf,
    pub bytes: u64,
    pub digest: String,
    pub log: String,
}

/// Builds `archive` (a zip) into the artifact's tarball.
pub async fn build_tarball(spec: &BuildSpec, archive: bytes::Bytes) -> Result<Packed, BuildError> {
    let dir = spec.work_dir.join(spec.artifact.as_str());
    std::fs::create_dir_all(&dir).map_err(|e| BuildError::Internal(format!("creating {}: {e}", dir.display())))?;
    let target = dir.clone();
    let files = tokio::task::spawn_blocking(move || unpack(&archive, &target, None))
        .await
        .map_err(|e| BuildError::Internal(e.to_string()))?
        .map_err(|e| BuildError::Failed {
            log_tail: format!("unpacking the archive: {e}"),
        })?;
    let mut log = format!("unpacked {files} files\n");
    let install = install_step(spec.runtime, &dir, &spec.python, &spec.npm);
    match install {
        None => log.push_str("no dependencies to install\n"),
        Some((program, args)) => {
            let status = run_step(spec, &dir, program, &args, &mut log).await?;
            if !status.success() {
                return Err(BuildError::Failed {
                    log_tail: format!("{program} {}: {}", exit_text(status), tail(&log)),
                });
            }
            if let Some(max_bytes) = spec.max_bytes {
                let target = dir.clone();
                let written = tokio::task::spawn_blocking(move || crate::artifacts::bytes_under(&target))
                    .await
                    .map_err(|e| BuildError::Internal(e.to_string()))?
                    .map_err(|e| BuildError::Internal(format!("measuring the build's directory: {e}")))?;
                if written > max_bytes {
                    // The pod's volume bounds the install while it runs
                    // (more loosely: the installers' downloads are there
                    // too); what the artifact keeps is bounded here.
                    log.push_str(&over_the_bound(max_bytes));
                    return Err(BuildError::Failed { log_tail: tail(&log) });
                }
            }
        }
    }
    if let Some((program, args)) = compile_step(spec.runtime, &spec.python) {
        let status = run_step(spec, &dir, program, &args, &mut log).await?;
        compiled((!status.success()).then(|| exit_text(status)), &mut log);
    }
    let tarball = spec.work_dir.join(format!("{}.tar.gz", spec.artifact));
    let to = tarball.clone();
    let (digest, bytes) = tokio::task::spawn_blocking(move || crate::artifacts::pack(&dir, &to))
        .await
        .map_err(|e| BuildError::Internal(e.to_string()))?
        .map_err(|e| BuildError::Internal(format!("packing the artifact: {e}")))?;
    Ok(Packed {
        tarball,
        bytes,
        digest,
        log,
    })
}

/// Runs one step of the build in `dir`, its output added to `log`.
async fn run_step(
    spec: &BuildSpec,
    dir: &Path,
    program: &str,
    args: &[&str],
    log: &mut String,
) -> Result<std::process::ExitStatus, BuildError> {
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", &spec.work_dir)
        .env("LANG", "C.UTF-8")
        .env("npm_config_cache", spec.work_dir.join(".npm"))
        // The index and registry the server gave the build, if any.
        .envs(
            INDEX_VARIABLES
                .iter()
                .filter_map(|name| Some((*name, std::env::var_os(name)?))),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| BuildError::Internal(format!("starting {program}: {e}")))?;
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let (out, err) = tokio::join!(read_tail(stdout), read_tail(stderr));
    let status = child
        .wait()
        .await
        .map_err(|e| BuildError::Internal(format!("waiting for {program}: {e}")))?;
    log.push_str(&String::from_utf8_lossy(&out));
    log.push_str(&String::from_utf8_lossy(&err));
    Ok(status)
}
