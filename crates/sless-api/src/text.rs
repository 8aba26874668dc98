//! Free text a tenant or a handler controls, made safe to keep or log.

use std::borrow::Cow;

/// `text` cut to at most `max` bytes (at a character boundary), marked when cut.
pub fn clip(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    const MARK: &str = " [... cut]";
    let mut cut = max.saturating_sub(MARK.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str(MARK);
    text
}

/// The most bytes of a name a caller sent that an error about it echoes:
/// a name is at most 63 characters when valid, and a request's head may
/// carry 64 KiB of one.
pub const ECHOED_NAME_BYTES: usize = 128;

/// `name`, as a caller sent it, cut for an error to echo.
pub fn echoed(name: &str) -> String {
    let mut end = name.len().min(ECHOED_NAME_BYTES);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    if end < name.len() {
        format!("{}... ({} bytes)", &name[..end], name.len())
    } else {
        name.to_string()
    }
}

/// Displays the first `.1` bytes of `.0` (at a character boundary) and,
/// when it is longer, how long it is: a path in the access log, say.
pub struct Cut<'a>(pub &'a str, pub usize);

impl std::fmt::Display for Cut<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Cut(text, max) = *self;
        if text.len() <= max {
            return f.write_str(text);
        }
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        write!(f, "{}[... cut, {} bytes]", &text[..end], text.len())
    }
}

/// Text a tenant controls as one line of the server's log: `\r` and `\n`
/// escaped, so it can neither overwrite a line on a terminal nor forge one.
pub fn one_line(text: &str) -> Cow<'_, str> {
    if text.contains(['\r', '\n']) {
        Cow::Owned(text.replace('\r', "\\r").replace('\n', "\\n"))
    } else {
        Cow::Borrowed(text)
    }
}

/// The most bytes of text a tenant controls that one line of the server's
/// log carries.
pub const LOG_LINE_BYTES: usize = 16 * 1024;

/// `text` as one line of the server's log ([`one_line`]), cut to
/// [`LOG_LINE_BYTES`].
pub fn log_line(text: &str) -> String {
    let mut end = text.len().min(LOG_LINE_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let line = one_line(&text[..end]).into_owned();
    if end < text.len() {
        line + " [... cut]"
    } else {
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_and_echoed_text_is_bounded_at_a_character_boundary() {
        assert_eq!(Cut("/fn/a/b", 1024).to_string(), "/fn/a/b");
        assert_eq!(Cut("ééé", 3).to_string(), "é[... cut, 6 bytes]");
        assert_eq!(echoed("name"), "name");
        let long = "é".repeat(100);
        assert_eq!(echoed(&long), format!("{}... (200 bytes)", "é".repeat(64)));
    }

    #[test]
    fn a_log_line_is_one_line_and_cut() {
        assert_eq!(log_line("a\nb\r"), "a\\nb\\r");
        let long = "é".repeat(LOG_LINE_BYTES);
        let line = log_line(&long);
        assert!(
            line.ends_with(" [... cut]") && line.len() <= LOG_LINE_BYTES + 10,
            "{}",
            line.len()
        );
        assert_eq!(log_line("short"), "short");
    }
}
