//! The Kubernetes driver, the cluster shape: a function version is a
//! Deployment of pods running `sless instance` plus a headless Service in
//! the namespace `sless-fn-{ns}`; builds and job runs are Jobs. Objects
//! are made by the pure builders of [`objects`] and applied server-side.
//!
//! **Architecture invariant:** every object the driver makes is labelled
//! `app.kubernetes.io/managed-by: sless` with the function's namespace and
//! name, and (unless namespace-wide or in the control plane's namespace)
//! owned by the function's anchor ConfigMap, so deleting a function
//! deletes everything it made.

mod artifacts;
mod autoscale;
mod builds;
mod cluster;
mod connection;
mod driver;
mod endpoint_cache;
mod endpoints;
mod gateway;
pub mod grants;
mod idle;
mod images;
mod jobs;
pub mod names;
pub mod objects;
mod rollout;
mod runs;
mod settings;
pub mod warm;

pub use artifacts::max_artifact_bytes;
pub use driver::KubeDriver;
pub use gateway::ServingSettings;
pub use settings::{BuildMode, ImageBuild, KubeSettings};
