//! Names and labels of everything the driver makes. Kubernetes names are
//! shorter than ours can get (`sless-fn-` + a 63-character namespace), so a
//! name that would be too long keeps its start and ends in a digest of the
//! whole, which stays unique and stable.

use sless_driver::{FunctionKey, RunId};

/// The field manager of every server-side apply.
pub const MANAGER: &str = "sless";

/// Label keys.
pub mod label {
    pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
    pub const NAMESPACE: &str = "sless.dev/namespace";
    pub const FUNCTION: &str = "sless.dev/function";
    pub const VERSION: &str = "sless.dev/version";
    /// `instance`, `build`, `image-build` or `run`.
    pub const COMPONENT: &str = "sless.dev/component";
    pub const JOB: &str = "sless.dev/job";
    pub const RUN: &str = "sless.dev/run";
}

/// Annotation keys.
pub mod annotation {
    /// The artifact's fingerprint: a new one in the pod template rolls the Deployment.
    pub const ARTIFACT: &str = "sless.dev/artifact";
    /// The sha256 of the artifact's tarball.
    pub const DIGEST: &str = "sless.dev/artifact-digest";
    /// The resourceVersion of the function's Secret a pod template was made with.
    pub const SECRETS: &str = "sless.dev/secrets-revision";
    /// When a replica last had a call on a version (milliseconds since the
    /// epoch), on its Deployment: what scaling to zero after the idle period reads.
    pub const LAST_CALL: &str = "sless.dev/last-call";
}

/// The Kubernetes namespace of a sless namespace's functions.
pub fn function_namespace(namespace: &str) -> String {
    dns_label(&format!("sless-fn-{namespace}"))
}

/// The ConfigMap every object of a function is owned by: deleting it
/// deletes them all (the garbage collector follows owner references).
pub fn anchor(key: &FunctionKey) -> String {
    dns_label(&format!("fn-{}", key.name))
}

/// The Deployment and headless Service of one version (`fn-` first: a
/// Service name must start with a letter, a function's may not).
pub fn version_object(key: &FunctionKey, version: u64) -> String {
    dns_label(&format!("fn-{}-v{version}", key.name))
}

/// The Job building `artifact` for a function.
pub fn build_job(key: &FunctionKey, artifact: &str) -> String {
    dns_label(&format!("build-{}-{}", key.name, &artifact[..artifact.len().min(12)]))
}

/// The kaniko Job (image mode) of a version, in the control plane's namespace.
pub fn image_job(key: &FunctionKey, version: u64) -> String {
    dns_label(&format!("image-{}-{}-v{version}", key.namespace, key.name))
}

/// The image a version is baked into (image mode).
pub fn function_image(registry: &str, key: &FunctionKey, version: u64) -> String {
    format!(
        "{}/sless-{}-{}:v{version}",
        registry.trim_end_matches('/'),
        key.namespace,
        key.name
    )
}

/// The Job of one job run.
pub fn run_job(run: &RunId) -> String {
    dns_label(&format!("run-{}-{}", run.job, run.run))
}

/// The NetworkPolicy of a function namespace.
pub const NETWORK_POLICY: &str = "sless-instances";

/// Longest DNS label.
const MAX_LABEL: usize = 63;

/// `name` if it is a DNS label short enough; else its first characters, a
/// dash and 10 hex digits of its sha256.
fn dns_label(name: &str) -> String {
    if name.len() <= MAX_LABEL {
        return name.to_string();
    }
    use sha2::{Digest, Sha256};
    let digest = hex::encode(&Sha256::digest(name.as_bytes())[..5]);
    let keep = name[..MAX_LABEL - digest.len() - 1].trim_end_matches('-');
    format!("{keep}-{digest}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_in_a_dns_label_and_stay_apart() {
        let long = "a".repeat(63);
        let ns = function_namespace(&long);
        assert!(ns.len() <= 63 && ns.starts_with("sless-fn-aaa"), "{ns}");
        assert_ne!(ns, function_namespace(&"a".repeat(62)));
        let key = FunctionKey::new("demo", "9lives");
        assert_eq!(version_object(&key, 3), "fn-9lives-v3");
        let long_key = FunctionKey::new("demo", long);
        let v1 = version_object(&long_key, 1);
        let v2 = version_object(&long_key, 2);
        assert!(v1.len() <= 63 && v2.len() <= 63);
        assert_ne!(v1, v2);
        assert_eq!(function_namespace("demo"), "sless-fn-demo");
    }

    #[test]
    fn a_cut_name_does_not_end_in_a_dash_before_the_digest() {
        let name = format!("{}-{}", "b".repeat(51), "c".repeat(20));
        let label = dns_label(&name);
        assert!(!label.contains("--"), "{label}");
    }
}
