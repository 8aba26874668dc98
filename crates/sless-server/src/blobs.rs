//! Code archives (and, when replicas share state, built artifacts) live in
//! an object store: a local directory for the embedded default, an
//! S3-compatible bucket for the cluster shape, with no caller knowing which.
//! An S3 store is tried once at start (a probe object written and deleted),
//! so a missing bucket or refused credentials stop the server there with a
//! message naming the setting.

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::signer::{Method, Signer, Url};
use object_store::{ObjectStore, ObjectStoreExt, RetryConfig};

/// How to reach the code store (from `Config`).
#[derive(Debug, Clone)]
pub struct BlobSettings {
    /// `file://DIR` or `s3://BUCKET[/PREFIX]`.
    pub url: String,
    pub s3: S3Options,
}

/// How an S3-compatible store is reached: the `SLESS_S3_*` settings, which
/// the server and a function's pod (`sless instance`) read alike.
#[derive(Debug, Clone, clap::Args)]
pub struct S3Options {
    /// S3 endpoint URL (MinIO, Ceph RGW, a local test server); default: AWS for the region.
    #[arg(long = "s3-endpoint", value_name = "S3_ENDPOINT", env = "SLESS_S3_ENDPOINT")]
    pub endpoint: Option<String>,

    /// S3 region.
    #[arg(
        long = "s3-region",
        value_name = "S3_REGION",
        env = "SLESS_S3_REGION",
        default_value = "us-east-1"
    )]
    pub region: String,

    /// S3 access key id; default: the usual AWS sources (AWS_ACCESS_KEY_ID, instance metadata).
    #[arg(
        long = "s3-access-key-id",
        value_name = "S3_ACCESS_KEY_ID",
        env = "SLESS_S3_ACCESS_KEY_ID"
    )]
    pub access_key_id: Option<String>,

    /// S3 secret access key.
    #[arg(
        long = "s3-secret-access-key",
        value_name = "S3_SECRET_ACCESS_KEY",
        env = "SLESS_S3_SECRET_ACCESS_KEY",
        hide_env_values = true
    )]
    pub secret_access_key: Option<String>,

    /// Path-style S3 addressing (`ENDPOINT/BUCKET/KEY`), which MinIO and Ceph RGW need.
    #[arg(long = "s3-path-style", value_name = "S3_PATH_STYLE", env = "SLESS_S3_PATH_STYLE", default_value_t = false, action = clap::ArgAction::Set)]
    pub path_style: bool,
}

/// Opens the object store named by `settings.url`.
pub async fn open(settings: &BlobSettings) -> anyhow::Result<Arc<dyn ObjectStore>> {
    open_checked(settings, true).await
}

/// Opens the object store with credentials that may only read (a function
/// pod fetching its artifact): the probe at start lists, writes nothing.
pub async fn open_for_reading(settings: &BlobSettings) -> anyhow::Result<Arc<dyn ObjectStore>> {
    open_checked(settings, false).await
}

async fn open_checked(settings: &BlobSettings, writes: bool) -> anyhow::Result<Arc<dyn ObjectStore>> {
    let url = &settings.url;
    if let Some(rest) = url.strip_prefix("s3://") {
        return open_s3(settings, rest, writes).await;
    }
    let dir = url
        .strip_prefix("file://")
        .ok_or_else(|| anyhow::anyhow!("SLESS_BLOB_URL {url:?}: expected file://DIR or s3://BUCKET[/PREFIX]"))?;
    std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("creating code store directory {dir:?}: {e}"))?;
    // A delete removes the directories it leaves empty: a tenant creating
    // and deleting functions under new names would otherwise leave two
    // (`archives/{ns}/{function}`) for each, without bound.
    let store = LocalFileSystem::new_with_prefix(dir)
        .map_err(|e| anyhow::anyhow!("opening code store directory {dir:?}: {e}"))?
        .with_automatic_cleanup(true);
    Ok(Arc::new(store))
}

/// An S3 bucket (under a prefix), checked by writing and deleting a probe.
async fn open_s3(
    settings: &BlobSettings,
    bucket_and_prefix: &str,
    writes: bool,
) -> anyhow::Result<Arc<dyn ObjectStore>> {
    let (s3, bucket, prefix) = s3_client(settings, bucket_and_prefix)?;
    let store: Arc<dyn ObjectStore> = if prefix.is_empty() {
        Arc::new(s3)
    } else {
        Arc::new(PrefixStore::new(s3, prefix))
    };
    probe(&*store, settings, bucket, writes).await?;
    tracing::info!(bucket, prefix, endpoint = ?settings.s3.endpoint, "S3 code store reachable");
    Ok(store)
}

/// The S3 client of `s3://BUCKET[/PREFIX]`, its bucket and its prefix
/// (without slashes at either end).
fn s3_client<'a>(settings: &BlobSettings, bucket_and_prefix: &'a str) -> anyhow::Result<(AmazonS3, &'a str, &'a str)> {
    // reqwest 0.13 (object_store's client) uses rustls without a built-in
    // crypto provider: ring, installed once for the process.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (bucket, prefix) = bucket_and_prefix.split_once('/').unwrap_or((bucket_and_prefix, ""));
    let mut builder = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_region(&settings.s3.region)
        .with_virtual_hosted_style_request(!settings.s3.path_style)
        .with_retry(RetryConfig {
            max_retries: 4,
            retry_timeout: Duration::from_secs(30),
            ..RetryConfig::default()
        });
    if let Some(endpoint) = &settings.s3.endpoint {
        let endpoint = endpoint.trim_end_matches('/');
        builder = builder.with_allow_http(endpoint.starts_with("http://"));
        builder = if settings.s3.path_style {
            builder.with_endpoint(endpoint)
        } else {
            // Virtual-hosted style: the bucket is part of the host name.
            let (scheme, host) = endpoint.split_once("://").unwrap_or(("https", endpoint));
            builder.with_endpoint(format!("{scheme}://{bucket}.{host}"))
        };
    }
    if let (Some(id), Some(secret)) = (&settings.s3.access_key_id, &settings.s3.secret_access_key) {
        builder = builder.with_access_key_id(id).with_secret_access_key(secret);
    }
    let s3 = builder
        .build()
        .map_err(|e| anyhow::anyhow!("SLESS_BLOB_URL {:?}: {e}", settings.url))?;
    Ok((s3, bucket, prefix.trim_matches('/')))
}

/// What makes presigned URLs (one method on one key, for a while) for keys
/// of the store [`open`] gives, so that a process without credentials (a
/// build pod) can read or write exactly those objects. Only S3 stores can.
pub fn signer(settings: &BlobSettings) -> anyhow::Result<Arc<dyn Signer>> {
    let Some(rest) = settings.url.strip_prefix("s3://") else {
        anyhow::bail!(
            "SLESS_BLOB_URL {:?}: presigned URLs need an S3-compatible store (s3://BUCKET)",
            settings.url
        );
    };
    let (s3, _, prefix) = s3_client(settings, rest)?;
    Ok(Arc::new(PrefixedSigner {
        s3,
        prefix: prefix.to_string(),
    }))
}

/// Signs keys under the store's prefix, as [`PrefixStore`] reads them.
#[derive(Debug)]
struct PrefixedSigner {
    s3: AmazonS3,
    prefix: String,
}

#[async_trait::async_trait]
impl Signer for PrefixedSigner {
    async fn signed_url(&self, method: Method, key: &Path, expires_in: Duration) -> object_store::Result<Url> {
        let full: Path = Path::from(self.prefix.as_str()).parts().chain(key.parts()).collect();
        self.s3.signed_url(method, &full, expires_in).await
    }
}

/// Lists the bucket (a missing bucket says so here; some servers would
/// create it on a write), then, with `writes`, writes and deletes one small
/// object, naming the setting to fix when the server refuses.
async fn probe(store: &dyn ObjectStore, settings: &BlobSettings, bucket: &str, writes: bool) -> anyhow::Result<()> {
    let key = Path::from(format!(".sless-probe-{:016x}", rand::random::<u64>()));
    let result = async {
        store.list_with_delimiter(None).await?;
        if !writes {
            return Ok(());
        }
        store.put(&key, bytes::Bytes::from_static(b"probe").into()).await?;
        store.delete(&key).await
    }
    .await;
    let Err(e) = result else { return Ok(()) };
    let text = e.to_string();
    let url = &settings.url;
    // Listing errors come back as generic ones: the S3 error code decides.
    let refused = [
        "SignatureDoesNotMatch",
        "InvalidAccessKeyId",
        "AccessDenied",
        "403 Forbidden",
    ]
    .iter()
    .any(|code| text.contains(code));
    Err(match e {
        _ if text.contains("NoSuchBucket") => {
            anyhow::anyhow!("SLESS_BLOB_URL {url:?}: bucket {bucket:?} does not exist on the S3 server ({text})")
        }
        object_store::Error::NotFound { .. } => anyhow::anyhow!(
            "SLESS_BLOB_URL {url:?}: bucket {bucket:?} was not found (check the bucket and SLESS_S3_ENDPOINT): {text}"
        ),
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
            refused_credentials(bucket, &text)
        }
        _ if refused => refused_credentials(bucket, &text),
        _ => anyhow::anyhow!(
            "SLESS_BLOB_URL {url:?} (SLESS_S3_ENDPOINT {:?}): the code store could not be written: {text}",
            settings.s3.endpoint.as_deref().unwrap_or("AWS")
        ),
    })
}

fn refused_credentials(bucket: &str, text: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "SLESS_S3_ACCESS_KEY_ID / SLESS_S3_SECRET_ACCESS_KEY: the S3 server refused the credentials for bucket {bucket:?}: {text}"
    )
}

/// Where a function's archive with the given sha256 is kept.
pub fn archive_key(namespace: &str, function: &str, code_hash: &str) -> Path {
    Path::from(format!("archives/{namespace}/{function}/{code_hash}.zip"))
}

/// The prefix holding every archive of a function.
pub fn function_prefix(namespace: &str, function: &str) -> Path {
    Path::from(format!("archives/{namespace}/{function}"))
}
