//! The scenarios' object store: object_store's in-memory one, with a log
//! of every write it takes (a put, a part of a multipart upload, a copy or
//! a rename), so that a scenario can tell how often bytes were written and
//! where, as the driver asked for it.

use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, ObjectStoreExt,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result, UploadPart,
};

/// One write: the key written, how, and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub key: String,
    pub how: &'static str,
    pub bytes: u64,
}

/// [`InMemory`] with a log of its writes.
#[derive(Debug, Default)]
pub struct Written {
    inner: InMemory,
    log: Arc<Mutex<Vec<Write>>>,
}

impl Written {
    pub fn new() -> Written {
        Written::default()
    }

    /// Every write so far, in order.
    pub fn writes(&self) -> Vec<Write> {
        self.log.lock().unwrap().clone()
    }
}

fn note(log: &Mutex<Vec<Write>>, key: &Path, how: &'static str, bytes: u64) {
    log.lock().unwrap().push(Write {
        key: key.to_string(),
        how,
        bytes,
    });
}

impl fmt::Display for Written {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Written({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for Written {
    async fn put_opts(&self, key: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        note(&self.log, key, "put", payload.content_length() as u64);
        self.inner.put_opts(key, payload, opts).await
    }

    async fn put_multipart_opts(&self, key: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        let upload = self.inner.put_multipart_opts(key, opts).await?;
        Ok(Box::new(Parts {
            upload,
            key: key.clone(),
            log: self.log.clone(),
        }))
    }

    async fn get_opts(&self, key: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(key, options).await
    }

    fn delete_stream(&self, keys: BoxStream<'static, Result<Path>>) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(keys)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let bytes = self.inner.head(from).await?.size;
        note(&self.log, to, "copy", bytes);
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        // In memory (and on S3) a rename is a copy, then a delete.
        let bytes = self.inner.head(from).await?.size;
        note(&self.log, to, "rename", bytes);
        self.inner.rename_opts(from, to, options).await
    }
}

/// A multipart upload whose parts are logged as they are sent.
#[derive(Debug)]
struct Parts {
    upload: Box<dyn MultipartUpload>,
    key: Path,
    log: Arc<Mutex<Vec<Write>>>,
}

#[async_trait]
impl MultipartUpload for Parts {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        note(&self.log, &self.key, "part", data.content_length() as u64);
        self.upload.put_part(data)
    }

    async fn complete(&mut self) -> Result<PutResult> {
        self.upload.complete().await
    }

    async fn abort(&mut self) -> Result<()> {
        self.upload.abort().await
    }
}
