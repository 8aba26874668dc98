//! What the Kubernetes driver is told at start (from `SLESS_K8S_*`).

/// How builds make what a pod runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildMode {
    /// A Job on the runtime image installs the dependencies and uploads the
    /// artifact tarball to the object store; pods fetch it at start.
    Artifact,
    /// A kaniko Job bakes the artifact into an image of its own and pushes
    /// it; pods run that image.
    Image,
}

/// Where image mode pushes, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageBuild {
    /// `host[:port][/path]` the per-function images go to.
    pub registry: String,
    /// The kaniko executor image.
    pub kaniko_image: String,
    /// A Secret of type `kubernetes.io/dockerconfigjson` in the control
    /// plane's namespace with the registry's credentials.
    pub docker_config_secret: String,
    /// Push over plain HTTP / without verifying TLS (an in-cluster registry).
    pub insecure_registry: bool,
}

/// Settings of the Kubernetes driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeSettings {
    /// The namespace `sless server` runs in (its pods are labelled
    /// `app.kubernetes.io/name: sless-server`).
    pub control_plane_namespace: String,
    /// Registry path of the runtime images, `{repo}/sless-{runtime}:{tag}`.
    pub image_repo: String,
    /// `{sless version}-{shim digest}`, never `latest`.
    pub image_tag: String,
    /// A Secret (copied into each function namespace) whose keys are the
    /// object store's environment (`SLESS_BLOB_URL`, `SLESS_S3_*`):
    /// read-only credentials for pods fetching artifacts.
    pub artifact_reader_secret: String,
    /// A Secret of type `kubernetes.io/dockerconfigjson` in the control
    /// plane's namespace that pods pull their images with (copied into
    /// each function namespace); None: the nodes pull without one.
    pub image_pull_secret: Option<String>,
    /// Addresses function pods may reach although they are private (the
    /// object store when it runs in the cluster), as CIDRs.
    pub allowed_egress: Vec<String>,
    pub build: BuildMode,
    /// Image mode's registry and credentials (None in artifact mode).
    pub image_build: Option<ImageBuild>,
    /// Added to every build Job's environment: the package index and
    /// registry pip and npm install from (`PIP_INDEX_URL`,
    /// `npm_config_registry`), when the server sets them.
    pub build_env: Vec<(String, String)>,
    /// What a build may leave in its artifact's directory, in MiB (the
    /// server's `SLESS_MAX_BUILD_MB`).
    pub max_build_mb: u32,
}

impl KubeSettings {
    /// The runtime image of `runtime`.
    pub fn runtime_image(&self, runtime: sless_api::Runtime) -> String {
        format!(
            "{}/sless-{}:{}",
            self.image_repo.trim_end_matches('/'),
            runtime.as_str(),
            self.image_tag
        )
    }
}
