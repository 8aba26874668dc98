//! `sless instance build`: the command of a build Job (Kubernetes driver,
//! artifact mode). It reads the uploaded archive from the object store,
//! checks it against its sha256, installs the dependencies as the local
//! builder does, stores the artifact tarball, and writes the tarball's
//! sha256 as the container's termination message, where the driver reads
//! it. On failure the log's tail goes to stderr (the Job's
//! `FallbackToLogsOnError` makes it the termination message) and the exit
//! code is 1.

use std::path::PathBuf;

use anyhow::Context;
use object_store::ObjectStoreExt;
use sha2::{Digest, Sha256};
use sless_driver::{BuildError, Fingerprint};
use sless_driver_local::standalone_build::{build_and_publish, BuildSpec};

use super::InstanceConfig;

/// `SLESS_BUILD_*`: what to build (set by the driver's build Job).
#[derive(clap::Args, Debug, Clone)]
pub struct BuildConfig {
    #[arg(long, env = "SLESS_BUILD_RUNTIME")]
    pub build_runtime: Option<String>,
    /// The object-store key of the uploaded zip.
    #[arg(long, env = "SLESS_BUILD_ARCHIVE")]
    pub build_archive: Option<String>,
    /// The zip's sha256.
    #[arg(long, env = "SLESS_BUILD_CODE_HASH")]
    pub build_code_hash: Option<String>,
    /// The fingerprint the artifact is stored under.
    #[arg(long, env = "SLESS_BUILD_ARTIFACT")]
    pub build_artifact: Option<String>,
    /// Where the artifact's sha256 is written.
    #[arg(long, env = "SLESS_BUILD_TERMINATION_LOG", default_value = "/dev/termination-log")]
    pub termination_log: PathBuf,
    #[arg(long, env = "SLESS_NPM", default_value = "/usr/bin/npm")]
    pub npm: String,
}

/// Runs the build; the exit code (0 built, 1 the build failed).
pub async fn run(config: &InstanceConfig, build: &BuildConfig) -> anyhow::Result<i32> {
    let runtime = InstanceConfig {
        runtime: build.build_runtime.clone(),
        ..config.clone()
    }
    .runtime()
    .context("SLESS_BUILD_RUNTIME")?;
    let archive_key = build
        .build_archive
        .as_deref()
        .context("SLESS_BUILD_ARCHIVE is not set")?;
    let code_hash = build
        .build_code_hash
        .as_deref()
        .context("SLESS_BUILD_CODE_HASH is not set")?;
    let artifact = build
        .build_artifact
        .as_deref()
        .context("SLESS_BUILD_ARTIFACT is not set")?;
    let store = sless_server::blobs::open(&config.blob_settings()?).await?;
    let archive = store
        .get(&object_store::path::Path::from(archive_key))
        .await
        .with_context(|| format!("reading the archive {archive_key}"))?
        .bytes()
        .await
        .with_context(|| format!("reading the archive {archive_key}"))?;
    let actual = hex::encode(Sha256::digest(&archive));
    if actual != code_hash {
        anyhow::bail!("the archive {archive_key} has sha256 {actual}, not {code_hash}");
    }
    let spec = BuildSpec {
        runtime,
        artifact: Fingerprint::from_stored(artifact),
        python: config.python.clone(),
        npm: build.npm.clone(),
        work_dir: config.work_dir.join("build"),
    };
    match build_and_publish(&spec, archive, store).await {
        Ok(published) => {
            print!("{}", published.log);
            std::fs::write(&build.termination_log, &published.digest)
                .with_context(|| format!("writing {}", build.termination_log.display()))?;
            tracing::info!(artifact, digest = %published.digest, "artifact built and stored");
            Ok(0)
        }
        Err(BuildError::Failed { log_tail }) | Err(BuildError::TimedOut { log_tail, .. }) => {
            eprintln!("{log_tail}");
            Ok(1)
        }
        Err(BuildError::Internal(error)) => anyhow::bail!("the build could not run: {error}"),
    }
}
