//! A real S3-compatible server for tests and benches: `s3s-fs` on a
//! loopback port, storing in a private directory. The fake cluster's pods
//! fetch their artifacts from it and its builds upload to it; the API
//! tests use it as a server's object store.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A real S3-compatible server (`s3s-fs`, installed by `scripts/setup.sh`)
/// on a loopback port, storing in a private directory; one bucket made.
pub struct S3Server {
    pub endpoint: String,
    pub bucket: String,
    pub root: tempfile::TempDir,
    child: Child,
}

pub const S3_KEY: &str = "sless-test-key";
pub const S3_SECRET: &str = "sless-test-secret-0123456789";

impl S3Server {
    pub async fn start() -> S3Server {
        let root = tempfile::tempdir().expect("temp dir");
        let bucket = "sless-test".to_string();
        std::fs::create_dir(root.path().join(&bucket)).expect("bucket dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let child = Command::new("s3s-fs")
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", S3_KEY, "--secret-key", S3_SECRET])
            .arg(root.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("s3s-fs is required for these tests: run scripts/setup.sh --services");
        let server = S3Server {
            endpoint: format!("http://127.0.0.1:{port}"),
            bucket,
            root,
            child,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(
                Instant::now() < deadline,
                "s3s-fs did not listen on 127.0.0.1:{port} within 20s"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        server
    }

    /// The server settings that store code (and artifacts) in this bucket.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("SLESS_BLOB_URL", format!("s3://{}/sless", self.bucket)),
            ("SLESS_S3_ENDPOINT", self.endpoint.clone()),
            ("SLESS_S3_ACCESS_KEY_ID", S3_KEY.into()),
            ("SLESS_S3_SECRET_ACCESS_KEY", S3_SECRET.into()),
            ("SLESS_S3_PATH_STYLE", "true".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// The object store settings of this bucket under the prefix `sless`,
    /// as a server (or a pod) opens it.
    pub fn blob_settings(&self) -> sless_server::blobs::BlobSettings {
        sless_server::blobs::BlobSettings {
            url: format!("s3://{}/sless", self.bucket),
            s3: sless_server::blobs::S3Options {
                endpoint: Some(self.endpoint.clone()),
                region: "us-east-1".into(),
                access_key_id: Some(S3_KEY.into()),
                secret_access_key: Some(S3_SECRET.into()),
                path_style: true,
            },
        }
    }

    /// Object keys stored under `prefix` (s3s-fs keeps them as files).
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        fn walk(dir: &std::path::Path, base: &std::path::Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, base, out);
                } else if let Ok(rel) = path.strip_prefix(base) {
                    out.push(rel.display().to_string());
                }
            }
        }
        let base = self.root.path().join(&self.bucket);
        let mut keys = Vec::new();
        walk(&base, &base, &mut keys);
        keys.retain(|k| k.starts_with(prefix));
        keys.sort();
        keys
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
