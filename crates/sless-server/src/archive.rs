//! Upload rules for code archives: a zip is checked entry by entry before
//! anything is stored, and each refusal names the entry and the rule.

use std::io::{Cursor, Read};
use std::path::{Component, Path};

use crate::error::Error;

/// Limits an uploaded archive must stay within.
#[derive(Debug, Clone)]
pub struct ArchiveRules {
    pub max_unpacked_bytes: u64,
    pub max_entries: usize,
    /// Uncompressed/compressed ratio above which an entry looks like a bomb.
    pub max_ratio: u64,
    /// Entries smaller than this are never judged by ratio (tiny files compress well).
    pub ratio_floor_bytes: u64,
    /// Keep the files' contents (for the code-safety gate); without it an
    /// archive is checked in a fixed buffer, whatever it unpacks to.
    pub keep_contents: bool,
}

impl Default for ArchiveRules {
    fn default() -> Self {
        ArchiveRules {
            max_unpacked_bytes: 250 * 1024 * 1024,
            max_entries: 10_000,
            max_ratio: 200,
            ratio_floor_bytes: 256 * 1024,
            keep_contents: true,
        }
    }
}

/// One file of a checked archive; its contents only when the rules keep them.
#[derive(Debug, Clone)]
pub struct ArchiveFile {
    pub path: String,
    pub contents: Vec<u8>,
}

/// Bytes read from an entry at a time while it is checked.
const READ_BUFFER: usize = 64 * 1024;

/// What a checked archive holds.
#[derive(Debug, Default)]
pub struct Unpacked {
    pub files: Vec<ArchiveFile>,
    pub total_bytes: u64,
}

fn refuse(entry: Option<&str>, rule: &'static str, message: String) -> Error {
    Error::Archive {
        message,
        entry: entry.map(str::to_string),
        rule,
    }
}

const S_IFMT: u32 = 0o170000;
const S_IFLNK: u32 = 0o120000;

impl ArchiveRules {
    /// Checks every rule entry by entry and returns the archive's files,
    /// their real (not declared) sizes counted against the limits as they
    /// unpack. Only the contents kept (`keep_contents`) take memory; the
    /// rest streams through one buffer.
    pub fn check(&self, zip_bytes: &[u8]) -> Result<Unpacked, Error> {
        if zip_bytes.is_empty() {
            return Err(refuse(
                None,
                "not-empty",
                "code archive is empty: upload a zip file".into(),
            ));
        }
        let mut archive = zip::ZipArchive::new(Cursor::new(zip_bytes))
            .map_err(|e| refuse(None, "zip-format", format!("code archive is not a valid zip file: {e}")))?;
        if archive.len() > self.max_entries {
            return Err(refuse(
                None,
                "max-entries",
                format!(
                    "code archive has {} entries, more than the limit of {}",
                    archive.len(),
                    self.max_entries
                ),
            ));
        }
        let mut unpacked = Unpacked::default();
        for index in 0..archive.len() {
            let mut entry = archive
                .by_index(index)
                .map_err(|e| refuse(None, "zip-format", format!("entry #{index} cannot be read: {e}")))?;
            let name = entry.name().to_string();
            check_path(&name)?;
            let is_symlink = entry.unix_mode().is_some_and(|m| m & S_IFMT == S_IFLNK);
            if is_symlink {
                return Err(refuse(
                    Some(&name),
                    "no-symlinks",
                    format!("entry {name:?} is a symbolic link; symlinks are not allowed"),
                ));
            }
            if entry.is_dir() {
                continue;
            }
            let declared = entry.size();
            let compressed = entry.compressed_size().max(1);
            if declared >= self.ratio_floor_bytes && declared / compressed > self.max_ratio {
                return Err(refuse(
                    Some(&name),
                    "compression-ratio",
                    format!(
                        "entry {name:?} expands {}x ({} bytes from {}), above the limit of {}x: refused as a likely zip bomb",
                        declared / compressed,
                        declared,
                        compressed,
                        self.max_ratio
                    ),
                ));
            }
            let budget = self.max_unpacked_bytes - unpacked.total_bytes;
            if declared > budget {
                return Err(self.too_big(&name));
            }
            let mut contents = Vec::new();
            let mut actual = 0u64;
            let mut buffer = vec![0; READ_BUFFER];
            let mut limited = (&mut entry).take(budget + 1);
            loop {
                let n = limited.read(&mut buffer).map_err(|e| {
                    refuse(
                        Some(&name),
                        "zip-format",
                        format!("entry {name:?} cannot be unpacked: {e}"),
                    )
                })?;
                if n == 0 {
                    break;
                }
                actual += n as u64;
                if self.keep_contents {
                    contents.extend_from_slice(&buffer[..n]);
                }
            }
            if actual > budget {
                return Err(self.too_big(&name));
            }
            if actual >= self.ratio_floor_bytes && actual / compressed > self.max_ratio {
                return Err(refuse(
                    Some(&name),
                    "compression-ratio",
                    format!(
                        "entry {name:?} expands {}x, above the limit of {}x: refused as a likely zip bomb",
                        actual / compressed,
                        self.max_ratio
                    ),
                ));
            }
            unpacked.total_bytes += actual;
            unpacked.files.push(ArchiveFile { path: name, contents });
        }
        if unpacked.files.is_empty() {
            return Err(refuse(None, "not-empty", "code archive holds no files".into()));
        }
        Ok(unpacked)
    }

    fn too_big(&self, name: &str) -> Error {
        refuse(
            Some(name),
            "max-unpacked-size",
            format!(
                "code archive unpacks to more than {} bytes (limit reached at entry {name:?})",
                self.max_unpacked_bytes
            ),
        )
    }
}

/// Refuses absolute paths, `..` and anything else that could land outside the
/// function's directory.
fn check_path(name: &str) -> Result<(), Error> {
    if name.starts_with('/') || name.starts_with('\\') || name.as_bytes().get(1) == Some(&b':') {
        return Err(refuse(
            Some(name),
            "no-absolute-paths",
            format!("entry {name:?} has an absolute path; paths must be relative to the function's directory"),
        ));
    }
    if name.contains('\0') || name.contains('\\') {
        return Err(refuse(
            Some(name),
            "path-characters",
            format!("entry {name:?} has a NUL or backslash in its path"),
        ));
    }
    for component in Path::new(name).components() {
        match component {
            Component::ParentDir => {
                return Err(refuse(
                    Some(name),
                    "no-parent-dirs",
                    format!("entry {name:?} contains '..' and would escape the function's directory"),
                ))
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(refuse(
                    Some(name),
                    "no-absolute-paths",
                    format!("entry {name:?} has an absolute path; paths must be relative to the function's directory"),
                ))
            }
            Component::CurDir | Component::Normal(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_path;

    #[test]
    fn paths() {
        assert!(check_path("handler.py").is_ok());
        assert!(check_path("lib/a/b.js").is_ok());
        assert!(check_path("./x.py").is_ok());
        for bad in ["/etc/passwd", "../x", "a/../../x", "C:/x", "a\\..\\x"] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
    }
}
