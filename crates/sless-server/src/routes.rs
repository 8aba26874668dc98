//! Which version of a function a call goes to: the routing table above the
//! driver. The driver runs any number of versions of a function; this table
//! says which one is `$latest` (the newest Ready build, what the plain
//! `/fn/{ns}/{name}` URL calls) and where each alias points
//! (`/fn/{ns}/{name}@{alias}`, optionally split between two versions).
//! A call by number (`@{version}`) needs no table.
//!
//! **Invariant:** the deployer moves `$latest` here after the driver has
//! deployed the new version and before `Ready` is written, so no call that
//! starts after `Ready` resolves to an older version. An alias is replaced
//! whole under the lock: a call sees it before or after a move.

use std::collections::{HashMap, HashSet};
use std::sync::RwLock;

use sless_api::AliasSpec;
use sless_driver::{FunctionKey, VersionRef};

/// What a call addresses after the function's name in its URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// The plain URL: the newest ready build.
    Latest,
    /// `@{version}`.
    Version(u64),
    /// `@{alias}`.
    Alias(String),
}

impl Selector {
    /// Reads what follows the `@`: digits are a version, anything else an
    /// alias name (alias names start with a letter). None when it can name
    /// nothing.
    pub fn parse(text: &str) -> Option<Selector> {
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            return text.parse().ok().filter(|v| *v > 0).map(Selector::Version);
        }
        sless_api::validate_alias_name(text).ok()?;
        Some(Selector::Alias(text.to_string()))
    }

    /// The alias named, if any.
    pub fn alias(&self) -> Option<&str> {
        match self {
            Selector::Alias(name) => Some(name),
            _ => None,
        }
    }
}

/// Where one alias sends calls.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Split {
    pub version: u64,
    /// Another version and the share of calls it gets.
    pub other: Option<(u64, f64)>,
}

impl Split {
    /// The split an alias spec describes; None when it does not check.
    pub fn of(spec: &AliasSpec) -> Option<Split> {
        Some(Split {
            version: spec.version,
            other: spec.split().ok()?,
        })
    }

    /// One pick: `draw` is uniform in [0, 1).
    pub fn pick(&self, draw: f64) -> u64 {
        match self.other {
            Some((other, share)) if draw < share => other,
            _ => self.version,
        }
    }
}

/// The versions calls go to, per function.
#[derive(Default)]
pub struct Routes {
    latest: RwLock<HashMap<FunctionKey, u64>>,
    aliases: RwLock<HashMap<FunctionKey, HashMap<String, Split>>>,
}

impl Routes {
    /// The version the plain URL calls, if the function has a ready one.
    pub fn latest(&self, key: &FunctionKey) -> Option<VersionRef> {
        let version = *self.latest.read().unwrap().get(key)?;
        Some(VersionRef::new(key.clone(), version))
    }

    /// The version a call addressed by `selector` goes to: None when there
    /// is none (no ready build, no such alias). A split alias draws anew
    /// for every call.
    pub fn resolve(&self, key: &FunctionKey, selector: &Selector) -> Option<VersionRef> {
        match selector {
            Selector::Latest => self.latest(key),
            Selector::Version(version) => Some(VersionRef::new(key.clone(), *version)),
            Selector::Alias(name) => {
                let split = *self.aliases.read().unwrap().get(key)?.get(name)?;
                Some(VersionRef::new(key.clone(), split.pick(rand::random::<f64>())))
            }
        }
    }

    /// Makes `version` the function's `$latest`; returns the one before.
    pub fn set_latest(&self, key: &FunctionKey, version: u64) -> Option<u64> {
        self.latest.write().unwrap().insert(key.clone(), version)
    }

    /// Points an alias (None: deletes it).
    pub fn set_alias(&self, key: &FunctionKey, name: &str, split: Option<Split>) {
        let mut aliases = self.aliases.write().unwrap();
        match split {
            Some(split) => {
                aliases.entry(key.clone()).or_default().insert(name.to_string(), split);
            }
            None => {
                if let Some(of_function) = aliases.get_mut(key) {
                    of_function.remove(name);
                    if of_function.is_empty() {
                        aliases.remove(key);
                    }
                }
            }
        }
    }

    /// Replaces every alias with what the store holds (a replica's pass).
    pub fn replace_aliases(&self, all: HashMap<FunctionKey, HashMap<String, Split>>) {
        *self.aliases.write().unwrap() = all;
    }

    /// The versions of a function its aliases send calls to: these keep
    /// serving when `$latest` moves on.
    pub fn pinned(&self, key: &FunctionKey) -> HashSet<u64> {
        let aliases = self.aliases.read().unwrap();
        let Some(of_function) = aliases.get(key) else {
            return HashSet::new();
        };
        of_function
            .values()
            .flat_map(|split| std::iter::once(split.version).chain(split.other.map(|(v, _)| v)))
            .collect()
    }

    /// Forgets a deleted function.
    pub fn forget(&self, key: &FunctionKey) {
        self.latest.write().unwrap().remove(key);
        self.aliases.write().unwrap().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_read_numbers_as_versions_and_labels_as_aliases() {
        assert_eq!(Selector::parse("7"), Some(Selector::Version(7)));
        assert_eq!(Selector::parse("live"), Some(Selector::Alias("live".into())));
        for nothing in ["", "0", "7a", "Live", "a@b", "-x", "99999999999999999999999"] {
            assert_eq!(Selector::parse(nothing), None, "{nothing}");
        }
    }

    #[test]
    fn a_split_sends_its_share_to_the_other_version() {
        let split = Split {
            version: 7,
            other: Some((8, 0.1)),
        };
        let picks: Vec<u64> = (0..100).map(|i| split.pick(f64::from(i) / 100.0)).collect();
        assert_eq!(picks.iter().filter(|v| **v == 8).count(), 10);
        assert_eq!(picks.iter().filter(|v| **v == 7).count(), 90);
    }

    #[test]
    fn aliases_pin_their_versions_until_moved() {
        let routes = Routes::default();
        let key = FunctionKey::new("ns", "f");
        routes.set_alias(
            &key,
            "live",
            Split::of(&AliasSpec {
                version: 3,
                weights: [("4".into(), 0.5)].into(),
            }),
        );
        assert_eq!(routes.pinned(&key), HashSet::from([3, 4]));
        assert!(routes.resolve(&key, &Selector::Alias("live".into())).is_some());
        assert!(routes.resolve(&key, &Selector::Alias("other".into())).is_none());
        routes.set_alias(&key, "live", None);
        assert!(routes.pinned(&key).is_empty());
    }
}
