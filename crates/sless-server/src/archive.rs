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

/// The longest path an entry may have: it is unpacked below the server's
/// own directories, and the kernel takes paths of 4096 bytes at most.
const MAX_PATH_BYTES: usize = 1024;
/// The longest name of one file or folder on Linux's file systems.
const MAX_NAME_BYTES: usize = 255;

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
                    "code archive has {} entries, more than the limit of {} (the server's SLESS_MAX_ARCHIVE_ENTRIES)",
                    archive.len(),
                    self.max_entries
                ),
            ));
        }
        let mut unpacked = Unpacked::default();
        let mut paths = Vec::with_capacity(archive.len());
        for index in 0..archive.len() {
            let mut entry = archive
                .by_index(index)
                .map_err(|e| refuse(None, "zip-format", format!("entry #{index} cannot be read: {e}")))?;
            let name = entry.name().to_string();
            check_path(&name)?;
            paths.push((name.clone(), entry.is_dir()));
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
        check_unique(paths)?;
        Ok(unpacked)
    }

    fn too_big(&self, name: &str) -> Error {
        refuse(
            Some(name),
            "max-unpacked-size",
            format!(
                "code archive unpacks to more than {} bytes (the server's SLESS_MAX_UNPACKED_BYTES; reached at entry {name:?})",
                self.max_unpacked_bytes
            ),
        )
    }
}

/// Refuses two entries that name one path (`a.py` and `./a.py` too), and a
/// file where another entry puts a folder: one would silently replace the
/// other, or unpacking would fail. `paths`: each entry's name and whether
/// it is a folder.
fn check_unique(paths: Vec<(String, bool)>) -> Result<(), Error> {
    let parts = |name: &str| -> Vec<String> {
        Path::new(name)
            .components()
            .filter_map(|c| match c {
                Component::Normal(part) => Some(part.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect()
    };
    let mut paths: Vec<(Vec<String>, String, bool)> =
        paths.into_iter().map(|(name, dir)| (parts(&name), name, dir)).collect();
    // Part by part, so whatever lies inside a path comes right after it.
    paths.sort_by(|a, b| a.0.cmp(&b.0));
    for pair in paths.windows(2) {
        let ((before, first, first_dir), (after, second, second_dir)) = (&pair[0], &pair[1]);
        if before == after && !(*first_dir && *second_dir) {
            return Err(refuse(
                Some(second),
                "unique-paths",
                format!("entries {first:?} and {second:?} name the same path; keep one"),
            ));
        }
        if !first_dir && after.len() > before.len() && after.starts_with(before) {
            return Err(refuse(
                Some(second),
                "unique-paths",
                format!("entry {second:?} lies inside {first:?}, which is a file"),
            ));
        }
    }
    Ok(())
}

/// Refuses absolute paths, `..` and anything else that could land outside the
/// function's directory, and paths too long to be made.
fn check_path(name: &str) -> Result<(), Error> {
    // A name is echoed back cut: a zip's names may be 64 KiB long.
    let shown = || crate::bounds::clip(name.to_string(), 2 * MAX_NAME_BYTES);
    if name.len() > MAX_PATH_BYTES {
        let shown = shown();
        return Err(refuse(
            Some(&shown),
            "path-length",
            format!(
                "entry {shown:?} has a path of {} bytes, more than the limit of {MAX_PATH_BYTES}",
                name.len()
            ),
        ));
    }
    if let Some(part) = name.split('/').find(|part| part.len() > MAX_NAME_BYTES) {
        let shown = shown();
        return Err(refuse(
            Some(&shown),
            "path-length",
            format!(
                "entry {shown:?} has a file or folder name of {} bytes, more than the limit of {MAX_NAME_BYTES}",
                part.len()
            ),
        ));
    }
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
    use super::{check_path, check_unique};

    #[test]
    fn paths() {
        assert!(check_path("handler.py").is_ok());
        assert!(check_path("lib/a/b.js").is_ok());
        assert!(check_path("./x.py").is_ok());
        for bad in ["/etc/passwd", "../x", "a/../../x", "C:/x", "a\\..\\x"] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
        let long_name = format!("a/{}.py", "b".repeat(253));
        assert!(check_path(&long_name).is_err(), "a name of 256 bytes");
        assert!(check_path(&format!("a/{}.py", "b".repeat(252))).is_ok(), "one of 255");
        let long_path = vec!["d"; 600].join("/");
        assert!(check_path(&long_path).is_err(), "a path of 1199 bytes");
        assert!(check_path(&long_path[..1024]).is_ok(), "one of 1024");
    }

    #[test]
    fn two_entries_cannot_name_one_path() {
        let check = |names: &[&str]| {
            let paths = names.iter().map(|n| (n.to_string(), n.ends_with('/'))).collect();
            check_unique(paths).map_err(|e| e.to_string())
        };
        assert!(check(&["a.py", "lib/", "lib/b.py", "lib/c/d.py", "lib.py", "lib-x/e.py"]).is_ok());
        assert!(check(&["lib/", "./lib/", "lib/b.py"]).is_ok(), "a folder listed twice");
        for names in [
            &["a.py", "a.py"][..],
            &["a.py", "./a.py"],
            &["x/y.py", "x//y.py"],
            &["x", "x/"],
            &["x", "x/y.py"],
            &["x/y.py", "lib.py", "x"],
            &["x", "x.py", "x/deep/er.py"],
        ] {
            assert!(check(names).is_err(), "{names:?}");
        }
    }
}
