//! A path a build or a publish writes before its result has its place (a
//! build's `.build-*` directory, an artifact's `.pack-*` tarball), removed
//! when dropped: a build stopped half-way (the server drops it when its
//! function no longer awaits it) leaves nothing, as one that failed does.

use std::path::{Path, PathBuf};

use super::confine::off_the_runtime;

/// A file or directory removed (whole) when this is dropped; one renamed
/// into its place first is gone from here already.
pub(crate) struct Scrap {
    path: PathBuf,
}

impl Scrap {
    pub(crate) fn new(path: PathBuf) -> Scrap {
        Scrap { path }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Scrap {
    fn drop(&mut self) {
        let path = std::mem::take(&mut self.path);
        off_the_runtime(move || {
            let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
        });
    }
}
