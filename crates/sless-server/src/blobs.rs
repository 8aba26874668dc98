//! Code archives live in an object store: a local directory for the embedded
//! default, S3 for the cluster shape, with no caller knowing which.

use std::sync::Arc;

use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::ObjectStore;

/// Opens the object store named by `url` (`file://DIR`).
pub fn open(url: &str) -> anyhow::Result<Arc<dyn ObjectStore>> {
    let dir = url
        .strip_prefix("file://")
        .ok_or_else(|| anyhow::anyhow!("SLESS_BLOB_URL {url:?}: expected file://DIR"))?;
    std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("creating code store directory {dir:?}: {e}"))?;
    let store = LocalFileSystem::new_with_prefix(dir)
        .map_err(|e| anyhow::anyhow!("opening code store directory {dir:?}: {e}"))?;
    Ok(Arc::new(store))
}

/// Where a function's archive with the given sha256 is kept.
pub fn archive_key(namespace: &str, function: &str, code_hash: &str) -> Path {
    Path::from(format!("archives/{namespace}/{function}/{code_hash}.zip"))
}

/// The prefix holding every archive of a function.
pub fn function_prefix(namespace: &str, function: &str) -> Path {
    Path::from(format!("archives/{namespace}/{function}"))
}
