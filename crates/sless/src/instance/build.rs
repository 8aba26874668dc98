//! `sless instance build`: the command of a build Job (Kubernetes driver,
//! artifact mode). It holds no object-store credentials: the server gives
//! it two presigned URLs for this build alone, one to read the uploaded
//! archive and one to write the artifact tarball to a staging key. It
//! checks the archive against its sha256, installs the dependencies as the
//! local builder does, uploads the tarball, and writes the tarball's sha256
//! as the container's termination message; the server hashes the upload
//! itself before it accepts it as the artifact. On failure the log's tail
//! goes to stderr (the Job's `FallbackToLogsOnError` makes it the
//! termination message) and the exit code is 1.

use std::path::PathBuf;

use anyhow::Context;
use sha2::{Digest, Sha256};
use sless_driver::{BuildError, Fingerprint};
use sless_driver_local::standalone_build::{build_tarball, BuildSpec};

use super::InstanceConfig;

/// `SLESS_BUILD_*`: what to build (set by the driver's build Job).
#[derive(clap::Args, Debug, Clone)]
pub struct BuildConfig {
    #[arg(long, env = "SLESS_BUILD_RUNTIME")]
    pub build_runtime: Option<String>,
    /// A presigned URL to GET the uploaded zip from.
    #[arg(long, env = "SLESS_BUILD_ARCHIVE_URL", hide_env_values = true)]
    pub build_archive_url: Option<String>,
    /// A presigned URL to PUT the artifact tarball to.
    #[arg(long, env = "SLESS_BUILD_UPLOAD_URL", hide_env_values = true)]
    pub build_upload_url: Option<String>,
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
    /// What the install may leave in the artifact's directory, in MiB
    /// (the server's `SLESS_MAX_BUILD_MB`).
    #[arg(long, env = "SLESS_BUILD_MAX_MB")]
    pub build_max_mb: Option<u64>,
}

/// Runs the build; the exit code (0 built, 1 the build failed).
pub async fn run(config: &InstanceConfig, build: &BuildConfig) -> anyhow::Result<i32> {
    let runtime = InstanceConfig {
        runtime: build.build_runtime.clone(),
        ..config.clone()
    }
    .runtime()
    .context("SLESS_BUILD_RUNTIME")?;
    let archive_url = build
        .build_archive_url
        .as_deref()
        .context("SLESS_BUILD_ARCHIVE_URL is not set")?;
    let upload_url = build
        .build_upload_url
        .as_deref()
        .context("SLESS_BUILD_UPLOAD_URL is not set")?;
    let code_hash = build
        .build_code_hash
        .as_deref()
        .context("SLESS_BUILD_CODE_HASH is not set")?;
    let artifact = build
        .build_artifact
        .as_deref()
        .context("SLESS_BUILD_ARTIFACT is not set")?;
    let http = reqwest::Client::new();
    let archive = transfer(http.get(archive_url), "reading the archive")
        .await?
        .bytes()
        .await
        .context("reading the archive")?;
    let actual = hex::encode(Sha256::digest(&archive));
    if actual != code_hash {
        anyhow::bail!("the archive has sha256 {actual}, not {code_hash}");
    }
    let spec = BuildSpec {
        runtime,
        artifact: Fingerprint::from_stored(artifact),
        python: config.python.clone(),
        npm: build.npm.clone(),
        work_dir: config.work_dir.join("build"),
        max_bytes: build.build_max_mb.map(|mb| mb << 20),
    };
    match build_tarball(&spec, archive).await {
        Ok(packed) => {
            print!("{}", packed.log);
            // Streamed from its file, as long as it says (a presigned PUT
            // takes no chunked body).
            let tarball = tokio::fs::File::open(&packed.tarball)
                .await
                .context("reading the packed artifact")?;
            let upload = http
                .put(upload_url)
                .header(reqwest::header::CONTENT_LENGTH, packed.bytes)
                .body(tarball);
            transfer(upload, "uploading the artifact").await?;
            std::fs::write(&build.termination_log, &packed.digest)
                .with_context(|| format!("writing {}", build.termination_log.display()))?;
            tracing::info!(artifact, digest = %packed.digest, "artifact built and uploaded");
            Ok(0)
        }
        Err(BuildError::Failed { log_tail }) | Err(BuildError::TimedOut { log_tail, .. }) => {
            eprintln!("{log_tail}");
            Ok(1)
        }
        Err(BuildError::Internal(error)) => anyhow::bail!("the build could not run: {error}"),
    }
}

/// Sends `request`; an answer other than 2xx is an error naming `what`
/// with the status and the start of the body (never the URL, which is a
/// credential while it lasts).
async fn transfer(request: reqwest::RequestBuilder, what: &str) -> anyhow::Result<reqwest::Response> {
    let response = request
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{what}: {}", e.without_url()))?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let body = response.text().await.unwrap_or_default();
    let start: String = body.chars().take(300).collect();
    anyhow::bail!("{what}: the object store answered {status}: {start}")
}
