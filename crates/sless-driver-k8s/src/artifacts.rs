//! The artifacts of the cluster shape live only in the object store,
//! under the local driver's layout (`artifacts/{fingerprint}/{sha256}.tar.gz`,
//! which `sless instance fetch` reads); an archive waiting for its build
//! Job, and the tarball the Job uploads before the server accepts it, are
//! kept under `builds/`.

use std::sync::Arc;

use futures::TryStreamExt;
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, WriteMultipart};
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

/// Parts of an artifact being written at once (5 MiB each).
const PARTS_IN_FLIGHT: usize = 2;

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
    /// that sha256 and the tarball's size. The upload is read once, hashed
    /// as it comes (never whole in memory: it may be gigabytes) and written
    /// as it comes to `artifacts/{artifact}/{sha256}.tar.gz` as a multipart
    /// upload, which appears there only once the hash is the one reported:
    /// the bytes are written once, and what is hashed is what is kept, so a
    /// pod writing its staging key again meanwhile or later changes
    /// nothing. A tarball another replica accepted first (the two shared
    /// the Job) is taken as it is.
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
        let upload = match self.store.get(&Key::from(upload_key)).await {
            Ok(upload) => upload,
            // Gone: another replica that shared the Job accepted it first.
            Err(object_store::Error::NotFound { .. }) => {
                return match self.size(&accepted).await.map_err(reading)? {
                    Some(size) => Ok((reported.to_string(), size)),
                    None => Err(BuildError::Failed {
                        log_tail: "the build reported success but uploaded no artifact".into(),
                    }),
                };
            }
            Err(e) => return Err(reading(e)),
        };
        let accepting = self.keep_checked(upload, &accepted, reported).await;
        self.drop_archive(upload_key).await;
        accepting.map(|size| (reported.to_string(), size))
    }

    /// Writes the tarball `upload` streams to `accepted` as it is read,
    /// hashing it; the object is completed (and appears) only when its
    /// sha256 is `reported`, else the upload is aborted and nothing stays.
    /// Returns its size.
    async fn keep_checked(
        &self,
        upload: object_store::GetResult,
        accepted: &Key,
        reported: &str,
    ) -> Result<u64, BuildError> {
        let size = upload.meta.size;
        if size > self.max_bytes {
            return Err(too_big(size, self.max_bytes));
        }
        let storing = |e: object_store::Error| BuildError::Internal(format!("storing the artifact: {e}"));
        let mut writer = WriteMultipart::new(self.store.put_multipart(accepted).await.map_err(storing)?);
        let mut hasher = Sha256::new();
        let mut chunks = upload.into_stream();
        let copied = async {
            while let Some(chunk) = chunks.try_next().await.map_err(reading)? {
                hasher.update(&chunk);
                writer.wait_for_capacity(PARTS_IN_FLIGHT).await.map_err(storing)?;
                writer.put(chunk);
            }
            Ok(())
        }
        .await;
        let actual = hex::encode(hasher.finalize());
        let checked = copied.and_then(|()| match actual == reported {
            true => Ok(()),
            false => Err(BuildError::Failed {
                log_tail: format!(
                    "the uploaded artifact has sha256 {actual}, not the {reported} its build reported: refused"
                ),
            }),
        });
        if let Err(e) = checked {
            if let Err(left) = writer.abort().await {
                tracing::warn!(key = %accepted, error = %left, "aborting a refused artifact's upload");
            }
            return Err(e);
        }
        writer.finish().await.map_err(storing)?;
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
