//! Printing results: aligned tables and `key: value` details for people,
//! pretty JSON for scripts (`--output json`).

use std::io::Write;

use chrono::{DateTime, Utc};
use serde::Serialize;

/// `--output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}

/// Stdout went away: the reader of a pipe exited (`sless ... | head`). The
/// command ends quietly with exit code 0, as other Unix tools do.
#[derive(Debug)]
pub struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout was closed")
    }
}

impl std::error::Error for StdoutClosed {}

/// Writes `bytes` to stdout and flushes them (a pipe's reader wants them
/// now). A closed pipe is `StdoutClosed`; every write to stdout in the CLI
/// goes through here, so none of them can panic as `print!` would.
pub fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes).and_then(|()| out.flush()).map_err(|e| {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            anyhow::Error::new(StdoutClosed)
        } else {
            anyhow::Error::new(e).context("cannot write to stdout")
        }
    })
}

/// Prints one line on stdout.
pub fn say(line: impl std::fmt::Display) -> anyhow::Result<()> {
    write_stdout(format!("{line}\n").as_bytes())
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    let mut text = serde_json::to_vec_pretty(value)?;
    text.push(b'\n');
    write_stdout(&text)
}

/// `text` safe to show on a terminal: control characters (but newlines and
/// tabs) and the bidirectional overrides become visible escapes (`\x1b`,
/// `\u{202e}`), so text a handler or a caller wrote cannot move the cursor,
/// set the window title, write the clipboard or hide lines.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let hostile = |c: char| {
        (c.is_control() && c != '\n' && c != '\t') || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(hostile) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !hostile(c) {
            out.push(c);
        } else if (c as u32) < 0x80 {
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Columns left-aligned under upper-case headers, two spaces apart.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&'static str]) -> Table {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.headers.len());
        let cells = cells.into_iter().map(|c| printable(&c).replace('\n', " ")).collect();
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut text = String::new();
        let headers: Vec<String> = self.headers.iter().map(|h| h.to_string()).collect();
        for row in std::iter::once(&headers).chain(&self.rows) {
            let mut line = String::new();
            for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
                if i + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:<width$}  "));
                }
            }
            text.push_str(line.trim_end());
            text.push('\n');
        }
        text
    }

    pub fn print(&self) -> anyhow::Result<()> {
        write_stdout(self.render().as_bytes())
    }
}

/// `key: value` lines with the values aligned; multi-line values are
/// indented under their key.
#[derive(Default)]
pub struct Details {
    fields: Vec<(&'static str, String)>,
}

impl Details {
    pub fn field(&mut self, key: &'static str, value: impl ToString) -> &mut Details {
        self.fields.push((key, printable(&value.to_string()).into_owned()));
        self
    }

    pub fn render(&self) -> String {
        let width = self.fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
        let mut text = String::new();
        for (key, value) in &self.fields {
            let label = format!("{key}:");
            if value.contains('\n') {
                text.push_str(&label);
                text.push('\n');
                for line in value.lines() {
                    text.push_str("  ");
                    text.push_str(line);
                    text.push('\n');
                }
            } else {
                text.push_str(format!("{label:<width$} {value}").trim_end());
                text.push('\n');
            }
        }
        text
    }

    pub fn print(&self) -> anyhow::Result<()> {
        write_stdout(self.render().as_bytes())
    }
}

/// How long ago `time` was, in the largest whole unit: `42s`, `5m`, `3h`, `2d`.
pub fn age(time: DateTime<Utc>) -> String {
    let secs = (Utc::now() - time).num_seconds().max(0);
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m", secs / 60),
        3600..86400 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86400),
    }
}

/// A timestamp for tables: `2024-05-01 12:00:00Z`, or `-`.
pub fn time(time: Option<DateTime<Utc>>) -> String {
    time.map(|t| t.format("%Y-%m-%d %H:%M:%SZ").to_string())
        .unwrap_or_else(|| "-".into())
}

/// `value` or `-` when absent.
pub fn or_dash(value: Option<impl ToString>) -> String {
    value.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

/// The first line of `text`, cut to `max` characters.
pub fn first_line(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("");
    if line.chars().count() > max {
        let cut: String = line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        line.to_string()
    }
}

/// JSON for a table cell: compact.
pub fn compact(value: &serde_json::Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::{first_line, printable, Details, Table};

    #[test]
    fn terminal_escapes_are_shown_not_obeyed() {
        assert_eq!(printable("plain\ttext\n"), "plain\ttext\n");
        assert_eq!(
            printable("\x1b]52;c;aGk=\x07title\rhidden"),
            "\\x1b]52;c;aGk=\\x07title\\x0dhidden"
        );
        assert_eq!(printable("a\u{9b}2Jb\u{202e}c"), "a\\u{9b}2Jb\\u{202e}c");
        assert_eq!(printable("\x7f"), "\\x7f");
    }

    #[test]
    fn tables_align_columns() {
        let mut table = Table::new(&["NAME", "PHASE"]);
        table.row(vec!["hello-world".into(), "Ready".into()]);
        table.row(vec!["a".into(), "".into()]);
        assert_eq!(table.render(), "NAME         PHASE\nhello-world  Ready\na\n");
    }

    #[test]
    fn details_indent_multi_line_values() {
        let mut details = Details::default();
        details.field("name", "f").field("message", "one\ntwo");
        assert_eq!(details.render(), "name:    f\nmessage:\n  one\n  two\n");
    }

    #[test]
    fn first_lines_are_cut() {
        assert_eq!(first_line("abcdef\nx", 4), "abc…");
        assert_eq!(first_line("ab", 4), "ab");
    }
}
