//! The artifacts of the cluster shape live only in the object store,
//! under the local driver's layout (`artifacts/{fingerprint}/{sha256}.tar.gz`,
//! which `sless instance fetch` reads); an archive waiting for its build
//! Job is kept under `builds/`.

use std::sync::Arc;

use futures::TryStreamExt;
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt};
use sless_driver::{DriverError, Fingerprint};

/// Built artifacts and build inputs in the object store.
pub struct Artifacts {
    store: Arc<dyn ObjectStore>,
}

impl Artifacts {
    pub fn new(store: Arc<dyn ObjectStore>) -> Artifacts {
        Artifacts { store }
    }

    /// The sha256 of a stored tarball of `artifact`, if there is one.
    pub async fn digest(&self, artifact: &Fingerprint) -> Result<Option<String>, DriverError> {
        let prefix = Key::from(format!("artifacts/{artifact}"));
        let first = self
            .store
            .list(Some(&prefix))
            .try_next()
            .await
            .map_err(|e| DriverError::Unavailable(format!("listing artifacts: {e}")))?;
        Ok(first.and_then(|meta| {
            meta.location
                .filename()
                .and_then(|file| file.strip_suffix(".tar.gz"))
                .map(str::to_string)
        }))
    }

    /// Deletes every tarball of `artifact`.
    pub async fn remove(&self, artifact: &Fingerprint) -> Result<(), DriverError> {
        let prefix = Key::from(format!("artifacts/{artifact}"));
        let keys: Vec<Key> = self
            .store
            .list(Some(&prefix))
            .map_ok(|meta| meta.location)
            .try_collect()
            .await
            .map_err(|e| DriverError::Unavailable(format!("listing artifacts: {e}")))?;
        for key in keys {
            match self.store.delete(&key).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(DriverError::Unavailable(format!("deleting {key}: {e}"))),
            }
        }
        Ok(())
    }

    /// Where the archive of a build of `artifact` from `code_hash` waits.
    pub fn archive_key(artifact: &Fingerprint, code_hash: &str) -> String {
        format!("builds/{artifact}/{code_hash}.zip")
    }

    /// Stores a build's input archive.
    pub async fn put_archive(&self, key: &str, archive: bytes::Bytes) -> Result<(), String> {
        self.store
            .put(&Key::from(key), archive.into())
            .await
            .map(|_| ())
            .map_err(|e| format!("storing the archive for the build: {e}"))
    }

    /// Drops a build's input archive once the build is over.
    pub async fn drop_archive(&self, key: &str) {
        if let Err(e) = self.store.delete(&Key::from(key)).await {
            tracing::warn!(%key, error = %e, "removing a build's archive");
        }
    }
}
