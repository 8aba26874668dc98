//! Artifacts kept in an object store as
//! `artifacts/{fingerprint}/{sha256}.tar.gz`, where replicas (local
//! driver) or pods (Kubernetes) fetch them: the listing a leader's sweep
//! compares with the versions that use them, and their removal.

use std::collections::HashMap;
use std::time::SystemTime;

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::{DriverError, Fingerprint};

/// Every artifact with a tarball in `store`, with when its newest tarball
/// was written.
pub async fn stored_artifacts(store: &dyn ObjectStore) -> Result<Vec<(Fingerprint, SystemTime)>, DriverError> {
    let mut newest: HashMap<String, chrono::DateTime<chrono::Utc>> = HashMap::new();
    let mut listing = store.list(Some(&Path::from("artifacts")));
    while let Some(meta) = listing
        .try_next()
        .await
        .map_err(|e| DriverError::Unavailable(format!("listing the stored artifacts: {e}")))?
    {
        let Some(fingerprint) = meta.location.parts().nth(1) else {
            continue;
        };
        let written = newest
            .entry(fingerprint.as_ref().to_string())
            .or_insert(meta.last_modified);
        *written = (*written).max(meta.last_modified);
    }
    Ok(newest
        .into_iter()
        .map(|(fingerprint, written)| (Fingerprint::from_stored(fingerprint), written.into()))
        .collect())
}

/// Deletes every tarball of `artifact` in `store` (no version uses it any
/// more); one already gone is not an error.
pub async fn remove_stored_artifact(store: &dyn ObjectStore, artifact: &Fingerprint) -> Result<(), DriverError> {
    let prefix = Path::from(format!("artifacts/{artifact}"));
    let keys: Vec<Path> = store
        .list(Some(&prefix))
        .map_ok(|meta| meta.location)
        .try_collect()
        .await
        .map_err(|e| DriverError::Unavailable(format!("listing artifact {artifact}: {e}")))?;
    for key in keys {
        match store.delete(&key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(DriverError::Unavailable(format!("deleting {key}: {e}"))),
        }
    }
    Ok(())
}
