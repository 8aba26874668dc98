//! deploy/k8s renders with `kubectl kustomize` (offline), its RBAC names
//! no wildcard, and deploy/images/build.sh passes `bash -n` and shellcheck.
//! The tools come from scripts/setup.sh; a missing one fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `kubectl kustomize DIR` as one JSON value per document.
fn render(dir: &str) -> Vec<Value> {
    let output = Command::new("kubectl")
        .arg("kustomize")
        .arg(repo().join(dir))
        .output()
        .expect("kubectl (scripts/setup.sh installs it)");
    assert!(
        output.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    serde_saphyr::from_multiple::<Value>(&text).expect("kustomize's output is YAML")
}

fn kinds(docs: &[Value]) -> Vec<&str> {
    docs.iter().map(|d| d["kind"].as_str().unwrap()).collect()
}

/// Every (apiGroup, resource, verb) a ClusterRole or Role of `docs` grants,
/// after checking that no field of a rule is a wildcard.
fn granted(docs: &[Value]) -> Vec<(String, String, String)> {
    let mut grants = Vec::new();
    for doc in docs
        .iter()
        .filter(|d| matches!(d["kind"].as_str(), Some("ClusterRole" | "Role")))
    {
        for rule in doc["rules"].as_array().expect("rules") {
            for field in ["apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"] {
                for value in rule[field].as_array().into_iter().flatten() {
                    assert!(!value.as_str().unwrap().contains('*'), "wildcard in {field} of {rule}");
                }
            }
            assert!(
                rule.get("nonResourceURLs").is_none(),
                "the driver calls no non-resource URL"
            );
            for group in rule["apiGroups"].as_array().unwrap() {
                for resource in rule["resources"].as_array().unwrap() {
                    for verb in rule["verbs"].as_array().unwrap() {
                        grants.push((
                            group.as_str().unwrap().to_string(),
                            resource.as_str().unwrap().to_string(),
                            verb.as_str().unwrap().to_string(),
                        ));
                    }
                }
            }
        }
    }
    grants
}

#[test]
fn the_base_renders_with_every_part_and_no_rbac_wildcard() {
    let docs = render("deploy/k8s");
    let kinds = kinds(&docs);
    for kind in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Service",
        "Ingress",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    let grants = granted(&docs);
    assert!(grants.contains(&("apps".into(), "deployments/scale".into(), "patch".into())));
    // Warm pools: claims relabel generic pods, retired ones are deleted.
    for verb in ["patch", "delete"] {
        assert!(grants.contains(&("".into(), "pods".into(), verb.into())), "pods {verb}");
    }
    let server = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    assert_eq!(server["spec"]["replicas"], 2);
    assert_eq!(server["metadata"]["namespace"], "sless");
    let pod = &server["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "sless-server");
    let container = &pod["containers"][0];
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
}

#[test]
fn the_example_overlay_renders_pinned_images_and_the_secrets() {
    let docs = render("deploy/k8s/overlays/example");
    let server = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let image = server["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap();
    let (_, tag) = image.rsplit_once(':').expect("a tagged image");
    assert_ne!(tag, "latest");
    let secrets: Vec<_> = docs
        .iter()
        .filter(|d| d["kind"] == "Secret")
        .map(|d| d["metadata"]["name"].as_str().unwrap())
        .collect();
    for name in ["sless-secrets", "sless-artifact-reader"] {
        assert!(secrets.contains(&name), "{name} missing from {secrets:?}");
    }
    // Build pods get presigned URLs: no object-store writer credentials to hand out.
    assert!(!secrets.iter().any(|name| name.contains("writer")), "{secrets:?}");
    granted(&docs);
}

#[test]
fn the_image_script_is_valid_bash_and_passes_shellcheck() {
    let script = repo().join("deploy/images/build.sh");
    let syntax = Command::new("bash").arg("-n").arg(&script).output().unwrap();
    assert!(syntax.status.success(), "{}", String::from_utf8_lossy(&syntax.stderr));
    let lint = Command::new("shellcheck")
        .arg(&script)
        .output()
        .expect("shellcheck (scripts/setup.sh installs it)");
    assert!(lint.status.success(), "{}", String::from_utf8_lossy(&lint.stdout));
}
