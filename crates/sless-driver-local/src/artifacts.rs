//! Built artifacts shared through an object store, so that a replica that
//! did not build a version can still run it. After a build the artifact
//! directory is packed as a gzipped tarball and stored content-addressed,
//! `artifacts/{fingerprint}/{sha256}.tar.gz`; the sha256 goes back to the
//! caller (who records it with the version) and is kept beside the local
//! directory (`{fingerprint}.sha256`). A machine without the directory
//! fetches the tarball a deploy names, checks its sha256 and unpacks it.
//!
//! Two builds of one fingerprint (the same code uploaded to two functions,
//! or built on two replicas) each store their own tarball under its own
//! sha256, so neither overwrites what the other recorded; on one machine a
//! lock per fingerprint makes the second reuse the first one's tarball,
//! once it has checked that the tarball is still stored. An artifact no
//! version uses any more has all its tarballs deleted
//! ([`SharedArtifacts::remove`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::TryStreamExt;
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt};
use sha2::{Digest, Sha256};
use sless_driver::Fingerprint;

use super::scrap::Scrap;

/// Artifacts in the shared object store.
pub struct SharedArtifacts {
    store: Arc<dyn ObjectStore>,
    /// One lock per fingerprint: packing or fetching it happens once at a time.
    locks: Mutex<HashMap<Fingerprint, Arc<tokio::sync::Mutex<()>>>>,
}

impl SharedArtifacts {
    pub fn new(store: Arc<dyn ObjectStore>) -> SharedArtifacts {
        SharedArtifacts {
            store,
            locks: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self, artifact: &Fingerprint) -> Arc<tokio::sync::Mutex<()>> {
        self.locks.lock().unwrap().entry(artifact.clone()).or_default().clone()
    }

    /// Where the tarball of `artifact` with `digest` is kept.
    pub fn key(artifact: &Fingerprint, digest: &str) -> Key {
        Key::from(format!("artifacts/{artifact}/{digest}.tar.gz"))
    }

    /// Stores the artifact in `dir` unless its tarball, stored (or fetched)
    /// before, is still in the object store; returns the sha256 of its
    /// tarball. A build that reuses `dir` comes here too: the tarball it
    /// recorded may have been removed since (no version used it for a
    /// while, or a server before this one removed it on a follower's
    /// delete), and a replica without `dir` could not serve the version.
    pub async fn publish(&self, dir: &Path, artifact: &Fingerprint) -> Result<String, String> {
        let lock = self.lock(artifact);
        let _held = lock.lock().await;
        if let Some(digest) = recorded_digest(dir) {
            match self.store.head(&Self::key(artifact, &digest)).await {
                Ok(_) => return Ok(digest),
                Err(object_store::Error::NotFound { .. }) => {
                    tracing::info!(%artifact, %digest, "the artifact's tarball left the object store: storing it again")
                }
                Err(e) => return Err(format!("looking for the artifact's tarball: {e}")),
            }
        }
        let parent = dir.parent().ok_or("artifact directory has no parent")?;
        let tarball = Scrap::new(parent.join(format!(".pack-{:08x}.tar.gz", rand::random::<u32>())));
        let digest = self.store_packed(dir, artifact, tarball.path()).await?;
        record_digest(dir, &digest).map_err(|e| format!("recording the artifact's digest: {e}"))?;
        tracing::info!(%artifact, %digest, "artifact stored in the object store");
        Ok(digest)
    }

    /// Packs `dir` into the file `tarball`, then streams that into the
    /// store; returns its sha256.
    async fn store_packed(&self, dir: &Path, artifact: &Fingerprint, tarball: &Path) -> Result<String, String> {
        let (source, to) = (dir.to_path_buf(), tarball.to_path_buf());
        let (digest, _) = tokio::task::spawn_blocking(move || pack(&source, &to))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("packing the artifact: {e}"))?;
        let storing = |e: std::io::Error| format!("storing the artifact: {e}");
        let mut file = tokio::fs::File::open(tarball).await.map_err(storing)?;
        let mut upload = object_store::buffered::BufWriter::new(self.store.clone(), Self::key(artifact, &digest));
        if let Err(e) = tokio::io::copy(&mut file, &mut upload).await {
            let _ = upload.abort().await;
            return Err(storing(e));
        }
        tokio::io::AsyncWriteExt::shutdown(&mut upload).await.map_err(storing)?;
        Ok(digest)
    }

    /// Whether any tarball of `artifact` is in the object store.
    pub async fn exists(&self, artifact: &Fingerprint) -> Result<bool, String> {
        let prefix = Key::from(format!("artifacts/{artifact}"));
        let first = self
            .store
            .list(Some(&prefix))
            .try_next()
            .await
            .map_err(|e| format!("listing artifacts: {e}"))?;
        Ok(first.is_some())
    }

    /// Every artifact with a tarball here, with when it was last written.
    pub async fn stored(&self) -> Result<Vec<(Fingerprint, std::time::SystemTime)>, sless_driver::DriverError> {
        sless_driver::stored_artifacts(&*self.store).await
    }

    /// Deletes every tarball of `artifact` (no version uses it any more).
    pub async fn remove(&self, artifact: &Fingerprint) -> Result<(), sless_driver::DriverError> {
        sless_driver::remove_stored_artifact(&*self.store, artifact).await
    }

    /// Makes `dir` hold `artifact`: fetches its tarball with `digest`, checks
    /// the sha256 and unpacks it. Nothing to do when `dir` is there.
    pub async fn fetch(&self, dir: &Path, artifact: &Fingerprint, digest: &str) -> Result<(), String> {
        let lock = self.lock(artifact);
        let _held = lock.lock().await;
        if dir.is_dir() {
            return Ok(());
        }
        let key = Self::key(artifact, digest);
        let tarball = self
            .store
            .get(&key)
            .await
            .map_err(|e| format!("fetching artifact {key}: {e}"))?
            .into_stream();
        unpack_checked(tarball, dir, digest)
            .await
            .map_err(|e| format!("artifact {key} {e}"))?;
        tracing::info!(%artifact, %digest, "artifact fetched from the object store");
        Ok(())
    }
}

/// Receives a tarball as `chunks` into a file beside `dir`, hashing it on
/// the way (never whole in memory: an artifact may be far larger than the
/// memory of the pod that fetches it), checks that its sha256 is `digest`,
/// unpacks it beside `dir` and renames it into place (a reader sees all or
/// nothing), then records the digest. Nothing to do when `dir` is there.
pub(crate) async fn unpack_checked<S, E>(chunks: S, dir: &Path, digest: &str) -> Result<(), String>
where
    S: futures::Stream<Item = Result<bytes::Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    if dir.is_dir() {
        return Ok(());
    }
    let parent = dir.parent().ok_or("artifact directory has no parent")?.to_path_buf();
    let name = format!(".fetch-{:08x}", rand::random::<u32>());
    let (work, tarball) = (parent.join(&name), parent.join(format!("{name}.tar.gz")));
    let unpacked = async {
        let got = receive(chunks, &tarball).await?;
        if got != digest {
            return Err(format!(
                "is corrupt: its sha256 is {got}, the version recorded {digest}"
            ));
        }
        let (from, target) = (tarball.clone(), work.clone());
        tokio::task::spawn_blocking(move || unpack(std::fs::File::open(&from)?, &target))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| {
                let _ = std::fs::remove_dir_all(&work);
                format!("could not be unpacked: {e}")
            })
    }
    .await;
    let _ = std::fs::remove_file(&tarball);
    unpacked?;
    if let Err(e) = std::fs::rename(&work, dir) {
        let _ = std::fs::remove_dir_all(&work);
        if !dir.is_dir() {
            return Err(format!("saving fetched artifact: {e}"));
        }
    }
    record_digest(dir, digest).map_err(|e| format!("recording the artifact's digest: {e}"))
}

/// Writes `chunks` to `path`; returns their sha256.
async fn receive<S, E>(mut chunks: S, path: &Path) -> Result<String, String>
where
    S: futures::Stream<Item = Result<bytes::Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    use futures::StreamExt;
    use tokio::io::AsyncWriteExt;
    let saving = |e: std::io::Error| format!("could not be saved: {e}");
    let mut file = tokio::fs::File::create(path).await.map_err(saving)?;
    let mut hasher = Sha256::new();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| format!("could not be fetched: {e}"))?;
        hasher.update(&chunk);
        file.write_all(&chunk).await.map_err(saving)?;
    }
    file.flush().await.map_err(saving)?;
    Ok(hex::encode(hasher.finalize()))
}

/// The file beside an artifact directory that holds its tarball's sha256.
fn digest_file(dir: &Path) -> PathBuf {
    let mut name = dir.as_os_str().to_owned();
    name.push(".sha256");
    PathBuf::from(name)
}

fn recorded_digest(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(digest_file(dir)).ok()?;
    let digest = text.trim();
    (digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit())).then(|| digest.to_string())
}

/// Written to a temporary name and renamed: a reader sees all or nothing.
fn record_digest(dir: &Path, digest: &str) -> std::io::Result<()> {
    let file = digest_file(dir);
    let tmp = file.with_extension(format!("sha256.{:08x}", rand::random::<u32>()));
    std::fs::write(&tmp, digest)?;
    std::fs::rename(&tmp, &file)
}

/// The bytes of the files under `dir` (links not followed).
pub(crate) fn bytes_under(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                folders.push(entry.path());
            } else if kind.is_file() {
                total += entry.metadata()?.len();
            }
        }
    }
    Ok(total)
}

/// The directory as a gzipped tarball (symlinks kept as links, modes kept).
/// Packs `dir` into the gzipped tarball `to` (never whole in memory: an
/// artifact may be 1 GiB); returns its sha256 and size.
pub(crate) fn pack(dir: &Path, to: &Path) -> std::io::Result<(String, u64)> {
    let file = std::io::BufWriter::new(std::fs::File::create(to)?);
    let hashing = Hashing {
        inner: file,
        hasher: Sha256::new(),
        bytes: 0,
    };
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(hashing, flate2::Compression::fast()));
    tar.follow_symlinks(false);
    tar.mode(tar::HeaderMode::Complete);
    tar.append_dir_all(".", dir)?;
    let mut hashing = tar.into_inner()?.finish()?;
    std::io::Write::flush(&mut hashing.inner)?;
    Ok((hex::encode(hashing.hasher.finalize()), hashing.bytes))
}

/// Writes through to `inner`, hashing and counting what passes.
struct Hashing<W> {
    inner: W,
    hasher: Sha256,
    bytes: u64,
}

impl<W: std::io::Write> std::io::Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn unpack(tarball: impl std::io::Read, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(std::io::BufReader::new(tarball)));
    archive.set_preserve_permissions(true);
    archive.set_overwrite(false);
    archive.unpack(dir)?;
    // The tree is read by sandboxed users of their own: a directory they
    // can enter, files they can read.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn publish_then_fetch_elsewhere_checks_the_digest() {
        let root = std::env::temp_dir().join(format!("sless-artifacts-{:08x}", rand::random::<u32>()));
        let blobs = root.join("blobs");
        std::fs::create_dir_all(&blobs).unwrap();
        let store: Arc<dyn ObjectStore> =
            Arc::new(object_store::local::LocalFileSystem::new_with_prefix(&blobs).unwrap());
        let shared = SharedArtifacts::new(store.clone());
        let artifact = Fingerprint::from_stored("f00d");
        let built = root.join("a").join("f00d");
        std::fs::create_dir_all(built.join("pkg")).unwrap();
        std::fs::write(built.join("handler.py"), "x = 1\n").unwrap();
        std::fs::write(built.join("pkg/mod.py"), "y = 2\n").unwrap();
        std::os::unix::fs::symlink("handler.py", built.join("link.py")).unwrap();

        let digest = shared.publish(&built, &artifact).await.unwrap();
        assert_eq!(
            shared.publish(&built, &artifact).await.unwrap(),
            digest,
            "published once"
        );
        assert!(shared.exists(&artifact).await.unwrap());
        assert!(!shared.exists(&Fingerprint::from_stored("beef")).await.unwrap());

        let elsewhere = root.join("b").join("f00d");
        std::fs::create_dir_all(elsewhere.parent().unwrap()).unwrap();
        shared.fetch(&elsewhere, &artifact, &digest).await.unwrap();
        assert_eq!(
            std::fs::read_to_string(elsewhere.join("pkg/mod.py")).unwrap(),
            "y = 2\n"
        );
        assert_eq!(
            std::fs::read_link(elsewhere.join("link.py")).unwrap(),
            Path::new("handler.py")
        );
        assert_eq!(recorded_digest(&elsewhere).as_deref(), Some(digest.as_str()));
        let beside = |dir: &Path| -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(dir.parent().unwrap())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        assert_eq!(
            beside(&elsewhere),
            ["f00d", "f00d.sha256"],
            "the tarball it came as is gone"
        );

        let wrong = "0".repeat(64);
        let third = root.join("c").join("f00d");
        std::fs::create_dir_all(third.parent().unwrap()).unwrap();
        store
            .put(
                &SharedArtifacts::key(&artifact, &wrong),
                bytes::Bytes::from_static(b"not it").into(),
            )
            .await
            .unwrap();
        let refused = shared.fetch(&third, &artifact, &wrong).await.unwrap_err();
        assert!(refused.contains("corrupt"), "{refused}");
        assert!(!third.exists());
        assert_eq!(
            beside(&third),
            Vec::<String>::new(),
            "nothing left of the refused tarball"
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
