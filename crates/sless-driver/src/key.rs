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
