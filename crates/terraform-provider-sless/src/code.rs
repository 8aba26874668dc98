//! Function code: the zip that `filename` names, its sha256 (`code_hash`,
//! the same hex digest as Terraform's `filesha256`), the upload and the wait
//! for its build.

use std::time::Duration;

use sha2::{Digest, Sha256};
use sless_api::Function;
use sless_client::{Client, Wait};

/// Extra time to wait past the function's `build_timeout_sec`: the server
/// fails a build at that limit, so this only covers queueing and polling.
const WAIT_MARGIN: Duration = Duration::from_secs(60);

/// A zip read from disk.
pub struct Archive {
    pub bytes: Vec<u8>,
    pub sha256: String,
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// True for a lowercase or uppercase 64-digit hex string.
pub fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64 && text.chars().all(|c| c.is_ascii_hexdigit())
}

/// Reads the zip at `path` (relative to Terraform's working directory).
pub async fn read_archive(path: &str) -> Result<Archive, String> {
    match tokio::fs::read(path).await {
        Ok(bytes) => Ok(Archive {
            sha256: sha256_hex(&bytes),
            bytes,
        }),
        Err(e) => Err(format!(
            "cannot read {path:?}: {e}. filename is the path of a zip of the function's code, \
             relative to the directory Terraform runs in, e.g. (cd examples/hello-python && zip -r ../../hello-python.zip .)"
        )),
    }
}

/// The sha256 of the file at `path` when it can be read now (at plan time);
/// `None` when it cannot (it may be written before the apply).
pub fn file_sha256(path: &str) -> Option<String> {
    std::fs::read(path).ok().map(|bytes| sha256_hex(&bytes))
}

/// Uploads `archive` and waits until its build has ended; the function that
/// comes back is `Ready` or `Failed` (the build log's tail in
/// `status.message`).
pub async fn upload_and_build(
    client: &Client,
    namespace: &str,
    name: &str,
    archive: Archive,
    build_timeout_sec: u32,
) -> sless_client::Result<Function> {
    let hash = archive.sha256;
    client.upload_code(namespace, name, archive.bytes).await?;
    let wait = Wait::new(Duration::from_secs(build_timeout_sec.into()) + WAIT_MARGIN);
    client.wait_for_build(namespace, name, &hash, wait, |_| {}).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_lowercase_sha256_hex_like_filesha256() {
        let hash = sha256_hex(b"abc");
        assert_eq!(hash, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert!(is_sha256_hex(&hash));
        assert!(!is_sha256_hex("abc"));
        assert!(!is_sha256_hex(&"g".repeat(64)));
    }

    #[tokio::test]
    async fn a_missing_zip_says_how_to_make_one() {
        let err = read_archive("/nonexistent/code.zip").await.err().unwrap();
        assert!(err.contains("/nonexistent/code.zip"), "{err}");
        assert!(err.contains("zip -r"), "{err}");
    }
}
