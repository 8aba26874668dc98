//! The name of a function across namespaces.

/// Names a function across namespaces.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FunctionKey {
    pub namespace: String,
    pub name: String,
}

impl FunctionKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        FunctionKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for FunctionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Names one version of a function: what [`crate::Driver::invoke`] and
/// [`crate::Driver::retire`] address. Several versions of a function can be
/// deployed at once (the newest build, versions an alias points at,
/// versions called by number); which one a call goes to is decided above
/// the driver.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VersionRef {
    pub key: FunctionKey,
    /// The version number (counted from 1 by successful builds).
    pub version: u64,
}

impl VersionRef {
    pub fn new(key: FunctionKey, version: u64) -> Self {
        VersionRef { key, version }
    }
}

impl std::fmt::Display for VersionRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.key, self.version)
    }
}
