//! The Kubernetes driver's part of the configuration (`SLESS_K8S_*`,
//! read only with `SLESS_DRIVER=kubernetes`), its checks, and the driver
//! made from it.

use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};

/// How builds make what a pod runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum K8sBuild {
    /// A Job uploads the artifact to the object store; pods fetch it.
    Artifact,
    /// A kaniko Job bakes the artifact into an image per version and pushes it.
    Image,
}

/// `SLESS_K8S_*` options.
#[derive(Debug, Clone, Args)]
pub struct KubeOptions {
    /// The namespace `sless server` runs in (image builds run there; the
    /// artifact Secrets are copied from there).
    #[arg(long = "k8s-namespace", env = "SLESS_K8S_NAMESPACE", default_value = "sless")]
    pub namespace: String,

    /// Registry path of the runtime images: `{repo}/sless-{runtime}:{tag}`.
    #[arg(long = "k8s-image-repo", env = "SLESS_K8S_IMAGE_REPO")]
    pub image_repo: Option<String>,

    /// Tag of the runtime images; default `{sless version}-{shim digest}`,
    /// what deploy/images/build.sh prints for this binary.
    #[arg(long = "k8s-image-tag", env = "SLESS_K8S_IMAGE_TAG")]
    pub image_tag: Option<String>,

    /// Secret with the object store's read-only environment for pods.
    #[arg(
        long = "k8s-artifact-reader-secret",
        env = "SLESS_K8S_ARTIFACT_READER_SECRET",
        default_value = "sless-artifact-reader"
    )]
    pub artifact_reader_secret: String,

    /// A `kubernetes.io/dockerconfigjson` Secret (in SLESS_K8S_NAMESPACE) that
    /// function pods and build Jobs pull their images with (a private
    /// registry, image mode's per-version images); unset: none.
    #[arg(long = "k8s-image-pull-secret", env = "SLESS_K8S_IMAGE_PULL_SECRET")]
    pub image_pull_secret: Option<String>,

    /// Private CIDRs function pods may reach (an in-cluster object store), comma separated.
    #[arg(long = "k8s-allowed-egress", env = "SLESS_K8S_ALLOWED_EGRESS", value_delimiter = ',')]
    pub allowed_egress: Vec<String>,

    /// Builds: artifact (a Job uploads the artifact) or image (kaniko pushes an image per version).
    #[arg(long = "k8s-build", env = "SLESS_K8S_BUILD", value_enum, default_value = "artifact")]
    pub build: K8sBuild,

    /// Image mode: `host[:port][/path]` the per-version images are pushed to.
    #[arg(long = "k8s-registry", env = "SLESS_K8S_REGISTRY")]
    pub registry: Option<String>,

    /// Image mode: the kaniko executor image.
    #[arg(
        long = "k8s-kaniko-image",
        env = "SLESS_K8S_KANIKO_IMAGE",
        default_value = "gcr.io/kaniko-project/executor:v1.23.2"
    )]
    pub kaniko_image: String,

    /// Image mode: a `kubernetes.io/dockerconfigjson` Secret (in SLESS_K8S_NAMESPACE) to push with.
    #[arg(
        long = "k8s-registry-secret",
        env = "SLESS_K8S_REGISTRY_SECRET",
        default_value = "sless-registry"
    )]
    pub registry_secret: String,

    /// Image mode: push over plain HTTP / without checking TLS (an in-cluster registry).
    #[arg(long = "k8s-insecure-registry", env = "SLESS_K8S_INSECURE_REGISTRY", default_value_t = false, action = clap::ArgAction::Set)]
    pub insecure_registry: bool,

    /// Generic pods kept ready per runtime (artifact mode) that a function
    /// woken from zero takes over instead of waiting for a pod of its own;
    /// 0 turns the warm pools off.
    #[arg(long = "k8s-warm-pods", env = "SLESS_K8S_WARM_PODS", default_value_t = 2)]
    pub warm_pods: u16,

    /// The memory of each generic pod: functions with a larger
    /// `memory_mb` take the normal path.
    #[arg(long = "k8s-warm-memory-mb", env = "SLESS_K8S_WARM_MEMORY_MB", default_value_t = 256)]
    pub warm_memory_mb: u32,
}

impl KubeOptions {
    /// The warm pools, unless turned off.
    pub fn warm_pool(&self) -> Option<sless_driver_k8s::objects::WarmPool> {
        (self.warm_pods > 0).then(|| sless_driver_k8s::objects::WarmPool {
            pods: i32::from(self.warm_pods),
            memory_mb: self.warm_memory_mb.max(64),
        })
    }

    /// The image tag in force.
    pub fn image_tag(&self) -> String {
        self.image_tag
            .clone()
            .unwrap_or_else(|| format!("{}-{}", env!("CARGO_PKG_VERSION"), sless_driver_local::shim_version()))
    }

    /// Refuses settings the driver cannot work with; `blob_url` is where
    /// artifacts go (pods must be able to fetch them).
    pub fn validate(&self, blob_url: &str) -> anyhow::Result<()> {
        if self.build == K8sBuild::Image {
            match &self.registry {
                None => anyhow::bail!("SLESS_K8S_BUILD=image needs SLESS_K8S_REGISTRY (where the images are pushed)"),
                Some(registry) if registry.trim().is_empty() || registry.contains(char::is_whitespace) => {
                    anyhow::bail!("SLESS_K8S_REGISTRY {registry:?}: expected host[:port][/path]")
                }
                Some(_) => {}
            }
        }
        match &self.image_repo {
            None => anyhow::bail!(
                "SLESS_DRIVER=kubernetes needs SLESS_K8S_IMAGE_REPO (the registry path of the runtime images)"
            ),
            Some(repo) if repo.trim().is_empty() || repo.contains(char::is_whitespace) => {
                anyhow::bail!(
                    "SLESS_K8S_IMAGE_REPO {repo:?}: expected a registry path such as registry.example.com/sless"
                )
            }
            Some(_) => {}
        }
        let tag = self.image_tag();
        if tag == "latest" || tag.is_empty() {
            anyhow::bail!(
                "SLESS_K8S_IMAGE_TAG {tag:?}: name the exact build ({{version}}-{{shim digest}}), never latest"
            );
        }
        if !blob_url.starts_with("s3://") {
            anyhow::bail!(
                "SLESS_BLOB_URL {blob_url:?}: with SLESS_DRIVER=kubernetes artifacts go to an S3-compatible store \
                 (s3://BUCKET) that pods can fetch from"
            );
        }
        if let Some(name) = &self.image_pull_secret {
            let valid = name.len() <= 253
                && !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
            if !valid {
                anyhow::bail!(
                    "SLESS_K8S_IMAGE_PULL_SECRET {name:?}: expected the name of a Secret in SLESS_K8S_NAMESPACE"
                );
            }
        }
        for cidr in &self.allowed_egress {
            let valid = cidr
                .split_once('/')
                .is_some_and(|(ip, prefix)| ip.parse::<std::net::IpAddr>().is_ok() && prefix.parse::<u8>().is_ok());
            if !valid {
                anyhow::bail!("SLESS_K8S_ALLOWED_EGRESS {cidr:?}: expected a CIDR such as 10.96.40.0/24");
            }
        }
        Ok(())
    }

    /// The driver's settings; a build Job's environment and bound are the
    /// server's own settings.
    fn settings(&self, build_env: Vec<(String, String)>, max_build_mb: u32) -> sless_driver_k8s::KubeSettings {
        sless_driver_k8s::KubeSettings {
            control_plane_namespace: self.namespace.clone(),
            image_repo: self.image_repo.clone().unwrap_or_default(),
            image_tag: self.image_tag(),
            artifact_reader_secret: self.artifact_reader_secret.clone(),
            image_pull_secret: self.image_pull_secret.clone().filter(|name| !name.trim().is_empty()),
            allowed_egress: self.allowed_egress.clone(),
            build: match self.build {
                K8sBuild::Artifact => sless_driver_k8s::BuildMode::Artifact,
                K8sBuild::Image => sless_driver_k8s::BuildMode::Image,
            },
            image_build: (self.build == K8sBuild::Image).then(|| sless_driver_k8s::ImageBuild {
                registry: self.registry.clone().unwrap_or_default(),
                kaniko_image: self.kaniko_image.clone(),
                docker_config_secret: self.registry_secret.clone(),
                insecure_registry: self.insecure_registry,
            }),
            build_env,
            max_build_mb,
        }
    }
}

/// A client for the cluster of the kubeconfig or the pod's service
/// account, checked to answer (before anything else starts).
pub async fn connect(options: &KubeOptions) -> anyhow::Result<kube::Client> {
    let client = sless_driver_k8s::KubeDriver::infer_client()
        .await
        .map_err(anyhow::Error::msg)?;
    match tokio::time::timeout(Duration::from_secs(10), client.apiserver_version()).await {
        Ok(Ok(version)) => tracing::info!(
            kubernetes = %format!("{}.{}", version.major, version.minor),
            namespace = %options.namespace,
            image_tag = %options.image_tag(),
            "Kubernetes API server reached"
        ),
        Ok(Err(e)) => anyhow::bail!("SLESS_DRIVER=kubernetes: the Kubernetes API server did not answer: {e}"),
        Err(_) => anyhow::bail!("SLESS_DRIVER=kubernetes: the Kubernetes API server did not answer within 10s"),
    }
    Ok(client)
}

/// The Kubernetes driver on `client`, with artifacts in `blobs` (build
/// pods get presigned URLs for it, never its credentials).
pub fn driver(
    config: &crate::config::Config,
    client: kube::Client,
    blobs: Arc<dyn object_store::ObjectStore>,
) -> anyhow::Result<sless_driver_k8s::KubeDriver> {
    let signer = crate::blobs::signer(&config.blob_settings())?;
    let serving = sless_driver_k8s::ServingSettings {
        max_queue: config.max_queue,
        max_response_bytes: config.max_response_bytes,
        idle_timeout: Some(Duration::from_secs(config.idle_timeout_sec.max(1))),
        warm: config.kube.warm_pool(),
        ..sless_driver_k8s::ServingSettings::default()
    };
    // Validated: 64 to 3072.
    let max_build_mb = u32::try_from(config.max_build_mb).unwrap_or(u32::MAX);
    let settings = config.kube.settings(config.build_env(), max_build_mb);
    Ok(sless_driver_k8s::KubeDriver::new(
        client, settings, serving, blobs, signer,
    ))
}
