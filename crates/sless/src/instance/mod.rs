//! `sless instance`: one function instance in a pod of the Kubernetes
//! driver. `fetch` (the pod's init container, which alone holds the object
//! store's credentials) fetches the artifact and checks its sha256;
//! `serve` starts the shim, loads the handler and serves the frame
//! protocol (runtimes/PROTOCOL.md, "Over TCP") to the gateways, with
//! `GET /ready` answering 200 only while the handler is loaded. Without an
//! action it does both. `build` is a build Job's command: the dependency
//! install of the local builder, the artifact stored in the object store. Settings come from `SLESS_INSTANCE_*` (set by the
//! driver's pod builder) and the object store's `SLESS_BLOB_URL` /
//! `SLESS_S3_*`. `generic` is a warm pool's instance: the shim started
//! before it knows its function, then specialized once (`generic.rs`).

mod build;
mod generic;
mod ready;
mod serve;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use sless_api::Runtime;

/// `sless instance [fetch|serve]`.
#[derive(clap::Args, Debug)]
pub struct InstanceArgs {
    #[command(subcommand)]
    action: Option<Action>,
    #[command(flatten)]
    config: InstanceConfig,
    #[command(flatten)]
    build: build::BuildConfig,
}

#[derive(clap::Subcommand, Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// Fetch the artifact into the code directory and check its sha256.
    Fetch,
    /// Start the shim on the code directory and serve frames over TCP.
    Serve,
    /// Build an uploaded archive into an artifact in the object store (a build Job).
    Build,
    /// A generic instance of a warm pool: the shim started, waiting for
    /// one `POST /specialize` (with the pool's token) naming its function.
    Generic,
}

#[derive(clap::Args, Debug, Clone)]
pub struct InstanceConfig {
    /// Where the artifact is (or is unpacked to); it must not exist before a fetch.
    #[arg(long, env = "SLESS_INSTANCE_CODE_DIR", default_value = "/code/app")]
    pub code_dir: PathBuf,
    /// The artifact's fingerprint (fetch).
    #[arg(long, env = "SLESS_INSTANCE_ARTIFACT")]
    pub artifact: Option<String>,
    /// The sha256 its tarball must have (fetch).
    #[arg(long, env = "SLESS_INSTANCE_DIGEST")]
    pub digest: Option<String>,
    /// A Dockerfile to write beside the code directory (image builds).
    #[arg(long, env = "SLESS_INSTANCE_DOCKERFILE")]
    pub dockerfile: Option<String>,
    #[arg(long, env = "SLESS_BLOB_URL")]
    pub blob_url: Option<String>,
    #[command(flatten)]
    pub s3: sless_server::blobs::S3Options,

    #[arg(long, env = "SLESS_INSTANCE_RUNTIME")]
    pub runtime: Option<String>,
    #[arg(long, env = "SLESS_INSTANCE_ENTRYPOINT", default_value = "handler.handle")]
    pub entrypoint: String,
    // Not `--namespace`: that is the client's global flag.
    #[arg(
        long = "instance-namespace",
        env = "SLESS_INSTANCE_NAMESPACE",
        default_value = "default"
    )]
    pub namespace: String,
    #[arg(long, env = "SLESS_INSTANCE_FUNCTION", default_value = "function")]
    pub function: String,
    #[arg(long, env = "SLESS_INSTANCE_VERSION", default_value_t = 1)]
    pub version: u64,
    /// Invocations served at once; more wait in the shim's order.
    #[arg(long, env = "SLESS_INSTANCE_CONCURRENCY", default_value_t = 8)]
    pub concurrency: u32,
    /// Seconds an invocation may take; past it the instance answers a
    /// timeout and exits (its pod restarts it).
    #[arg(long, env = "SLESS_INSTANCE_TIMEOUT_SEC", default_value_t = 30)]
    pub timeout_sec: u32,
    /// The function's environment, a JSON object of strings.
    #[arg(long, env = "SLESS_INSTANCE_ENV", default_value = "{}")]
    pub env: String,
    /// The memory the pod has for the handler; a generic instance takes
    /// no function that asks for more.
    #[arg(long, env = "SLESS_INSTANCE_MEMORY_MB")]
    pub memory_mb: Option<u32>,
    /// A generic instance's pool token: a specialization must carry it.
    #[arg(long, env = "SLESS_INSTANCE_WARM_TOKEN", hide_env_values = true)]
    pub warm_token: Option<String>,
    #[arg(long, env = "SLESS_INSTANCE_LISTEN", default_value = "0.0.0.0:7070")]
    pub listen: SocketAddr,
    #[arg(long, env = "SLESS_INSTANCE_READY_LISTEN", default_value = "0.0.0.0:7071")]
    pub ready_listen: SocketAddr,
    /// A writable directory (the shims' files).
    #[arg(long, env = "SLESS_INSTANCE_WORK_DIR", default_value = "/tmp/sless")]
    pub work_dir: PathBuf,
    /// Serve one invocation, then exit (a job run).
    #[arg(long, env = "SLESS_INSTANCE_ONCE", default_value_t = false, action = clap::ArgAction::Set)]
    pub once: bool,
    /// Largest response body a handler may give.
    #[arg(long, env = "SLESS_MAX_RESPONSE_BYTES", default_value_t = 6 * 1024 * 1024)]
    pub max_response_bytes: usize,
    #[arg(long, env = "SLESS_PYTHON", default_value = "/usr/bin/python3.11")]
    pub python: String,
    #[arg(long, env = "SLESS_NODE", default_value = "/usr/bin/node")]
    pub node: String,
}

/// Runs `sless instance`; the exit code says how it ended.
pub async fn run(args: InstanceArgs) -> anyhow::Result<i32> {
    let config = args.config;
    match args.action {
        Some(Action::Fetch) => {
            fetch(&config).await?;
            Ok(0)
        }
        Some(Action::Serve) => serve::run(&config).await,
        Some(Action::Build) => build::run(&config, &args.build).await,
        Some(Action::Generic) => generic::run(config).await,
        None => {
            if config.artifact.is_some() {
                fetch(&config).await?;
            }
            serve::run(&config).await
        }
    }
}

async fn fetch(config: &InstanceConfig) -> anyhow::Result<()> {
    let artifact = config
        .artifact
        .as_deref()
        .context("SLESS_INSTANCE_ARTIFACT is not set")?;
    let digest = config.digest.as_deref().context("SLESS_INSTANCE_DIGEST is not set")?;
    let store = sless_server::blobs::open_for_reading(&config.blob_settings()?).await?;
    sless_driver_local::standalone::fetch_artifact(store, &config.code_dir, artifact, digest)
        .await
        .map_err(anyhow::Error::msg)?;
    if let Some(dockerfile) = &config.dockerfile {
        let path = config.code_dir.parent().unwrap_or(Path::new("/")).join("Dockerfile");
        std::fs::write(&path, dockerfile).with_context(|| format!("writing {}", path.display()))?;
    }
    tracing::info!(artifact, digest, code_dir = %config.code_dir.display(), "artifact fetched and checked");
    Ok(())
}

impl InstanceConfig {
    /// The object store, from `SLESS_BLOB_URL` and `SLESS_S3_*`.
    fn blob_settings(&self) -> anyhow::Result<sless_server::blobs::BlobSettings> {
        Ok(sless_server::blobs::BlobSettings {
            url: self.blob_url.clone().context("SLESS_BLOB_URL is not set")?,
            s3: self.s3.clone(),
        })
    }

    fn runtime(&self) -> anyhow::Result<Runtime> {
        match self.runtime.as_deref() {
            Some("python3.11") => Ok(Runtime::Python311),
            Some("nodejs20") => Ok(Runtime::Nodejs20),
            other => anyhow::bail!("SLESS_INSTANCE_RUNTIME {other:?}: expected python3.11 or nodejs20"),
        }
    }

    /// The handler's environment: `SLESS_INSTANCE_ENV`, and each secret
    /// variable the pod got from the function's Secret as
    /// `SLESS_SECRET_ENV_{NAME}`, under its own name.
    fn env(&self) -> anyhow::Result<BTreeMap<String, String>> {
        let mut env: BTreeMap<String, String> =
            serde_json::from_str(&self.env).context("SLESS_INSTANCE_ENV: expected a JSON object of strings")?;
        for (name, value) in std::env::vars_os() {
            let (Some(name), Ok(value)) = (name.to_str(), value.into_string()) else {
                continue;
            };
            if let Some(variable) = name
                .strip_prefix(sless_driver_k8s::objects::SECRET_ENV_PREFIX)
                .filter(|v| !v.is_empty())
            {
                env.insert(variable.to_string(), value);
            }
        }
        Ok(env)
    }
}
