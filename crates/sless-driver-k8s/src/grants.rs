//! Upload grants: a build pod holds no object-store credentials. For each
//! build the server presigns two URLs, valid until the build's deadline:
//! GET of the build's archive and PUT of its artifact tarball at the
//! build's staging key. A dependency's install script in that pod can so
//! read its own archive and write its own staging key, and nothing else;
//! what it writes becomes an artifact only once the server has hashed it
//! ([`crate::artifacts::Artifacts::accept`]).

use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path as Key;
use object_store::signer::{Method, Signer};
use sless_driver::DriverError;

/// The two URLs of one build.
#[derive(Clone, PartialEq, Eq)]
pub struct BuildGrant {
    /// GET: the uploaded archive.
    pub archive_url: String,
    /// PUT: the artifact tarball, at the staging key.
    pub upload_url: String,
}

/// The URLs are credentials while they last: never printed.
impl std::fmt::Debug for BuildGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BuildGrant { .. }")
    }
}

/// Presigns the URLs of one build: `archive_key` to read, `upload_key` to
/// write, for `valid_for`.
pub async fn build_grant(
    signer: &Arc<dyn Signer>,
    archive_key: &str,
    upload_key: &str,
    valid_for: Duration,
) -> Result<BuildGrant, DriverError> {
    let sign = |method: Method, key: &str| {
        let key = Key::from(key);
        async move {
            signer
                .signed_url(method, &key, valid_for)
                .await
                .map(String::from)
                .map_err(|e| DriverError::Unavailable(format!("presigning a build's URL for {key}: {e}")))
        }
    };
    Ok(BuildGrant {
        archive_url: sign(Method::GET, archive_key).await?,
        upload_url: sign(Method::PUT, upload_key).await?,
    })
}
