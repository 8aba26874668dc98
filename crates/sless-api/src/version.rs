//! Versions and aliases. Every successful build of a function is an
//! immutable, numbered version (its code, the artifact built from it and the
//! spec it runs with); an alias is a name that points at one version, and
//! may send a share of the calls to a second one (a canary).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::FunctionSpec;

/// One built version of a function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FunctionVersion {
    /// Counted from 1 by successful builds.
    pub version: u64,
    /// sha256 of the zip the version was built from.
    pub code_hash: String,
    /// The built artifact (driver-specific id).
    pub artifact: String,
    /// sha256 of the artifact's tarball in the object store, when replicas share state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_digest: Option<String>,
    /// The spec the version runs with when called by number or through an
    /// alias: the function's spec when it was built, with the edits made
    /// while it was the newest version.
    pub spec: FunctionSpec,
    pub built_at: DateTime<Utc>,
    /// What the built artifact takes, installed dependencies included: its
    /// files on the server's disk, or its tarball in the object store
    /// (Kubernetes). Counts towards the namespace's storage quota; 0 for
    /// a version built before sizes were recorded, until the leader's next
    /// sweep measures it.
    #[serde(default)]
    pub artifact_bytes: u64,
    /// The size of the zip the version was built from (also counted).
    #[serde(default)]
    pub archive_bytes: u64,
    /// Whether the plain URL (`$latest`) calls this version.
    #[serde(default)]
    pub latest: bool,
    /// The aliases that send calls to this version (alone or in a split).
    #[serde(default)]
    pub aliases: Vec<String>,
}

/// Where an alias sends calls: `version`, and optionally a share of them to
/// one other version (`{"version": 7, "weights": {"8": 0.1}}` sends 10% to 8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AliasSpec {
    pub version: u64,
    /// At most one other version (its number as the key) and the share of
    /// calls it gets, between 0 and 1; the rest go to `version`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub weights: BTreeMap<String, f64>,
}

impl AliasSpec {
    /// The other version and its share, checked: `Err((field, message))`
    /// names the field at fault.
    pub fn split(&self) -> Result<Option<(u64, f64)>, (&'static str, String)> {
        if self.version == 0 {
            return Err(("version", "version must be a version number (1 or more)".into()));
        }
        if self.weights.len() > 1 {
            return Err((
                "weights",
                format!(
                    "weights may name one version besides {}, got {}",
                    self.version,
                    self.weights.len()
                ),
            ));
        }
        let Some((other, &weight)) = self.weights.iter().next() else {
            return Ok(None);
        };
        let other: u64 = other
            .parse()
            .ok()
            .filter(|v| *v > 0)
            .ok_or_else(|| ("weights", format!("weights key {other:?} is not a version number")))?;
        if other == self.version {
            return Err((
                "weights",
                format!("weights names version {other}, which is the alias's own version"),
            ));
        }
        if !weight.is_finite() || !(0.0..=1.0).contains(&weight) {
            return Err((
                "weights",
                format!("weights must sum to at most 1 (each between 0 and 1), got {weight} for version {other}"),
            ));
        }
        Ok(Some((other, weight)))
    }

    /// The versions the alias sends calls to.
    pub fn versions(&self) -> Vec<u64> {
        let mut versions = vec![self.version];
        versions.extend(self.weights.keys().filter_map(|k| k.parse::<u64>().ok()));
        versions
    }
}

/// An alias as the API returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Alias {
    pub name: String,
    pub namespace: String,
    pub function: String,
    #[serde(flatten)]
    pub spec: AliasSpec,
    /// The invoke URL: `{external_url}/fn/{ns}/{function}@{name}`.
    pub url: String,
    pub updated_at: DateTime<Utc>,
}

/// Checks an alias name: a DNS label that starts with a letter (a name that
/// starts with a digit could be read as a version number after the `@`).
pub fn validate_alias_name(name: &str) -> Result<(), String> {
    crate::validate_name("alias", name).map_err(|e| e.to_string())?;
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err(format!(
            "invalid alias name {name:?}: must start with a letter (a leading digit reads as a version number)"
        ));
    }
    Ok(())
}

/// Names no alias may take: `latest` reads as the newest version (what
/// the plain URL calls, `$latest`), so `@latest` must never mean an older
/// one an alias was left on.
pub const RESERVED_ALIAS_NAMES: &[&str] = &["latest"];

/// Checks the name of an alias being set (created or moved): an alias name
/// that is not reserved. (Reads and deletes take any alias name, so that
/// one stored before a name was reserved can still be shown and deleted.)
pub fn validate_new_alias_name(name: &str) -> Result<(), String> {
    validate_alias_name(name)?;
    if RESERVED_ALIAS_NAMES.contains(&name) {
        return Err(format!(
            "alias name {name:?} is reserved: the plain URL /fn/{{ns}}/{{name}} already calls the newest version; pick another name, e.g. \"live\" or \"stable\""
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(version: u64, weights: &[(&str, f64)]) -> AliasSpec {
        AliasSpec {
            version,
            weights: weights.iter().map(|(k, w)| (k.to_string(), *w)).collect(),
        }
    }

    #[test]
    fn splits_are_checked_field_by_field() {
        assert_eq!(spec(7, &[]).split(), Ok(None));
        assert_eq!(spec(7, &[("8", 0.1)]).split(), Ok(Some((8, 0.1))));
        assert_eq!(spec(7, &[("8", 1.0)]).split(), Ok(Some((8, 1.0))));
        assert_eq!(spec(0, &[]).split().unwrap_err().0, "version");
        for bad in [
            spec(7, &[("8", 1.5)]),
            spec(7, &[("8", -0.1)]),
            spec(7, &[("8", f64::NAN)]),
            spec(7, &[("7", 0.5)]),
            spec(7, &[("x", 0.5)]),
            spec(7, &[("0", 0.5)]),
            spec(7, &[("8", 0.1), ("9", 0.1)]),
        ] {
            assert_eq!(bad.split().unwrap_err().0, "weights", "{bad:?}");
        }
    }

    #[test]
    fn alias_names_are_labels_that_start_with_a_letter() {
        for good in ["live", "canary", "a1", "blue-green"] {
            assert!(validate_alias_name(good).is_ok(), "{good}");
        }
        for bad in ["", "7", "1abc", "Live", "a@b", "a_b", "-a", &"a".repeat(64)] {
            assert!(validate_alias_name(bad).is_err(), "{bad}");
            assert!(validate_new_alias_name(bad).is_err(), "{bad}");
        }
        // Reserved: refused when set, still readable (one stored before).
        assert!(validate_alias_name("latest").is_ok());
        let refused = validate_new_alias_name("latest").unwrap_err();
        assert!(refused.contains("reserved"), "{refused}");
        assert!(validate_new_alias_name("latest-v2").is_ok());
    }
}
