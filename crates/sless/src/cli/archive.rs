//! Zipping a function's directory for upload: every regular file under it,
//! in a stable order with fixed timestamps (same files, same code hash),
//! without version-control, dependency and bytecode directories.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use zip::write::SimpleFileOptions;

/// Directories never shipped: dependencies are installed by the build.
const SKIPPED_DIRS: &[&str] = &[".git", ".hg", ".svn", "node_modules", "__pycache__"];

/// A zipped directory.
pub struct Archive {
    pub zip: Vec<u8>,
    pub files: usize,
    pub unpacked_bytes: u64,
    /// Symlinks left out (the server refuses them).
    pub skipped_links: Vec<PathBuf>,
}

/// Zips the files under `dir`.
pub fn zip_dir(dir: &Path) -> anyhow::Result<Archive> {
    let meta = fs::metadata(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    if !meta.is_dir() {
        bail!("{} is not a directory", dir.display());
    }
    let mut files = Vec::new();
    let mut skipped_links = Vec::new();
    collect(dir, Path::new(""), &mut files, &mut skipped_links)?;
    if files.is_empty() {
        bail!("nothing to deploy: {} has no files", dir.display());
    }
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let mut unpacked_bytes = 0;
    for relative in &files {
        let path = dir.join(relative);
        let contents = fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let executable = fs::metadata(&path)?.permissions().mode() & 0o111 != 0;
        let options = SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .last_modified_time(zip::DateTime::default())
            .unix_permissions(if executable { 0o755 } else { 0o644 });
        let name = relative
            .iter()
            .map(|part| part.to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        writer.start_file(name, options)?;
        writer.write_all(&contents)?;
        unpacked_bytes += contents.len() as u64;
    }
    let zip = writer.finish()?.into_inner();
    Ok(Archive {
        zip,
        files: files.len(),
        unpacked_bytes,
        skipped_links,
    })
}

/// Adds the regular files under `root/relative` to `files`, sorted by name.
fn collect(
    root: &Path,
    relative: &Path,
    files: &mut Vec<PathBuf>,
    skipped_links: &mut Vec<PathBuf>,
) -> anyhow::Result<()> {
    let dir = root.join(relative);
    let mut entries = fs::read_dir(&dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("cannot list {}", dir.display()))?;
    entries.sort_by_key(|entry| entry.file_name());
    for entry in entries {
        let name = entry.file_name();
        let path = relative.join(&name);
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            skipped_links.push(path);
        } else if kind.is_dir() {
            if !SKIPPED_DIRS.iter().any(|skip| name == *skip) {
                collect(root, &path, files, skipped_links)?;
            }
        } else if kind.is_file() && !name.to_string_lossy().ends_with(".pyc") {
            files.push(path);
        }
    }
    Ok(())
}

/// `1.2 KiB`, `3.4 MiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: &[&str] = &["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::{human_bytes, zip_dir};

    #[test]
    fn skips_vcs_dependencies_and_bytecode() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for (path, contents) in [
            ("handler.py", "x"),
            ("lib/util.py", "y"),
            (".git/config", "no"),
            ("node_modules/a/index.js", "no"),
            ("lib/__pycache__/util.cpython-311.pyc", "no"),
            ("stray.pyc", "no"),
        ] {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, contents).unwrap();
        }
        std::os::unix::fs::symlink("handler.py", root.join("link.py")).unwrap();
        let archive = zip_dir(root).unwrap();
        let zip = zip::ZipArchive::new(std::io::Cursor::new(archive.zip.clone())).unwrap();
        let names: Vec<_> = zip.file_names().collect();
        assert_eq!(names, ["handler.py", "lib/util.py"]);
        assert_eq!(archive.skipped_links, [std::path::PathBuf::from("link.py")]);
        // The same files zip to the same bytes (and so the same code hash).
        assert_eq!(zip_dir(root).unwrap().zip, archive.zip);
    }

    #[test]
    fn sizes_for_people() {
        assert_eq!(human_bytes(12), "12 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
    }
}
