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

/// The largest artifact tarball the server accepts from a build whose
/// directory may hold `max_build_mb` MiB (`SLESS_MAX_BUILD_MB`): twice
/// that and 64 MiB, room for tar's header and padding of each file of a
/// tree of many small ones (gzip grows what does not compress by less
/// than 0.1%). A tarball is never whole in memory.
pub fn max_artifact_bytes(max_build_mb: u32) -> u64 {
    (2 * u64::from(max_build_mb) + 64) << 20
}

fn too_big(size: u64, max: u64) -> BuildError {
    BuildError::Failed {
        log_tail: format!(
            "the built artifact is {size} bytes, over the {max} bytes accepted (twice the server's SLESS_MAX_BUILD_MB and 64 MiB)"
        ),
    }
}

fn reading(e: object_store::Error) -> BuildError {
    BuildError::Internal(format!("reading the uploaded artifact: {e}"))
}

/// Built artifacts and build inputs in the object store.
pub struct Artifacts {
    store: Arc<dyn ObjectStore>,
    /// The largest tarball `accept` takes ([`max_artifact_bytes`]).
    max_bytes: u64,
}

impl Artifacts {
    pub fn new(store: Arc<dyn ObjectStore>, max_build_mb: u32) -> Artifacts {
        Artifacts {
            store,
            max_bytes: max_artifact_bytes(max_build_mb),
        }
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
    /// that sha256 and the tarball's size. The upload is copied first
    /// where the build's grant cannot write, and that copy is hashed as it
    /// is read (never whole in memory: it may be gigabytes) and becomes
    /// `artifacts/{artifact}/{sha256}.tar.gz`, so a pod writing its
    /// staging key again meanwhile or later changes nothing. A tarball
    /// another replica accepted first (the two shared the Job) is taken as
    /// it is.
    pub async fn accept(
        &self,
        artifact: &Fingerprint,
        upload_key: &str,
        reported: &str,
    ) -> Result<(String, u64), BuildError> {
        let accepted = Key::from(format!("artifacts/{artifact}/{reported}.tar.gz"));
        if let Some(size) = self.size(&accepted).await.map_err(reading)? {
            return Ok((reported.to_string(), size));
        }
        // Gone: another replica that shared the Job accepted it first.
        let uploaded_nothing = || async {
            match self.size(&accepted).await.map_err(reading)? {
                Some(size) => Ok((reported.to_string(), size)),
                None => Err(BuildError::Failed {
                    log_tail: "the build reported success but uploaded no artifact".into(),
                }),
            }
        };
        let upload = Key::from(upload_key);
        match self.size(&upload).await.map_err(reading)? {
            None => return uploaded_nothing().await,
            Some(size) if size > self.max_bytes => return Err(too_big(size, self.max_bytes)),
            Some(_) => {}
        }
        let checking = Key::from(format!("{upload_key}.checking"));
        match self.store.copy(&upload, &checking).await {
            Ok(()) => {}
            Err(object_store::Error::NotFound { .. }) => return uploaded_nothing().await,
            Err(e) => return Err(reading(e)),
        }
        let accepting = async {
            let size = self.check(&checking, reported).await?;
            self.store
                .rename(&checking, &accepted)
                .await
                .map_err(|e| BuildError::Internal(format!("storing the artifact: {e}")))?;
            Ok(size)
        };
        let accepted = accepting.await;
        if accepted.is_err() {
            self.drop_archive(checking.as_ref()).await;
        }
        self.drop_archive(upload_key).await;
        accepted.map(|size| (reported.to_string(), size))
    }

    /// The size of the tarball at `key`, once its sha256, read as it
    /// comes, is `reported`.
    async fn check(&self, key: &Key, reported: &str) -> Result<u64, BuildError> {
        let upload = self.store.get(key).await.map_err(reading)?;
        let size = upload.meta.size;
        if size > self.max_bytes {
            return Err(too_big(size, self.max_bytes));
        }
        let mut hasher = Sha256::new();
        let mut chunks = upload.into_stream();
        while let Some(chunk) = chunks.try_next().await.map_err(reading)? {
            hasher.update(&chunk);
        }
        let actual = hex::encode(hasher.finalize());
        if actual != reported {
            return Err(BuildError::Failed {
                log_tail: format!(
                    "the uploaded artifact has sha256 {actual}, not the {reported} its build reported: refused"
                ),
            });
        }
        Ok(size)
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
