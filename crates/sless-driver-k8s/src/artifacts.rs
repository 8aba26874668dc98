//! The artifacts of the cluster shape live only in the object store,
//! under the local driver's layout (`artifacts/{fingerprint}/{sha256}.tar.gz`,
//! which `sless instance fetch` reads); an archive waiting for its build
//! Job, and the tarball the Job uploads before the server accepts it, are
//! kept under `builds/`.

use std::sync::Arc;

use futures::TryStreamExt;
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt};
use sha2::{Digest, Sha256};
use sless_driver::{BuildError, DriverError, Fingerprint};

/// The largest artifact tarball the server accepts from a build (it is
/// read whole to be hashed and stored).
pub const MAX_ARTIFACT_BYTES: u64 = 1 << 30;

/// Built artifacts and build inputs in the object store.
pub struct Artifacts {
    store: Arc<dyn ObjectStore>,
}

impl Artifacts {
    pub fn new(store: Arc<dyn ObjectStore>) -> Artifacts {
        Artifacts { store }
    }

    /// The sha256 of a stored tarball of `artifact` and its size, if there
    /// is one.
    pub async fn digest(&self, artifact: &Fingerprint) -> Result<Option<(String, u64)>, DriverError> {
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
                .map(|digest| (digest.to_string(), meta.size))
        }))
    }

    /// Every artifact with a tarball here, with when it was last written.
    pub async fn stored(&self) -> Result<Vec<(Fingerprint, std::time::SystemTime)>, DriverError> {
        sless_driver::stored_artifacts(&*self.store).await
    }

    /// Deletes every tarball of `artifact`.
    pub async fn remove(&self, artifact: &Fingerprint) -> Result<(), DriverError> {
        sless_driver::remove_stored_artifact(&*self.store, artifact).await
    }

    /// Where the archive of a build of `artifact` from `code_hash` waits.
    pub fn archive_key(artifact: &Fingerprint, code_hash: &str) -> String {
        format!("builds/{artifact}/{code_hash}.zip")
    }

    /// Where the build of `artifact` from `code_hash` uploads its tarball
    /// (the one key its grant may write).
    pub fn upload_key(artifact: &Fingerprint, code_hash: &str) -> String {
        format!("builds/{artifact}/{code_hash}.tar.gz")
    }

    /// Accepts the tarball a build uploaded to `upload_key` as `artifact`
    /// if its sha256 is `reported`, what the build says it made; returns
    /// that sha256 and the tarball's size. The bytes hashed here are the bytes stored under
    /// `artifacts/{artifact}/{sha256}.tar.gz`, so a pod writing its staging
    /// key again later changes nothing. A tarball another replica accepted
    /// first (the two shared the Job) is taken as it is.
    pub async fn accept(
        &self,
        artifact: &Fingerprint,
        upload_key: &str,
        reported: &str,
    ) -> Result<(String, u64), BuildError> {
        let internal = |e: object_store::Error| BuildError::Internal(format!("reading the uploaded artifact: {e}"));
        let accepted = Key::from(format!("artifacts/{artifact}/{reported}.tar.gz"));
        if let Some(size) = self.size(&accepted).await.map_err(internal)? {
            return Ok((reported.to_string(), size));
        }
        let upload = match self.store.get(&Key::from(upload_key)).await {
            Ok(upload) => upload,
            Err(object_store::Error::NotFound { .. }) => match self.size(&accepted).await.map_err(internal)? {
                Some(size) => return Ok((reported.to_string(), size)),
                None => {
                    return Err(BuildError::Failed {
                        log_tail: "the build reported success but uploaded no artifact".into(),
                    })
                }
            },
            Err(e) => return Err(internal(e)),
        };
        if upload.meta.size > MAX_ARTIFACT_BYTES {
            return Err(BuildError::Failed {
                log_tail: format!(
                    "the built artifact is {} bytes, over the {MAX_ARTIFACT_BYTES} bytes accepted",
                    upload.meta.size
                ),
            });
        }
        let tarball = upload.bytes().await.map_err(internal)?;
        let size = tarball.len() as u64;
        let actual = hex::encode(Sha256::digest(&tarball));
        if actual != reported {
            return Err(BuildError::Failed {
                log_tail: format!(
                    "the uploaded artifact has sha256 {actual}, not the {reported} its build reported: refused"
                ),
            });
        }
        self.store
            .put(&accepted, tarball.into())
            .await
            .map_err(|e| BuildError::Internal(format!("storing the artifact: {e}")))?;
        self.drop_archive(upload_key).await;
        Ok((actual, size))
    }

    /// The size of the object at `key`, if there is one.
    async fn size(&self, key: &Key) -> Result<Option<u64>, object_store::Error> {
        match self.store.head(key).await {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Stores a build's input archive.
    pub async fn put_archive(&self, key: &str, archive: bytes::Bytes) -> Result<(), String> {
        self.store
            .put(&Key::from(key), archive.into())
            .await
            .map(|_| ())
            .map_err(|e| format!("storing the archive for the build: {e}"))
    }

    /// Drops a build's input archive (or upload) once the build is over.
    pub async fn drop_archive(&self, key: &str) {
        if let Err(e) = self.store.delete(&Key::from(key)).await {
            tracing::warn!(%key, error = %e, "removing a build's archive");
        }
    }
}
