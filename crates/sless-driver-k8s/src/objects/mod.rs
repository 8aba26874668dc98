//! Pure builders of every Kubernetes object the driver applies: no I/O,
//! the same input gives the same object (snapshot-tested in
//! `tests/objects.rs`). Every object carries the `sless.dev/*` labels, and
//! every object in a function namespace but the namespace-wide ones is
//! owned by the function's anchor ConfigMap.

mod build;
mod meta;
mod namespace;
mod network;
mod pod;
mod run;
mod secrets;
mod serving;
mod warm;

pub use build::{build_job, dockerfile, image_job, BuildInput, ImageInput, BUILD_MEMORY_MB};
pub use meta::{function_labels, version_labels, Owner};
pub use namespace::{anchor, copied_secret, function_namespace};
pub use network::{network_policy, PRIVATE_RANGES, SERVER_LABEL};
pub use pod::{
    image_pull_secrets, instance_pod, CodeSource, InstanceInput, PodMode, CODE_DIR, CODE_MOUNT, FRAME_PORT,
    OVERHEAD_MB, READY_PORT, RUN_AS,
};
pub use run::{run_job, START_ALLOWANCE_SEC};
pub use secrets::{function_secret, SecretMounts, SECRETS_DIR, SECRET_ENV_PREFIX};
pub use serving::{deployment, service};
pub use warm::{
    generic_labels, warm_deployment, warm_deployment_name, warm_namespace, warm_network_policy, warm_token_secret,
    WarmPool, CLAIMED_AT, CLAIMED_FOR, WARM_NAMESPACE, WARM_RUNTIME, WARM_STATE, WARM_TOKEN_KEY, WARM_TOKEN_SECRET,
};
