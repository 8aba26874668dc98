//! Which files the LLM reviewer sees: text sources only, within the size budget.

use crate::static_check::is_binary;
use crate::validator::SourceFile;

/// Extensions of files sent to the LLM (compared case-insensitively).
pub(crate) const REVIEWED_EXTENSIONS: &[&str] = &["py", "js", "ts", "json", "yaml", "yml", "txt", "sh", "sql", "go"];

/// A file chosen for review, as text.
pub(crate) struct ReviewFile<'a> {
    pub path: &'a str,
    pub text: &'a str,
}

/// The files chosen for review, in path order, and their total size.
pub(crate) struct ReviewSet<'a> {
    pub files: Vec<ReviewFile<'a>>,
    pub total_bytes: usize,
}

fn has_reviewed_extension(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => {
            REVIEWED_EXTENSIONS.iter().any(|known| known.eq_ignore_ascii_case(ext))
        }
        _ => false,
    }
}

fn under_node_modules(path: &str) -> bool {
    path.split(['/', '\\']).any(|part| part == "node_modules")
}

/// Text (UTF-8, no NUL) with a reviewed extension, outside `node_modules/`.
fn reviewable(file: &SourceFile) -> Option<ReviewFile<'_>> {
    if under_node_modules(&file.path) || !has_reviewed_extension(&file.path) {
        return None;
    }
    if is_binary(&file.contents) {
        return None;
    }
    let text = std::str::from_utf8(&file.contents).ok()?;
    Some(ReviewFile { path: &file.path, text })
}

impl<'a> ReviewSet<'a> {
    pub(crate) fn select(files: &'a [SourceFile]) -> Self {
        let mut chosen: Vec<ReviewFile<'a>> = files.iter().filter_map(reviewable).collect();
        chosen.sort_by(|a, b| a.path.cmp(b.path));
        let total_bytes = chosen.iter().map(|f| f.text.len()).sum();
        Self {
            files: chosen,
            total_bytes,
        }
    }
}
