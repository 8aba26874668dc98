//! One build on its own, outside the local driver: what `sless instance
//! build` runs in a build Job of the Kubernetes driver. The same unpacking
//! and dependency install as the local builder ([`crate::builder`]), run
//! without a sandbox of its own (the pod is the sandbox), then the
//! artifact stored in the object store as the local driver shares it
//! (`artifacts/{fingerprint}/{sha256}.tar.gz`).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use sless_api::Runtime;
use sless_driver::{BuildError, Fingerprint};
use tokio::io::AsyncReadExt;

use crate::artifacts::SharedArtifacts;
use crate::builder::{exit_text, install_step, tail, unpack};

/// What to build.
#[derive(Debug, Clone)]
pub struct BuildSpec {
    pub runtime: Runtime,
    pub artifact: Fingerprint,
    pub python: String,
    pub npm: String,
    /// A writable directory; the artifact is made in it.
    pub work_dir: PathBuf,
}

/// A stored build: the tarball's sha256 and the build log.
#[derive(Debug)]
pub struct Published {
    pub digest: String,
    pub log: String,
}

/// Builds `archive` (a zip) and stores the artifact in `store`.
pub async fn build_and_publish(
    spec: &BuildSpec,
    archive: bytes::Bytes,
    store: Arc<dyn object_store::ObjectStore>,
) -> Result<Published, BuildError> {
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
    match install_step(spec.runtime, &dir, &spec.python, &spec.npm) {
        None => log.push_str("no dependencies to install\n"),
        Some((program, args)) => {
            let mut child = tokio::process::Command::new(program)
                .args(&args)
                .current_dir(&dir)
                .env_clear()
                .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                .env("HOME", &spec.work_dir)
                .env("LANG", "C.UTF-8")
                .env("npm_config_cache", spec.work_dir.join(".npm"))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| BuildError::Internal(format!("starting {program}: {e}")))?;
            let mut stdout = child.stdout.take().expect("piped");
            let mut stderr = child.stderr.take().expect("piped");
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let _ = tokio::join!(stdout.read_to_end(&mut out), stderr.read_to_end(&mut err));
            let status = child
                .wait()
                .await
                .map_err(|e| BuildError::Internal(format!("waiting for {program}: {e}")))?;
            log.push_str(&String::from_utf8_lossy(&out));
            log.push_str(&String::from_utf8_lossy(&err));
            if !status.success() {
                return Err(BuildError::Failed {
                    log_tail: format!("{program} {}: {}", exit_text(status), tail(&log)),
                });
            }
        }
    }
    let digest = SharedArtifacts::new(store)
        .publish(&dir, &spec.artifact)
        .await
        .map_err(BuildError::Internal)?;
    Ok(Published { digest, log })
}
